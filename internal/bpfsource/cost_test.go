package bpfsource

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testns"
)

// costEnv turns TestCost on: it takes about half a minute and measures,
// so it stays out of the ordinary suite.
const costEnv = "TCPDOCTOR_BPF_COST"

// TestCost measures what the attached program costs: a loopback
// connect/close churn and a loopback bulk stream in a namespace of its own,
// rounds alternating without and with the program, medians printed side
// by side (docs/performance.md).
//
//	TCPDOCTOR_BPF_COST=1 go test -count=1 -run TestCost -v ./internal/bpfsource
func TestCost(t *testing.T) {
	if os.Getenv(costEnv) == "" {
		t.Skip("set " + costEnv + "=1 to measure the cost")
	}
	ns := testns.New(t, "bpfcost")
	// Room for the churn's TIME_WAIT ports (reused on loopback after 1 s).
	testns.Run(t, "ip", "netns", "exec", ns.Name, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535")
	const rounds, conns, bulkFor = 7, 20000, 2 * time.Second
	modes := []struct {
		name string
		on   bool
		opts Options
	}{
		{"without", false, Options{}},
		{"lifecycle only", true, Options{Programs: []string{"inet_sock_set_state"}}},
		{"all programs", true, Options{}},
		{"all + lifetimes", true, Options{Lifetimes: true}},
	}
	churns := make([][]float64, len(modes))
	bulks := make([][]float64, len(modes))
	for i := range rounds * len(modes) {
		m := i % len(modes)
		var src *Source
		if modes[m].on {
			var err error
			if src, err = Open(modes[m].opts); err != nil {
				t.Skip(err)
			}
		}
		cr, err := churn(ns, conns)
		if err != nil {
			t.Fatal(err)
		}
		br, err := bulk(ns, bulkFor)
		if err != nil {
			t.Fatal(err)
		}
		churns[m], bulks[m] = append(churns[m], cr), append(bulks[m], br)
		if src == nil {
			continue
		}
		r, err := src.Read()
		if err != nil {
			t.Fatal(err)
		}
		var opens uint64
		for _, f := range r.ByNetns[ns.Inode] {
			opens += f.Opens
		}
		if opens < conns {
			t.Errorf("round %d: the program counted %d opens, want at least %d", i, opens, conns)
		}
		if err := src.Close(); err != nil {
			t.Fatal(err)
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("loadavg at the end: %s", load)
	fmt.Printf("%-44s", fmt.Sprintf("median of %d rounds each, interleaved", rounds))
	for _, m := range modes {
		fmt.Printf(" %22s", m.name)
	}
	fmt.Println()
	for _, row := range []struct {
		name   string
		v      [][]float64
		digits int
	}{
		{fmt.Sprintf("loopback connect/close churn (conn/s, %d)", conns), churns, 0},
		{fmt.Sprintf("loopback bulk stream (Gbit/s, %s)", bulkFor), bulks, 2},
	} {
		fmt.Printf("%-44s", row.name)
		base := med(row.v[0])
		for m := range modes {
			x := med(row.v[m])
			cell := fmt.Sprintf("%.*f", row.digits, x)
			if m > 0 {
				cell += fmt.Sprintf(" (%+.1f%%)", (x/base-1)*100)
			}
			fmt.Printf(" %22s", cell)
		}
		fmt.Println()
	}
	for m := range modes {
		fmt.Printf("rounds %s: churn %v, bulk %v\n", modes[m].name, round(churns[m], 0), round(bulks[m], 1))
	}

	// One more churn per mode with the kernel's BPF run-time statistics on
	// (they add two clock reads per run, so not during the rounds above).
	stats, err := ebpf.EnableStats(0) // BPF_STATS_RUN_TIME
	if err != nil {
		t.Logf("no run-time statistics: %v", err)
		return
	}
	defer func() { _ = stats.Close() }()
	for _, m := range modes[1:] {
		src, err := Open(m.opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := churn(ns, conns); err != nil {
			t.Fatal(err)
		}
		stats, err := src.runStats()
		_ = src.Close()
		if err != nil {
			t.Fatal(err)
		}
		var total ebpf.ProgramStats
		for _, name := range slices.Sorted(maps.Keys(stats)) {
			st := stats[name]
			total.RunCount += st.RunCount
			total.Runtime += st.Runtime
			fmt.Printf("%s: %s: %d runs in %d connections (%.1f each), %.0f ns per run\n", m.name, name, st.RunCount, conns,
				float64(st.RunCount)/conns, float64(st.Runtime.Nanoseconds())/float64(max(st.RunCount, 1)))
		}
		fmt.Printf("%s: %.2f us per connection in all programs (run-time statistics on)\n", m.name, float64(total.Runtime.Nanoseconds())/conns/1000)
	}
}

func round(v []float64, digits int) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%.*f", digits, x)
	}
	return out
}

// listen opens a blocking loopback listener in ns and returns its fd and
// port.
func listen(ns netns.NS) (int, int, error) {
	var fd, port int
	err := netns.Do(ns, func() error {
		var err error
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := syscall.Listen(fd, 4096); err != nil {
			return err
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			return err
		}
		port = sa.(*syscall.SockaddrInet4).Port
		return nil
	})
	if err != nil && fd > 0 {
		_ = syscall.Close(fd)
	}
	return fd, port, err
}

// churn connects and closes n connections one after another (the client
// closes first; the server accepts and closes) and returns connections/s.
func churn(ns netns.NS, n int) (float64, error) {
	lfd, port, err := listen(ns)
	if err != nil {
		return 0, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			c, _, err := syscall.Accept4(lfd, syscall.SOCK_CLOEXEC)
			if err != nil {
				return
			}
			_ = syscall.Close(c)
		}
	}()
	var elapsed time.Duration
	err = netns.Do(ns, func() error {
		sa := &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
		start := time.Now()
		for range n {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			err = syscall.Connect(fd, sa)
			_ = syscall.Close(fd)
			if err != nil {
				return fmt.Errorf("connect: %w", err)
			}
		}
		elapsed = time.Since(start)
		return nil
	})
	_ = syscall.Shutdown(lfd, syscall.SHUT_RDWR) // wakes a blocked accept
	_ = syscall.Close(lfd)
	<-done
	if err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// bulk streams for d over one loopback connection and returns the
// receiver's Gbit/s.
func bulk(ns netns.NS, d time.Duration) (float64, error) {
	lfd, port, err := listen(ns)
	if err != nil {
		return 0, err
	}
	defer func() { _ = syscall.Close(lfd) }()
	type result struct {
		bytes int64
		err   error
	}
	got := make(chan result, 1)
	go func() {
		c, _, err := syscall.Accept4(lfd, syscall.SOCK_CLOEXEC)
		if err != nil {
			got <- result{err: err}
			return
		}
		defer func() { _ = syscall.Close(c) }()
		buf := make([]byte, 1<<20)
		var total int64
		for {
			n, err := syscall.Read(c, buf)
			if n <= 0 || err != nil {
				got <- result{bytes: total}
				return
			}
			total += int64(n)
		}
	}()
	var elapsed time.Duration
	err = netns.Do(ns, func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer func() { _ = syscall.Close(fd) }()
		if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		buf := make([]byte, 1<<20)
		start := time.Now()
		for time.Since(start) < d {
			if _, err := syscall.Write(fd, buf); err != nil {
				return err
			}
		}
		elapsed = time.Since(start)
		return nil
	})
	r := <-got
	if err != nil {
		return 0, err
	}
	if r.err != nil {
		return 0, r.err
	}
	return float64(r.bytes) * 8 / elapsed.Seconds() / 1e9, nil
}
