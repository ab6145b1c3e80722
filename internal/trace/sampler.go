// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
)

// MaxRate is the highest sampling rate (samples per second) accepted.
const MaxRate = 1000

// Source is what the sampler reads sockets through: a sockdiag.Conn
// opened in the traced namespace, or a fake in tests.
type Source interface {
	Dump(opts sockdiag.Options, fn func(*snapshot.Socket) error) error
	Lookup(opts sockdiag.Options, keys []sockdiag.Key, fn func(int, *snapshot.Socket) error) error
}

// servedSource is a Source that says when the kernel answered the
// lookup whose replies it is giving (sockdiag.Conn.Served).
type servedSource interface {
	Served() time.Time
}

// EventSource is the eBPF program that times events of watched sockets
// (bpfsource.Tracer), or a fake in tests.
type EventSource interface {
	Watch(cookie uint64) error
	Unwatch(cookie uint64) error
	// Drain hands fn the events waiting, without blocking.
	Drain(fn func(bpfsource.TraceEvent)) error
	// Established counts sockets of the traced namespace (on the
	// filter's ports) that entered ESTABLISHED; ok is false when it
	// cannot tell.
	Established() (n uint64, ok bool, err error)
	// Moved says whether the socket was written, read, received data or
	// changed state since the last call for it; ok is false when it
	// cannot tell.
	Moved(cookie uint64) (moved, ok bool)
}

// Config says what to record and how often.
type Config struct {
	Source   Source
	Filter   sockdiag.Filter
	Interval time.Duration
	// Duration ends the recording; 0 records until ctx ends.
	Duration time.Duration
	// Inodes, when set, lists the socket inodes to keep (--pid); it is
	// called again at each discovery, for sockets opened since.
	Inodes func() (map[uint32]bool, error)
	// Discover, when set, is the fixed time between discovery dumps
	// instead of the pace DumpShare allows.
	Discover time.Duration
	// IdleEvery: connections with nothing queued, in flight or counted
	// for two samples are read every IdleEvery-th tick until they move
	// (a transfer's start is then placed by the kernel's busy time in
	// the longer interval). 0 or 1 reads every connection every tick.
	// Where Events tells which sockets moved, such quiet connections are
	// read only in the tick after they move (and once a second, or every
	// IdleEvery-th tick if that is rarer): nothing is seen late.
	IdleEvery int
	// DumpShare is the share of one core discovery dumps may take: the
	// time between dumps is their cost over it, at least one tick (new
	// connections are seen that late at worst). 0 means 1 %.
	DumpShare float64
	Now       func() time.Time
	Sleep     func(ctx context.Context, d time.Duration) error
	// ThreadCPU, when set, reads the CPU time of the calling OS thread
	// (Record keeps to one while it runs): Stats.CPU and DumpCPU.
	ThreadCPU func() time.Duration
	// Sink, when set, receives each line as it is recorded (-o).
	Sink *Writer
	// Events, when set, adds the eBPF events of the traced sockets; Mono
	// reads their clock (CLOCK_MONOTONIC). Discovery dumps are skipped
	// while Established says no socket entered ESTABLISHED since the last
	// one (not with Inodes: those dumps also notice the process ending).
	Events EventSource
	Mono   func() time.Duration
	// Header fields to record.
	Header Header
}

// Stats is what recording cost and how regular it was.
type Stats struct {
	Ticks, Dumps, Lookups int
	// DumpsSkipped counts discovery dumps not run because the eBPF count
	// of new connections had not moved; Events counts events recorded.
	DumpsSkipped, Events int
	// Missed counts ticks skipped because sampling ran late.
	Missed int
	// Lateness of each tick against its schedule.
	Jitter []time.Duration
	// Ended says why the recording stopped early, if it did.
	Ended string
	// Busy is the time spent sampling (dumps, lookups, bookkeeping);
	// DumpTime the part spent in discovery dumps.
	Busy, DumpTime time.Duration
	// CPU is the sampling thread's CPU time (user and system) and
	// DumpCPU the part in discovery dumps, with Config.ThreadCPU.
	CPU, DumpCPU time.Duration
}

// errGone stops a recording whose process (Inodes) has ended.
var errGone = errors.New("trace: traced process ended")

// Conns states: what dumps ask for. Listeners, TIME_WAIT and request
// sockets carry no transfers.
const traceStates = 1<<snapshot.Established | 1<<snapshot.SynSent | 1<<snapshot.FinWait1 |
	1<<snapshot.FinWait2 | 1<<snapshot.CloseWait | 1<<snapshot.LastAck | 1<<snapshot.Closing

// Record samples until cfg.Duration has passed or ctx ends (which is not
// an error: Ctrl-C ends a recording). Each tick reads the known
// connections by exact lookup (a hash lookup each, whatever else the
// namespace holds) and, when due, runs a kernel-filtered dump to find new
// ones; dumps run every tick while they cost less than cfg.DumpShare.
// A dump walks the kernel's whole established hash table, shared by all
// namespaces (`tcpdoctor-lab trace-bench` prints what one costs beside many
// sockets; docs/performance.md), so discovery runs every quarter second
// to several seconds and lookups fill the ticks.
func Record(ctx context.Context, cfg Config) (_ *Trace, st Stats, _ error) {
	if cfg.Interval <= 0 || cfg.Interval < time.Second/MaxRate {
		return nil, st, fmt.Errorf("trace: interval %v: at most %d samples per second", cfg.Interval, MaxRate)
	}
	if cfg.DumpShare <= 0 {
		cfg.DumpShare = 0.01
	}
	cpu := func() time.Duration { return 0 }
	if cfg.ThreadCPU != nil {
		// One thread throughout, so that its CPU clock is the sampler's.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu = cfg.ThreadCPU
		cpu0 := cpu()
		defer func() { st.CPU = cpu() - cpu0 }()
	}
	start := cfg.Now()
	var monoStart time.Duration
	if cfg.Events != nil {
		monoStart = cfg.Mono()
	}
	tr := &Trace{Header: cfg.Header}
	tr.Header.Trace = Version
	tr.Header.Started = start
	tr.Header.Interval = cfg.Interval
	tr.Header.Events = cfg.Events != nil
	if cfg.Sink != nil {
		if err := cfg.Sink.Header(&tr.Header); err != nil {
			return nil, st, err
		}
	}
	r := &recorder{cfg: cfg, tr: tr, byCookie: map[uint64]int{}, monoStart: monoStart}
	opts := sockdiag.Options{States: traceStates, Info: true, Mem: true, Filter: &cfg.Filter}
	var nextDump time.Time
	var costs []time.Duration // of the last dumps
	next := start
	for {
		now := cfg.Now()
		if cfg.Duration > 0 && now.Sub(start) >= cfg.Duration {
			break
		}
		st.Ticks++
		st.Jitter = append(st.Jitter, now.Sub(next))
		t0 := now
		var err error
		// A due dump is skipped while the eBPF count shows nothing new;
		// the count is read again each tick, so a new connection is
		// dumped for at the next tick.
		due := !now.Before(nextDump)
		if due {
			var skip bool
			skip, err = r.nothingNew(st.Dumps)
			if skip {
				st.DumpsSkipped++
				due = false
			}
		}
		if err == nil && due {
			c0 := cpu()
			err = r.discover(opts)
			st.DumpCPU += cpu() - c0
			st.Dumps++
			cost := cfg.Now().Sub(t0)
			st.DumpTime += cost
			// Dump again when dumps at this pace fit the budget. The cost
			// is the least of the last four, so that a slow one (the
			// process preempted, the first one in a namespace) does not
			// leave new connections unseen for long; until four are
			// known the gap stays under a second.
			costs = append(costs, cost)
			if len(costs) > 4 {
				costs = costs[1:]
			}
			gap := max(time.Duration(float64(slices.Min(costs))/cfg.DumpShare), cfg.Interval)
			if st.Dumps < 4 {
				gap = min(gap, max(time.Second, cfg.Interval))
			}
			if cfg.Discover > 0 {
				gap = cfg.Discover
			}
			nextDump = t0.Add(gap)
		} else if err == nil && len(r.live) > 0 {
			err = r.lookup(opts)
			st.Lookups++
		}
		if err == nil && cfg.Events != nil {
			err = r.drain(&st)
		}
		if errors.Is(err, errGone) {
			st.Ended = "the traced process ended"
			break
		}
		if err != nil {
			return tr, st, err
		}
		end := cfg.Now()
		st.Busy += end.Sub(t0)
		next = next.Add(cfg.Interval)
		for !next.After(end) {
			next = next.Add(cfg.Interval)
			st.Missed++
		}
		if cfg.Duration > 0 && next.Sub(start) >= cfg.Duration {
			next = start.Add(cfg.Duration)
		}
		if err := cfg.Sleep(ctx, next.Sub(end)); err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				break
			}
			return tr, st, err
		}
	}
	return tr, st, nil
}

// recorder holds what a recording knows between ticks.
type recorder struct {
	cfg      Config
	tr       *Trace
	byCookie map[uint64]int // cookie -> index in tr.Conns
	live     []int          // indices of connections still open
	keys     []sockdiag.Key // their lookup keys, same order
	inodes   map[uint32]bool
	// quiet counts each connection's consecutive samples with nothing
	// queued or in flight and no byte counted, by index in tr.Conns.
	quiet []int
	tick  int
	sel   []int          // positions in live looked up this tick
	selK  []sockdiag.Key // their keys
	// monoStart is the events' clock at the start; established the
	// count of new connections read before the last dump.
	monoStart   time.Duration
	established uint64
}

// nothingNew reports whether the eBPF count says no connection was
// established since the last dump, so the due dump can be skipped. It
// reads the count for the next dump.
func (r *recorder) nothingNew(dumps int) (bool, error) {
	if r.cfg.Events == nil || r.cfg.Inodes != nil {
		return false, nil
	}
	n, ok, err := r.cfg.Events.Established()
	if err != nil || !ok {
		return false, err
	}
	if dumps > 0 && n == r.established {
		return true, nil
	}
	r.established = n // read before the dump: one made during it is seen next time
	return false, nil
}

// drain records the events waiting.
func (r *recorder) drain(st *Stats) error {
	var werr error
	err := r.cfg.Events.Drain(func(e bpfsource.TraceEvent) {
		idx, ok := r.byCookie[e.Cookie]
		if !ok || werr != nil {
			return
		}
		c := r.tr.Conns[idx]
		ev := Event{T: e.Mono - r.monoStart, Conn: c.ID, Kind: e.Kind.String(), Reason: e.Reason, Rcvbuf: e.Rcvbuf, Clamp: e.Clamp}
		c.Events = append(c.Events, ev)
		st.Events++
		if r.cfg.Sink != nil {
			werr = r.cfg.Sink.Event(&ev)
		}
	})
	if err != nil {
		return err
	}
	return werr
}

// watch and unwatch tell the event source which sockets are traced.
func (r *recorder) watch(cookie uint64) error {
	if r.cfg.Events == nil {
		return nil
	}
	return r.cfg.Events.Watch(cookie)
}

func (r *recorder) unwatch(idx int) error {
	if r.cfg.Events == nil {
		return nil
	}
	return r.cfg.Events.Unwatch(r.tr.Conns[idx].Cookie)
}

// discover dumps the matching sockets, adds the new ones, and records a
// point for each.
func (r *recorder) discover(opts sockdiag.Options) error {
	if r.cfg.Inodes != nil {
		m, err := r.cfg.Inodes()
		if err != nil {
			if r.inodes != nil {
				return errGone // the process ended: so does the recording
			}
			return err
		}
		r.inodes = m
	}
	var live []int
	var keys []sockdiag.Key
	err := r.cfg.Source.Dump(opts, func(sk *snapshot.Socket) error {
		idx, known := r.byCookie[sk.Cookie]
		if !known {
			if r.inodes != nil && !r.inodes[sk.Inode] {
				return nil
			}
			c := &Conn{ID: len(r.tr.Conns) + 1, Local: sk.Local.AddrPort(), Remote: sk.Remote.AddrPort(), Cookie: sk.Cookie, Inode: sk.Inode, CC: sk.CC.String()}
			idx = len(r.tr.Conns)
			r.tr.Conns = append(r.tr.Conns, c)
			r.byCookie[sk.Cookie] = idx
			if err := r.watch(sk.Cookie); err != nil {
				return err
			}
			if r.cfg.Sink != nil {
				if err := r.cfg.Sink.Conn(c); err != nil {
					return err
				}
			}
		}
		live = append(live, idx)
		keys = append(keys, sockdiag.KeyOf(sk))
		return r.add(idx, r.cfg.Now(), sk)
	})
	if err != nil {
		return err
	}
	if r.cfg.Events != nil {
		seen := make(map[int]bool, len(live))
		for _, idx := range live {
			seen[idx] = true
		}
		for _, idx := range r.live {
			if !seen[idx] {
				if err := r.unwatch(idx); err != nil {
					return err
				}
			}
		}
	}
	r.live, r.keys = live, keys
	return nil
}

// lookup reads the known connections one by one; those gone are dropped.
// Connections quiet for two samples or more are read every IdleEvery-th
// tick only, spread over the ticks; any change brings them back to every
// tick.
func (r *recorder) lookup(opts sockdiag.Options) error {
	r.tick++
	every := r.cfg.IdleEvery
	refresh := max(every, int(time.Second/r.cfg.Interval))
	r.sel, r.selK = r.sel[:0], r.selK[:0]
	for i, idx := range r.live {
		if r.quiet[idx] >= 2 {
			if r.cfg.Events != nil {
				if moved, ok := r.cfg.Events.Moved(r.keys[i].Cookie); ok {
					if !moved && (r.tick+idx)%refresh != 0 {
						continue
					}
					r.sel, r.selK = append(r.sel, i), append(r.selK, r.keys[i])
					continue
				}
			}
			if every > 1 && (r.tick+idx)%every != 0 {
				continue
			}
		}
		r.sel, r.selK = append(r.sel, i), append(r.selK, r.keys[i])
	}
	if len(r.sel) == 0 {
		return nil
	}
	gone := make([]bool, len(r.live))
	for _, i := range r.sel {
		gone[i] = true
	}
	err := r.cfg.Source.Lookup(opts, r.selK, func(j int, sk *snapshot.Socket) error {
		if !sk.HasTCP() || traceStates&(1<<sk.State) == 0 {
			return nil // TIME_WAIT now: closed
		}
		i := r.sel[j]
		gone[i] = false
		if ss, ok := r.cfg.Source.(servedSource); ok && !ss.Served().IsZero() {
			return r.add(r.live[i], ss.Served(), sk)
		}
		return r.add(r.live[i], r.cfg.Now(), sk)
	})
	if err != nil {
		return err
	}
	if slices.Contains(gone, true) {
		var live []int
		var keys []sockdiag.Key
		for i, g := range gone {
			if !g {
				live, keys = append(live, r.live[i]), append(keys, r.keys[i])
			} else if err := r.unwatch(r.live[i]); err != nil {
				return err
			}
		}
		r.live, r.keys = live, keys
	}
	return nil
}

// add records sk's sample, stamped at: when the kernel had answered (a
// lookup's sendmsg returned), else when the reply was read. The kernel
// fills a reply after the tick starts, and a sampler preempted, or kept
// waiting inside the request (tcp_info is read under the socket lock), reads
// it late: stamped at the tick's start, a loaded host put 76 ms of a
// burst's busy time into a "10 ms" interval.
func (r *recorder) add(idx int, at time.Time, sk *snapshot.Socket) error {
	c := r.tr.Conns[idx]
	p := pointOf(at.Sub(r.tr.Header.Started), c.ID, sk)
	for len(r.quiet) <= idx {
		r.quiet = append(r.quiet, 0)
	}
	if n := len(c.Points); n > 0 && quietAfter(&c.Points[n-1], &p) {
		r.quiet[idx]++
	} else {
		r.quiet[idx] = 0
	}
	c.Points = append(c.Points, p)
	if r.cfg.Sink != nil {
		return r.cfg.Sink.Point(&p)
	}
	return nil
}

// quietAfter: nothing moved from a to b and nothing waits to.
func quietAfter(a, b *Point) bool {
	return a.Acked == b.Acked && a.Recvd == b.Recvd && b.SendQ == 0 && b.RecvQ == 0 && b.Unacked == 0
}
