// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// Path-rate tolerances: check and trace measure the same senders over
// nearly the same 3 s, so their figures agree within pathAgree; both are
// within pathTruth of the rate the link is shaped to (the bulk flow shares
// it with a window-limited one moving about 1 Mbit/s).
const (
	pathAgree = 0.10
	pathTruth = 0.25
)

// TestPathRateAgrees (root, issue 38): over the lab's link shaped to
// 20 Mbit/s with 20 ms of RTT, an autotuned bulk sender and one whose
// receiver is pinned at SO_RCVBUF 4096. check (over a 3 s window) and
// trace (sampling every 10 ms over the same time) state the path's rate
// to the server from tcpmodel's one estimate, with the same source; the
// two agree within 10 % and are within 25 % of 20 Mbit/s. The window-
// limited sender's rwnd-limited finding states check's figure.
func TestPathRateAgrees(t *testing.T) {
	const shaped = 20e6
	p := newPath(t, linkemu.Params{RTT: 20 * time.Millisecond, RateUp: shaped, RateDown: shaped})
	bc, bs, blocal, bsrv := pairAcross(t, p, nil, nil)
	wc, ws, wlocal, wsrv := pairAcross(t, p, nil, setBuf(unix.SO_RCVBUF, 4096))
	loop(t, []int{bc, bs}, writer(bc))
	loop(t, []int{bc, bs}, reader(bs, 256<<10, 0))
	loop(t, []int{wc, ws}, writer(wc))
	loop(t, []int{wc, ws}, reader(ws, 64<<10, 0))
	time.Sleep(time.Second) // past slow start

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var tr *trace.Trace
	var traceErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		tr, _, traceErr = trace.Live(ctx, trace.LiveOptions{NS: p.client, Filter: sockdiag.Filter{Ports: []uint16{bsrv.Port(), wsrv.Port()}},
			Interval: 10 * time.Millisecond, Discover: 100 * time.Millisecond, Duration: 3 * time.Second, Now: time.Now, Sleep: window.Sleep,
			Sink: trace.NewWriter(&strings.Builder{})})
	}()
	r, b, prev, cur := sample(t, p.client, 3*time.Second)
	wg.Wait()
	if traceErr != nil {
		t.Fatal(traceErr)
	}
	t.Logf("bulk sender moved %.1f Mbit/s, window-limited one %.2f Mbit/s (bytes_acked over the window)",
		acked(prev, cur, blocal)/1e6, acked(prev, cur, wlocal)/1e6)

	// check's figure, as its rules compute it over the window.
	byCookie := map[uint64]*snapshot.Socket{}
	for i := range prev.Sockets {
		byCookie[prev.Sockets[i].Cookie] = &prev.Sockets[i]
	}
	checkEst, ok := tcpmodel.PathRatesOf(cur, cur.Taken.Sub(prev.Taken), func(sk *snapshot.Socket) *snapshot.Socket { return byCookie[sk.Cookie] })[p.srv]
	if !ok {
		logSender(t, blocal, prev, cur)
		t.Fatalf("check measured no path to %v over its window", p.srv)
	}
	tp := trace.Paths(tr, trace.JudgeOptions{})[p.srv]
	t.Logf("check: %s (%s)", units.Rate(checkEst.Rate), checkEst.Source())
	t.Logf("trace: %s (%s)", units.Rate(tp.Rate), tp.Source)
	if tp.Rate == 0 {
		t.Fatalf("trace measured no path to %v: %s", p.srv, tp.Source)
	}
	if d := math.Abs(tp.Rate-checkEst.Rate) / checkEst.Rate; d > pathAgree {
		t.Errorf("trace's path %s and check's %s differ by %.0f %%, more than %.0f %%", units.Rate(tp.Rate), units.Rate(checkEst.Rate), 100*d, 100*pathAgree)
	}
	for who, v := range map[string]float64{"check": checkEst.Rate, "trace": tp.Rate} {
		if d := math.Abs(v*8-shaped) / shaped; d > pathTruth {
			t.Errorf("%s's path %s is %.0f %% off the link's 20 Mbit/s (tolerance %.0f %%)", who, units.Rate(v), 100*d, 100*pathTruth)
		}
	}
	if !strings.HasPrefix(tp.Source, "tcp_info.bytes_acked per busy_time over ") || !strings.HasSuffix(tp.Source, "; --bandwidth overrides)") {
		t.Errorf("trace's source %q is not tcpmodel's", tp.Source)
	}

	// The window-limited sender's finding states check's path, named
	// the same way.
	var stated bool
	for _, f := range r.Findings {
		if f.Rule != "rwnd-limited" || f.Subject.Local.String() != wlocal.String() {
			continue
		}
		logFinding(t, f)
		for _, e := range f.Evidence {
			if e.Name == "path" {
				stated = strings.HasPrefix(e.Value, units.Rate(checkEst.Rate)+" x ") && e.Source == checkEst.Source()+", tcp_info.rtt"
			}
		}
	}
	if !stated {
		t.Errorf("check's rwnd-limited finding on %v does not state the path %s (%s):\n%s", wlocal, units.Rate(checkEst.Rate), checkEst.Source(), b)
	}
}
