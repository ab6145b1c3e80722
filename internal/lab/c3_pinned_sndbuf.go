// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/traffic"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// c3PinnedSndbuf is case C3: a bulk sender with SO_SNDBUF pinned at 16K
// through a 20 ms path, against 256K and autotuning.
func c3PinnedSndbuf() Scenario {
	return Scenario{
		Name:   "c3-pinned-sndbuf",
		Case:   "C3",
		Title:  "Pinned SO_SNDBUF throttles a bulk transfer over a 20 ms path",
		Expect: []string{"sndbuf-limited"},
		Run:    runC3,
	}
}

// c3Rate is one link rate of the matrix and how much it moves.
type c3Rate struct {
	rate float64 // bits/s
	size int64   // bytes of each table transfer
}

func runC3(ctx context.Context, o Options) (*Result, error) {
	const rtt = 20 * time.Millisecond
	rates := []c3Rate{{100e6, 24 << 20}, {1e9, 48 << 20}}
	bufs := []int{16 << 10, 256 << 10, 0}
	if o.Quick {
		rates = []c3Rate{{1e9, 24 << 20}}
		bufs = []int{16 << 10, 0}
	}
	res := &Result{Table: Table{Columns: []string{"link", "SO_SNDBUF", "sndbuf (kernel)", "bytes", "time", "rate", "share of link", "cwnd", "kernel sndbuf_limited", "trace: send buffer / congestion / application", "trace vs client time"}}}
	var before, after []diag.Finding
	var gig map[int]float64 // rate (Mbit/s) by SO_SNDBUF at 1 Gbit/s
	for _, lr := range rates {
		mbps, b, a, err := c3AtRate(ctx, o, res, lr, rtt, bufs)
		if err != nil {
			return res, err
		}
		if lr.rate == 1e9 {
			gig, before, after = mbps, b, a
		}
	}
	res.Before, res.After = before, after
	slow, fast := gig[16<<10], gig[0]
	Judge(res, []string{"sndbuf-limited"}, fast > 2*slow,
		fmt.Sprintf("at 1 Gbit/s, 20 ms: SO_SNDBUF 16K moved %.0f Mbit/s, autotuned %.0f Mbit/s (%.1fx)", slow, fast, fast/max(slow, 1e-9)))
	res.Notes = append(res.Notes,
		"the case as reported (C3) expects a ceiling of 16K per RTT (about 800 KB/s, 6.5 Mbit/s at 20 ms) and query times of 25 s / 4 s / 2.8 s; that ceiling does not hold on this kernel, which lets about 2 x sndbuf into flight (see the rate column), though the query times have the same order; earlier iperf-style runs measured 16K at 43-67 Mbit/s on 100 Mbit/s (93 autotuned) and 26-31 Mbit/s on 1 Gbit/s (655 autotuned, 249 with 256K); the rows above are this run's own figures",
		c3ChronoNote(res.Table.Rows),
		"the before/after findings come from `check` during the 1 Gbit/s runs: before with SO_SNDBUF 16K, after with an autotuned sender moving a larger transfer so that the check window falls inside it",
		"the client namespace's tcp_wmem maximum is 16 MiB (the default is 4 MiB): on a busy machine the delay line's queue stretches the 20 ms RTT to 28 ms and more, the 1 Gbit/s BDP passes 3.3 MB, and an autotuned sender stuck at a 4 MiB maximum moves under 80 % of the link, which sndbuf-limited rightly reports as the autotuning maximum; with room above the BDP the after check judges the pinned buffer alone",
		fmt.Sprintf("the 16K sender gets up to %d check windows and the first in which sndbuf-limited fires counts: each window judges two instants, and on a busy machine the writer may be off the CPU at one of them with the buffer not full; the autotuned sender gets one window, which must be quiet", c3Windows))
	if o.Quick {
		res.Notes = append(res.Notes, "quick form: 1 Gbit/s only, 16K vs autotuned, 24 MiB transfers (the 16K one lasts about 10 s: room for the before check's three windows)")
	}
	return res, nil
}

// c3AtRate runs one link rate: a table transfer per buffer, a check during
// the 16K transfer and during a long autotuned one (1 Gbit/s only).
func c3AtRate(ctx context.Context, o Options, res *Result, lr c3Rate, rtt time.Duration, bufs []int) (map[int]float64, []diag.Finding, []diag.Finding, error) {
	tb, err := NewTestbed(ctx, o, Setup{Link: &linkemu.Params{RTT: rtt, RateUp: lr.rate, RateDown: lr.rate}})
	if err != nil {
		return nil, nil, nil, err
	}
	defer tb.Close()
	// Room above the path's BDP for the autotuned sender, so that the
	// after check judges the pinned buffer alone (see the note in runC3).
	if err := nsSysctl(tb.Topo.Client, "net/ipv4/tcp_wmem", c3Wmem); err != nil {
		return nil, nil, nil, err
	}
	link := fmt.Sprintf("%s, %v RTT", units.Rate(lr.rate/8), rtt)
	tb.Logf("c3: link %s", link)
	srv, err := tb.Start(tb.Topo.Server, true, "bulk-server", "--addr", netip.AddrPortFrom(tb.Topo.ServerAddrs[0], 0).String(), "--max-duration", "10m")
	if err != nil {
		return nil, nil, nil, err
	}
	addr, err := tpReadyAddr(srv)
	if err != nil {
		return nil, nil, nil, err
	}
	check := lr.rate == 1e9
	mbps := map[int]float64{}
	var before, after []diag.Finding
	for _, b := range bufs {
		res1, rep, err := c3Transfer(ctx, tb, c3Send{addr: addr, sndbuf: b, size: lr.size, check: check && b == 16<<10, rate: lr.rate})
		if err != nil {
			return nil, nil, nil, err
		}
		if check && b == 16<<10 {
			before = rep
		}
		mbps[b] = res1.Mbps
		res.Table.Rows = append(res.Table.Rows, append(c3Row(link, b, res1.BulkClientResult, lr.rate), res1.traced...))
	}
	if check {
		// The autotuned table transfer is over in well under a second: the
		// "after" check watches a longer one (about 4 s at the link rate).
		long := int64(lr.rate / 8 * 4)
		res1, fs, err := c3Transfer(ctx, tb, c3Send{addr: addr, size: long, check: true, rate: lr.rate})
		after = fs
		if err != nil {
			return nil, nil, nil, err
		}
		row := append(c3Row(link, 0, res1.BulkClientResult, lr.rate), res1.traced...)
		row[1] += " (check run)"
		res.Table.Rows = append(res.Table.Rows, row)
	}
	return mbps, before, after, nil
}

// c3Wmem is the client namespace's net.ipv4.tcp_wmem: a 16 MiB maximum
// instead of the default 4 MiB.
const c3Wmem = "4096 16384 16777216"

// c3Windows is how many check windows the pinned sender gets.
const c3Windows = 3

// c3Send is one transfer: size bytes up to addr with SO_SNDBUF sndbuf (0:
// autotuned); check diagnoses the client namespace while it runs.
type c3Send struct {
	addr   string
	sndbuf int
	size   int64
	check  bool
	rate   float64 // the link's, bits/s: what the trace judges against
}

// c3Out is one transfer as the client measured it, and the trace's
// table cells for it.
type c3Out struct {
	traffic.BulkClientResult
	traced []string
}

// c3Transfer runs one transfer and returns its result and, with check,
// the findings.
func c3Transfer(ctx context.Context, tb *Testbed, s c3Send) (out c3Out, findings []diag.Finding, err error) {
	addr, sndbuf, size, check := s.addr, s.sndbuf, s.size, s.check
	port, err := portOf(addr)
	if err != nil {
		return out, findings, err
	}
	lt, err := startTrace(ctx, tb.Topo.Client, sockdiag.Filter{RPorts: []uint16{port}})
	if err != nil {
		return out, findings, err
	}
	defer lt.stop()
	// The client waits after connecting so that the recorder, dumping
	// every labTraceDiscover, finds the connection before it sends: the
	// trace then sees the whole transfer and is compared with the client.
	args := []string{"bulk-client", "--addr", addr, "--size", strconv.FormatInt(size, 10), "--direction", traffic.Up, "--max-duration", "3m",
		"--start-delay", (5 * labTraceDiscover).String()}
	if sndbuf > 0 {
		args = append(args, "--sndbuf", strconv.Itoa(sndbuf))
	}
	p, err := tb.Start(tb.Topo.Client, false, args...)
	if err != nil {
		return out, findings, err
	}
	if check {
		if err := window.Sleep(ctx, 700*time.Millisecond); err != nil {
			p.Stop()
			return out, findings, err
		}
		// One window is one pair of instants: on a busy machine the writer
		// or the delay line may be off the CPU at either, and the buffer
		// then looks less than full. The pinned sender gets up to
		// c3Windows windows while it runs; the first in which
		// sndbuf-limited fires counts. The autotuned one gets one.
		tries := 1
		if sndbuf > 0 {
			tries = c3Windows
		}
		for i := 1; i <= tries; i++ {
			rep, err := tb.Check(ctx, 2*time.Second, tb.Topo.Client)
			if err != nil {
				p.Stop()
				return out, findings, err
			}
			findings = rep.Findings
			if tries > 1 {
				tb.Logf("c3: SO_SNDBUF %d: check window %d of %d: sndbuf-limited fired: %v", sndbuf, i, tries, len(FiredOn(rep.Findings, "sndbuf-limited")) > 0)
			}
			if len(FiredOn(rep.Findings, "sndbuf-limited")) > 0 || p.Exited() {
				break
			}
		}
	}
	if err := p.Wait(3*time.Minute, &out.BulkClientResult); err != nil {
		return out, findings, err
	}
	// The recorder samples the closing socket a few more ticks (as c5's):
	// stopped as the client exits, its last sample still held the
	// transfer's tail, which made the transfer clipped and not compared.
	if err := window.Sleep(ctx, 3*labTraceInterval); err != nil {
		return out, findings, err
	}
	tr, err := lt.stop()
	if err != nil {
		return out, findings, err
	}
	out.traced = []string{"-", "-"}
	// Each transfer is a connection of its own; one found by the recorder
	// after it started anyway (a slow dump on a loaded machine) counts
	// only what its samples saw (clipped), which is not the client's
	// whole transfer, and is not compared with it. Only this client's connection counts: the
	// last transfer's may still be closing when the recording starts.
	if ts := ofLocal(tracedOf(tr, trace.Send, 1, s.rate, false), out.Local); len(ts) > 0 {
		// The connection carries one transfer of the client's; a loaded
		// machine can stall the sender past the gap and cut it in parts:
		// taken together, from the first's start to the last's end.
		// The time between parts moved nothing: the application's.
		t := ts[0]
		for _, x := range ts[1:] {
			end := t.Start + t.Dur
			t.Bytes += x.Bytes
			t.Dur = x.Start + x.Dur - t.Start
			t.Split.Sndbuf += x.Split.Sndbuf
			t.Split.Congestion += x.Split.Congestion
			t.Split.App += x.Split.App + max(x.Start-end, 0)
		}
		out.traced[0] = msList([]time.Duration{t.Split.Sndbuf, t.Split.Congestion, t.Split.App})
		if t.ClippedStart {
			out.traced[1] = fmt.Sprintf("found after it started: saw %s of %s (clipped), not compared", units.Bytes(float64(t.Bytes)), units.Bytes(float64(out.Bytes)))
		} else {
			out.traced[1], _ = traceAccuracy([]trace.Transfer{t}, []measured{{ms: out.Seconds * 1000, bytes: out.Bytes}})
		}
		if t.Verdict != nil && t.Verdict.ConnLine != "" {
			tb.Logf("c3: trace: %s", t.Verdict.ConnLine)
		}
	}
	name := fmt.Sprintf("c3-pinned-sndbuf-%s-%s-%s", strings.ReplaceAll(units.Rate(s.rate/8), " ", ""), c3BufLabel(sndbuf), units.Bytes(float64(size)))
	if err := writeLabHTML(tb.Opts.HTMLDir, strings.ReplaceAll(name, "/", ""), tr, s.rate); err != nil {
		return out, findings, err
	}
	if out.Error != "" {
		return out, findings, fmt.Errorf("lab: c3: transfer: %s", out.Error)
	}
	tb.Logf("c3: SO_SNDBUF %d: %d bytes in %.2fs, %.1f Mbit/s", sndbuf, out.Bytes, out.Seconds, out.Mbps)
	return out, findings, nil
}

// c3ChronoNote says what the kernel's sndbuf_limited chronograph showed for
// the pinned senders in this run, against an earlier run's.
func c3ChronoNote(rows [][]string) string {
	var seen []string
	for _, r := range rows {
		if r[1] == "16K" {
			seen = append(seen, r[0]+": "+r[8])
		}
	}
	return fmt.Sprintf("kernel sndbuf_limited chronograph over the pinned 16K sender's life: %s of busy time; an earlier 16K run saw 0 %%, so sndbuf-limited does not rely on it: it derives the limit from in-flight data against sndbuf, cwnd and the peer's window, and shows the chronograph as supporting evidence",
		strings.Join(seen, ", "))
}

func c3Row(link string, sndbuf int, t traffic.BulkClientResult, rate float64) []string {
	asked, kern, cwnd, lim := "autotuned", "-", "-", "-"
	if sndbuf > 0 {
		asked = units.Bytes(float64(sndbuf))
	}
	if ci := t.ConnInfo; ci != nil {
		kern = units.Bytes(float64(ci.SndBuf))
		cwnd = strconv.Itoa(int(ci.SndCwnd))
		if ci.BusyUs > 0 {
			lim = fmt.Sprintf("%.0f%%", 100*float64(ci.SndbufLimitedUs)/float64(ci.BusyUs))
		}
	}
	return []string{link, asked, kern, units.Bytes(float64(t.Bytes)), fmt.Sprintf("%.2fs", t.Seconds), fmt.Sprintf("%.1f Mbit/s", t.Mbps),
		fmt.Sprintf("%.0f%%", 100*t.Mbps*1e6/rate), cwnd, lim}
}

// tpReadyAddr is the address a server's ready line names.
func tpReadyAddr(p *Proc) (string, error) {
	var v struct {
		Addr string `json:"addr"`
	}
	if err := json.Unmarshal(p.Ready, &v); err != nil || v.Addr == "" {
		return "", fmt.Errorf("lab: %s ready line %q: no address", p.Name, p.Ready)
	}
	return v.Addr, nil
}

// c3BufLabel names a transfer by the sender's buffer.
func c3BufLabel(sndbuf int) string {
	if sndbuf == 0 {
		return "autotuned"
	}
	return "sndbuf-" + units.Bytes(float64(sndbuf))
}
