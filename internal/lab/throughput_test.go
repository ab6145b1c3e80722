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

func TestC3PinnedSndbufQuick(t *testing.T) { tpQuick(t, c3PinnedSndbuf()) }

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
	re := regexp.MustCompile(`^(\d+) traced.*, bytes ([0-9.]+)%`)
	for _, row := range res.Table.Rows {
		cell := row[len(row)-1]
		m := re.FindStringSubmatch(cell)
		if m == nil || m[1] == "0" {
			t.Errorf("%s: the client's trace: %q, want responses compared", row[0], cell)
			continue
		}
		if pct, _ := strconv.ParseFloat(m[2], 64); pct > 5 {
			t.Errorf("%s: the client's trace: %s", row[0], cell)
		}
	}
}
func TestC1RPCConnectionsQuick(t *testing.T) { tpQuick(t, c1RPCConnections()) }
