// SPDX-License-Identifier: Apache-2.0

package corpus

import (
	"fmt"
	"io"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// Row is one case of the corpus, judged.
type Row struct {
	Name     string
	Software string   // what the software does, in a sentence
	Measured []string // workload figures measured outside tcpdoctor
	Want     []Expect
	Got      []Finding // every finding of every namespace checked
	Exit     []int     // check's exit code per namespace
	Outcome  Outcome
	// Skipped is the reason the case did not run, if it did not.
	Skipped string
}

// gotText lists findings at warning or above and, below that, those of
// rules the case names.
func gotText(r Row) string {
	var parts []string
	for _, f := range r.Got {
		if f.Severity >= diag.Warning || named(r.Want, f.Rule) {
			parts = append(parts, Describe(f))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing at warning or above")
	}
	codes := make([]string, len(r.Exit))
	for i, c := range r.Exit {
		codes[i] = fmt.Sprint(c)
	}
	return strings.Join(parts, "; ") + " (exit " + strings.Join(codes, ", ") + ")"
}

func named(want []Expect, rule string) bool {
	for _, e := range want {
		if e.ruleMatches(rule) {
			return true
		}
	}
	return false
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// Totals counts the rows that ran, passed, raised false alarms and missed.
func Totals(rows []Row) (ran, pass, falseAlarms, misses int) {
	for _, r := range rows {
		if r.Skipped != "" {
			continue
		}
		ran++
		if r.Outcome.Pass() {
			pass++
		}
		if len(r.Outcome.FalseAlarms) > 0 {
			falseAlarms++
		}
		if len(r.Outcome.Misses) > 0 {
			misses++
		}
	}
	return
}

// WriteMarkdown writes the accuracy table and its totals. header is put
// above the table as is.
func WriteMarkdown(w io.Writer, header string, rows []Row) error {
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("\n| # | scenario | what the software does | measured | expected | got | result |\n|---|---|---|---|---|---|---|\n")
	for i, r := range rows {
		got, result := gotText(r), r.Outcome.Verdict()
		if r.Skipped != "" {
			got, result = "skipped: "+r.Skipped, "not run"
		}
		var detail []string
		for _, f := range r.Outcome.FalseAlarms {
			detail = append(detail, "false alarm: "+f)
		}
		for _, m := range r.Outcome.Misses {
			detail = append(detail, "miss: "+m)
		}
		detail = append(detail, r.Outcome.Notes...)
		if len(detail) > 0 {
			result += "<br>" + strings.Join(detail, "<br>")
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s |\n", i+1, cell(r.Name), cell(r.Software),
			cell(strings.Join(r.Measured, "<br>")), cell(ExpectedText(r.Want)), cell(got), cell(result))
	}
	ran, pass, fa, miss := Totals(rows)
	fmt.Fprintf(&b, "\n**Totals:** %d of %d cases ran; %d pass; false alarms in %d (goal 0); misses in %d (goal 0).\n", ran, len(rows), pass, fa, miss)
	_, err := io.WriteString(w, b.String())
	return err
}
