// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// costEnv turns TestCost on: it takes a few minutes and measures, so it
// stays out of the ordinary suite.
const costEnv = "TCPDOCTOR_BPF_COST"

// costMode is one column of TestCost: what is attached during its rounds.
type costMode struct {
	name string
	// open attaches the mode's programs; nil attaches nothing.
	open func() (costAttached, error)
}

// costAttached is what a mode attached.
type costAttached interface {
	Close() error
	runStats() (map[string]*ebpf.ProgramStats, error)
}

// eventTracepoints are the tracepoints Open attaches to (Options{}).
var eventTracepoints = []string{"inet_sock_set_state", "kfree_skb", "tcp_retransmit_skb", "tcp_send_reset", "tcp_receive_reset"}

func costModes() []costMode {
	src := func(o Options) func() (costAttached, error) {
		return func() (costAttached, error) { return Open(o) }
	}
	return []costMode{
		{"without", nil},
		{"empty programs", func() (costAttached, error) { return openEmpty(eventTracepoints...) }},
		{"lifecycle only", src(Options{Programs: []string{"inet_sock_set_state"}})},
		{"all programs", src(Options{})},
		{"all + lifetimes", src(Options{Lifetimes: true})},
	}
}

// TestCost measures what the attached programs cost, in a namespace of
// its own, rounds alternating between the modes (without programs, empty
// programs on the same tracepoints, the lifecycle program, all programs,
// all with the lifetime join):
//
//   - throughput: a connect/close churn (client and server on their own
//     threads, conn/s) and a 2 s single-connection bulk stream (Gbit/s),
//     both free to use both CPUs, rounds alternating between the modes:
//     noisy, the rounds' spread is about as large as the cost;
//   - CPU: then the same two loads on one thread pinned to one CPU
//     (connect, accept, close, close; or write and read in turn,
//     non-blocking), so the loopback softirq work runs on that CPU too,
//     measured as the thread's CPU time plus that CPU's ksoftirqd's, per
//     connection and per GiB. Many short cycles, one round of each mode
//     (the order reversed every other cycle), each round compared with
//     the round without programs of its cycle (paired); the medians of
//     those ratios decide the targets: at most 3 % on the churn,
//     no measurable cost on the bulk stream (a sign test over the paired
//     rounds).
//
// A last pass with the kernel's run-time statistics on gives each
// program's runs per connection and nanoseconds per run (also for the
// lifecycle program taking pid and comm from helpers, as on kernels
// before 5.11); the statistics add their own clock reads to every run,
// which the empty programs' figures show.
//
//	TCPDOCTOR_BPF_COST=1 go test -count=1 -run TestCost -v ./internal/bpfsource
func TestCost(t *testing.T) {
	if os.Getenv(costEnv) == "" {
		t.Skip("set " + costEnv + "=1 to measure the cost")
	}
	ns := testns.New(t, "bpfcost")
	// Room for the churn's TIME_WAIT ports (reused on loopback after 1 s).
	testns.Run(t, "ip", "netns", "exec", ns.Name, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535")
	cpu := runtime.NumCPU() - 1
	probe, err := newCPUProbe(cpu)
	if err != nil {
		t.Skip(err)
	}
	stamp := func(what string) {
		load, _ := os.ReadFile("/proc/loadavg")
		fmt.Printf("%s %s, loadavg %s", what, time.Now().UTC().Format("2006-01-02 15:04:05 MST"), load)
	}
	stamp("start")
	const rounds, conns, bulkFor = 7, 20000, 2 * time.Second
	const cycles, pinnedConns, pinnedBulk = 21, 10000, int64(1 << 30)
	modes := costModes()
	// attach opens mode m and settles the heap its load left (a GC
	// during a measured round would compete for the CPUs).
	attach := func(m int) costAttached {
		var att costAttached
		if modes[m].open != nil {
			var err error
			if att, err = modes[m].open(); err != nil {
				t.Skip(err)
			}
		}
		runtime.GC()
		return att
	}
	// detach checks what a Source counted (at least want opens in ns)
	// and closes it.
	detach := func(att costAttached, want uint64) {
		if att == nil {
			return
		}
		if src, ok := att.(*Source); ok {
			r, err := src.Read()
			if err != nil {
				t.Fatal(err)
			}
			var opens uint64
			for _, f := range r.ByNetns[ns.Inode] {
				opens += f.Opens
			}
			if opens < want {
				t.Errorf("the program counted %d opens, want at least %d", opens, want)
			}
		}
		if err := att.Close(); err != nil {
			t.Fatal(err)
		}
	}
	churns := make([][]float64, len(modes))
	bulks := make([][]float64, len(modes))
	for i := range rounds * len(modes) {
		m := i % len(modes)
		att := attach(m)
		cr, err := churn(ns, conns)
		if err != nil {
			t.Fatal(err)
		}
		br, err := bulk(ns, bulkFor)
		if err != nil {
			t.Fatal(err)
		}
		churns[m], bulks[m] = append(churns[m], cr), append(bulks[m], br)
		detach(att, conns)
	}
	pChurn := make([][]float64, len(modes)) // CPU ns per connection
	pBusy := make([][]float64, len(modes))  // /proc/stat busy ns per connection
	pBulk := make([][]float64, len(modes))  // CPU ms per GiB
	for c := range cycles {
		for j := range modes {
			m := j
			if c%2 == 1 {
				m = len(modes) - 1 - j
			}
			att := attach(m)
			pc, err := probe.pinnedChurn(ns, pinnedConns)
			if err != nil {
				t.Fatal(err)
			}
			pb, err := probe.pinnedBulk(ns, pinnedBulk)
			if err != nil {
				t.Fatal(err)
			}
			pChurn[m] = append(pChurn[m], float64(pc.cpu().Nanoseconds())/pinnedConns)
			pBusy[m] = append(pBusy[m], float64(pc.busy.Nanoseconds())/pinnedConns)
			pBulk[m] = append(pBulk[m], float64(pb.cpu().Nanoseconds())/1e6/(float64(pinnedBulk)/(1<<30)))
			detach(att, pinnedConns)
		}
	}
	stamp("end of the rounds")
	fmt.Printf("%-54s", fmt.Sprintf("medians: %d rounds (pinned: %d) each, interleaved", rounds, cycles))
	for _, m := range modes {
		fmt.Printf(" %22s", m.name)
	}
	fmt.Println()
	for _, row := range []struct {
		name   string
		v      [][]float64
		scale  float64
		digits int
	}{
		{fmt.Sprintf("loopback connect/close churn (conn/s, %d)", conns), churns, 1, 0},
		{fmt.Sprintf("loopback bulk stream (Gbit/s, %s)", bulkFor), bulks, 1, 2},
		{fmt.Sprintf("pinned churn: CPU us per connection (cpu%d, %d)", cpu, pinnedConns), pChurn, 1e-3, 2},
		{"pinned churn: /proc/stat busy us per connection", pBusy, 1e-3, 2},
		{fmt.Sprintf("pinned bulk: CPU ms per GiB (%d GiB)", pinnedBulk>>30), pBulk, 1, 1},
	} {
		fmt.Printf("%-54s", row.name)
		base := median(row.v[0])
		for m := range modes {
			x := median(row.v[m])
			cell := fmt.Sprintf("%.*f", row.digits, x*row.scale)
			if m > 0 {
				cell += fmt.Sprintf(" (%+.1f%%)", (x/base-1)*100)
			}
			fmt.Printf(" %22s", cell)
		}
		fmt.Println()
	}
	for _, row := range []struct {
		name string
		v    [][]float64
	}{{"pinned churn: paired cost, median (min..max)", pChurn}, {"pinned bulk: paired cost, median (min..max)", pBulk}} {
		fmt.Printf("%-54s %22s", row.name, "")
		for m := range modes[1:] {
			p := paired(row.v[0], row.v[m+1])
			fmt.Printf(" %22s", fmt.Sprintf("%+.1f%% (%+.0f..%+.0f)", median(p), slices.Min(p), slices.Max(p)))
		}
		fmt.Println()
	}
	for m := range modes {
		fmt.Printf("rounds %s: churn %v, bulk %v\n", modes[m].name, round(churns[m], 0), round(bulks[m], 1))
	}
	for m := range modes {
		fmt.Printf("pinned rounds %s: churn us %v, bulk ms/GiB %v\n", modes[m].name, round(scaled(pChurn[m], 1e-3), 1), round(pBulk[m], 0))
	}

	// The targets, for what the commands load (all programs).
	all := slices.IndexFunc(modes, func(m costMode) bool { return m.name == "all programs" })
	pc := paired(pChurn[0], pChurn[all])
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	above := 0
	for _, x := range pc {
		if x > 3 {
			above++
		}
	}
	fmt.Printf("target: churn cost at most 3 %% (pinned CPU per connection, all programs, median of %d paired rounds): %+.1f %%, %d of them above 3 %% -> %s\n",
		len(pc), median(pc), above, verdict(median(pc) <= 3))
	pb := paired(pBulk[0], pBulk[all])
	more := 0
	for _, x := range pb {
		if x > 0 {
			more++
		}
	}
	p := signTest(more, len(pb))
	fmt.Printf("target: no measurable cost on the bulk stream (pinned CPU per GiB, all programs): %+.1f %%, %d of %d paired rounds cost more (sign test p=%.2f; measurable below 0.05) -> %s\n",
		median(pb), more, len(pb), p, verdict(p >= 0.05))

	// One more pinned churn and bulk per mode with the kernel's BPF
	// run-time statistics on (they add two clock reads per run, so not
	// during the rounds above).
	stats, err := ebpf.EnableStats(0) // BPF_STATS_RUN_TIME
	if err != nil {
		t.Logf("no run-time statistics: %v", err)
		return
	}
	defer func() { _ = stats.Close() }()
	var emptyNs map[string]float64 // the empty programs' ns per run
	// Also the lifecycle program as kernels before 5.11 run it: pid and
	// comm from the helpers rather than read from the task.
	helpers := costMode{"lifecycle by helpers", func() (costAttached, error) {
		return Open(Options{Programs: []string{"inet_sock_set_state"}, helperComm: true})
	}}
	for _, m := range append(slices.Clone(modes[1:]), helpers) {
		att, err := m.open()
		if err != nil {
			t.Fatal(err)
		}
		before, err := att.runStats()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := probe.pinnedChurn(ns, pinnedConns); err != nil {
			t.Fatal(err)
		}
		mid, err := att.runStats()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := probe.pinnedBulk(ns, pinnedBulk); err != nil {
			t.Fatal(err)
		}
		after, err := att.runStats()
		_ = att.Close()
		if err != nil {
			t.Fatal(err)
		}
		// The statistics count the warm-ups too.
		const churned = pinnedConns + churnWarmup
		var total, overEmpty, bulkRuns float64
		nsPerRun := map[string]float64{}
		for _, name := range slices.Sorted(maps.Keys(before)) {
			runs := float64(mid[name].RunCount - before[name].RunCount)
			took := float64((mid[name].Runtime - before[name].Runtime).Nanoseconds())
			nsPerRun[name] = took / max(runs, 1)
			total += took
			overEmpty += took - runs*emptyNs[name]
			bulkRuns += float64(after[name].RunCount - mid[name].RunCount)
			fmt.Printf("%s: %s: %.2f runs per connection, %.0f ns per run\n", m.name, name, runs/churned, nsPerRun[name])
		}
		fmt.Printf("%s: %.2f us per connection in all programs", m.name, total/churned/1000)
		if emptyNs == nil {
			emptyNs = nsPerRun
		} else {
			fmt.Printf(", %.2f over the empty programs'", overEmpty/churned/1000)
		}
		fmt.Printf(" (run-time statistics on); %.0f runs in the pinned bulk stream (%d GiB and its warm-up)\n", bulkRuns, pinnedBulk>>30)
	}
}

// paired returns each round's with/without ratio as a percentage change
// (rounds of one cycle ran next to each other).
func paired(without, with []float64) []float64 {
	out := make([]float64, min(len(without), len(with)))
	for i := range out {
		out[i] = (with[i]/without[i] - 1) * 100
	}
	return out
}

// signTest is the one-sided probability of k or more of n paired rounds
// costing more by chance alone (each one half).
func signTest(k, n int) float64 {
	p, c := 0.0, 1.0 // c = n choose i
	for i := 0; i <= n; i++ {
		if i >= k {
			p += c
		}
		c = c * float64(n-i) / float64(i+1)
	}
	return p / math.Pow(2, float64(n))
}

func scaled(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * f
	}
	return out
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
