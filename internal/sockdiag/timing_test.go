// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestDumpTiming opens TCPDOCTOR_SOCKDIAG_CONNS loopback connections
// (both ends, so twice as many sockets) in a fresh namespace and times
// Dump against `ss -tinm`. Root only; skipped unless the variable is set:
//
//	TCPDOCTOR_SOCKDIAG_CONNS=20000 go test ./internal/sockdiag -run TestDumpTiming -v
func TestDumpTiming(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TCPDOCTOR_SOCKDIAG_CONNS"))
	if n <= 0 {
		t.Skip("set TCPDOCTOR_SOCKDIAG_CONNS to run")
	}
	if n > 25000 {
		t.Fatalf("TCPDOCTOR_SOCKDIAG_CONNS %d: at most 25000 (one port range to four listeners)", n)
	}
	requireRoot(t)
	ns := newNetns(t)
	f := newFDs(t)

	// The server ends stay in the accept queues (no descriptors): this
	// container cannot raise RLIMIT_NOFILE past 20000, so the client ends
	// are split between this process and a helper in the namespace.
	if out, err := exec.Command("ip", "netns", "exec", ns.name, "sysctl", "-qw", "net.core.somaxconn=65535").CombinedOutput(); err != nil {
		t.Fatalf("somaxconn: %v: %s", err, out)
	}
	const listeners = 4
	var ports [listeners]uint16
	ns.do(func() {
		for i := range ports {
			_, ports[i] = f.listen(mustAddrPort("127.0.0.1", 0), 65535)
		}
	})
	portList := ""
	for _, p := range ports {
		portList += strconv.Itoa(int(p)) + ","
	}
	start := time.Now()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command("ip", "netns", "exec", ns.name, exe, "-test.run=^TestTimingHelper$")
	helper.Env = append(os.Environ(), "TCPDOCTOR_SOCKDIAG_HELPER="+portList+strconv.Itoa(n/2))
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var helperOut bytes.Buffer
	helper.Stdout, helper.Stderr = &helperOut, &helperOut
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the helper exits at EOF
		done := make(chan error, 1)
		go func() { done <- helper.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			helper.Process.Kill()
			<-done
		}
	})
	ns.do(func() {
		for i := range n - n/2 {
			f.connect(mustAddrPort("127.0.0.1", ports[i%listeners]), 0)
		}
	})
	eventually(t, "all connections", func() bool {
		socks := 0
		ns.do(func() {
			Dump(Options{}, func(*snapshot.Socket) error { socks++; return nil })
		})
		return socks >= 2*n+listeners
	})
	t.Logf("%d connections (%d sockets) set up in %v", n, 2*n+listeners, time.Since(start).Round(time.Millisecond))

	best := func(runs int, f func() time.Duration) (time.Duration, []time.Duration) {
		var all []time.Duration
		b := time.Duration(1 << 62)
		for range runs {
			d := f()
			all = append(all, d.Round(100*time.Microsecond))
			b = min(b, d)
		}
		return b.Round(100 * time.Microsecond), all
	}
	var kept int
	var ru0, ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	dumpKeep, allKeep := best(5, func() time.Duration {
		var out []*snapshot.Socket
		var err error
		var d time.Duration
		ns.do(func() {
			t0 := time.Now()
			err = Dump(Options{Info: true, Mem: true}, func(sk *snapshot.Socket) error { out = append(out, sk); return nil })
			d = time.Since(t0)
		})
		if err != nil {
			t.Fatalf("Dump: %v", err)
		}
		kept = len(out)
		return d
	})
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	t.Logf("5 dumps used %v user, %v system CPU", time.Duration(ru1.Utime.Nano()-ru0.Utime.Nano()), time.Duration(ru1.Stime.Nano()-ru0.Stime.Nano()))
	if kept < 2*n+listeners {
		t.Errorf("Dump found %d sockets, want at least %d", kept, 2*n+listeners)
	}
	dumpCount, allCount := best(5, func() time.Duration {
		var d time.Duration
		ns.do(func() {
			t0 := time.Now()
			if err := Dump(Options{Info: true, Mem: true}, func(*snapshot.Socket) error { return nil }); err != nil {
				t.Errorf("Dump: %v", err)
			}
			d = time.Since(t0)
		})
		return d
	})
	var lines int
	run := func(args ...string) func() time.Duration {
		return func() time.Duration {
			var out bytes.Buffer
			cmd := exec.Command("ip", append([]string{"netns", "exec", ns.name}, args...)...)
			cmd.Stdout = &out
			t0 := time.Now()
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %v", cmd.Args, err)
			}
			d := time.Since(t0)
			lines = bytes.Count(out.Bytes(), []byte("\n"))
			return d
		}
	}
	ssTime, allSS := best(3, run("ss", "-tinm"))
	ssLines := lines
	baseTime, _ := best(3, run("true"))
	t.Logf("Dump(Info, Mem), keeping every socket: %d sockets, best %v of %v", kept, dumpKeep, allKeep)
	t.Logf("Dump(Info, Mem), dropping each socket: best %v of %v", dumpCount, allCount)
	t.Logf("ip netns exec %s ss -tinm: %d lines, best %v of %v (ip netns exec true: %v)", ns.name, ssLines, ssTime, allSS, baseTime)
	t.Logf("ss / Dump(keep) = %.1fx", float64(ssTime-baseTime)/float64(dumpKeep))
}

// TestTimingHelper is TestDumpTiming's helper process: it connects to the
// given ports, then holds the connections until stdin closes.
func TestTimingHelper(t *testing.T) {
	spec := os.Getenv("TCPDOCTOR_SOCKDIAG_HELPER")
	if spec == "" {
		t.Skip("helper process for TestDumpTiming")
	}
	parts := strings.Split(spec, ",")
	n, err := strconv.Atoi(parts[len(parts)-1])
	if err != nil || len(parts) < 2 {
		t.Fatalf("bad spec %q", spec)
	}
	var ports []uint16
	for _, p := range parts[:len(parts)-1] {
		v, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("bad spec %q", spec)
		}
		ports = append(ports, uint16(v))
	}
	f := newFDs(t)
	for i := range n {
		f.connect(mustAddrPort("127.0.0.1", ports[i%len(ports)]), 0)
	}
	bufio.NewReader(os.Stdin).ReadString(0) // until EOF
}
