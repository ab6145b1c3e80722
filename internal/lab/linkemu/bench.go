// SPDX-License-Identifier: Apache-2.0

package linkemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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
