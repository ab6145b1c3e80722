package diag

import (
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// Base is the sample that starts a window, kept as what the rules read
// of it: its established connections as snapshot.Was records by cookie
// (PrevOf), and three tallies of the whole sample the rules compare the
// last one with. Every other socket stays whole in Snap.Sockets. A
// million established connections cost a Was each, a quarter of a
// Socket (TestSampleSizes prints both).
type Base struct {
	// Snap is the sample without its established connections' sockets.
	Snap *snapshot.Snapshot
	// Was holds every socket of the sample, in dump order.
	Was []snapshot.Was
	// held is each destination's ephemeral ports held (DestUse.Held),
	// from the sample's own port space; nil when that was unknown.
	held map[tcpmodel.Dest]int
	// openers is the process holding most sockets of each flow.
	openers map[tcpmodel.Flow]int
	// accepted counts the owned connections each listener accepted, by
	// the listener's cookie.
	accepted map[uint64]int
}

// NewBase keeps of s what a window's rules read. s itself is not changed;
// the caller drops it.
func NewBase(s *snapshot.Snapshot) *Base {
	b := &Base{Was: snapshot.WasOf(s.Sockets)}
	snap := *s
	snap.Sockets = nil
	for i := range s.Sockets {
		if s.Sockets[i].State != snapshot.Established {
			snap.Sockets = append(snap.Sockets, s.Sockets[i])
		}
	}
	b.Snap = &snap
	if p, err := tcpmodel.NewPortSpace(s); err == nil {
		b.held = map[tcpmodel.Dest]int{}
		for k, u := range p.DestUsage(s, nil, 0) {
			b.held[k] = u.Held()
		}
	}
	ls := tcpmodel.ListenersOf(s)
	b.openers = tcpmodel.Openers(s, ls)
	b.accepted = tcpmodel.AcceptedOwned(s, ls)
	return b
}

// Prior is what a later sample of the same namespace follows to share
// this one's tcp_info and meminfo (collect.Collector.Base).
func (b *Base) Prior() snapshot.Prior {
	return snapshot.Prior{Netns: b.Snap.Netns, Was: b.Was}
}
