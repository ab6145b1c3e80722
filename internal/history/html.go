// SPDX-License-Identifier: Apache-2.0

package history

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"sync"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

//go:embed assets/history.html
var pageHTML string

// pageTmpl is parsed on first use: every command pays package init, and
// few write this page.
var pageTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("history").Parse(pageHTML))
})

// chartPx is the chart's width on the page, at least 2 pixels a bucket.
const chartPx = 960

type legendItem struct{ Name, Color string }

// cellColor is a cell's colour on the page; the legend names each, and
// every run's title says it in words.
func cellColor(c int) (name, color string) {
	switch {
	case c >= int(diag.Critical):
		return "critical", "#d62728"
	case c == int(diag.Warning):
		return "warning", "#ff9f1c"
	case c == int(diag.Info):
		return "info", "#4a90d9"
	case c == Quiet:
		return "quiet", "#cde8c4"
	}
	return "no window", "#f2f2f2"
}

type pageRun struct {
	X, W         int
	Color, Title string
}

type pageStrip struct {
	Label string
	Cells string
	Runs  []pageRun
}

type pageIncident struct {
	Start, End, Severity, Rule, Subject, Summary, Replay string
	// TraceHref links the trace's page (rendered beside this one);
	// TraceCmd is its command, or why there is none.
	TraceHref, TraceCmd string
	// Href links the incident's own page (serve's pages only).
	Href string
}

// tickLayout is the chart's time ticks' layout: the precision a quarter
// of the span needs (seconds for a 30 s span, milliseconds under 4 s),
// the date only when the span crosses days.
func tickLayout(from, to time.Time) string {
	span := to.Sub(from)
	layout := "15:04"
	switch {
	case span < 4*time.Second:
		layout = "15:04:05.000"
	case span < 20*time.Minute:
		layout = "15:04:05"
	}
	if from.Format(time.DateOnly) != to.Format(time.DateOnly) {
		layout = "01-02 " + layout
	}
	return layout
}

// WriteHTML writes the listing as one self-contained page: the picture
// as a chart of coloured runs per subject, and the incidents table with
// their replay commands; times in loc. html/template escapes every name.
func WriteHTML(w io.Writer, l *Listing, p *Picture, loc *time.Location) error {
	clock := func(t time.Time) string { return t.In(loc).Format("2006-01-02 15:04:05") }
	var legend []legendItem
	for _, c := range []int{int(diag.Critical), int(diag.Warning), int(diag.Info), Quiet, NoWindow} {
		n, col := cellColor(c)
		legend = append(legend, legendItem{n, col})
	}
	var strips []pageStrip
	width := 0
	for i := range p.Strips {
		s := &p.Strips[i]
		cellPx := max(chartPx/len(s.Cells), 2)
		width = len(s.Cells) * cellPx
		ps := pageStrip{Label: s.Rule + " " + report.SubjectText(s.Subject), Cells: StripText(s)}
		for a := 0; a < len(s.Cells); {
			b := a
			for b < len(s.Cells) && s.Cells[b] == s.Cells[a] {
				b++
			}
			name, col := cellColor(s.Cells[a])
			from := p.From.Add(time.Duration(a) * p.Bucket)
			to := p.From.Add(time.Duration(b) * p.Bucket)
			ps.Runs = append(ps.Runs, pageRun{X: a * cellPx, W: (b - a) * cellPx, Color: col,
				Title: fmt.Sprintf("%s .. %s: %s", clock(from), clock(to), name)})
			a = b
		}
		strips = append(strips, ps)
	}
	var ticks []string
	if p.To.After(p.From) {
		layout := tickLayout(p.From.In(loc), p.To.In(loc))
		for i := 0; i <= 4; i++ {
			ticks = append(ticks, p.From.Add(p.To.Sub(p.From)*time.Duration(i)/4).In(loc).Format(layout))
		}
	}
	var incs []pageIncident
	for i, in := range l.Incidents {
		end := clock(in.End) + " (" + units.Dur(in.End.Sub(in.Start)) + ")"
		if in.Ongoing {
			end = "ongoing (since " + units.Dur(in.End.Sub(in.Start)) + ")"
		}
		pi := pageIncident{Start: clock(in.Start), End: end, Severity: in.Severity.String(), Rule: in.Rule,
			Subject: report.SubjectText(in.Subject), Summary: in.Summary}
		if i < len(l.Replay) {
			pi.Replay = l.Replay[i]
		}
		if i < len(l.Pages) {
			pi.Href = l.Pages[i]
		}
		if i < len(l.TraceReplay) && l.TraceReplay[i] != "" {
			pi.TraceCmd = l.TraceReplay[i]
			if i < len(l.TracePages) {
				pi.TraceHref = l.TracePages[i]
			}
		} else if i < len(l.TraceNote) {
			pi.TraceCmd = l.TraceNote[i]
		}
		incs = append(incs, pi)
	}
	first, last := "", ""
	if l.Windows > 0 {
		first, last = clock(l.First), clock(l.Last)
	}
	zone, _ := l.Until.In(loc).Zone()
	err := pageTmpl().Execute(w, map[string]any{
		"Title":     "tcpdoctor history " + l.Dir,
		"Windows":   l.Windows,
		"First":     first,
		"Last":      last,
		"Zone":      zone,
		"Bucket":    units.Dur(p.Bucket),
		"Legend":    legend,
		"Width":     max(width, 1),
		"Ticks":     ticks,
		"Strips":    strips,
		"Incidents": incs,
		"Notes":     l.Notes,
	})
	if err != nil {
		return fmt.Errorf("history: html: %w", err)
	}
	return nil
}
