// SPDX-License-Identifier: Apache-2.0

package history

import (
	"slices"
	"sort"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// Incident is a finding seen in consecutive windows of its namespace.
type Incident struct {
	Rule string `json:"rule"`
	// Severity is the peak; Subject and Summary are the peak's first
	// window's (its owner, when that window's finding named none, the
	// one a window of the same endpoints named just before: the sockets
	// an exiting owner leaves behind belong to no process).
	Severity diag.Severity `json:"severity"`
	Subject  diag.Subject  `json:"subject"`
	Summary  string        `json:"summary"`
	// Start is the start of the first window that showed it, End the end
	// of the last: it began after Start and was last seen at End.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Ongoing: the newest window of its namespace still shows it and that
	// window ended less than three windows before the listing's end.
	Ongoing bool `json:"ongoing"`
	Windows int  `json:"windows"`
	// Evidence is the snapshot file of the window to replay (the first
	// kept at the peak, else the first kept), empty when none was kept;
	// At is a time in that window, for `check --at`.
	Evidence string    `json:"evidence,omitempty"`
	At       time.Time `json:"at,omitzero"`
	// Trace is the file of the first trace serve recorded of it, if any
	// (docs/history.md, "Triggered traces").
	Trace string `json:"trace,omitempty"`
	// URL is the incident's page on the serve that kept it (serve
	// --history, docs/history.md "Evidence pages"); only in its answers.
	URL    string `json:"url,omitempty"`
	peakAt bool
	// near is the evidence window of this incident nearest the Grouper's
	// Near (nearSev its finding's severity there).
	near    *Window
	nearSev diag.Severity
}

// Filter selects incidents.
type Filter struct {
	// Min is the lowest severity listed.
	Min   diag.Severity
	Rules []string
	Netns string
}

func (f *Filter) keep(fd *Finding) bool {
	return fd.Severity >= f.Min && (len(f.Rules) == 0 || slices.Contains(f.Rules, fd.Rule)) &&
		(f.Netns == "" || f.Netns == fd.Subject.Netns)
}

// Incidents groups timeline entries (in time order) into incidents, in
// order of start. end is the end of the listing (now, or --until).
func Incidents(es []Entry, f Filter, end time.Time) []Incident {
	g := NewGrouper(f)
	for i := range es {
		g.Add(&es[i])
	}
	return g.Incidents(end)
}

// Grouper groups timeline entries, fed one at a time in time order, into
// incidents: Incidents without holding the entries. It holds the open
// incidents, the newest closed ones (Max to twice Max of all, with Max
// set), and each endpoint's last owner.
type Grouper struct {
	f Filter
	// Max, when positive, bounds the incidents listed: the oldest closed
	// ones beyond it are dropped (counted in Dropped), once twice Max are
	// held, and by Incidents.
	Max     int
	Dropped int
	// Near, when set, has each incident note its kept evidence window
	// nearest Near (IncidentsAt); Kept, when set, says which evidence
	// files are still in the store.
	Near time.Time
	Kept func(name string) bool

	opened map[findingKey]*openInc
	last   map[string]span // each namespace's newest window
	out    []*Incident
	owners map[endpoints]owner
	adds   int
}

type openInc struct {
	inc    *Incident
	lastTo time.Time
}

type span struct{ from, to time.Time }

// endpoints is what an owner is remembered by: a namespace's local and
// remote endpoints as a finding names them.
type endpoints struct {
	netns         string
	local, remote diag.Address
}

type owner struct {
	pid     int
	command string
	to      time.Time
}

// NewGrouper returns a Grouper keeping the findings f selects.
func NewGrouper(f Filter) *Grouper {
	return &Grouper{f: f, opened: map[findingKey]*openInc{}, last: map[string]span{}, owners: map[endpoints]owner{}}
}

// Add takes the next entry.
func (g *Grouper) Add(e *Entry) {
	prev, had := g.last[e.Netns]
	// A window continues its namespace's previous one unless a gap
	// longer than itself lies between them (serve stopped, a window
	// lost).
	contiguous := had && e.From.Sub(prev.to) <= e.To.Sub(e.From)
	g.last[e.Netns] = span{e.From, e.To}
	var ev *Window
	if e.Evidence != "" && (g.Kept == nil || g.Kept(e.Evidence)) {
		if fi, ok := parseName(e.Evidence); ok {
			ev = &Window{Name: e.Evidence, From: fi.from, To: fi.to}
		}
	}
	for j := range e.Findings {
		fd := &e.Findings[j]
		if !g.f.keep(fd) {
			continue
		}
		sub := g.owned(e, fd)
		k := keyOf(fd.Rule, &sub)
		o := g.opened[k]
		if o == nil || !contiguous || !o.lastTo.Equal(prev.to) {
			o = &openInc{inc: &Incident{Rule: fd.Rule, Start: e.From, Severity: -1}}
			g.opened[k] = o
			g.out = append(g.out, o.inc)
		}
		o.lastTo = e.To
		in := o.inc
		in.End = e.To
		in.Windows++
		if fd.Severity > in.Severity {
			in.Severity, in.Subject, in.Summary = fd.Severity, sub, fd.Summary
			in.peakAt = false // evidence kept so far is from below the peak
		}
		if in.Trace == "" {
			in.Trace = fd.Trace
		}
		if e.Evidence != "" && (in.Evidence == "" || !in.peakAt && fd.Severity == in.Severity) {
			in.Evidence, in.At = e.Evidence, e.To
			in.peakAt = fd.Severity == in.Severity
		}
		if ev != nil && !g.Near.IsZero() && (in.near == nil || distance(ev, g.Near) < distance(in.near, g.Near)) {
			in.near, in.nearSev = ev, fd.Severity
		}
	}
	g.trim()
}

// owned is fd's subject, with the owner a window of the same endpoints
// named when it continues right after: the TIME_WAIT sockets an exiting
// (or closing) owner leaves behind belong to no process, and a finding
// about them would otherwise say "unknown".
func (g *Grouper) owned(e *Entry, fd *Finding) diag.Subject {
	sub := fd.Subject
	if !sub.Local.IsValid() && !sub.Remote.IsValid() {
		return sub
	}
	k := endpoints{sub.Netns, sub.Local, sub.Remote}
	if sub.Pid != 0 {
		g.owners[k] = owner{pid: sub.Pid, command: sub.Command, to: e.To}
		return sub
	}
	if o, ok := g.owners[k]; ok && e.From.Sub(o.to) <= e.To.Sub(e.From) {
		sub.Pid, sub.Command = o.pid, o.command
		o.to = e.To // still the same owner's sockets
		g.owners[k] = o
	}
	return sub
}

// trim drops the oldest closed incidents beyond Max (in batches: once
// twice Max are held), and owners gone for long.
func (g *Grouper) trim() {
	if g.Max > 0 && len(g.out) >= 2*g.Max {
		g.trimTo()
	}
	// Incidents their namespace moved on from are closed: forget them
	// now and then, so that what is held stays bounded by the findings
	// open at once.
	if g.adds++; g.adds%4096 == 0 {
		for k, o := range g.opened {
			if l, ok := g.last[k.netns]; ok && !o.lastTo.Equal(l.to) {
				delete(g.opened, k)
			}
		}
	}
	if len(g.owners) > 4096 {
		var newest time.Time
		for _, o := range g.owners {
			newest = maxTime(newest, o.to)
		}
		for k, o := range g.owners {
			if newest.Sub(o.to) > time.Hour {
				delete(g.owners, k)
			}
		}
	}
}

// trimTo drops the oldest closed incidents until Max are held.
func (g *Grouper) trimTo() {
	open := make(map[*Incident]bool, len(g.opened))
	for k, o := range g.opened {
		// An incident whose namespace moved on without it is closed.
		if l, ok := g.last[k.netns]; ok && !o.lastTo.Equal(l.to) {
			delete(g.opened, k)
			continue
		}
		open[o.inc] = true
	}
	drop := len(g.out) - g.Max
	kept := g.out[:0]
	for _, in := range g.out {
		if drop > 0 && !open[in] {
			drop--
			g.Dropped++
			continue
		}
		kept = append(kept, in)
	}
	clear(g.out[len(kept):])
	g.out = kept
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// distance is how far t lies from w: 0 inside it.
func distance(w *Window, t time.Time) time.Duration {
	switch {
	case t.After(w.To):
		return t.Sub(w.To)
	case !t.After(w.From):
		return w.From.Sub(t)
	}
	return 0
}

// Incidents is the incidents so far, in order of start; end is the end
// of the listing (now, or --until).
func (g *Grouper) Incidents(end time.Time) []Incident {
	if g.Max > 0 && len(g.out) > g.Max {
		g.trimTo()
	}
	res := make([]Incident, 0, len(g.out))
	for _, in := range g.out {
		l, ok := g.last[in.Subject.Netns]
		if ok && l.to.Equal(in.End) && end.Sub(l.to) < 3*l.to.Sub(l.from) {
			in.Ongoing = true
		}
		res = append(res, *in)
	}
	sort.SliceStable(res, func(i, j int) bool { return res[i].Start.Before(res[j].Start) })
	return res
}
