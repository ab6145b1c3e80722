// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
)

// cpuCost is the CPU one pinned, single-threaded load took: the load runs
// on one locked OS thread pinned to one CPU, so its loopback softirq work
// runs on that CPU too, charged to the thread (this kernel has no
// IRQ_TIME_ACCOUNTING: softirqs count to the task they interrupt) or, when
// deferred, to that CPU's ksoftirqd.
type cpuCost struct {
	wall time.Duration
	// thread is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID,
	// nanoseconds, steal excluded), softirqd that of the CPU's ksoftirqd
	// (/proc/PID/schedstat).
	thread, softirqd time.Duration
	// busy is the CPU's user+nice+system+irq+softirq in /proc/stat: every
	// task on that CPU, sampled at the tick (10 ms units).
	busy time.Duration
}

func (c cpuCost) cpu() time.Duration { return c.thread + c.softirqd }

// cpuProbe reads the clocks of one CPU.
type cpuProbe struct {
	cpu       int
	softirqd  string // /proc/PID/schedstat of ksoftirqd/cpu
	statLabel []byte // "cpuN "
}

func newCPUProbe(cpu int) (*cpuProbe, error) {
	p := &cpuProbe{cpu: cpu, statLabel: fmt.Appendf(nil, "cpu%d ", cpu)}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	want := fmt.Sprintf("ksoftirqd/%d\n", cpu)
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && string(b) == want {
			p.softirqd = "/proc/" + e.Name() + "/schedstat"
			break
		}
	}
	if p.softirqd == "" {
		return nil, fmt.Errorf("no ksoftirqd/%d", cpu)
	}
	return p, nil
}

type cpuSample struct {
	at               time.Time
	thread, softirqd time.Duration
	busy             time.Duration
}

// sample reads the clocks; call it on the pinned thread.
func (p *cpuProbe) sample() (cpuSample, error) {
	var s cpuSample
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return s, err
	}
	s.thread = time.Duration(ts.Nano())
	b, err := os.ReadFile(p.softirqd)
	if err != nil {
		return s, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return s, fmt.Errorf("%s: %q", p.softirqd, b)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return s, err
	}
	s.softirqd = time.Duration(ns)
	st, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(bytes.NewReader(st))
	found := false
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, p.statLabel) {
			continue
		}
		// user nice system idle iowait irq softirq steal ...
		f := strings.Fields(string(line))
		if len(f) < 8 {
			break
		}
		var ticks int64
		for _, i := range []int{1, 2, 3, 6, 7} {
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return s, err
			}
			ticks += v
		}
		s.busy = time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
		found = true
		break
	}
	if !found {
		return s, fmt.Errorf("/proc/stat: no line for cpu%d", p.cpu)
	}
	s.at = time.Now()
	return s, nil
}

func (p *cpuProbe) since(a cpuSample) (cpuCost, error) {
	b, err := p.sample()
	if err != nil {
		return cpuCost{}, err
	}
	return cpuCost{wall: b.at.Sub(a.at), thread: b.thread - a.thread, softirqd: b.softirqd - a.softirqd, busy: b.busy - a.busy}, nil
}

// pinned runs fn in ns on a locked OS thread pinned to p's CPU (the
// thread exits afterwards: netns.Do never unlocks it).
func (p *cpuProbe) pinned(ns netns.NS, fn func() error) error {
	return netns.Do(ns, func() error {
		var set unix.CPUSet
		set.Set(p.cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pin to cpu %d: %w", p.cpu, err)
		}
		return fn()
	})
}

// churnWarmup is how many connections pinnedChurn makes before it
// measures.
const churnWarmup = 200

// loopbackListener listens on 127.0.0.1, a port of the kernel's choice.
func loopbackListener(backlog int) (int, syscall.Sockaddr, error) {
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, err
	}
	sa, err := func() (syscall.Sockaddr, error) {
		if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return nil, err
		}
		if err := syscall.Listen(lfd, backlog); err != nil {
			return nil, err
		}
		return syscall.Getsockname(lfd)
	}()
	if err != nil {
		_ = syscall.Close(lfd)
		return -1, nil, err
	}
	return lfd, sa, nil
}

// pinnedChurn connects, accepts and closes n loopback connections one
// after another on one thread pinned to p's CPU (the client closes first,
// then the server) and returns the CPU it took, after a warm-up.
func (p *cpuProbe) pinnedChurn(ns netns.NS, n int) (cpuCost, error) {
	var c cpuCost
	err := p.pinned(ns, func() error {
		lfd, sa, err := loopbackListener(64)
		if err != nil {
			return err
		}
		defer func() { _ = syscall.Close(lfd) }()
		one := func() error {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if err := syscall.Connect(fd, sa); err != nil {
				_ = syscall.Close(fd)
				return fmt.Errorf("connect: %w", err)
			}
			a, _, err := syscall.Accept4(lfd, syscall.SOCK_CLOEXEC)
			_ = syscall.Close(fd)
			if err != nil {
				return fmt.Errorf("accept: %w", err)
			}
			return syscall.Close(a)
		}
		for range churnWarmup {
			if err := one(); err != nil {
				return err
			}
		}
		start, err := p.sample()
		if err != nil {
			return err
		}
		for range n {
			if err := one(); err != nil {
				return err
			}
		}
		c, err = p.since(start)
		return err
	})
	return c, err
}

// pinnedBulk streams size bytes through one loopback connection, writer
// and reader on one thread pinned to p's CPU (non-blocking, each side in
// turn until it would block), and returns the CPU it took.
func (p *cpuProbe) pinnedBulk(ns netns.NS, size int64) (cpuCost, error) {
	var c cpuCost
	err := p.pinned(ns, func() error {
		lfd, sa, err := loopbackListener(1)
		if err != nil {
			return err
		}
		defer func() { _ = syscall.Close(lfd) }()
		w, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer func() { _ = syscall.Close(w) }()
		if err := syscall.Connect(w, sa); err != nil {
			return err
		}
		r, _, err := syscall.Accept4(lfd, syscall.SOCK_CLOEXEC)
		if err != nil {
			return err
		}
		defer func() { _ = syscall.Close(r) }()
		for _, fd := range []int{w, r} {
			if err := syscall.SetNonblock(fd, true); err != nil {
				return err
			}
		}
		wbuf, rbuf := make([]byte, 256<<10), make([]byte, 256<<10)
		stream := func(total int64) error {
			var sent, got int64
			for got < total {
				for sent < total {
					n, err := syscall.Write(w, wbuf[:min(int64(len(wbuf)), total-sent)])
					if errors.Is(err, syscall.EAGAIN) {
						break
					}
					if err != nil {
						return err
					}
					sent += int64(n)
				}
				for {
					n, err := syscall.Read(r, rbuf)
					if errors.Is(err, syscall.EAGAIN) {
						break
					}
					if err != nil {
						return err
					}
					if n == 0 {
						return errors.New("bulk: early EOF")
					}
					got += int64(n)
				}
			}
			return nil
		}
		if err := stream(64 << 20); err != nil { // warm-up: windows grown
			return err
		}
		start, err := p.sample()
		if err != nil {
			return err
		}
		if err := stream(size); err != nil {
			return err
		}
		c, err = p.since(start)
		return err
	})
	return c, err
}

// emptyPrograms attaches a program that only returns 0 to each tracepoint:
// the cost of having anything attached there (dispatch and, with the
// run-time statistics on, their own clock reads), without a body.
type emptyPrograms struct {
	progs []*ebpf.Program
	links []link.Link
	names []string
}

func openEmpty(tracepoints ...string) (*emptyPrograms, error) {
	e := &emptyPrograms{}
	for _, tp := range tracepoints {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "empty",
			Type:         ebpf.Tracing,
			AttachType:   ebpf.AttachTraceRawTp,
			AttachTo:     tp,
			License:      "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		})
		if err != nil {
			_ = e.Close()
			return nil, fmt.Errorf("empty program on %s: %w", tp, err)
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			_ = p.Close()
			_ = e.Close()
			return nil, fmt.Errorf("attach empty program on %s: %w", tp, err)
		}
		e.progs, e.links, e.names = append(e.progs, p), append(e.links, l), append(e.names, tp)
	}
	return e, nil
}

func (e *emptyPrograms) Close() error {
	var errs []error
	for _, l := range e.links {
		errs = append(errs, l.Close())
	}
	for _, p := range e.progs {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

func (e *emptyPrograms) runStats() (map[string]*ebpf.ProgramStats, error) {
	out := map[string]*ebpf.ProgramStats{}
	for i, p := range e.progs {
		st, err := p.Stats()
		if err != nil {
			return nil, err
		}
		out[e.names[i]] = st
	}
	return out, nil
}
