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

// Real recordings (internal/livetest with LIVETEST_RECORD, cut to the
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
