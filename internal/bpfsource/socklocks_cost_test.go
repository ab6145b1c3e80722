// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestSockLocksCost measures what reading the buffer lock bits costs per
// socket on 20,000 loopback sockets (10,000 connections, both ends) in a
// namespace of its own: one iter/tcp walk of the namespace against a
// pidfd_getfd + getsockopt(SO_BUF_LOCK) probe of every socket, with the
// sock_diag dump the walk is joined to for scale. CPU time of this
// process (kernel and user, every thread: the dump reads ahead on
// another one) and wall time, medians of 5 rounds (docs/bpf.md).
//
//	TCPDOCTOR_BPF_COST=1 go test -count=1 -run TestSockLocksCost -v ./internal/bpfsource
func TestSockLocksCost(t *testing.T) {
	if os.Getenv(costEnv) == "" {
		t.Skip("set " + costEnv + "=1 to measure the cost")
	}
	ns := testns.New(t, "lkcost")
	l, err := OpenSockLocks(nil)
	if err != nil {
		t.Skip(err)
	}
	defer func() { _ = l.Close() }()
	const conns, rounds = 10000, 5
	// The accepted ends live in a helper process (this test binary again):
	// RLIMIT_NOFILE may be too low for 20,000 fds in one process.
	var fds []int
	var holder *exec.Cmd
	var holderIn io.Closer
	defer func() {
		if holderIn != nil {
			_ = holderIn.Close()
		}
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		if holder != nil {
			_ = holder.Process.Kill()
			_ = holder.Wait()
		}
	}()
	err = netns.Do(ns, func() error {
		// Started from this thread, the helper is born in ns.
		holder = exec.Command(os.Args[0], "-test.run=^TestSockLocksHolder$")
		holder.Env = append(os.Environ(), holderEnv+"="+strconv.Itoa(conns))
		holder.Stderr = os.Stderr
		out, err := holder.StdoutPipe()
		if err != nil {
			return err
		}
		if holderIn, err = holder.StdinPipe(); err != nil {
			return err
		}
		if err := holder.Start(); err != nil {
			holder = nil
			return err
		}
		lines := bufio.NewScanner(out)
		if !lines.Scan() || lines.Text() != "listening" {
			return holderErr(lines)
		}
		for i := range conns {
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, c)
			if i%2 == 0 { // half pinned, so the bits vary
				if err := unix.SetsockoptInt(c, unix.SOL_SOCKET, unix.SO_SNDBUF, 16384); err != nil {
					return err
				}
			}
			if err := unix.Connect(c, &unix.SockaddrInet4{Port: holderPort, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				return err
			}
		}
		if !lines.Scan() || lines.Text() != "held" {
			return holderErr(lines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	socks := 2 * conns

	var iter, probe, dump []cost
	pid := os.Getpid()
	for range rounds {
		err := netns.Do(ns, func() error {
			var n int
			c, err := measure(func() error {
				got, err := l.Read(0)
				if got != nil {
					n = len(byCookie(got))
				}
				return err
			})
			if err != nil {
				return err
			}
			if n < socks {
				return fmt.Errorf("iterator saw %d sockets, want at least %d", n, socks)
			}
			iter = append(iter, c.per(n))

			n = 0
			c, err = measure(func() error {
				return sockdiag.Dump(sockdiag.Options{Info: true, Mem: true}, func(*snapshot.Socket) error { n++; return nil })
			})
			if err != nil {
				return err
			}
			dump = append(dump, c.per(n))

			pinned := 0
			c, err = measure(func() error {
				for _, fd := range fds {
					v, err := procs.BufLock(procs.FDRef{Pid: pid, FD: fd}, 0)
					if err != nil {
						return err
					}
					if v&LockSnd != 0 {
						pinned++
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			if pinned != conns/2 {
				return fmt.Errorf("probe found %d pinned, want %d", pinned, conns/2)
			}
			probe = append(probe, c.per(len(fds)))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%d sockets in the namespace, medians of %d rounds, per socket (loadavg %s):", socks+1, rounds, strings.TrimSpace(string(load)))
	// Both walks visit the host-wide established table, so other
	// namespaces' sockets cost too.
	t.Logf("TCP sockets on the host: %s", hostTCP())
	t.Logf("%-44s %10s %10s %10s", "", "CPU", "of it, sys", "wall")
	for _, r := range []struct {
		name string
		c    []cost
	}{
		{"iter/tcp walk (lock bits, sndbuf, rcvbuf)", iter},
		{"pidfd_getfd + getsockopt(SO_BUF_LOCK) probe", probe},
		{"sock_diag dump (tcp_info, SK_MEMINFO)", dump},
	} {
		pick := func(f func(cost) float64) float64 {
			v := make([]float64, len(r.c))
			for i, c := range r.c {
				v[i] = f(c)
			}
			return median(v)
		}
		t.Logf("%-44s %7.0f ns %7.0f ns %7.0f ns", r.name, pick(func(c cost) float64 { return c.user + c.sys }),
			pick(func(c cost) float64 { return c.sys }), pick(func(c cost) float64 { return c.wall }))
	}
}

const (
	holderEnv  = "TCPDOCTOR_LOCKS_HOLDER"
	holderPort = 7000
)

// TestSockLocksHolder is TestSockLocksCost's helper process: it listens on
// 127.0.0.1:7000, says "listening", accepts as many connections as the
// environment asks, says "held" and keeps them until its stdin closes.
func TestSockLocksHolder(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv(holderEnv))
	if err != nil {
		t.Skip("the helper of TestSockLocksCost")
	}
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Port: holderPort, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 4096); err != nil {
		t.Fatal(err)
	}
	fmt.Println("listening")
	for range n {
		if _, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// holderErr says what the helper said instead of what was expected.
func holderErr(lines *bufio.Scanner) error {
	if err := lines.Err(); err != nil {
		return fmt.Errorf("holder: %w", err)
	}
	return fmt.Errorf("holder said %q", lines.Text())
}

// hostTCP is /proc/net/sockstat's TCP line (alloc counts every namespace).
func hostTCP() string {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "TCP: "); ok {
			return rest
		}
	}
	return "no TCP line in /proc/net/sockstat"
}

// cost is CPU time (user, system) and wall time, in nanoseconds.
type cost struct{ user, sys, wall float64 }

// per is c per one of n.
func (c cost) per(n int) cost {
	f := float64(n)
	return cost{c.user / f, c.sys / f, c.wall / f}
}

// measure runs fn and returns the process's CPU time (RUSAGE_SELF: a dump
// reads ahead on another thread than the caller's, and the holder is a
// process of its own) and the wall time.
func measure(fn func() error) (cost, error) {
	var a, b unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &a); err != nil {
		return cost{}, err
	}
	start := time.Now()
	err := fn()
	wall := float64(time.Since(start).Nanoseconds())
	if e := unix.Getrusage(unix.RUSAGE_SELF, &b); e != nil {
		return cost{}, e
	}
	return cost{user: float64(b.Utime.Nano() - a.Utime.Nano()), sys: float64(b.Stime.Nano() - a.Stime.Nano()), wall: wall}, err
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
