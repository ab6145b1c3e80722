// SPDX-License-Identifier: Apache-2.0

package labcli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
)

type labLinkBenchOpts struct {
	rtt, duration, pingDuration time.Duration
	spin                        time.Duration
	rate, slowRate, cc          string
	inProcess, normalPriority   bool
	check                       bool
}

// delayLineExec is the argv that runs a delay line in a child process
// (linkemu.Params.Exec): tcpdoctor-lab's delay-line command.
func delayLineExec(e *Env) []string {
	return []string{e.Self, "delay-line"}
}

// newDelayLineCmd is the delay line's child process (linkemu.ServeLine),
// which the link emulator starts with the TUN device and its settings.
func newDelayLineCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "delay-line",
		Short:  "Serve as the link emulator's delay-line child process (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if !linkemu.IsChild() {
				return usageErr("delay-line: run by the link emulator only")
			}
			return linkemu.ServeLine()
		},
	}
}

func newLinkBenchCmd(e *Env) *cobra.Command {
	o := &labLinkBenchOpts{}
	cmd := &cobra.Command{
		Use:   "link-bench",
		Short: "Measure the link emulator: delay, throughput, CPU use (root)",
		Long: `link-bench builds a client/router/server namespace topology and measures the
emulated link: UDP ping-pongs at --rtt (measured RTT minus configured RTT),
then one autotuned TCP flow at --rate and one at --slow-rate, with the
delay line's CPU time as a share of one core. Everything is removed at the
end and on Ctrl-C.`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{cleansUp: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLinkBench(cmd, e, o)
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&o.rtt, "rtt", 20*time.Millisecond, "round-trip delay to emulate (half each way)")
	fs.StringVar(&o.rate, "rate", "1gbit", "rate of the fast link, each way")
	fs.StringVar(&o.slowRate, "slow-rate", "100mbit", `rate of the slow link ("0" skips it)`)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each throughput run (max 60s)")
	fs.DurationVar(&o.pingDuration, "ping-duration", 3*time.Second, "length of the delay accuracy run (max 60s, 0 skips it)")
	fs.StringVar(&o.cc, "cc", "cubic", "congestion control of the flows (cubic, reno, bbr)")
	fs.DurationVar(&o.spin, "spin", 0, "busy-wait before each release (0: the default, negative: none)")
	fs.BoolVar(&o.inProcess, "in-process", false, "run the delay line on a thread of this process, not in a child")
	fs.BoolVar(&o.normalPriority, "normal-priority", false, "do not give the delay line SCHED_FIFO priority")
	fs.BoolVar(&o.check, "check", false, "exit 1 if a target of the default setup (20ms, 1gbit, 100mbit) is missed")
	return cmd
}

func runLinkBench(cmd *cobra.Command, e *Env, o *labLinkBenchOpts) error {
	if os.Geteuid() != 0 {
		return usageErr("link-bench: needs root (creates network namespaces and a TUN device)")
	}
	bo := linkemu.BenchOptions{
		RTT: o.rtt, Duration: o.duration, PingDuration: o.pingDuration, CC: o.cc,
		NormalPriority: o.normalPriority, Progress: e.Stderr, Spin: o.spin,
	}
	if o.duration <= 0 || o.duration > linkemu.MaxBenchDuration || o.pingDuration < 0 || o.pingDuration > linkemu.MaxBenchDuration {
		return usageErr("link-bench: durations must be within 0-%v (--duration above 0)", linkemu.MaxBenchDuration)
	}
	if o.rtt <= 0 || o.rtt > linkemu.MaxRTT {
		return usageErr("link-bench: --rtt %v out of range (0, %v]", o.rtt, linkemu.MaxRTT)
	}
	if o.spin > time.Millisecond {
		return usageErr("link-bench: --spin %v above 1ms", o.spin)
	}
	var err error
	if bo.Rate, err = bdp.ParseRate(o.rate); err != nil {
		return usageErr("link-bench: --rate: %v", err)
	}
	if strings.TrimSpace(o.slowRate) == "0" {
		bo.SlowRate = -1
	} else if bo.SlowRate, err = bdp.ParseRate(o.slowRate); err != nil {
		return usageErr("link-bench: --slow-rate: %v", err)
	}
	if o.pingDuration == 0 {
		bo.PingDuration = -1
	}
	if !o.inProcess {
		bo.Exec = delayLineExec(e)
	}
	res, err := linkemu.Bench(cmd.Context(), bo)
	if err != nil {
		return failedErr(err)
	}
	res.WriteTable(e.Stdout)
	if o.rtt == 20*time.Millisecond && bo.Rate == 1e9 && bo.SlowRate == 100e6 && o.pingDuration > 0 {
		missed := 0
		for _, c := range res.Targets() {
			mark := "met"
			if !c.OK {
				mark, missed = "MISSED", missed+1
			}
			fmt.Fprintf(e.Stdout, "target %-46s %-12s %s\n", c.Name, c.Value, mark)
		}
		if o.check && missed > 0 {
			return errFailed
		}
	}
	return nil
}
