package snapshot

// storeBlock is how many tcp_info or meminfo values one block of a Store
// holds.
const storeBlock = 1024

// Store holds the tcp_info and meminfo of a snapshot's sockets in blocks
// of storeBlock values, so that a socket costs its own bytes rather than
// an allocation of its own per extra (or, from the sockdiag decoder, one
// holding a second copy of the socket that a pointer into it keeps
// alive). The zero Store is ready to use; it is not safe for concurrent
// use.
type Store struct {
	infos []TCPInfo
	mems  []MemInfo
}

// Keep returns a copy of sk whose extras are its own (Info and Mem in the
// store; Shutdown and BufLock are single bytes, which Go's allocator packs
// together): sk may be reused or dropped once Keep returns.
func (st *Store) Keep(sk *Socket) Socket {
	out := *sk
	if sk.Info != nil {
		if len(st.infos) == cap(st.infos) {
			st.infos = make([]TCPInfo, 0, storeBlock)
		}
		st.infos = append(st.infos, *sk.Info)
		out.Info = &st.infos[len(st.infos)-1]
	}
	if sk.Mem != nil {
		if len(st.mems) == cap(st.mems) {
			st.mems = make([]MemInfo, 0, storeBlock)
		}
		st.mems = append(st.mems, *sk.Mem)
		out.Mem = &st.mems[len(st.mems)-1]
	}
	if sk.Shutdown != nil {
		v := *sk.Shutdown
		out.Shutdown = &v
	}
	if sk.BufLock != nil {
		v := *sk.BufLock
		out.BufLock = &v
	}
	return out
}
