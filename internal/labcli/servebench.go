// SPDX-License-Identifier: Apache-2.0

package labcli

import (
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bench"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

type serveBenchOpts struct {
	conns    int
	cycles   int
	interval time.Duration
	history  bool
	withHist bool
}

// newServeBenchCmd measures the exporter at N sockets: the cost of one
// collection and diagnosis cycle, scrape latency, and the serving
// process's peak RSS (docs/performance.md).
func newServeBenchCmd(e *Env) *cobra.Command {
	o := &serveBenchOpts{}
	cmd := &cobra.Command{
		Use:         "serve-bench",
		Short:       "Measure serve: cycle cost, scrape latency, peak RSS (root)",
		Long:        "Measure tcpdoctor serve (cycle cost, scrape latency, peak RSS) at N connections in a private namespace (root).",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{cleansUp: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return usageErr("serve-bench: needs root (creates network namespaces)")
			}
			if o.conns < 1 || o.conns > bench.MaxConns || o.cycles < 1 || o.cycles > 100 || o.interval < 100*time.Millisecond {
				return usageErr("serve-bench: --conns 1..%d, --cycles 1..100, --interval >= 100ms", bench.MaxConns)
			}
			tcpdoctor, err := e.tcpdoctor()
			if err != nil {
				return err
			}
			if o.history {
				return runHistoryBench(cmd.Context(), e, o, tcpdoctor)
			}
			serve := []string{tcpdoctor, "serve"}
			if o.withHist {
				dir, err := os.MkdirTemp("", "tcpdoctor-serve-bench-")
				if err != nil {
					return failedErr(err)
				}
				defer os.RemoveAll(dir)
				serve = append(serve, "--history", dir)
			}
			res, err := bench.Exporter(cmd.Context(), bench.ExporterOptions{
				Conns: o.conns, Cycles: o.cycles, Interval: o.interval,
				Serve: serve, Self: benchSelf(e), Progress: e.Stderr,
			})
			if err != nil {
				return failedErr(err)
			}
			return writeExporterBench(e, res)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.conns, "conns", 5000, "established connections to create (two sockets each)")
	fs.IntVar(&o.cycles, "cycles", 5, "collection cycles to measure")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "the exporter's --interval")
	fs.BoolVar(&o.withHist, "with-history", false, "run serve with --history (a temporary directory): its peak RSS holding the previous collection whole")
	fs.BoolVar(&o.history, "history", false, "measure what --history adds instead: disk and CPU per window, quiet and with a persisting warning, and history over a week (--cycles windows per case)")
	return cmd
}

func writeExporterBench(e *Env, r *bench.ExporterResult) error {
	ms := func(s float64) string { return fmt.Sprintf("%.1fms", s*1000) }
	us := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	lat := r.Scrapes
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "sockets seen\t%.0f\t(%d established connections + listeners, kernel %s)\n", r.Sockets, r.Conns, r.Kernel)
	fmt.Fprintf(tw, "collection (sockets, counters, owners), median of %d\t%s\tmax %s\n", len(r.Collect), ms(bench.Median(r.Collect)), ms(slices.Max(r.Collect)))
	fmt.Fprintf(tw, "diagnosis + metric preparation, median of %d\t%s\tmax %s\n", len(r.Diagnose), ms(bench.Median(r.Diagnose)), ms(slices.Max(r.Diagnose)))
	fmt.Fprintf(tw, "scrape latency (%d scrapes, during collections too)\tmedian %s\tp90 %s\tmax %s\n", len(lat),
		us(lat[len(lat)/2]), us(lat[len(lat)*9/10]), us(lat[len(lat)-1]))
	fmt.Fprintf(tw, "8 concurrent scrapes\twall %s\tslowest %s\n", us(r.Concurrent), us(r.Slowest))
	fmt.Fprintf(tw, "scrape size\t%s\n", units.Bytes(float64(r.Body)))
	fmt.Fprintf(tw, "exporter peak RSS\t%s\tRSS at the end %s\n", units.Bytes(float64(r.PeakRSS)), units.Bytes(r.RSSNow))
	return tw.Flush()
}
