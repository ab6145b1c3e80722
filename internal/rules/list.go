// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// IDs is every rule's id, in All's order.
func IDs() []string {
	var ids []string
	for _, r := range All() {
		ids = append(ids, r.ID)
	}
	return ids
}

// Select is the rules ids name, in that order; every rule for none. An
// id that names no rule is an error that says where to find the ids.
func Select(ids []string) ([]diag.Rule, error) {
	if len(ids) == 0 {
		return All(), nil
	}
	var rs []diag.Rule
	for _, id := range ids {
		r, ok := ByID(id)
		if !ok {
			return nil, fmt.Errorf("unknown rule %q (see tcpdoctor rules)", id)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// WriteList prints the rules as a table: id, whether it needs a window
// of two samples, title.
func WriteList(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tNEEDS WINDOW\tTITLE")
	for _, r := range All() {
		win := "no"
		if r.NeedsDelta {
			win = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, win, r.Title)
	}
	return tw.Flush()
}
