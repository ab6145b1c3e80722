// SPDX-License-Identifier: Apache-2.0

// Package window samples each namespace's window (the sample that starts
// it and the one that ends it, an interval apart) and keeps of a sample
// what the next one needs: the first as a diag.Base (its established
// connections as snapshot.Was records, and what the rules list in their
// Keeps), whose records the last sample's dump follows to share the
// tcp_info and meminfo of connections that did not change
// (snapshot.Prior) and whose socket slice the last dump fills. Chain
// does the same from one collection to the next for serve. Running the
// rules over the windows is report.Diagnose's, which samples nothing.
package window

import (
	"context"
	"iter"
	"runtime"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
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

// Input is the series' window as its rules read it: from its Base when
// Sample kept one, else from its first sample whole (a file read back).
func (s Series) Input(opts diag.Options) *diag.Input {
	prev, cur := s.Window()
	if s.Base != nil {
		return diag.NewInputFrom(s.Base, cur, opts)
	}
	return diag.NewInput(prev, cur, opts)
}

// Inputs yields each series' window input (Series.Input), built when it
// is asked for, so that a caller that drops each before asking for the
// next (report.Diagnose) holds one window's index at a time. Series
// without samples are skipped. With two namespaces or more, each input
// finds connections' other ends in the others' last samples
// (diag.Input.HostPeer).
func Inputs(ss []Series, opts diag.Options) iter.Seq[*diag.Input] {
	return func(yield func(*diag.Input) bool) {
		var host *tcpmodel.HostPeers
		if len(ss) > 1 {
			var lasts []*snapshot.Snapshot
			for _, sr := range ss {
				if len(sr.Snaps) > 0 {
					lasts = append(lasts, sr.Snaps[len(sr.Snaps)-1])
				}
			}
			host = tcpmodel.NewHostPeers(lasts)
		}
		for _, sr := range ss {
			if len(sr.Snaps) == 0 {
				continue
			}
			in := sr.Input(opts)
			in.Host = host
			if !yield(in) {
				return
			}
		}
	}
}

// startsNote is why the samples before the last have no lock bits.
const startsNote = "not read in the sample that starts the window: the rules read lock bits of the last sample only"

// Sample collects count samples of each namespace, starting interval
// apart (back to back when one takes longer: see Pause), for the rules
// rs. sleep waits between samples and returns ctx's error when
// cancelled. The samples before the last only start the window, so they
// skip what the rules read of the last sample alone, the buffer lock bits
// (the iter/tcp walk or the pidfd_getfd probe), which at a million
// sockets is a second of kernel time beside the first dump. The first
// sample of a window is kept as a diag.Base holding what rs list in
// their Keeps (a snapshot.Was for each established connection instead
// of a whole socket) before the next one is taken; the last one keeps
// the first's tcp_info and meminfo of connections that did not change,
// and its dump fills the first's socket slice (collect.Collector.Base).
// c itself is not changed.
func Sample(ctx context.Context, c *collect.Collector, nss []netns.NS, count int, interval time.Duration,
	sleep func(context.Context, time.Duration) error, rs []diag.Rule) ([]Series, error) {
	byNS := make(map[string]*Series)
	var order []string
	var last time.Time
	keep := diag.KeepsOf(rs)
	for i := range count {
		if i > 0 {
			if err := sleep(ctx, Pause(interval, c.Now().Sub(last))); err != nil {
				return nil, err
			}
		}
		last = c.Now()
		snaps := collectorFor(c, i, count, byNS).Collect(nss)
		if i == 0 && count > 1 {
			// What the first sample made and dropped (the owner join's
			// index above all) is collected now, beside the bases and
			// the next dump, before the last dump's own transients pile
			// up on top of it: at a million sockets the collector's last
			// cycle ran mid-dump and the next would not before the end
			// (docs/performance-history.md, "`check` at a million sockets").
			go runtime.GC()
		}
		for _, s := range snaps {
			sr := byNS[s.Netns.Name]
			if sr == nil {
				sr = &Series{Netns: s.Netns.Name}
				byNS[s.Netns.Name] = sr
				order = append(order, s.Netns.Name)
			}
			if i == 0 && count > 1 {
				end := c.Opts.Phases.Begin("window base (the first sample kept)")
				sr.Base, sr.spare = diag.NewBase(s, keep), s.Sockets
				end()
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

// collectorFor is c for sample i of count: a sample before the last
// reads no lock bits, and the last of two or more follows each
// namespace's first sample (prior). c alone serves a single sample.
func collectorFor(c *collect.Collector, i, count int, byNS map[string]*Series) *collect.Collector {
	if count == 1 {
		return c
	}
	lc := *c
	if i < count-1 {
		lc.Opts.Locks, lc.Opts.BufLock = nil, false
		lc.Opts.LocksOff = startsNote
		lc.Opts.Was = i == 0 // made into the window's base
		return &lc
	}
	lc.Base = make(map[string]snapshot.Prior, len(byNS))
	for n, sr := range byNS {
		if sr.Base != nil {
			lc.Base[n] = prior(sr.Base, sr.spare)
			sr.spare = nil
		}
	}
	return &lc
}

// prior is what a later sample of b's namespace follows to share b's
// tcp_info and meminfo, and spare the socket slice it fills.
func prior(b *diag.Base, spare []snapshot.Socket) snapshot.Prior {
	return snapshot.Prior{Netns: b.Snap.Netns, Was: b.Was, Spare: spare}
}

// Pause is the wait before the next sample when the last one started
// took ago: samples start interval apart, so the time a collection takes
// (seconds, with a million sockets) is not added to every window; 0 when
// it took longer than interval.
func Pause(interval, took time.Duration) time.Duration {
	return max(interval-took, 0)
}

// Sleep waits d or until ctx ends, whichever is first, and returns ctx's
// error in the second case: the wait between samples.
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
