// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// synSnap is a listener on :9000 (backlog 8) with reqs SYN-RECV requests
// from src, and the SYN-queue counters (nil: none collected).
func synSnap(at time.Time, reqs int, src string, counters map[string]int64, cookies string) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Taken: at, Netns: snapshot.Netns{Name: "t"},
		Sockets:  []snapshot.Socket{{Family: 2, State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("0.0.0.0:9000")), SendQ: 8, Cookie: 1, Pids: snapshot.PidsOf(10)}},
		Sysctls:  map[string]string{"net.core.somaxconn": "4096", "net.ipv4.tcp_max_syn_backlog": "2048", "net.ipv4.tcp_syncookies": cookies},
		Procs:    map[int]*snapshot.Proc{10: {Pid: 10, Command: "nginx", FDs: 10}},
		Counters: counters,
	}
	for i := 0; i < reqs; i++ {
		s.Sockets = append(s.Sockets, snapshot.Socket{Family: 2, State: snapshot.SynRecv, Local: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:9000")),
			Remote: snapshot.EndpointFrom(netip.MustParseAddr(src), uint16(40000+i)), Cookie: uint64(100 + i)})
	}
	return s
}

// backlog5 makes s's listener one of backlog 5 (python3's http.server)
// holding recvQ connections in its accept queue.
func backlog5(s *snapshot.Snapshot, recvQ uint32) *snapshot.Snapshot {
	s.Sockets[0].SendQ, s.Sockets[0].RecvQ = 5, recvQ
	return s
}

func synCtr(drops, over, qdrop, qcookies, sent, failed int64) map[string]int64 {
	return map[string]int64{"TcpExt.ListenDrops": drops, "TcpExt.ListenOverflows": over, "TcpExt.TCPReqQFullDrop": qdrop,
		"TcpExt.TCPReqQFullDoCookies": qcookies, "TcpExt.SyncookiesSent": sent, "TcpExt.SyncookiesFailed": failed}
}

func TestSynQueueOverflowCases(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(5 * time.Second)
	for name, c := range map[string]struct {
		prev, cur *snapshot.Snapshot
		sevs      []diag.Severity
		unknown   bool
		text      string
	}{
		"drops, listener full, critical": {synSnap(t0, 9, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "0"), synSnap(t1, 9, "198.18.0.9", synCtr(100, 0, 100, 0, 0, 0), "0"),
			[]diag.Severity{diag.Critical}, false, "100 SYNs dropped"},
		"drops only in ListenDrops-ListenOverflows (old kernel)": {synSnap(t0, 9, "198.18.0.9", map[string]int64{"TcpExt.ListenDrops": 0, "TcpExt.ListenOverflows": 0}, "0"),
			synSnap(t1, 9, "198.18.0.9", map[string]int64{"TcpExt.ListenDrops": 30, "TcpExt.ListenOverflows": 10}, "0"),
			[]diag.Severity{diag.Warning}, false, "20 SYNs dropped"},
		"accept-queue overflows only: quiet": {synSnap(t0, 0, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "1"), synSnap(t1, 0, "198.18.0.9", synCtr(40, 40, 0, 0, 0, 0), "1"),
			nil, false, ""},
		"cookies, transient": {synSnap(t0, 0, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "1"), synSnap(t1, 1, "198.18.0.9", synCtr(0, 0, 0, 7, 7, 0), "1"),
			[]diag.Severity{diag.Warning}, false, "7 SYNs went to SYN cookies (7 cookies sent)"},
		// Backlog 5: 4 requests are one short of full, and name the listener.
		"cookies, backlog 5, one short of full": {backlog5(synSnap(t0, 2, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "1"), 0), backlog5(synSnap(t1, 4, "198.18.0.9", synCtr(0, 0, 0, 4, 4, 0), "1"), 1),
			[]diag.Severity{diag.Warning}, false, "listener :9000 (nginx pid 10)"},
		// Its accept queue full too: one backlog, listen-overflow warns.
		"cookies, backlog 5, accept queue full": {backlog5(synSnap(t0, 2, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "1"), 5), backlog5(synSnap(t1, 4, "198.18.0.9", synCtr(40, 40, 0, 4, 4, 0), "1"), 2),
			[]diag.Severity{diag.Info}, false, "its accept queue is full too (listen-overflow): backlog 5 bounds both queues"},
		// Accept queue at its backlog but not overflowing: nothing for
		// listen-overflow to report, so the cookies stay a warning.
		"cookies, backlog 5, accept queue at 5/5, no overflows": {backlog5(synSnap(t0, 2, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "1"), 5), backlog5(synSnap(t1, 4, "198.18.0.9", synCtr(0, 0, 0, 4, 4, 0), "1"), 5),
			[]diag.Severity{diag.Warning}, false, "listener :9000 (nginx pid 10)"},
		// The SYN queue full at the sample: a fault of its own.
		"cookies, backlog 5, both queues full now": {backlog5(synSnap(t0, 2, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "1"), 5), backlog5(synSnap(t1, 5, "198.18.0.9", synCtr(40, 40, 0, 4, 4, 0), "1"), 6),
			[]diag.Severity{diag.Warning}, false, "has a full SYN queue (5 requests, backlog 5)"},
		// SYN queue seen at 1 of 5, accept queue full: the same backlog.
		"cookies, backlog 5, accept queue full, SYN queue drained": {backlog5(synSnap(t0, 0, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "1"), 5), backlog5(synSnap(t1, 1, "198.18.0.9", synCtr(40, 40, 0, 4, 4, 0), "1"), 5),
			[]diag.Severity{diag.Info}, false, "listener :9000 (nginx pid 10)"},
		"syncookies=2: cookies are not overflow": {synSnap(t0, 0, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "2"), synSnap(t1, 0, "198.18.0.9", synCtr(0, 0, 0, 500, 500, 0), "2"),
			nil, false, ""},
		"single snapshot, full now": {nil, synSnap(t1, 9, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "1"),
			[]diag.Severity{diag.Warning}, false, "next SYNs"},
		"failed cookies alone: info": {synSnap(t0, 0, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 0), "1"), synSnap(t1, 0, "198.18.0.9", synCtr(0, 0, 0, 0, 0, 3), "1"),
			[]diag.Severity{diag.Info}, false, "invalid SYN cookie"},
		"no counters, two samples, nothing full: unknown": {synSnap(t0, 0, "198.18.0.9", nil, "1"), synSnap(t1, 0, "198.18.0.9", nil, "1"),
			nil, true, ""},
		"drop counters went backwards, cookie counters still judged: quiet": {synSnap(t0, 0, "198.18.0.9", synCtr(90, 0, 90, 0, 0, 0), "0"), synSnap(t1, 0, "198.18.0.9", synCtr(5, 0, 5, 0, 0, 0), "0"),
			nil, false, ""},
	} {
		t.Run(name, func(t *testing.T) {
			var res diag.Result
			diag.Run([]diag.Rule{synQueueOverflow()}, diag.NewInput(c.prev, c.cur, diag.Options{}), &res)
			if (len(res.Unknown) > 0) != c.unknown {
				t.Errorf("unknown = %+v, want %v", res.Unknown, c.unknown)
			}
			if len(res.Findings) != len(c.sevs) {
				t.Fatalf("%d findings, want %d: %+v", len(res.Findings), len(c.sevs), res.Findings)
			}
			for i, f := range res.Findings {
				if f.Severity != c.sevs[i] {
					t.Errorf("finding %d severity %v, want %v", i, f.Severity, c.sevs[i])
				}
			}
			if c.text != "" && !strings.Contains(res.Findings[0].Summary, c.text) {
				t.Errorf("summary %q lacks %q", res.Findings[0].Summary, c.text)
			}
		})
	}
}

func TestSynSourcesFlood(t *testing.T) {
	s := synSnap(time.Unix(0, 0), 9, "198.18.0.9", nil, "1")
	in := diag.NewInput(nil, s, diag.Options{})
	ls := synListeners(in)
	if len(ls) != 1 || ls[0].reqs != 9 {
		t.Fatalf("listeners %+v", ls)
	}
	if _, few, top := synSources(ls[0]); !few || len(top) != 1 {
		t.Errorf("9 requests from one source: few=%v top=%v", few, top)
	}
}

// TestSynFixWithCookies: with tcp_syncookies=1 a SYN queue is capped by
// the listener's own backlog (128 here, full), and tcp_max_syn_backlog
// changes nothing: the fix is the backlog, not that sysctl. With cookies
// off the sysctl's 3/4 clause binds first and is raised to 4/3 of the
// backlog wanted.
func TestSynFixWithCookies(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(5 * time.Second)
	snap := func(at time.Time, ctr map[string]int64, cookies string) *snapshot.Snapshot {
		s := synSnap(at, 128, "198.18.0.9", ctr, cookies)
		s.Sockets[0].SendQ = 128
		s.Sysctls["net.ipv4.tcp_max_syn_backlog"] = "128"
		return s
	}
	for _, c := range []struct {
		cookies      string
		ctr          map[string]int64
		wantSysctl   string // "" for none
		wantInEvTMSB string
	}{
		{"1", synCtr(0, 0, 0, 300, 300, 0), "", "not a cap here"},
		{"0", synCtr(300, 0, 300, 0, 0, 0), "net.ipv4.tcp_max_syn_backlog=8192", "3/4 of it: 96"},
	} {
		var res diag.Result
		diag.Run([]diag.Rule{synQueueOverflow()}, diag.NewInput(snap(t0, synCtr(0, 0, 0, 0, 0, 0), c.cookies), snap(t1, c.ctr, c.cookies), diag.Options{}), &res)
		if len(res.Findings) == 0 {
			t.Fatalf("cookies=%s: no finding", c.cookies)
		}
		f := res.Findings[0]
		var sysctl, backlog string
		for _, x := range f.Fixes {
			if strings.Contains(x.Command, "tcp_max_syn_backlog") {
				sysctl = x.Command
			}
			if strings.Contains(x.Text+x.Command, "backlog") && !strings.Contains(x.Command, "tcp_max_syn_backlog") {
				backlog = x.Text
			}
		}
		switch {
		case c.wantSysctl == "" && sysctl != "":
			t.Errorf("cookies=%s: tcp_max_syn_backlog proposed, though it caps nothing with cookies on: %s", c.cookies, sysctl)
		case c.wantSysctl != "" && !strings.Contains(sysctl, c.wantSysctl):
			t.Errorf("cookies=%s: tcp_max_syn_backlog fix %q, want %q", c.cookies, sysctl, c.wantSysctl)
		}
		if backlog == "" {
			t.Errorf("cookies=%s: no backlog fix: %+v", c.cookies, f.Fixes)
		}
		for _, e := range f.Evidence {
			if e.Name == "tcp_max_syn_backlog" && !strings.Contains(e.Value, c.wantInEvTMSB) {
				t.Errorf("cookies=%s: evidence %q, want %q", c.cookies, e.Value, c.wantInEvTMSB)
			}
		}
	}
}
