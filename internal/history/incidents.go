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
	// window's.
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
	Trace  string `json:"trace,omitempty"`
	peakAt bool
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
	type open struct {
		inc    *Incident
		lastTo time.Time
	}
	var out []*Incident
	opened := map[findingKey]*open{}
	last := map[string]*Entry{} // each namespace's newest entry
	for i := range es {
		e := &es[i]
		prev := last[e.Netns]
		// A window continues its namespace's previous one unless a gap
		// longer than itself lies between them (serve stopped, a window
		// lost).
		contiguous := prev != nil && e.From.Sub(prev.To) <= e.To.Sub(e.From)
		last[e.Netns] = e
		for j := range e.Findings {
			fd := &e.Findings[j]
			if !f.keep(fd) {
				continue
			}
			k := keyOf(fd.Rule, &fd.Subject)
			o := opened[k]
			if o == nil || !contiguous || !o.lastTo.Equal(prev.To) {
				o = &open{inc: &Incident{Rule: fd.Rule, Start: e.From, Severity: -1}}
				opened[k] = o
				out = append(out, o.inc)
			}
			o.lastTo = e.To
			in := o.inc
			in.End = e.To
			in.Windows++
			if fd.Severity > in.Severity {
				in.Severity, in.Subject, in.Summary = fd.Severity, fd.Subject, fd.Summary
				in.peakAt = false // evidence kept so far is from below the peak
			}
			if in.Trace == "" {
				in.Trace = fd.Trace
			}
			if e.Evidence != "" && (in.Evidence == "" || !in.peakAt && fd.Severity == in.Severity) {
				in.Evidence, in.At = e.Evidence, e.To
				in.peakAt = fd.Severity == in.Severity
			}
		}
	}
	res := make([]Incident, 0, len(out))
	for _, in := range out {
		e := last[in.Subject.Netns]
		if e != nil && e.To.Equal(in.End) && end.Sub(e.To) < 3*e.To.Sub(e.From) {
			in.Ongoing = true
		}
		res = append(res, *in)
	}
	sort.SliceStable(res, func(i, j int) bool { return res[i].Start.Before(res[j].Start) })
	return res
}
