// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestRulePagesLinkCases: a rule page that names a case (C1-C5) links its
// section of cases.md, and every such link leads to a heading there.
func TestRulePagesLinkCases(t *testing.T) {
	cases, err := os.ReadFile("cases.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, l := range strings.Split(string(cases), "\n") {
		if h, ok := strings.CutPrefix(l, "## "); ok {
			s := regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(strings.ToLower(h), "")
			anchors[strings.ReplaceAll(s, " ", "-")] = true
		}
	}
	if len(anchors) != 5 {
		t.Fatalf("cases.md has %d case headings, want 5", len(anchors))
	}
	pages, err := rules.ReadDir("rules")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		b, err := rules.ReadFile("rules/" + p.Name())
		if err != nil {
			t.Fatal(err)
		}
		named := regexp.MustCompile(`\bC[1-5]\b`).FindAllString(string(b), -1)
		for _, c := range named {
			if !strings.Contains(string(b), "["+c+"](../cases.md#") {
				t.Errorf("%s names %s but does not link it in cases.md", p.Name(), c)
			}
		}
		for _, m := range regexp.MustCompile(`\(\.\./cases\.md#([^)]+)\)`).FindAllStringSubmatch(string(b), -1) {
			if !anchors[m[1]] {
				t.Errorf("%s links cases.md#%s, which is no heading there", p.Name(), m[1])
			}
		}
	}
}
