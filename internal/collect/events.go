package collect

import (
	"cmp"
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// EventReader is the eBPF lifecycle source (*bpfsource.Source): counts
// since its previous read, for every namespace at once.
type EventReader interface {
	Read() (*bpfsource.Reading, error)
}

// addEvents reads the event counters once and gives each snapshot its
// namespace's share. A namespace without events gets an empty section:
// the source ran and saw nothing, which differs from no source.
func (c *Collector) addEvents(snaps []*snapshot.Snapshot) {
	start := time.Now()
	r, err := c.Events.Read()
	d := time.Since(start)
	for _, s := range snaps {
		s.Sources = append(s.Sources, snapshot.SourceStat{Source: snapshot.SourceBPF, OK: err == nil, Duration: d})
		if err != nil {
			s.AddError(snapshot.SourceBPF, err)
			continue
		}
		s.Events = eventsOf(r, s.Netns.Inode)
	}
}

func eventsOf(r *bpfsource.Reading, inode uint64) *snapshot.Events {
	ev := &snapshot.Events{Since: r.Since, Until: r.Until, Lost: r.LostFlows}
	for _, f := range r.ByNetns[inode] {
		ev.Flows = append(ev.Flows, snapshot.EventFlow{
			Pid: f.Pid, Command: f.Comm, Remote: f.Peer, LocalPort: f.LocalPort,
			Opens: f.Opens, FailedPorts: f.FailedPorts, ActiveCloses: f.ActiveCloses, PeerCloses: f.PeerCloses,
			Ended: f.Lifetimes, Lifetime: f.LifetimeTotal,
		})
	}
	slices.SortFunc(ev.Flows, func(a, b snapshot.EventFlow) int {
		return cmp.Or(cmp.Compare(a.Pid, b.Pid), a.Remote.Compare(b.Remote), cmp.Compare(a.LocalPort, b.LocalPort))
	})
	return ev
}
