// SPDX-License-Identifier: Apache-2.0

package snapshot

// storeBlock is how many meminfo values one block of a Store holds.
const storeBlock = 1024

// memShared bounds how many distinct meminfo values a Store looks up
// before storing one: idle connections of one service mostly have the
// same buffers and nothing queued (a million loopback connections held
// one value), so they share it, while a host whose every connection
// differs stops filling the table at this many.
const memShared = 4096

// Store keeps the sockets of a snapshot: their tcp_info packed in
// chunks (packChunk), their meminfo in blocks of storeBlock values, so
// that a socket costs its own bytes rather than an allocation of its own
// per extra (or, from the sockdiag decoder, one holding a second copy of
// the socket that a pointer into it keeps alive). The zero Store is
// ready to use; it is not safe for concurrent use.
type Store struct {
	chunk *packChunk
	mems  []MemInfo
	// memOf finds a stored meminfo by value (at most memShared).
	memOf map[MemInfo]*MemInfo
}

// Keep returns a copy of sk whose extras are the store's: tcp_info
// packed (read it with Socket.TCP), Mem in its blocks and
// shared with every kept socket of the same meminfo. They must not be
// written through; sk may be reused or dropped once Keep returns.
func (st *Store) Keep(sk *Socket) Socket {
	return st.KeepSame(sk, nil)
}

// KeepSame is Keep for a socket whose earlier sample is base (nil when
// none): where sk's tcp_info equals base's but for the ages of the last
// data and ACK sent and received (SameInfo), and where its meminfo equals
// base's, the copy holds base's values instead of storing its own. A
// connection that moved nothing between two samples then costs its
// socket's bytes alone; its last_data_* and last_ack_* are base's, as
// old as the time between the samples less (Socket.SharesTCP).
func (st *Store) KeepSame(sk *Socket, base *Was) Socket {
	out := *sk
	kept := false
	if base != nil && base.Cookie == sk.Cookie && base.State == sk.State {
		var sb, b TCPInfo
		if si, bi := sk.TCP(&sb), base.TCP(&b); si != nil && bi != nil && SameInfo(si, bi) {
			out.Info = base.tcp()
			kept = true
		}
		if sk.Mem != nil && base.Mem != nil && *sk.Mem == *base.Mem {
			out.Mem = base.Mem
		}
	}
	if t := sk.Info.own(); !kept && t != nil {
		out.Info = st.pack(t)
	}
	if out.Mem == sk.Mem && sk.Mem != nil {
		out.Mem = st.memInfo(sk.Mem)
	}
	return out
}

// memInfo points at a stored copy of *m: one with the same values if
// the store has it (memOf), else a new one.
func (st *Store) memInfo(m *MemInfo) *MemInfo {
	if p, ok := st.memOf[*m]; ok {
		return p
	}
	if len(st.mems) == cap(st.mems) {
		st.mems = make([]MemInfo, 0, storeBlock)
	}
	st.mems = append(st.mems, *m)
	p := &st.mems[len(st.mems)-1]
	if st.memOf == nil {
		st.memOf = make(map[MemInfo]*MemInfo)
	}
	if len(st.memOf) < memShared {
		st.memOf[*m] = p
	}
	return p
}

// SameInfo says whether a and b are equal but for the ages of the last
// data and ACK sent and received, which grow on a connection that moves
// nothing.
func SameInfo(a, b *TCPInfo) bool {
	x, y := *a, *b
	x.LastDataSent, x.LastAckSent, x.LastDataRecv, x.LastAckRecv = 0, 0, 0, 0
	y.LastDataSent, y.LastAckSent, y.LastDataRecv, y.LastAckRecv = 0, 0, 0, 0
	return x == y
}
