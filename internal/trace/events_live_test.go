// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestLiveResetEvent traces two loopback connections in a private
// namespace with the eBPF events, aborts one (SO_LINGER 0: a reset sent
// by the client, received by the server) and wants both events on their
// connections, each timed inside the sampling interval in which the
// reset happened: after the aborted connection's last sample, and no
// later than the next tick (read on the connection left open).
func TestLiveResetEvent(t *testing.T) {
	testns.NeedRoot(t)
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("no kernel BTF: the eBPF events cannot load here")
	}
	ns := testns.New(t, "trevent")
	var lfd, port int
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	err := netns.Do(ns, func() error {
		var err error
		if lfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		fds = append(fds, lfd)
		if err = unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err = unix.Listen(lfd, 4); err != nil {
			return err
		}
		sa, _ := unix.Getsockname(lfd)
		port = sa.(*unix.SockaddrInet4).Port
		for range 2 {
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, c)
			if err = unix.Connect(c, sa); err != nil {
				return err
			}
			a, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
			if err != nil {
				return err
			}
			fds = append(fds, a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	aborted, kept := fds[1], fds[3]
	abortedLocal := localPort(t, aborted)
	// Both connections move a byte every 2 ms, so neither is ever quiet
	// and both are read every tick: the tick after the abort is on the
	// record.
	var stopAborted, stopKept atomic.Bool
	var movers sync.WaitGroup
	// abortedWriter ends when the aborted connection's writer has
	// returned: its descriptor is closed only then (a write after the
	// close would go to whatever took the number).
	abortedWriter := make(chan struct{})
	for _, m := range []struct {
		w, r    int
		stop    *atomic.Bool
		stopped chan struct{}
	}{{aborted, fds[2], &stopAborted, abortedWriter}, {kept, fds[4], &stopKept, nil}} {
		movers.Add(2)
		go func() {
			defer movers.Done()
			if m.stopped != nil {
				defer close(m.stopped)
			}
			for !m.stop.Load() {
				if _, err := unix.Write(m.w, []byte{1}); err != nil {
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		go func() {
			defer movers.Done()
			buf := make([]byte, 64)
			for {
				if n, err := unix.Read(m.r, buf); n <= 0 || err != nil {
					return
				}
			}
		}()
	}
	defer func() {
		stopAborted.Store(true)
		stopKept.Store(true)
		unix.Shutdown(fds[2], unix.SHUT_RDWR) // ends the readers
		unix.Shutdown(fds[4], unix.SHUT_RDWR)
		movers.Wait()
	}()

	sink := &testns.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var tr *Trace
	var traceErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tr, _, traceErr = Live(ctx, LiveOptions{NS: ns, Filter: sockdiag.Filter{Ports: []uint16{uint16(port)}}, Interval: 20 * time.Millisecond,
			Duration: 20 * time.Second, Now: time.Now, Sleep: PreciseSleep, Sink: NewWriter(sink),
			OpenEvents: func(ino uint64, ports []uint16) (EventSource, func() error, string, error) {
				src, err := bpfsource.OpenTrace(bpfsource.TraceOptions{Netns: ino, Ports: ports})
				if err != nil {
					return nil, nil, "", err
				}
				return src, src.Close, "", nil
			}})
	}()
	// Loading the programs and the first dump (it walks the whole host's
	// established table) take a while on a busy machine: wait until the
	// four sockets were found and sampled five times each.
	for deadline := time.Now().Add(15 * time.Second); strings.Count(sink.String(), `{"conn":`) < 4 || strings.Count(sink.String(), `{"p":`) < 4*5; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatalf("the four sockets were not found and sampled in 15s: %v", traceErr)
		}
	}
	stopAborted.Store(true)
	<-abortedWriter
	if err := unix.SetsockoptLinger(aborted, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
		t.Fatal(err)
	}
	unix.Close(aborted)
	fds[1] = -1
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()
	if traceErr != nil {
		if errors.Is(traceErr, bpfsource.ErrNotSupported) {
			t.Fatalf("eBPF events should load on a kernel with BTF, as root: %v", traceErr)
		}
		t.Fatal(traceErr)
	}
	if !tr.Header.Events {
		t.Fatalf("header says no events: %q", tr.Header.NoEvents)
	}
	var sender, receiver, steady *Conn
	for _, c := range tr.Conns {
		switch {
		case c.Local.Port() == abortedLocal:
			sender = c
		case c.Remote.Port() == abortedLocal:
			receiver = c
		case c.Local.Port() == localPort(t, kept):
			steady = c
		}
	}
	if sender == nil || receiver == nil || steady == nil {
		t.Fatalf("connections not all traced: %+v", tr.Conns)
	}
	for _, x := range []struct {
		c    *Conn
		kind string
	}{{sender, EvResetSent}, {receiver, EvResetReceived}} {
		if len(x.c.Events) != 1 || x.c.Events[0].Kind != x.kind {
			t.Errorf("conn %d: events %+v, want one %s", x.c.ID, x.c.Events, x.kind)
			continue
		}
		ev := x.c.Events[0]
		last := x.c.Points[len(x.c.Points)-1].T
		next := time.Duration(-1)
		for _, p := range steady.Points { // of a later tick: a sample is stamped when read
			if p.T > last+tr.Header.Interval/2 {
				next = p.T
				break
			}
		}
		t.Logf("%s at %v: last sample of its connection %v (%d samples), next tick %v", ev.Kind, ev.T, last, len(x.c.Points), next)
		if ev.T <= last || next < 0 || ev.T > next {
			t.Errorf("%s at %v, not in the interval (%v, %v] it happened in", ev.Kind, ev.T, last, next)
		}
	}
}

func localPort(t *testing.T, fd int) uint16 {
	t.Helper()
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(sa.(*unix.SockaddrInet4).Port)
}
