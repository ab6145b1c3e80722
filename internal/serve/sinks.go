// SPDX-License-Identifier: Apache-2.0

package serve

import (
	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
)

// costSink counts the eBPF events each collection says were lost, for
// the exporter's cost metrics.
type costSink struct{ c *exporter.Cost }

func (costSink) Name() string { return "cost" }

func (s costSink) Take(c *Collection) error {
	s.c.Observe(c.Snaps)
	return nil
}

// metricsSink publishes each collection and its diagnosis as the view
// the exporter's scrapes read.
type metricsSink struct{ x *exporter.Exporter }

func (metricsSink) Name() string { return "metrics" }

func (s metricsSink) Take(c *Collection) error {
	s.x.Publish(c.Snaps, c.Windows, c.Report, c.Took, c.Diagnosed)
	return nil
}

// historySink keeps each window's findings and the evidence of incidents
// (serve --history); the recorder starts the triggered traces its
// findings call for. It never waits for the disk, and its write errors
// are counted in its own metrics (history.Recorder.Metrics).
type historySink struct{ r *history.Recorder }

func (historySink) Name() string { return "history" }

func (s historySink) Take(c *Collection) error {
	s.r.Add(c.Snaps, c.Report)
	return nil
}
