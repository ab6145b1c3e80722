// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
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

// tracedSends are the send transfers of at least minBytes in tr (with
// whole, only those the recording did not clip), judged against bandwidth
// (bits/s), in start order.
func tracedSends(tr *trace.Trace, minBytes uint64, bandwidth float64, whole bool) []trace.Transfer {
	if tr == nil {
		return nil
	}
	a := trace.Analyze(tr, trace.SegmentOptions{}, trace.JudgeOptions{Bandwidth: bandwidth})
	var out []trace.Transfer
	for _, t := range a.Transfers {
		// An uncertain one (a boundary inside a late sample's interval)
		// may have lent bytes to its neighbour: kept whatever its size,
		// so the responses stay in order.
		if t.Dir == trace.Send && (t.Bytes >= minBytes || t.Uncertain) && (!whole || !t.Clipped) {
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

// measured is one transfer as the traffic generator saw it.
type measured struct {
	ms    float64
	bytes int64
}

// String is one measured transfer for the lab's log: "3.4M in 512 ms".
func (m measured) String() string {
	return fmt.Sprintf("%s in %.0f ms", units.Bytes(float64(m.bytes)), m.ms)
}

// traceAccuracy compares traced durations (each with the server's wait
// after its request, RequestWait: the client's time holds it) and bytes
// with what the traffic generator measured (same order; a run of consecutive ones when the trace has
// fewer): the worst differences, and whether every duration is within 5 %
// or one sample interval and every byte count within 5 %. Uncertain
// transfers (trace marks them: a boundary no sample placed) take their
// place in the line-up but are not compared, and are counted apart; with
// none compared the result is not within.
func traceAccuracy(traced []trace.Transfer, want []measured) (string, bool) {
	measuredMs := make([]float64, len(want))
	for i, m := range want {
		measuredMs[i] = m.ms
	}
	if len(traced) == 0 || len(measuredMs) == 0 {
		return "-", false
	}
	if len(traced) > len(measuredMs) {
		traced = traced[len(traced)-len(measuredMs):]
	}
	// Responses the trace lacks (found late, clipped at the close) leave
	// gaps at either end: line the traced ones up where they differ least.
	best, bestSum := 0, math.Inf(1)
	for off := 0; off+len(traced) <= len(measuredMs); off++ {
		sum := 0.0
		for i, t := range traced {
			if t.Uncertain {
				continue
			}
			sum += math.Abs(float64(t.Dur+t.RequestWait)/float64(time.Millisecond) - measuredMs[off+i])
		}
		if sum < bestSum {
			best, bestSum = off, sum
		}
	}
	measuredMs = measuredMs[best : best+len(traced)]
	want = want[best : best+len(traced)]
	worst, worstBytes, ok, unsure := 0.0, 0.0, true, 0
	for i, t := range traced {
		if t.Uncertain {
			unsure++
			continue
		}
		got := float64(t.Dur+t.RequestWait) / float64(time.Millisecond)
		diff := math.Abs(got - measuredMs[i])
		if diff > 0.05*measuredMs[i] && diff > float64(labTraceInterval)/float64(time.Millisecond) {
			ok = false
		}
		worst = max(worst, diff)
		db := math.Abs(float64(t.Bytes)-float64(want[i].bytes)) / float64(max(want[i].bytes, 1))
		if db > 0.05 {
			ok = false
		}
		worstBytes = max(worstBytes, db)
	}
	ok = ok && unsure < len(traced)
	within := "within"
	if !ok {
		within = "NOT within"
	}
	apart := ""
	if unsure > 0 {
		apart = fmt.Sprintf(" (%d uncertain, not compared)", unsure)
	}
	return fmt.Sprintf("%d traced%s, worst %.1f ms, bytes %.2f%% (%s 5%% or %v)", len(traced), apart, worst, 100*worstBytes, within, labTraceInterval), ok
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
