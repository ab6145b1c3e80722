// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procnet"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// openAll opens every program and fails if one that this kernel should
// run is missing (every one loads on Linux 6.11 and later with BTF).
func openAll(t *testing.T) *Source { return openWith(t, Options{}) }

// openWith is openAll with opts.
func openWith(t *testing.T, opts Options) *Source {
	t.Helper()
	testns.NeedRoot(t)
	src, err := Open(opts)
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := src.Close(); err != nil {
			t.Error(err)
		}
	})
	for _, m := range src.Missing() {
		t.Errorf("program not running: %v", m)
	}
	return src
}

// collectEvents gathers events of namespace ns until done says enough
// or the deadline passes.
func collectEvents(t *testing.T, ch <-chan Event, ns uint64, within time.Duration, done func([]Event) bool) []Event {
	t.Helper()
	var got []Event
	deadline := time.After(within)
	for !done(got) {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatal("event stream closed early")
			}
			if e.Netns == ns {
				got = append(got, e)
			}
		case <-deadline:
			return got
		}
	}
	return got
}

// nsCounters reads the kernel's own counters of namespace ns
// (/proc/net/snmp and netstat as a thread in it sees them, "Tcp.RetransSegs"
// and so on): what the kernel did there, to hold the programs' counts to.
func nsCounters(t *testing.T, ns netns.NS) map[string]int64 {
	t.Helper()
	var s snapshot.Snapshot
	if err := netns.Do(ns, func() error { procnet.Default().Fill(&s); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Errors {
		t.Fatalf("counters of %s: %+v", ns.Name, e)
	}
	return s.Counters
}

func countKind(es []Event, k EventKind) int {
	n := 0
	for _, e := range es {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// TestEventsLingerReset closes a connection with SO_LINGER(0): the
// closer sends a reset in its own context, the server receives it. Both
// reach the stream and the counters, with the reason from BTF.
func TestEventsLingerReset(t *testing.T) {
	src := openAll(t)
	ns := testns.New(t, "bpfrst")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := src.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Events(ctx); err == nil {
		t.Error("a second stream started")
	}
	const n = 5
	start := time.Now()
	var srv netip.AddrPort
	err = netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:8080")
		if err != nil {
			return err
		}
		defer func() { _ = ln.Close() }()
		srv = netip.MustParseAddrPort(ln.Addr().String())
		accepted := make(chan net.Conn, n)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		for range n {
			c, err := net.Dial("tcp4", srv.String())
			if err != nil {
				return err
			}
			sc := <-accepted
			if err := c.(*net.TCPConn).SetLinger(0); err != nil {
				return err
			}
			_ = c.Close()
			var b [1]byte
			_, rerr := sc.Read(b[:])
			_ = sc.Close()
			if !errors.Is(rerr, syscall.ECONNRESET) {
				return fmt.Errorf("server read after the linger close: %w, want ECONNRESET", rerr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := collectEvents(t, ch, ns.Inode, 3*time.Second, func(es []Event) bool {
		return countKind(es, ResetSent) >= n && countKind(es, ResetReceived) >= n
	})
	pid := os.Getpid()
	var sent, recv int
	for _, e := range got {
		t.Logf("%+v", e)
		switch e.Kind {
		case ResetSent:
			if e.Remote == srv && e.Pid == pid && e.Comm == comm(t) && fromProcess(e.Reason) {
				sent++
			}
		case ResetReceived:
			if e.Local == srv && e.Reason == "" && e.Pid == 0 {
				recv++
			}
		}
		if e.Time.Before(start.Add(-time.Second)) || e.Time.After(time.Now().Add(time.Second)) {
			t.Errorf("event time %v not within the test's run (started %v)", e.Time, start)
		}
	}
	if sent != n || recv != n {
		t.Errorf("%d resets sent by pid %d to %v with a process reason, %d received on %v; want %d each", sent, pid, srv, recv, srv, n)
	}
	r, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	var cSent, cRecv uint64
	for _, rs := range r.Resets[ns.Inode] {
		t.Logf("%+v", rs)
		if rs.Sent && rs.Peer == srv && rs.LocalPort == 0 && fromProcess(rs.Reason) {
			cSent += rs.Count
		}
		// The server's sockets were accepted: keyed by client address
		// and the listening port.
		if !rs.Sent && rs.Peer == netip.MustParseAddrPort("127.0.0.1:0") && rs.LocalPort == 8080 {
			cRecv += rs.Count
		}
	}
	if cSent != n || cRecv != n {
		t.Errorf("counted %d resets sent to %v and %d received on :8080, want %d each", cSent, srv, cRecv, n)
	}
	cancel()
	for range ch {
	}
}

// TestEventsFailedConnect: a connect() without a free port reaches the
// stream with the caller and the destination.
func TestEventsFailedConnect(t *testing.T) {
	src := openAll(t)
	ns := testns.New(t, "bpfport")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := src.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testns.Run(t, "ip", "netns", "exec", ns.Name, "sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40001")
	failed := 0
	err = netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.2:9090")
		if err != nil {
			return err
		}
		defer func() { _ = ln.Close() }()
		held, n, err := connectUntilNoPort(netip.MustParseAddrPort("127.0.0.2:9090"), 6)
		defer func() {
			for _, fd := range held {
				_ = syscall.Close(fd)
			}
		}()
		failed = n
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if failed == 0 {
		t.Fatal("no connect failed: the port range did not bite")
	}
	got := collectEvents(t, ch, ns.Inode, 3*time.Second, func(es []Event) bool { return countKind(es, FailedConnect) >= failed })
	n := 0
	for _, e := range got {
		if e.Kind == FailedConnect && e.Pid == os.Getpid() && e.Remote == netip.MustParseAddrPort("127.0.0.2:9090") && e.Reason == "EADDRNOTAVAIL" {
			n++
		}
	}
	if n != failed {
		t.Errorf("%d failed-connect events from this process to 127.0.0.2:9090, want %d: %+v", n, failed, got)
	}
}

// TestEventsListenOverflow fills a listener with backlog 1 that never
// accepts: handshakes that complete against the full queue are dropped
// with TCP_LISTEN_OVERFLOW, counted under that listener, and the clients'
// SYNs are retransmitted (the client side of the full queue).
func TestEventsListenOverflow(t *testing.T) {
	src := openAll(t)
	ns := testns.New(t, "bpfovf")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := src.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listener := netip.MustParseAddrPort("127.0.0.1:8080")
	const clients = 40
	var fds []int
	defer func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	}()
	err = netns.Do(ns, func() error {
		lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, lfd)
		if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Port: 8080, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		// TCP_DEFER_ACCEPT: a bare final ACK leaves the handshake
		// pending until data arrives, so every client's handshake is
		// answered while the queue is still empty; their first data then
		// finds it full (on loopback a plain handshake completes before
		// the next SYN, and SYNs to a full queue are refused silently).
		if err := syscall.SetsockoptInt(lfd, syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, 5); err != nil {
			return err
		}
		if err := syscall.Listen(lfd, 1); err != nil {
			return err
		}
		sa := &syscall.SockaddrInet4{Port: 8080, Addr: [4]byte{127, 0, 0, 1}}
		var clientFds []int
		for range clients {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			clientFds = append(clientFds, fd)
			if err := syscall.Connect(fd, sa); err != nil && !errors.Is(err, syscall.EINPROGRESS) {
				return err
			}
		}
		time.Sleep(50 * time.Millisecond)
		for _, fd := range clientFds {
			_, _ = syscall.Write(fd, []byte("hello"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// SYN retransmits start 1 s after the first SYN, SYN-ACK retransmits
	// (and the ACKs they draw) also after 1 s.
	got := collectEvents(t, ch, ns.Inode, 4*time.Second, func(es []Event) bool {
		return countKind(es, ListenOverflow) > 0 && countKind(es, SynRetransmit) > 0
	})
	var ovf, syn int
	for _, e := range got {
		if e.Kind == ListenOverflow && e.Local == listener && e.Reason == "TCP_LISTEN_OVERFLOW" && e.Remote.Addr() == listener.Addr() {
			ovf++
		}
		if e.Kind == SynRetransmit && e.Remote == listener && e.Local.Port() != 0 {
			syn++
		}
	}
	t.Logf("%d events: %d listen overflows at %v, %d SYN retransmits to it", len(got), ovf, listener, syn)
	if ovf == 0 || syn == 0 {
		t.Errorf("want listen overflow and SYN retransmit events for %v: %+v", listener, got)
	}
	r, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	var drops, synCount uint64
	for _, d := range r.Drops[ns.Inode] {
		t.Logf("%+v", d)
		if d.Reason == "TCP_LISTEN_OVERFLOW" && d.Listener == listener {
			drops += d.Count
		}
	}
	for _, rt := range r.Retransmits[ns.Inode] {
		t.Logf("%+v", rt)
		if rt.SYN && rt.Peer == listener && rt.LocalPort == 0 {
			synCount += rt.Count
		}
	}
	if drops < uint64(ovf) || synCount < uint64(syn) {
		t.Errorf("counted %d overflow drops at %v and %d SYN retransmits to it; the stream saw %d and %d", drops, listener, synCount, ovf, syn)
	}
	for _, d := range r.Drops[ns.Inode] {
		if d.Reason == "QUEUE_PURGE" || d.Reason == "NOT_SPECIFIED" {
			t.Errorf("noise counted: %+v", d)
		}
	}
}

// TestRetransmitsPerPeer sends data across a veth between two namespaces
// of its own while the receiver's ACKs go to a blackhole route: the
// sender retransmits, counted under the receiver's address and port,
// exactly as often as the kernel's own counter of the sender's namespace
// (Tcp RetransSegs) says.
//
// The blackhole stays until the kernel has retransmitted twice (30 s at
// most). With an RTO of 200 ms that takes about 0.6 s, but a fixed 1.5 s
// saw no retransmit at all in 3 of 60 rounds beside a nice-19 build of
// std: the kernel's RetransSegs stayed 0 too, and its TCPTimeouts was
// already 1 before the blackhole (a timeout while the connection was
// set up, after which the kernel may start from an RTO of 3 s, RFC 6298
// 5.7: two retransmits then take 9 s; one such run took 12.5 s here).
func TestRetransmitsPerPeer(t *testing.T) {
	src := openAll(t)
	a, b := testns.New(t, "bpfrta"), testns.New(t, "bpfrtb")
	testns.Run(t, "ip", "-n", a.Name, "link", "add", "rt0", "type", "veth", "peer", "name", "rt1", "netns", b.Name)
	testns.Run(t, "ip", "-n", a.Name, "addr", "add", "198.18.0.1/24", "dev", "rt0")
	testns.Run(t, "ip", "-n", b.Name, "addr", "add", "198.18.0.2/24", "dev", "rt1")
	testns.Run(t, "ip", "-n", a.Name, "link", "set", "rt0", "up")
	testns.Run(t, "ip", "-n", b.Name, "link", "set", "rt1", "up")
	peer := netip.MustParseAddrPort("198.18.0.2:5201")
	var ln net.Listener
	err := netns.Do(b, func() error {
		var err error
		ln, err = net.Listen("tcp4", peer.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	var c *net.TCPConn
	err = netns.Do(a, func() error {
		nc, err := net.DialTimeout("tcp4", peer.String(), 5*time.Second)
		if err == nil {
			c = nc.(*net.TCPConn)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	unacked(t, c, 5*time.Second)
	if _, err := src.Read(); err != nil { // start from zero
		t.Fatal(err)
	}
	before := nsCounters(t, a)["Tcp.RetransSegs"]
	testns.Run(t, "ip", "-n", b.Name, "route", "add", "blackhole", "198.18.0.1/32")
	if _, err := c.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	var kernel int64
	for end := time.Now().Add(30 * time.Second); kernel < 2 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		kernel = nsCounters(t, a)["Tcp.RetransSegs"] - before
	}
	testns.Run(t, "ip", "-n", b.Name, "route", "del", "blackhole", "198.18.0.1/32")
	if kernel < 2 {
		t.Fatalf("the kernel retransmitted %d segments in 30 s with the ACKs blackholed, want at least 2", kernel)
	}
	// Nothing unacknowledged: nothing more to retransmit, both counts
	// are final.
	unacked(t, c, 10*time.Second)
	kernel = nsCounters(t, a)["Tcp.RetransSegs"] - before
	r, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, rt := range r.Retransmits[a.Inode] {
		t.Logf("%+v", rt)
		if rt.Peer == peer && !rt.SYN && rt.LocalPort == 0 {
			n += rt.Count
		}
	}
	t.Logf("the kernel retransmitted %d segments (Tcp RetransSegs of the sender's namespace); skipped %v, lost %d", kernel, r.Skipped, r.LostRetransmits)
	if n != uint64(kernel) {
		t.Errorf("%d retransmits to %v counted in the sender's namespace, want %d (the kernel's RetransSegs there)", n, peer, kernel)
	}
	if len(r.Retransmits[b.Inode]) != 0 {
		t.Errorf("retransmits counted in the receiver's namespace: %+v", r.Retransmits[b.Inode])
	}
}

// unacked waits until TCP_INFO of c shows nothing unacknowledged, within
// the given time.
func unacked(t *testing.T, c *net.TCPConn, within time.Duration) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		var ti *unix.TCPInfo
		var gerr error
		if err := rc.Control(func(fd uintptr) { ti, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatal(gerr)
		}
		if ti.Unacked == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d segments still unacknowledged after %v", ti.Unacked, within)
		}
	}
}

// TestNoRingWithoutStream: without a running Events stream the programs
// put nothing in the ring (check and serve pay nothing for it); the
// counters still count.
func TestNoRingWithoutStream(t *testing.T) {
	src := openAll(t)
	ns := testns.New(t, "bpfnostream")
	err := netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:8080")
		if err != nil {
			return err
		}
		defer func() { _ = ln.Close() }()
		c, err := net.Dial("tcp4", "127.0.0.1:8080")
		if err != nil {
			return err
		}
		sc, err := ln.Accept()
		if err != nil {
			return err
		}
		defer func() { _ = sc.Close() }()
		_ = c.(*net.TCPConn).SetLinger(0)
		return c.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := src.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := collectEvents(t, ch, ns.Inode, 300*time.Millisecond, func([]Event) bool { return false }); len(got) != 0 {
		t.Errorf("events from before the stream started: %+v", got)
	}
	r, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	var sent uint64
	for _, rs := range r.Resets[ns.Inode] {
		if rs.Sent {
			sent += rs.Count
		}
	}
	if sent != 1 || r.LostEvents != 0 {
		t.Errorf("%d resets sent counted (want 1), %d ring events lost (want 0)", sent, r.LostEvents)
	}
}
