// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestRetransmissions: a bulk flow through a 10 ms, 100 Mbit/s link that
// drops 3 % of packets each way at random; the rule names the peer and
// the process with the share of bytes retransmitted. The same flow
// without loss is quiet. The sender is paced at 50 Mbit/s so that the
// only loss is the link's: unpaced, BBR overflows the tbf queue and the
// "lossless" link really drops (trials: tbf dropped 209 packets; 2.2 %
// of bytes retransmitted, which the rule rightly reported).
func TestRetransmissions(t *testing.T) {
	for _, tc := range []struct {
		name string
		loss float64
	}{{"loss3pct", 0.03}, {"noloss", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			// A 4M bottleneck queue: when other work starves the delay
			// line, it releases a burst that a one-BDP tbf queue drops
			// (seen at load 11 on 2 cores).
			p := newPath(t, linkemu.Params{RTT: 10 * time.Millisecond, RateUp: 100e6, RateDown: 100e6, Loss: tc.loss, QueueBytes: 4 << 20})
			pace := func(fd int) error {
				return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, 50e6/8)
			}
			c, s, local, srv := pairAcross(t, p, pace, nil)
			loop(t, []int{c, s}, writer(c))
			loop(t, []int{c, s}, reader(s, 256<<10, 0))
			time.Sleep(500 * time.Millisecond)
			r, b, prev, cur := sample(t, p.client, 1500*time.Millisecond)
			mbps := acked(prev, cur, local) / 1e6
			t.Logf("sender moved %.1f Mbit/s; delay line dropped %d so far; bottleneck: %s", mbps, p.link.Stats().Lost,
				strings.Join(strings.Fields(testns.Run(t, "ip", "netns", "exec", p.router, "tc", "-s", "qdisc", "show", "dev", topo.RouterServerIf)), " "))
			if mbps < 5 {
				t.Fatalf("sender moved %.1f Mbit/s: too little traffic to judge", mbps)
			}
			fs := r.Find("retransmissions", diag.Info)
			for _, f := range fs {
				logFinding(t, f)
				for _, e := range f.Evidence {
					t.Logf("  %s = %s", e.Name, e.Value)
				}
			}
			if tc.loss == 0 {
				if len(fs) > 0 {
					t.Errorf("retransmissions on a lossless link:\n%s", b)
				}
				return
			}
			var peer *diag.Finding
			for i := range fs {
				if fs[i].Subject.Remote.String() == srv.Addr().String() {
					peer = &fs[i]
				}
			}
			if peer == nil {
				t.Fatalf("no retransmissions finding for peer %s:\n%s", srv.Addr(), b)
			}
			if peer.Severity < diag.Warning || peer.Subject.Pid != os.Getpid() {
				t.Errorf("finding %v %+v, want warning or above naming pid %d", peer.Severity, peer.Subject, os.Getpid())
			}
			// "X.Y% of bytes sent to ADDR were retransmitted": about the
			// link's loss, not far off it.
			pctS, _, _ := strings.Cut(peer.Summary, "%")
			got, err := strconv.ParseFloat(pctS, 64)
			if err != nil || got < 2 || got > 10 {
				t.Errorf("summary %q: want a rate near the link's 3 %% loss", peer.Summary)
			}
		})
	}
}
