// SPDX-License-Identifier: Apache-2.0

package history

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
)

// portFinding is a finding about endpoints owned by pid (0: no owner).
func portFinding(rule string, sev diag.Severity, pid int) diag.Finding {
	s := diag.Subject{Netns: "a", Local: diag.MustParseAddress("127.0.0.1"), Remote: diag.MustParseAddress("127.0.0.2:9090"), Pid: pid}
	if pid != 0 {
		s.Command = "client"
	}
	return diag.Finding{Rule: rule, Severity: sev, Subject: s, Summary: rule}
}

// A finding about endpoints stays one incident when its owner exits (its
// TIME_WAIT sockets belong to no process), and a finding about the
// sockets it left names it.
func TestIncidentKeepsItsOwner(t *testing.T) {
	pe := func(pid int) diag.Finding { return portFinding("port-exhaustion", diag.Critical, pid) }
	tw := portFinding("time-wait-churn", diag.Critical, 0)
	es := []Entry{entry(15, "", pe(42)), entry(30, "", pe(42)), entry(45, "", pe(0), tw), entry(60, "", tw), entry(75, "")}
	got := Incidents(es, Filter{Min: diag.Warning}, at("a", 80).Taken)
	if len(got) != 2 {
		t.Fatalf("%d incidents, want 2 (one per rule): %+v", len(got), got)
	}
	for _, in := range got {
		if in.Subject.Pid != 42 || in.Subject.Command != "client" {
			t.Errorf("%s: subject %+v, want client pid 42", in.Rule, in.Subject)
		}
	}
	if got[0].Windows != 3 || got[1].Windows != 2 {
		t.Errorf("windows %d, %d; want 3, 2", got[0].Windows, got[1].Windows)
	}
	// An owner seen long before is not carried over a gap.
	late := []Entry{entry(15, "", pe(42)), entry(300, "", tw)}
	if got := Incidents(late, Filter{Min: diag.Warning}, at("a", 310).Taken); len(got) != 2 || got[1].Subject.Pid != 0 {
		t.Errorf("after a gap: %+v", got)
	}
	// A finding about a process alone is still one per process.
	p := func(pid int) diag.Finding {
		return diag.Finding{Rule: "fd-exhaustion", Severity: diag.Warning, Subject: diag.Subject{Netns: "a", Pid: pid, Command: "x"}}
	}
	if got := Incidents([]Entry{entry(15, "", p(1)), entry(30, "", p(2))}, Filter{Min: diag.Warning}, at("a", 40).Taken); len(got) != 2 {
		t.Errorf("two processes: %d incidents", len(got))
	}
}

// writeStore writes es as one timeline segment of dir, and an (empty)
// evidence file for each entry naming one.
func writeStore(t *testing.T, dir string, es []Entry) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, timelineName(es[0].To)))
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	enc := json.NewEncoder(gz)
	_ = enc.Encode(jsonl.Header{Format: FormatName, Version: FormatVersion})
	for i := range es {
		_ = enc.Encode(&es[i])
		if es[i].Evidence != "" {
			if err := os.WriteFile(filepath.Join(dir, es[i].Evidence), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// IncidentsAt answers any time an incident covers with its kept evidence
// nearest that time, most severe incidents first.
func TestIncidentsAt(t *testing.T) {
	dir := t.TempDir()
	ev := func(sec int) string { return evidenceName(at("a", sec-15).Taken, at("a", sec).Taken) }
	w, c := finding("a", diag.Warning, "w"), finding("a", diag.Critical, "c")
	other := portFinding("port-exhaustion", diag.Warning, 7)
	es := []Entry{
		entry(15, ev(15), w), entry(30, "", c, other), entry(45, "", c, other), entry(60, ev(60), c, other),
		entry(75, "", c, other), entry(90, "", c), entry(105, "", c), entry(120, ""), entry(135, ev(135), w),
	}
	writeStore(t, dir, es)
	ms, _, err := At(dir, at("a", 68).Taken, Filter{Min: diag.Warning})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("%d incidents at 68 s, want 2: %+v", len(ms), ms)
	}
	m := ms[0]
	if m.Rule != "listen-overflow" || m.Severity != diag.Critical || m.Nearest == nil || m.Nearest.Name != ev(60) {
		t.Errorf("first: %+v nearest %+v", m.Incident, m.Nearest)
	}
	if !m.Start.Equal(at("a", 0).Taken) || !m.End.Equal(at("a", 105).Taken) || m.Windows != 7 {
		t.Errorf("span %s .. %s, %d windows", m.Start, m.End, m.Windows)
	}
	if ms[1].Rule != "port-exhaustion" || ms[1].Nearest == nil || ms[1].Nearest.Name != ev(60) {
		t.Errorf("second: %+v", ms[1])
	}
	// At 100 s the nearest of the incident's evidence is the one at 60 s
	// (135 s belongs to the next incident).
	ms, _, _ = At(dir, at("a", 100).Taken, Filter{Min: diag.Warning})
	if len(ms) != 1 || ms[0].Nearest == nil || ms[0].Nearest.Name != ev(60) {
		t.Errorf("at 100 s: %+v", ms)
	}
	// Between incidents: none.
	if ms, _, _ = At(dir, at("a", 118).Taken, Filter{Min: diag.Warning}); len(ms) != 0 {
		t.Errorf("at 118 s: %+v", ms)
	}
	// An evicted evidence file is not offered.
	if err := os.Remove(filepath.Join(dir, ev(60))); err != nil {
		t.Fatal(err)
	}
	ms, _, _ = At(dir, at("a", 100).Taken, Filter{Min: diag.Warning})
	if len(ms) != 1 || ms[0].Nearest == nil || ms[0].Nearest.Name != ev(15) {
		t.Errorf("at 100 s after eviction: %+v", ms)
	}
}

// A Grouper with Max holds and lists the newest incidents, counting the
// others; an open one is never dropped.
func TestGrouperMax(t *testing.T) {
	w := finding("a", diag.Warning, "w")
	g := NewGrouper(Filter{Min: diag.Warning})
	g.Max = 2
	for i := range 10 {
		g.Add(ptr(entry(15+30*i, "", w)))
		g.Add(ptr(entry(30+30*i, "")))
	}
	g.Add(ptr(entry(315, "", w)))
	got := g.Incidents(at("a", 320).Taken)
	if len(got) != 2 || g.Dropped != 9 || !got[1].Ongoing || !got[0].Start.Equal(at("a", 270).Taken) {
		t.Errorf("%d incidents, %d dropped: %+v", len(got), g.Dropped, got)
	}
}

func ptr[T any](v T) *T { return &v }
