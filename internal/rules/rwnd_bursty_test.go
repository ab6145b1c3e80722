// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// A bursty sender into a receiver pinned at SO_RCVBUF 2048 on loopback:
// 4 MB written, then 1 s of sleep, over and over (issue 38; recorded with
// `tcpdoctor record --count 25 --interval 2s`). Every window of two
// samples gives the same severity: its transfers all wait for the
// receiver's window, whichever part of a burst or a sleep the samples
// fall in.
func TestRwndLimitedBurstyStable(t *testing.T) {
	snaps := readFixture(t, filepath.Join("testdata", "rwnd-limited", "fires-bursty.jsonl"))
	counts := map[diag.Severity]int{}
	for i := 1; i < len(snaps); i++ {
		var res diag.Result
		diag.Run([]diag.Rule{rwndLimited()}, diag.NewInput(snaps[i-1], snaps[i], diag.Options{}), &res)
		sev := res.Worst()
		counts[sev]++
		for _, f := range res.Findings {
			t.Logf("window %d: %v %s", i, f.Severity, f.Summary)
		}
		if len(res.Findings) == 0 {
			t.Logf("window %d: quiet", i)
		}
	}
	t.Logf("severities: %v", counts)
	if len(counts) != 1 || counts[diag.Warning] != len(snaps)-1 {
		t.Errorf("severities over %d windows: %v; want a warning in every one", len(snaps)-1, counts)
	}
}
