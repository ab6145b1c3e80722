// SPDX-License-Identifier: Apache-2.0

package serve

import (
	"context"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// Collection is one turn of the loop as its sinks see it: one snapshot
// per namespace, the windows they end and their diagnosis.
type Collection struct {
	Snaps []*snapshot.Snapshot
	// Windows are the namespaces' windows that end here (none for a
	// namespace's first collection); Report is their diagnosis, nil when
	// there is no window.
	Windows []*diag.Input
	Report  *report.Report
	// Took is what the collection cost; Diagnosed is when its diagnosis
	// began.
	Took      time.Duration
	Diagnosed time.Time
}

// A Sink takes each collection after its diagnosis: one job each (the
// metrics, the history store...). An error is said and the loop goes on
// with the next sink. A sink keeps nothing of Windows past Take.
type Sink interface {
	Name() string
	Take(c *Collection) error
}

// Loop collects every Interval, diagnoses each namespace's window and
// hands the result to each sink in turn.
type Loop struct {
	// Collect does the I/O: one snapshot per namespace.
	Collect func() []*snapshot.Snapshot
	// Windows runs the rules over each namespace's window, from its
	// previous collection to this one.
	Windows *report.Windows
	Sinks   []Sink
	// Interval is the time from one collection's start to the next's.
	Interval time.Duration
	Now      func() time.Time
	// Sleep returns early with ctx's error.
	Sleep func(ctx context.Context, d time.Duration) error
	// Logf says a sink's error (once until it changes).
	Logf func(format string, a ...any)

	said map[string]string // each sink's last error said
}

// Once runs one turn: collect, window, diagnose, then every sink in
// order; last, the collection becomes the next windows' start.
func (l *Loop) Once() {
	start := l.Now()
	snaps := l.Collect()
	c := &Collection{Snaps: snaps, Took: l.Now().Sub(start), Diagnosed: l.Now()}
	c.Windows, c.Report = l.Windows.Next(snaps)
	for _, s := range l.Sinks {
		l.say(s.Name(), s.Take(c))
	}
	// The windows' starts are dropped before the next ones are kept, so
	// that two of a million connections are not held at once.
	c.Windows = nil
	l.Windows.Keep(snaps)
}

// say reports a sink's error once until it changes, and that it works
// again.
func (l *Loop) say(sink string, err error) {
	if l.said == nil {
		l.said = map[string]string{}
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch last := l.said[sink]; {
	case msg == last || l.Logf == nil:
		return
	case msg != "":
		l.Logf("%s: %v (said once until it changes; serve goes on)", sink, err)
	default:
		l.Logf("%s: works again", sink)
	}
	l.said[sink] = msg
}

// Run collects until ctx ends. Collections start Interval apart; one that
// overruns is followed at once by the next. Only one collection runs at a
// time, whatever the number of scrapes.
func (l *Loop) Run(ctx context.Context) error {
	for {
		start := l.Now()
		l.Once()
		if err := l.Sleep(ctx, window.Pause(l.Interval, l.Now().Sub(start))); err != nil {
			return nil
		}
	}
}
