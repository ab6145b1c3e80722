// SPDX-License-Identifier: Apache-2.0

// Package serve is `tcpdoctor serve`'s daemon (docs/exporter.md): a loop
// that collects every interval, runs the rules over each namespace's
// window and hands the result to its sinks in turn (the metrics the
// exporter serves, the history store, which starts the triggered
// traces), and the HTTP server in front of the metrics.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// PathHistory is where the evidence pages are served (docs/history.md,
// "Evidence pages").
const PathHistory = "/history"

// Options configure the daemon. The CLI validates them from its flags.
type Options struct {
	// Interval is the time between collections: the rules' window.
	Interval time.Duration
	// Namespaces finds the namespaces to collect, anew for each
	// collection; Netns is the one asked for ("" the host's), said
	// unreachable when none is found.
	Namespaces func() ([]netns.NS, error)
	Netns      string
	// OpenExtras loads the eBPF extras (bpfload.Open, as --bpf
	// says), once the listener is open; its error is returned as it is.
	OpenExtras func() (*bpfload.Extras, error)
	// Collect says what to collect.
	Collect  collect.Options
	ProcRoot string
	// Rules run over each window with Diag, as `check` runs them.
	Rules []diag.Rule
	Diag  diag.Options
	// Top bounds the listener and destination series per namespace.
	Top   int
	Build version.Info

	// Web is where and how /metrics is served; External is
	// --web.external-url, for the evidence pages' links.
	Web      exporter.Web
	External string
	// MaxConns is the HTTP connections open at once, lowered to a
	// quarter of FileLimit's soft RLIMIT_NOFILE (nil: unknown).
	MaxConns  int
	FileLimit func() uint64

	// History keeps each window's findings and the evidence of incidents
	// in History.Dir ("": no history); its SegmentSpan and EvidenceEvery
	// default to history's. Its Now and Logf are set by Run.
	History history.Options
	// HistoryBounds says the store's bounds as they were given, for the
	// progress line.
	HistoryBounds string
	// Trace bounds the triggered traces (PerHour 0: none); Run and Rules
	// are set by Run. TraceRate is their samples a second.
	Trace     history.TraceOptions
	TraceRate int
	// Pages, when set with History, serves the evidence pages at
	// PathHistory (NewPages); their reports say PagesBuild (nil: not
	// known, as check --json says).
	Pages      http.Handler
	PagesBuild *version.Info

	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Logf says progress and notes; Log takes the HTTP server's.
	Logf func(format string, a ...any)
	Log  io.Writer
}

// UsageError is what serve was asked to do and cannot (a history
// directory in use, no namespace to collect, an address it cannot listen
// on): a usage error for the CLI.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Run serves until ctx ends or the server fails.
func Run(ctx context.Context, o Options) error {
	hist := o.History.Dir != ""
	if hist {
		// One writer per directory, and only a directory no other user
		// can write; one that cannot be made is said by the recorder.
		lock, err := history.LockDir(o.History.Dir)
		switch {
		case errors.Is(err, history.ErrInUse) || errors.Is(err, history.ErrUnsafe):
			return &UsageError{fmt.Errorf("--history: %w", err)}
		case err != nil:
			o.Logf("%v (serve goes on; the store's errors are counted)", err)
		}
		defer lock.Close()
	}
	if nss, err := o.Namespaces(); len(nss) == 0 {
		if err == nil {
			err = errors.New("no network namespace to collect")
		}
		return &UsageError{err}
	}
	x := exporter.New(exporter.Options{Top: o.Top, Clock: o.Now})
	reg, err := exporter.NewRegistry(x)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := reg.Register(exporter.NewBuildInfo(o.Build)); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	ln, err := o.Web.Listen()
	if err != nil {
		return &UsageError{err}
	}
	ext, err := o.OpenExtras()
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer ext.Close()
	scheme := "http"
	if o.Web.TLS() {
		scheme = "https"
	}
	o.Logf("serving %s://%s/metrics, collecting every %s", scheme, ln.Addr(), o.Interval)
	name := o.Netns
	if name == "" {
		name = "host"
	}
	src := &source{find: o.Namespaces, name: name, c: ext.Collector(o.Collect, o.Now), now: o.Now, logf: o.Logf}
	cost := exporter.NewCost(programStats(ext), o.ProcRoot)
	if err := reg.Register(cost); err != nil {
		_ = ln.Close()
		return fmt.Errorf("serve: %w", err)
	}
	loop := &Loop{Collect: src.collect, Windows: report.NewWindows(window.NewChain(o.Rules), o.Rules, o.Diag),
		Sinks:    []Sink{costSink{cost}, metricsSink{x}},
		Interval: o.Interval, Now: o.Now, Sleep: o.Sleep, Logf: o.Logf}
	var rec *history.Recorder
	if hist {
		rec = newRecorder(o, &src.byName)
		loop.Sinks = append(loop.Sinks, historySink{rec})
		if err := reg.Register(rec.Metrics()); err != nil {
			rec.Close()
			_ = ln.Close()
			return fmt.Errorf("serve: %w", err)
		}
		o.Logf("keeping history in %s (%s)", o.History.Dir, o.HistoryBounds)
	}
	sopts := exporter.DefaultServerOptions()
	sopts.Logf = o.Logf
	sopts.Now = o.Now
	sopts.MaxConns = o.MaxConns
	if o.FileLimit != nil {
		soft := o.FileLimit()
		if sopts.MaxConns = exporter.MaxConnsForFileLimit(o.MaxConns, soft); sopts.MaxConns < o.MaxConns {
			o.Logf("note: --max-connections %d lowered to %d, a quarter of RLIMIT_NOFILE %d", o.MaxConns, sopts.MaxConns, soft)
		}
	}
	var pages []exporter.Page
	if hist && o.Pages != nil {
		pages = append(pages, exporter.Page{Path: PathHistory, Text: "History: incidents and their evidence", Handler: o.Pages})
		if err := reg.Register(historyPagesInfo(scheme, o.External)); err != nil {
			_ = ln.Close()
			return fmt.Errorf("serve: %w", err)
		}
	}
	handler, err := o.Web.Handler(exporter.Handler(reg), o.Build.Version, pages...)
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
	go func() { serveErr <- o.Web.Serve(srv, sln, o.Log) }()
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

// newRecorder starts the history store, with the triggered traces of the
// rules that declare themselves Traceable when o.Trace allows any. It
// never stops serve: a store it cannot write is said once and counted
// (tcpdoctor_history_errors_total).
func newRecorder(o Options, nss *namespaceMap) *history.Recorder {
	hopts := o.History
	hopts.Now, hopts.Logf = o.Now, o.Logf
	if o.Trace.PerHour > 0 {
		t := o.Trace
		t.Rules = o.Rules
		t.Run = (&tracer{nss: nss, procRoot: o.ProcRoot, rate: o.TraceRate, now: o.Now, logf: o.Logf}).run
		hopts.Trace = &t
	}
	return history.New(hopts)
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
