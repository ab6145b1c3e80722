// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/outfile"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// Scenarios record a trace (tcpdoctor trace) of their flows while they
// run, to show each transfer's time split in their tables.
const (
	labTraceInterval = 10 * time.Millisecond
	// labTraceDiscover: a discovery dump walks the kernel's whole
	// established hash (`tcpdoctor-lab trace-bench` prints what one costs),
	// so five a second; a connection's
	// transfers before it is found are not traced.
	labTraceDiscover = 200 * time.Millisecond
)

// labTrace records one namespace's connections matching a filter.
type labTrace struct {
	cancel context.CancelFunc
	done   chan struct{}
	tr     *trace.Trace
	err    error
}

// startTrace begins recording in namespace nsName.
func startTrace(ctx context.Context, nsName string, f sockdiag.Filter) (*labTrace, error) {
	ns, err := netns.Default().Named(nsName)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	lt := &labTrace{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(lt.done)
		lt.tr, _, lt.err = trace.Live(ctx, trace.LiveOptions{NS: ns, Filter: f, Interval: labTraceInterval,
			Discover: labTraceDiscover, Duration: 10 * time.Minute, Now: time.Now, Sleep: trace.PreciseSleep})
	}()
	return lt, nil
}

// stop ends the recording and returns it.
func (lt *labTrace) stop() (*trace.Trace, error) {
	lt.cancel()
	<-lt.done
	if lt.err != nil {
		return nil, lt.err
	}
	return lt.tr, nil
}

// portOf is the port of a "host:port" address.
func portOf(addr string) (uint16, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return 0, fmt.Errorf("lab: address %q: %w", addr, err)
	}
	return ap.Port(), nil
}

// tracedOf are the transfers in direction dir of at least minBytes in tr
// (with whole, only those the recording did not clip), judged against
// bandwidth (bits/s), in start order.
func tracedOf(tr *trace.Trace, dir trace.Direction, minBytes uint64, bandwidth float64, whole bool) []trace.Transfer {
	if tr == nil {
		return nil
	}
	a := trace.Analyze(tr, trace.SegmentOptions{}, trace.JudgeOptions{Bandwidth: bandwidth})
	var out []trace.Transfer
	for _, t := range a.Transfers {
		// An uncertain one (a boundary inside a late sample's interval)
		// may have lent bytes to its neighbour: kept whatever its size,
		// so the responses stay in order.
		if t.Dir == dir && (t.Bytes >= minBytes || t.Uncertain) && (!whole || !t.Clipped) {
			out = append(out, t)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// ofLocal keeps the transfers of the connection whose local address is
// local ("ip:port"); all of them when local is empty or unreadable.
func ofLocal(ts []trace.Transfer, local string) []trace.Transfer {
	ap, err := netip.ParseAddrPort(local)
	if err != nil {
		return ts
	}
	var out []trace.Transfer
	for _, t := range ts {
		if t.Local == ap {
			out = append(out, t)
		}
	}
	return out
}

// durations are the transfers' durations.
func durations(ts []trace.Transfer) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Dur
	}
	return out
}

// msList prints durations in ms, space separated.
func msList(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond))
	}
	return strings.Join(parts, " ") + " ms"
}

// measured is one transfer as the traffic generator saw it: its bytes
// and time, and where the generator said (timed) its first and last
// moment on the trace's clock (from, to: since the trace started).
type measured struct {
	ms       float64
	bytes    int64
	from, to time.Duration
	timed    bool
}

// String is one measured transfer for the lab's log: "3.4M in 512 ms".
func (m measured) String() string {
	return fmt.Sprintf("%s in %.0f ms", units.Bytes(float64(m.bytes)), m.ms)
}

// onTrace is a generator's wall-clock span on the clock of the trace
// started at started.
func onTrace(ms float64, bytes int64, start, end, started time.Time) measured {
	return measured{ms: ms, bytes: bytes, from: start.Sub(started), to: end.Sub(started), timed: true}
}

// matchByTime gives each traced transfer to the measured one its span
// (from its request, RequestWait before its start, to its end) overlaps
// most; one overlapping none is left out. Untimed measured ones take the
// traced ones in order, one each.
func matchByTime(traced []trace.Transfer, want []measured) [][]trace.Transfer {
	groups := make([][]trace.Transfer, len(want))
	for i, t := range traced {
		best, most := -1, time.Duration(0)
		for k, m := range want {
			if !m.timed {
				if k == i {
					best = k
				}
				continue
			}
			if o := min(t.Start+t.Dur, m.to) - max(t.Start-t.RequestWait, m.from); o > most {
				best, most = k, o
			}
		}
		if best >= 0 {
			groups[best] = append(groups[best], t)
		}
	}
	return groups
}

// traceAccuracy compares each transfer the traffic generator measured
// with the traced ones matched to it by time (matchByTime): their bytes
// together, and their span, from the first one's request (RequestWait
// before its start: the generator's time holds the peer's wait) to the
// last one's end. It gives the worst differences, and whether every
// duration is within 5 % or one sample interval and every byte count
// within 5 %; receiving, also the worst difference of the edges
// themselves (the same clock, the same host). A transfer with no traced
// one (before the recorder found the connection), or one clipped, is not
// traced; one matched to an uncertain transfer (trace marks them: a
// boundary no sample placed) is not compared, and counted apart; with
// none compared the result is not within.
func traceAccuracy(traced []trace.Transfer, want []measured) (string, bool) {
	var n, unsure int
	worst, worstBytes, worstEdge, ok, recv := 0.0, 0.0, 0.0, true, false
	for i, g := range matchByTime(traced, want) {
		if len(g) == 0 || slices.ContainsFunc(g, func(t trace.Transfer) bool { return t.Clipped }) {
			continue
		}
		n++
		if slices.ContainsFunc(g, func(t trace.Transfer) bool { return t.Uncertain }) {
			unsure++
			continue
		}
		var bytes uint64
		from, to := g[0].Start-g[0].RequestWait, g[0].Start+g[0].Dur
		for _, t := range g {
			bytes += t.Bytes
			from, to = min(from, t.Start-t.RequestWait), max(to, t.Start+t.Dur)
		}
		m := want[i]
		diff := math.Abs(float64(to-from)/float64(time.Millisecond) - m.ms)
		if diff > 0.05*m.ms && diff > float64(labTraceInterval)/float64(time.Millisecond) {
			ok = false
		}
		worst = max(worst, diff)
		db := math.Abs(float64(bytes)-float64(m.bytes)) / float64(max(m.bytes, 1))
		if db > 0.05 {
			ok = false
		}
		worstBytes = max(worstBytes, db)
		if g[0].Dir == trace.Recv && m.timed {
			recv = true
			worstEdge = max(worstEdge, math.Abs(float64(from-m.from)), math.Abs(float64(to-m.to)))
		}
	}
	if n == 0 {
		return "-", false
	}
	ok = ok && unsure < n
	within := "within"
	if !ok {
		within = "NOT within"
	}
	apart, edges := "", ""
	if unsure > 0 {
		apart = fmt.Sprintf(" (%d uncertain, not compared)", unsure)
	}
	if recv {
		edges = fmt.Sprintf(", edges %.1f ms", worstEdge/float64(time.Millisecond))
	}
	return fmt.Sprintf("%d traced%s, worst %.1f ms%s, bytes %.2f%% (%s 5%% or %v)", n, apart, worst, edges, 100*worstBytes, within, labTraceInterval), ok
}

// writeLabHTML writes a trace's report to dir/name.html, and the
// recording to dir/name.jsonl (tcpdoctor trace --from), when dir is set.
func writeLabHTML(dir, name string, tr *trace.Trace, bandwidth float64) error {
	if dir == "" || tr == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lab: html: %w", err)
	}
	rec, err := outfile.CreateAtomic(filepath.Join(dir, name+".jsonl"))
	if err != nil {
		return fmt.Errorf("lab: trace file: %w", err)
	}
	if err := trace.WriteAll(rec, tr); err != nil {
		rec.Abort()
		return fmt.Errorf("lab: trace file: %w", err)
	}
	if err := rec.Commit(); err != nil {
		return fmt.Errorf("lab: trace file: %w", err)
	}
	a := trace.Analyze(tr, trace.SegmentOptions{}, trace.JudgeOptions{Bandwidth: bandwidth})
	f, err := outfile.CreateAtomic(filepath.Join(dir, name+".html"))
	if err != nil {
		return fmt.Errorf("lab: html: %w", err)
	}
	if err := trace.WriteHTML(f, tr, a.Transfers, name); err != nil {
		f.Abort()
		return fmt.Errorf("lab: html: %w", err)
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("lab: html: %w", err)
	}
	return nil
}
