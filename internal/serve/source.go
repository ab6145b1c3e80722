// SPDX-License-Identifier: Apache-2.0

package serve

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// source is the loop's collect step: the namespaces found anew each
// time (they come and go), collected, and kept by name for the triggered
// traces.
type source struct {
	find func() ([]netns.NS, error)
	// name is the namespace asked for, "host" for the host's: the one
	// said unreachable when none is found.
	name     string
	c        *collect.Collector
	now      func() time.Time
	logf     func(format string, a ...any)
	lastNote string
	byName   namespaceMap
}

func (s *source) collect() []*snapshot.Snapshot {
	nss, err := s.find()
	if note := fmt.Sprint(err); err != nil && note != s.lastNote {
		s.logf("note: %v (said once until it changes)", err)
	}
	s.lastNote = fmt.Sprint(err)
	if len(nss) == 0 && err != nil {
		// The namespace asked for is gone: say so in the metrics
		// (source_up 0) instead of letting its series vanish.
		return []*snapshot.Snapshot{collect.Unreachable(snapshot.Netns{Name: s.name}, s.now(), err)}
	}
	s.byName.set(nss)
	return s.c.Collect(nss)
}

// namespaceMap is the namespaces of serve's last collection by name, for
// the triggered traces' goroutine.
type namespaceMap struct {
	mu sync.Mutex
	m  map[string]netns.NS
}

func (n *namespaceMap) set(nss []netns.NS) {
	m := make(map[string]netns.NS, len(nss))
	for _, ns := range nss {
		m[ns.Name] = ns
	}
	n.mu.Lock()
	n.m = m
	n.mu.Unlock()
}

func (n *namespaceMap) get(name string) (netns.NS, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ns, ok := n.m[name]
	return ns, ok
}

// tracer records the triggered traces the history recorder asks for
// (docs/history.md): the finding's connections in its namespace, at
// trace's default rate, found by one dump, without eBPF events (serve's
// programs are its own).
type tracer struct {
	nss      *namespaceMap
	procRoot string
	rate     int // samples a second
	now      func() time.Time
	logf     func(format string, a ...any)
}

func (t *tracer) run(ctx context.Context, req history.TraceRequest) (*trace.Trace, error) {
	ns, ok := t.nss.get(req.Subject.Netns)
	if !ok {
		return nil, fmt.Errorf("netns %q is no longer collected", req.Subject.Netns)
	}
	tr, st, err := trace.Live(ctx, trace.LiveOptions{NS: ns, Filter: req.Filter, ProcRoot: t.procRoot,
		Interval: time.Second / time.Duration(t.rate), Duration: req.Duration, IdleEvery: 1,
		// The finding's connections exist already: one discovery dump, at
		// the start (a dump walks the host's whole TCP table).
		Discover: req.Duration, Now: t.now, Sleep: trace.PreciseSleep,
		NoEvents: "a trace serve --history started for " + req.Rule + ": eBPF events not recorded"})
	if err != nil {
		return nil, err
	}
	tr.Header.Filter += " (" + req.Rule + ")"
	t.logf("history: traced %s for %s: %d samples of %s, %s CPU on the sampling thread", tr.Header.Filter, req.Subject.Netns,
		st.Ticks, units.N(len(tr.Conns), "connection"), st.CPU.Round(time.Millisecond))
	return tr, nil
}
