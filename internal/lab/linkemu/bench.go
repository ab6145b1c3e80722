package linkemu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
)

// BenchOptions configure Bench. Zero fields take the defaults in brackets.
type BenchOptions struct {
	RTT            time.Duration // [20ms]
	Rate           float64       // fast link, bit/s [1e9]
	SlowRate       float64       // slow link, bit/s [100e6]; negative skips it
	Duration       time.Duration // per throughput run [5s], at most MaxBenchDuration
	PingDuration   time.Duration // delay accuracy run [3s], at most MaxBenchDuration; negative skips it
	PingInterval   time.Duration // [2ms]
	CC             string        // congestion control of the flows [cubic]
	Spin           time.Duration // Params.Spin
	Exec           []string      // Params.Exec
	NormalPriority bool          // Params.NormalPriority
	Progress       io.Writer     // notes; nil discards
	// PressureFile is the CPU pressure (PSI) file read before and after
	// ["/proc/pressure/cpu"]; "-" skips it.
	PressureFile string
	// StatFile is the kernel's CPU time file for steal time ["/proc/stat"];
	// "-" skips it.
	StatFile string
}

// MaxBenchDuration bounds every run of Bench.
const MaxBenchDuration = 60 * time.Second

// PingResult is the delay accuracy: measured RTT minus configured RTT.
type PingResult struct {
	RTT            time.Duration
	Sent, Received int
	P50, P99, Max  time.Duration
	Min            time.Duration
	Link           Stats
}

// FlowResult is one bulk TCP flow, client to server.
type FlowResult struct {
	RTT     time.Duration
	Rate    float64 // link rate, bit/s
	Bytes   int64   // received by the server
	Elapsed time.Duration
	Mbps    float64 // received bits per second / 1e6, over Elapsed
	// SteadyMbps leaves out the first second (slow start); 0 when the
	// flow ran for less than two seconds.
	SteadyMbps float64
	CPU        time.Duration
	CPUPct     float64 // delay-line thread CPU as % of one core over Elapsed
	Link       Stats
}

// BenchResult holds every run of Bench.
type BenchResult struct {
	Ping  PingResult
	Flows []FlowResult
	// CPUPressure is the share of the run's wall time in which some task
	// on the machine waited for a CPU (PSI "some"), -1 if unknown: the
	// figures above are only as good as the machine was quiet.
	CPUPressure float64
	// Steal is the share of the CPUs' time the hypervisor gave to others
	// during the run (/proc/stat steal), -1 if unknown.
	Steal float64
}

func (o *BenchOptions) fill() error {
	if o.RTT == 0 {
		o.RTT = 20 * time.Millisecond
	}
	if o.Rate == 0 {
		o.Rate = 1e9
	}
	if o.SlowRate == 0 {
		o.SlowRate = 100e6
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.PingDuration == 0 {
		o.PingDuration = 3 * time.Second
	}
	if o.PingInterval == 0 {
		o.PingInterval = 2 * time.Millisecond
	}
	if o.CC == "" {
		o.CC = "cubic"
	}
	if o.StatFile == "" {
		o.StatFile = "/proc/stat"
	}
	if o.PressureFile == "" {
		o.PressureFile = "/proc/pressure/cpu"
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	switch {
	case o.RTT < 0 || o.RTT > MaxRTT:
		return fmt.Errorf("linkemu: bench rtt %v out of range 0-%v", o.RTT, MaxRTT)
	case o.Duration < 0 || o.Duration > MaxBenchDuration || o.PingDuration > MaxBenchDuration:
		return fmt.Errorf("linkemu: bench durations %v/%v out of range 0-%v", o.Duration, o.PingDuration, MaxBenchDuration)
	case o.PingInterval < 100*time.Microsecond:
		return fmt.Errorf("linkemu: bench ping interval %v below 100us", o.PingInterval)
	case !(o.Rate > 0 && o.Rate <= MaxRate) || o.SlowRate > MaxRate:
		return fmt.Errorf("linkemu: bench rates %g/%g out of range", o.Rate, o.SlowRate)
	}
	return nil
}

// Bench builds a topology and measures the emulator on it: delay accuracy
// with UDP ping-pongs at RTT, then one bulk TCP flow at Rate and one at
// SlowRate. Everything it creates is removed before it returns.
func Bench(ctx context.Context, o BenchOptions) (res *BenchResult, err error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	t, err := topo.Build(topo.Config{CC: o.CC})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	fmt.Fprintf(o.Progress, "link-bench: topology %s built\n", t.Run)
	res = &BenchResult{CPUPressure: -1, Steal: -1}
	p0, perr := cpuStall(o.PressureFile)
	s0, t0, serr := cpuSteal(o.StatFile)
	w0 := time.Now()
	defer func() {
		if p1, err := cpuStall(o.PressureFile); err == nil && perr == nil {
			res.CPUPressure = (p1 - p0).Seconds() / time.Since(w0).Seconds()
		}
		if s1, t1, err := cpuSteal(o.StatFile); err == nil && serr == nil && t1 > t0 {
			res.Steal = float64(s1-s0) / float64(t1-t0)
		}
	}()
	if o.PingDuration > 0 {
		fmt.Fprintf(o.Progress, "link-bench: ping-pong at rtt %v for %v\n", o.RTT, o.PingDuration)
		if res.Ping, err = benchPing(ctx, t, o, o.params(0)); err != nil {
			return res, err
		}
	}
	rates := []float64{o.Rate}
	if o.SlowRate > 0 {
		rates = append(rates, o.SlowRate)
	}
	for _, r := range rates {
		if o.Duration == 0 {
			break
		}
		fmt.Fprintf(o.Progress, "link-bench: one TCP flow at %.0f Mbit/s, rtt %v for %v\n", r/1e6, o.RTT, o.Duration)
		f, err := benchFlow(ctx, t, o, o.params(r))
		if err != nil {
			return res, err
		}
		res.Flows = append(res.Flows, f)
	}
	return res, nil
}

const benchPort = 7001

func (o BenchOptions) params(rate float64) Params {
	return Params{RTT: o.RTT, RateUp: rate, RateDown: rate, Spin: o.Spin, Exec: o.Exec, NormalPriority: o.NormalPriority}
}

// benchPing starts a link with p and sends UDP ping-pongs through it. The
// echo and the receiving side are blocking sockets on SCHED_FIFO threads
// (when allowed), like the delay line, so that the figure is the link's
// and not this process's scheduling on a busy machine.
func benchPing(ctx context.Context, t *topo.Topo, o BenchOptions, p Params) (PingResult, error) {
	res := PingResult{RTT: p.RTT}
	l, err := Start(t, p)
	if err != nil {
		return res, err
	}
	defer l.Close()
	srv, err := udpSocket(t, t.Server, func(fd int) error {
		return unix.Bind(fd, &unix.SockaddrInet4{Port: benchPort})
	})
	if err != nil {
		return res, err
	}
	defer unix.Close(srv)
	dst := &unix.SockaddrInet4{Port: benchPort, Addr: t.ServerAddrs[0].As4()}
	cli, err := udpSocket(t, t.Client, func(fd int) error { return unix.Connect(fd, dst) })
	if err != nil {
		return res, err
	}
	defer unix.Close(cli)
	var samples []time.Duration
	if len(p.Exec) > 0 {
		res.Sent, samples, err = pingChild(ctx, p.Exec, cli, srv, o.PingInterval, o.PingDuration, p.RTT)
	} else {
		res.Sent, samples, err = pingPong(ctx, cli, srv, o.PingInterval, o.PingDuration, p.RTT)
	}
	if err != nil {
		return res, err
	}
	res.Link = l.Stats()
	res.Received = len(samples)
	if len(samples) == 0 {
		return res, errors.New("linkemu: bench ping: no replies")
	}
	slices.Sort(samples)
	res.Min = samples[0]
	res.P50 = samples[len(samples)/2]
	res.P99 = samples[min(len(samples)-1, len(samples)*99/100)]
	res.Max = samples[len(samples)-1]
	return res, l.Close()
}

// pingPong echoes on srv and sends a timestamped packet on cli every
// interval for duration, returning how many it sent and each reply's RTT
// minus rtt. The echo and the reply reader are blocking reads on
// SCHED_FIFO threads when allowed.
//
// Both receiving sockets take kernel receive timestamps (SO_TIMESTAMPNS,
// stamped when the packet reaches the socket) so that the time the echo
// and the reader need to wake up is not counted: the echo puts its own
// turnaround (send time minus kernel receive time) in the reply, and the
// RTT is the reply's kernel receive time minus the send time minus that
// turnaround. What remains is the path: the delay line both ways (its own
// wake-ups included) and the kernel's forwarding. Without timestamps (the
// option refused) the user-space times are used.
func pingPong(ctx context.Context, cli, srv int, interval, duration, rtt time.Duration) (int, []time.Duration, error) {
	for _, fd := range []int{cli, srv} {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // echo
		defer wg.Done()
		rtThread()
		b := make([]byte, 64)
		oob := make([]byte, 128)
		for !stop.Load() {
			n, oobn, _, from, err := unix.Recvmsg(srv, b, oob, 0)
			if err != nil || from == nil || n < 16 {
				continue
			}
			rx, ok := rxStamp(oob[:oobn])
			tx := time.Now().UnixNano()
			if !ok {
				rx = tx
			}
			binary.LittleEndian.PutUint64(b[8:], uint64(tx-rx))
			unix.Sendto(srv, b[:n], 0, from)
		}
	}()
	var samples []time.Duration
	go func() { // replies
		defer wg.Done()
		rtThread()
		b := make([]byte, 64)
		oob := make([]byte, 128)
		for !stop.Load() {
			n, oobn, _, _, err := unix.Recvmsg(cli, b, oob, 0)
			if err != nil || n < 16 {
				continue
			}
			rx, ok := rxStamp(oob[:oobn])
			if !ok {
				rx = time.Now().UnixNano()
			}
			sent := int64(binary.LittleEndian.Uint64(b))
			turn := int64(binary.LittleEndian.Uint64(b[8:]))
			samples = append(samples, time.Duration(rx-sent-turn)-rtt)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	end := time.After(duration)
	b := make([]byte, 32)
	sent := 0
loop:
	for {
		select {
		case <-ctx.Done():
			return sent, nil, ctx.Err()
		case <-end:
			break loop
		case <-tick.C:
			// Wall clock: kernel receive timestamps are CLOCK_REALTIME.
			binary.LittleEndian.PutUint64(b, uint64(time.Now().UnixNano()))
			if _, err := unix.Write(cli, b); err == nil {
				sent++
			}
		}
	}
	time.Sleep(rtt + 200*time.Millisecond) // the last replies
	stop.Store(true)
	wg.Wait()
	return sent, samples, nil
}

// rxStamp finds the SCM_TIMESTAMPNS receive time (ns, wall clock) in a
// control message buffer.
func rxStamp(oob []byte) (int64, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
			return sec*1e9 + nsec, true
		}
	}
	return 0, false
}

// udpSocket makes a blocking UDP socket in namespace ns with a 50 ms
// receive timeout (so that its readers can notice a stop) and runs setup.
func udpSocket(t *topo.Topo, ns string, setup func(fd int) error) (int, error) {
	fd := -1
	err := t.Do(ns, func() (err error) {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return setup(fd)
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("linkemu: bench udp socket in %s: %w", ns, err)
	}
	return fd, nil
}

// rtThread locks the goroutine to its thread for good and asks for
// SCHED_FIFO priority 10 and no timer slack (best effort).
func rtThread() {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 1 /* SCHED_FIFO */, Priority: 10}
	_ = unix.SchedSetAttr(0, &attr, 0)
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
}

// benchFlow starts a link with p and runs one TCP flow, client to server,
// for o.Duration.
func benchFlow(ctx context.Context, t *topo.Topo, o BenchOptions, p Params) (FlowResult, error) {
	res := FlowResult{RTT: p.RTT, Rate: p.RateUp}
	l, err := Start(t, p)
	if err != nil {
		return res, err
	}
	defer l.Close()
	var ln *net.TCPListener
	if err := t.Do(t.Server, func() (err error) {
		ln, err = net.ListenTCP("tcp4", &net.TCPAddr{Port: benchPort})
		return err
	}); err != nil {
		return res, fmt.Errorf("linkemu: bench listen: %w", err)
	}
	defer ln.Close()
	type recv struct {
		n, atOne int64 // bytes in all, and after one second
		elapsed  time.Duration
		err      error
	}
	rc := make(chan recv, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			rc <- recv{err: err}
			return
		}
		defer c.Close()
		start := time.Now()
		var r recv
		b := make([]byte, 256<<10)
		for {
			k, err := c.Read(b)
			r.n += int64(k)
			if r.atOne == 0 && time.Since(start) >= time.Second {
				r.atOne = r.n
			}
			if err != nil {
				if err != io.EOF {
					r.err = err
				}
				break
			}
		}
		r.elapsed = time.Since(start)
		rc <- r
	}()
	var c net.Conn
	if err := t.Do(t.Client, func() (err error) {
		c, err = net.DialTimeout("tcp4", net.JoinHostPort(t.ServerAddrs[0].String(), fmt.Sprint(benchPort)), 5*time.Second)
		return err
	}); err != nil {
		return res, fmt.Errorf("linkemu: bench connect: %w", err)
	}
	before := l.Stats()
	var once sync.Once
	stop := func() { once.Do(func() { c.Close() }) }
	defer stop()
	deadline := time.Now().Add(o.Duration)
	c.SetWriteDeadline(deadline)
	buf := make([]byte, 128<<10)
	cancelled := context.AfterFunc(ctx, stop)
	defer cancelled()
	for time.Now().Before(deadline) {
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	// Close sends FIN after the data still buffered; the receiver's EOF
	// ends its clock.
	c.(*net.TCPConn).CloseWrite()
	var r recv
	select {
	case r = <-rc:
	case <-time.After(10 * time.Second):
		return res, errors.New("linkemu: bench flow: receiver did not finish")
	}
	stop()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if r.err != nil {
		return res, fmt.Errorf("linkemu: bench flow: %w", r.err)
	}
	after := l.Stats()
	res.Bytes, res.Elapsed = r.n, r.elapsed
	if r.elapsed > 0 {
		res.Mbps = float64(r.n) * 8 / r.elapsed.Seconds() / 1e6
		if r.elapsed >= 2*time.Second && r.atOne > 0 {
			res.SteadyMbps = float64(r.n-r.atOne) * 8 / (r.elapsed - time.Second).Seconds() / 1e6
		}
		res.CPU = after.CPU - before.CPU
		res.CPUPct = 100 * res.CPU.Seconds() / r.elapsed.Seconds()
	}
	res.Link = after
	return res, l.Close()
}

// cpuStall reads the "some" total stall time from a PSI file.
func cpuStall(path string) (time.Duration, error) {
	if path == "-" {
		return 0, errors.New("skipped")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return parseStall(string(b))
}

// cpuSteal returns the steal and total jiffies of the "cpu" line of
// /proc/stat.
func cpuSteal(path string) (steal, total int64, err error) {
	if path == "-" {
		return 0, 0, errors.New("skipped")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	return parseSteal(string(b))
}

func parseSteal(s string) (steal, total int64, err error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("linkemu: /proc/stat: first line %q is not the cpu total", line)
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("linkemu: /proc/stat: %q: %w", v, err)
		}
		if i < 8 { // guest times are already in user and nice
			total += n
		}
		if i == 7 {
			steal = n
		}
	}
	return steal, total, nil
}

// parseStall finds total= on the "some" line of a PSI file (microseconds).
func parseStall(s string) (time.Duration, error) {
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("linkemu: psi total %q: %w", v, err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
	}
	return 0, errors.New("linkemu: psi: no some total")
}

// WriteTable prints the results as two aligned tables.
func (r *BenchResult) WriteTable(w io.Writer) {
	if p := r.Ping; p.Received > 0 {
		fmt.Fprintf(w, "delay accuracy (UDP ping-pong, measured RTT - configured RTT %v; line hold = release - due, per packet):\n", p.RTT)
		fmt.Fprintf(w, "  %-8s %-8s %-9s %-9s %-9s %-9s   %-15s %-15s\n", "sent", "replies", "min", "p50", "p99", "max", "line hold p50", "line hold p99")
		fmt.Fprintf(w, "  %-8d %-8d %-9s %-9s %-9s %-9s   %-15s %-15s\n", p.Sent, p.Received, ms(p.Min), ms(p.P50), ms(p.P99), ms(p.Max),
			"<"+ms(p.Link.HoldErrP50), "<"+ms(p.Link.HoldErrP99))
	}
	if r.CPUPressure >= 0 {
		fmt.Fprintf(w, "machine: some task waited for a CPU %.0f %% of the run (PSI cpu some)", 100*r.CPUPressure)
		if r.Steal >= 0 {
			fmt.Fprintf(w, "; the hypervisor took %.0f %% of the CPUs (steal)", 100*r.Steal)
		}
		fmt.Fprintln(w)
	}
	if len(r.Flows) > 0 {
		fmt.Fprintf(w, "throughput (one autotuned TCP flow, client to server):\n")
		fmt.Fprintf(w, "  %-10s %-7s %-10s %-9s %-14s %-14s %-10s %-15s %-15s\n", "link", "rtt", "received", "seconds", "goodput", "after 1s", "line cpu", "line hold p50", "line hold p99")
		for _, f := range r.Flows {
			fmt.Fprintf(w, "  %-10s %-7v %-10s %-9.2f %-14s %-14s %-10s %-15s %-15s\n",
				fmt.Sprintf("%g Mbit", f.Rate/1e6), f.RTT, fmt.Sprintf("%.1f MB", float64(f.Bytes)/1e6),
				f.Elapsed.Seconds(), fmt.Sprintf("%.1f Mbit/s", f.Mbps), fmt.Sprintf("%.1f Mbit/s", f.SteadyMbps), fmt.Sprintf("%.1f %%", f.CPUPct),
				"<"+ms(f.Link.HoldErrP50), "<"+ms(f.Link.HoldErrP99))
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/1e6) }

// Target is one of the targets for the default setup (20 ms RTT,
// 1 Gbit/s and 100 Mbit/s links).
type Target struct {
	Name, Value string
	OK          bool
}

// Targets checks the results against the targets; it makes sense only for
// the default setup. The throughput targets are steady-state rates: they
// are checked on the rate after the first second (slow start and the loss
// recovery that ends it take most of that second at 20 ms).
func (r *BenchResult) Targets() []Target {
	var out []Target
	if p := r.Ping; p.Received > 0 {
		out = append(out,
			Target{"delay p50 within 0.2ms", ms(p.P50), abs(p.P50) <= 200*time.Microsecond},
			Target{"delay p99 within 0.5ms", ms(p.P99), abs(p.P99) <= 500*time.Microsecond})
	}
	for _, f := range r.Flows {
		switch f.Rate {
		case 1e9:
			out = append(out,
				Target{"1 Gbit/s flow at least 900 Mbit/s after 1s", fmt.Sprintf("%.1f", f.SteadyMbps), f.SteadyMbps >= 900},
				Target{"emulator at most 25 % of a core", fmt.Sprintf("%.1f %%", f.CPUPct), f.CPUPct <= 25})
		case 100e6:
			out = append(out, Target{"100 Mbit/s flow at least 94 Mbit/s after 1s", fmt.Sprintf("%.1f", f.SteadyMbps), f.SteadyMbps >= 94})
		}
	}
	return out
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
