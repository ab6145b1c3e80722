// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// capWindow is the shape of the corpus case "apache2 at MaxRequestWorkers"
// (10 workers, 200 clients, ListenBacklog 64): a listener of apache2's
// three processes, 10 connections held by its two children, 65 waiting
// in the full accept queue, 65 in the SYN queue and 60 connects of this
// namespace still in SYN-SENT, ListenOverflows +180 over 3 s. Between
// the samples the children finished 5 requests and took 5 connections
// from the queue.
type capWindow struct {
	heldBefore, heldNow int
	queueBefore         uint32
	overflows           int64
}

func (w capWindow) build() (prev, cur *snapshot.Snapshot) {
	lo := netip.MustParseAddr("127.0.0.1")
	ln := snapshot.Socket{Family: 2, State: snapshot.Listen, Local: snapshot.EndpointOf(netip.AddrPortFrom(lo, 8082)), SendQ: 64, Cookie: 1, Pids: snapshot.PidsOf(100, 101, 102)}
	conn := func(state snapshot.State, cookie uint64, port uint16, pids ...int) snapshot.Socket {
		return snapshot.Socket{Family: 2, State: state, Local: ln.Local, Remote: snapshot.EndpointOf(netip.AddrPortFrom(lo, port)), Cookie: cookie, Pids: snapshot.PidsOf(pids...)}
	}
	at := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	procs := map[int]*snapshot.Proc{100: {Pid: 100, Command: "apache2", FDs: 20}, 101: {Pid: 101, Command: "apache2", FDs: 30},
		102: {Pid: 102, Command: "apache2", FDs: 30}, 500: {Pid: 500, Command: "python3", FDs: 250}}
	mk := func(held int, queue uint32, taken bool, over int64, t time.Time) *snapshot.Snapshot {
		s := &snapshot.Snapshot{Taken: t, Netns: snapshot.Netns{Name: "apa"}, AppCaps: []snapshot.AppCap{}, Procs: procs,
			Counters: map[string]int64{"TcpExt.ListenOverflows": over, "TcpExt.ListenDrops": over}}
		l := ln
		l.RecvQ = queue
		s.Sockets = append(s.Sockets, l)
		first := uint64(100)
		if taken {
			first = 105 // 100-104 ended, 1000-1004 came out of the queue
		}
		for i := range held {
			c := first + uint64(i)
			if taken && i >= held-5 {
				c = 1000 + uint64(i-(held-5))
			}
			s.Sockets = append(s.Sockets, conn(snapshot.Established, c, uint16(40000+c), 101+i%2))
		}
		q0 := uint64(1000)
		if taken {
			q0 = 1005
		}
		for i := range int(queue) {
			s.Sockets = append(s.Sockets, conn(snapshot.Established, q0+uint64(i), uint16(41000+q0+uint64(i))))
		}
		for i := range 65 {
			s.Sockets = append(s.Sockets, conn(snapshot.SynRecv, 3000+uint64(i), uint16(50000+i)))
		}
		for i := range 60 {
			s.Sockets = append(s.Sockets, snapshot.Socket{Family: 2, State: snapshot.SynSent, Local: snapshot.EndpointFrom(lo, uint16(55000+i)),
				Remote: ln.Local, Cookie: 4000 + uint64(i), Pids: snapshot.PidsOf(500)})
		}
		return s
	}
	return mk(w.heldBefore, w.queueBefore, false, 1000, at), mk(w.heldNow, 65, true, 1000+w.overflows, at.Add(3*time.Second))
}

var atCap = capWindow{heldBefore: 10, heldNow: 10, queueBefore: 65, overflows: 180}

// TestAppCapMeasured: no file names apache2's limit; the plateau of 10
// in both samples with the accept queue full and handshakes dropped is
// its own limit near 10, critical, with where each number came from and
// a MaxRequestWorkers fix from the 200 connections that wanted it at
// once (each counted once), not from a value it did not read.
func TestAppCapMeasured(t *testing.T) {
	prev, cur := atCap.build()
	fs, err := checkAppCap(diag.NewInput(prev, cur, diag.Options{}))
	if err != nil || len(fs) != 1 {
		t.Fatalf("findings %+v, err %v", fs, err)
	}
	f := fs[0]
	if f.Severity != diag.Critical || f.Subject.Command != "apache2" || f.Subject.Pid != 100 || f.Subject.Service.String() != "127.0.0.1:8082" {
		t.Errorf("%s %+v", f.Severity, f.Subject)
	}
	for _, want := range []string{"apache2's own limit near 10 on 127.0.0.1:8082", "held 10 at both ends of 3s", "accept queue stayed full (65 of 64)"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary %q lacks %q", f.Summary, want)
		}
	}
	ev := map[string]string{}
	for _, e := range f.Evidence {
		ev[e.Name] = e.Value
	}
	for name, want := range map[string]string{
		"connections held on 127.0.0.1:8082": "10 at the window's end, 10 at its start (5 of them taken in the window",
		"ListenOverflows (netns)":            "+180 in 3s (60.0/s)",
		"connections wanted at once":         "200: 10 held, 65 in the accept queue, 65 in the SYN queue, 60 connects",
		"the limit read from its files":      "none",
	} {
		if !strings.Contains(ev[name], want) {
			t.Errorf("evidence %q = %q, want %q", name, ev[name], want)
		}
	}
	if len(f.Fixes) != 1 || f.Fixes[0].Command != "MaxRequestWorkers 256" || !strings.Contains(f.Fixes[0].Text, "its setting was not read") {
		t.Errorf("fixes %+v, want MaxRequestWorkers 256 (200 wanted, next power of two) without a current value", f.Fixes)
	}
}

// TestAppCapMeasuredQuiet: each condition alone is not a cap. A steady
// load holds a plateau with nobody waiting; a slow server's queue fills
// while what it holds grows; a full queue with no handshake dropped
// turns nobody away yet; a limit read from a file is the other path's;
// a process near its open-file limit is fd-exhaustion's; one sample
// shows no plateau.
func TestAppCapMeasuredQuiet(t *testing.T) {
	for _, c := range []struct {
		name string
		w    capWindow
		edit func(prev, cur *snapshot.Snapshot)
	}{
		{"held grows", capWindow{heldBefore: 10, heldNow: 14, queueBefore: 65, overflows: 180}, nil},
		{"held shrinks", capWindow{heldBefore: 14, heldNow: 10, queueBefore: 65, overflows: 180}, nil},
		// Fewer waiting than held at the start: a queue, not a backlog of
		// clients that never get in.
		{"queue shorter than held at the start", capWindow{heldBefore: 10, heldNow: 10, queueBefore: 5}, nil},
		// The server took every one it holds at the end from those waiting
		// at the start: 10 of 20, the queue drains.
		{"queue drains", capWindow{heldBefore: 10, heldNow: 10, queueBefore: 20}, func(_, cur *snapshot.Snapshot) {
			n := 0
			for i := range cur.Sockets {
				if sk := &cur.Sockets[i]; sk.Pids.Len() > 0 && sk.State == snapshot.Established && sk.Local.Port() == 8082 {
					sk.Cookie = 1000 + uint64(n)
					n++
				}
			}
		}},
		{"too few held", capWindow{heldBefore: 3, heldNow: 3, queueBefore: 65, overflows: 180}, nil},
		{"steady load, empty queue", atCap, func(prev, cur *snapshot.Snapshot) {
			prev.Sockets[0].RecvQ, cur.Sockets[0].RecvQ = 0, 0
		}},
		{"queue drained at the end", atCap, func(_, cur *snapshot.Snapshot) { cur.Sockets[0].RecvQ = 0 }},
		{"limit read from its file", atCap, func(_, cur *snapshot.Snapshot) {
			cur.AppCaps = []snapshot.AppCap{{Pid: 100, Command: "apache2", App: "apache2", Setting: "MaxRequestWorkers", Value: 400, Source: "test", Per: snapshot.CapPerListener}}
		}},
		{"near the open-file limit", atCap, func(_, cur *snapshot.Snapshot) {
			lim := int64(36)
			p := *cur.Procs[101]
			p.NofileSoft = &lim
			cur.Procs = map[int]*snapshot.Proc{100: cur.Procs[100], 101: &p, 102: cur.Procs[102], 500: cur.Procs[500]}
		}},
		{"one sample", atCap, nil},
	} {
		prev, cur := c.w.build()
		if c.edit != nil {
			c.edit(prev, cur)
		}
		if c.name == "one sample" {
			prev = nil
		}
		fs, err := checkAppCap(diag.NewInput(prev, cur, diag.Options{}))
		if err != nil || len(fs) != 0 {
			var got []string
			for _, f := range fs {
				got = append(got, fmt.Sprintf("%s: %s", f.Severity, f.Summary))
			}
			t.Errorf("%s: %v, err %v; want nothing", c.name, got, err)
		}
	}
}

// TestAppCapMeasuredDistinct: a connection seen from both ends (the
// client's SYN-SENT and the server's SYN-RECV of the same address:port)
// wants the server once.
func TestAppCapMeasuredDistinct(t *testing.T) {
	_, cur := atCap.build()
	n := 0
	for i := range cur.Sockets {
		if sk := &cur.Sockets[i]; sk.State == snapshot.SynSent && n < 10 {
			sk.Local = snapshot.EndpointFrom(sk.Local.Addr(), uint16(50000+n)) // the SYN-RECV ones' peers
			n++
		}
	}
	w := distinctWanted(cur, &cur.Sockets[0])
	if w.total() != 190 || w.synSent != 50 {
		t.Errorf("%s; want 190, 50 connects not already in the SYN queue", w)
	}
}

// TestChurnAtAppCap: the clients nginx turns away at worker_connections
// reconnect, 134 new connections/s to 127.0.0.1:8080: with the cap
// finding critical that churn is an info pointing at it; the same churn
// with no cap behind it (no limit read, the queue empty, no resets seen)
// stays a warning.
func TestChurnAtAppCap(t *testing.T) {
	snaps := readSnaps(t, "testdata/app-connection-cap/fires.jsonl")
	prev, cur := snaps[0], snaps[len(snaps)-1]
	lst := netip.MustParseAddrPort("127.0.0.1:8080")
	for i := range 400 {
		cur.Sockets = append(cur.Sockets, snapshot.Socket{Family: 2, State: snapshot.TimeWait, Local: snapshot.EndpointOf(lst),
			Remote: snapshot.EndpointFrom(lst.Addr(), uint16(20000+i)), Cookie: uint64(700000 + i), Timer: 3, Expires: 58500})
	}
	churnTo := func() *diag.Finding {
		fs, err := checkConnectionChurn(diag.NewInput(prev, cur, diag.Options{}))
		if err != nil {
			t.Fatal(err)
		}
		for i := range fs {
			if fs[i].Subject.Service.String() == "127.0.0.1:8080" {
				return &fs[i]
			}
		}
		t.Fatalf("no churn to 127.0.0.1:8080: %+v", fs)
		return nil
	}
	if f := churnTo(); f.Severity != diag.Info || !strings.Contains(f.Summary, "at its own connection limit and turns clients away (app-connection-cap)") {
		t.Errorf("at the cap: %s %q", f.Severity, f.Summary)
	}
	// No limit read and nothing seen turned away (the resets were the
	// eBPF source's): nothing explains the churn.
	cur.AppCaps, cur.Events = []snapshot.AppCap{}, nil
	if f := churnTo(); f.Severity != diag.Warning || strings.Contains(f.Summary, "app-connection-cap") {
		t.Errorf("no cap: %s %q", f.Severity, f.Summary)
	}
}

// TestAppCapMeasuredResets: nginx at worker_connections with its limit
// not read: the 127 clients its worker holds in both samples, most of
// them there before the window, while its port sent 3550 resets for
// requests after its close, are its own limit near 127. A keep-alive
// server racing its clients' next requests sends such resets too, but
// what it holds is all new: not a cap.
func TestAppCapMeasuredResets(t *testing.T) {
	snaps := readSnaps(t, "testdata/app-connection-cap/fires.jsonl")
	prev, cur := snaps[0], snaps[len(snaps)-1]
	cur.AppCaps = []snapshot.AppCap{}
	fs, err := checkAppCap(diag.NewInput(prev, cur, diag.Options{}))
	if err != nil || len(fs) != 1 {
		t.Fatalf("findings %+v, err %v", fs, err)
	}
	if f := fs[0]; f.Severity != diag.Critical || !strings.Contains(f.Summary, "nginx's own limit near 127 on 127.0.0.1:8080") ||
		!strings.Contains(f.Summary, "resets/s from 127.0.0.1:8080") || !strings.Contains(f.Fixes[0].Text, "nginx caps its own connections") {
		t.Errorf("%s %q; fix %+v", f.Severity, f.Summary, f.Fixes)
	}
	for i := range cur.Sockets {
		if sk := &cur.Sockets[i]; sk.State == snapshot.Established && sk.Local.Port() == 8080 {
			sk.Cookie += 5_000_000 // a connection the first sample did not have
		}
	}
	// A keep-alive server's connections mostly end cleanly: the racing
	// requests' resets are under half of what it accepted.
	cur.Counters = maps.Clone(cur.Counters)
	p0, _ := prev.Counter("Tcp.PassiveOpens")
	cur.Counters["Tcp.PassiveOpens"] = p0 + 3*3550
	if fs, err := checkAppCap(diag.NewInput(prev, cur, diag.Options{})); err != nil || len(fs) != 0 {
		t.Errorf("every held connection new: %+v, %v; want nothing", fs, err)
	}
	// Unless most of what it accepted ended in a reset: a server that
	// ends newcomers at once (Node at server.maxConnections), its
	// clients arriving in step so that what it holds is all new.
	cur.Counters["Tcp.PassiveOpens"] = p0 + 3550
	if fs, err := checkAppCap(diag.NewInput(prev, cur, diag.Options{})); err != nil || len(fs) != 1 || fs[0].Severity != diag.Critical {
		t.Errorf("all new, but most accepted reset: %+v, %v; want the cap", fs, err)
	}
}

// TestAppCapMeasuredQueueNotDraining: a long accept queue that does not
// drain beside a flat plateau is the same cap before it fills or drops a
// handshake: 10 held at both ends, 20 or 65 waiting, 5 of those waiting
// at the start taken in 3 s (each client waits longer than the window).
func TestAppCapMeasuredQueueNotDraining(t *testing.T) {
	for _, c := range []struct {
		name string
		w    capWindow
		want string
	}{
		{"queue not full at the start", capWindow{heldBefore: 10, heldNow: 10, queueBefore: 20, overflows: 180}, "gave the server 5 of the 20 waiting"},
		{"nothing dropped", capWindow{heldBefore: 10, heldNow: 10, queueBefore: 65}, "gave the server 5 of the 65 waiting"},
	} {
		prev, cur := c.w.build()
		fs, err := checkAppCap(diag.NewInput(prev, cur, diag.Options{}))
		if err != nil || len(fs) != 1 || fs[0].Severity != diag.Critical || !strings.Contains(fs[0].Summary, c.want) {
			t.Errorf("%s: %+v, err %v; want one critical finding saying %q", c.name, fs, err, c.want)
		}
	}
}
