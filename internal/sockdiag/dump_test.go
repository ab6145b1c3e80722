// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// scenario is a known set of sockets built inside a namespace.
type scenario struct {
	l4, l6, ld             uint16 // listener ports: 127.0.0.1, [::1], [::] dual-stack
	lsyn                   uint16 // 127.0.0.1 with TCP_DEFER_ACCEPT: holds a SYN-RECV
	c4, s4, c6, s6, cm, sm int    // connected pairs; c6 has shut down writing
	queued                 int    // connections waiting in l4's accept queue
	tw                     int    // connections closed client-first (TIME_WAIT)
}

// build creates the scenario's sockets; they close at test cleanup.
func build(t testing.TB, f *fds) *scenario {
	t.Helper()
	sc := &scenario{queued: 3, tw: 3}
	var l4, l6, ld int
	l4, sc.l4 = f.listen(mustAddrPort("127.0.0.1", 0), 50)
	l6, sc.l6 = f.listen(mustAddrPort("::1", 0), 50)
	ld, sc.ld = f.listen(mustAddrPort("::", 0), 50)

	// A small pinned receive buffer on the client gives it a smaller
	// rcv_wscale than its peer, which tells the wscale nibbles apart.
	sc.c4 = f.connect(mustAddrPort("127.0.0.1", sc.l4), 4096)
	sc.s4 = f.accept(l4)
	exchange(t, sc.c4, sc.s4, 1000)

	sc.c6 = f.connect(mustAddrPort("::1", sc.l6), 0)
	sc.s6 = f.accept(l6)
	exchange(t, sc.c6, sc.s6, 1000)
	if err := unix.Shutdown(sc.c6, unix.SHUT_WR); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	sc.cm = f.connect(mustAddrPort("127.0.0.1", sc.ld), 0)
	sc.sm = f.accept(ld)

	for range sc.tw {
		c := f.connect(mustAddrPort("127.0.0.1", sc.l4), 0)
		s := f.accept(l4)
		unix.Close(c) // the side closing first holds TIME_WAIT
		unix.Close(s)
	}
	for range sc.queued {
		f.connect(mustAddrPort("127.0.0.1", sc.l4), 0)
	}
	// With TCP_DEFER_ACCEPT the listener ignores the handshake's final ACK
	// until data comes, so the request socket stays (NEW_SYN_RECV in the
	// kernel, reported by sock_diag as SYN-RECV).
	var lsyn int
	lsyn, sc.lsyn = f.listen(mustAddrPort("127.0.0.1", 0), 50)
	if err := unix.SetsockoptInt(lsyn, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 30); err != nil {
		t.Fatalf("TCP_DEFER_ACCEPT: %v", err)
	}
	f.connect(mustAddrPort("127.0.0.1", sc.lsyn), 0)
	return sc
}

func dumpAll(t testing.TB, ns *netns, opts Options) []*snapshot.Socket {
	t.Helper()
	var out []*snapshot.Socket
	var err error
	ns.do(func() {
		err = Dump(opts, func(sk *snapshot.Socket) error { out = append(out, sk); return nil })
	})
	if err != nil {
		t.Fatalf("Dump: %v", err)
	}
	return out
}

func find(socks []*snapshot.Socket, st snapshot.State, local, remote netip.AddrPort) *snapshot.Socket {
	for _, s := range socks {
		if s.State == st && s.Local.AddrPort() == local && (!remote.IsValid() || s.Remote.AddrPort() == remote) {
			return s
		}
	}
	return nil
}

func TestDumpNetns(t *testing.T) {
	ns := newNetns(t)
	f := newFDs(t)
	var sc *scenario
	var bound uint16
	ns.do(func() {
		sc = build(t, f)
		// Bound, neither listening nor connected: dumped only with the
		// BOUND-INACTIVE bit, and then as CLOSE.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.add(fd)
		if err := unix.Bind(fd, sockaddr(mustAddrPort("127.0.0.1", 0))); err != nil {
			t.Fatal(err)
		}
		bound = localPort(t, fd)
	})

	var socks []*snapshot.Socket
	// FINs and their ACKs settle asynchronously (delayed ACKs).
	eventually(t, "3 TIME-WAIT sockets and a FIN-WAIT-2", func() bool {
		socks = dumpAll(t, ns, Options{Info: true, Mem: true})
		n, fw2 := 0, 0
		for _, s := range socks {
			if s.State == snapshot.TimeWait && s.Remote.Port() == sc.l4 {
				n++
			}
			if s.State == snapshot.FinWait2 {
				fw2++
			}
		}
		return n == sc.tw && fw2 == 1
	})

	lo4, lo6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	// Listeners: Send-Q is the backlog, Recv-Q the accept queue.
	for _, l := range []struct {
		local netip.AddrPort
		recvQ uint32
		fam   uint8
	}{
		{netip.AddrPortFrom(lo4, sc.l4), uint32(sc.queued), unix.AF_INET},
		{netip.AddrPortFrom(lo6, sc.l6), 0, unix.AF_INET6},
		{netip.AddrPortFrom(netip.IPv6Unspecified(), sc.ld), 0, unix.AF_INET6},
	} {
		s := find(socks, snapshot.Listen, l.local, netip.AddrPort{})
		if s == nil {
			t.Errorf("listener %v not found", l.local)
			continue
		}
		if s.SendQ != 50 || s.RecvQ != l.recvQ || s.Family != l.fam {
			t.Errorf("listener %v: family %d Recv-Q %d Send-Q %d, want %d %d 50", l.local, s.Family, s.RecvQ, s.SendQ, l.fam, l.recvQ)
		}
		if s.TCP(nil) == nil || s.TCP(nil).Len < snapshot.SizeKnown || s.TCP(nil).State != uint8(snapshot.Listen) {
			t.Errorf("listener %v: tcp_info %+v", l.local, s.TCP(nil))
		}
	}

	// Connected sockets, checked against what the kernel says per fd.
	for _, c := range []struct {
		name          string
		fd            int
		st            snapshot.State
		local, remote netip.AddrPort
		shut          uint8
	}{
		{"c4", sc.c4, snapshot.Established, netip.AddrPort{}, netip.AddrPortFrom(lo4, sc.l4), 0},
		{"s4", sc.s4, snapshot.Established, netip.AddrPortFrom(lo4, sc.l4), netip.AddrPort{}, 0},
		{"c6", sc.c6, snapshot.FinWait2, netip.AddrPort{}, netip.AddrPortFrom(lo6, sc.l6), 2},
		{"s6", sc.s6, snapshot.CloseWait, netip.AddrPortFrom(lo6, sc.l6), netip.AddrPort{}, 1},
		{"sm", sc.sm, snapshot.Established, netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), sc.ld), netip.AddrPort{}, 0},
	} {
		cookie, err := unix.GetsockoptUint64(c.fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		if err != nil {
			t.Fatalf("SO_COOKIE: %v", err)
		}
		var s *snapshot.Socket
		for _, x := range socks {
			if x.Cookie == cookie {
				s = x
			}
		}
		if s == nil {
			t.Errorf("%s: no socket with cookie %#x", c.name, cookie)
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(c.fd, &st); err != nil {
			t.Fatal(err)
		}
		if s.State != c.st || uint64(s.Inode) != st.Ino || s.UID != 0 {
			t.Errorf("%s: state %v inode %d uid %d, want %v %d 0", c.name, s.State, s.Inode, s.UID, c.st, st.Ino)
		}
		if c.local.IsValid() && s.Local.AddrPort() != c.local || c.remote.IsValid() && s.Remote.AddrPort() != c.remote {
			t.Errorf("%s: %v -> %v, want %v -> %v", c.name, s.Local, s.Remote, c.local, c.remote)
		}
		if !s.Shutdown.Known() || s.Shutdown.Bits() != c.shut {
			t.Errorf("%s: shutdown %v, want %d", c.name, s.Shutdown, c.shut)
		}
		in := s.TCP(nil)
		if in == nil || in.Len < snapshot.SizeKnown || in.RTT == 0 || in.SndCwnd == 0 || in.SndMSS == 0 {
			t.Errorf("%s: tcp_info %+v", c.name, in)
			continue
		}
		if in.State != uint8(c.st) {
			t.Errorf("%s: tcp_info state %d, want %d", c.name, in.State, c.st)
		}
		if s.Mem == nil || s.Mem.Sndbuf == 0 || s.Mem.Rcvbuf == 0 || s.CC.IsZero() {
			t.Errorf("%s: mem %+v cc %q", c.name, s.Mem, s.CC)
		}
	}
	// wscale: the client pinned a 4 KiB receive buffer, so it scales its
	// own window (rcv_wscale) less than the server does, and the server
	// sees that as its snd_wscale.
	var c4, s4 *snapshot.Socket
	for _, s := range socks {
		if s.State == snapshot.Established && s.Remote.Port() == sc.l4 && s.TCP(nil) != nil && s.Mem != nil && s.Mem.Rcvbuf < 20000 {
			c4 = s
		}
	}
	for _, s := range socks {
		if s.State == snapshot.Established && s.Local.Port() == sc.l4 && c4 != nil && s.Remote == c4.Local {
			s4 = s
		}
	}
	if c4 == nil || s4 == nil {
		t.Fatalf("pinned pair not found: %v %v", c4, s4)
	}
	if !(c4.TCP(nil).RcvWscale < c4.TCP(nil).SndWscale) || c4.TCP(nil).RcvWscale != s4.TCP(nil).SndWscale || c4.TCP(nil).SndWscale != s4.TCP(nil).RcvWscale {
		t.Errorf("wscale: client snd %d rcv %d, server snd %d rcv %d", c4.TCP(nil).SndWscale, c4.TCP(nil).RcvWscale, s4.TCP(nil).SndWscale, s4.TCP(nil).RcvWscale)
	}

	// TIME_WAIT mini sockets: no tcp_info, no inode, timer 3 (timewait).
	for _, s := range socks {
		if s.State == snapshot.TimeWait {
			if s.TCP(nil) != nil || s.Mem != nil || s.Inode != 0 || s.Timer != 3 || s.Expires == 0 || s.Expires > 60000 {
				t.Errorf("TIME-WAIT %v: info %v mem %v inode %d timer %d expires %d", s.Local, s.TCP(nil), s.Mem, s.Inode, s.Timer, s.Expires)
			}
		}
	}

	// Request sockets: SYN-RECV (not NEW-SYN-RECV), timer 1 (SYN-ACK retransmit).
	syn := find(socks, snapshot.SynRecv, mustAddrPort("127.0.0.1", sc.lsyn), netip.AddrPort{})
	if syn == nil || syn.TCP(nil) != nil || syn.Mem != nil || syn.Inode != 0 || syn.Timer != 1 || syn.Cookie == 0 {
		t.Errorf("SYN-RECV: %+v", syn)
	}
	for _, st := range []snapshot.State{snapshot.SynRecv, snapshot.NewSynRecv} {
		if got := dumpAll(t, ns, Options{States: 1 << st}); len(got) != 1 || got[0].State != snapshot.SynRecv {
			t.Errorf("States 1<<%v: %d sockets", st, len(got))
		}
	}

	if b := find(socks, snapshot.Close, mustAddrPort("127.0.0.1", bound), netip.AddrPort{}); b == nil || b.TCP(nil) != nil {
		t.Errorf("bound-inactive socket: %+v", b)
	}
	for _, s := range dumpAll(t, ns, Options{States: ^uint32(0) &^ (1 << snapshot.BoundInactive)}) {
		if s.Local.Port() == bound {
			t.Errorf("bound socket dumped without the BOUND-INACTIVE bit: %+v", s)
		}
	}

	// Filters: one family, one state, no extras.
	only := dumpAll(t, ns, Options{Families: []uint8{unix.AF_INET6}, States: 1 << snapshot.Listen})
	if len(only) != 2 {
		t.Errorf("AF_INET6 LISTEN dump: %d sockets, want 2", len(only))
	}
	for _, s := range only {
		if s.Family != unix.AF_INET6 || s.State != snapshot.Listen || s.TCP(nil) != nil || s.Mem != nil || !s.CC.IsZero() {
			t.Errorf("filtered dump: %+v", s)
		}
	}

	// An error from fn stops the dump and comes back unchanged.
	stop := errors.New("stop")
	n := 0
	var err error
	ns.do(func() { err = Dump(Options{}, func(*snapshot.Socket) error { n++; return stop }) })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("Dump with failing fn: err %v after %d calls", err, n)
	}
}

// TestDumpLoopback needs no root: sock_diag lets anyone dump the sockets of
// their own namespace. It finds a connection of its own by cookie.
func TestDumpLoopback(t *testing.T) {
	f := newFDs(t)
	lfd, port := f.listen(mustAddrPort("127.0.0.1", 0), 7)
	c := f.connect(mustAddrPort("127.0.0.1", port), 0)
	s := f.accept(lfd)
	exchange(t, c, s, 100)
	cookie, err := unix.GetsockoptUint64(c, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		t.Fatalf("SO_COOKIE: %v", err)
	}
	var got, listener *snapshot.Socket
	err = Dump(Options{Families: []uint8{unix.AF_INET}, Info: true, Mem: true}, func(sk *snapshot.Socket) error {
		if sk.Cookie == cookie {
			got = sk
		}
		if sk.State == snapshot.Listen && sk.Local.AddrPort() == mustAddrPort("127.0.0.1", port) {
			listener = sk
		}
		return nil
	})
	if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
		t.Skipf("no NETLINK_SOCK_DIAG here: %v", err)
	}
	if err != nil {
		t.Fatalf("Dump: %v", err)
	}
	if got == nil || got.State != snapshot.Established || got.Remote.Port() != port || got.UID != uint32(unix.Geteuid()) {
		t.Fatalf("own connection: %+v", got)
	}
	if got.TCP(nil) == nil || got.TCP(nil).Len < snapshot.SizeKnown || got.TCP(nil).RTT == 0 || got.TCP(nil).BytesAcked != 101 || got.Mem == nil {
		t.Errorf("own connection: tcp_info %+v mem %+v", got.TCP(nil), got.Mem)
	}
	if listener == nil || listener.SendQ != 7 {
		t.Errorf("own listener: %+v", listener)
	}
}
