// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// readFixture reads a recording of at least two snapshots.
func readFixture(t *testing.T, path string) []*snapshot.Snapshot {
	t.Helper()
	snaps := readSnaps(t, path)
	if len(snaps) < 2 {
		t.Fatalf("fixture %s: %d snapshots, want at least 2", path, len(snaps))
	}
	return snaps
}

// runFixtureOpts is runFixture with options (e.g. --bandwidth).
func runFixtureOpts(t *testing.T, r diag.Rule, path string, o diag.Options) diag.Result {
	t.Helper()
	snaps := readFixture(t, path)
	var res diag.Result
	diag.Run([]diag.Rule{r}, diag.NewInput(snaps[0], snaps[len(snaps)-1], o), &res)
	res.Sort()
	return res
}

// Real recordings (internal/testkit/livetest with LIVETEST_RECORD, cut to the
// flow): fires.jsonl is C1, one connection with 32K buffers carrying 100
// callers' requests (bbr, 20 ms, 200 Mbit/s).
func TestConnectionBottleneckRecordings(t *testing.T) {
	r := connectionBottleneck()
	dir := filepath.Join("testdata", r.ID)
	for _, c := range []struct {
		file  string
		bw    float64
		fires bool
	}{
		{"fires.jsonl", 0, true},
		// 14.9 Mbit/s of a 200 Mbit/s path: still the connection.
		{"fires.jsonl", 200e6, true},
		// The same flow, were the path 20 Mbit/s: the path is the limit.
		{"fires.jsonl", 20e6, false},
		// One autotuned bulk flow, bbr, 949 Mbit/s through 1 Gbit/s,
		// kernel sndbuf_limited 55 % of busy: a bulk transfer filling the
		// path, not too few connections (it fired before).
		{"quiet.jsonl", 0, false},
		{"quiet.jsonl", 1e9, false},
		// One bulk response stream into a pinned 128K receiver (C5, cubic,
		// rwnd_limited 99 %): rwnd-limited's case, not a pool's.
		{"quiet-rwnd-bulk.jsonl", 0, false},
		// The C1 callers over 8 autotuned connections.
		{"quiet-pool.jsonl", 0, false},
		// Dubbo 3's one shared connection (corpus case "Dubbo 3, one
		// connection, 32K buffers"), the provider's side: busy all the
		// window, rwnd+sndbuf limited 56 % of it.
		{"fires-dubbo-32k.jsonl", 0, true},
	} {
		res := runFixtureOpts(t, r, filepath.Join(dir, c.file), diag.Options{Bandwidth: c.bw})
		if len(res.Unknown) > 0 {
			t.Errorf("%s: unknown %+v", c.file, res.Unknown)
		}
		if got := res.Worst() >= diag.Warning; got != c.fires {
			t.Errorf("%s --bandwidth %.0f: fired %v, want %v: %+v", c.file, c.bw, got, c.fires, res.Findings)
		}
	}
}

// The application is told to stop pinning buffers only when the lock
// bits say it pinned them; a send buffer autotuned to tcp_wmem's maximum
// gets the sysctl, raised, instead.
func TestBottleneckBufferFixes(t *testing.T) {
	s := &snapshot.Snapshot{Sysctls: map[string]string{"net.core.wmem_max": "212992", "net.ipv4.tcp_wmem": "4096 16384 65536"}}
	sock := func(sndbuf uint32, lock snapshot.Flags) *snapshot.Socket {
		return &snapshot.Socket{Mem: &snapshot.MemInfo{Sndbuf: sndbuf}, BufLock: lock}
	}
	texts := func(fs []diag.Fix) string {
		var b strings.Builder
		for _, f := range fs {
			b.WriteString(f.Text + " " + f.Command + "\n")
		}
		return b.String()
	}
	atMax := bufferFixes(s, []*snapshot.Socket{sock(65536, snapshot.FlagsOf(0))})
	if got := texts(atMax); strings.Contains(got, "pin") || !strings.Contains(got, "net.ipv4.tcp_wmem='4096 16384 131072'") {
		t.Errorf("autotuned at tcp_wmem's maximum, lock bits read and clear:\n%s", got)
	}
	pinned := bufferFixes(s, []*snapshot.Socket{sock(32768, snapshot.FlagsOf(tcpmodel.LockSnd))})
	if got := texts(pinned); !strings.Contains(got, "do not pin small socket buffers") || strings.Contains(got, "tcp_wmem") {
		t.Errorf("pinned by the lock bits:\n%s", got)
	}
	if got := texts(bufferFixes(s, []*snapshot.Socket{sock(32768, snapshot.FlagsOf(0))})); got != "" {
		t.Errorf("lock bits read and clear, below the maximum: %s", got)
	}
}

// RPC traffic comes in waves with idle gaps: the Dubbo recording with its
// busy time cut to half the window (the limited shares kept) and the
// requests cut to 14 a second of one segment each (C1's own figure: 14
// calls/s of 500 KB on one connection) is still a connection holding its
// calls back. It was judged quiet while the rule wanted 80 % of the window
// busy and 20 data segments per second of the window each way.
func TestConnectionBottleneckWaves(t *testing.T) {
	snaps := readFixture(t, filepath.Join("testdata", "connection-bottleneck", "fires-dubbo-32k.jsonl"))
	find := func(s *snapshot.Snapshot) *snapshot.TCPInfo {
		var tb snapshot.TCPInfo
		for i := range s.Sockets {
			sk := &s.Sockets[i]
			if ti := sk.TCP(&tb); sk.State == snapshot.Established && ti != nil && ti.BytesAcked > 1e6 {
				c := *ti
				sk.Info = snapshot.TCPOf(&c)
				return &c
			}
		}
		t.Fatal("no connection in the fixture")
		return nil
	}
	p, c := find(snaps[0]), find(snaps[len(snaps)-1])
	window := snaps[len(snaps)-1].Taken.Sub(snaps[0].Taken)
	busy := c.BusyTime - p.BusyTime
	half := uint64(window.Microseconds() / 2)
	scale := func(prev uint64, cur *uint64) { *cur = prev + (*cur-prev)*half/busy }
	scale(p.RwndLimited, &c.RwndLimited)
	scale(p.SndbufLimited, &c.SndbufLimited)
	c.BusyTime = p.BusyTime + half
	c.DataSegsIn = p.DataSegsIn + uint32(14*window.Seconds())
	res := func() diag.Result {
		var res diag.Result
		diag.Run([]diag.Rule{connectionBottleneck()}, diag.NewInput(snaps[0], snaps[len(snaps)-1], diag.Options{}), &res)
		return res
	}()
	if res.Worst() != diag.Warning || len(res.Findings) != 1 {
		t.Fatalf("a connection busy half the window, limited 56 %% of that, 14 requests/s: worst %v, want one warning: %+v", res.Worst(), res.Findings)
	}
	for _, e := range res.Findings[0].Evidence {
		t.Logf("%s = %s", e.Name, e.Value)
	}
}
