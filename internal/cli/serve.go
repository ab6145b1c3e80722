// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/serve"
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
	fs.StringVar(&o.history, "history", "", "keep every window's findings and the evidence of incidents in `DIR`, for tcpdoctor history and check --history --at (docs/history.md)")
	fs.StringVar(&o.histSize, "history-size", "256MiB", "bound of the --history directory; the oldest files go first")
	fs.StringVar(&o.histAge, "history-age", "7d", "files in --history older than this go (a duration: 168h, 7d)")
	fs.DurationVar(&o.traceDur, "history-trace-duration", history.DefaultTraceDuration, "with --history: length of the trace of a connection-bottleneck, rwnd-limited, slow-reader or sndbuf-limited finding's connections recorded when it warns (at trace's default 100 samples a second; one at a time)")
	fs.IntVar(&o.tracesPH, "history-traces-per-hour", history.DefaultTracesPerHour, "with --history: at most this many such traces start in any hour (0: none)")
	fs.DurationVar(&o.traceCool, "history-trace-cooldown", history.DefaultTraceCooldown, "with --history: no new trace of the same finding's subject within this time of its last")
	fs.BoolVar(&o.pages, "history-pages", true, "with --history: serve the incidents and their evidence at /history, behind --web.config.file's TLS and auth like /metrics (docs/history.md, \"Evidence pages\"); false serves only /metrics")
	o.bpf.register(fs)
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
		so.PagesBuild = e.knownBuild()
		so.Pages = serve.NewPages(so)
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
