// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
)

// tableOf prints rows through a table.
func tableOf(t *testing.T, rows [][]string) string {
	t.Helper()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	tab := newTable(w)
	for _, r := range rows {
		for _, c := range r {
			tab.row = append(tab.row, c...)
			tab.cell()
		}
		if err := tab.endRow(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tab.flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// Within the look-ahead the table prints what tabwriter prints.
func TestTableLikeTabwriter(t *testing.T) {
	rows := [][]string{{"State", "Local", "Process"}, {"ESTAB", "10.0.0.1:80", "nginx/1"}, {"TIME-WAIT", "[::1]:443", "-"}, {"LISTEN", "*", "日本/7"}}
	var want bytes.Buffer
	tw := tabwriter.NewWriter(&want, 0, 0, 1, ' ', 0)
	for _, r := range rows {
		tw.Write([]byte(strings.Join(r, "\t") + "\n"))
	}
	tw.Flush()
	if got := tableOf(t, rows); got != want.String() {
		t.Errorf("got\n%s\nwant\n%s", got, want.String())
	}
}

// Past the look-ahead, widths stay; a wider cell pushes only as far as
// the next cells' padding absorbs.
func TestTableAfterLookAhead(t *testing.T) {
	rows := [][]string{{"A", "B", "C"}}
	for i := range tableLookAhead - 1 {
		rows = append(rows, []string{"x", strconv.Itoa(i % 10), "z"})
	}
	rows = append(rows, []string{"wide-cell", "1", "z"}, []string{"x", "2", "end"})
	lines := strings.Split(strings.TrimSuffix(tableOf(t, rows), "\n"), "\n")
	if len(lines) != len(rows) {
		t.Fatalf("%d lines for %d rows", len(lines), len(rows))
	}
	if lines[0] != "A B C" || lines[1] != "x 0 z" {
		t.Errorf("sized lines %q %q", lines[0], lines[1])
	}
	if got := lines[len(lines)-2]; got != "wide-cell 1 z" {
		t.Errorf("overflowing row %q", got)
	}
	if got := lines[len(lines)-1]; got != "x 2 end" {
		t.Errorf("row after overflow %q", got)
	}
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Fatalf("trailing space in %q", l)
		}
	}
}
