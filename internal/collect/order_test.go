// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"slices"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/phases"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestOrder: both ways in run every source in the one order, each timed
// and recorded by the executor (its SourceStat, in the order JSON and
// --verbose show them) and its phase marked; a source that skipped the
// executor, or moved, fails here.
func TestOrder(t *testing.T) {
	ns := testns.New(t, "order")
	testns.Connections(t, ns, 2)
	opts := func(ph *phases.Recorder) Options {
		return Options{Owners: true, ProcRoot: "/proc", Locks: fakeLocks{l: &bpfsource.Locks{}}, Files: Loaded(brokenFiles{}), Phases: ph}
	}
	events := fakeEvents{r: &bpfsource.Reading{}}
	var s *snapshot.Snapshot
	marked := spanNames(func(ph *phases.Recorder) {
		s = (&Collector{Opts: opts(ph), Now: time.Now, Events: events}).Collect([]netns.NS{ns})[0]
	})
	want := []string{snapshot.SourceNetstat, snapshot.SourceSNMP, snapshot.SourceSockstat, snapshot.SourceSysctl,
		snapshot.SourceSockdiag, snapshot.SourceSockLocks, snapshot.SourceBPF, snapshot.SourceFileOwners, snapshot.SourceOwners, snapshot.SourceAppCaps}
	if got := sourceNames(s); !slices.Equal(got, want) {
		t.Errorf("Collector: sources %q, want %q", got, want)
	}
	for _, st := range s.Sources {
		if st.Duration <= 0 {
			t.Errorf("Collector: source %s not timed: %+v", st.Source, st)
		}
	}
	if _, failed := s.Failed(snapshot.SourceFileOwners); !failed {
		t.Errorf("Collector: the failed file walk not recorded under its name: %+v", s.Errors)
	}
	for _, p := range []string{"counters and sysctls", "lock bits (iter/tcp)", "dump", "lock bits: wait", "lock bits: join",
		"owners: eBPF iter/task_file load", "owners: kernel file walk", "owners: join", "owners: join and name", "application limits"} {
		if !slices.Contains(marked, p) {
			t.Errorf("Collector: phase %q not marked: %q", p, marked)
		}
	}

	// The listing walks the owners first (its rows carry them), reads
	// no counters, and joins the lock bits as each socket comes.
	var heads []*snapshot.Snapshot
	marked = spanNames(func(ph *phases.Recorder) {
		o := opts(ph)
		o.Files = nil
		var err error
		heads, err = (&Streamer{Opts: o, Now: time.Now, Events: events}).Stream([]netns.NS{ns}, func(*snapshot.Snapshot, *snapshot.Socket) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
	})
	want = []string{snapshot.SourceOwners, snapshot.SourceSockLocks, snapshot.SourceSockdiag, snapshot.SourceBPF}
	if got := sourceNames(heads[0]); !slices.Equal(got, want) {
		t.Errorf("Streamer: sources %q, want %q", got, want)
	}
	for _, p := range []string{"owners: /proc walk", "owners: name workloads", "dump"} {
		if !slices.Contains(marked, p) {
			t.Errorf("Streamer: phase %q not marked: %q", p, marked)
		}
	}
}

// spanNames runs fn with a phases recorder and returns the names of the
// spans it marked.
func spanNames(fn func(*phases.Recorder)) []string {
	ph := phases.New(phases.Now(), "")
	fn(ph)
	var names []string
	for _, sp := range ph.Spans() {
		names = append(names, sp.Name)
	}
	return names
}
