// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestSndbufLimited: a bulk sender with SO_SNDBUF pinned at 16K (sndbuf
// 32K) through a 20 ms, 1 Gbit/s link to an autotuned receiver that reads
// as fast as data comes. The rule derives the limit from what is in
// flight (the kernel's chronograph reads it only for paced senders, see
// TestSndbufChronograph) and proves the pin with SO_BUF_LOCK. The same
// path with an autotuned sender is quiet.
func TestSndbufLimited(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sndbuf int
	}{{"pinned16K", 16 << 10}, {"autotuned", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPath(t, linkemu.Params{RTT: 20 * time.Millisecond, RateUp: 1e9, RateDown: 1e9})
			c, s, local, srv := pairAcross(t, p, setBuf(unix.SO_SNDBUF, tc.sndbuf), nil)
			loop(t, []int{c, s}, writer(c))
			loop(t, []int{c, s}, reader(s, 256<<10, 0))
			time.Sleep(time.Second) // past slow start
			r, b, prev, cur := sample(t, p.client, 1500*time.Millisecond)
			mbps := acked(prev, cur, local) / 1e6
			t.Logf("sender moved %.1f Mbit/s", mbps)
			if tc.sndbuf == 0 {
				// Quiet only counts if the sender was busy and fast.
				if mbps < 200 {
					t.Fatalf("autotuned sender moved %.1f Mbit/s, want >= 200 for a fair baseline", mbps)
				}
				for _, f := range r.Find("sndbuf-limited", diag.Info) {
					logFinding(t, f)
					if f.Severity >= diag.Warning {
						t.Errorf("autotuned sender reported:\n%s", b)
					}
				}
				return
			}
			if mbps > 100 {
				t.Errorf("pinned sender moved %.1f Mbit/s: not buffer-limited on a 1 Gbit/s link", mbps)
			}
			// CI has seen a window with no finding at all (not once in
			// dozens of runs here, loaded or not): up to three windows,
			// each miss logging what the rule read of the sender.
			for try := 1; len(r.Find("sndbuf-limited", diag.Warning)) != 1; try++ {
				logSender(t, local, prev, cur)
				if try == 3 {
					break
				}
				r, b, prev, cur = sample(t, p.client, 1500*time.Millisecond)
			}
			f := one(t, r, b, "sndbuf-limited")
			for _, e := range f.Evidence {
				t.Logf("  %s = %s  [%s]", e.Name, e.Value, e.Source)
			}
			if f.Subject.Local.String() != local.String() || f.Subject.Remote.String() != srv.String() || f.Subject.Pid != os.Getpid() {
				t.Errorf("subject %+v, want the sender %s -> %s, pid %d", f.Subject, local, srv, os.Getpid())
			}
			if !strings.Contains(f.Summary, "pinned at 32K (SO_SNDBUF 16K)") {
				t.Errorf("summary %q does not name the pinned buffer", f.Summary)
			}
			var proof bool
			for _, e := range f.Evidence {
				proof = proof || e.Name == "pinned" && strings.Contains(e.Source, "SO_BUF_LOCK")
			}
			if !proof {
				t.Errorf("no SO_BUF_LOCK proof of the pin in the evidence")
			}
		})
	}
}

// TestSndbufChronograph measures what docs/rules/sndbuf-limited.md says
// of the kernel's sndbuf_limited chronograph: for the same pinned 16K
// sender through the same 20 ms, 1 Gbit/s link it reads near 0 when the
// sender is not paced (cubic) and high when it is (bbr paces internally).
// go test -v -run TestSndbufChronograph ./internal/testkit/livetest prints both.
func TestSndbufChronograph(t *testing.T) {
	testns.NeedRoot(t)
	share := map[string]float64{}
	for _, cc := range []string{"cubic", "bbr"} {
		t.Run(cc, func(t *testing.T) {
			p := newPath(t, linkemu.Params{RTT: 20 * time.Millisecond, RateUp: 1e9, RateDown: 1e9})
			setup := func(fd int) error {
				if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc); err != nil {
					return err
				}
				return setBuf(unix.SO_SNDBUF, 16<<10)(fd)
			}
			c, s, local, _ := pairAcross(t, p, setup, nil)
			loop(t, []int{c, s}, writer(c))
			loop(t, []int{c, s}, reader(s, 256<<10, 0))
			time.Sleep(time.Second)
			_, _, prev, cur := sample(t, p.client, 2*time.Second)
			var ps, cs *snapshot.Socket
			for i := range prev.Sockets {
				if prev.Sockets[i].Local.AddrPort() == local {
					ps = &prev.Sockets[i]
				}
			}
			for i := range cur.Sockets {
				if cur.Sockets[i].Local.AddrPort() == local {
					cs = &cur.Sockets[i]
				}
			}
			if ps == nil || cs == nil || cs.CC.String() != cc {
				t.Fatalf("sender %s not found in both samples with cc %s", local, cc)
			}
			var pb, cb snapshot.TCPInfo
			sh, ok := snapshot.ChronoShares(ps.TCP(&pb), cs.TCP(&cb), cur.Taken.Sub(prev.Taken))
			if !ok || sh.Busy == 0 {
				t.Fatalf("no chronographs: %+v", sh)
			}
			share[cc] = snapshot.Frac(sh.Sndbuf, sh.Busy)
			t.Logf("%s: busy %s of the window, sndbuf_limited %.0f%% of busy, rwnd_limited %.0f%%, %.1f Mbit/s",
				cc, sh.Busy.Round(time.Millisecond), 100*share[cc], 100*snapshot.Frac(sh.Rwnd, sh.Busy), acked(prev, cur, local)/1e6)
		})
	}
	if len(share) != 2 {
		return // a subtest failed and said why
	}
	if c, b := share["cubic"], share["bbr"]; c > 0.2 || b < 0.3 {
		t.Errorf("sndbuf_limited: cubic %.0f%% (want under 20%%), bbr %.0f%% (want over 30%%)", 100*c, 100*b)
	}
}
