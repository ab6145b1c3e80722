// SPDX-License-Identifier: Apache-2.0

// Package history is serve's incident store (docs/history.md): a compact
// timeline of every window's findings, in append-only gzip segments, and
// for each window in which a finding at warning or above starts, worsens
// or persists (at most every EvidenceEvery), the window's two samples of
// the namespaces concerned as a snapshot file, exactly as `record` writes
// them, so `check --from` (and `check --history --at`) replays it. The
// store is bounded by size and age, oldest first; a write that fails is
// counted and said once, and never stops the caller.
package history

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// FormatName names a timeline segment in its header (a jsonl.Header, its
// first line); FormatVersion is its version. Readers refuse a newer one.
const (
	FormatName    = "tcpdoctor-history"
	FormatVersion = 1
)

// Entry is one namespace's window in the timeline: its findings, every
// severity, without evidence or fixes.
type Entry struct {
	Netns    string    `json:"netns"`
	Inode    uint64    `json:"inode,omitempty"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Findings []Finding `json:"findings,omitempty"`
	// Unknown counts the rules that could not judge this window.
	Unknown int `json:"unknown,omitempty"`
	// Evidence names the snapshot file kept for this window, if any.
	Evidence string `json:"evidence,omitempty"`
	// Note says why evidence was due but not kept, or that windows
	// before this one were dropped.
	Note string `json:"note,omitempty"`
}

// Finding is a finding as the timeline keeps it.
type Finding struct {
	Rule     string        `json:"rule"`
	Severity diag.Severity `json:"severity"`
	Subject  diag.Subject  `json:"subject"`
	Summary  string        `json:"summary"`
	// Trace names the trace file serve started recording of this
	// finding's connections in this window (docs/history.md, "Triggered
	// traces"), written a few seconds later.
	Trace string `json:"trace,omitempty"`
}

// File names. Their times are UTC, in a form that sorts as it reads.
const (
	stampLayout    = "20060102T150405.000000000Z"
	timelinePrefix = "timeline-"
	evidencePrefix = "evidence-"
	tracePrefix    = "trace-"
	suffix         = ".jsonl.gz"
)

func stamp(t time.Time) string { return t.UTC().Format(stampLayout) }

func timelineName(start time.Time) string { return timelinePrefix + stamp(start) + suffix }

// evidenceName names the snapshot file of a window from..to.
func evidenceName(from, to time.Time) string {
	return evidencePrefix + stamp(from) + "_" + stamp(to) + suffix
}

// traceName names the trace started at the end of the window ending at
// to.
func traceName(to time.Time) string { return tracePrefix + stamp(to) + suffix }

// fileInfo tells a store file by its name: its kind and times (for a
// timeline segment, from is its start and to is zero; for a trace, from
// is the end of the window that started it).
type fileInfo struct {
	name     string
	evidence bool
	trace    bool
	from, to time.Time
}

func parseName(name string) (fileInfo, bool) {
	fi := fileInfo{name: name}
	if !strings.HasSuffix(name, suffix) || filepath.Base(name) != name {
		return fi, false
	}
	body := strings.TrimSuffix(name, suffix)
	var err error
	switch {
	case strings.HasPrefix(body, timelinePrefix):
		fi.from, err = time.Parse(stampLayout, strings.TrimPrefix(body, timelinePrefix))
	case strings.HasPrefix(body, tracePrefix):
		fi.trace = true
		fi.from, err = time.Parse(stampLayout, strings.TrimPrefix(body, tracePrefix))
	case strings.HasPrefix(body, evidencePrefix):
		fi.evidence = true
		a, b, ok := strings.Cut(strings.TrimPrefix(body, evidencePrefix), "_")
		if !ok {
			return fi, false
		}
		if fi.from, err = time.Parse(stampLayout, a); err == nil {
			fi.to, err = time.Parse(stampLayout, b)
		}
		if err == nil && !fi.to.After(fi.from) {
			err = fmt.Errorf("window ends before it starts")
		}
	default:
		return fi, false
	}
	return fi, err == nil
}
