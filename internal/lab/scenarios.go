// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// Scenarios returns every scenario in a fixed order; names are stable.
func Scenarios() []Scenario {
	return []Scenario{
		// One line per scenario, in catalogue order; keep this list explicit.
		c1RPCConnections(),
		c2AcceptBacklog(),
		c2PortExhaustion(),
		c2AppCap(),
		c3PinnedSndbuf(),
		c4TimeWait(),
		c5SmallRcvbuf(),
		healthyScenario(),
	}
}

// ByName returns the named scenario.
func ByName(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Execute runs one scenario and fills the fields every result shares.
func Execute(ctx context.Context, s Scenario, o Options) (*Result, error) {
	start := time.Now()
	res, err := s.Run(ctx, o)
	if res == nil {
		res = &Result{}
	}
	res.Scenario, res.Case, res.Title, res.Expected = s.Name, s.Case, s.Title, s.Expect
	res.Elapsed = time.Since(start)
	if err != nil {
		res.Reproduced = false
		res.Verdict = append(res.Verdict, "error: "+err.Error())
	}
	return res, err
}

// Judge sets the verdict from the findings before and after the fix and
// the scenario's own measure of improvement: reproduced means at least
// one expected rule fired before, none fired after, and the fix helped.
func Judge(res *Result, expect []string, improved bool, how string) {
	before := FiredOn(res.Before, expect...)
	after := FiredOn(res.After, expect...)
	res.Reproduced = len(before) > 0 && len(after) == 0 && improved
	switch {
	case len(before) == 0:
		res.Verdict = append(res.Verdict, fmt.Sprintf("NOT reproduced: none of %s fired before the fix", strings.Join(expect, ", ")))
	default:
		ids := map[string]bool{}
		var names []string
		for _, f := range before {
			if !ids[f.Rule] {
				ids[f.Rule] = true
				names = append(names, f.Rule)
			}
		}
		res.Verdict = append(res.Verdict, fmt.Sprintf("before the fix: %s fired (%s)", strings.Join(names, ", "), before[0].Summary))
	}
	if len(after) > 0 {
		res.Verdict = append(res.Verdict, fmt.Sprintf("NOT fixed: %s still fires after the fix: %s", after[0].Rule, after[0].Summary))
	} else if len(before) > 0 {
		res.Verdict = append(res.Verdict, "after the fix: quiet")
	}
	if improved {
		res.Verdict = append(res.Verdict, "the fix helped: "+how)
	} else {
		res.Verdict = append(res.Verdict, "NOT improved: "+how)
	}
}

// WriteText prints a result for people.
func WriteText(w io.Writer, r *Result) {
	fmt.Fprintf(w, "== %s (%s): %s\n\n", r.Scenario, r.Case, r.Title)
	if len(r.Table.Columns) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(r.Table.Columns, "\t"))
		for _, row := range r.Table.Rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	printFindings := func(label string, fs []diag.Finding) {
		fmt.Fprintf(w, "findings %s:\n", label)
		n := 0
		for _, f := range fs {
			if f.Severity < diag.Warning {
				continue
			}
			n++
			fmt.Fprintf(w, "  %s %s: %s\n", f.Severity.Label(), f.Rule, f.Summary)
		}
		if n == 0 {
			fmt.Fprintln(w, "  none at warning or above")
		}
	}
	printFindings("before the fix", r.Before)
	printFindings("after the fix", r.After)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	word := "NOT REPRODUCED"
	if r.Reproduced {
		word = "REPRODUCED"
	}
	fmt.Fprintf(w, "verdict: %s (%s)\n", word, r.Elapsed.Round(100*time.Millisecond))
	for _, v := range r.Verdict {
		fmt.Fprintf(w, "  - %s\n", v)
	}
	fmt.Fprintln(w)
}
