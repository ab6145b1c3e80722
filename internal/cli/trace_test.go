// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// traceFile writes a recording of one connection sending 40 KB in 40 ms,
// 32 ms of it waiting for the peer's 16K window.
func traceFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"header":{"trace":1,"started":"2026-11-23T07:00:00Z","interval_ns":10000000,"filter":"port 80"}}` + "\n")
	b.WriteString(`{"conn":{"id":1,"local":"198.18.0.1:80","remote":"198.18.1.2:40000","cookie":7}}` + "\n")
	for i, r := range [][3]int{{0, 0, 0}, {10000, 10000, 8000}, {20000, 20000, 16000}, {30000, 30000, 24000}, {40000, 40000, 32000}, {40000, 40000, 32000}} {
		sq := 9000
		if i == 0 || i >= 4 {
			sq = 0
		}
		fmt.Fprintf(&b, `{"p":{"t":%d,"c":1,"st":"ESTAB","sq":%d,"acked":%d,"busy":%d,"rwnd_l":%d,"chrono":true,"mss":1000,"cwnd":10,"rtt":2000,"snd_wnd":16384}}`+"\n",
			i*10000000, sq, r[0], r[1], r[2])
	}
	path := filepath.Join(t.TempDir(), "t.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTraceFromFile(t *testing.T) {
	f := traceFile(t)
	code, out, errOut := run(t, "trace", "--from", f, "--bandwidth", "100mbit")
	if code != ExitFindings {
		t.Fatalf("exit %d, want %d (a slow transfer); stderr %s", code, ExitFindings, errOut)
	}
	for _, want := range []string{"PEER WND", "39.1K", "32.0ms", "waiting for the peer's receive window", "receiver side, the receiver 198.18.1.2:40000", "SO_RCVBUF="} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	html := filepath.Join(t.TempDir(), "r.html")
	code, out, _ = run(t, "trace", "--from", f, "--bandwidth", "100mbit", "--json", "--html", html)
	if code != ExitFindings {
		t.Fatalf("--json: exit %d", code)
	}
	var tr struct {
		Dir     string `json:"dir"`
		Bytes   int    `json:"bytes"`
		Verdict struct {
			HeldBy string `json:"held_by"`
		} `json:"verdict"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &tr); err != nil || tr.Dir != "send" || tr.Bytes != 40000 || tr.Verdict.HeldBy != "peer's receive window" {
		t.Errorf("json line %q: %+v %v", out, tr, err)
	}
	if st, err := os.Stat(html); err != nil || st.Size() < 50000 {
		t.Errorf("html page: %v", err)
	}
}

func TestTraceUsage(t *testing.T) {
	f := traceFile(t)
	for _, args := range [][]string{
		{"trace", "--rate", "0"},
		{"trace", "--rate", "1001"},
		{"trace", "--from", f, "--port", "80"},
		{"trace", "--port", "70000"},
		{"trace", "--peer", "not-an-address", "--duration", "1s"},
		{"trace", "--from", f, "--bandwidth", "fast"},
	} {
		if code, _, _ := run(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
	// A file that cannot be read as a recording is the caller's to fix,
	// as for check --from (docs/trace.md).
	if code, _, _ := run(t, "trace", "--from", filepath.Join(t.TempDir(), "missing")); code != ExitUsage {
		t.Errorf("missing file: exit %d, want %d", code, ExitUsage)
	}
}
