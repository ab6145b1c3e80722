// SPDX-License-Identifier: Apache-2.0

package history

import "github.com/prometheus/client_golang/prometheus"

// metrics are a Recorder's own metrics, read from its counters at each
// scrape.
type metrics []prometheus.Collector

// Metrics returns r's metrics (docs/history.md): its write errors, the
// collections dropped while the writer was busy, the triggered traces
// kept and the bytes written.
func (r *Recorder) Metrics() prometheus.Collector {
	return metrics{
		counter("tcpdoctor_history_errors_total",
			"Writes to the --history directory that failed (full disk, unwritable directory); metrics go on.", r.Errors),
		counter("tcpdoctor_history_dropped_total",
			"Collections not kept in --history because the writer was still busy with an earlier one.", r.Dropped),
		counter("tcpdoctor_history_traces_total",
			"Traces serve --history recorded of a warning's connections and kept (docs/history.md, \"Triggered traces\").", r.Traces),
		counter("tcpdoctor_history_written_bytes_total",
			"Bytes written to the --history directory (compressed).", r.Written),
	}
}

// counter is a counter read from v at each scrape.
func counter(name, help string, v func() int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v()) })
}

// Describe sends the four metrics' descriptions.
func (m metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m {
		c.Describe(ch)
	}
}

// Collect sends their values.
func (m metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m {
		c.Collect(ch)
	}
}
