package linkemu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
)

// BenchOptions configure Bench. Zero fields take the defaults in brackets.
type BenchOptions struct {
	RTT            time.Duration // [20ms]
	Rate           float64       // fast link, bit/s [1e9]
	SlowRate       float64       // slow link, bit/s [100e6]; negative skips it
	Duration       time.Duration // per throughput run [5s], at most MaxBenchDuration
	PingDuration   time.Duration // delay accuracy run [3s], at most MaxBenchDuration
	PingInterval   time.Duration // [2ms]
	CC             string        // congestion control of the flows [cubic]
	Spin           time.Duration // Params.Spin
	Exec           []string      // Params.Exec
	NormalPriority bool          // Params.NormalPriority
	Progress       io.Writer     // notes; nil discards
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
	CPU     time.Duration
	CPUPct  float64 // delay-line thread CPU as % of one core over Elapsed
	Link    Stats
}

// BenchResult holds every run of Bench.
type BenchResult struct {
	Ping  PingResult
	Flows []FlowResult
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
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	switch {
	case o.RTT < 0 || o.RTT > MaxRTT:
		return fmt.Errorf("linkemu: bench rtt %v out of range 0-%v", o.RTT, MaxRTT)
	case o.Duration < 0 || o.Duration > MaxBenchDuration || o.PingDuration < 0 || o.PingDuration > MaxBenchDuration:
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
	res = &BenchResult{}
	if o.PingDuration > 0 {
		fmt.Fprintf(o.Progress, "link-bench: ping-pong at rtt %v for %v\n", o.RTT, o.PingDuration)
		if res.Ping, err = benchPing(ctx, t, o); err != nil {
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
		f, err := benchFlow(ctx, t, o, r)
		if err != nil {
			return res, err
		}
		res.Flows = append(res.Flows, f)
	}
	return res, nil
}

const benchPort = 7001

func benchPing(ctx context.Context, t *topo.Topo, o BenchOptions) (PingResult, error) {
	res := PingResult{RTT: o.RTT}
	l, err := Start(t, Params{RTT: o.RTT, Spin: o.Spin, Exec: o.Exec, NormalPriority: o.NormalPriority})
	if err != nil {
		return res, err
	}
	defer l.Close()
	var srv, cli *net.UDPConn
	if err := t.Do(t.Server, func() (err error) {
		srv, err = net.ListenUDP("udp4", &net.UDPAddr{Port: benchPort})
		return err
	}); err != nil {
		return res, fmt.Errorf("linkemu: bench echo: %w", err)
	}
	defer srv.Close()
	if err := t.Do(t.Client, func() (err error) {
		cli, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: t.ServerAddrs[0].AsSlice(), Port: benchPort})
		return err
	}); err != nil {
		return res, fmt.Errorf("linkemu: bench ping: %w", err)
	}
	defer cli.Close()
	go func() { // echo until srv is closed
		b := make([]byte, 64)
		for {
			n, a, err := srv.ReadFromUDP(b)
			if err != nil {
				return
			}
			srv.WriteToUDP(b[:n], a)
		}
	}()
	t0 := time.Now()
	var samples []time.Duration
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		b := make([]byte, 64)
		for {
			n, err := cli.Read(b)
			if err != nil {
				return
			}
			if n < 8 {
				continue
			}
			sent := time.Duration(binary.LittleEndian.Uint64(b))
			samples = append(samples, time.Since(t0)-sent-o.RTT)
		}
	}()
	tick := time.NewTicker(o.PingInterval)
	end := time.After(o.PingDuration)
	b := make([]byte, 32)
loop:
	for {
		select {
		case <-ctx.Done():
			cli.Close()
			<-recvDone
			return res, ctx.Err()
		case <-end:
			break loop
		case <-tick.C:
			binary.LittleEndian.PutUint64(b, uint64(time.Since(t0)))
			if _, err := cli.Write(b); err == nil {
				res.Sent++
			}
		}
	}
	tick.Stop()
	time.Sleep(o.RTT + 200*time.Millisecond) // the last replies
	cli.Close()
	<-recvDone
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

func benchFlow(ctx context.Context, t *topo.Topo, o BenchOptions, rate float64) (FlowResult, error) {
	res := FlowResult{RTT: o.RTT, Rate: rate}
	l, err := Start(t, Params{RTT: o.RTT, RateUp: rate, RateDown: rate, Spin: o.Spin, Exec: o.Exec, NormalPriority: o.NormalPriority})
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
		n       int64
		elapsed time.Duration
		err     error
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
		n, err := io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
		rc <- recv{n: n, elapsed: time.Since(start), err: err}
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
		res.CPU = after.CPU - before.CPU
		res.CPUPct = 100 * res.CPU.Seconds() / r.elapsed.Seconds()
	}
	res.Link = after
	return res, l.Close()
}

// WriteTable prints the results as two aligned tables.
func (r *BenchResult) WriteTable(w io.Writer) {
	if p := r.Ping; p.Received > 0 {
		fmt.Fprintf(w, "delay accuracy (UDP ping-pong, measured RTT - configured RTT %v):\n", p.RTT)
		fmt.Fprintf(w, "  %-8s %-8s %-9s %-9s %-9s %-9s\n", "sent", "replies", "min", "p50", "p99", "max")
		fmt.Fprintf(w, "  %-8d %-8d %-9s %-9s %-9s %-9s\n", p.Sent, p.Received, ms(p.Min), ms(p.P50), ms(p.P99), ms(p.Max))
	}
	if len(r.Flows) > 0 {
		fmt.Fprintf(w, "throughput (one autotuned TCP flow, client to server):\n")
		fmt.Fprintf(w, "  %-10s %-7s %-10s %-9s %-14s %-10s %-10s\n", "link", "rtt", "received", "seconds", "goodput", "line cpu", "hold err")
		for _, f := range r.Flows {
			fmt.Fprintf(w, "  %-10s %-7v %-10s %-9.2f %-14s %-10s %-10s\n",
				fmt.Sprintf("%g Mbit", f.Rate/1e6), f.RTT, fmt.Sprintf("%.1f MB", float64(f.Bytes)/1e6),
				f.Elapsed.Seconds(), fmt.Sprintf("%.1f Mbit/s", f.Mbps), fmt.Sprintf("%.1f %%", f.CPUPct),
				ms(f.Link.HoldErrMean)+" avg")
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/1e6) }
