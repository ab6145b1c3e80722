// SPDX-License-Identifier: Apache-2.0

package linkemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the delay-line child process.
func TestMain(m *testing.M) {
	if IsChild() {
		if err := ServeLine(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// selfExec runs this test binary as the delay-line child.
func selfExec() []string { return []string{os.Args[0], "-test.run=^$"} }

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN)")
	}
}

// TestBench runs a short link-bench. Its lower bounds are loose because
// a saturated machine (other tests, other labs) slows everything; the
// upper bounds are tbf's. docs/lab-link.md has the full figures.
func TestBench(t *testing.T) {
	needRoot(t)
	var progress bytes.Buffer
	res, err := Bench(context.Background(), BenchOptions{
		PingDuration: time.Second, Duration: 2 * time.Second, Progress: &progress, Exec: selfExec(),
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	res.WriteTable(&out)
	t.Logf("\n%s", out.String())
	if p := res.Ping; p.Received < p.Sent*9/10 || p.Min < 0 || p.P50 > time.Millisecond {
		t.Errorf("ping: %d of %d, min %v p50 %v", p.Received, p.Sent, p.Min, p.P50)
	}
	if len(res.Flows) != 2 {
		t.Fatalf("%d flows", len(res.Flows))
	}
	if f := res.Flows[0]; f.Rate != 1e9 || f.Mbps < 200 || f.Mbps > 957 || f.CPUPct <= 0 {
		t.Errorf("1 Gbit/s flow: %.1f Mbit/s, line cpu %.1f %%", f.Mbps, f.CPUPct)
	}
	if f := res.Flows[1]; f.Rate != 100e6 || f.Mbps < 30 || f.Mbps > 95.7 {
		t.Errorf("100 Mbit/s flow: %.1f Mbit/s", f.Mbps)
	}
	if n := len(res.Targets()); n != 5 {
		t.Errorf("%d targets", n)
	}
	if !bytes.Contains(out.Bytes(), []byte("100 Mbit")) {
		t.Errorf("table without the 100 Mbit row:\n%s", out.String())
	}
}
