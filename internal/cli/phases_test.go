// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/phases"
)

// TestPhasesTo: --phases-to writes the run's parts even when the command
// ends in findings (exit 1), one after another from main; without it
// nothing is written and the flag stays out of the help.
func TestPhasesTo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "phases.json")
	if code, _, stderr := run(t, "check", "--from", overflowFixture, "--phases-to", path); code != ExitFindings {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	f, err := phases.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	last := f.Main
	for _, s := range f.Spans {
		names = append(names, s.Name)
		if s.Start != last || s.End < s.Start {
			t.Errorf("%s %+v does not follow the part before (ended %d)", s.Name, s, last)
		}
		last = s.End
	}
	if got := strings.Join(names, ", "); got != "setup, samples, --interval apart, rules, report" {
		t.Errorf("parts %q", got)
	}
	if _, out, _ := run(t, "check", "--help"); strings.Contains(out, "phases-to") {
		t.Error("--phases-to shows in the help")
	}
}
