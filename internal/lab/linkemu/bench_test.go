package linkemu

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN)")
	}
}

// TestBench runs a short link-bench and holds it to the targets,
// with some room for a shared 2-core machine.
func TestBench(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("short")
	}
	var progress bytes.Buffer
	res, err := Bench(context.Background(), BenchOptions{
		PingDuration: 2 * time.Second, Duration: 3 * time.Second, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	res.WriteTable(&out)
	t.Logf("\n%s", out.String())
}
