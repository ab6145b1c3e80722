// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/bench"
	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/serve"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

type serveOpts struct {
	web       webOpts
	src       sourceOpts
	bpf       bpfOpts
	interval  time.Duration
	top       int
	noOwners  bool
	bandwidth string
	maxConns  int
	history   string
	histSize  string
	histAge   string
	traceDur  time.Duration
	tracesPH  int
	traceCool time.Duration
	pages     bool
}

// newServeCmd serves the findings and the counters behind them as
// Prometheus metrics (docs/exporter.md).
func newServeCmd(e *Env) *cobra.Command {
	o := &serveOpts{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve findings and TCP health as Prometheus metrics on /metrics",
		Long: `Collect every --interval in the background, run the same rules as check over each window
(the previous collection to this one) and serve the result on /metrics. A scrape reads the latest
result and never starts a collection. Binds to loopback unless --web.listen-address says otherwise
(--web.listen-address :9477 for the network; --listen is the same flag). --web.config.file takes
the Prometheus exporters' web configuration (TLS, basic auth); --web.systemd-socket serves on the
socket systemd passes. See docs/exporter.md for every metric.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), e, o)
		},
	}
	fs := cmd.Flags()
	o.web.register(fs)
	fs.StringVar(&o.src.netns, "netns", "", "collect in the named network namespace (ip netns)")
	fs.BoolVar(&o.src.allNetns, "all-netns", false, "collect in every network namespace on the host (found anew each interval)")
	fs.DurationVar(&o.interval, "interval", 15*time.Second, "time between collections; the rules' window")
	fs.IntVar(&o.top, "top", exporter.DefaultTop, "listeners and destinations exported per namespace (label cardinality)")
	fs.BoolVar(&o.noOwners, "no-owners", false, "do not map sockets to processes (no command labels, cheaper)")
	fs.StringVar(&o.bandwidth, "bandwidth", "", "path bandwidth for BDP arithmetic, e.g. 100mbit (default: estimated)")
	fs.IntVar(&o.maxConns, "max-connections", exporter.DefaultMaxConns, "HTTP connections open at once; at the cap the longest-idle one is closed (at most a quarter of RLIMIT_NOFILE)")
	fs.StringVar(&o.history, "history", "", "keep every window's findings and the evidence of incidents in this directory, for `tcpdoctor history` and `check --history --at` (docs/history.md)")
	fs.StringVar(&o.histSize, "history-size", "256MiB", "bound of the --history directory; the oldest files go first")
	fs.StringVar(&o.histAge, "history-age", "7d", "files in --history older than this go (a duration: 168h, 7d)")
	fs.DurationVar(&o.traceDur, "history-trace-duration", history.DefaultTraceDuration, "with --history: length of the trace of a connection-bottleneck, rwnd-limited, slow-reader or sndbuf-limited finding's connections recorded when it warns (at trace's default 100 samples a second; one at a time)")
	fs.IntVar(&o.tracesPH, "history-traces-per-hour", history.DefaultTracesPerHour, "with --history: at most this many such traces start in any hour (0: none)")
	fs.DurationVar(&o.traceCool, "history-trace-cooldown", history.DefaultTraceCooldown, "with --history: no new trace of the same finding's subject within this time of its last")
	fs.BoolVar(&o.pages, "history-pages", true, "with --history: serve the incidents and their evidence at /history, behind --web.config.file's TLS and auth like /metrics (docs/history.md, \"Evidence pages\"); false serves only /metrics")
	o.bpf.register(fs)
	cmd.AddCommand(newServeBenchCmd(e))
	return cmd
}

func runServe(ctx context.Context, e *Env, o *serveOpts) error {
	if err := o.src.validate(); err != nil {
		return err
	}
	if err := o.bpf.validate(&o.src); err != nil {
		return err
	}
	if o.interval < 100*time.Millisecond {
		return usageErr("serve: --interval must be at least 100ms")
	}
	if o.top < 1 || o.top > 10000 {
		return usageErr("serve: --top must be 1..10000")
	}
	if o.maxConns < 1 || o.maxConns > 10000 {
		return usageErr("serve: --max-connections must be 1..10000")
	}
	so := serve.Options{Interval: o.interval, Netns: o.src.netns, ProcRoot: e.ProcRoot, Rules: rules.All(),
		Top: o.top, Build: e.build(), MaxConns: o.maxConns, FileLimit: e.FileLimit, TraceRate: traceDefaultRate,
		Collect: collect.Options{Owners: !o.noOwners, Workloads: e.workloads()},
		History: history.Options{Dir: o.history, Tool: "tcpdoctor " + e.build().Version},
		Trace:   history.TraceOptions{Duration: o.traceDur, PerHour: o.tracesPH, Cooldown: o.traceCool},
		Now:     e.Now, Sleep: e.Sleep, Logf: e.progress, Log: e.Stderr,
		Namespaces: func() ([]netns.NS, error) { return o.src.findNamespaces(e) },
		OpenExtras: func() (*bpfload.Extras, error) { return o.bpf.allExtras(e, &o.src) }}
	if o.bandwidth != "" {
		var err error
		if so.Diag.Bandwidth, err = bdp.ParseRate(o.bandwidth); err != nil {
			return usageErr("serve: --bandwidth: %v", err)
		}
	}
	if o.traceDur <= 0 || o.traceDur > time.Minute || o.tracesPH < 0 || o.traceCool < 0 {
		return usageErr("serve: --history-trace-duration must be in (0, 1m], --history-traces-per-hour and --history-trace-cooldown must not be negative")
	}
	if o.history != "" {
		var err error
		if so.History.MaxBytes, err = history.ParseSize(o.histSize); err != nil {
			return usageErr("serve: --history-size: %v", err)
		}
		if so.History.MaxBytes < history.MinMaxBytes {
			return usageErr("serve: --history-size %s is below the minimum, 1MiB (a few evidence files and the segment being written)", o.histSize)
		}
		if so.History.MaxAge, err = history.ParseAge(o.histAge); err != nil {
			return usageErr("serve: --history-age: %v", err)
		}
		so.HistoryBounds = "at most " + o.histSize + ", " + o.histAge
	}
	if err := o.web.validate(); err != nil {
		return err
	}
	if o.web.external != "" && (o.history == "" || !o.pages) {
		return usageErr("serve: --web.external-url is for the --history pages' links: give --history (and not --history-pages=false)")
	}
	so.Web, so.External = o.web.exporter(), o.web.external
	if o.history != "" && o.pages {
		so.Pages = newEvidencePages(e, o.history, so.Diag, o.web.external).handler()
	}
	if e.TuneServe != nil {
		e.TuneServe(&so)
	}
	err := serve.Run(ctx, so)
	if ue := (*serve.UsageError)(nil); errors.As(err, &ue) {
		return usageErr("serve: %v", ue.Err)
	}
	return err
}

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
		Use:         "bench",
		Short:       "Measure the exporter (cycle cost, scrape latency, peak RSS) at N connections in a private namespace (root)",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{cleansUp: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return usageErr("serve bench: needs root (creates network namespaces)")
			}
			if o.conns < 1 || o.conns > bench.MaxConns || o.cycles < 1 || o.cycles > 100 || o.interval < 100*time.Millisecond {
				return usageErr("serve bench: --conns 1..%d, --cycles 1..100, --interval >= 100ms", bench.MaxConns)
			}
			if o.history {
				return runHistoryBench(cmd.Context(), e, o)
			}
			serve := []string{e.Args0, "serve"}
			if o.withHist {
				dir, err := os.MkdirTemp("", "tcpdoctor-serve-bench-")
				if err != nil {
					return collectErr(err)
				}
				defer os.RemoveAll(dir)
				serve = append(serve, "--history", dir)
			}
			res, err := bench.Exporter(cmd.Context(), bench.ExporterOptions{
				Conns: o.conns, Cycles: o.cycles, Interval: o.interval,
				Serve: serve, Self: benchSelf(e), Progress: e.Stderr,
			})
			if err != nil {
				return collectErr(err)
			}
			return writeExporterBench(e, res)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.conns, "conns", 5000, "established connections to create (two sockets each)")
	fs.IntVar(&o.cycles, "cycles", 5, "collection cycles to measure")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "the exporter's --interval")
	fs.BoolVar(&o.withHist, "with-history", false, "run the exporter with --history (a temporary directory): its peak RSS holding the previous collection whole")
	fs.BoolVar(&o.history, "history", false, "measure what --history adds instead: disk and CPU per window, quiet and with a persisting warning, and `history` over a week (--cycles windows per case)")
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
