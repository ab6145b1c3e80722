// SPDX-License-Identifier: Apache-2.0

package history

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// JSONVersion is the version of `history --json`; it only gains fields.
const JSONVersion = 1

// Listing is what `history` prints.
type Listing struct {
	Version   int        `json:"version"`
	Dir       string     `json:"dir"`
	Since     time.Time  `json:"since,omitzero"`
	Until     time.Time  `json:"until"`
	Windows   int        `json:"windows"`
	First     time.Time  `json:"first,omitzero"`
	Last      time.Time  `json:"last,omitzero"`
	Incidents []Incident `json:"incidents"`
	// Replay is each incident's replay command, in the order of
	// Incidents ("" when no evidence was kept).
	Replay []string `json:"replay"`
	// TraceReplay is each incident's trace command, in the order of
	// Incidents ("" when none was recorded); TraceNote says why a trace
	// named in the timeline is not there ("" otherwise).
	TraceReplay []string `json:"trace_replay"`
	TraceNote   []string `json:"trace_note"`
	// TracePages, for --html, is each incident's trace page relative to
	// the history page ("" when none).
	TracePages []string `json:"-"`
	// Pages, for serve's page, is each incident's page ("" when none).
	Pages []string `json:"-"`
	Notes []string `json:"notes,omitempty"`
	// Picture, when set, is printed under the incidents (text only).
	Picture *Picture `json:"-"`
}

// ReplayCommand is the command that replays a window of the store in dir.
func ReplayCommand(dir string, at time.Time) string {
	return "tcpdoctor check --history " + shellQuote(dir) + " --at " + at.UTC().Format(time.RFC3339Nano)
}

// TraceCommand is the command that shows a trace of the store in dir
// (a table on the terminal, and the page html).
func TraceCommand(dir, name, html string) string {
	return "tcpdoctor trace --from " + shellQuote(filepath.Join(dir, name)) + " --html " + shellQuote(html)
}

// TracePage is the name of a trace's page: its file's name with .html.
func TracePage(name string) string { return strings.TrimSuffix(name, suffix) + ".html" }

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,=@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// WriteJSON prints the listing as indented JSON.
func WriteJSON(w io.Writer, l *Listing) error {
	l.Version = JSONVersion
	if l.Incidents == nil {
		l.Incidents = []Incident{}
	}
	if l.Replay == nil {
		l.Replay = []string{}
	}
	if l.TraceReplay == nil {
		l.TraceReplay = []string{}
	}
	if l.TraceNote == nil {
		l.TraceNote = []string{}
	}
	return output.WriteJSON(w, l)
}

// WriteText prints the incidents for people, oldest first, times in loc:
// one block each with its span, peak, subject, summary and replay
// command, then a strip of each subject's findings over the listing.
// Headings and summaries longer than width (0: none) wrap at spaces.
func WriteText(w io.Writer, l *Listing, loc *time.Location, width int) {
	safe := textsafe.String
	day := func(t time.Time) string { return t.In(loc).Format("2006-01-02 15:04:05") }
	fmt.Fprintf(w, "history %s: %d windows", safe(l.Dir), l.Windows)
	if l.Windows > 0 {
		fmt.Fprintf(w, " from %s to %s", day(l.First), day(l.Last))
	}
	fmt.Fprintf(w, ", %s\n", units.N(len(l.Incidents), "incident"))
	for i, in := range l.Incidents {
		end := day(in.End) + " (" + units.Dur(in.End.Sub(in.Start)) + ")"
		if in.Ongoing {
			end = "ongoing (since " + units.Dur(in.End.Sub(in.Start)) + ")"
		}
		fmt.Fprintln(w)
		report.Wrap(w, width, day(in.Start)+" .. ", 4, fmt.Sprintf("%s  %s %s  %s", end, in.Severity.Label(), safe(in.Rule), report.SubjectText(in.Subject)))
		report.Wrap(w, width, "  ", 4, safe(in.Summary))
		if l.Replay[i] != "" {
			fmt.Fprintf(w, "  replay: %s\n", safe(l.Replay[i]))
		} else {
			fmt.Fprintf(w, "  replay: no evidence kept for it (only its timeline)\n")
		}
		if i < len(l.TraceReplay) && l.TraceReplay[i] != "" {
			fmt.Fprintf(w, "  trace: %s\n", safe(l.TraceReplay[i]))
		} else if i < len(l.TraceNote) && l.TraceNote[i] != "" {
			fmt.Fprintf(w, "  trace: %s\n", safe(l.TraceNote[i]))
		}
	}
	if l.Picture != nil {
		WritePicture(w, l.Picture, loc)
	}
	for _, n := range l.Notes {
		fmt.Fprintf(w, "note: %s\n", safe(n))
	}
}

// WriteEntries says what the timeline holds for windows, for a time with
// no evidence: each window's span and findings.
func WriteEntries(w io.Writer, es []Entry, loc *time.Location) {
	for _, e := range es {
		fmt.Fprintf(w, "  window %s .. %s netns %s: ", e.From.In(loc).Format("15:04:05"), e.To.In(loc).Format("2006-01-02 15:04:05"), textsafe.String(e.Netns))
		if len(e.Findings) == 0 {
			fmt.Fprintf(w, "no findings")
			if e.Unknown > 0 {
				fmt.Fprintf(w, " (%d rules unknown)", e.Unknown)
			}
			fmt.Fprintln(w)
			continue
		}
		fmt.Fprintf(w, "%s\n", units.N(len(e.Findings), "finding"))
		for _, f := range e.Findings {
			fmt.Fprintf(w, "    %s %s  %s: %s\n", f.Severity.Label(), textsafe.String(f.Rule), report.SubjectText(f.Subject), textsafe.String(f.Summary))
		}
		if e.Note != "" {
			fmt.Fprintf(w, "    note: %s\n", textsafe.String(e.Note))
		}
	}
}

// Covering is the entries whose windows cover t (From < t <= To).
func Covering(es []Entry, t time.Time) []Entry {
	var out []Entry
	for _, e := range es {
		if e.From.Before(t) && !e.To.Before(t) {
			out = append(out, e)
		}
	}
	return out
}
