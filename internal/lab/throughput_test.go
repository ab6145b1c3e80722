// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

// tpQuick runs one of the throughput scenarios in quick form.
func tpQuick(t *testing.T, s Scenario) { runQuick(t, s, 3*time.Minute) }

// TestC3PinnedSndbufQuick also wants trace's transfer compared with the
// client's own, bytes within 5 % wherever compared. Its last sample was
// taken as the client exited and still held the transfer's tail, so
// every row read "-" until the recorder sampled on: a table of "-" only
// fails. On a loaded machine a row may go uncompared (trace marked the
// transfer uncertain, the recorder found it late, or its last sample, in
// FIN_WAIT1, still held data in flight): logged.
func TestC3PinnedSndbufQuick(t *testing.T) {
	res := runQuick(t, c3PinnedSndbuf(), 3*time.Minute)
	if c := res.Table.Columns; c[len(c)-1] != "trace vs client time" {
		t.Fatalf("last column %q, want trace against the client", c[len(c)-1])
	}
	dashes := 0
	for _, row := range res.Table.Rows {
		cell := row[len(row)-1]
		pct, ok := tracedBytes(cell)
		switch {
		case cell == "-":
			dashes++
			t.Logf("%s: not traced whole: %q", row[0], cell)
		case !ok:
			t.Logf("%s: not compared: %q", row[0], cell)
		case pct > 5:
			t.Errorf("%s: trace against the client: %q, want bytes within 5 %%", row[0], cell)
		}
	}
	if dashes == len(res.Table.Rows) {
		t.Error(`every row's trace against the client is "-"`)
	}
}

// tracedBytes reads a comparison cell ("N traced (U uncertain, not
// compared), ..., bytes P%"): the byte error P, false when nothing was
// compared.
func tracedBytes(cell string) (float64, bool) {
	m := tracedCell.FindStringSubmatch(cell)
	if m == nil || m[1] == m[2] || m[1] == "0" {
		return 0, false
	}
	pct, err := strconv.ParseFloat(m[3], 64)
	return pct, err == nil
}

var tracedCell = regexp.MustCompile(`^(\d+) traced(?: \((\d+) uncertain, not compared\))?.*, bytes ([0-9.]+)%`)

// TestC5SmallRcvbufQuick also wants the client's own trace compared with
// the client's responses by time: some traced, and every one compared
// holding the client's bytes within 5 % (a merge or split shows there;
// durations are left to the table, as the client's own clock runs late
// when a loaded machine keeps it off the CPU).
func TestC5SmallRcvbufQuick(t *testing.T) {
	res := runQuick(t, c5SmallRcvbuf(), 3*time.Minute)
	if c := res.Table.Columns; c[len(c)-1] != "client's trace vs client" {
		t.Fatalf("last column %q, want the client's trace", c[len(c)-1])
	}
	for _, row := range res.Table.Rows {
		cell := row[len(row)-1]
		pct, ok := tracedBytes(cell)
		if !ok {
			t.Errorf("%s: the client's trace: %q, want responses compared", row[0], cell)
			continue
		}
		if pct > 5 {
			t.Errorf("%s: the client's trace: %s", row[0], cell)
		}
	}
}
func TestC1RPCConnectionsQuick(t *testing.T) { tpQuick(t, c1RPCConnections()) }
