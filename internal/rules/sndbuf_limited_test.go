// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// An epoll writer (Netty) refills its send buffer only when woken with
// room in it, so its wmem_queued swings between about 0.7 and 1.6 x
// sndbuf: both samples can land low while the kernel counts the buffer as
// the limit most of the window. The C3 recording (sndbuf pinned at 32K,
// kernel sndbuf_limited 72 % of busy) with wmem_queued cut to 0.7 x
// sndbuf in both samples is still send-buffer-limited; it was quiet while
// one sample had to show 3/4 of the buffer queued. With the kernel's
// share under sndbufChronoShare, the samples alone decide, and 0.7 x is
// not full.
func TestSndbufLimitedOverWindow(t *testing.T) {
	for _, c := range []struct {
		name    string
		chrono  float64 // sndbuf_limited share of busy time to set; 0 keeps the recording's
		warning bool
	}{
		{"kernel sndbuf_limited 72% of busy", 0, true},
		{"kernel sndbuf_limited 10% of busy", 0.1, false},
	} {
		snaps := readFixture(t, filepath.Join("testdata", "sndbuf-limited", "fires.jsonl"))
		var tis []*snapshot.TCPInfo
		for _, s := range []*snapshot.Snapshot{snaps[0], snaps[len(snaps)-1]} {
			var tb snapshot.TCPInfo
			for i := range s.Sockets {
				sk := &s.Sockets[i]
				if ti := sk.TCP(&tb); sk.State == snapshot.Established && ti != nil && ti.BusyTime > 0 && sk.Mem != nil && sk.Mem.Sndbuf == 32768 {
					m := *sk.Mem
					m.WmemQueued = uint32(0.7 * float64(m.Sndbuf))
					sk.Mem = &m
					x := *ti
					sk.Info = snapshot.TCPOf(&x)
					tis = append(tis, &x)
				}
			}
		}
		if len(tis) != 2 {
			t.Fatalf("%d samples of the pinned sender, want 2", len(tis))
		}
		if c.chrono > 0 {
			p, cur := tis[0], tis[1]
			cur.SndbufLimited = p.SndbufLimited + uint64(c.chrono*float64(cur.BusyTime-p.BusyTime))
		}
		var res diag.Result
		diag.Run([]diag.Rule{sndbufLimited()}, diag.NewInput(snaps[0], snaps[len(snaps)-1], diag.Options{}), &res)
		if got := res.Worst() >= diag.Warning; got != c.warning {
			t.Errorf("%s, wmem_queued 0.7 x sndbuf in both samples: warning %v, want %v: %+v", c.name, got, c.warning, res.Findings)
		}
	}
}
