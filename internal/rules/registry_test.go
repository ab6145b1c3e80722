// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

var update = flag.Bool("update", false, "rewrite testdata/<rule>/fires.golden.json")

var idRE = regexp.MustCompile(`^[a-z][a-z0-9-]+$`)

func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	all := All()
	for i, r := range all {
		if !idRE.MatchString(r.ID) {
			t.Errorf("rule id %q is not lower-case-with-dashes", r.ID)
		}
		if seen[r.ID] {
			t.Errorf("rule id %q registered twice", r.ID)
		}
		seen[r.ID] = true
		if i > 0 && all[i-1].ID > r.ID {
			t.Errorf("All() not sorted at %q", r.ID)
		}
		if r.Title == "" || r.Check == nil {
			t.Errorf("rule %q lacks a title or a check", r.ID)
		}
		if _, err := os.Stat(filepath.Join("..", "..", "docs", "rules", r.ID+".md")); err != nil {
			t.Errorf("rule %q has no doc page: %v", r.ID, err)
		}
	}
}

// runFixture runs one rule over a snapshot file: with two or more
// snapshots of a netns, the first is the previous sample, the last the current.
func runFixture(t *testing.T, r diag.Rule, path string) diag.Result {
	t.Helper()
	snaps := readSnaps(t, path)
	var prev *snapshot.Snapshot
	if len(snaps) > 1 {
		prev = snaps[0]
	}
	var res diag.Result
	diag.Run([]diag.Rule{r}, keptInput(r, prev, snaps[len(snaps)-1]), &res)
	res.Sort()
	return res
}

func TestFixtures(t *testing.T) {
	for _, r := range All() {
		t.Run(r.ID, func(t *testing.T) {
			dir := filepath.Join("testdata", r.ID)
			fires := runFixture(t, r, filepath.Join(dir, "fires.jsonl"))
			if len(fires.Unknown) > 0 {
				t.Errorf("fires fixture: unknown: %+v", fires.Unknown)
			}
			if fires.Worst() < diag.Warning {
				t.Errorf("fires fixture: no finding at warning or above: %+v", fires.Findings)
			}
			for _, f := range fires.Findings {
				if f.Summary == "" || len(f.Evidence) == 0 || len(f.Fixes) == 0 {
					t.Errorf("finding lacks summary, evidence or fixes: %+v", f)
				}
				for _, e := range f.Evidence {
					if e.Source == "" {
						t.Errorf("evidence %q has no source", e.Name)
					}
				}
			}
			got, err := json.MarshalIndent(fires.Findings, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join(dir, "fires.golden.json")
			if *update {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("golden: %v (run go test ./internal/rules -update)", err)
			}
			if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
				t.Errorf("findings differ from %s (rerun with -update if intended):\n%s", golden, got)
			}

			quiet := runFixture(t, r, filepath.Join(dir, "quiet.jsonl"))
			if len(quiet.Unknown) > 0 {
				t.Errorf("quiet fixture: unknown: %+v", quiet.Unknown)
			}
			if quiet.Worst() >= diag.Warning {
				t.Errorf("quiet fixture fired: %+v", quiet.Findings)
			}
		})
	}
}
