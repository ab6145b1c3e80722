// SPDX-License-Identifier: Apache-2.0

package checkup

import (
	"slices"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// Windows diagnoses one collection after another, as serve's loop does:
// each namespace's window runs from its previous collection to this one
// (window.Chain), and the rules run over them as `check` runs them. Not
// safe for concurrent use.
type Windows struct {
	chain *window.Chain
	rules []diag.Rule
	opts  diag.Options
}

// NewWindows returns Windows running rs with opts, nothing collected yet.
func NewWindows(rs []diag.Rule, opts diag.Options) *Windows {
	return &Windows{chain: window.NewChain(rs), rules: rs, opts: opts}
}

// Next takes one collection (one snapshot per namespace, taken at about
// the same time) and returns the windows it ends, one per namespace that
// had a start (the first of each name counts; a namespace's first
// collection only starts its window, window.Chain.Input says when else),
// and their diagnosis, nil when there is no window. Namespaces absent
// from snaps are forgotten.
func (w *Windows) Next(snaps []*snapshot.Snapshot) ([]*diag.Input, *report.Report) {
	var ins []*diag.Input
	seen := make(map[string]bool, len(snaps))
	for _, cur := range snaps {
		if seen[cur.Netns.Name] {
			continue
		}
		seen[cur.Netns.Name] = true
		if in := w.chain.Input(cur, w.opts); in != nil {
			ins = append(ins, in)
		}
	}
	if len(ins) > 1 {
		// Connections between the namespaces: each window finds the
		// other end in the others' current samples.
		curs := make([]*snapshot.Snapshot, len(ins))
		for i, in := range ins {
			curs[i] = in.Cur
		}
		host := tcpmodel.NewHostPeers(curs)
		for _, in := range ins {
			in.Host = host
		}
	}
	var rep *report.Report
	if len(ins) > 0 {
		rep = Diagnose(slices.Values(ins), w.rules)
	}
	// Each sample is kept as the next window's start only as what its
	// rules read of it, not whole.
	w.chain.Keep(snaps)
	return ins, rep
}

// Chain is the windows' starts as kept.
func (w *Windows) Chain() *window.Chain { return w.chain }
