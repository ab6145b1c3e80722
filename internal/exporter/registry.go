// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

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
