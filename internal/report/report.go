// SPDX-License-Identifier: Apache-2.0

// Package report is the diagnosis report: Diagnose runs the rules over
// windows into a Report, pure (no sampling, no printing), and WriteText
// and WriteJSON print it for people and for programs (docs/json.md).
package report

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

// JSONVersion is the version of the `check --json` object. It only
// changes when a field changes meaning; new fields do not bump it.
const JSONVersion = 1

// Report is the `check --json` object.
type Report struct {
	Version  int            `json:"version"`
	Host     string         `json:"host"`
	Kernel   string         `json:"kernel,omitempty"`
	Taken    time.Time      `json:"taken"`
	Window   Window         `json:"window"`
	Netns    []string       `json:"netns"`
	Sockets  int            `json:"sockets"`
	Findings []diag.Finding `json:"findings"`
	Unknown  []diag.Unknown `json:"unknown"`
	RulesRun []string       `json:"rules_run"`
	Sources  []SourceError  `json:"source_errors,omitempty"`
	// Build is the tcpdoctor that wrote the report, when it knew.
	Build *version.Info `json:"build,omitempty"`
}

// Window is the time between the two samples the rules compared.
type Window struct {
	Seconds float64   `json:"seconds"`
	From    time.Time `json:"from,omitempty"`
	To      time.Time `json:"to"`
}

// SourceError is a source that failed in one namespace, or (Netns "")
// one read once for the whole host that missed some of what it counts.
type SourceError struct {
	Netns  string `json:"netns"`
	Source string `json:"source"`
	Error  string `json:"error"`
}

// WriteJSON prints the report as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	if r.Findings == nil {
		r.Findings = []diag.Finding{}
	}
	if r.Unknown == nil {
		r.Unknown = []diag.Unknown{}
	}
	return output.WriteJSON(w, r)
}

// Style controls text output.
type Style struct {
	Color bool
	// MinSeverity hides findings below it (info is shown with --verbose).
	MinSeverity diag.Severity
	// Width wraps the heading, summary, evidence, fix, risk and closing
	// lines longer than it at spaces, their continuations indented under their text; commands
	// and pod specs are never wrapped (they are copied whole). 0 wraps
	// nothing (a pipe: one line per item, for grep).
	Width int
}

const (
	red    = "\x1b[31;1m"
	yellow = "\x1b[33;1m"
	cyan   = "\x1b[36m"
	dim    = "\x1b[2m"
	reset  = "\x1b[0m"
)

// WriteText prints findings for people: most severe first, each with its
// evidence and fixes, then what could not be checked. Every string is
// escaped for the terminal (textsafe): process and namespace names, and
// whatever a snapshot file holds, come from outside.
func WriteText(w io.Writer, r *Report, st Style) {
	safe := textsafe.String
	paint := func(code, s string) string {
		if !st.Color {
			return s
		}
		return code + s + reset
	}
	shown := 0
	for _, f := range r.Findings {
		if f.Severity < st.MinSeverity {
			continue
		}
		shown++
		col := cyan
		switch f.Severity {
		case diag.Critical:
			col = red
		case diag.Warning:
			col = yellow
		}
		wrap(w, st, paint(col, f.Severity.Label())+" "+safe(f.Rule)+"  ", 4, SubjectText(f.Subject), "")
		wrap(w, st, "  ", 4, safe(f.Summary), "")
		if len(f.Evidence) > 0 {
			fmt.Fprintln(w, "  evidence:")
			for _, ev := range f.Evidence {
				line := fmt.Sprintf("%s = %s", safe(ev.Name), safe(ev.Value))
				if ev.Threshold != "" {
					line += "  (threshold " + safe(ev.Threshold) + ")"
				}
				wrap(w, st, "    ", 6, line, "["+safe(ev.Source)+"]")
			}
		}
		if len(f.Fixes) > 0 {
			fmt.Fprintln(w, "  fix:")
			for _, fx := range f.Fixes {
				tgt := fx.Scope
				if fx.Target != "" {
					tgt += "/" + fx.Target
				}
				wrap(w, st, "    - ", 8, "["+safe(tgt)+"] "+safe(fx.Text), "")
				if fx.Command != "" {
					// One line: a name inside a command must not forge
					// another (no rule writes a command of several lines).
					fmt.Fprintf(w, "        %s\n", safe(fx.Command))
				}
				if p := fx.Pod; p != nil && p.YAML != "" {
					// The pod spec, a line at a time, each escaped.
					fmt.Fprintf(w, "        pod %s spec:\n", safe(p.Pod))
					for _, l := range strings.Split(strings.TrimRight(p.YAML, "\n"), "\n") {
						fmt.Fprintf(w, "          %s\n", safe(l))
					}
				}
				if fx.Risk != "" {
					wrap(w, st, "      risk: ", 8, safe(fx.Risk), "")
				}
			}
		}
		fmt.Fprintln(w)
	}
	hidden := len(r.Findings) - shown
	if shown == 0 {
		fmt.Fprintf(w, "%s no TCP problem found at %s or above\n", paint(cyan, "OK"), st.MinSeverity)
	}
	done := fmt.Sprintf("checked %s in %s over %s with %s",
		units.N(r.Sockets, "socket"), units.N(len(r.Netns), "network namespace"), windowText(r.Window), units.N(len(r.RulesRun), "rule"))
	if hidden > 0 {
		done += fmt.Sprintf("; %s hidden (--verbose shows them)", units.N(hidden, "info finding"))
	}
	wrap(w, st, "", 2, done, "")
	for _, u := range r.Unknown {
		ns := ""
		if u.Netns != "" && len(r.Netns) > 1 {
			ns = " [" + safe(u.Netns) + "]"
		}
		wrap(w, st, paint(yellow, "UNKNOWN")+" ", 2, safe(u.Rule)+ns+": "+safe(u.Reason), "")
	}
	for _, se := range r.Sources {
		where := ""
		if se.Netns != "" {
			where = " in netns " + safe(se.Netns)
		}
		wrap(w, st, paint(yellow, "NOTE")+" ", 2, "source "+safe(se.Source)+where+" incomplete: "+safe(se.Error), "")
	}
}

// Wrap prints prefix and text on one line when it fits width (or width
// is 0), else broken at spaces as check's text is, continuations indented
// by indent spaces.
func Wrap(w io.Writer, width int, prefix string, indent int, text string) {
	wrap(w, Style{Width: width}, prefix, indent, text, "")
}

// wrap prints prefix, text and (dimmed) tail on one line when it fits
// st.Width (or Width is 0), else broken at spaces into lines of at most
// Width (a word longer than a line stays whole), each continuation
// indented by indent spaces. The tail keeps its two spaces before it on
// an unbroken line.
func wrap(w io.Writer, st Style, prefix string, indent int, text, tail string) {
	paint := func(s string) string {
		if !st.Color || s == "" {
			return s
		}
		return dim + s + reset
	}
	full := prefix + text
	if tail != "" {
		full += "  " + tail
	}
	if st.Width <= 0 || visible(full) <= st.Width {
		if tail != "" {
			fmt.Fprintf(w, "%s%s  %s\n", prefix, text, paint(tail))
			return
		}
		fmt.Fprintf(w, "%s%s\n", prefix, text)
		return
	}
	type word struct {
		s   string
		dim bool
	}
	var ws []word
	for _, f := range strings.Fields(text) {
		ws = append(ws, word{f, false})
	}
	for _, f := range strings.Fields(tail) {
		ws = append(ws, word{f, true})
	}
	line, n, empty := prefix, visible(prefix), true
	var dimRun []string
	flushDim := func() {
		if len(dimRun) > 0 {
			line += paint(strings.Join(dimRun, " "))
			dimRun = dimRun[:0]
		}
	}
	for _, wd := range ws {
		wl := utf8.RuneCountInString(wd.s)
		if !empty && n+1+wl > st.Width {
			flushDim()
			fmt.Fprintln(w, line)
			line, n, empty = strings.Repeat(" ", indent), indent, true
		}
		if !empty {
			if len(dimRun) > 0 && wd.dim {
				dimRun = append(dimRun, wd.s)
				n += 1 + wl
				continue
			}
			line += " "
			n++
		}
		if wd.dim {
			dimRun = append(dimRun, wd.s)
		} else {
			flushDim()
			line += wd.s
		}
		n += wl
		empty = false
	}
	flushDim()
	fmt.Fprintln(w, line)
}

// visible is how many characters s shows: its runes less our colour
// codes (the only escapes text holds: everything else went through
// textsafe).
func visible(s string) int {
	n := 0
	for i := 0; i < len(s); {
		if s[i] == 0x1b {
			if j := strings.IndexByte(s[i:], 'm'); j > 0 {
				i += j + 1
				continue
			}
		}
		_, sz := utf8.DecodeRuneInString(s[i:])
		n++
		i += sz
	}
	return n
}

func windowText(win Window) string {
	if win.Seconds == 0 {
		return "one snapshot"
	}
	return fmt.Sprintf("a %.1fs window", win.Seconds)
}

// counts prints "a 12, b 3", keys escaped.
func counts(cs []diag.Count) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %d", textsafe.String(c.Key), c.N)
	}
	return strings.Join(parts, ", ")
}

// SubjectText is a finding's subject as the text report prints it (and
// history's listings and pages): the one text of a diag.Subject, its
// process, workload and namespace as output.Subject formats them,
// outside strings escaped.
func SubjectText(s diag.Subject) string {
	sub := output.Subject{Netns: s.Netns, Pid: s.Pid, HasPid: s.Pid != 0, Command: s.Command, HasCommand: s.Command != "", Workload: s.Workload}
	safe := textsafe.String // an IPv6 address's zone is an outside string
	var parts []string
	if s.Local.IsValid() {
		parts = append(parts, safe(s.Local.String()))
	}
	if s.Remote.IsValid() {
		parts = append(parts, "-> "+safe(s.Remote.String()))
	}
	if p := sub.ProcessPid(); p != "" {
		parts = append(parts, p)
	}
	if s.Service.IsValid() && s.Service != s.Local {
		parts = append(parts, "service "+safe(s.Service.String()))
	}
	if len(s.Peers) > 1 || len(s.Peers) == 1 && !s.Remote.IsValid() {
		parts = append(parts, "peers "+counts(s.Peers))
	}
	if len(s.Ports) > 0 {
		parts = append(parts, "ports "+counts(s.Ports))
	}
	if w := sub.WorkloadPhrase(); w != "" {
		parts = append(parts, w)
	}
	if n := sub.NetnsPhrase(); s.Netns != "" && n != "" {
		parts = append(parts, n)
	}
	return strings.Join(parts, " ")
}
