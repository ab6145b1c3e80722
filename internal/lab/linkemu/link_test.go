// SPDX-License-Identifier: Apache-2.0

package linkemu

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
)

// testTopo builds a topology removed (and checked gone) at the end.
func testTopo(t *testing.T) *topo.Topo {
	t.Helper()
	tp, err := topo.Build(topo.Config{CC: "cubic"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tp.Close(); err != nil {
			t.Error(err)
		}
		if left, _ := topo.List(topo.Prefix + tp.Run + "-"); len(left) > 0 {
			t.Errorf("namespaces left: %v", left)
		}
	})
	return tp
}

func short(d time.Duration) BenchOptions {
	return BenchOptions{PingDuration: d, PingInterval: 5 * time.Millisecond, Duration: d}
}

// The ping-pong RTT is the configured one: never below it, and its median
// close above it (loose bounds: the machine is shared).
func TestLinkRTT(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name string
		exec []string
	}{{"child", selfExec()}, {"in-process", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			tp := testTopo(t)
			rtt := 20 * time.Millisecond
			res, err := benchPing(context.Background(), tp, short(time.Second), Params{RTT: rtt, Exec: tc.exec})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("sent %d replies %d min %v p50 %v p99 %v line %+v", res.Sent, res.Received, res.Min, res.P50, res.P99, res.Link)
			if res.Received < res.Sent*9/10 {
				t.Errorf("%d of %d replies", res.Received, res.Sent)
			}
			if res.Min < 0 || res.P50 > 2*time.Millisecond {
				t.Errorf("rtt error min %v p50 %v, want within 0-2ms of %v", res.Min, res.P50, rtt)
			}
			if res.Link.Packets < int64(2*res.Received) {
				t.Errorf("line released %d packets for %d replies", res.Link.Packets, res.Received)
			}
			if res.Link.CPU <= 0 {
				t.Errorf("line cpu %v", res.Link.CPU)
			}
		})
	}
}

// tbf holds one TCP flow to the configured rate (goodput is at most
// 1448/1514 of it), where the same path without tbf is much faster. The
// lower bound is loose: a busy machine slows the Go sender and receiver.
func TestLinkRate(t *testing.T) {
	needRoot(t)
	tp := testTopo(t)
	free, err := benchFlow(context.Background(), tp, short(time.Second), Params{RTT: 4 * time.Millisecond, Exec: selfExec()})
	if err != nil {
		t.Fatal(err)
	}
	p := Params{RTT: 4 * time.Millisecond, RateUp: 50e6, RateDown: 50e6, Exec: selfExec()}
	res, err := benchFlow(context.Background(), tp, short(2*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("no tbf %.1f Mbit/s; tbf 50 Mbit/s: %.1f Mbit/s over %v, line cpu %.1f %%", free.Mbps, res.Mbps, res.Elapsed, res.CPUPct)
	if free.Mbps < 100 {
		t.Errorf("without tbf only %.1f Mbit/s: the rate test proves nothing", free.Mbps)
	}
	if res.Mbps < 0.8*50*1448/1514 || res.Mbps > 50 {
		t.Errorf("goodput %.1f Mbit/s through a 50 Mbit/s tbf", res.Mbps)
	}
}

// Random loss drops about the asked share each way.
func TestLinkLoss(t *testing.T) {
	needRoot(t)
	tp := testTopo(t)
	res, err := benchPing(context.Background(), tp, short(time.Second), Params{RTT: 2 * time.Millisecond, Loss: 0.2, Seed: 1, Exec: selfExec()})
	if err != nil {
		t.Fatal(err)
	}
	got := float64(res.Received) / float64(res.Sent)
	t.Logf("%d of %d replies (%.2f, expect 0.64), lost %d", res.Received, res.Sent, got, res.Link.Lost)
	if got < 0.5 || got > 0.78 || res.Link.Lost == 0 {
		t.Errorf("reply share %.2f with 20%% loss each way, lost %d", got, res.Link.Lost)
	}
}

// Close removes what Start added and leaves a plain forwarding router.
func TestLinkCloseRestores(t *testing.T) {
	needRoot(t)
	tp := testTopo(t)
	ctx := context.Background()
	l, err := Start(tp, Params{RTT: 10 * time.Millisecond, RateUp: 10e6, Exec: selfExec()})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := tp.Cmd(ctx, "tc", tp.Router, "qdisc", "show", "dev", topo.RouterServerIf)
	if !strings.Contains(string(out), "tbf") {
		t.Errorf("no tbf while running: %s", out)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if st := l.Stats(); st.CPU <= 0 || !st.Realtime {
		t.Errorf("stats after close: %+v", st)
	}
	rules, _ := tp.Cmd(ctx, "ip", tp.Router, "rule", "show")
	links, _ := tp.Cmd(ctx, "ip", tp.Router, "link", "show")
	qd, _ := tp.Cmd(ctx, "tc", tp.Router, "qdisc", "show", "dev", topo.RouterServerIf)
	if strings.Contains(string(rules), "lookup "+table) || strings.Contains(string(links), TunName) || strings.Contains(string(qd), "tbf") {
		t.Errorf("left after Close:\n%s\n%s\n%s", rules, links, qd)
	}
	res, err := benchPing(ctx, tp, short(500*time.Millisecond), Params{Exec: selfExec()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Received == 0 || res.P50 > 2*time.Millisecond {
		t.Errorf("after close: %d replies, p50 %v", res.Received, res.P50)
	}
}
