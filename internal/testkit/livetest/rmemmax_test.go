// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// TestReceiveBufferAtRmemMax (root, issue 38 item 5): a bulk sender in
// the lab's client namespace into a receiver in its server namespace,
// through a 40 ms, 100 Mbit/s link (BDP 500K), diagnosed together as
// check --all-netns does; the receiver's namespace caps receive
// autotuning at 64K (net.ipv4.tcp_rmem max) and neither end calls
// setsockopt. The receiver's buffer sits at the sysctl's maximum, so
// rwnd-limited says so, names net.ipv4.tcp_rmem with a maximum above 64K
// to raise it to, and never calls the buffer pinned or tells the receiver
// to stop pinning it (the send side: TestSendBufferAtWmemMax).
func TestReceiveBufferAtRmemMax(t *testing.T) {
	p, local := bulkCapped(t, "net.ipv4.tcp_rmem=4096 16384 65536", true)
	// Whole samples of both namespaces (LIVETEST_RECORD=dir keeps them:
	// internal/rules/testdata/rwnd-limited/fires-rmem-max-{client,server}.jsonl),
	// diagnosed as check --all-netns diagnoses its window.
	col := &collect.Collector{Opts: collect.Options{Owners: true, BufLock: true}, Now: time.Now}
	first := col.Collect([]netns.NS{p.client, p.server})
	time.Sleep(2 * time.Second)
	last := col.Collect([]netns.NS{p.client, p.server})
	Record(t, "fires-rmem-max-client", first[0], last[0])
	Record(t, "fires-rmem-max-server", first[1], last[1])
	ss := []window.Series{{Netns: p.client.Name, Snaps: []*snapshot.Snapshot{first[0], last[0]}}, {Netns: p.server.Name, Snaps: []*snapshot.Snapshot{first[1], last[1]}}}
	rs := rules.All()
	rep := report.Diagnose(window.Inputs(ss, diag.Options{}), rs)
	b, err := json.MarshalIndent(rep.Findings, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Findings {
		found = found || f.Rule == "rwnd-limited" && f.Subject.Local.String() == local.String()
	}
	if !found {
		t.Fatalf("no rwnd-limited finding for the sender %v:\n%s", local, b)
	}
	var named, evidence bool
	for _, f := range rep.Findings {
		if f.Rule != "rwnd-limited" || f.Subject.Local.String() != local.String() {
			continue
		}
		logFinding(t, f)
		text := f.Summary
		for _, e := range f.Evidence {
			text += " | " + e.Name + " = " + e.Value
			evidence = evidence || strings.Contains(e.Value, "net.ipv4.tcp_rmem's maximum 64K")
		}
		var fixes []string
		for _, fx := range f.Fixes {
			fixes = append(fixes, fx.Text+" "+fx.Command)
			named = named || raisesMax(fx, "net.ipv4.tcp_rmem", 65536)
		}
		t.Logf("  fixes: %s", strings.Join(fixes, " || "))
		all := text + " " + strings.Join(fixes, " ")
		if strings.Contains(all, "pinned at") || strings.Contains(all, "looks pinned") || strings.Contains(all, "stop pinning") || strings.Contains(all, "SO_RCVBUF gives") {
			t.Errorf("rwnd-limited calls an autotuned receive buffer pinned: %s", all)
		}
	}
	if !evidence {
		t.Errorf("no evidence says the receiver's buffer is at net.ipv4.tcp_rmem's maximum 64K:\n%s", b)
	}
	if !named {
		t.Errorf("no fix raises net.ipv4.tcp_rmem's maximum above 64K:\n%s", b)
	}
}
