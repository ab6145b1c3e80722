// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// TestRetransmissionsOwnRateNotPath: the lossy flow of the fires fixture
// (5 % of 47.7 MB retransmitted to 203.0.113.9, busy the whole window, no
// queue on the path) with data left unsent at the window's end, as a bulk
// sender held by its loss-shrunk cwnd has. Only the path held it, so its
// own rate qualifies as the path's measured rate; judged against that, its
// loss would cost nothing, whatever it cost. The rule measures the path
// from the connections that retransmitted nothing in the window, finds
// none, and warns as with the path unknown (it was info).
func TestRetransmissionsOwnRateNotPath(t *testing.T) {
	snaps := readFixture(t, filepath.Join("testdata", "retransmissions", "fires.jsonl"))
	prev, cur := snaps[0], *snaps[1]
	cur.Sockets = append([]snapshot.Socket(nil), cur.Sockets...)
	lossy := -1
	for i := range cur.Sockets {
		if cur.Sockets[i].Remote.Addr().String() == "203.0.113.9" {
			lossy = i
		}
	}
	if lossy < 0 {
		t.Fatal("fixture: no connection to 203.0.113.9")
	}
	var tb snapshot.TCPInfo
	ti := *cur.Sockets[lossy].TCP(&tb)
	ti.NotsentBytes = 1 << 20
	cur.Sockets[lossy].Info = snapshot.TCPOf(&ti)
	in := diag.NewInput(prev, &cur, diag.Options{})
	all := tcpmodel.PathRatesOf(&cur, in.Window(), func(sk *snapshot.Socket) *snapshot.Socket { return prevAs(in, sk) })
	if _, ok := all[cur.Sockets[lossy].Remote.Addr().Unmap()]; !ok {
		t.Fatal("the lossy flow's own stretch does not qualify as the path: the test proves nothing")
	}
	var res diag.Result
	diag.Run([]diag.Rule{retransmissions()}, in, &res)
	var got *diag.Finding
	for i := range res.Findings {
		if res.Findings[i].Subject.Remote == "203.0.113.9" {
			got = &res.Findings[i]
		}
	}
	if got == nil {
		t.Fatal("no finding for 203.0.113.9")
	}
	for _, e := range got.Evidence {
		t.Logf("%s = %s", e.Name, e.Value)
	}
	if got.Severity != diag.Warning {
		t.Errorf("5 %% loss judged against the lossy flow's own rate: %v, want warning", got.Severity)
	}
}
