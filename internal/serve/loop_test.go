// SPDX-License-Identifier: Apache-2.0

package serve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// pair is two collections of one namespace, 15 s apart: the second
// ends a window.
func pair() []*snapshot.Snapshot {
	t0 := time.Unix(1_700_000_000, 0)
	ns := snapshot.Netns{Name: "a", Inode: 4026531840}
	return []*snapshot.Snapshot{{Taken: t0, Netns: ns}, {Taken: t0.Add(15 * time.Second), Netns: ns}}
}

func newWindows() *report.Windows {
	return report.NewWindows(window.NewChain(rules.All()), rules.All(), diag.Options{})
}

// value is the one sample of the family name reg gathers.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no one sample of %s", name)
	return 0
}

// TestLoop drives the loop with an injected clock: collections start an
// interval apart, an overrun is followed at once, and it stops with ctx.
func TestLoop(t *testing.T) {
	snaps := pair()
	now := snaps[0].Taken
	clock := func() time.Time { return now }
	x := exporter.New(exporter.Options{Clock: clock})
	var waits []time.Duration
	samples := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &Loop{
		Windows:  newWindows(),
		Sinks:    []Sink{metricsSink{x}},
		Interval: 15 * time.Second,
		Now:      clock,
		Logf:     t.Logf,
		Collect: func() []*snapshot.Snapshot {
			samples++
			s := *snaps[samples%2]
			s.Taken = now
			took := 2 * time.Second
			if samples == 2 {
				took = 20 * time.Second // overrun
			}
			now = now.Add(took)
			return []*snapshot.Snapshot{&s}
		},
		Sleep: func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d)
			now = now.Add(d)
			if len(waits) == 3 {
				cancel()
				return ctx.Err()
			}
			return nil
		},
	}
	if err := l.Run(ctx); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{13 * time.Second, 0, 13 * time.Second}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(x)
	if n := value(t, reg, "tcpdoctor_collections_total"); n != 3 {
		t.Errorf("collections: %v, want 3", n)
	}
	if d := value(t, reg, "tcpdoctor_collection_duration_seconds"); d != 2 {
		t.Errorf("last collection's duration %v s, want 2", d)
	}
}

// step is a sink that logs what it was given, and fails when told.
type step struct {
	name string
	log  *[]string
	err  error
	// windows, when set, gets each collection's windows.
	windows *[][]*diag.Input
}

func (s step) Name() string { return s.name }

func (s step) Take(c *Collection) error {
	*s.log = append(*s.log, fmt.Sprintf("%s: %d snapshots, %d windows, report %t", s.name, len(c.Snaps), len(c.Windows), c.Report != nil))
	if s.windows != nil {
		*s.windows = append(*s.windows, c.Windows)
	}
	return s.err
}

// TestLoopOrder: each turn collects, then windows and diagnoses, then
// hands the same collection to every sink in their order; the first
// collection of a namespace has no window and no report, the second has.
func TestLoopOrder(t *testing.T) {
	snaps := pair()
	var log []string
	var windows [][]*diag.Input
	turn := 0
	l := &Loop{
		Collect: func() []*snapshot.Snapshot {
			log = append(log, "collect")
			turn++
			return snaps[turn-1 : turn]
		},
		Windows: newWindows(),
		Sinks:   []Sink{step{"metrics", &log, nil, &windows}, step{"history", &log, nil, nil}, step{"traces", &log, nil, nil}},
		Now:     time.Now,
		Logf:    func(f string, a ...any) { log = append(log, "said: "+fmt.Sprintf(f, a...)) },
	}
	l.Once()
	l.Once()
	want := []string{
		"collect",
		"metrics: 1 snapshots, 0 windows, report false",
		"history: 1 snapshots, 0 windows, report false",
		"traces: 1 snapshots, 0 windows, report false",
		"collect",
		"metrics: 1 snapshots, 1 windows, report true",
		"history: 1 snapshots, 1 windows, report true",
		"traces: 1 snapshots, 1 windows, report true",
	}
	if strings.Join(log, "\n") != strings.Join(want, "\n") {
		t.Errorf("turns:\n%s\nwant\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
	if len(windows) != 2 || len(windows[0]) != 0 || len(windows[1]) != 1 || windows[1][0].Cur != snaps[1] || windows[1][0].Prev.Taken != snaps[0].Taken {
		t.Errorf("windows: %v", windows)
	}
}

// TestLoopFailingSink: a sink's error is said, once until it changes,
// and the sinks after it still get every collection; when it works
// again, that is said too.
func TestLoopFailingSink(t *testing.T) {
	snaps := pair()
	var log, said []string
	broken := &step{"history", &log, errors.New("history: no space left on device"), nil}
	l := &Loop{
		Collect: func() []*snapshot.Snapshot { return snaps[:1] },
		Windows: newWindows(),
		Now:     time.Now,
		Logf:    func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) },
	}
	l.Sinks = []Sink{step{"metrics", &log, nil, nil}, broken, step{"traces", &log, nil, nil}}
	l.Once()
	l.Once()
	broken.err = nil
	l.Once()
	if len(log) != 9 {
		t.Errorf("sinks ran %d times in 3 turns, want 9:\n%s", len(log), strings.Join(log, "\n"))
	}
	for i := 2; i < len(log); i += 3 {
		if !strings.HasPrefix(log[i], "traces:") {
			t.Errorf("turn %d: the sink after the failing one did not run: %q", i/3, log[i])
		}
	}
	want := []string{
		"history: history: no space left on device (said once until it changes; serve goes on)",
		"history: works again",
	}
	if strings.Join(said, "\n") != strings.Join(want, "\n") {
		t.Errorf("said:\n%s\nwant\n%s", strings.Join(said, "\n"), strings.Join(want, "\n"))
	}
}
