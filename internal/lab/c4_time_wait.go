// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/traffic"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// c4TimeWait is case C4: a client opening a new connection per request
// and closing it first fills its port range with TIME_WAIT and then fails
// with EADDRNOTAVAIL; a pool of keep-alive connections fixes it.
func c4TimeWait() Scenario {
	return Scenario{
		Name:   "c4-time-wait",
		Case:   "C4",
		Title:  "short connections fill the port range with TIME_WAIT; fixed by pooled keep-alive connections",
		Expect: []string{"time-wait-churn", "port-exhaustion"},
		Run:    runC4TimeWait,
	}
}

// The client namespace gets 2000 ports: at 500 new connections/s TIME_WAIT
// (60 s) fills them in about 4 s.
const (
	twRange     = "40000 41999"
	twRangeSize = 2000
	twPool      = 32
	twRTT       = 30 * time.Millisecond
)

// churnPhase is one churn client run and what the client namespace held.
type churnPhase struct {
	label   string
	pool    int
	client  traffic.ChurnClientResult
	tw      int64 // TIME_WAIT sockets in the client netns when the client ended
	twCheck int64 // ... when the check ended
	pid     int
	named   []string
}

func runC4TimeWait(ctx context.Context, o Options) (*Result, error) {
	rate, dur := 500.0, 15*time.Second
	settle, interval := time.Second, 2*time.Second
	if o.Quick {
		dur = 8 * time.Second
	}
	res := &Result{}
	phases := []*churnPhase{{label: "before: new connection per request"}, {label: fmt.Sprintf("after: pool of %d keep-alive", twPool), pool: twPool}}
	expect := []string{"time-wait-churn", "port-exhaustion"}
	for i, ph := range phases {
		// A fresh topology per phase: TIME_WAIT of the before phase
		// would hold the ports for another 60 s.
		fs, err := measureChurn(ctx, o, ph, churnLoad{rate: rate, dur: dur, settle: settle, interval: interval})
		if err != nil {
			return res, err
		}
		for _, f := range FiredOn(fs, expect...) {
			if f.Subject.Pid == ph.pid && f.Subject.Command == "churn-client" {
				ph.named = append(ph.named, f.Rule)
			}
		}
		if i == 0 {
			res.Before = fs
		} else {
			res.After = fs
		}
	}
	res.Table = Table{Columns: []string{"phase", "rate asked", "successes", "EADDRNOTAVAIL", "other failures", "new conns/s", "TIME_WAIT at check", "TIME_WAIT at end", "p99 request"}}
	for _, ph := range phases {
		c := ph.client
		other := map[string]int{}
		for k, v := range c.Errors {
			if k != "EADDRNOTAVAIL" {
				other[k] = v
			}
		}
		newPerSec := 0.0
		if c.Seconds > 0 {
			newPerSec = float64(c.NewConns) / c.Seconds
		}
		res.Table.Rows = append(res.Table.Rows, []string{
			ph.label, fmt.Sprintf("%.0f/s", rate), strconv.Itoa(c.OK), strconv.Itoa(c.Errors["EADDRNOTAVAIL"]), fmtFailed(errCount(other), other),
			fmt.Sprintf("%.1f", newPerSec), strconv.FormatInt(ph.twCheck, 10), strconv.FormatInt(ph.tw, 10), fmtMs(c.Latency.P99Ms),
		})
	}
	b, a := phases[0], phases[1]
	// "canceled" is a request cut short by the end of the run.
	improved := a.client.Failed-a.client.Errors["canceled"] == 0 && b.client.Errors["EADDRNOTAVAIL"] > 0 && a.client.OK > b.client.OK && a.tw < b.tw
	Judge(res, expect, improved, fmt.Sprintf("successes %d -> %d, EADDRNOTAVAIL %d -> %d, TIME_WAIT %d -> %d",
		b.client.OK, a.client.OK, b.client.Errors["EADDRNOTAVAIL"], a.client.Errors["EADDRNOTAVAIL"], b.tw, a.tw))
	switch {
	case len(FiredOn(res.Before, expect...)) > 0 && len(b.named) == 0:
		res.Reproduced = false
		res.Verdict = append(res.Verdict, fmt.Sprintf("NOT reproduced: no finding named churn-client pid %d", b.pid))
	case len(b.named) > 0:
		res.Verdict = append(res.Verdict, fmt.Sprintf("%v named churn-client pid %d", uniq(b.named), b.pid))
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("the case ran 10K mails/s against the default 28232 ports; here the client namespace has %d ports (%s) and %.0f connections/s, which TIME_WAIT (60 s) fills in about %.0f s", twRangeSize, twRange, rate, twRangeSize/rate),
		fmt.Sprintf("the link has a %s RTT: each connection lives about 1.5 RTT, so a few are open at any moment and the check can name their process; with no delay they live under a millisecond and only ownerless TIME_WAIT sockets are seen; the pool is sized for rate x RTT (500/s x 30 ms = 15 in flight)", twRTT),
		"tcp_tw_reuse is 2 (loopback only) in the lab namespaces, as on the host: it does not help these connections",
		"each phase runs on a fresh topology so that the after phase does not inherit the before phase's TIME_WAIT sockets")
	if o.Quick {
		res.Notes = append(res.Notes, fmt.Sprintf("quick form: %s per phase", dur))
	}
	return res, nil
}

// churnLoad is one phase's load: short connections at rate per second for
// dur; the check starts settle into it and lasts interval.
type churnLoad struct {
	rate                  float64
	dur, settle, interval time.Duration
}

// measureChurn builds a topology with the narrowed range in the client
// namespace, runs the churn client against a churn server and checks the
// client namespace during the load.
func measureChurn(ctx context.Context, o Options, ph *churnPhase, ld churnLoad) ([]diag.Finding, error) {
	rate, dur, settle, interval := ld.rate, ld.dur, ld.settle, ld.interval
	// A 30 ms RTT keeps a few dozen connections open at any moment (as over a
	// real network), so the check can see who opens them: TIME_WAIT
	// sockets have no owner.
	tb, err := NewTestbed(ctx, o, Setup{Link: &linkemu.Params{RTT: twRTT}})
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	t := tb.Topo
	if err := nsSysctl(t.Client, "net/ipv4/ip_local_port_range", twRange); err != nil {
		return nil, err
	}
	addr := t.ServerAddrs[0].String() + ":7001"
	maxDur := (dur + 30*time.Second).String()
	if _, err := tb.Start(t.Server, true, "churn-server", "--addr", addr, "--max-duration", maxDur); err != nil {
		return nil, err
	}
	args := []string{"churn-client", "--addr", addr, "--rate", fmt.Sprint(rate), "--duration", dur.String(),
		"--timeout", "2s", "--max-duration", maxDur}
	if ph.pool > 0 {
		args = append(args, "--pool", strconv.Itoa(ph.pool))
	}
	cli, err := tb.Start(t.Client, false, args...)
	if err != nil {
		return nil, err
	}
	ph.pid = cli.Pid
	tb.Logf("%s: churn-client pid %d at %.0f/s to %s for %s", ph.label, cli.Pid, rate, addr, dur)
	if err := window.Sleep(ctx, settle); err != nil {
		return nil, err
	}
	rep, err := tb.Check(ctx, interval, t.Client)
	if err != nil {
		return nil, err
	}
	if c, err := nsCounters(t.Client); err == nil {
		ph.twCheck = c["TCP.tw"]
	}
	if err := cli.Wait(dur+20*time.Second, &ph.client); err != nil {
		return nil, err
	}
	c, err := nsCounters(t.Client)
	if err != nil {
		return nil, err
	}
	ph.tw = c["TCP.tw"]
	return rep.Findings, nil
}

func uniq(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
