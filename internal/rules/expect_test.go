// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// expectFile is testdata/<rule>/expect.json: what the fixtures must give,
// written by hand from the fixture data (not from the rule's output, as
// fires.golden.json is), so a rule change that moves a number or a
// severity fails here even after -update. -update never writes it.
type expectFile struct {
	// Fires lists findings the fires fixture must give. Every one must
	// match a distinct finding; the findings at warning or above must be
	// exactly these.
	Fires []expectFinding `json:"fires"`
	// QuietBecause says, in a sentence, why the quiet fixture is quiet.
	QuietBecause string `json:"quiet_because"`
	// Quiet lists the findings (below warning) the quiet fixture gives;
	// it must give exactly these.
	Quiet []expectFinding `json:"quiet,omitempty"`
}

// expectFinding is one finding: rule, severity and subject exactly (an
// omitted subject field must be empty), and substrings of the summary and
// of evidence values by evidence name.
type expectFinding struct {
	Rule     string                `json:"rule"`
	Severity diag.Severity         `json:"severity"`
	Subject  diag.Subject          `json:"subject"`
	Summary  substrings            `json:"summary,omitempty"`
	Evidence map[string]substrings `json:"evidence,omitempty"`
}

// substrings is one string or a list of them in expect.json.
type substrings []string

func (s *substrings) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = substrings{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a string or a list of strings: %s", b)
	}
	*s = many
	return nil
}

func loadExpect(path string) (*expectFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e expectFile
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &e, nil
}

// mismatch says why f does not match e, "" when it does.
func (e *expectFinding) mismatch(f *diag.Finding) string {
	var why []string
	if f.Rule != e.Rule {
		why = append(why, fmt.Sprintf("rule %q", f.Rule))
	}
	if f.Severity != e.Severity {
		why = append(why, "severity "+f.Severity.String())
	}
	// As JSON: an omitted field and an empty one are the same.
	got, _ := json.Marshal(f.Subject)
	want, _ := json.Marshal(e.Subject)
	if !bytes.Equal(got, want) {
		why = append(why, "subject "+string(got))
	}
	for _, sub := range e.Summary {
		if !strings.Contains(f.Summary, sub) {
			why = append(why, fmt.Sprintf("summary lacks %q", sub))
		}
	}
	for name, subs := range e.Evidence {
		var vals []string
		for _, ev := range f.Evidence {
			if ev.Name == name {
				vals = append(vals, ev.Value)
			}
		}
		if len(vals) == 0 {
			why = append(why, fmt.Sprintf("no evidence %q", name))
			continue
		}
		for _, sub := range subs {
			found := false
			for _, v := range vals {
				found = found || strings.Contains(v, sub)
			}
			if !found {
				why = append(why, fmt.Sprintf("evidence %q = %q lacks %q", name, strings.Join(vals, " | "), sub))
			}
		}
	}
	return strings.Join(why, "; ")
}

// checkExpected matches every expected finding to a distinct finding of
// res and reports the ones not found, with why the nearest candidate
// (same rule and severity first) does not match.
func checkExpected(t *testing.T, what string, want []expectFinding, res diag.Result) {
	t.Helper()
	used := make([]bool, len(res.Findings))
	for i := range want {
		e := &want[i]
		best, bestWhy := -1, ""
		for j := range res.Findings {
			if used[j] {
				continue
			}
			why := e.mismatch(&res.Findings[j])
			if why == "" {
				best, bestWhy = j, ""
				break
			}
			if best < 0 || res.Findings[j].Severity == e.Severity && res.Findings[best].Severity != e.Severity {
				best, bestWhy = j, why
			}
		}
		switch {
		case best >= 0 && bestWhy == "":
			used[best] = true
		case best >= 0:
			t.Errorf("%s: expected finding %d (%s %+v) not found; nearest: %s", what, i, e.Severity, e.Subject, bestWhy)
		default:
			t.Errorf("%s: expected finding %d (%s %+v) not found: no findings left", what, i, e.Severity, e.Subject)
		}
	}
}

func countAtLeast(fs []diag.Finding, sev diag.Severity) int {
	n := 0
	for _, f := range fs {
		if f.Severity >= sev {
			n++
		}
	}
	return n
}

func TestExpectations(t *testing.T) {
	for _, r := range All() {
		t.Run(r.ID, func(t *testing.T) {
			dir := filepath.Join("testdata", r.ID)
			e, err := loadExpect(filepath.Join(dir, "expect.json"))
			if err != nil {
				t.Fatalf("every rule needs a hand-written expect.json: %v", err)
			}
			if strings.TrimSpace(e.QuietBecause) == "" {
				t.Error("expect.json: quiet_because is empty: say why the quiet fixture is quiet")
			}
			if len(e.Fires) == 0 {
				t.Error("expect.json: no fires findings")
			}
			for i, f := range e.Fires {
				if f.Rule != r.ID {
					t.Errorf("expect.json: fires[%d].rule %q, want %q", i, f.Rule, r.ID)
				}
			}
			for i, f := range e.Quiet {
				if f.Severity >= diag.Warning {
					t.Errorf("expect.json: quiet[%d] is %s: a quiet fixture gives nothing at warning or above", i, f.Severity)
				}
			}

			fires := runFixture(t, r, filepath.Join(dir, "fires.jsonl"))
			checkExpected(t, "fires", e.Fires, fires)
			if got, want := countAtLeast(fires.Findings, diag.Warning), countAtLeast(expectAsFindings(e.Fires), diag.Warning); got != want {
				t.Errorf("fires: %d findings at warning or above, expect.json lists %d: %s", got, want, summaries(fires.Findings))
			}

			quiet := runFixture(t, r, filepath.Join(dir, "quiet.jsonl"))
			checkExpected(t, "quiet", e.Quiet, quiet)
			if len(quiet.Findings) != len(e.Quiet) {
				t.Errorf("quiet: %d findings, expect.json lists %d (quiet_because: %s): %s", len(quiet.Findings), len(e.Quiet), e.QuietBecause, summaries(quiet.Findings))
			}
		})
	}
}

func expectAsFindings(es []expectFinding) []diag.Finding {
	fs := make([]diag.Finding, len(es))
	for i, e := range es {
		fs[i] = diag.Finding{Severity: e.Severity}
	}
	return fs
}

func summaries(fs []diag.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "\n  %s %s", f.Severity, f.Summary)
	}
	return b.String()
}
