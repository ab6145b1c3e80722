// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"net/netip"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

var (
	lo    = netip.MustParseAddr("127.0.0.1")
	lo6   = netip.MustParseAddr("::ffff:127.0.0.1")
	far   = netip.MustParseAddr("198.18.2.2")
	near  = netip.MustParseAddr("198.18.1.2")
	ifLo  = uint32(1)
	ifEth = uint32(2)
)

// tcp_twsk_unique: reuse 1 everywhere, 2 only with a loopback address or
// a socket bound to lo, never without timestamps.
func TestReuseApplies(t *testing.T) {
	for _, c := range []struct {
		mode       int
		ts         bool
		src, dst   netip.Addr
		ifindex    uint32
		want       bool
		kernelRule string
	}{
		{2, true, lo, lo, 0, true, "2: loopback destination"},
		{2, true, lo6, lo6, 0, true, "2: v4-mapped loopback"},
		{2, true, near, far, 0, false, "2: not loopback"},
		{2, true, near, far, ifLo, true, "2: bound to lo"},
		{2, true, near, far, ifEth, false, "2: bound elsewhere"},
		{1, true, near, far, 0, true, "1: every destination"},
		{0, true, lo, lo, 0, false, "0: never"},
		{1, false, near, far, 0, false, "no timestamps: never"},
		{-1, true, lo, lo, 0, false, "unknown mode: assume no reuse"},
	} {
		r := Reuse{Mode: c.mode, Delay: time.Second, Timestamps: c.ts}
		if got := r.Applies(c.src, c.dst, c.ifindex); got != c.want {
			t.Errorf("%s: %v, want %v", c.kernelRule, got, c.want)
		}
	}
}

func TestReuseOf(t *testing.T) {
	s := &snapshot.Snapshot{Sysctls: map[string]string{"net.ipv4.tcp_tw_reuse": "2", "net.ipv4.tcp_tw_reuse_delay": "250", "net.ipv4.tcp_timestamps": "1"}}
	if r := ReuseOf(s); r.Mode != 2 || r.Delay != 250*time.Millisecond || !r.DelayKnown || !r.Timestamps {
		t.Errorf("ReuseOf: %+v", r)
	}
	if r := ReuseOf(&snapshot.Snapshot{}); r.Mode != -1 || r.Delay != DefaultReuseDelay || r.DelayKnown {
		t.Errorf("ReuseOf(empty): %+v", r)
	}
}

func tw(src netip.Addr, sport uint16, dst netip.AddrPort, age time.Duration) snapshot.Socket {
	return snapshot.Socket{State: snapshot.TimeWait, Local: snapshot.EndpointOf(netip.AddrPortFrom(src, sport)), Remote: snapshot.EndpointOf(dst),
		Expires: uint32((TimeWaitLen - age) / time.Millisecond), Cookie: uint64(sport)}
}

// A client churning 120 connections/s to a loopback server, client
// closing first, range of 1,000 ports, tcp_tw_reuse=2: 7,200 TIME_WAIT
// sockets would be needed without reuse; with it only those younger than
// the reuse delay hold their ports.
func portsSnapshot(dst netip.AddrPort, src netip.Addr) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Sysctls: map[string]string{
		"net.ipv4.ip_local_port_range": "40000 40999", "net.ipv4.tcp_tw_reuse": "2", "net.ipv4.tcp_timestamps": "1"}}
	// 900 TIME_WAIT spread over the last 7.5 s (120/s).
	for i := 0; i < 900; i++ {
		s.Sockets = append(s.Sockets, tw(src, uint16(40000+i), dst, time.Duration(i)*time.Second/120))
	}
	s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.AddrPortFrom(netip.IPv4Unspecified(), 40500))})
	return s
}

func TestPortSpaceReuse(t *testing.T) {
	dst := netip.AddrPortFrom(lo, 8080)
	s := portsSnapshot(dst, lo)
	p, err := NewPortSpace(s)
	if err != nil {
		t.Fatal(err)
	}
	if p.Usable() != 999 {
		t.Errorf("usable %d, want 999 (1000 minus the listener's port)", p.Usable())
	}
	u := p.DestUsage(s, nil, 5*time.Second)[Dest{lo, dst}]
	// 120 younger than 1 s hold ports; 599 entered TIME_WAIT in 5 s (the
	// one on the listener's port 40500 is not an outgoing connection).
	if u == nil || !u.Reuse || u.TW != 899 || u.Held() != 120 || u.ClosedIn != 599 {
		t.Fatalf("loopback: %+v held %d", u, u.Held())
	}
	f := u.Forecast(p.Usable(), 120, 5*time.Second, p.Reuse.Delay)
	if f.Full || f.Exhausts || f.Hold != time.Second || f.Plateau < 119 || f.Plateau > 121 {
		t.Errorf("loopback forecast: %+v", f)
	}
	if got := f.PlateauWithoutReuse(u.Open); got < 7180 || got > 7200 {
		t.Errorf("without reuse: %v, want about 7200", got)
	}

	// The same churn to a peer behind a veth: reuse does not apply.
	fdst := netip.AddrPortFrom(far, 8080)
	s = portsSnapshot(fdst, near)
	p, _ = NewPortSpace(s)
	u = p.DestUsage(s, nil, 5*time.Second)[Dest{near, fdst}]
	if u.Reuse || u.Held() != 899 {
		t.Fatalf("veth: %+v", u)
	}
	f = u.Forecast(p.Usable(), 299, 5*time.Second, p.Reuse.Delay)
	if !f.Exhausts || f.Hold != TimeWaitLen || f.ETA > 2*time.Second {
		t.Errorf("veth forecast: %+v", f)
	}
}

// Where reuse applies, connect() takes TIME_WAIT older than the reuse
// delay over, so the window's count misses closes: 120/s for the last
// second, but only 30 older ones left of the 5 s window. The close rate
// comes from the young ones (120/s), not the window (30/s).
func TestForecastReuseTakenOver(t *testing.T) {
	dst := netip.AddrPortFrom(lo, 8080)
	s := &snapshot.Snapshot{Sysctls: map[string]string{
		"net.ipv4.ip_local_port_range": "40000 40999", "net.ipv4.tcp_tw_reuse": "2", "net.ipv4.tcp_timestamps": "1"}}
	for i := 0; i < 120; i++ {
		s.Sockets = append(s.Sockets, tw(lo, uint16(40000+i), dst, time.Duration(i)*time.Second/120))
	}
	for i := 0; i < 30; i++ {
		s.Sockets = append(s.Sockets, tw(lo, uint16(40200+i), dst, time.Second+time.Duration(i)*4*time.Second/30))
	}
	p, err := NewPortSpace(s)
	if err != nil {
		t.Fatal(err)
	}
	u := p.DestUsage(s, nil, 5*time.Second)[Dest{lo, dst}]
	if u == nil || u.ClosedIn != 150 || u.ClosedRecent != 120 || u.Held() != 120 {
		t.Fatalf("%+v", u)
	}
	f := u.Forecast(p.Usable(), 100, 5*time.Second, p.Reuse.Delay)
	if f.CloseRate != 120 || f.Recent != time.Second || f.Plateau != 120 {
		t.Errorf("forecast %+v, want 120/s over the last 1s", f)
	}
	// Without reuse every close stays 60 s: the window's count holds.
	u.Reuse = false
	if f := u.Forecast(p.Usable(), 100, 5*time.Second, p.Reuse.Delay); f.CloseRate != 30 || f.Recent != 0 {
		t.Errorf("no reuse: %+v, want 30/s over the window", f)
	}
}

// An established connection without timestamps rules reuse out.
func TestPortSpaceNoTimestamps(t *testing.T) {
	dst := netip.AddrPortFrom(lo, 8080)
	s := portsSnapshot(dst, lo)
	s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.Established, Local: snapshot.EndpointOf(netip.AddrPortFrom(lo, 40950)), Remote: snapshot.EndpointOf(dst), Info: snapshot.TCPOf(&snapshot.TCPInfo{})})
	p, _ := NewPortSpace(s)
	u := p.DestUsage(s, nil, 0)[Dest{lo, dst}]
	if u.Reuse || !u.NoTimestamps || u.Held() != 900 {
		t.Errorf("%+v held %d", u, u.Held())
	}
}

func TestClosedInWindow(t *testing.T) {
	dst := netip.AddrPortFrom(lo, 80)
	young, old := tw(lo, 1, dst, time.Second), tw(lo, 2, dst, 30*time.Second)
	if !ClosedInWindow(&young, nil, 5*time.Second) || ClosedInWindow(&old, nil, 5*time.Second) {
		t.Error("by timer")
	}
	// A timer that says nothing (0 left: 60 s old) falls back on the
	// previous sample.
	noTimer := snapshot.Socket{State: snapshot.TimeWait, Cookie: 7}
	was := func(st snapshot.State) PrevState {
		return func(*snapshot.Socket) (snapshot.State, bool) { return st, true }
	}
	if !ClosedInWindow(&noTimer, was(snapshot.Established), 5*time.Second) || ClosedInWindow(&noTimer, was(snapshot.TimeWait), 5*time.Second) {
		t.Error("by previous sample")
	}
}

func TestChurnSides(t *testing.T) {
	svc := netip.AddrPortFrom(lo, 8081)
	s := &snapshot.Snapshot{Procs: map[int]*snapshot.Proc{10: {Pid: 10, Command: "nginx"}, 11: {Pid: 11, Command: "upstream"}}}
	s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.Listen, Local: snapshot.EndpointOf(svc), Pids: snapshot.PidsOf(11)})
	// The service closes first: TIME_WAIT on its side, 50 in 5 s.
	for i := 0; i < 50; i++ {
		s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.TimeWait, Local: snapshot.EndpointOf(svc), Remote: snapshot.EndpointFrom(lo, uint16(50000+i)),
			Expires: uint32(57000)})
	}
	// One request in flight, seen from both ends.
	s.Sockets = append(s.Sockets,
		snapshot.Socket{State: snapshot.Established, Local: snapshot.EndpointOf(netip.AddrPortFrom(lo, 51000)), Remote: snapshot.EndpointOf(svc), Pids: snapshot.PidsOf(10)},
		snapshot.Socket{State: snapshot.Established, Local: snapshot.EndpointOf(svc), Remote: snapshot.EndpointOf(netip.AddrPortFrom(lo, 51000)), Pids: snapshot.PidsOf(11)})
	cs := ChurnOf(s, nil, 5*time.Second)
	if len(cs) != 1 {
		t.Fatalf("%d flows", len(cs))
	}
	c := cs[0]
	if c.Service != svc || c.Opener != lo || c.ClosedByService != 50 || c.ClosedByOpener != 0 || c.Rate() != 10 ||
		c.Open != 1 || !c.LocalOpener || !c.LocalService || c.Openers.Top() != 10 || c.Server.Top() != 11 || c.Lifetime() != 100*time.Millisecond {
		t.Errorf("%+v rate %v lifetime %v", c, c.Rate(), c.Lifetime())
	}
}

// TestChurnDualStack: apache2 listens on [::]:80, so its accepted sockets
// from IPv4 clients are IPv6 with IPv4-mapped addresses, while wrk's are
// IPv4. Both ends are one flow: the service's TIME_WAIT and the client's
// open connections together, opened by wrk on this host.
func TestChurnDualStack(t *testing.T) {
	mapped := netip.MustParseAddr("::ffff:127.0.0.1")
	svc6 := netip.AddrPortFrom(mapped, 80)
	s := &snapshot.Snapshot{Procs: map[int]*snapshot.Proc{10: {Pid: 10, Command: "wrk"}, 11: {Pid: 11, Command: "apache2"}}}
	s.Sockets = append(s.Sockets, snapshot.Socket{Family: 10, State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("[::]:80")), Pids: snapshot.PidsOf(11)})
	for i := 0; i < 50; i++ {
		s.Sockets = append(s.Sockets, snapshot.Socket{Family: 10, State: snapshot.TimeWait, Local: snapshot.EndpointOf(svc6),
			Remote: snapshot.EndpointFrom(mapped, uint16(50000+i)), Expires: uint32(57000)})
	}
	s.Sockets = append(s.Sockets,
		snapshot.Socket{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(netip.AddrPortFrom(lo, 51000)), Remote: snapshot.EndpointOf(netip.AddrPortFrom(lo, 80)), Pids: snapshot.PidsOf(10)},
		snapshot.Socket{Family: 10, State: snapshot.Established, Local: snapshot.EndpointOf(svc6), Remote: snapshot.EndpointOf(netip.AddrPortFrom(mapped, 51000)), Pids: snapshot.PidsOf(11)})
	cs := ChurnOf(s, nil, 5*time.Second)
	if len(cs) != 1 {
		t.Fatalf("%d flows: %+v", len(cs), cs)
	}
	c := cs[0]
	if c.Service != netip.AddrPortFrom(lo, 80) || c.Opener != lo || c.ClosedByService != 50 || c.Open != 1 || !c.LocalOpener || c.Openers.Top() != 10 {
		t.Errorf("%+v", c)
	}
	if FlowOf(mapped, svc6) != FlowOf(lo, netip.AddrPortFrom(lo, 80)) || DestOf(mapped, svc6) != DestOf(lo, netip.AddrPortFrom(lo, 80)) {
		t.Error("mapped and IPv4 keys differ")
	}
	// The other way round: a Java client's sockets are IPv6 (mapped),
	// nginx's IPv4, and nginx closes first (HTTP/1.0).
	svc := netip.AddrPortFrom(lo, 8081)
	s = &snapshot.Snapshot{Procs: map[int]*snapshot.Proc{20: {Pid: 20, Command: "java"}, 21: {Pid: 21, Command: "nginx"}}}
	s.Sockets = append(s.Sockets, snapshot.Socket{Family: 2, State: snapshot.Listen, Local: snapshot.EndpointOf(svc), Pids: snapshot.PidsOf(21)})
	for i := 0; i < 50; i++ {
		s.Sockets = append(s.Sockets, snapshot.Socket{Family: 2, State: snapshot.TimeWait, Local: snapshot.EndpointOf(svc),
			Remote: snapshot.EndpointFrom(lo, uint16(50000+i)), Expires: uint32(57000)})
	}
	s.Sockets = append(s.Sockets, snapshot.Socket{Family: 10, State: snapshot.Established, Local: snapshot.EndpointOf(netip.AddrPortFrom(mapped, 51000)),
		Remote: snapshot.EndpointOf(netip.AddrPortFrom(mapped, 8081)), Pids: snapshot.PidsOf(20)})
	cs = ChurnOf(s, nil, 5*time.Second)
	if len(cs) != 1 || cs[0].Service != svc || cs[0].ClosedByService != 50 || cs[0].Open != 1 || cs[0].Openers.Top() != 20 {
		t.Errorf("java client: %+v", cs)
	}
}

func TestListenerOf(t *testing.T) {
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{
		{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("0.0.0.0:80"))},
		{State: snapshot.Listen, Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:6379"))},
	}}
	ls := ListenersOf(s)
	acc := snapshot.Socket{State: snapshot.CloseWait, Local: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.1.2:80")), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.1.9:5000"))}
	if got := ls.Service(&acc); got != acc.Local.AddrPort() {
		t.Errorf("wildcard listener: %v", got)
	}
	cli := snapshot.Socket{State: snapshot.CloseWait, Local: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.1.2:40000")), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.1.9:80"))}
	if got := ls.Service(&cli); got.IsValid() {
		t.Errorf("client socket got service %v", got)
	}
	other := snapshot.Socket{State: snapshot.Established, Local: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.1.2:6379"))}
	if ls.Of(&other) != nil {
		t.Error("a listener on 127.0.0.1 does not accept on another address")
	}
}

// sk_acceptq_is_full: a backlog of 8 holds 9.
func TestFill(t *testing.T) {
	if (Fill{Queue: 8, Backlog: 8}).Full() || !(Fill{Queue: 9, Backlog: 8}).Full() || !(Fill{Queue: 1, Backlog: 0}).Full() {
		t.Error("full is queue > backlog")
	}
}

func TestPathJudge(t *testing.T) {
	sk := &snapshot.Socket{Remote: snapshot.EndpointOf(netip.AddrPortFrom(far, 5201))}
	if v := PathOf(100e6, nil, nil, sk).Judge(30e6 / 8); !v.Lost || v.Against != 100e6/8 {
		t.Errorf("30 of 100 Mbit/s: %+v", v)
	}
	if v := PathOf(100e6, nil, nil, sk).Judge(90e6 / 8); v.Lost {
		t.Errorf("90 of 100 Mbit/s: %+v", v)
	}
	loop := &snapshot.Socket{Remote: snapshot.EndpointOf(netip.AddrPortFrom(lo, 5201))}
	p := PathOf(0, nil, nil, loop)
	if !p.Local || p.Judge(30e9/8).Lost {
		t.Errorf("a 30 Gbit/s loopback stream is healthy: %+v", p)
	}
	if v := PathOf(0, nil, nil, sk).Judge(20e6 / 8); !v.Lost || v.Against != ReferenceRate {
		t.Errorf("unknown path: %+v", v)
	}
	rates := PathRates{far: {Rate: 100e6 / 8, Busy: time.Second, Spans: 1}, lo: {Rate: 53.6e9 / 8, Busy: time.Second, Spans: 1}}
	if p := PathOf(0, rates, nil, sk); p.Rate != 100e6/8 || p.Source != rates[far].Source() {
		t.Errorf("the measured path: %+v", p)
	}
	// On loopback a rate is a burst of memory copies, not a path: a
	// 20 Gbit/s stream is not judged against 53.6 Gbit/s.
	if p := PathOf(0, rates, nil, loop); p.Rate != 0 || p.Judge(20e9/8).Lost {
		t.Errorf("loopback judged by a delivery-rate burst: %+v", p)
	}
}

func TestJudgeBuf(t *testing.T) {
	lim := Limits{Core: 212992, Initial: 131072, Auto: 6291456}
	lock := LockSnd
	if p := JudgeBuf(32768, 0, snapshot.FlagsOf(lock), LockSnd, lim); !p.Pinned || !p.Proof {
		t.Errorf("lock bit: %+v", p)
	}
	if p := JudgeBuf(32768, 32768, snapshot.Flags{}, LockSnd, lim); !p.Pinned || p.Proof {
		t.Errorf("2 x 16K hint: %+v", p)
	}
	if p := JudgeBuf(2*212992, 0, snapshot.Flags{}, LockSnd, lim); !p.Capped {
		t.Errorf("capped: %+v", p)
	}
	if p := JudgeBuf(1234567, 0, snapshot.Flags{}, LockSnd, lim); p.Pinned {
		t.Errorf("autotuned: %+v", p)
	}
}

// At 5,000 connections/s over a 1,000-port range with tcp_tw_reuse=2,
// connect() takes TIME_WAIT ports over after 1 s: only about a second's
// worth of TIME_WAIT is ever seen, whatever the window.
func TestChurnRecycled(t *testing.T) {
	svc := netip.AddrPortFrom(lo, 6379)
	s := &snapshot.Snapshot{Sysctls: map[string]string{"net.ipv4.tcp_tw_reuse": "2"}}
	for i := 0; i < 5000; i++ {
		s.Sockets = append(s.Sockets, tw(lo, uint16(10000+i), svc, time.Duration(i)*time.Second/5000))
	}
	cs := ChurnOf(s, nil, 3*time.Second)
	if len(cs) != 1 {
		t.Fatalf("%d flows", len(cs))
	}
	if r := cs[0].Rate(); r < 4900 || r > 5100 {
		t.Errorf("rate %.0f/s, want about 5000 (the window alone says %.0f)", r, float64(cs[0].Closed())/3)
	}
}

// TestChurnOldCloses: connections the previous sample had established
// that closed in the window (a TIME_WAIT keeps the cookie) and were not
// replaced are no openings; replaced ones are steady churn.
func TestChurnOldCloses(t *testing.T) {
	svc := netip.AddrPortFrom(lo, 8091)
	old := map[uint64]bool{}
	prev := func(sk *snapshot.Socket) (snapshot.State, bool) {
		if old[sk.Cookie] {
			return snapshot.Established, true
		}
		return 0, false
	}
	build := func(closedOld, closedNew, openNew int) *snapshot.Snapshot {
		clear(old)
		s := &snapshot.Snapshot{}
		port := uint16(40000)
		add := func(st snapshot.State, wasOpen bool) {
			port++
			sk := snapshot.Socket{State: st, Local: snapshot.EndpointOf(netip.AddrPortFrom(lo, port)), Remote: snapshot.EndpointOf(svc), Cookie: uint64(port), Pids: snapshot.PidsOf(10)}
			if st == snapshot.TimeWait {
				sk.Expires, sk.Pids = 59_000, snapshot.PidList{}
			}
			old[sk.Cookie] = wasOpen
			s.Sockets = append(s.Sockets, sk)
		}
		for range closedOld {
			add(snapshot.TimeWait, true)
		}
		for range closedNew {
			add(snapshot.TimeWait, false)
		}
		for range openNew {
			add(snapshot.Established, false)
		}
		return s
	}
	for _, c := range []struct {
		name                       string
		closedOld, closedNew, open int
		rate                       float64
	}{
		{"the end of a load", 1000, 0, 0, 0},
		{"steady churn", 7, 493, 7, 100},
		{"a pool draining beside churn", 300, 500, 5, 100 + 5.0/5},
	} {
		cs := ChurnOf(build(c.closedOld, c.closedNew, c.open), prev, 5*time.Second)
		if len(cs) != 1 || cs[0].ClosedOld != c.closedOld || cs[0].OpenNew != c.open || cs[0].Rate() != c.rate {
			t.Errorf("%s: %+v, rate %v, want %v", c.name, cs, cs[0].Rate(), c.rate)
		}
	}
}

// TestChurnExchanges: the median request/response turns of the flow's
// open connections, min(data segments in, out) each.
func TestChurnExchanges(t *testing.T) {
	svc := netip.AddrPortFrom(lo, 8080)
	s := &snapshot.Snapshot{}
	for i := range 30 {
		s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.TimeWait, Local: snapshot.EndpointFrom(lo, uint16(41000+i)), Remote: snapshot.EndpointOf(svc), Expires: 59_000})
	}
	for i, segs := range [][2]uint32{{900, 1000}, {3, 400}, {500, 480}} {
		s.Sockets = append(s.Sockets, snapshot.Socket{State: snapshot.Established, Local: snapshot.EndpointFrom(lo, uint16(42000+i)), Remote: snapshot.EndpointOf(svc),
			Info: snapshot.TCPOf(&snapshot.TCPInfo{Len: snapshot.EndDataSegsOut, DataSegsIn: segs[0], DataSegsOut: segs[1]})})
	}
	cs := ChurnOf(s, nil, 5*time.Second)
	if len(cs) != 1 || cs[0].Exchanges != 480 {
		t.Errorf("%+v", cs)
	}
}
