// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBothBinaries: the pages and completions of tcpdoctor and of
// tcpdoctor-lab, none for PowerShell, none for a hidden command.
func TestBothBinaries(t *testing.T) {
	out := t.TempDir()
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if err := run([]string{"-version", "v9.8.7-test", "-out", out}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		"man/man1/tcpdoctor.1", "man/man1/tcpdoctor-check.1",
		"man/man1/tcpdoctor-lab.1", "man/man1/tcpdoctor-lab-run.1", "man/man1/tcpdoctor-lab-link-bench.1",
		"completions/tcpdoctor.bash", "completions/_tcpdoctor", "completions/tcpdoctor.fish",
		"completions/tcpdoctor-lab.bash", "completions/_tcpdoctor-lab", "completions/tcpdoctor-lab.fish",
	} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		name := "tcpdoctor"
		if strings.Contains(f, "tcpdoctor-lab") {
			name = "tcpdoctor-lab"
		}
		if !strings.Contains(string(b), name) {
			t.Errorf("%s does not name %s", f, name)
		}
	}
	pages, err := filepath.Glob(filepath.Join(out, "man", "man1", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		base := filepath.Base(p)
		for _, bad := range []string{"powershell", "delay-line", "traffic", "hold", "collect-once"} {
			if strings.Contains(base, bad) {
				t.Errorf("page %s: no page for %s", base, bad)
			}
		}
	}
}
