// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// Loop collects every Interval and feeds the Exporter. Sample does the
// I/O: one snapshot per namespace. Sleep returns early with ctx's error.
type Loop struct {
	X        *Exporter
	Sample   func() []*snapshot.Snapshot
	Interval time.Duration
	Now      func() time.Time
	Sleep    func(ctx context.Context, d time.Duration) error
	// Record, when set, is given each collection and its diagnosis (nil
	// when no namespace had a window yet) after the metrics are updated:
	// serve --history keeps them (internal/history).
	Record func(snaps []*snapshot.Snapshot, rep *report.Report)
}

// Run collects until ctx ends. Collections start Interval apart; one that
// overruns is followed at once by the next. Only one collection runs at a
// time, whatever the number of scrapes.
func (l *Loop) Run(ctx context.Context) error {
	for {
		start := l.Now()
		snaps := l.Sample()
		rep := l.X.Update(snaps, l.Now().Sub(start))
		if l.Record != nil {
			l.Record(snaps, rep)
		}
		if err := l.Sleep(ctx, window.Pause(l.Interval, l.Now().Sub(start))); err != nil {
			return nil
		}
	}
}

// NewRegistry returns a registry holding x plus the process and Go
// runtime collectors.
func NewRegistry(x *Exporter) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		x,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Handler serves /metrics from reg and a short index page at /.
func Handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	// The gate, not promhttp's MaxRequestsInFlight (503 at once over
	// it), bounds the scrapes gathered at once: the others wait their
	// client's turn.
	mux.Handle("/metrics", newGate(MaxScrapesInFlight).wrap(promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       ScrapeTimeout,
	}))))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<html><head><title>tcpdoctor</title></head><body><h1>tcpdoctor exporter</h1><p><a href=\"/metrics\">/metrics</a></p></body></html>\n"))
	})
	return mux
}
