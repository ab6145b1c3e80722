// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// TraceOptions configure Trace.
type TraceOptions struct {
	Others   int // established connections beside the traced ones (two sockets each)
	Matched  int // traced sockets (Matched/2 connections to a port of their own)
	Rate     int // samples per second
	Duration time.Duration
	Self     Self
	Progress io.Writer
	// GoTimers sleeps with Go's timers instead of trace.PreciseSleep.
	GoTimers bool
	// IdleEvery is trace's --idle-every (the traced connections are idle).
	IdleEvery int
	// BPF loads trace's eBPF events (bpfsource.OpenTrace), which also
	// spares the discovery dumps while no connection is established.
	BPF bool
}

func (o TraceOptions) sleep() func(context.Context, time.Duration) error {
	if o.GoTimers {
		return window.Sleep
	}
	return trace.PreciseSleep
}

// TraceResult is what Trace measured.
type TraceResult struct {
	Sockets, Matched int // sockets in the namespace, traced sockets seen
	Rate             int
	Wall, CPU        time.Duration // wall time recording, CPU time of this process meanwhile
	User, System     time.Duration // CPU split: system is the kernel's work for our requests
	Stats            trace.Stats
	// DumpCost is the mean time of one discovery dump.
	DumpCost time.Duration
}

// Share is the CPU share of one core spent recording.
func (r *TraceResult) Share() float64 { return r.CPU.Seconds() / r.Wall.Seconds() }

// Trace measures the recorder: it traces o.Matched sockets at o.Rate
// among o.Others connections held by child processes in a lab
// namespace, and reports this process's CPU time (user and system, the
// kernel's work for our syscalls included) over the wall time, and the
// lateness of the ticks.
func Trace(ctx context.Context, o TraceOptions) (*TraceResult, error) {
	if o.Others < 0 || o.Others > MaxConns || o.Matched < 2 || o.Matched > 2000 || o.Rate < 1 || o.Rate > trace.MaxRate {
		return nil, fmt.Errorf("bench: --others 0..%d, --matched 2..2000, --rate 1..%d", MaxConns, trace.MaxRate)
	}
	sp, err := newSpace(ctx, o.Self, max(o.Others, 1), o.Progress)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var port uint16
	err = netns.Do(sp.ns, func() error {
		l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, l)
		if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 2}}); err != nil {
			return err
		}
		if err := unix.Listen(l, 1024); err != nil {
			return err
		}
		sa, err := unix.Getsockname(l)
		if err != nil {
			return err
		}
		port = uint16(sa.(*unix.SockaddrInet4).Port)
		for i := 0; i < o.Matched/2; i++ {
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, c)
			if err := unix.Connect(c, sa); err != nil {
				return fmt.Errorf("bench: connect %d: %w", i, err)
			}
			a, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
			if err != nil {
				return err
			}
			fds = append(fds, a)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "tcpdoctor: bench: tracing %d sockets on port %d at %d/s for %s...\n", o.Matched, port, o.Rate, o.Duration)
	}
	var before, after unix.Rusage
	lo := trace.LiveOptions{NS: sp.ns, Filter: sockdiag.Filter{Ports: []uint16{port}},
		Interval: time.Second / time.Duration(o.Rate), Duration: o.Duration, IdleEvery: o.IdleEvery, Now: time.Now, Sleep: o.sleep()}
	if o.BPF {
		// Loaded before the CPU is counted: parsing the kernel's BTF and
		// loading the programs is a one-off of a few hundred ms.
		t, err := bpfsource.OpenTrace(bpfsource.TraceOptions{Netns: sp.ns.Inode, Ports: []uint16{port}})
		if err != nil {
			return nil, fmt.Errorf("bench: --bpf: %w", err)
		}
		defer t.Close()
		lo.OpenEvents = func(uint64, []uint16) (trace.EventSource, func() error, string, error) {
			return t, func() error { return nil }, "", nil
		}
	}
	if err := unix.Getrusage(unix.RUSAGE_SELF, &before); err != nil {
		return nil, err
	}
	start := time.Now()
	tr, st, err := trace.Live(ctx, lo)
	if err != nil {
		return nil, err
	}
	wall := time.Since(start)
	if err := unix.Getrusage(unix.RUSAGE_SELF, &after); err != nil {
		return nil, err
	}
	user, sys := tv(after.Utime)-tv(before.Utime), tv(after.Stime)-tv(before.Stime)
	res := &TraceResult{Sockets: 2*max(o.Others, 1) + o.Matched, Matched: len(tr.Conns), Rate: o.Rate, Wall: wall, CPU: user + sys,
		User: user, System: sys, Stats: st}
	if st.Dumps > 0 {
		res.DumpCost = st.DumpTime / time.Duration(st.Dumps)
	}
	return res, nil
}

func tv(t unix.Timeval) time.Duration {
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
}
