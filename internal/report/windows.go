// SPDX-License-Identifier: Apache-2.0

package report

import (
	"slices"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Chain keeps each namespace's window start from one collection to the
// next (window.Chain).
type Chain interface {
	Windows(snaps []*snapshot.Snapshot, opts diag.Options) []*diag.Input
	Keep(snaps []*snapshot.Snapshot)
}

// Windows diagnoses one collection after another, as serve's loop does:
// each namespace's window runs from its previous collection to this one,
// and the rules run over them as `check` runs them. Not safe for
// concurrent use.
type Windows struct {
	chain Chain
	rules []diag.Rule
	opts  diag.Options
}

// NewWindows returns Windows over ch running rs with opts.
func NewWindows(ch Chain, rs []diag.Rule, opts diag.Options) *Windows {
	return &Windows{chain: ch, rules: rs, opts: opts}
}

// Next returns the windows one collection ends (one snapshot per
// namespace; none for a namespace's first) and their diagnosis, nil when
// there is no window. Keep then makes the collection the next windows'
// start.
func (w *Windows) Next(snaps []*snapshot.Snapshot) ([]*diag.Input, *Report) {
	ins := w.chain.Windows(snaps, w.opts)
	if len(ins) == 0 {
		return nil, nil
	}
	return ins, Diagnose(slices.Values(ins), w.rules)
}

// Keep makes snaps the starts of the next windows, kept as what the
// rules read of them, and forgets the namespaces not among them. Called
// once the windows Next returned are no longer used, so that two
// collections' starts are not held at once.
func (w *Windows) Keep(snaps []*snapshot.Snapshot) { w.chain.Keep(snaps) }

// Report is the diagnosis of the windows snaps ends (Next), nil when
// there is none, and keeps snaps as the next start.
func (w *Windows) Report(snaps []*snapshot.Snapshot) *Report {
	_, rep := w.Next(snaps)
	w.Keep(snaps)
	return rep
}
