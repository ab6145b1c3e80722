package rules

import (
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// Real recordings (internal/livetest with LIVETEST_RECORD): one bulk flow
// over a 30 ms, 100 Mbit/s path into a client whose SO_RCVBUF is pinned at
// 128K (C5), or autotuned. fires.jsonl is cubic (rwnd_limited 99 %).
func TestRwndLimitedRecordings(t *testing.T) {
	r := rwndLimited()
	dir := filepath.Join("testdata", r.ID)
	for _, c := range []struct {
		file string
		bw   float64
		sev  diag.Severity // 0: quiet
	}{
		// Window-limited flows lose performance: a warning (critical is
		// kept for things that fail).
		{"fires.jsonl", 0, diag.Warning},
		// bbr: rwnd_limited only 20 % of busy, but 152-164K in flight of a
		// 168K window with cwnd 400K: the window is the limit.
		{"fires-bbr.jsonl", 0, diag.Warning},
		{"fires-bbr.jsonl", 100e6, diag.Warning},
		// A local receiver pinned at 32K that reads slowly (loopback): its
		// Recv-Q holds its buffer, so the reader, not the window, is the
		// limit; a note here, slow-reader speaks for the reader.
		{"fires-local.jsonl", 0, diag.Info},
		// Autotuned receivers: the window is many times what is in flight.
		{"quiet.jsonl", 0, 0},
		{"quiet-bbr.jsonl", 0, 0},
		{"quiet-bbr.jsonl", 100e6, 0},
	} {
		res := runFixtureOpts(t, r, filepath.Join(dir, c.file), diag.Options{Bandwidth: c.bw})
		if len(res.Unknown) > 0 {
			t.Errorf("%s: unknown %+v", c.file, res.Unknown)
		}
		got := res.Worst()
		if c.sev == 0 && got >= diag.Warning || c.sev != 0 && got != c.sev {
			t.Errorf("%s --bandwidth %.0f: worst %v, want %v: %+v", c.file, c.bw, got, c.sev, res.Findings)
		}
	}
}
