// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// path is a client and a server namespace joined by the lab's emulated
// link (a delay line in this process plus tbf), for conditions that need
// a round trip loopback does not have.
type path struct {
	client, server netns.NS
	srv, cli       netip.Addr // the server's and the client's address
	link           *linkemu.Link
	router         string // the router namespace's name
}

// newPath builds the lab topology and starts the link; both are removed
// at cleanup (after the sockets, which are registered later).
func newPath(t *testing.T, p linkemu.Params) path {
	t.Helper()
	testns.NeedRoot(t)
	tp, err := topo.Build(topo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tp.Close(); err != nil {
			t.Error(err)
		}
	})
	l, err := linkemu.Start(tp, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st := l.Stats()
		t.Logf("link: %d packets, %d lost, hold error p99 %v", st.Packets, st.Lost, st.HoldErrP99)
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	var pt path
	pt.link, pt.srv, pt.cli, pt.router = l, tp.ServerAddrs[0], tp.ClientAddrs[0], tp.Router
	for _, x := range []struct {
		name string
		ns   *netns.NS
	}{{tp.Client, &pt.client}, {tp.Server, &pt.server}} {
		if *x.ns, err = netns.Default().Named(x.name); err != nil {
			t.Fatal(err)
		}
	}
	return pt
}

// setBuf returns a setup that pins opt (SO_SNDBUF or SO_RCVBUF) to n
// bytes; n == 0 leaves the socket autotuned.
func setBuf(opt, n int) func(fd int) error {
	return func(fd int) error {
		if n == 0 {
			return nil
		}
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, n)
	}
}

// pairAcross connects a client in p.client to a listener in p.server,
// after clientSetup and serverSetup ran on the client socket and the
// listener (accepted sockets inherit its buffers). Both fds are closed at
// cleanup. It returns the client's and the server's address as the client
// sees them.
func pairAcross(t *testing.T, p path, clientSetup, serverSetup func(fd int) error) (client, server int, local, srv netip.AddrPort) {
	t.Helper()
	var lfd int
	In(t, p.server, func() error {
		var err error
		lfd, srv, err = listenOn(t, p.srv, 64, serverSetup)
		return err
	})
	In(t, p.client, func() error {
		var err error
		client, err = Dial(srv, clientSetup)
		return err
	})
	Close(t, client)
	server, err := Accept(lfd)
	if err != nil {
		t.Fatal(err)
	}
	Close(t, server)
	sa, err := unix.Getsockname(client)
	if err != nil {
		t.Fatal(err)
	}
	s4 := sa.(*unix.SockaddrInet4)
	return client, server, netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), uint16(s4.Port)), srv
}

// bulkCapped builds a 40 ms, 100 Mbit/s path (BDP 500K), sets sysctl
// (key=value) in the server's namespace when server, else the client's,
// and starts an autotuned bulk flow from the client to the server
// (pairAcross, a writer and a prompt reader); after a second out of slow
// start it returns the path and the sender's address.
func bulkCapped(t *testing.T, sysctl string, server bool) (path, netip.AddrPort) {
	t.Helper()
	p := newPath(t, linkemu.Params{RTT: 40 * time.Millisecond, RateUp: 100e6, RateDown: 100e6})
	ns := p.client
	if server {
		ns = p.server
	}
	Sysctl(t, ns, sysctl)
	c, s, local, _ := pairAcross(t, p, nil, nil)
	loop(t, []int{c, s}, writer(c))
	loop(t, []int{c, s}, reader(s, 256<<10, 0))
	time.Sleep(time.Second)
	return p, local
}

// raisesMax: fx sets the three-value sysctl name (tcp_rmem, tcp_wmem)
// with a maximum above above.
func raisesMax(fx diag.Fix, name string, above int) bool {
	for _, sc := range fx.Sysctls {
		if v := strings.Fields(sc.Value); sc.Name == name && len(v) == 3 {
			if m, err := strconv.Atoi(v[2]); err == nil && m > above {
				return true
			}
		}
	}
	return false
}

// acked is the rate (bits/s) at which the connection from local was acked
// between the two samples, read from tcp_info.bytes_acked; 0 when either
// sample lacks it.
func acked(prev, cur *snapshot.Snapshot, local netip.AddrPort) float64 {
	a, b := established(prev, local), established(cur, local)
	d := cur.Taken.Sub(prev.Taken).Seconds()
	if a == nil || b == nil || d <= 0 {
		return 0
	}
	var ab, bb snapshot.TCPInfo
	ai, bi := a.TCP(&ab), b.TCP(&bb)
	if bi.BytesAcked < ai.BytesAcked {
		return 0
	}
	return float64(bi.BytesAcked-ai.BytesAcked) * 8 / d
}

// established finds the connection from local in s with its tcp_info.
func established(s *snapshot.Snapshot, local netip.AddrPort) *snapshot.Socket {
	for i := range s.Sockets {
		if sk := &s.Sockets[i]; sk.Local.AddrPort() == local && sk.State == snapshot.Established && sk.HasTCP() {
			return sk
		}
	}
	return nil
}

// logSender logs what the transfer rules read of the sender from local in
// each sample, to tell a miss's cause from the test's output.
func logSender(t *testing.T, local netip.AddrPort, samples ...*snapshot.Snapshot) {
	t.Helper()
	for i, s := range samples {
		sk := established(s, local)
		if sk == nil {
			t.Logf("sample %d: no established socket from %s", i+1, local)
			continue
		}
		ti := sk.TCP(new(snapshot.TCPInfo))
		v := fmt.Sprintf("sample %d: unacked %d x mss %d, cwnd %d, snd_wnd %d, rtt %dus, busy %dus, rwnd_limited %dus, sndbuf_limited %dus, acked %d",
			i+1, ti.Unacked, ti.SndMSS, ti.SndCwnd, ti.SndWnd, ti.RTT, ti.BusyTime, ti.RwndLimited, ti.SndbufLimited, ti.BytesAcked)
		if m := sk.Mem; m != nil {
			v += fmt.Sprintf(", sndbuf %d, wmem_queued %d", m.Sndbuf, m.WmemQueued)
		}
		t.Log(v)
	}
}

// received is the rate (bits/s) at which the end of the connection to or
// from client that lives in the sampled namespace took data between the
// two samples (tcp_info.bytes_received); 0 when either sample lacks it.
func received(prev, cur *snapshot.Snapshot, client netip.AddrPort) float64 {
	find := func(s *snapshot.Snapshot) *snapshot.Socket {
		for i := range s.Sockets {
			sk := &s.Sockets[i]
			if (sk.Local.AddrPort() == client || sk.Remote.AddrPort() == client) && sk.State == snapshot.Established && sk.HasTCP() {
				return sk
			}
		}
		return nil
	}
	a, b := find(prev), find(cur)
	d := cur.Taken.Sub(prev.Taken).Seconds()
	if a == nil || b == nil || d <= 0 {
		return 0
	}
	var ab, bb snapshot.TCPInfo
	ai, bi := a.TCP(&ab), b.TCP(&bb)
	if bi.BytesReceived < ai.BytesReceived {
		return 0
	}
	return float64(bi.BytesReceived-ai.BytesReceived) * 8 / d
}

// sample is Sample that also returns the first snapshot.
func sample(t *testing.T, ns netns.NS, interval time.Duration) (Report, []byte, *snapshot.Snapshot, *snapshot.Snapshot) {
	t.Helper()
	prev := Collect(ns)
	time.Sleep(interval)
	cur := Collect(ns)
	r, b := Diagnose(t, prev, cur)
	return r, b, prev, cur
}
