// SPDX-License-Identifier: Apache-2.0

package history

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
)

// Defaults of triggered traces (docs/history.md, "Triggered traces"): 5
// seconds each, at most 6 an hour in all, not again for one subject
// within 30 minutes.
const (
	DefaultTraceDuration = 5 * time.Second
	DefaultTracesPerHour = 6
	DefaultTraceCooldown = 30 * time.Minute
)

// TraceRequest is one trace to record.
type TraceRequest struct {
	Rule    string
	Subject diag.Subject
	// Filter selects the subject's connections (SubjectFilter).
	Filter   sockdiag.Filter
	Duration time.Duration
}

// TraceOptions turn on triggered traces in a Recorder.
type TraceOptions struct {
	// Duration of each trace; PerHour bounds how many start in any hour
	// (by the windows' times); Cooldown is how long a subject (a rule and
	// what it is about) waits for its next one. Only one records at a
	// time.
	Duration time.Duration
	PerHour  int
	Cooldown time.Duration
	// Rules are the rules run; the findings of those that declare
	// themselves Traceable (diag.Rule), at warning or above, start a
	// trace of their subject's connections.
	Rules []diag.Rule
	// Run records req until its Duration or ctx ends, whichever comes
	// first (serve: trace.Live in the subject's namespace).
	Run func(ctx context.Context, req TraceRequest) (*trace.Trace, error)
}

// SubjectFilter selects a finding's connections from its typed subject:
// its local address and port, and its remote address (and port, where
// the subject names one: a server-side connection-bottleneck names the
// client's address only).
func SubjectFilter(s diag.Subject) (sockdiag.Filter, error) {
	var f sockdiag.Filter
	local, ok := s.Local.AddrPort()
	if !ok || local.Port() == 0 {
		return f, fmt.Errorf("history: trace: local %q is not an address and port", s.Local)
	}
	if !s.Remote.IsValid() {
		return f, fmt.Errorf("history: trace: the subject names no remote address")
	}
	f.Locals = []netip.Prefix{hostPrefix(local.Addr())}
	f.LPorts = []uint16{local.Port()}
	f.Peers = []netip.Prefix{hostPrefix(s.Remote.Addr())}
	if remote, ok := s.Remote.AddrPort(); ok && remote.Port() != 0 {
		f.RPorts = []uint16{remote.Port()}
	}
	return f, nil
}

func hostPrefix(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen())
}

// triggers decides when a trace starts; owned by the caller of Add.
type triggers struct {
	o         TraceOptions
	traceable map[string]bool // rule ids
	starts    []time.Time     // in the last hour, oldest first
	last      map[findingKey]time.Time
}

// room says whether a trace may start at now (a window's end): none
// records (busy false) and fewer than PerHour started in the hour
// before now.
func (g *triggers) room(now time.Time, busy bool) bool {
	if busy || g.o.PerHour <= 0 {
		return false
	}
	g.starts = slices.DeleteFunc(g.starts, func(t time.Time) bool { return now.Sub(t) >= time.Hour || t.After(now) })
	return len(g.starts) < g.o.PerHour
}

// cool says whether k's last trace started at least Cooldown before now.
func (g *triggers) cool(k findingKey, now time.Time) bool {
	t, ok := g.last[k]
	return !ok || now.Sub(t) >= g.o.Cooldown || t.After(now)
}

// started records that a trace of k started at now.
func (g *triggers) started(k findingKey, now time.Time) {
	g.starts = append(g.starts, now)
	g.last[k] = now
	for key, t := range g.last {
		if now.Sub(t) >= g.o.Cooldown {
			delete(g.last, key)
		}
	}
}

// pending is a trace picked for a window, started once its entry is
// queued.
type pending struct {
	key  findingKey
	at   time.Time
	name string
	req  TraceRequest
}

// traceJob is a recorded trace for the writer.
type traceJob struct {
	name string
	tr   *trace.Trace
	err  error
}

// pickTrace picks the first finding of e at warning or above of a
// Traceable rule that the bounds allow, and names its trace file in the
// finding. Called by Add, which starts it once the entry is queued.
func (r *Recorder) pickTrace(e *Entry) *pending {
	if r.trig == nil || !r.trig.room(e.To, r.tracing.Load()) {
		return nil
	}
	for i := range e.Findings {
		f := &e.Findings[i]
		if f.Severity < diag.Warning || !r.trig.traceable[f.Rule] {
			continue
		}
		k := keyOf(f.Rule, &f.Subject)
		if !r.trig.cool(k, e.To) {
			continue
		}
		flt, err := SubjectFilter(f.Subject)
		if err != nil {
			continue // not one connection's subject: nothing to trace
		}
		f.Trace = traceName(e.To)
		return &pending{key: k, at: e.To, name: f.Trace,
			req: TraceRequest{Rule: f.Rule, Subject: f.Subject, Filter: flt, Duration: r.trig.o.Duration}}
	}
	return nil
}

// startTrace records p in a goroutine of its own.
func (r *Recorder) startTrace(p *pending) {
	r.trig.started(p.key, p.at)
	r.tracing.Store(true)
	r.traceWG.Add(1)
	go r.record(p.name, p.req)
}

// record runs one trace and hands it to the writer.
func (r *Recorder) record(name string, req TraceRequest) {
	defer r.traceWG.Done()
	ctx, cancel := context.WithTimeout(r.traceCtx, req.Duration+10*time.Second)
	tr, err := r.trig.o.Run(ctx, req)
	cancel()
	if err == nil && tr == nil {
		err = fmt.Errorf("no recording")
	}
	r.jobs <- &job{trace: &traceJob{name: name, tr: tr, err: err}}
	r.tracing.Store(false)
}

// writeTrace writes a recorded trace as gzip JSON lines (what `trace -o`
// writes, compressed): to a temporary name, synced, then renamed.
func (r *Recorder) writeTrace(t *traceJob) error {
	if t.err != nil {
		return fmt.Errorf("history: trace %s: %w", t.name, t.err)
	}
	if err := os.MkdirAll(r.o.Dir, 0o700); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if _, err := r.writeGzip("trace", t.name, func(gz io.Writer) error { return trace.WriteAll(gz, t.tr) }); err != nil {
		return err
	}
	r.traces.Add(1)
	return nil
}
