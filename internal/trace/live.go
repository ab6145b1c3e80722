// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
)

// LiveOptions configure a recording of the running system.
type LiveOptions struct {
	// NS is the namespace to trace; its zero value is our own.
	NS     netns.NS
	Filter sockdiag.Filter
	Pid    int // keep only this process's sockets; 0: any
	// Pids, when set, keeps only these processes' sockets (a container's,
	// --container); Workload names them, or the namespace, in the header.
	Pids     []int
	Workload *snapshot.Workload
	ProcRoot string
	Interval time.Duration
	Duration time.Duration
	// Discover fixes the time between discovery dumps (see Config).
	Discover time.Duration
	// IdleEvery: see Config.
	IdleEvery int
	Now       func() time.Time
	Sleep     func(ctx context.Context, d time.Duration) error
	Sink      *Writer
	// OpenEvents, when set, opens the eBPF events for the traced
	// namespace (its inode) and the filter's ports (nil: any port). A nil
	// source with a reason says they are unavailable; an error stops the
	// recording (--bpf on). close is called when the recording ends.
	OpenEvents func(netns uint64, ports []uint16) (src EventSource, close func() error, why string, err error)
	// NoEvents is recorded as why there are no events when OpenEvents is
	// nil (--bpf off).
	NoEvents string
}

// portsOf lists the ports every socket f matches has at one end, or nil
// when f does not restrict ports.
func portsOf(f *sockdiag.Filter) []uint16 {
	var ps []uint16
	for _, l := range [][]uint16{f.Ports, f.LPorts, f.RPorts} {
		for _, p := range l {
			if !slices.Contains(ps, p) {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// Live records the matching connections: it opens a sock_diag socket in
// o.NS (which stays there) and runs Record.
func Live(ctx context.Context, o LiveOptions) (*Trace, Stats, error) {
	var conn *sockdiag.Conn
	var nsIno uint64
	open := func() error {
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			return fmt.Errorf("trace: netns inode: %w", err)
		}
		nsIno = st.Ino
		var err error
		conn, err = sockdiag.Open()
		return err
	}
	var err error
	if o.NS.Path != "" {
		err = netns.Do(o.NS, open)
	} else {
		err = open()
	}
	if err != nil {
		return nil, Stats{}, err
	}
	defer conn.Close()
	conn.Now = o.Now // the samples' stamps and the recording's start on one clock
	host, _ := os.Hostname()
	cfg := Config{Source: conn, Filter: o.Filter, Interval: o.Interval, Duration: o.Duration, Discover: o.Discover, IdleEvery: o.IdleEvery, Now: o.Now, Sleep: o.Sleep, ThreadCPU: ThreadCPU,
		Sink: o.Sink, Header: Header{Host: host, Netns: o.NS.Name, Filter: Describe(&o.Filter, o.Pid), NoEvents: o.NoEvents, Workload: o.Workload}}
	if o.OpenEvents != nil {
		src, closeEvents, why, err := o.OpenEvents(nsIno, portsOf(&o.Filter))
		if err != nil {
			return nil, Stats{}, err
		}
		if src != nil {
			defer func() { _ = closeEvents() }()
			cfg.Events, cfg.Mono = src, bpfsource.MonoNow
		} else {
			cfg.Header.NoEvents = why
		}
	}
	pids := o.Pids
	if o.Pid > 0 {
		pids = append([]int{o.Pid}, pids...)
	}
	if len(pids) > 0 {
		sc := procs.Scanner{Root: o.ProcRoot}
		cfg.Inodes = func() (map[uint32]bool, error) {
			m := make(map[uint32]bool)
			var first error
			for _, pid := range pids {
				_, inodes, err := sc.Sockets(pid)
				if err != nil {
					first = cmpOr(first, fmt.Errorf("trace: sockets of pid %d: %w", pid, err))
					continue
				}
				for _, i := range inodes {
					m[i] = true
				}
			}
			if first != nil && len(m) == 0 {
				return nil, first // every process ended (or was never readable)
			}
			return m, nil
		}
	}
	return Record(ctx, cfg)
}

// cmpOr is a, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Describe prints a filter as the header records it.
func Describe(f *sockdiag.Filter, pid int) string {
	var parts []string
	add := func(name string, vs []string) {
		if len(vs) > 0 {
			parts = append(parts, name+" "+strings.Join(vs, ","))
		}
	}
	ports := func(ps []uint16) []string {
		var out []string
		for _, p := range ps {
			out = append(out, strconv.Itoa(int(p)))
		}
		return out
	}
	add("port", ports(f.Ports))
	add("lport", ports(f.LPorts))
	add("rport", ports(f.RPorts))
	var peers []string
	for _, p := range f.Peers {
		peers = append(peers, p.String())
	}
	add("peer", peers)
	var locals []string
	for _, p := range f.Locals {
		locals = append(locals, p.String())
	}
	add("local", locals)
	if pid > 0 {
		parts = append(parts, "pid "+strconv.Itoa(pid))
	}
	if len(parts) == 0 {
		return allConnections
	}
	return strings.Join(parts, " and ")
}

// Analysis is a trace's transfers, judged: what the outputs print.
type Analysis struct {
	Transfers []Transfer
	// Conns is one verdict per connection and direction with slow
	// transfers; Paths what each peer address was judged by.
	Conns []ConnVerdict
	Paths []PathRate
	Slow  int
}

// Analyze cuts, deduplicates and judges the transfers of tr.
func Analyze(tr *Trace, so SegmentOptions, jo JudgeOptions) Analysis {
	ts := Dedupe(tr, Segment(tr, so))
	a := Analysis{Transfers: ts, Conns: Judge(tr, ts, jo)}
	for _, p := range Paths(tr, jo) {
		a.Paths = append(a.Paths, p)
	}
	slices.SortFunc(a.Paths, func(x, y PathRate) int { return x.Peer.Compare(y.Peer) })
	for i := range ts {
		if ts[i].Verdict != nil && ts[i].Verdict.Slow {
			a.Slow++
		}
	}
	return a
}

// JitterSummary is the median, 99th percentile and maximum lateness of
// the ticks.
func (s Stats) JitterSummary() (p50, p99, worst time.Duration) {
	if len(s.Jitter) == 0 {
		return 0, 0, 0
	}
	j := slices.Clone(s.Jitter)
	slices.Sort(j)
	return j[len(j)/2], j[len(j)*99/100], j[len(j)-1]
}

// Summary is what a live recording of conns connections says when it
// ends, a line each: why it stopped early (if it did), its samples and
// how late their ticks were, and its eBPF events when it had them.
func (s Stats) Summary(conns int, events bool) []string {
	var out []string
	if s.Ended != "" {
		out = append(out, "stopped early: "+s.Ended)
	}
	p50, p99, worst := s.JitterSummary()
	out = append(out, fmt.Sprintf("%d samples (%d dumps, %d lookups) of %d connections, %d missed; lateness median %s, p99 %s, max %s", s.Ticks, s.Dumps, s.Lookups, conns, s.Missed,
		p50.Round(time.Microsecond), p99.Round(time.Microsecond), worst.Round(time.Microsecond)))
	if events {
		out = append(out, fmt.Sprintf("%d eBPF events; %d ticks had a discovery dump due and skipped it (no connection established since the last)", s.Events, s.DumpsSkipped))
	}
	return out
}

// ThreadCPU is the calling thread's CPU time, user and system
// (CLOCK_THREAD_CPUTIME_ID: exact, unlike rusage, which is brought up to
// date only at ticks and sleeps).
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// PreciseSleep sleeps in nanosleep on the calling thread, looking at ctx
// every 50 ms: Go's timers woke the sampler about 0.5 ms late (median,
// measured on 6.18), half a tick at 1000 samples a second.
func PreciseSleep(ctx context.Context, d time.Duration) error {
	for d > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		step := min(d, 50*time.Millisecond)
		ts := unix.NsecToTimespec(int64(step))
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
		d -= step
	}
	return ctx.Err()
}
