// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// pair connects a client to a fresh listener in ns; rcvbuf > 0 pins the
// server side's SO_RCVBUF (set on the listener before listen(), so the
// window scale fits it). Both fds are shut down and closed at cleanup.
func pair(t *testing.T, ns netns.NS, rcvbuf int) (client, server int, srv netip.AddrPort) {
	t.Helper()
	In(t, ns, func() error {
		lfd, a, err := Listen(t, 16, func(fd int) error {
			if rcvbuf > 0 {
				return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
			}
			return nil
		})
		if err != nil {
			return err
		}
		srv = a
		if client, err = Dial(a, nil); err != nil {
			return err
		}
		server, err = Accept(lfd)
		return err
	})
	Close(t, client, server)
	return client, server, srv
}

// loop runs fn until it fails or stop is closed; cleanup shuts the fds
// down (waking blocked reads and writes) and waits for it.
func loop(t *testing.T, fds []int, fn func() error) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if fn() != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		for _, fd := range fds {
			_ = unix.Shutdown(fd, unix.SHUT_RDWR)
		}
		wg.Wait()
	})
}

func writer(fd int) func() error {
	buf := make([]byte, 64<<10)
	return func() error { _, err := unix.Write(fd, buf); return err }
}

func reader(fd, size int, pause time.Duration) func() error {
	buf := make([]byte, size)
	return func() error {
		n, err := unix.Read(fd, buf)
		if err == nil && n == 0 {
			return os.ErrClosed
		}
		if pause > 0 {
			time.Sleep(pause)
		}
		return err
	}
}

// TestRwndLimited: the receiver pinned SO_RCVBUF 32K and reads 4K every
// 5 ms; the autotuned sender waits on its window. The receiver's queue
// holds its buffer and its window closes: the reader, not the window's
// size, is the limit, so rwnd-limited is only a note on the sender.
func TestRwndLimited(t *testing.T) {
	ns := testns.New(t, "rw")
	c, s, srv := pair(t, ns, 32<<10)
	loop(t, []int{c, s}, writer(c))
	loop(t, []int{c, s}, reader(s, 4<<10, 5*time.Millisecond))
	time.Sleep(200 * time.Millisecond)
	r, b, _ := Sample(t, ns, 1500*time.Millisecond, nil)
	fs := r.Find("rwnd-limited", diag.Info)
	if len(fs) != 1 || fs[0].Severity != diag.Info {
		t.Fatalf("rwnd-limited: want one note (info), got %+v\n%s", fs, b)
	}
	if f := fs[0]; f.Subject.Remote.String() != srv.String() || f.Subject.Pid != os.Getpid() {
		t.Errorf("subject %+v, want the sender to %s, pid %d", f.Subject, srv, os.Getpid())
	}
	if Evidence(fs[0], "receiver reads slowly") == "" {
		t.Errorf("rwnd-limited: no evidence that the receiver paces: %+v", fs[0].Evidence)
	}
}

// TestSlowReader: the receiver stops reading; its Recv-Q stays full.
func TestSlowReader(t *testing.T) {
	ns := testns.New(t, "sr")
	c, s, srv := pair(t, ns, 0)
	loop(t, []int{c, s}, writer(c))
	time.Sleep(300 * time.Millisecond)
	r, b, _ := Sample(t, ns, time.Second, nil)
	f := one(t, r, b, "slow-reader")
	if f.Subject.Local.String() != srv.String() || f.Subject.Pid != os.Getpid() {
		t.Errorf("subject %+v, want the receiver %s, pid %d", f.Subject, srv, os.Getpid())
	}
	for _, e := range f.Evidence {
		t.Logf("  %s = %s", e.Name, e.Value)
	}
}

// TestHealthyBaseline: an autotuned bulk transfer read as fast as it
// comes, pooled keep-alive request/response on one connection, and an
// idle listener: no finding at warning or above. The path is a 200 Mbit/s
// tbf on lo, as on a real network: unthrottled loopback makes the
// receiving thread's CPU the bottleneck, which slow-reader rightly reports.
func TestHealthyBaseline(t *testing.T) {
	ns := testns.New(t, "ok")
	testns.Run(t, "ip", "netns", "exec", ns.Name, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "200mbit", "burst", "256kb", "latency", "20ms")
	In(t, ns, func() error { _, _, err := Listen(t, 4096, nil); return err })
	bc, bs, _ := pair(t, ns, 0)
	loop(t, []int{bc, bs}, writer(bc))
	loop(t, []int{bc, bs}, reader(bs, 256<<10, 0))
	kc, ks, _ := pair(t, ns, 0)
	req := make([]byte, 200)
	resp := make([]byte, 2000)
	loop(t, []int{kc, ks}, func() error {
		if _, err := unix.Write(kc, req); err != nil {
			return err
		}
		if _, err := unix.Read(ks, req); err != nil {
			return err
		}
		if _, err := unix.Write(ks, resp); err != nil {
			return err
		}
		_, err := unix.Read(kc, resp)
		time.Sleep(time.Millisecond)
		return err
	})
	time.Sleep(200 * time.Millisecond)
	r, b, _ := Sample(t, ns, 1500*time.Millisecond, nil)
	for _, f := range r.Findings {
		logFinding(t, f)
		if f.Severity >= diag.Warning {
			t.Errorf("healthy baseline raised %s %s", f.Severity, f.Rule)
		}
	}
	if t.Failed() {
		t.Logf("%s", b)
	}
	for _, u := range r.Unknown {
		t.Logf("unknown %s: %s", u.Rule, u.Reason)
	}
}
