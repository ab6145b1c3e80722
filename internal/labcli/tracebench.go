// SPDX-License-Identifier: Apache-2.0

package labcli

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bench"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// newTraceBenchCmd measures the trace recorder's cost (docs/performance.md):
// the trace library in this process, as tcpdoctor trace runs it.
func newTraceBenchCmd(e *Env) *cobra.Command {
	var o bench.TraceOptions
	cmd := &cobra.Command{
		Use:         "trace-bench",
		Short:       "Measure trace's CPU share and sampling jitter (root)",
		Long:        "Measure trace's CPU share and sampling jitter: N traced sockets among many others in a private namespace (root).",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{cleansUp: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return usageErr("trace-bench: needs root (creates network namespaces)")
			}
			o.Self, o.Progress = benchSelf(e), e.Stderr
			res, err := bench.Trace(cmd.Context(), o)
			if err != nil {
				return failedErr(err)
			}
			p50, p99, worst := res.Stats.JitterSummary()
			us := func(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/1e3) }
			tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "sockets in the namespace\t%d\t(%d traced)\n", res.Sockets, res.Matched)
			fmt.Fprintf(tw, "samples\t%d at %d/s over %s\t%d dumps (mean %s), %d lookup rounds, %d ticks missed\n", res.Stats.Ticks, res.Rate,
				res.Wall.Round(time.Millisecond), res.Stats.Dumps, us(res.DumpCost), res.Stats.Lookups, res.Stats.Missed)
			fmt.Fprintf(tw, "CPU\t%s of one core\t(%s user+system over %s)\n", units.Pct(res.Share()), res.CPU.Round(time.Millisecond), res.Wall.Round(time.Millisecond))
			fmt.Fprintf(tw, "CPU (precise)\t%.2f%%\t(user %.2f%%, system %.2f%%; discovery dumps took %.2f%% of the wall time)\n", 100*res.Share(),
				100*res.User.Seconds()/res.Wall.Seconds(), 100*res.System.Seconds()/res.Wall.Seconds(), 100*res.Stats.DumpTime.Seconds()/res.Wall.Seconds())
			fmt.Fprintf(tw, "sampling thread\t%.2f%% of one core\t(%.2f%% without the discovery dumps: %d dumps took %s of CPU)\n",
				100*res.Stats.CPU.Seconds()/res.Wall.Seconds(), 100*(res.Stats.CPU-res.Stats.DumpCPU).Seconds()/res.Wall.Seconds(),
				res.Stats.Dumps, res.Stats.DumpCPU.Round(time.Millisecond))
			if o.BPF {
				fmt.Fprintf(tw, "eBPF\tevents on\t%d ticks skipped a due dump (nothing established), %d events\n", res.Stats.DumpsSkipped, res.Stats.Events)
			}
			fmt.Fprintf(tw, "tick lateness\tmedian %s\tp99 %s\tmax %s\n", us(p50), us(p99), us(worst))
			if load, err := os.ReadFile("/proc/loadavg"); err == nil {
				fmt.Fprintf(tw, "loadavg\t%s", load) // the figures are only as quiet as the machine
			}
			return tw.Flush()
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.Others, "others", 50000, "established connections beside the traced ones (two sockets each)")
	fs.IntVar(&o.Matched, "matched", 100, "traced sockets")
	fs.IntVar(&o.Rate, "rate", 100, "samples per second")
	fs.DurationVar(&o.Duration, "duration", 20*time.Second, "how long to record")
	fs.IntVar(&o.IdleEvery, "idle-every", 1, "trace's --idle-every: 1 reads every traced connection every sample (the default); they are idle, so 10 reads them at a tenth of the rate")
	fs.BoolVar(&o.BPF, "bpf", false, "load trace's eBPF events (as tcpdoctor trace does where they load): discovery dumps are skipped while no connection is established")
	fs.BoolVar(&o.GoTimers, "go-timers", false, "sleep between samples with Go's timers instead of nanosleep (trace.PreciseSleep, what tcpdoctor trace uses)")
	return cmd
}
