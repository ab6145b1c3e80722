// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// TestWebConfig is webConfig for the external tests (prometheus_tls_test.go).
var TestWebConfig = webConfig

// Tested is an Exporter behind the steps serve's loop runs before it
// (internal/serve): each collection's windows and their diagnosis.
type Tested struct {
	*Exporter
	w       *report.Windows
	windows *window.Chain
}

// NewTested returns an Exporter behind Windows running rs.
func NewTested(rs []diag.Rule, o Options) *Tested {
	ch := window.NewChain(rs)
	return &Tested{Exporter: New(o), w: report.NewWindows(ch, rs, diag.Options{}), windows: ch}
}

// Update diagnoses one collection and publishes it, as serve's loop does.
func (t *Tested) Update(snaps []*snapshot.Snapshot, collectTook time.Duration) {
	started := t.opts.Clock()
	ins, rep := t.w.Next(snaps)
	t.Publish(snaps, ins, rep, collectTook, started)
	t.w.Keep(snaps)
}
