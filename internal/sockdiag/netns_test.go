// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netns is a named network namespace owned by one test, with a goroutine
// locked to a thread inside it that runs closures.
type netns struct {
	name string
	run  chan func()
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, sock_diag of other namespaces)")
	}
}

func newNetns(t testing.TB) *netns {
	t.Helper()
	requireRoot(t)
	var r [4]byte
	rand.Read(r[:])
	name := "tdsd-" + hex.EncodeToString(r[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s link set lo up: %v: %s", name, err, out)
	}
	n := &netns{name: name, run: make(chan func())}
	ready := make(chan error)
	go func() {
		// Never unlocked: the thread dies with the goroutine.
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + name)
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		ready <- err
		if err != nil {
			return
		}
		for fn := range n.run {
			fn()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("enter netns %s: %v", name, err)
	}
	t.Cleanup(func() { close(n.run) })
	return n
}

// do runs f on the thread inside the namespace and waits for it.
func (n *netns) do(f func()) {
	done := make(chan struct{})
	n.run <- func() { defer close(done); f() }
	<-done
}

// sockaddr converts an address for unix.Bind/Connect.
func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

func family(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// fds closes what tests open, at cleanup.
type fds struct {
	t    testing.TB
	list []int
}

func newFDs(t testing.TB) *fds {
	f := &fds{t: t}
	t.Cleanup(func() {
		for _, fd := range f.list {
			unix.Close(fd)
		}
	})
	return f
}

func (f *fds) add(fd int) int { f.list = append(f.list, fd); return fd }

// listen opens a blocking TCP listener on addr (port 0 picks one).
func (f *fds) listen(addr netip.AddrPort, backlog int) (int, uint16) {
	f.t.Helper()
	fd, err := unix.Socket(family(addr.Addr()), unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		f.t.Fatalf("socket: %v", err)
	}
	f.add(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		f.t.Fatalf("SO_REUSEADDR: %v", err)
	}
	if err := unix.Bind(fd, sockaddr(addr)); err != nil {
		f.t.Fatalf("bind %v: %v", addr, err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		f.t.Fatalf("listen: %v", err)
	}
	return fd, localPort(f.t, fd)
}

func localPort(t testing.TB, fd int) uint16 {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return uint16(sa.Port)
	case *unix.SockaddrInet6:
		return uint16(sa.Port)
	}
	t.Fatalf("getsockname: unexpected %T", sa)
	return 0
}

// connect opens a blocking connection; rcvbuf > 0 pins SO_RCVBUF first.
func (f *fds) connect(to netip.AddrPort, rcvbuf int) int {
	f.t.Helper()
	fd, err := unix.Socket(family(to.Addr()), unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		f.t.Fatalf("socket: %v", err)
	}
	f.add(fd)
	if rcvbuf > 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf); err != nil {
			f.t.Fatalf("SO_RCVBUF: %v", err)
		}
	}
	if err := unix.Connect(fd, sockaddr(to)); err != nil {
		f.t.Fatalf("connect %v: %v", to, err)
	}
	return fd
}

func (f *fds) accept(lfd int) int {
	f.t.Helper()
	fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
	if err != nil {
		f.t.Fatalf("accept: %v", err)
	}
	return f.add(fd)
}

// exchange sends n bytes each way between a and b and reads them.
func exchange(t testing.TB, a, b, n int) {
	t.Helper()
	buf := make([]byte, n)
	for _, p := range [][2]int{{a, b}, {b, a}} {
		if _, err := unix.Write(p[0], buf); err != nil {
			t.Fatalf("write: %v", err)
		}
		for got := 0; got < n; {
			m, err := unix.Read(p[1], buf[got:])
			if err != nil || m == 0 {
				t.Fatalf("read: %d %v", m, err)
			}
			got += m
		}
	}
}

// eventually polls cond for up to two seconds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustAddrPort(s string, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(s), port)
}
