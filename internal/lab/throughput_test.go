// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tpQuick runs one of the throughput scenarios in quick form.
func tpQuick(t *testing.T, s Scenario) { runQuick(t, s, 3*time.Minute) }

// TestC3PinnedSndbufQuick also wants trace's transfer compared with the
// client's own: bytes within 5 %, in at least one row, and every row
// compared unless the recorder found the connection after it started.
// (Its last sample was taken as the client exited and still held the
// transfer's tail, so every row read "-" until the recorder sampled on.)
func TestC3PinnedSndbufQuick(t *testing.T) {
	res := runQuick(t, c3PinnedSndbuf(), 3*time.Minute)
	if c := res.Table.Columns; c[len(c)-1] != "trace vs client time" {
		t.Fatalf("last column %q, want trace against the client", c[len(c)-1])
	}
	compared := 0
	for _, row := range res.Table.Rows {
		cell := row[len(row)-1]
		if strings.HasPrefix(cell, "found after it started") {
			continue
		}
		if pct, ok := tracedBytes(cell); !ok || pct > 5 {
			t.Errorf("%s: trace against the client: %q, want it compared, bytes within 5 %%", row[0], cell)
			continue
		}
		compared++
	}
	if compared == 0 {
		t.Error("no row compared trace with the client")
	}
}

// tracedBytes reads a comparison cell ("N traced, ..., bytes P%"): the
// byte error P, false when nothing was compared.
func tracedBytes(cell string) (float64, bool) {
	m := tracedCell.FindStringSubmatch(cell)
	if m == nil || m[1] == "0" {
		return 0, false
	}
	pct, err := strconv.ParseFloat(m[2], 64)
	return pct, err == nil
}

var tracedCell = regexp.MustCompile(`^(\d+) traced.*, bytes ([0-9.]+)%`)

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
