// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// fixtureWithoutOwners reads a fixture and forgets every socket owner, as
// when connections are too short for the owner scan; events, when given,
// become the last snapshot's eBPF section over the window.
func fixtureWithoutOwners(t *testing.T, path string, flows []snapshot.EventFlow) (prev, cur *snapshot.Snapshot) {
	t.Helper()
	snaps := readSnaps(t, path)
	for _, s := range snaps {
		for i := range s.Sockets {
			s.Sockets[i].Pids = snapshot.PidList{}
		}
		s.Procs, s.FlowOwners = nil, nil
	}
	prev, cur = snaps[0], snaps[len(snaps)-1]
	if flows != nil {
		cur.Events = &snapshot.Events{Since: prev.Taken, Until: cur.Taken, Flows: flows}
	}
	return prev, cur
}

func runRule(r diag.Rule, prev, cur *snapshot.Snapshot) diag.Result {
	var res diag.Result
	diag.Run([]diag.Rule{r}, keptInput(r, prev, cur), &res)
	return res
}

// keptInput is the window as check keeps it: prev as a base holding only
// what r lists in its Keeps, so a rule reading anything else of it is
// reported unknown (diag.KeptOf).
func keptInput(r diag.Rule, prev, cur *snapshot.Snapshot) *diag.Input {
	var b *diag.Base
	if prev != nil {
		b = diag.NewBase(prev, r.Keeps)
	}
	return diag.NewInputFrom(b, cur, diag.Options{})
}

func evidence(f diag.Finding, name string) string {
	for _, e := range f.Evidence {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestChurnOpenerFromEvents(t *testing.T) {
	path := "testdata/connection-churn/fires.jsonl"
	prev, cur := fixtureWithoutOwners(t, path, nil)
	res := runRule(connectionChurn(), prev, cur)
	if len(res.Findings) == 0 {
		t.Fatal("no finding without owners")
	}
	if f := res.Findings[0]; f.Subject.Pid != 0 || !strings.Contains(evidence(f, "opener"), "eBPF source (--bpf)") {
		t.Errorf("without events: pid %d, opener %q; want unknown and the missing eBPF source named", f.Subject.Pid, evidence(f, "opener"))
	}
	window := cur.Taken.Sub(prev.Taken)
	opens := uint64(window.Seconds() * 250)
	prev, cur = fixtureWithoutOwners(t, path, []snapshot.EventFlow{
		{Pid: 4242, Command: "python3", Remote: netip.MustParseAddrPort("127.0.0.1:8080"), Opens: opens, ActiveCloses: opens},
		{Pid: 4243, Command: "curl", Remote: netip.MustParseAddrPort("127.0.0.1:9999"), Opens: 1},
	})
	res = runRule(connectionChurn(), prev, cur)
	if len(res.Findings) == 0 {
		t.Fatal("no finding with events")
	}
	f := res.Findings[0]
	if f.Subject.Pid != 4242 || f.Subject.Command != "python3" || !strings.Contains(f.Summary, "python3 (pid 4242) opens 250 new connections/s") {
		t.Errorf("with events: %+v %q", f.Subject, f.Summary)
	}
	if v := evidence(f, "connects (eBPF)"); !strings.HasPrefix(v, fmt.Sprintf("%d connect() calls in", opens)) || !strings.Contains(v, fmt.Sprintf("python3(pid %d) %d", 4242, opens)) {
		t.Errorf("connects evidence = %q", v)
	}
	if v := evidence(f, "opener"); !strings.Contains(v, "from its connect() calls") {
		t.Errorf("opener evidence = %q", v)
	}
}

// TestChurnOpenerSecondLookSkipped: when the collector skipped its second
// look, the opener's evidence says why rather than that the look missed.
func TestChurnOpenerSecondLookSkipped(t *testing.T) {
	prev, cur := fixtureWithoutOwners(t, "testdata/connection-churn/fires.jsonl", nil)
	res := runRule(connectionChurn(), prev, cur)
	if len(res.Findings) == 0 {
		t.Fatal("no finding without owners")
	}
	if v := evidence(res.Findings[0], "opener"); !strings.Contains(v, "its second look reached them") {
		t.Errorf("second look taken: opener %q", v)
	}
	why := "second look stopped: a dump of this namespace took longer than 18.75ms"
	cur.AddError(snapshot.SourceFlowOwners, errors.New(why))
	res = runRule(connectionChurn(), prev, cur)
	if v := evidence(res.Findings[0], "opener"); !strings.Contains(v, "ended before the owner scan reached them; "+why) {
		t.Errorf("second look skipped: opener %q", v)
	}
}

func TestPortExhaustionFailuresFromEvents(t *testing.T) {
	path := "testdata/port-exhaustion/fires.jsonl"
	dst := netip.MustParseAddrPort("198.18.2.9:7001")
	prev, cur := fixtureWithoutOwners(t, path, []snapshot.EventFlow{
		{Pid: 812, Command: "nginx", Remote: dst, Opens: 500, FailedPorts: 412},
	})
	res := runRule(portExhaustion(), prev, cur)
	var found bool
	for _, f := range res.Findings {
		if f.Subject.Remote.String() != dst.String() {
			continue
		}
		found = true
		if f.Subject.Pid != 812 || f.Subject.Command != "nginx" {
			t.Errorf("subject %+v, want nginx pid 812", f.Subject)
		}
		want := "connect() failed with EADDRNOTAVAIL 412 times in 5s from nginx (pid 812) to 198.18.2.9:7001"
		if v := evidence(f, "connect() failures"); !strings.Contains(v, want) {
			t.Errorf("connect() failures = %q, want %q", v, want)
		}
		if !strings.Contains(f.Summary, "failed with EADDRNOTAVAIL 412 times") {
			t.Errorf("summary %q", f.Summary)
		}
	}
	if !found {
		t.Fatalf("no finding for %v: %+v", dst, res.Findings)
	}
}

// fixtureWithEvents reads a fixture and gives its last snapshot ev as
// its eBPF section over the window.
func fixtureWithEvents(t *testing.T, path string, ev *snapshot.Events) (prev, cur *snapshot.Snapshot) {
	t.Helper()
	snaps := readSnaps(t, path)
	prev, cur = snaps[0], snaps[len(snaps)-1]
	if ev != nil {
		ev.Since, ev.Until = prev.Taken, cur.Taken
		cur.Events = ev
	}
	return prev, cur
}

func TestListenOverflowDropsFromEvents(t *testing.T) {
	path := "testdata/listen-overflow/fires.jsonl"
	prev, cur := fixtureWithEvents(t, path, nil)
	off := runRule(listenOverflow(), prev, cur)
	prev, cur = fixtureWithEvents(t, path, &snapshot.Events{
		Drops: []snapshot.EventDrop{
			{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:8080"), Count: 380},
			{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:9090"), Count: 7},
			{Reason: "NO_SOCKET", Count: 3},
		},
		Retransmits: []snapshot.EventRetransmit{
			{Remote: netip.MustParseAddrPort("10.0.0.1:8080"), SYN: true, Count: 12},
			{Remote: netip.MustParseAddrPort("10.0.0.1:8081"), SYN: true, Count: 99},
			{Remote: netip.MustParseAddrPort("10.0.0.1:8080"), Count: 50},
		},
	})
	on := runRule(listenOverflow(), prev, cur)
	if len(on.Findings) != len(off.Findings) || len(on.Findings) == 0 {
		t.Fatalf("findings with events %d, without %d", len(on.Findings), len(off.Findings))
	}
	for i := range on.Findings {
		if on.Findings[i].Severity != off.Findings[i].Severity {
			t.Errorf("severity changed with events: %v -> %v", off.Findings[i].Severity, on.Findings[i].Severity)
		}
	}
	f := on.Findings[0]
	if !strings.Contains(f.Summary, "listener :8080 dropped 380 handshakes (kfree_skb TCP_LISTEN_OVERFLOW)") {
		t.Errorf("summary: %s", f.Summary)
	}
	if v := evidence(f, "overflow drops (eBPF)"); !strings.HasPrefix(v, "listener :8080 dropped 380 handshakes in ") {
		t.Errorf("drops evidence: %q", v)
	}
	if v := evidence(f, "SYN retransmits to it (eBPF)"); !strings.HasPrefix(v, "12 in ") || !strings.Contains(v, "10.0.0.1:8080 12") {
		t.Errorf("SYN retransmit evidence: %q", v)
	}
	if v := evidence(off.Findings[0], "overflow drops (eBPF)"); !strings.HasPrefix(v, "unknown") {
		t.Errorf("without events: %q", v)
	}
	// A program that did not load leaves its evidence unknown, not zero.
	prev, cur = fixtureWithEvents(t, path, &snapshot.Events{Missing: []snapshot.EventProgram{{Program: snapshot.ProgDrops, Reason: "kfree_skb has no drop reason argument"}}})
	res := runRule(listenOverflow(), prev, cur)
	if v := evidence(res.Findings[0], "overflow drops (eBPF)"); !strings.Contains(v, "unknown") || !strings.Contains(v, "no drop reason argument") {
		t.Errorf("missing program: %q", v)
	}
}

func TestRetransmissionsPerPeerFromEvents(t *testing.T) {
	path := "testdata/retransmissions/fires.jsonl"
	prev, cur := fixtureWithEvents(t, path, nil)
	off := runRule(retransmissions(), prev, cur)
	prev, cur = fixtureWithEvents(t, path, &snapshot.Events{Retransmits: []snapshot.EventRetransmit{
		{Remote: netip.MustParseAddrPort("203.0.113.9:443"), Count: 40},
		{Remote: netip.MustParseAddrPort("203.0.113.9:80"), Count: 2},
		{Remote: netip.MustParseAddrPort("198.18.0.7:0"), LocalPort: 8080, Count: 5},
		{Remote: netip.MustParseAddrPort("203.0.113.9:443"), SYN: true, Count: 9},
	}})
	on := runRule(retransmissions(), prev, cur)
	if len(on.Findings) != len(off.Findings) {
		t.Fatalf("findings with events %d, without %d", len(on.Findings), len(off.Findings))
	}
	seen := 0
	for i, f := range on.Findings {
		if f.Subject.Remote.String() == "" || f.Subject.Remote.String() == "203.0.113.9" {
			seen++
		}
		if f.Severity != off.Findings[i].Severity || f.Summary != off.Findings[i].Summary {
			t.Errorf("verdict changed with events: %v %q -> %v %q", off.Findings[i].Severity, off.Findings[i].Summary, f.Severity, f.Summary)
		}
		switch f.Subject.Remote.String() {
		case "":
			if v := evidence(f, "retransmits by peer (eBPF)"); !strings.HasPrefix(v, "203.0.113.9:443 40; 198.18.0.7 on :8080 5; 203.0.113.9:80 2 in ") {
				t.Errorf("host-wide: %q", v)
			}
		case "203.0.113.9":
			if v := evidence(f, "retransmitted segments (eBPF)"); !strings.HasPrefix(v, "42 in ") {
				t.Errorf("per peer (SYNs apart): %q", v)
			}
		}
	}
	if seen != 2 {
		t.Errorf("%d of the host-wide and 203.0.113.9 findings seen, want both", seen)
	}
}

func TestResetsOnFlowFromEvents(t *testing.T) {
	svc := netip.MustParseAddrPort("127.0.0.1:8080")
	ev := func() *snapshot.Events {
		return &snapshot.Events{Resets: []snapshot.EventReset{
			{Sent: true, Reason: "TCP_STATE", Remote: svc, Count: 120},                                                // the opener's linger aborts
			{Sent: false, Remote: netip.MustParseAddrPort("127.0.0.1:0"), LocalPort: 8080, Count: 118},                // the service's side
			{Sent: true, Reason: "NO_SOCKET", Remote: netip.MustParseAddrPort("10.9.9.9:0"), LocalPort: 22, Count: 4}, // another flow
		}}
	}
	prev, cur := fixtureWithEvents(t, "testdata/connection-churn/fires.jsonl", ev())
	res := runRule(connectionChurn(), prev, cur)
	if len(res.Findings) == 0 {
		t.Fatal("no churn finding")
	}
	if v := evidence(res.Findings[0], "resets on this flow (eBPF)"); !strings.HasPrefix(v, "sent TCP_STATE 120; received 118 in ") {
		t.Errorf("churn resets: %q", v)
	}
	cw := netip.MustParseAddrPort("198.18.4.2:443")
	prev, cur = fixtureWithEvents(t, "testdata/close-wait-leak/fires.jsonl", &snapshot.Events{Resets: []snapshot.EventReset{
		{Sent: false, Remote: cw, Count: 3},
		{Sent: true, Reason: "TCP_ABORT_ON_DATA", Remote: cw, Count: 2},
		{Sent: true, Reason: "NO_SOCKET", Remote: netip.MustParseAddrPort("10.9.9.9:443"), Count: 4},
	}})
	res = runRule(closeWaitLeak(), prev, cur)
	found := false
	for _, f := range res.Findings {
		if f.Subject.Remote.String() == cw.String() {
			found = true
			if v := evidence(f, "resets with these peers (eBPF)"); !strings.HasPrefix(v, "sent TCP_ABORT_ON_DATA 2; received 3 in ") {
				t.Errorf("close-wait resets: %q", v)
			}
		}
	}
	if !found {
		t.Error("no close-wait finding for " + cw.String())
	}
}

// The kernel frees a SYN refused at a full accept queue without a drop
// reason, so the drop program sees none of those overflows: with
// ListenOverflows up and no TCP_LISTEN_OVERFLOW drop counted, the eBPF
// line says it cannot see them instead of "dropped 0 handshakes"; with
// some counted, it says the rest were not visible.
func TestListenOverflowDropsUnseen(t *testing.T) {
	path := "testdata/listen-overflow/fires.jsonl"
	prev, cur := fixtureWithEvents(t, path, &snapshot.Events{})
	res := runRule(listenOverflow(), prev, cur)
	if len(res.Findings) == 0 {
		t.Fatal("no finding")
	}
	v := evidence(res.Findings[0], "overflow drops (eBPF)")
	if strings.Contains(v, "dropped 0") || !strings.Contains(v, "cannot see") || !strings.Contains(v, "ListenOverflows +") {
		t.Errorf("no overflow drop counted: %q, want it to say eBPF cannot see them", v)
	}
	prev, cur = fixtureWithEvents(t, path, &snapshot.Events{Drops: []snapshot.EventDrop{
		{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:8080"), Count: 5}}})
	res = runRule(listenOverflow(), prev, cur)
	v = evidence(res.Findings[0], "overflow drops (eBPF)")
	if !strings.HasPrefix(v, "listener :8080 dropped 5 handshakes in ") || !strings.Contains(v, "not visible to eBPF") {
		t.Errorf("5 of the overflows counted: %q, want the rest said not visible", v)
	}
}

// TestRetransmissionsOwnRateNotPath: the lossy flow of the fires fixture
// (5 % of 47.7 MB retransmitted to 203.0.113.9, busy the whole window, no
// queue on the path) with data left unsent at the window's end, as a bulk
// sender held by its loss-shrunk cwnd has. Only the path held it, so its
// own rate qualifies as the path's measured rate; judged against that, its
// loss would cost nothing, whatever it cost. The rule measures the path
// from the connections that retransmitted nothing in the window, finds
// none, and warns as with the path unknown (it was info).
func TestRetransmissionsOwnRateNotPath(t *testing.T) {
	snaps := readFixture(t, "testdata/retransmissions/fires.jsonl")
	prev, cur := snaps[0], *snaps[1]
	cur.Sockets = append([]snapshot.Socket(nil), cur.Sockets...)
	lossy := -1
	for i := range cur.Sockets {
		if cur.Sockets[i].Remote.Addr().String() == "203.0.113.9" {
			lossy = i
		}
	}
	if lossy < 0 {
		t.Fatal("fixture: no connection to 203.0.113.9")
	}
	var tb snapshot.TCPInfo
	ti := *cur.Sockets[lossy].TCP(&tb)
	ti.NotsentBytes = 1 << 20
	cur.Sockets[lossy].Info = snapshot.TCPOf(&ti)
	in := diag.NewInput(prev, &cur, diag.Options{})
	all := tcpmodel.PathRatesOf(&cur, in.Window(), func(sk *snapshot.Socket) *snapshot.Socket { return prevAs(in, sk) })
	if _, ok := all[cur.Sockets[lossy].Remote.Addr().Unmap()]; !ok {
		t.Fatal("the lossy flow's own stretch does not qualify as the path: the test proves nothing")
	}
	var res diag.Result
	diag.Run([]diag.Rule{retransmissions()}, in, &res)
	var got *diag.Finding
	for i := range res.Findings {
		if res.Findings[i].Subject.Remote.String() == "203.0.113.9" {
			got = &res.Findings[i]
		}
	}
	if got == nil {
		t.Fatal("no finding for 203.0.113.9")
	}
	for _, e := range got.Evidence {
		t.Logf("%s = %s", e.Name, e.Value)
	}
	if got.Severity != diag.Warning {
		t.Errorf("5 %% loss judged against the lossy flow's own rate: %v, want warning", got.Severity)
	}
}
