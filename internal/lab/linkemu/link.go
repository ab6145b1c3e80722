// SPDX-License-Identifier: Apache-2.0

// Package linkemu emulates a network link in the lab's router namespace:
// a TUN "delay line" holds every forwarded packet for the one-way delay
// (with optional random loss), and tbf on the router's egress veths sets
// the rate and the bottleneck queue. The kernel has no netem here.
package linkemu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
)

// Names used in the router namespace.
const (
	TunName   = "dline0"
	table     = "100"
	rulePrefC = "100"
	rulePrefS = "101"
)

// Limits that keep a mistyped parameter from building something absurd.
const (
	MaxRTT   = 10 * time.Second
	MaxRate  = 100e9
	MaxQueue = 1 << 30
)

// Params describe the emulated link.
type Params struct {
	RTT time.Duration // round-trip delay added; each direction holds RTT/2
	// RateUp (client to server) and RateDown (server to client) in bits/s;
	// 0 leaves that direction unlimited.
	RateUp, RateDown float64
	// QueueBytes is the bottleneck queue (tbf limit) of each rate-limited
	// direction; 0 picks one bandwidth-delay product (at least 64 KiB).
	QueueBytes int
	// Loss is the probability of dropping a packet in the delay line,
	// each direction. With Loss > 0 the TUN runs without GSO offload so
	// that a loss is one wire packet, which costs more CPU.
	Loss float64
	// CC, if set, replaces the congestion control on the hosts' default
	// routes (cubic, reno, bbr).
	CC string
	// Seed seeds the loss generator; 0 picks a random seed.
	Seed uint64
	// Exec, if set, runs the delay line in a child process started with
	// this argv (normally our own executable and arguments that make it
	// call ServeLine): its own process keeps it clear of this process's
	// goroutines and makes its CPU use its own. Empty runs it on a locked
	// thread of this process.
	Exec []string
	// The delay-line thread asks for SCHED_FIFO priority 10 so that busy
	// workloads on the same cores do not delay releases (Stats.Realtime
	// tells whether it got it); NormalPriority leaves it a normal thread.
	NormalPriority bool
	// Spin bounds how long the delay line busy-waits before a release to
	// absorb wake-up latency (it wakes early by its recent lateness);
	// 0 means DefaultSpin, negative none.
	Spin time.Duration
}

// DefaultSpin bounds the busy-wait before a release when Params.Spin is 0.
const DefaultSpin = 50 * time.Microsecond

// Link is a running link emulator.
type Link struct {
	topo   *topo.Topo
	p      Params
	line   *line
	child  *child // nil when the line runs in this process
	done   chan error
	err    error
	undo   [][]string // commands that undo the configuration, in order done
	closed bool
}

// Stats are the delay line's counters since Start.
type Stats struct {
	Packets, Bytes int64 // released (bytes without the vnet header; GSO packets count once)
	Lost           int64 // dropped by the random loss
	Overflow       int64 // dropped because the delay line held too much memory
	WriteErrors    int64
	// Hold error is the release time minus the due time; the line may
	// release up to 10 us early.
	HoldErrMean, HoldErrMin, HoldErrMax time.Duration
	// HoldErrP50 and HoldErrP99 are upper bounds of 10 us histogram
	// buckets (0 means early).
	HoldErrP50, HoldErrP99 time.Duration
	Realtime               bool // the delay-line thread runs at SCHED_FIFO priority
	// CPU is the delay-line thread's CPU time (user+system), which includes
	// the kernel's forwarding work done while writing packets back.
	CPU time.Duration
}

func (p Params) validate() error {
	switch {
	case p.RTT < 0 || p.RTT > MaxRTT:
		return fmt.Errorf("linkemu: rtt %v out of range 0-%v", p.RTT, MaxRTT)
	case !(p.RateUp >= 0 && p.RateUp <= MaxRate) || !(p.RateDown >= 0 && p.RateDown <= MaxRate):
		return fmt.Errorf("linkemu: rate %g/%g bit/s out of range 0-%g", p.RateUp, p.RateDown, MaxRate)
	case p.QueueBytes < 0 || p.QueueBytes > MaxQueue:
		return fmt.Errorf("linkemu: queue %d bytes out of range 0-%d", p.QueueBytes, MaxQueue)
	case !(p.Loss >= 0 && p.Loss < 1):
		return fmt.Errorf("linkemu: loss %g out of range [0,1)", p.Loss)
	case p.Spin > time.Millisecond:
		return fmt.Errorf("linkemu: spin %v above 1ms", p.Spin)
	}
	switch p.CC {
	case "", "cubic", "reno", "bbr":
	default:
		return fmt.Errorf("linkemu: congestion control %q: want cubic, reno or bbr", p.CC)
	}
	return nil
}

// Start sets up the link in t's router namespace and starts the delay
// line. Close undoes it; the topology stays usable.
func Start(t *topo.Topo, p Params) (*Link, error) {
	if t == nil {
		return nil, errors.New("linkemu: nil topology")
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	if p.Spin == 0 {
		p.Spin = DefaultSpin
	}
	if p.Spin < 0 {
		p.Spin = 0
	}
	seed := p.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	l := &Link{topo: t, p: p, done: make(chan error, 1)}
	ln := newLine(p.RTT/2, p.Spin, p.Loss, seed)
	if !p.NormalPriority {
		ln.rtPrio = 10
	}
	l.line = ln
	var tun int
	if err := t.Do(t.Router, func() (err error) {
		tun, err = openTUN(TunName, p.Loss == 0)
		return err
	}); err != nil {
		return nil, err
	}
	if len(p.Exec) > 0 {
		c, err := startChild(p.Exec, ln, tun)
		if err != nil {
			return nil, err
		}
		l.child = c
	} else {
		wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			unix.Close(tun)
			return nil, fmt.Errorf("linkemu: eventfd: %w", err)
		}
		ln.tun, ln.wake = tun, wake
		go func() { l.done <- ln.run() }()
	}
	// Routing into the TUN only once the line reads it: a child process
	// takes tens of ms to start on a busy machine, and packets routed
	// before would wait in the TUN's queue, unseen by the hold error.
	if err := l.waitReady(5 * time.Second); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	if err := l.configure(); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}

// waitReady waits until the delay-line thread runs its loop.
func (l *Link) waitReady(timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for !l.line.st.ready.Load() {
		if time.Now().After(end) {
			return fmt.Errorf("linkemu: delay line not running after %v", timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// step is one configuration command and the command that undoes it.
type step struct{ do, undo []string }

func (l *Link) configure() error {
	ctx := context.Background()
	t, r := l.topo, l.topo.Router
	steps := []step{
		{do: []string{"ip", "link", "set", TunName, "up", "txqueuelen", "5000"}},
		{do: []string{"ip", "route", "replace", "default", "dev", TunName, "table", table}},
		{do: []string{"ip", "rule", "add", "iif", topo.RouterClientIf, "lookup", table, "pref", rulePrefC},
			undo: []string{"ip", "rule", "del", "pref", rulePrefC}},
		{do: []string{"ip", "rule", "add", "iif", topo.RouterServerIf, "lookup", table, "pref", rulePrefS},
			undo: []string{"ip", "rule", "del", "pref", rulePrefS}},
	}
	for _, d := range []struct {
		dev  string
		rate float64
	}{{topo.RouterServerIf, l.p.RateUp}, {topo.RouterClientIf, l.p.RateDown}} {
		if q := tbfArgs(d.rate, l.p.RTT, l.p.QueueBytes); q != nil {
			steps = append(steps, step{
				do:   append([]string{"tc", "qdisc", "replace", "dev", d.dev, "root"}, q...),
				undo: []string{"tc", "qdisc", "del", "dev", d.dev, "root"}})
		}
	}
	for _, s := range steps {
		if _, err := t.Cmd(ctx, s.do[0], r, s.do[1:]...); err != nil {
			return err
		}
		if s.undo != nil {
			l.undo = append(l.undo, s.undo)
		}
	}
	if err := t.Do(r, func() error { return topo.WriteSysctl("net/ipv4/conf/"+TunName+"/rp_filter", "0") }); err != nil {
		return err
	}
	if l.p.CC != "" {
		for _, h := range []struct {
			ns string
			gw string
		}{{t.Client, t.ClientGW.String()}, {t.Server, t.ServerGW.String()}} {
			if _, err := t.Cmd(ctx, "ip", h.ns, "route", "replace", "default", "via", h.gw, "dev", topo.HostIf, "congctl", l.p.CC); err != nil {
				return err
			}
		}
	}
	return nil
}

// minBurst is one maximal GSO packet and one Ethernet frame.
const minBurst = 64<<10 + 1514

// TBF returns the tbf burst and limit in bytes used for a rate and RTT:
// burst is 1 ms at the rate, at least one 64 KiB GSO packet plus a wire
// packet (with a smaller bucket tbf must split every GSO packet into wire
// packets and send them at the token rate as they come back, which costs
// goodput: "Measured figures" in docs/lab-link.md), limit the queue asked
// or one bandwidth-delay product, never below the burst.
func TBF(rate float64, rtt time.Duration, queue int) (burst, limit int) {
	burst = max(int(rate/8/1000), minBurst)
	limit = queue
	if limit == 0 {
		limit = max(int(rate/8*rtt.Seconds()), 64<<10)
	}
	return burst, max(limit, burst)
}

func tbfArgs(rate float64, rtt time.Duration, queue int) []string {
	if rate == 0 {
		return nil
	}
	burst, limit := TBF(rate, rtt, queue)
	return []string{"tbf",
		"rate", strconv.FormatInt(int64(math.Round(rate)), 10) + "bit",
		"burst", strconv.Itoa(burst),
		"limit", strconv.Itoa(limit)}
}

// Params returns the parameters in force (defaults filled in).
func (l *Link) Params() Params { return l.p }

// Stats returns the counters so far (the final ones after Close). It may
// run while traffic flows, but not at the same time as Close.
func (l *Link) Stats() Stats {
	c := l.line.st
	s := Stats{
		Packets:     c.packets.Load(),
		Bytes:       c.bytes.Load(),
		Lost:        c.lost.Load(),
		Overflow:    c.overflow.Load(),
		WriteErrors: c.writeErrs.Load(),
		Realtime:    c.realtime.Load(),
	}
	if s.Packets > 0 {
		s.HoldErrMean = time.Duration(c.errSum.Load() / s.Packets)
		s.HoldErrMin = time.Duration(c.errMin.Load())
		s.HoldErrMax = time.Duration(c.errMax.Load())
		s.HoldErrP50 = c.quantile(0.5)
		s.HoldErrP99 = c.quantile(0.99)
	}
	if c.done.Load() {
		s.CPU = time.Duration(c.cpuAtExit.Load())
	} else {
		s.CPU = l.line.cpu()
	}
	return s
}

// Close stops the delay line and removes the rules, routes and qdiscs it
// added (if the router namespace still exists). It is idempotent.
func (l *Link) Close() error {
	if l == nil || l.closed {
		return l.errOrNil()
	}
	l.closed = true
	var errs []error
	if l.child != nil {
		if err := l.child.stop(2*time.Second + l.p.RTT); err != nil {
			errs = append(errs, err)
		}
		l.child.release(l.line)
	} else {
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		if _, err := unix.Write(l.line.wake, one); err != nil {
			errs = append(errs, fmt.Errorf("linkemu: wake delay line: %w", err))
		} else if err := <-l.done; err != nil {
			errs = append(errs, err)
		}
		unix.Close(l.line.wake)
		unix.Close(l.line.tun) // the TUN device disappears with its last fd
	}
	if names, _ := topo.List(l.topo.Router); len(names) > 0 {
		for i := len(l.undo) - 1; i >= 0; i-- {
			c := l.undo[i]
			if _, err := l.topo.Cmd(context.Background(), c[0], l.topo.Router, c[1:]...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	l.err = errors.Join(errs...)
	return l.err
}

func (l *Link) errOrNil() error {
	if l == nil {
		return nil
	}
	return l.err
}
