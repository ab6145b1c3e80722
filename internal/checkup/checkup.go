// Package checkup turns samples into a diagnosis report: the one path
// shared by `check`, the exporter and the lab.
package checkup

import (
	"context"
	"os"
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Series is the samples of one namespace, oldest first.
type Series struct {
	Netns string
	Snaps []*snapshot.Snapshot
	// Base, when set, is the first sample as the window's rules keep it
	// (diag.NewBase), and Snaps[0] is its Snap: Sample keeps no more.
	Base *diag.Base
	// spare is the first sample's socket slice, for the last to fill.
	spare []snapshot.Socket
}

// Window returns the first and last sample (prev nil for one sample).
func (s Series) Window() (prev, cur *snapshot.Snapshot) {
	cur = s.Snaps[len(s.Snaps)-1]
	if len(s.Snaps) > 1 {
		prev = s.Snaps[0]
	}
	return prev, cur
}

// Sample collects count samples of each namespace, starting interval
// apart (back to back when one takes longer: see Pause).
// sleep waits between samples and returns ctx's error when cancelled.
// The samples are for Diagnose: those before the last only start the
// window, so they skip what the rules read of the last sample alone, the
// buffer lock bits (the iter/tcp walk or the pidfd_getfd probe), which at
// a million sockets is a second of kernel time beside the first dump;
// and the last one keeps the first's tcp_info and meminfo of connections
// that did not change (since). The first sample of a window is kept as a
// diag.Base (a snapshot.Was for each established connection instead of
// a whole socket) before the next one is taken, and the last dump
// fills the first's socket slice.
func Sample(ctx context.Context, c *collect.Collector, nss []netns.NS, count int, interval time.Duration,
	sleep func(context.Context, time.Duration) error) ([]Series, error) {
	byNS := make(map[string]*Series)
	var order []string
	var last time.Time
	first := c
	if count > 1 {
		lc := *c
		lc.Opts.Locks, lc.Opts.BufLock = nil, false
		lc.Opts.LocksOff = "not read in the sample that starts the window: the rules read lock bits of the last sample only"
		first = &lc
	}
	for i := 0; i < count; i++ {
		if i > 0 {
			if err := sleep(ctx, Pause(interval, c.Now().Sub(last))); err != nil {
				return nil, err
			}
		}
		last = c.Now()
		sc := c
		if i < count-1 {
			sc = first
		} else if i > 0 {
			sc = since(c, byNS)
		}
		for _, s := range sc.Collect(nss) {
			sr := byNS[s.Netns.Name]
			if sr == nil {
				sr = &Series{Netns: s.Netns.Name}
				byNS[s.Netns.Name] = sr
				order = append(order, s.Netns.Name)
			}
			if i == 0 && count > 1 {
				sr.Base, sr.spare = diag.NewBase(s), s.Sockets
				s = sr.Base.Snap
			}
			sr.Snaps = append(sr.Snaps, s)
		}
	}
	out := make([]Series, 0, len(order))
	for _, n := range order {
		out = append(out, *byNS[n])
	}
	return out, nil
}

// since is c for the last sample of a window: its sockets that moved
// nothing since the first sample share that sample's tcp_info and meminfo
// (collect.Collector.Base), the window's only two samples Diagnose reads.
func since(c *collect.Collector, byNS map[string]*Series) *collect.Collector {
	lc := *c
	lc.Base = make(map[string]snapshot.Prior, len(byNS))
	for n, sr := range byNS {
		if sr.Base != nil {
			p := sr.Base.Prior()
			p.Spare, sr.spare = sr.spare, nil
			lc.Base[n] = p
		}
	}
	return &lc
}

// Diagnose runs the rules over each namespace's window and assembles the
// report. Each window's input (its previous sample matched to the last) is
// built just before its rules run and dropped after.
func Diagnose(ss []Series, rs []diag.Rule, opts diag.Options) *report.Report {
	var d diagnosis
	for _, sr := range ss {
		if len(sr.Snaps) == 0 {
			continue
		}
		prev, cur := sr.Window()
		var in *diag.Input
		if sr.Base != nil {
			in = diag.NewInputFrom(sr.Base, cur, opts)
		} else {
			in = diag.NewInput(prev, cur, opts)
		}
		d.add(Window{Netns: sr.Netns, In: in}, rs)
	}
	return d.report()
}

// Window is one namespace's rule input, for callers that build it
// themselves (the exporter reads it too, and indexes it only once).
type Window struct {
	Netns string
	In    *diag.Input
}

// DiagnoseWindows is Diagnose over inputs already built.
func DiagnoseWindows(ws []Window, rs []diag.Rule) *report.Report {
	var d diagnosis
	for _, w := range ws {
		d.add(w, rs)
	}
	return d.report()
}

// diagnosis is a report being assembled, one window at a time.
type diagnosis struct {
	res diag.Result
	rep report.Report
}

func (d *diagnosis) add(w Window, rs []diag.Rule) {
	prev, cur := w.In.Prev, w.In.Cur
	diag.Run(rs, w.In, &d.res)
	rep := &d.rep
	rep.Netns = append(rep.Netns, w.Netns)
	rep.Sockets += len(cur.Sockets)
	if rep.Host == "" {
		rep.Host, rep.Kernel = cur.Host, cur.Kernel
	}
	if cur.Taken.After(rep.Taken) {
		rep.Taken = cur.Taken
	}
	rep.Window.To = cur.Taken
	if prev != nil {
		rep.Window.From = prev.Taken
		rep.Window.Seconds = cur.Taken.Sub(prev.Taken).Seconds()
		// Said once: a failure the second sample repeats is not
		// reported for the first as well.
		for _, er := range prev.Errors {
			if !slices.Contains(cur.Errors, er) {
				rep.Sources = append(rep.Sources, report.SourceError{Netns: w.Netns, Source: er.Source, Error: "first sample: " + er.Err})
			}
		}
	}
	for _, er := range cur.Errors {
		rep.Sources = append(rep.Sources, report.SourceError{Netns: w.Netns, Source: er.Source, Error: er.Err})
	}
}

func (d *diagnosis) report() *report.Report {
	rep := &d.rep
	rep.Version = report.JSONVersion
	d.res.Sort()
	rep.Findings, rep.Unknown, rep.RulesRun = d.res.Findings, d.res.Unknown, d.res.Ran
	if rep.Host == "" {
		rep.Host, _ = os.Hostname()
	}
	return rep
}

// Pause is the wait before the next sample when the last one started
// took ago: samples start interval apart, so the time a collection takes
// (seconds, with a million sockets) is not added to every window; 0 when
// it took longer than interval.
func Pause(interval, took time.Duration) time.Duration {
	return max(interval-took, 0)
}

// Sleep waits d or until ctx ends, whichever is first, and returns ctx's
// error in the second case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
