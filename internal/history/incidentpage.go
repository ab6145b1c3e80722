// SPDX-License-Identifier: Apache-2.0

package history

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"sync"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

//go:embed assets/incident.html
var incidentHTML string

var incidentTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("incident").Parse(incidentHTML))
})

// IncidentPage is what serve's page of one incident shows: the incident,
// the window its evidence covers, and that window's diagnosis as check
// prints it (Report, already text).
type IncidentPage struct {
	Incident Incident
	// From and To are the window replayed (zero: no evidence kept).
	From, To time.Time
	// Report is check's text output for that window; Note says why
	// there is none.
	Report, Note string
	// TraceHref links the incident's trace page; TraceNote says why a
	// trace it names is not kept.
	TraceHref, TraceNote   string
	JSONHref, TimelineHref string
}

// WriteIncidentHTML writes an incident's page, times in loc;
// html/template escapes every name and the report's text.
func WriteIncidentHTML(w io.Writer, p *IncidentPage, loc *time.Location) error {
	clock := func(t time.Time) string { return t.In(loc).Format("2006-01-02 15:04:05.000 MST") }
	in := &p.Incident
	span := fmt.Sprintf("from %s to %s (%s, %d windows)", clock(in.Start), clock(in.End), units.Dur(in.End.Sub(in.Start)), in.Windows)
	if in.Ongoing {
		span += ", ongoing"
	}
	window := ""
	if !p.To.IsZero() {
		window = fmt.Sprintf("The diagnosis of the window %s .. %s, kept as its evidence, as check prints it:", clock(p.From), clock(p.To))
	}
	err := incidentTmpl().Execute(w, map[string]any{
		"Title":        "tcpdoctor incident: " + in.Rule + " " + report.SubjectText(in.Subject),
		"Severity":     in.Severity.String(),
		"Rule":         in.Rule,
		"Subject":      report.SubjectText(in.Subject),
		"Summary":      in.Summary,
		"Span":         span,
		"Window":       window,
		"Report":       p.Report,
		"Note":         p.Note,
		"TraceHref":    p.TraceHref,
		"TraceNote":    p.TraceNote,
		"JSONHref":     p.JSONHref,
		"TimelineHref": p.TimelineHref,
	})
	if err != nil {
		return fmt.Errorf("history: incident page: %w", err)
	}
	return nil
}
