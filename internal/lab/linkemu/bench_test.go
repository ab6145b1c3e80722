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
	if os.Getenv(ChildEnv) != "" {
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

// TestBench runs a short link-bench and holds it to the targets,
// with some room for a shared 2-core machine.
func TestBench(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("short")
	}
	var progress bytes.Buffer
	res, err := Bench(context.Background(), BenchOptions{
		PingDuration: 2 * time.Second, Duration: 3 * time.Second, Progress: &progress, Exec: selfExec(),
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	res.WriteTable(&out)
	t.Logf("\n%s", out.String())
}
