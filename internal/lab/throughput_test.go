package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tpQuick runs one scenario in quick form with a freshly built tcpdoctor
// (the workloads and the delay line run from it) and wants it reproduced.
func tpQuick(t *testing.T, s Scenario) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN, tbf)")
	}
	if testing.Short() {
		t.Skip("lab scenario: not in -short")
	}
	self := filepath.Join(t.TempDir(), "tcpdoctor")
	build := exec.Command("go", "build", "-o", self, "github.com/tcpdoctor/tcpdoctor/cmd/tcpdoctor")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tcpdoctor: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log strings.Builder
	o := Options{Self: self, DelayLine: []string{self, "lab", "link-bench", "--delay-line-child"}, Quick: true, Log: &log}
	res, err := Execute(ctx, s, o)
	var out strings.Builder
	WriteText(&out, res)
	t.Logf("%s\n%s", log.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Reproduced {
		t.Fatalf("%s not reproduced", s.Name)
	}
	if len(res.Table.Rows) < 2 {
		t.Errorf("table has %d rows, want before and after", len(res.Table.Rows))
	}
}

func TestC3PinnedSndbufQuick(t *testing.T)   { tpQuick(t, c3PinnedSndbuf()) }
func TestC5SmallRcvbufQuick(t *testing.T)    { tpQuick(t, c5SmallRcvbuf()) }
func TestC1RPCConnectionsQuick(t *testing.T) { tpQuick(t, c1RPCConnections()) }
