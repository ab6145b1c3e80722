// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

func TestBacklogTarget(t *testing.T) {
	for _, c := range []struct{ peak, backlog, want int64 }{
		{0, 0, 4096},
		{129, 128, 4096},
		{4097, 4096, 16384},
		{3000, 511, 8192},
		{-5, -1, 4096},
	} {
		if got := tcpmodel.BacklogTarget(c.peak, c.backlog); got != c.want {
			t.Errorf("tcpmodel.BacklogTarget(%d, %d) = %d, want %d", c.peak, c.backlog, got, c.want)
		}
	}
}

func TestBacklogBinding(t *testing.T) {
	for _, c := range []struct {
		backlog, somax int64
		has            bool
		want           string
	}{
		{128, 4096, true, "application"},
		{4096, 4096, true, "capped by net.core.somaxconn"},
		{4096, 128, true, "above today"},
		{128, 0, false, "unknown"},
	} {
		if s, _ := tcpmodel.BacklogBinding(c.backlog, c.somax, c.has); !strings.Contains(s, c.want) {
			t.Errorf("tcpmodel.BacklogBinding(%d, %d, %v) = %q, want it to mention %q", c.backlog, c.somax, c.has, s, c.want)
		}
	}
}

func listenSnap(at time.Time, q, backlog uint32, overflows int64, withCounter bool) *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		Taken: at, Netns: snapshot.Netns{Name: "t"},
		Sockets: []snapshot.Socket{{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("0.0.0.0:9000")),
			RecvQ: q, SendQ: backlog, Cookie: 7, Pids: snapshot.PidsOf(10)}},
		Sysctls: map[string]string{"net.core.somaxconn": "4096"},
		Procs:   map[int]*snapshot.Proc{10: {Pid: 10, Command: "nginx", FDs: 10}},
	}
	if withCounter {
		s.Counters = map[string]int64{"TcpExt.ListenOverflows": overflows, "TcpExt.ListenDrops": overflows}
	}
	return s
}

// twoListeners adds python3's http.server (backlog 5, queue 4) beside
// s's listener, and the eBPF source's drops when drops is not nil.
func twoListeners(s *snapshot.Snapshot, drops []snapshot.EventDrop) *snapshot.Snapshot {
	s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:8000")),
		RecvQ: 4, SendQ: 5, Cookie: 8, Pids: snapshot.PidsOf(11)})
	s.Procs[11] = &snapshot.Proc{Pid: 11, Command: "python3", FDs: 5}
	if drops != nil {
		s.Events = &snapshot.Events{Since: s.Taken.Add(-5 * time.Second), Until: s.Taken, Drops: drops}
	}
	return s
}

func TestListenOverflowCases(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(5 * time.Second)
	type want struct {
		sevs    []diag.Severity
		unknown bool
		text    string
	}
	for name, c := range map[string]struct {
		prev, cur *snapshot.Snapshot
		want      want
	}{
		"single snapshot, full now, totals": {nil, listenSnap(t1, 512, 511, 40, true),
			want{sevs: []diag.Severity{diag.Warning, diag.Info}, text: "listen 9000 backlog=4096;"}},
		"single snapshot, empty queue, no overflows": {nil, listenSnap(t1, 0, 511, 0, true), want{}},
		"single snapshot, no counters":               {nil, listenSnap(t1, 0, 511, 0, false), want{}},
		"overflow, listener near full": {listenSnap(t0, 10, 511, 0, true), listenSnap(t1, 500, 511, 20, true),
			want{sevs: []diag.Severity{diag.Warning}, text: "overflowed its accept queue 20 times"}},
		"overflow, critical rate": {listenSnap(t0, 10, 511, 0, true), listenSnap(t1, 512, 511, 100, true),
			want{sevs: []diag.Severity{diag.Critical}}},
		"overflow, transient": {listenSnap(t0, 0, 511, 0, true), listenSnap(t1, 3, 511, 20, true),
			want{sevs: []diag.Severity{diag.Warning}, text: "listener :9000 (nginx pid 10) overflowed its accept queue 20 times in 5s; queue 3/511, backlog 511 is the application's own (somaxconn 4096); transient: the queue filled and drained between samples (it is the namespace's only listener)"}},
		"overflow, transient, two listeners": {twoListeners(listenSnap(t0, 0, 511, 0, true), nil), twoListeners(listenSnap(t1, 3, 511, 20, true), nil),
			want{sevs: []diag.Severity{diag.Warning}, text: "but no listener was seen near full"}},
		"overflow, transient, two listeners, eBPF names one": {twoListeners(listenSnap(t0, 0, 511, 0, true), nil),
			twoListeners(listenSnap(t1, 3, 511, 20, true), []snapshot.EventDrop{{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("127.0.0.1:8000"), Count: 17}}),
			want{sevs: []diag.Severity{diag.Warning}, text: "listener :8000 (python3 pid 11) overflowed its accept queue 20 times in 5s; queue 4/5, backlog 5 is the application's own (somaxconn 4096); transient: the queue filled and drained between samples (the eBPF source counted its drops); listener 127.0.0.1:8000 dropped 17 handshakes"}},
		"counter went backwards, queue empty": {listenSnap(t0, 0, 511, 50, true), listenSnap(t1, 0, 511, 2, true),
			want{unknown: true}},
		"counter absent in one sample, queue full": {listenSnap(t0, 0, 511, 0, false), listenSnap(t1, 512, 511, 9, true),
			want{sevs: []diag.Severity{diag.Warning}}},
		"backlog zero, empty": {listenSnap(t0, 0, 0, 0, true), listenSnap(t1, 0, 0, 0, true), want{}},
	} {
		t.Run(name, func(t *testing.T) {
			fs, err := checkListenOverflow(diag.NewInput(c.prev, c.cur, diag.Options{}))
			if (err != nil) != c.want.unknown {
				t.Fatalf("err = %v, want unknown %v", err, c.want.unknown)
			}
			if len(fs) != len(c.want.sevs) {
				t.Fatalf("got %d findings, want %d: %+v", len(fs), len(c.want.sevs), fs)
			}
			all := ""
			for i, f := range fs {
				if f.Severity != c.want.sevs[i] {
					t.Errorf("finding %d severity %v, want %v", i, f.Severity, c.want.sevs[i])
				}
				all += f.Summary
				for _, x := range f.Fixes {
					all += " " + x.Command
				}
			}
			if !strings.Contains(all, c.want.text) {
				t.Errorf("findings do not mention %q: %s", c.want.text, all)
			}
		})
	}
}

// nginxAtCap is listenSnap's nginx listener (backlog 511, queue q) with two
// workers holding perWorker accepted connections each and q waiting;
// connections of another gen are other connections (other cookies).
func nginxAtCap(at time.Time, q uint32, perWorker int, overflows int64, gen int) *snapshot.Snapshot {
	s := listenSnap(at, q, 511, overflows, true)
	s.Sockets[0].Family = 2
	s.Procs[11] = &snapshot.Proc{Pid: 11, Command: "nginx", FDs: perWorker + 8}
	s.Procs[12] = &snapshot.Proc{Pid: 12, Command: "nginx", FDs: perWorker + 8}
	add := func(n int, pids []int) {
		for range n {
			port := uint16(10000 + len(s.Sockets))
			s.Sockets = append(s.Sockets, snapshot.Socket{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:9000")),
				Remote: snapshot.EndpointOf(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)), Cookie: uint64(gen)<<32 | uint64(port), Pids: snapshot.PidsOf(pids...)})
		}
	}
	add(perWorker, []int{11})
	add(perWorker, []int{12})
	add(int(q), nil)
	return s
}

// TestListenOverflowConnectionCap: nginx's workers stop accepting at
// worker_connections; the queue stays full in both samples, and the first
// fix is the cap, not the backlog.
func TestListenOverflowConnectionCap(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(5 * time.Second)
	// Every connection of the second sample new: the workers take one as
	// one closes.
	res := runRule(listenOverflow(), nginxAtCap(t0, 505, 700, 0, 1), nginxAtCap(t1, 508, 700, 700, 2))
	if len(res.Findings) != 1 {
		t.Fatalf("findings: %+v", res.Findings)
	}
	f := res.Findings[0]
	if v := evidence(f, "accepted connections held"); !strings.HasPrefix(v, "1908 in all: nginx(pid 11) 700 open, nginx(pid 12) 700 open; 508 with no owner") {
		t.Errorf("held evidence %q", v)
	}
	if fx := f.Fixes[0]; fx.Target != "nginx" || !strings.Contains(fx.Text, "2 workers hold 1400 accepted connections (up to 700 each)") ||
		fx.Command != "events { worker_connections 2048; }  worker_rlimit_nofile 4096;" {
		t.Errorf("first fix %+v", fx)
	}
	for name, c := range map[string]struct{ prev, cur *snapshot.Snapshot }{
		// The workers may still be accepting.
		"full only now": {nginxAtCap(t0, 10, 700, 0, 1), nginxAtCap(t1, 508, 700, 700, 2)},
		// A slow acceptor under a storm: full in both, holding more.
		"holding more": {nginxAtCap(t0, 505, 500, 0, 1), nginxAtCap(t1, 508, 700, 700, 2)},
		// A stuck accept loop: the same connections, none new.
		"none new": {nginxAtCap(t0, 505, 700, 0, 1), nginxAtCap(t1, 508, 700, 700, 1)},
	} {
		res = runRule(listenOverflow(), c.prev, c.cur)
		for _, fx := range res.Findings[0].Fixes {
			if strings.Contains(fx.Text, "worker_connections") {
				t.Errorf("%s: cap fix: %+v", name, fx)
			}
		}
	}
}

// TestAcceptedOnAll: one pass over the sockets counts, for each
// listener, what a pass of its own (acceptedOn) counts, with listeners
// sharing a port (a wildcard and an address, IPv4 and IPv6) and isNew
// asked with the right listener.
func TestAcceptedOnAll(t *testing.T) {
	ap := netip.MustParseAddrPort
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{
		{Family: 2, State: snapshot.Listen, Local: snapshot.EndpointOf(ap("0.0.0.0:80")), Cookie: 1, Pids: snapshot.PidsOf(10)},
		{Family: 2, State: snapshot.Listen, Local: snapshot.EndpointOf(ap("198.18.0.1:80")), Cookie: 2, Pids: snapshot.PidsOf(11)},
		{Family: 10, State: snapshot.Listen, Local: snapshot.EndpointOf(ap("[::]:80")), Cookie: 3, Pids: snapshot.PidsOf(12)},
		{Family: 2, State: snapshot.Listen, Local: snapshot.EndpointOf(ap("0.0.0.0:8080")), Cookie: 4, Pids: snapshot.PidsOf(13)},
		{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(ap("198.18.0.1:80")), Remote: snapshot.EndpointOf(ap("198.18.0.2:40000")), Cookie: 5, Pids: snapshot.PidsOf(11)},
		{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(ap("198.18.0.9:80")), Remote: snapshot.EndpointOf(ap("198.18.0.2:40001")), Cookie: 6, Pids: snapshot.PidsOf(10)},
		{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(ap("198.18.0.9:80")), Remote: snapshot.EndpointOf(ap("198.18.0.2:40002")), Cookie: 7},
		{Family: 10, State: snapshot.CloseWait, Local: snapshot.EndpointOf(ap("[2001:db8::1]:80")), Remote: snapshot.EndpointOf(ap("[2001:db8::2]:40003")), Cookie: 8, Pids: snapshot.PidsOf(12)},
		{Family: 2, State: snapshot.TimeWait, Local: snapshot.EndpointOf(ap("198.18.0.1:80")), Remote: snapshot.EndpointOf(ap("198.18.0.2:40004")), Cookie: 9},
		{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(ap("198.18.0.1:8080")), Remote: snapshot.EndpointOf(ap("198.18.0.2:40005")), Cookie: 10, Pids: snapshot.PidsOf(13)},
		{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(ap("198.18.0.2:40000")), Remote: snapshot.EndpointOf(ap("198.18.0.1:80")), Cookie: 11, Pids: snapshot.PidsOf(14)},
	}}
	lns := []*snapshot.Socket{&s.Sockets[0], &s.Sockets[1], &s.Sockets[2], &s.Sockets[3]}
	// New: the odd cookies, for listener 0 only.
	all := acceptedOnAll(s, lns, func(k int, c *snapshot.Socket) bool { return k == 0 && c.Cookie%2 == 1 })
	for k, ln := range lns {
		want := acceptedOn(s, ln, func(c *snapshot.Socket) bool { return k == 0 && c.Cookie%2 == 1 })
		got := all[k]
		if got.total != want.total || got.owned != want.owned || got.fresh != want.fresh || len(got.byPid) != len(want.byPid) {
			t.Errorf("listener %s: one pass counted %+v, its own pass %+v", ln.Local, got, want)
		}
	}
	if got := [4]int{all[0].total, all[1].total, all[2].total, all[3].total}; got != [4]int{3, 1, 1, 1} {
		t.Errorf("totals %v, want [3 1 1 1]", got)
	}
	if all[0].fresh != 1 {
		t.Errorf("listener 0: %d fresh, want 1 (cookie 5)", all[0].fresh)
	}
	if a := all[0]; a.owned != 2 || a.byPid[11] != 1 || a.byPid[10] != 1 || len(a.byPid) != 2 {
		t.Errorf("listener 0: %d owned %v, want 2: one of pid 10, one of pid 11", a.owned, a.byPid)
	}
	if a := all[2]; a.owned != 1 || a.byPid[12] != 1 {
		t.Errorf("listener [::]:80: %d owned %v, want pid 12's CLOSE_WAIT", a.owned, a.byPid)
	}
}

// TestAcceptedOnAllRuns: owners counted a run at a time add up when
// listeners' and owners' connections interleave, and the tally keeps
// the owners in the order they first came.
func TestAcceptedOnAllRuns(t *testing.T) {
	ap := netip.MustParseAddrPort
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{
		{Family: 2, State: snapshot.Listen, Local: snapshot.EndpointOf(ap("0.0.0.0:80")), Cookie: 1},
		{Family: 2, State: snapshot.Listen, Local: snapshot.EndpointOf(ap("0.0.0.0:81")), Cookie: 2},
	}}
	for i, c := range []struct {
		port uint16
		pid  int
	}{{80, 10}, {80, 10}, {81, 20}, {80, 10}, {80, 11}, {81, 20}, {80, 10}, {80, 0}, {81, 21}} {
		sk := snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: uint64(10 + i),
			Local: snapshot.EndpointOf(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), c.port)), Remote: snapshot.EndpointOf(ap("198.18.0.2:40000"))}
		if c.pid != 0 {
			sk.Pids = snapshot.PidsOf(c.pid)
		}
		s.Sockets = append(s.Sockets, sk)
	}
	all := acceptedOnAll(s, []*snapshot.Socket{&s.Sockets[0], &s.Sockets[1]}, nil)
	if a := all[0]; a.total != 6 || a.owned != 5 || !maps.Equal(a.byPid, map[int]int{10: 4, 11: 1}) || a.by.Top() != 10 || a.by.Len() != 2 {
		t.Errorf("port 80: %d in all, %d owned, %v by pid, top %d of %d; want 6, 5, {10: 4, 11: 1}, 10 of 2", a.total, a.owned, a.byPid, a.by.Top(), a.by.Len())
	}
	if a := all[1]; a.total != 3 || a.owned != 3 || !maps.Equal(a.byPid, map[int]int{20: 2, 21: 1}) || a.by.Top() != 20 {
		t.Errorf("port 81: %d in all, %d owned, %v by pid, top %d; want 3, 3, {20: 2, 21: 1}, 20", a.total, a.owned, a.byPid, a.by.Top())
	}
	if got := all[0].by.List(s); got != "?(pid 10) 4 open, ?(pid 11) 1 open" {
		t.Errorf("port 80's owners listed as %q, want pid 10's 4 first", got)
	}
}
