// SPDX-License-Identifier: Apache-2.0

package netns

import (
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Names names namespaces by inode for a stream of events, looking again
// (at most once a second) when asked for one created since. A namespace
// of a process this one may not inspect has no name.
type Names struct {
	Find Finder
	// Now is the clock that spaces the looks.
	Now   func() time.Time
	byIno map[uint64]string
	// held is the pod, container or unit holding each namespace that
	// Find.Workloads named.
	held   map[uint64]*snapshot.Workload
	looked time.Time
}

// Refresh looks for every namespace now. With an error the names found
// are kept (a partial list).
func (n *Names) Refresh() error {
	n.looked = n.Now()
	all, err := n.Find.All()
	m := make(map[uint64]string, len(all))
	held := make(map[uint64]*snapshot.Workload)
	for _, ns := range all {
		m[ns.Inode] = ns.Name
		if ns.Workload != nil {
			held[ns.Inode] = ns.Workload
		}
	}
	n.byIno, n.held = m, held
	return err
}

// Of returns the name of the namespace with inode ino, looking again when
// it is unknown and the last look is a second old.
func (n *Names) Of(ino uint64) (string, bool) {
	name, ok := n.byIno[ino]
	if !ok && ino != 0 && n.Now().Sub(n.looked) >= time.Second {
		_ = n.Refresh() // a partial list still names what it can
		name, ok = n.byIno[ino]
	}
	return name, ok
}

// Inode returns the inode of the namespace named name, as last looked.
func (n *Names) Inode(name string) (uint64, bool) {
	for ino, nm := range n.byIno {
		if nm == name {
			return ino, true
		}
	}
	return 0, false
}

// WorkloadOf returns the pod, container or unit holding the namespace
// with inode ino, as last looked (Of looks again); nil when none is
// known.
func (n *Names) WorkloadOf(ino uint64) *snapshot.Workload { return n.held[ino] }

// Workloads lists what holds the namespaces, as last looked.
func (n *Names) Workloads() []snapshot.Workload {
	out := make([]snapshot.Workload, 0, len(n.held))
	for _, w := range n.held {
		out = append(out, *w)
	}
	return out
}
