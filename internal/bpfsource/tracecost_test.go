// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestTraceHookCost measures what trace.c's per-socket hooks cost every
// socket of the host while they are attached: a loopback stream of
// 1 KiB writes (a write and a data-ready per message, the hooks' worst
// case) runs for 2 s, one socket watched, and the kernel's BPF run-time
// statistics give the runs and nanoseconds per run of each program.
// Root only, and only when asked:
//
//	TCPDOCTOR_BPF_COST=1 go test -count=1 -run TestTraceHookCost -v ./internal/bpfsource
func TestTraceHookCost(t *testing.T) {
	if os.Getenv(costEnv) == "" {
		t.Skip("set " + costEnv + "=1 to measure")
	}
	testns.NeedRoot(t)
	const stats = "/proc/sys/kernel/bpf_stats_enabled"
	old, err := os.ReadFile(stats)
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile(stats, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(stats, old, 0o644)
	l, port := listenLoopback(t)
	tr, err := OpenTrace(TraceOptions{Ports: []uint16{port}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c, a := connectLoopback(t, l, port)
	defer unix.Close(c)
	ck, err := unix.GetsockoptUint64(a, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Watch(ck); err != nil {
		t.Fatal(err)
	}
	type stat struct{ runs, ns uint64 }
	read := func() map[string]stat {
		m := map[string]stat{}
		for name, p := range tr.programs() {
			s, err := p.Stats()
			if err != nil {
				t.Fatal(err)
			}
			m[name] = stat{s.RunCount, uint64(s.Runtime)}
		}
		return m
	}
	done := make(chan struct{})
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if n, err := unix.Read(a, buf); n <= 0 || err != nil {
				close(done)
				return
			}
		}
	}()
	before := read()
	msg := make([]byte, 1024)
	start := time.Now()
	writes := 0
	for time.Since(start) < 2*time.Second {
		if _, err := unix.Write(c, msg); err != nil {
			t.Fatal(err)
		}
		writes++
	}
	wall := time.Since(start)
	after := read()
	unix.Shutdown(c, unix.SHUT_WR)
	<-done
	t.Logf("%d writes of 1 KiB in %v (%.0f/s)", writes, wall.Round(time.Millisecond), float64(writes)/wall.Seconds())
	var total time.Duration
	for name, b := range before {
		d := stat{after[name].runs - b.runs, after[name].ns - b.ns}
		if d.runs == 0 {
			continue
		}
		total += time.Duration(d.ns)
		t.Logf("%-22s %8d runs (%.0f/s), %4.0f ns per run", name, d.runs, float64(d.runs)/wall.Seconds(), float64(d.ns)/float64(d.runs))
	}
	t.Logf("all hooks: %.2f %% of one core during the stream (every socket of the host pays them, traced or not)", 100*total.Seconds()/wall.Seconds())
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("loadavg %s", load)
}
