// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
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

// TestRwndLimitedBurstyQuietHost: the same flow as a quiet host's kernel
// reports it (issue 38 item 4): each burst takes 70 ms, of which tcp_info
// calls only 20 % rwnd-limited (bbr's pacing is counted busy), and a 2 s
// window may hold a single burst. Each window of the recording is
// rewritten so: the sender's busy time grows 70 ms, rwnd_limited 14 ms,
// bytes_acked 4 MB; its window (2K) and cwnd (about 200K) stay as
// recorded. The window under cwnd in both samples shows the window is the
// limit, so every window is still a warning. Before, a share under 30 %
// needed evidence sampled at an instant with data in flight, and 70 ms
// of busy time was under the 100 ms floor: every window was quiet.
func TestRwndLimitedBurstyQuietHost(t *testing.T) {
	snaps := readFixture(t, filepath.Join("testdata", "rwnd-limited", "fires-bursty.jsonl"))
	counts := map[diag.Severity]int{}
	for i := 1; i < len(snaps); i++ {
		prev, cur := snaps[i-1], *snaps[i]
		cur.Sockets = append([]snapshot.Socket(nil), cur.Sockets...)
		var sender *snapshot.Socket
		var pti snapshot.TCPInfo
		var most uint64
		for j := range cur.Sockets {
			sk := &cur.Sockets[j]
			var tb, pb snapshot.TCPInfo
			ti := sk.TCP(&tb)
			for k := range prev.Sockets {
				if p := &prev.Sockets[k]; p.Cookie == sk.Cookie && sk.State == snapshot.Established && ti != nil {
					if pi := p.TCP(&pb); pi != nil && ti.BytesAcked-pi.BytesAcked > most && ti.BytesAcked > pi.BytesAcked {
						sender, pti, most = sk, *pi, ti.BytesAcked-pi.BytesAcked
					}
				}
			}
		}
		if sender == nil {
			t.Fatalf("window %d: no sender", i)
		}
		var tb snapshot.TCPInfo
		ti := *sender.TCP(&tb)
		ti.BusyTime, ti.RwndLimited, ti.BytesAcked = pti.BusyTime+70_000, pti.RwndLimited+14_000, pti.BytesAcked+4<<20
		sender.Info = snapshot.TCPOf(&ti)
		var res diag.Result
		diag.Run([]diag.Rule{rwndLimited()}, diag.NewInput(prev, &cur, diag.Options{}), &res)
		counts[res.Worst()]++
		for _, f := range res.Findings {
			t.Logf("window %d: %v %s", i, f.Severity, f.Summary)
		}
	}
	t.Logf("severities: %v", counts)
	if len(counts) != 1 || counts[diag.Warning] != len(snaps)-1 {
		t.Errorf("severities over %d windows: %v; want a warning in every one", len(snaps)-1, counts)
	}
}

// TestRwndLimitedSmallBufferNotPacing: the bursty recording's windows
// with its local receiver caught holding 2K unread of its 4K rcvbuf in
// both samples, as a prompt reader was under load in one live window of
// 30: a buffer under rwndPacingMinBuf shows no pacing, so each is still a
// warning (it was info: "the receiver reads slowly").
func TestRwndLimitedSmallBufferNotPacing(t *testing.T) {
	snaps := readFixture(t, filepath.Join("testdata", "rwnd-limited", "fires-bursty.jsonl"))
	half := func(s *snapshot.Snapshot) *snapshot.Snapshot {
		c := *s
		c.Sockets = append([]snapshot.Socket(nil), s.Sockets...)
		for i := range c.Sockets {
			sk := &c.Sockets[i]
			if sk.State == snapshot.Established && sk.Mem != nil && sk.Mem.Rcvbuf == 4096 {
				m := *sk.Mem
				m.RmemAlloc = 2048
				sk.Mem = &m
			}
		}
		return &c
	}
	for i := 1; i < len(snaps); i++ {
		var res diag.Result
		diag.Run([]diag.Rule{rwndLimited()}, diag.NewInput(half(snaps[i-1]), half(snaps[i]), diag.Options{}), &res)
		if res.Worst() != diag.Warning {
			t.Errorf("window %d: %v, want a warning: %+v", i, res.Worst(), res.Findings)
		}
	}
}
