// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestSendBufferAtWmemMax: a bulk sender whose namespace caps send
// autotuning at 64K (net.ipv4.tcp_wmem max, a per-namespace sysctl),
// through a 40 ms, 100 Mbit/s link (BDP 500K), never calling
// setsockopt. The buffer is the limit, and it is the sysctl's: a finding
// names net.ipv4.tcp_wmem with a value above 64K to raise it to, and none
// calls the buffer pinned or tells the application to stop pinning it.
// Without --bandwidth: the sender's own rate is the buffer's, so the rule
// must not size the buffer from it.
func TestSendBufferAtWmemMax(t *testing.T) {
	p, local := bulkCapped(t, "net.ipv4.tcp_wmem=4096 16384 65536", false)
	var named, limits bool
	var r Report
	var b []byte
	for try := 1; try <= 3 && !(named && limits); try++ {
		var prev, cur *snapshot.Snapshot
		r, b, prev, cur = sample(t, p.client, 1500*time.Millisecond)
		t.Logf("sender moved %.1f Mbit/s", acked(prev, cur, local)/1e6)
		logSender(t, local, prev, cur)
		for _, f := range r.Findings {
			limits = limits || f.Rule == "buffer-limits" && strings.Contains(f.Summary, "net.ipv4.tcp_wmem")
			text := f.Summary
			for _, e := range f.Evidence {
				text += " | " + e.Name + " = " + e.Value
			}
			var fixes []string
			for _, fx := range f.Fixes {
				fixes = append(fixes, fx.Text+" "+fx.Command)
				if f.Subject.Local.String() == local.String() || f.Rule == "buffer-limits" {
					named = named || raisesMax(fx, "net.ipv4.tcp_wmem", 65536)
				}
			}
			all := text + " " + strings.Join(fixes, " ")
			if f.Subject.Local.String() == local.String() || f.Rule == "buffer-limits" {
				logFinding(t, f)
				t.Logf("  fixes: %s", strings.Join(fixes, " || "))
				if strings.Contains(all, "pinned at") || strings.Contains(all, " = pinned") || strings.Contains(all, "| pinned =") ||
					strings.Contains(all, "do not pin") || strings.Contains(all, "stop pinning") {
					t.Errorf("%s calls an autotuned buffer pinned: %s", f.Rule, all)
				}
			}
		}
	}
	if !limits {
		t.Errorf("buffer-limits is quiet about tcp_wmem's maximum: it read the path from the capped rate:\n%s", b)
	}
	if !named {
		t.Errorf("no finding names net.ipv4.tcp_wmem and a larger maximum for the sender %s:\n%s", local, b)
	}
}
