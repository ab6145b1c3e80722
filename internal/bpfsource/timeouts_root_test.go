// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestTimedOutConnectsCounted counts connects the retransmit timer ends,
// in an interrupt, a thousand at once, beside a churn of loopback
// connections in another namespace on two threads. n non-blocking
// connects go to a listener whose accept queue is full (the kernel drops
// their SYNs) and time out after one SYN retransmission.
// Opens come inside connect(), where the program is never skipped:
// exactly n+1 (one fills the queue). Timeouts: never more than n, and
// never fewer than n less the runs the source says the kernel skipped
// (Reading.Skipped; it skips the program when an interrupt comes while
// it runs on that CPU). Here that is rare: in most runs nothing is
// skipped and the count must be exact.
//
// The test watches each socket's state (TCP_INFO) until it is CLOSE and
// only then reads SO_ERROR, which clears sk_err (a reader racing the
// timer is TestTimedOutConnectsReadEarly's). Every counter of the
// namespace, the failed connects streamed by reason, and the lost and
// skipped counts are logged, so that a shortfall says where the runs
// went.
func TestTimedOutConnectsCounted(t *testing.T) {
	src := openWith(t, Options{})
	ns := testns.New(t, "bpftimeo")
	streamed := failedConnectReasons(t, src, ns.Inode)
	stop := churnUntilStopped(t, testns.New(t, "bpfchurn"))
	const n = 1000
	fds := timingOutConnects(t, ns, n)
	// One SYN retransmission after 1 s, ETIMEDOUT 2 s later. A socket
	// is done once TCP_INFO says CLOSE (its state is stored after the
	// tracepoint ran); then SO_ERROR is read once and must say why.
	pending := map[int]bool{}
	for _, fd := range fds {
		pending[fd] = true
	}
	timedOut := 0
	for deadline := time.Now().Add(10 * time.Second); len(pending) > 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for fd := range pending {
			ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
			if err != nil {
				t.Fatal(err)
			}
			if ti.State != uint8(snapshot.Close) {
				continue
			}
			delete(pending, fd)
			switch e, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); {
			case err != nil:
				t.Fatal(err)
			case e != int(unix.ETIMEDOUT):
				t.Fatalf("connect ended with %v, want ETIMEDOUT", unix.Errno(e))
			}
			timedOut++
		}
	}
	churned := stop()
	if timedOut != n {
		t.Fatalf("%d of %d connects timed out", timedOut, n)
	}
	t.Logf("%d connects timed out beside %d connections churned", n, churned)
	checkTimeouts(t, src, ns, n, streamed)
}

// TestTimedOutConnectsReadEarly reads SO_ERROR of n connects in a loop
// while the retransmit timer ends them. The read clears sk_err, and the
// kernel sets sk_err, purges the write queue and only then closes the
// socket: a read in between leaves the program sk_err 0. It must still
// count a timeout (the timer no longer pending, the queue purged), never
// an abandoned connect (before the program looked at the timer and the
// queue, 2 to 10 of 1000 went to abandoned in 3 of 10 runs here). Same
// bounds as TestTimedOutConnectsCounted, without the churn.
func TestTimedOutConnectsReadEarly(t *testing.T) {
	src := openWith(t, Options{})
	ns := testns.New(t, "bpfearly")
	streamed := failedConnectReasons(t, src, ns.Inode)
	const n = 1000
	start := time.Now()
	fds := timingOutConnects(t, ns, n)
	pending := map[int]bool{}
	for _, fd := range fds {
		pending[fd] = true
	}
	// The timer fires about 3 s after the connects: read without pause
	// from 2.5 s on, for 10 s at most.
	time.Sleep(time.Until(start.Add(2500 * time.Millisecond)))
	timedOut, sweeps := 0, 0
	for deadline := time.Now().Add(10 * time.Second); len(pending) > 0 && time.Now().Before(deadline); sweeps++ {
		for fd := range pending {
			switch e, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); {
			case err != nil:
				t.Fatal(err)
			case e == int(unix.ETIMEDOUT):
				timedOut++
				delete(pending, fd)
			case e != 0:
				t.Fatalf("connect: %v, want ETIMEDOUT", unix.Errno(e))
			}
		}
	}
	if timedOut != n {
		t.Fatalf("%d of %d connects timed out", timedOut, n)
	}
	t.Logf("%d connects timed out, read in %d sweeps", n, sweeps)
	checkTimeouts(t, src, ns, n, streamed)
}

// timingOutConnects makes n non-blocking connects in ns to a loopback
// listener whose accept queue is full, each with one SYN retransmission
// (TCP_SYNCNT 1), and returns their sockets; all are closed at the end
// of the test.
func timingOutConnects(t *testing.T, ns netns.NS, n int) []int {
	t.Helper()
	var fds []int
	t.Cleanup(func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	})
	err := netns.Do(ns, func() error {
		lfd, sa, err := loopbackListener(0)
		if err != nil {
			return err
		}
		fds = append(fds, lfd)
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
		// One connection fills the queue of one (never accepted).
		fd, err := connectFd(dst)
		if err != nil {
			return err
		}
		fds = append(fds, fd)
		for range n {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_SYNCNT, 1); err != nil {
				return err
			}
			if err := unix.Connect(fd, sockaddr(dst)); !errors.Is(err, unix.EINPROGRESS) {
				return fmt.Errorf("connect %v: %w, want EINPROGRESS", dst, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fds[2:]
}

// checkTimeouts reads src and holds the counts of namespace ns to n
// timed-out connects: opens exactly n+1, timeouts at most n and at least
// n less the runs the kernel skipped and the counts the source says a
// full flow map lost, none abandoned. It logs every
// counter of ns, the lost and skipped counts and the failed connects
// streamed by reason.
func checkTimeouts(t *testing.T, src *Source, ns netns.NS, n uint64, streamed func(n int, within time.Duration) map[string]int) {
	t.Helper()
	r, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	var sum Flow
	for _, f := range r.ByNetns[ns.Inode] {
		sum.Opens += f.Opens
		sum.FailedPorts += f.FailedPorts
		sum.Refused += f.Refused
		sum.TimedOut += f.TimedOut
		sum.Unreachable += f.Unreachable
		sum.Abandoned += f.Abandoned
		sum.ActiveCloses += f.ActiveCloses
	}
	counted := sum.TimedOut
	skipped := r.Skipped["inet_sock_set_state"]
	t.Logf("%d opens, %d counted as timed out, %d runs of the lifecycle program skipped (host-wide)", sum.Opens, counted, skipped)
	t.Logf("namespace counts: opens %d, failed_ports %d, refused %d, timed_out %d, unreachable %d, abandoned %d, active_closes %d; lost flows %d, lost events %d, skipped %v",
		sum.Opens, sum.FailedPorts, sum.Refused, sum.TimedOut, sum.Unreachable, sum.Abandoned, sum.ActiveCloses, r.LostFlows, r.LostEvents, r.Skipped)
	t.Logf("failed connects streamed, by reason: %v", streamed(int(n), 2*time.Second))
	// The kernel's own count of the connects it ended in SYN_SENT there.
	kernelEnded := nsCounters(t, ns)["Tcp.AttemptFails"]
	t.Logf("the kernel ended %d connects in SYN_SENT in the namespace (Tcp AttemptFails)", kernelEnded)
	if kernelEnded != int64(n) {
		t.Errorf("the kernel ended %d connects in SYN_SENT (Tcp AttemptFails), want %d", kernelEnded, n)
	}
	if sum.Opens != n+1 {
		t.Errorf("%d opens counted, want %d", sum.Opens, n+1)
	}
	if counted > n {
		t.Errorf("%d connects counted as timed out, more than the %d made: some counted twice", counted, n)
	}
	if sum.Abandoned != 0 {
		t.Errorf("%d timed-out connects counted as abandoned", sum.Abandoned)
	}
	if counted+skipped+r.LostFlows < n {
		t.Errorf("%d timeouts counted, %d runs reported skipped and %d counts lost to a full flow map, fewer than the %d made (the kernel ended %d): runs lost without a word", counted, skipped, r.LostFlows, n, kernelEnded)
	}
}

// failedConnectReasons counts the failed connects of namespace ns that
// src streams, by reason, until the test ends. The function it returns
// waits until n are counted or within passes, and returns the counts so
// far.
func failedConnectReasons(t *testing.T, src *Source, ns uint64) func(n int, within time.Duration) map[string]int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := src.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reasons := map[string]int{}
	total := 0
	go func() {
		for e := range ch {
			if e.Kind == FailedConnect && e.Netns == ns {
				mu.Lock()
				reasons[e.Reason]++
				total++
				mu.Unlock()
			}
		}
	}()
	return func(n int, within time.Duration) map[string]int {
		for end := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			if total >= n || time.Now().After(end) {
				defer mu.Unlock()
				return maps.Clone(reasons)
			}
			mu.Unlock()
		}
	}
}

// churnUntilStopped opens and closes loopback connections in ns on two
// threads until the function it returns is called (or for 30 s), which
// returns how many were made.
func churnUntilStopped(t *testing.T, ns netns.NS) (stop func() int64) {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(ns, func() (err error) {
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	done := make(chan struct{})
	var made atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = netns.Do(ns, func() error {
				// Bounded even if stop is never called: 30 s at most.
				for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
					select {
					case <-done:
						return nil
					default:
					}
					c, err := net.Dial("tcp4", ln.Addr().String())
					if err != nil {
						return err
					}
					_ = c.Close()
					made.Add(1)
				}
				return nil
			})
		}()
	}
	var once sync.Once
	stop = func() int64 {
		once.Do(func() {
			close(done)
			wg.Wait()
			_ = ln.Close()
		})
		return made.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}
