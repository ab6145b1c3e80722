// SPDX-License-Identifier: Apache-2.0

package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// logs collects a Recorder's log lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, a...))
}

func (l *logs) n() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func readFile(t *testing.T, path string) []*snapshot.Snapshot {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := snapshot.ReadAll(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return snaps
}

// collections splits a recording into collections: the i-th sample of
// every namespace together, as serve's loop takes them.
func collections(snaps []*snapshot.Snapshot) [][]*snapshot.Snapshot {
	n := map[string]int{}
	var out [][]*snapshot.Snapshot
	for _, s := range snaps {
		i := n[s.Netns.Name]
		n[s.Netns.Name]++
		if i == len(out) {
			out = append(out, nil)
		}
		out[i] = append(out[i], s)
	}
	return out
}

// findingsJSON is the findings as check --json prints them.
func findingsJSON(t *testing.T, fs []diag.Finding) string {
	t.Helper()
	b, err := json.MarshalIndent(fs, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every rule's firing fixture, served through the exporter as serve's
// loop does, leaves evidence whose replay (as check --from reads a file)
// gives the very findings serve saw, and a timeline that lists them.
func TestEvidenceReplaysServesFindings(t *testing.T) {
	fixtures, _ := filepath.Glob("../rules/testdata/*/fires.jsonl")
	if len(fixtures) < 10 {
		t.Fatalf("found %d fixtures", len(fixtures))
	}
	for _, fx := range fixtures {
		t.Run(filepath.Base(filepath.Dir(fx)), func(t *testing.T) {
			dir := t.TempDir()
			x := report.NewWindows(window.NewChain(rules.All()), rules.All(), diag.Options{})
			r := New(Options{Dir: dir, Tool: "test"})
			var served *report.Report
			cols := collections(readFile(t, fx))
			for _, col := range cols {
				rep := x.Report(col)
				r.Add(col, rep)
				if rep != nil {
					served = rep
				}
			}
			r.Close()
			if r.Errors() != 0 {
				t.Fatalf("%d write errors", r.Errors())
			}
			if served == nil || len(served.Findings) == 0 {
				t.Skip("the fixture needs more than the exporter's windows")
			}
			var warn bool
			for _, f := range served.Findings {
				warn = warn || f.Severity >= diag.Warning
			}
			st, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			ev := st.Evidence()
			if !warn {
				if len(ev) != 0 {
					t.Fatalf("evidence kept for findings below warning: %v", ev)
				}
				return
			}
			last := cols[len(cols)-1][0].Taken
			cover, _, _ := st.At(last)
			if cover == nil {
				t.Fatalf("no evidence covers %s: %v", last, ev)
			}
			ss := seriesOf(readFile(t, st.Path(cover.Name)))
			replayed := report.Diagnose(window.Inputs(ss, diag.Options{}), rules.All())
			if got, want := findingsJSON(t, replayed.Findings), findingsJSON(t, served.Findings); got != want {
				t.Errorf("replayed findings differ from served:\n%s\nserved:\n%s", got, want)
			}
			es, err := st.Entries(time.Time{}, time.Time{})
			if err != nil || len(st.Notes) > 0 {
				t.Fatalf("%v %v", err, st.Notes)
			}
			var n int
			for _, e := range es {
				n += len(e.Findings)
			}
			if n != len(served.Findings) || es[len(es)-1].Evidence != cover.Name {
				t.Errorf("timeline holds %d findings (served %d), evidence %q", n, len(served.Findings), es[len(es)-1].Evidence)
			}
		})
	}
}

func seriesOf(snaps []*snapshot.Snapshot) []window.Series {
	var ss []window.Series
	idx := map[string]int{}
	for _, s := range snaps {
		i, ok := idx[s.Netns.Name]
		if !ok {
			i = len(ss)
			idx[s.Netns.Name] = i
			ss = append(ss, window.Series{Netns: s.Netns.Name})
		}
		ss[i].Snaps = append(ss[i].Snaps, s)
	}
	return ss
}

// at is a sample of namespace ns at second sec.
func at(ns string, sec int) *snapshot.Snapshot {
	return &snapshot.Snapshot{Netns: snapshot.Netns{Name: ns, Inode: 1}, Taken: time.Unix(1_700_000_000+int64(sec), 0).UTC(), Host: "h"}
}

func finding(ns string, sev diag.Severity, summary string) diag.Finding {
	return diag.Finding{Rule: "listen-overflow", Severity: sev, Subject: diag.Subject{Netns: ns, Local: diag.MustParseAddress("0.0.0.0:80")}, Summary: summary}
}

// Evidence is kept when a finding at warning or above starts, worsens, or
// has gone EvidenceEvery without; not for info, nor every window.
func TestEvidenceWhenItStartsWorsensOrPersists(t *testing.T) {
	dir := t.TempDir()
	r := New(Options{Dir: dir, EvidenceEvery: time.Minute})
	steps := []struct {
		fs   []diag.Finding
		keep bool
		why  string
	}{
		{nil, false, "first sample: no window"},
		{[]diag.Finding{finding("a", diag.Info, "i")}, false, "info"},
		{[]diag.Finding{finding("a", diag.Warning, "w")}, true, "starts"},
		{[]diag.Finding{finding("a", diag.Warning, "w")}, false, "persists 15s"},
		{[]diag.Finding{finding("a", diag.Critical, "c")}, true, "worsens"},
		{[]diag.Finding{finding("a", diag.Warning, "w")}, false, "eases"},
		{[]diag.Finding{finding("a", diag.Warning, "w")}, false, "persists 45s"},
		{[]diag.Finding{finding("a", diag.Warning, "w")}, false, "persists 60s from the last evidence, 45s"},
		{[]diag.Finding{finding("a", diag.Warning, "w")}, true, "persists 60s"},
		{nil, false, "ends"},
		{[]diag.Finding{finding("a", diag.Warning, "w")}, false, "starts again 30s after its evidence: flapping"},
		{nil, false, "ends"},
		{nil, false, "ends"},
		{[]diag.Finding{finding("a", diag.Warning, "w")}, true, "starts again 75s after its evidence"},
	}
	for i, s := range steps {
		before := len(evidenceFiles(t, r, dir))
		r.Add([]*snapshot.Snapshot{at("a", 15*i)}, &report.Report{Findings: s.fs})
		got := len(evidenceFiles(t, r, dir)) - before
		if got != map[bool]int{true: 1}[s.keep] {
			t.Errorf("step %d (%s): %d evidence files written", i, s.why, got)
		}
	}
	r.Close()
}

// A finding that goes on has its window kept less often than
// EvidenceEvery when its evidence is large against the store's bounds:
// every size / (MaxBytes / MaxAge).
func TestEvidencePace(t *testing.T) {
	dir := t.TempDir()
	big := at("a", 0)
	for i := range 300 {
		big.Sockets = append(big.Sockets, snapshot.Socket{Family: 2, State: snapshot.Listen, Cookie: uint64(i), Inode: uint32(i * 7919)})
	}
	// Each file is a few KB; a 1 MB store over 30 days holds about 33 KB
	// a day: one a few hours.
	r := New(Options{Dir: dir, MaxBytes: 1 << 20, MaxAge: 30 * 24 * time.Hour, EvidenceEvery: time.Minute})
	var kept []int
	for i := range 24 * 60 { // a day of minutes
		s := *big
		s.Taken = time.Unix(1_700_000_000+int64(60*i), 0)
		before := len(evidenceFiles(t, r, dir))
		r.Add([]*snapshot.Snapshot{&s}, &report.Report{Findings: []diag.Finding{finding("a", diag.Warning, "w")}})
		if len(evidenceFiles(t, r, dir)) > before {
			kept = append(kept, i)
		}
	}
	r.Close()
	size := r.lastEvidence.Load()
	wantGap := time.Duration(float64(size) / float64(1<<20) * float64(30*24*time.Hour))
	if len(kept) < 3 || wantGap < time.Hour {
		t.Fatalf("kept at minutes %v; file %d bytes, pace %s", kept, size, wantGap)
	}
	for i := 2; i < len(kept); i++ {
		gap := time.Duration(kept[i]-kept[i-1]) * time.Minute
		if gap < wantGap-time.Minute || gap > wantGap+time.Minute {
			t.Errorf("evidence %d minutes after the previous, want every %s (%d bytes a file)", kept[i]-kept[i-1], wantGap, size)
		}
	}
}

// evidenceFiles waits for r's writer to finish what is queued, then
// lists the evidence files.
func evidenceFiles(t *testing.T, r *Recorder, dir string) []string {
	t.Helper()
	r.Sync()
	m, _ := filepath.Glob(filepath.Join(dir, "evidence-*"))
	return m
}

// record writes n windows of namespace "a", a warning in each, and
// closes the Recorder unless open.
func record(t *testing.T, dir string, n int, open bool) *Recorder {
	t.Helper()
	r := New(Options{Dir: dir, EvidenceEvery: time.Hour})
	for i := range n + 1 {
		r.Add([]*snapshot.Snapshot{at("a", 15*i)}, &report.Report{Findings: []diag.Finding{finding("a", diag.Warning, "w")}})
		evidenceFiles(t, r, dir)
	}
	if !open {
		r.Close()
	}
	return r
}

func segment(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "timeline-*"))
	if len(m) != 1 {
		t.Fatalf("%d segments", len(m))
	}
	return m[0]
}

func readAll(t *testing.T, b []byte) ([]Entry, error) {
	t.Helper()
	var es []Entry
	err := ReadSegment(bytes.NewReader(b), func(e *Entry) error { es = append(es, *e); return nil })
	return es, err
}

// A segment cut anywhere (a writer killed, power lost) or damaged gives
// the entries before the cut or damage, and says where, never more and
// never a panic; one left open after whole lines reads without a note.
func TestTornAndCorruptSegments(t *testing.T) {
	dir := t.TempDir()
	r := record(t, dir, 20, true)
	open, err := os.ReadFile(segment(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	es, err := readAll(t, open)
	if err != nil || len(es) != 20 {
		t.Fatalf("an open segment: %d entries, %v", len(es), err)
	}
	r.Close()
	whole, _ := os.ReadFile(segment(t, dir))
	if es, err := readAll(t, whole); err != nil || len(es) != 20 {
		t.Fatalf("a closed segment: %d entries, %v", len(es), err)
	}
	prevN := 20
	for cut := len(whole) - 1; cut > 0; cut -= 7 {
		es, err := readAll(t, whole[:cut])
		if len(es) > prevN {
			t.Fatalf("cut at %d: %d entries, more than a longer cut", cut, len(es))
		}
		prevN = len(es)
		if err == nil && cut < len(open)-20 && len(es) == 20 {
			t.Errorf("cut at %d of %d: all entries and no error", cut, len(whole))
		}
		for i, e := range es {
			if e.To != at("a", 15*(i+1)).Taken {
				t.Fatalf("cut at %d: entry %d is %v", cut, i, e.To)
			}
		}
	}
	for _, off := range []int{len(whole) / 3, len(whole) / 2, len(whole) - 12} {
		bad := slices.Clone(whole)
		bad[off] ^= 0x55
		es, err := readAll(t, bad)
		if err == nil {
			t.Errorf("a byte flipped at %d of %d: no error (%d entries)", off, len(whole), len(es))
		}
	}
	// Store.Entries keeps the entries before the damage and notes it.
	bad := slices.Clone(whole)
	bad[len(whole)/2] ^= 0x55
	if err := os.WriteFile(segment(t, dir), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	st, _ := Open(dir)
	es, err = st.Entries(time.Time{}, time.Time{})
	if err != nil || len(es) >= 20 || len(st.Notes) != 1 || !strings.Contains(st.Notes[0], "skipped the rest") {
		t.Errorf("damaged segment: %d entries, %v, notes %q", len(es), err, st.Notes)
	}
}

// The store stays within its size, oldest files going first, and drops
// files older than its age.
func TestEviction(t *testing.T) {
	dir := t.TempDir()
	const limit = 64 << 10
	// MaxAge a minute: the pace of evidence (size / (MaxBytes / MaxAge))
	// stays below a window.
	r := New(Options{Dir: dir, MaxBytes: limit, MaxAge: time.Minute, EvidenceEvery: time.Nanosecond})
	big := at("a", 0)
	for i := range 300 {
		big.Sockets = append(big.Sockets, snapshot.Socket{Family: 2, State: snapshot.Listen, Cookie: uint64(i), Inode: uint32(i * 7919)})
	}
	var first string
	for i := range 40 {
		s := *big
		s.Taken = at("a", 15*i).Taken
		r.Add([]*snapshot.Snapshot{&s}, &report.Report{Findings: []diag.Finding{finding("a", diag.Warning, "w")}})
		fs := evidenceFiles(t, r, dir)
		if i == 1 {
			first = filepath.Base(fs[0])
		}
	}
	r.Close()
	fs, _ := listFiles(dir)
	var total int64
	for _, f := range fs {
		total += f.size
		if f.name == first {
			t.Errorf("the oldest evidence %s is still there", first)
		}
	}
	if total > limit || len(fs) < 3 {
		t.Errorf("%d files, %d bytes; limit %d", len(fs), total, limit)
	}
	// Age: everything last written 8 days ago goes.
	old := time.Now().Add(-8 * 24 * time.Hour)
	for _, f := range fs {
		_ = os.Chtimes(filepath.Join(dir, f.name), old, old)
	}
	New(Options{Dir: dir, MaxAge: 7 * 24 * time.Hour}).Close()
	if fs, _ := listFiles(dir); len(fs) != 0 {
		t.Errorf("%d files older than the age left", len(fs))
	}
}

// A directory that cannot be written is said once and counted for every
// window, and writing resumes (said again) once it can.
func TestUnwritableDirectory(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	if err := os.WriteFile(dir, nil, 0o600); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	var l logs
	r := New(Options{Dir: dir, Logf: l.logf})
	for i := range 5 {
		r.Add([]*snapshot.Snapshot{at("a", 15*i)}, &report.Report{Findings: []diag.Finding{finding("a", diag.Warning, "w")}})
		evidenceFiles(t, r, dir)
	}
	if r.Errors() < 4 || l.n() != 1 {
		t.Fatalf("%d errors, %d log lines: %q", r.Errors(), l.n(), l.lines)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	r.Add([]*snapshot.Snapshot{at("a", 100)}, &report.Report{})
	r.Close()
	if l.n() != 2 || !strings.Contains(l.lines[1], "again") {
		t.Errorf("log %q", l.lines)
	}
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if es, _ := st.Entries(time.Time{}, time.Time{}); len(es) != 1 {
		t.Errorf("%d entries after recovery", len(es))
	}
}

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 27, 9, 30, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-11-27T03:12:00Z":      time.Date(2026, 11, 27, 3, 12, 0, 0, time.UTC),
		"2026-11-27T04:12:00+01:00": time.Date(2026, 11, 27, 3, 12, 0, 0, time.UTC),
		"03:12":                     time.Date(2026, 11, 27, 3, 12, 0, 0, time.UTC),
		"03:12:30":                  time.Date(2026, 11, 27, 3, 12, 30, 0, time.UTC),
		"-30m":                      now.Add(-30 * time.Minute),
		"2h":                        now.Add(-2 * time.Hour),
		"7d":                        now.Add(-7 * 24 * time.Hour),
	} {
		got, err := ParseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "yesterday", "25:00", "-0s", "1x"} {
		if _, err := ParseTime(bad, now); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for in, want := range map[string]int64{"256MiB": 256 << 20, "1GB": 1e9, "500000": 500000, "1.5 GiB": 3 << 29} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("size %q: %d %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "0", "-1MB", "1PB", "MB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("size %q accepted", bad)
		}
	}
}

func entry(sec int, ev string, fs ...diag.Finding) Entry {
	e := Entry{Netns: "a", From: at("a", sec-15).Taken, To: at("a", sec).Taken, Evidence: ev}
	for _, f := range fs {
		e.Findings = append(e.Findings, Finding{Rule: f.Rule, Severity: f.Severity, Subject: f.Subject, Summary: f.Summary})
	}
	return e
}

// Consecutive windows with a finding make one incident: its span, its
// peak and the evidence at the peak; a gap or a window without it ends
// it; one still in the newest window is ongoing.
func TestIncidents(t *testing.T) {
	w, c := finding("a", diag.Warning, "w"), finding("a", diag.Critical, "c")
	es := []Entry{
		entry(15, "e1", w), entry(30, "", c), entry(45, "e3", c), entry(60, "", w), entry(75, ""),
		entry(90, "e6", w), // after a window without it: a second incident
		// serve stopped for 5 minutes: a third
		entry(405, "", w), entry(420, "", w),
	}
	got := Incidents(es, Filter{Min: diag.Warning}, at("a", 430).Taken)
	if len(got) != 3 {
		t.Fatalf("%d incidents: %+v", len(got), got)
	}
	one := got[0]
	if !one.Start.Equal(at("a", 0).Taken) || !one.End.Equal(at("a", 60).Taken) || one.Severity != diag.Critical ||
		one.Summary != "c" || one.Evidence != "e3" || !one.At.Equal(at("a", 45).Taken) || one.Ongoing || one.Windows != 4 {
		t.Errorf("first: %+v", one)
	}
	if got[1].Evidence != "e6" || got[1].Windows != 1 || got[1].Ongoing {
		t.Errorf("second: %+v", got[1])
	}
	if !got[2].Ongoing || got[2].Evidence != "" || !got[2].Start.Equal(at("a", 390).Taken) {
		t.Errorf("third: %+v", got[2])
	}
	if later := Incidents(es, Filter{Min: diag.Warning}, at("a", 600).Taken); later[2].Ongoing {
		t.Error("ongoing 3 minutes after the last window")
	}
	if n := len(Incidents(es, Filter{Min: diag.Critical}, at("a", 430).Taken)); n != 1 {
		t.Errorf("critical only: %d", n)
	}
	if n := len(Incidents(es, Filter{Min: diag.Warning, Netns: "b"}, at("a", 430).Taken)); n != 0 {
		t.Errorf("netns b: %d", n)
	}
	if n := len(Incidents(es, Filter{Min: diag.Warning, Rules: []string{"port-exhaustion"}}, at("a", 430).Taken)); n != 0 {
		t.Errorf("another rule: %d", n)
	}
}

func atSlice(ns string, sec int) []*snapshot.Snapshot { return []*snapshot.Snapshot{at(ns, sec)} }

func reportWith(i int) *report.Report {
	if i%2 == 0 {
		return &report.Report{}
	}
	return &report.Report{Findings: []diag.Finding{finding("a", diag.Warning, "w")}}
}

func globSegments(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "timeline-*"))
}
