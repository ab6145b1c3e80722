// SPDX-License-Identifier: Apache-2.0

package snapshot

// Was is what a window's rules read of a socket in the sample that starts
// the window (diag.Base): its state, queues, tcp_info and meminfo, found
// by cookie: a quarter of a whole Socket (TestSampleSizes prints both).
type Was struct {
	Cookie uint64
	// tcpT and tcpAt are the socket's TCPRef (read with TCP), apart so
	// that its offset fills the record's padding: 40 bytes, not 48.
	tcpT  *TCPInfo
	Mem   *MemInfo
	RecvQ uint32
	SendQ uint32
	tcpAt uint16
	State State
}

// tcp is the socket's tcp_info as it was kept.
func (w *Was) tcp() TCPRef { return TCPRef{t: w.tcpT, at: w.tcpAt} }

// Was returns what a window keeps of sk.
func (sk *Socket) Was() Was {
	return Was{Cookie: sk.Cookie, tcpT: sk.Info.t, tcpAt: sk.Info.at, Mem: sk.Mem, RecvQ: sk.RecvQ, SendQ: sk.SendQ, State: sk.State}
}

// WasOf returns what a window keeps of each of sockets, in their order.
func WasOf(sockets []Socket) []Was {
	out := make([]Was, len(sockets))
	for i := range sockets {
		out[i] = sockets[i].Was()
	}
	return out
}

// Prior is the sample that starts a window as a later sample of the same
// namespace follows it (collect.Collector.Base).
type Prior struct {
	Netns Netns
	Was   []Was
	// Spare, when not nil, is the earlier sample's socket slice, read by
	// no one any more: the later dump fills it instead of a new one, so
	// that two slices of a million sockets are never held at once.
	Spare []Socket
}

// As returns sk as it was: a copy with the state, queues, tcp_info and
// meminfo w kept of it. Its other fields are sk's, which they were if w
// is sk's connection in an earlier sample.
func (w *Was) As(sk *Socket) Socket {
	out := *sk
	out.State, out.RecvQ, out.SendQ, out.Info, out.Mem = w.State, w.RecvQ, w.SendQ, w.tcp(), w.Mem
	return out
}
