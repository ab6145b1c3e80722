// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
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
	histSeg   time.Duration
	histEvery time.Duration
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
	// For tests and the bench: how long a timeline segment spans, and how
	// often a persisting finding's window is kept.
	fs.DurationVar(&o.histSeg, "history-segment", history.DefaultSegmentSpan, "span of windows in one timeline segment")
	fs.DurationVar(&o.histEvery, "history-evidence-every", history.DefaultEvidenceEvery, "keep a persisting finding's window this often")
	fs.DurationVar(&o.traceDur, "history-trace-duration", history.DefaultTraceDuration, "with --history: length of the trace of a connection-bottleneck, rwnd-limited, slow-reader or sndbuf-limited finding's connections recorded when it warns (at trace's default 100 samples a second; one at a time)")
	fs.IntVar(&o.tracesPH, "history-traces-per-hour", history.DefaultTracesPerHour, "with --history: at most this many such traces start in any hour (0: none)")
	fs.DurationVar(&o.traceCool, "history-trace-cooldown", history.DefaultTraceCooldown, "with --history: no new trace of the same finding's subject within this time of its last")
	fs.BoolVar(&o.pages, "history-pages", true, "with --history: serve the incidents and their evidence at /history, behind --web.config.file's TLS and auth like /metrics (docs/history.md, \"Evidence pages\"); false serves only /metrics")
	_ = fs.MarkHidden("history-segment")
	_ = fs.MarkHidden("history-evidence-every")
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
	var dopts diag.Options
	if o.bandwidth != "" {
		var err error
		if dopts.Bandwidth, err = bdp.ParseRate(o.bandwidth); err != nil {
			return usageErr("serve: --bandwidth: %v", err)
		}
	}
	hopts := history.Options{Dir: o.history, Tool: "tcpdoctor " + e.build().Version, Now: e.Now, Logf: e.progress,
		SegmentSpan: o.histSeg, EvidenceEvery: o.histEvery}
	if o.histSeg <= 0 || o.histEvery <= 0 {
		return usageErr("serve: --history-segment and --history-evidence-every must be positive")
	}
	if o.traceDur <= 0 || o.traceDur > time.Minute || o.tracesPH < 0 || o.traceCool < 0 {
		return usageErr("serve: --history-trace-duration must be in (0, 1m], --history-traces-per-hour and --history-trace-cooldown must not be negative")
	}
	if o.history != "" {
		var err error
		if hopts.MaxBytes, err = history.ParseSize(o.histSize); err != nil {
			return usageErr("serve: --history-size: %v", err)
		}
		if hopts.MaxBytes < history.MinMaxBytes {
			return usageErr("serve: --history-size %s is below the minimum, 1MiB (a few evidence files and the segment being written)", o.histSize)
		}
		if hopts.MaxAge, err = history.ParseAge(o.histAge); err != nil {
			return usageErr("serve: --history-age: %v", err)
		}
		// One writer per directory, and only a directory no other user
		// can write; one that cannot be made is said by the recorder.
		lock, err := history.LockDir(o.history)
		switch {
		case errors.Is(err, history.ErrInUse) || errors.Is(err, history.ErrUnsafe):
			return usageErr("serve: --history: %v", err)
		case err != nil:
			e.progress("%v (serve goes on; the store's errors are counted)", err)
		}
		defer lock.Close()
	}
	if nss, err := serveNamespaces(e, o); len(nss) == 0 {
		return usageErr("serve: %v", err)
	}
	x := exporter.New(exporter.Options{Top: o.top, Rules: rules.All(), Diag: dopts})
	reg, err := exporter.NewRegistry(x)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := reg.Register(exporter.NewBuildInfo(e.build())); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := o.web.validate(); err != nil {
		return err
	}
	if o.web.external != "" && (o.history == "" || !o.pages) {
		return usageErr("serve: --web.external-url is for the --history pages' links: give --history (and not --history-pages=false)")
	}
	ln, err := o.web.listen()
	if err != nil {
		return usageErr("serve: %v", err)
	}
	ext, err := o.bpf.allExtras(e, &o.src)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer ext.Close()
	e.progress("serving %s://%s/metrics, collecting every %s", o.web.scheme(), ln.Addr(), o.interval)
	c := ext.Collector(collect.Options{Owners: !o.noOwners, Workloads: e.workloads()}, e.Now)
	cost := exporter.NewCost(programStats(ext), e.ProcRoot)
	if err := reg.Register(cost); err != nil {
		_ = ln.Close()
		return fmt.Errorf("serve: %w", err)
	}
	var lastNote string
	nsByName := &namespaceMap{}
	loop := &exporter.Loop{
		X:        x,
		Interval: o.interval,
		Now:      e.Now,
		Sleep:    e.Sleep,
		Sample: func() []*snapshot.Snapshot {
			nss, err := serveNamespaces(e, o)
			if note := fmt.Sprint(err); err != nil && note != lastNote {
				e.progress("note: %v (said once until it changes)", err)
			}
			lastNote = fmt.Sprint(err)
			if len(nss) == 0 && err != nil {
				// The namespace asked for is gone: say so in the metrics
				// (source_up 0) instead of letting its series vanish.
				name := o.src.netns
				if name == "" {
					name = "host"
				}
				return []*snapshot.Snapshot{collect.Unreachable(snapshot.Netns{Name: name}, e.Now(), err)}
			}
			nsByName.set(nss)
			snaps := c.Collect(nss)
			cost.Observe(snaps)
			return snaps
		},
	}
	var rec *history.Recorder
	if o.history != "" {
		// Never stops serve: a store it cannot write is said once and
		// counted (tcpdoctor_history_errors_total).
		if o.tracesPH > 0 {
			hopts.Trace = &history.TraceOptions{Duration: o.traceDur, PerHour: o.tracesPH, Cooldown: o.traceCool,
				Run: func(ctx context.Context, req history.TraceRequest) (*trace.Trace, error) {
					return serveTrace(ctx, e, nsByName, req)
				}}
		}
		rec = history.New(hopts)
		loop.Record = rec.Add
		if err := registerHistory(reg, rec); err != nil {
			rec.Close()
			_ = ln.Close()
			return fmt.Errorf("serve: %w", err)
		}
		e.progress("keeping history in %s (at most %s, %s)", o.history, o.histSize, o.histAge)
	}
	sopts := exporter.DefaultServerOptions()
	sopts.Logf = e.progress
	sopts.Now = e.Now
	sopts.MaxConns = o.maxConns
	if e.FileLimit != nil {
		soft := e.FileLimit()
		if sopts.MaxConns = exporter.MaxConnsForFileLimit(o.maxConns, soft); sopts.MaxConns < o.maxConns {
			e.progress("note: --max-connections %d lowered to %d, a quarter of RLIMIT_NOFILE %d", o.maxConns, sopts.MaxConns, soft)
		}
	}
	var pages []exporter.Page
	if o.history != "" && o.pages {
		ev := newEvidencePages(e, o.history, dopts, o.web.external)
		pages = append(pages, exporter.Page{Path: pathHistory, Text: "History: incidents and their evidence", Handler: ev.handler()})
		if err := reg.Register(historyPagesInfo(o.web.scheme(), o.web.external)); err != nil {
			_ = ln.Close()
			return fmt.Errorf("serve: %w", err)
		}
	}
	handler, err := o.web.handler(exporter.Handler(reg), e.build(), pages...)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("serve: %w", err)
	}
	srv, sln := exporter.NewServer(handler, ln, sopts)
	if err := reg.Register(sln); err != nil {
		_ = ln.Close()
		return fmt.Errorf("serve: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = loop.Run(ctx)
	}()
	serveErr := make(chan error, 1)
	go func() { serveErr <- o.web.serve(srv, sln, e.Stderr) }()
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	if rec != nil {
		rec.Close() // after the loop: its last window is written
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// namespaceMap is the namespaces of serve's last collection by name, for
// the triggered traces' goroutine.
type namespaceMap struct {
	mu sync.Mutex
	m  map[string]netns.NS
}

func (n *namespaceMap) set(nss []netns.NS) {
	m := make(map[string]netns.NS, len(nss))
	for _, ns := range nss {
		m[ns.Name] = ns
	}
	n.mu.Lock()
	n.m = m
	n.mu.Unlock()
}

func (n *namespaceMap) get(name string) (netns.NS, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ns, ok := n.m[name]
	return ns, ok
}

// serveTrace records a triggered trace (docs/history.md): the finding's
// connections in its namespace, at trace's default rate, found by one
// dump, without eBPF events (serve's programs are its own).
func serveTrace(ctx context.Context, e *Env, nss *namespaceMap, req history.TraceRequest) (*trace.Trace, error) {
	ns, ok := nss.get(req.Subject.Netns)
	if !ok {
		return nil, fmt.Errorf("netns %q is no longer collected", req.Subject.Netns)
	}
	tr, st, err := trace.Live(ctx, trace.LiveOptions{NS: ns, Filter: req.Filter, ProcRoot: e.ProcRoot,
		Interval: time.Second / traceDefaultRate, Duration: req.Duration, IdleEvery: 1,
		// The finding's connections exist already: one discovery dump, at
		// the start (a dump walks the host's whole TCP table).
		Discover: req.Duration, Now: e.Now, Sleep: trace.PreciseSleep,
		NoEvents: "a trace serve --history started for " + req.Rule + ": eBPF events not recorded"})
	if err != nil {
		return nil, err
	}
	tr.Header.Filter += " (" + req.Rule + ")"
	e.progress("history: traced %s for %s: %d samples of %s, %s CPU on the sampling thread", tr.Header.Filter, req.Subject.Netns,
		st.Ticks, units.N(len(tr.Conns), "connection"), st.CPU.Round(time.Millisecond))
	return tr, nil
}

// programStats reads the kernel's statistics of the eBPF programs ext
// attached; nil when none is.
func programStats(ext *bpfload.Extras) func() ([]exporter.ProgramStat, error) {
	if ext == nil || ext.Source == nil {
		return nil
	}
	return func() ([]exporter.ProgramStat, error) {
		ps, err := ext.Source.ProgramStats()
		out := make([]exporter.ProgramStat, len(ps))
		for i, p := range ps {
			out[i] = exporter.ProgramStat{Program: p.Program, Runs: p.Runs, Runtime: p.Runtime, Skipped: p.Skipped}
		}
		return out, err
	}
}

// historyPagesInfo says where the evidence pages are, for the alerts'
// evidence annotation (deploy/prometheus): the scheme serve answers in,
// and --web.external-url when given (else links use scheme://instance).
func historyPagesInfo(scheme, external string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tcpdoctor_history_pages_info",
		Help:        "Always 1 under serve --history: its evidence pages are served at /history (docs/history.md, \"Evidence pages\"); external_url is --web.external-url, empty when links use scheme://instance.",
		ConstLabels: prometheus.Labels{"scheme": scheme, "external_url": strings.TrimSuffix(external, "/")}})
	g.Set(1)
	return g
}

// registerHistory adds the store's own metrics to reg.
func registerHistory(reg *prometheus.Registry, rec *history.Recorder) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tcpdoctor_history_errors_total",
			Help: "Writes to the --history directory that failed (full disk, unwritable directory); metrics go on."},
			func() float64 { return float64(rec.Errors()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tcpdoctor_history_dropped_total",
			Help: "Collections not kept in --history because the writer was still busy with an earlier one."},
			func() float64 { return float64(rec.Dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tcpdoctor_history_traces_total",
			Help: "Traces serve --history recorded of a warning's connections and kept (docs/history.md, \"Triggered traces\")."},
			func() float64 { return float64(rec.Traces()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tcpdoctor_history_written_bytes_total",
			Help: "Bytes written to the --history directory (compressed)."},
			func() float64 { return float64(rec.Written()) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// serveNamespaces resolves --netns / --all-netns anew for each
// collection: namespaces come and go.
func serveNamespaces(e *Env, o *serveOpts) ([]netns.NS, error) {
	return o.src.findNamespaces(e)
}
