// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/traffic"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// healthyScenario runs a mixed healthy load over an emulated link: check
// must report nothing at warning or above. Any finding there is a false
// positive (or unhealthy traffic).
func healthyScenario() Scenario {
	return Scenario{
		Name:   "healthy",
		Case:   "-",
		Title:  "mixed healthy load (autotuned bulk, pooled keep-alive, idle listener, rpc over 8 connections): no findings",
		Expect: nil,
		Run:    runHealthy,
	}
}

// healthyQueue is the bottleneck queue: two bandwidth-delay products
// (100 Mbit/s x 20 ms = 250 KB each).
const healthyQueue = 2 * 250_000

func runHealthy(ctx context.Context, o Options) (*Result, error) {
	// The load lasts settle + two check windows + slack; the bulk transfer
	// is sized to run about as long at the link's rate.
	const rate = 100e6
	rtt := 20 * time.Millisecond
	// The windows start once the bulk flow is past slow start.
	settle, interval := 4*time.Second, 4*time.Second
	if o.Quick {
		settle, interval = 3*time.Second, 2*time.Second
	}
	dur := settle + 2*interval + 3*time.Second // two checks take about 2 x interval
	bulkBytes := int64(rate / 8 * dur.Seconds() * 0.8)
	res := &Result{}
	tb, err := NewTestbed(ctx, o, Setup{Link: &linkemu.Params{RTT: rtt, RateUp: rate, RateDown: rate, QueueBytes: healthyQueue}})
	if err != nil {
		return res, err
	}
	defer tb.Close()
	t := tb.Topo
	srv := t.ServerAddrs[0].String()
	maxDur := (dur + 30*time.Second).String()
	type server struct{ name, port string }
	for _, s := range []server{{"bulk-server", "5001"}, {"churn-server", "7001"}, {"churn-server", "7002"}} {
		if _, err := tb.Start(t.Server, true, s.name, "--addr", srv+":"+s.port, "--max-duration", maxDur); err != nil {
			return res, err
		}
	}
	if _, err := tb.Start(t.Server, true, "rpc-server", "--addr", srv+":6001", "--think-min", "0", "--think-max", "20ms", "--max-duration", maxDur); err != nil {
		return res, err
	}
	tb.Logf("healthy: %.0f Mbit/s, %s RTT; bulk %d MB up, pooled churn, rpc 16 callers over 8 connections, idle listener :7002, for %s",
		rate/1e6, rtt, bulkBytes>>20, dur)
	bulk, err := tb.Start(t.Client, false, "bulk-client", "--addr", srv+":5001", "--size", fmt.Sprint(bulkBytes), "--max-duration", maxDur)
	if err != nil {
		return res, err
	}
	churn, err := tb.Start(t.Client, false, "churn-client", "--addr", srv+":7001", "--pool", "8", "--rate", "50",
		"--duration", dur.String(), "--max-duration", maxDur)
	if err != nil {
		return res, err
	}
	rpc, err := tb.Start(t.Client, false, "rpc-client", "--addr", srv+":6001", "--conns", "8", "--callers", "16",
		"--req-size", "1K", "--duration", dur.String(), "--max-duration", maxDur)
	if err != nil {
		return res, err
	}
	if err := window.Sleep(ctx, settle); err != nil {
		return res, err
	}
	var windows [2][]diag.Finding
	c0, err := nsCounters(t.Client)
	if err != nil {
		return res, err
	}
	for i := range windows {
		rep, err := tb.Check(ctx, interval, t.Client, t.Server)
		if err != nil {
			return res, err
		}
		windows[i] = rep.Findings
	}
	c1, err := nsCounters(t.Client)
	if err != nil {
		return res, err
	}
	out, re := c1["Tcp.OutSegs"]-c0["Tcp.OutSegs"], c1["Tcp.RetransSegs"]-c0["Tcp.RetransSegs"]
	res.Before, res.After = windows[0], windows[1]
	var (
		b traffic.BulkClientResult
		c traffic.ChurnClientResult
		p traffic.RPCClientResult
	)
	if err := bulk.Wait(dur+20*time.Second, &b); err != nil {
		return res, err
	}
	if err := churn.Wait(dur+20*time.Second, &c); err != nil {
		return res, err
	}
	if err := rpc.Wait(dur+20*time.Second, &p); err != nil {
		return res, err
	}
	res.Table = Table{Columns: []string{"traffic", "result", "errors"}}
	res.Table.Rows = [][]string{
		{"bulk up (autotuned)", fmt.Sprintf("%.0f MB in %.1f s: %.1f Mbit/s", float64(b.Bytes)/1e6, b.Seconds, b.Mbps), orNone(b.Error)},
		{"churn 50/s, pool of 8", fmt.Sprintf("%d requests, %d new connections, p50 %s p99 %s", c.OK, c.NewConns, fmtMs(c.Latency.P50Ms), fmtMs(c.Latency.P99Ms)), fmtFailed(c.Failed, c.Errors)},
		{"rpc, 16 callers / 8 conns", fmt.Sprintf("%d requests, %.0f/s, p50 %s p99 %s", p.Requests, p.RequestsPerSec, fmtMs(p.Latency.P50Ms), fmtMs(p.Latency.P99Ms)), fmtFailed(errCount(p.Errors), p.Errors)},
		{"idle listener :7002", "no clients", "-"},
		{"client netns during the checks", fmt.Sprintf("%d of %d segments retransmitted (%.2f%%)", re, out, 100*float64(re)/float64(max(out, 1))), "-"},
	}
	// "canceled" is a request cut short by the end of the run, not a failure.
	judgeHealthy(res, b.Error == "" && c.Failed-c.Errors["canceled"] == 0 && errCount(p.Errors)-p.Errors["canceled"] == 0)
	res.Notes = append(res.Notes,
		"healthy has no fix: 'before' and 'after' are two consecutive check windows during the same load",
		fmt.Sprintf("link: %.0f Mbit/s each way, %s RTT, bottleneck queue two BDP (%d KB); every buffer autotuned; congestion control bbr (the kernel default)", rate/1e6, rtt, healthyQueue/1000),
		"with a one-BDP queue the bulk flow's probing overflowed the tbf queue now and then: 1.2-1.8% of the client's segments retransmitted in a 2 s window, which the retransmissions rule rightly reports (>= 1%); a two-BDP queue absorbs it, so this healthy path has one",
		"the check windows start once the bulk flow is past slow start; its start-up losses are real congestion losses, not a healthy steady state")
	if o.Quick {
		res.Notes = append(res.Notes, fmt.Sprintf("quick form: check windows of %s", interval))
	}
	return res, nil
}

// judgeHealthy sets the verdict of the healthy scenario: reproduced means
// no finding at warning or above in either window and every traffic generator ran
// without errors.
func judgeHealthy(res *Result, clean bool) {
	var loud []string
	for _, fs := range [][]diag.Finding{res.Before, res.After} {
		for _, f := range fs {
			if f.Severity >= diag.Warning {
				loud = append(loud, fmt.Sprintf("%s %s: %s", f.Severity.Label(), f.Rule, f.Summary))
			}
		}
	}
	res.Reproduced = len(loud) == 0 && clean
	if len(loud) == 0 {
		res.Verdict = append(res.Verdict, "no finding at warning or above in either window")
	} else {
		res.Verdict = append(res.Verdict, fmt.Sprintf("NOT healthy: %d findings at warning or above (false positives?): %s", len(loud), strings.Join(loud, "; ")))
	}
	if !clean {
		res.Verdict = append(res.Verdict, "NOT clean: a traffic generator reported errors (see the table)")
	}
}

func orNone(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

func errCount(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
