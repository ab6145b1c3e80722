// SPDX-License-Identifier: Apache-2.0

// Package corpus runs stock software (nginx, redis, wrk, iperf3, small
// python3 servers) in network namespaces, diagnoses each with the real
// command line, and judges the findings against what the software is
// known to do. This file holds the judging and the accuracy table; the
// scenarios are root tests in corpus_test.go.
package corpus

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// Subject is a finding's subject as check --json prints it. It is decoded
// here rather than reused from diag so that fields the JSON gains
// (service, peers) are read without a build dependency on them.
type Subject struct {
	Netns   string `json:"netns,omitempty"`
	Local   string `json:"local,omitempty"`
	Remote  string `json:"remote,omitempty"`
	Service string `json:"service,omitempty"`
	Pid     int    `json:"pid,omitempty"`
	Command string `json:"command,omitempty"`
}

// Finding is one finding as check --json prints it.
type Finding struct {
	Rule     string          `json:"rule"`
	Severity diag.Severity   `json:"severity"`
	Subject  Subject         `json:"subject"`
	Summary  string          `json:"summary"`
	Evidence []diag.Evidence `json:"evidence"`
	Fixes    []diag.Fix      `json:"fixes"`
}

// hasFix says whether one of f's fixes holds s in its text or command.
func (f *Finding) hasFix(s string) bool {
	for _, x := range f.Fixes {
		if strings.Contains(x.Text, s) || strings.Contains(x.Command, s) {
			return true
		}
	}
	return false
}

// Report is the part of check --json the corpus reads.
type Report struct {
	Findings []Finding      `json:"findings"`
	Unknown  []diag.Unknown `json:"unknown"`
}

// Expect is one expected finding. Empty subject fields are not checked.
type Expect struct {
	// Rule is a rule id; "a|b" accepts either.
	Rule string
	// Min and Max bound the severity; Max 0 means critical.
	Min, Max diag.Severity
	// Optional: the finding may be absent; present, it must not exceed Max.
	Optional bool
	Command  string
	// Proc names a process the case started (its label); the case sets
	// Pid from it before judging.
	Proc   string
	Pid    int
	Remote string
	// Service is the listener "ip:port" server-side sockets belong to.
	// While check does not report subject.service, the port of
	// subject.local is compared instead (Outcome.Notes says so).
	Service string
	// Fix, if set, is what one of the finding's fixes must say (in its
	// text or command): the remedy, not only the fault, is judged.
	Fix string
}

func (e Expect) max() diag.Severity {
	if e.Max == 0 {
		return diag.Critical
	}
	return e.Max
}

func (e Expect) rules() []string { return strings.Split(e.Rule, "|") }

// String describes the expectation for the table.
func (e Expect) String() string {
	var b strings.Builder
	if e.Optional {
		b.WriteString("may: ")
	}
	b.WriteString(e.Rule)
	switch {
	case e.Optional:
		fmt.Fprintf(&b, " up to %s", e.max())
	case e.Min == e.max():
		fmt.Fprintf(&b, " %s", e.Min)
	case e.max() == diag.Critical:
		fmt.Fprintf(&b, " %s or above", e.Min)
	default:
		fmt.Fprintf(&b, " %s to %s", e.Min, e.max())
	}
	var who []string
	if e.Command != "" {
		c := e.Command
		switch {
		case e.Pid != 0:
			c += fmt.Sprintf(" (pid %d, %s)", e.Pid, e.Proc)
		case e.Proc != "":
			c += " (" + e.Proc + ")"
		}
		who = append(who, c)
	}
	if e.Remote != "" {
		who = append(who, "to "+e.Remote)
	}
	if e.Service != "" {
		who = append(who, "service "+e.Service)
	}
	if len(who) > 0 {
		b.WriteString(", " + strings.Join(who, " "))
	}
	if e.Fix != "" {
		fmt.Fprintf(&b, ", fix saying %q", e.Fix)
	}
	return b.String()
}

// fit is how well a finding's subject fits an expectation.
type fit int

const (
	conflict fit = iota // a field names something else
	partial             // no conflict, but fields the expectation sets are not reported
	full                // every field the expectation sets matches
)

// fit compares the subject fields e sets. lacking names the fields s
// does not report; note explains a service compared through the local
// port.
func (e Expect) fit(s Subject) (f fit, lacking []string, note string) {
	cmp := func(name string, want, got any, empty bool) bool {
		switch {
		case empty:
			lacking = append(lacking, name)
		case want != got:
			return false
		}
		return true
	}
	if e.Command != "" && !cmp("command", e.Command, s.Command, s.Command == "") ||
		e.Pid != 0 && !cmp("pid", e.Pid, s.Pid, s.Pid == 0) ||
		e.Remote != "" && !cmp("remote", e.Remote, s.Remote, s.Remote == "") {
		return conflict, nil, ""
	}
	if e.Service != "" {
		switch {
		case s.Service != "":
			if s.Service != e.Service {
				return conflict, nil, ""
			}
		case s.Local != "":
			want, err1 := netip.ParseAddrPort(e.Service)
			got, err2 := netip.ParseAddrPort(s.Local)
			if err1 != nil || err2 != nil || want.Port() != got.Port() {
				return conflict, nil, ""
			}
			note = "subject.service not reported: matched on subject.local's port"
		default:
			lacking = append(lacking, "service (or local)")
		}
	}
	if len(lacking) > 0 {
		return partial, lacking, ""
	}
	return full, nil, note
}

func (e Expect) ruleMatches(rule string) bool {
	for _, r := range e.rules() {
		if r == rule {
			return true
		}
	}
	return false
}

// Outcome is one case judged.
type Outcome struct {
	// FalseAlarms are findings at warning or above that no expectation
	// accounts for, or above an expectation's maximum.
	FalseAlarms []string
	// Misses are expectations no finding met.
	Misses []string
	Notes  []string
}

// Pass says whether the case had neither false alarms nor misses.
func (o Outcome) Pass() bool { return len(o.FalseAlarms) == 0 && len(o.Misses) == 0 }

// Verdict is "pass", "false alarm", "miss" or "false alarm + miss".
func (o Outcome) Verdict() string {
	switch {
	case o.Pass():
		return "pass"
	case len(o.Misses) == 0:
		return "false alarm"
	case len(o.FalseAlarms) == 0:
		return "miss"
	}
	return "false alarm + miss"
}

// Describe is one line for a finding: rule, severity and subject.
func Describe(f Finding) string {
	s := f.Subject
	var parts []string
	if s.Command != "" || s.Pid != 0 {
		parts = append(parts, fmt.Sprintf("%s (pid %d)", s.Command, s.Pid))
	}
	switch {
	case s.Local != "" && s.Remote != "":
		parts = append(parts, s.Local+" -> "+s.Remote)
	case s.Local != "":
		parts = append(parts, "local "+s.Local)
	case s.Remote != "":
		parts = append(parts, "to "+s.Remote)
	}
	if s.Service != "" {
		parts = append(parts, "service "+s.Service)
	}
	d := fmt.Sprintf("%s %s", f.Rule, f.Severity)
	if len(parts) > 0 {
		d += ": " + strings.Join(parts, ", ")
	}
	return d
}

// Judge compares findings (of every namespace checked) with the
// expectations. No non-optional expectation means the case must be quiet:
// nothing at warning or above.
//
// A finding at warning or above is a false alarm unless an expectation of
// its rule accounts for it: no subject field conflicts (fields the finding
// leaves empty do not) and its severity is at most the maximum. An
// expectation is missed unless a finding of its rule has the full subject
// and a severity in range; a right rule with an incomplete subject is a
// miss, not a false alarm.
func Judge(want []Expect, got []Finding) Outcome {
	var o Outcome
	for _, f := range got {
		if f.Severity < diag.Warning {
			continue
		}
		accounted, tooHigh := false, false
		for _, e := range want {
			if !e.ruleMatches(f.Rule) {
				continue
			}
			if ft, _, _ := e.fit(f.Subject); ft == conflict {
				continue
			}
			if f.Severity <= e.max() {
				accounted = true
				break
			}
			tooHigh = true
		}
		switch {
		case accounted:
		case tooHigh:
			o.FalseAlarms = append(o.FalseAlarms, Describe(f)+" (above the expected maximum)")
		default:
			o.FalseAlarms = append(o.FalseAlarms, Describe(f))
		}
	}
	for _, e := range want {
		if e.Optional {
			continue
		}
		met := false
		var near []string
		for _, f := range got {
			if !e.ruleMatches(f.Rule) {
				continue
			}
			ft, lacking, note := e.fit(f.Subject)
			inRange := f.Severity >= e.Min && f.Severity <= e.max()
			switch {
			case ft == full && inRange && e.Fix != "" && !f.hasFix(e.Fix):
				near = append(near, fmt.Sprintf("%s %s without a fix saying %q", f.Rule, f.Severity, e.Fix))
			case ft == full && inRange:
				met = true
				if note != "" {
					o.Notes = append(o.Notes, note)
				}
			case ft == conflict:
			case !inRange && len(lacking) > 0:
				near = append(near, fmt.Sprintf("%s at %s without %s", f.Rule, f.Severity, strings.Join(lacking, ", ")))
			case !inRange:
				near = append(near, fmt.Sprintf("%s at %s", f.Rule, f.Severity))
			default:
				near = append(near, fmt.Sprintf("%s %s without %s", f.Rule, f.Severity, strings.Join(lacking, ", ")))
			}
			if met {
				break
			}
		}
		if !met {
			why := "not reported"
			if len(near) > 0 {
				why = "reported as " + strings.Join(near, "; ")
			}
			o.Misses = append(o.Misses, e.String()+": "+why)
		}
	}
	return o
}

// Quiet says whether want expects nothing at warning or above.
func Quiet(want []Expect) bool {
	for _, e := range want {
		if !e.Optional {
			return false
		}
	}
	return true
}

// ExpectedText describes a case's expected verdict for the table.
func ExpectedText(want []Expect) string {
	var parts []string
	if Quiet(want) {
		parts = append(parts, "quiet (exit 0, nothing at warning or above)")
	}
	for _, e := range want {
		parts = append(parts, e.String())
	}
	return strings.Join(parts, "; ")
}
