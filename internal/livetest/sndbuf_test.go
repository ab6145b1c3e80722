package livetest

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
)

// TestSndbufLimited: a bulk sender with SO_SNDBUF pinned at 16K (sndbuf
// 32K) through a 20 ms, 1 Gbit/s link to an autotuned receiver that reads
// as fast as data comes. The kernel's sndbuf_limited chronograph misses
// this; the rule derives it and proves the pin with SO_BUF_LOCK. The same
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
			f := one(t, r, b, "sndbuf-limited")
			for _, e := range f.Evidence {
				t.Logf("  %s = %s  [%s]", e.Name, e.Value, e.Source)
			}
			if f.Subject.Local != local.String() || f.Subject.Remote != srv.String() || f.Subject.Pid != os.Getpid() {
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
