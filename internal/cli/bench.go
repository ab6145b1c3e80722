package cli

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
)

type benchOpts struct {
	conns  int
	runs   int
	once   string // hidden: collect once in this netns and report peak RSS
	holdIn string // hidden: open --conns connections in this netns and hold them
}

// perHolder keeps each holder process under a 20,000 fd hard limit, which
// a root without CAP_SYS_RESOURCE cannot raise.
const perHolder = 9000

// newBenchCmd measures collection against ss on sockets it creates in a
// namespace of its own (docs/performance.md).
func newBenchCmd(e *Env) *cobra.Command {
	o := &benchOpts{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure collection speed and memory against ss on N connections in a private namespace (root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.once != "" {
				return benchOnce(e, o.once)
			}
			if o.holdIn != "" {
				return benchHold(cmd, e, o)
			}
			return runBench(e, o)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.conns, "conns", 40000, "established connections to create (two sockets each)")
	fs.IntVar(&o.runs, "runs", 5, "timed runs of each contender (the median is reported)")
	fs.StringVar(&o.once, "once-in", "", "internal: collect once in this namespace and print peak RSS")
	fs.StringVar(&o.holdIn, "hold-in", "", "internal: open and hold connections in this namespace")
	_ = fs.MarkHidden("once-in")
	_ = fs.MarkHidden("hold-in")
	return cmd
}

func runBench(e *Env, o *benchOpts) error {
	if os.Geteuid() != 0 {
		return usageErr("bench: needs root (creates a network namespace)")
	}
	if o.conns < 1 || o.conns > 200000 || o.runs < 1 || o.runs > 50 {
		return usageErr("bench: --conns 1..200000, --runs 1..50")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "tdbench-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("bench: ip netns add: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("bench: lo up: %v: %s", err, out)
	}
	ns, err := netns.Default().Named(name)
	if err != nil {
		return err
	}
	e.progress("bench: opening %d connections in netns %s...", o.conns, name)
	stop, err := startHolders(e, name, o.conns)
	defer stop()
	if err != nil {
		return err
	}
	sockets := 0
	plain := &collect.Collector{Opts: collect.Options{ProcRoot: e.ProcRoot}, Now: time.Now}
	owned := &collect.Collector{Opts: collect.Options{Owners: true, ProcRoot: e.ProcRoot}, Now: time.Now}
	timeIt := func(f func() error) (time.Duration, error) {
		var ds []time.Duration
		for i := 0; i < o.runs; i++ {
			runtime.GC()
			start := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2], nil
	}
	ours, err := timeIt(func() error {
		s := plain.Collect([]netns.NS{ns})[0]
		sockets = len(s.Sockets)
		if len(s.Errors) > 0 {
			return fmt.Errorf("bench: %s: %s", s.Errors[0].Source, s.Errors[0].Err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	oursP, err := timeIt(func() error { owned.Collect([]netns.NS{ns}); return nil })
	if err != nil {
		return err
	}
	ssRun := func(args ...string) func() error {
		return func() error {
			return netns.Do(ns, func() error {
				cmd := exec.Command("ss", args...)
				cmd.Stdout = nil // discarded, as our collection prints nothing
				return cmd.Run()
			})
		}
	}
	ssT, err := timeIt(ssRun("-tinm"))
	if err != nil {
		return fmt.Errorf("bench: ss -tinm: %w", err)
	}
	ssP, err := timeIt(ssRun("-tinmp"))
	if err != nil {
		return fmt.Errorf("bench: ss -tinmp: %w", err)
	}
	rss, err := childPeakRSS(e, name)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "sockets\t%d\t(%d established connections + listeners, kernel %s)\n", sockets, o.conns, collect.KernelRelease())
	fmt.Fprintf(tw, "collection (sockets + tcp_info + meminfo)\t%s\tss -tinm\t%s\tratio %.1fx\n", ours.Round(time.Millisecond/10), ssT.Round(time.Millisecond/10), float64(ssT)/float64(ours))
	fmt.Fprintf(tw, "collection with owners\t%s\tss -tinmp\t%s\tratio %.1fx\n", oursP.Round(time.Millisecond/10), ssP.Round(time.Millisecond/10), float64(ssP)/float64(oursP))
	fmt.Fprintf(tw, "peak RSS of a collecting process (with owners)\t%.1f MB\n", float64(rss)/1e6)
	fmt.Fprintf(tw, "median of %d runs each\n", o.runs)
	return tw.Flush()
}

// startHolders starts holder processes that open n connections between
// them and waits until all are established. stop ends them (by PID: they
// are our children) and is safe to call on error.
func startHolders(e *Env, ns string, n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for left := n; left > 0; left -= perHolder {
		k := min(left, perHolder)
		c := exec.Command(e.Args0, "bench", "--hold-in", ns, "--conns", strconv.Itoa(k))
		c.Stderr = e.Stderr
		out, err := c.StdoutPipe()
		if err != nil {
			return stop, err
		}
		if err := c.Start(); err != nil {
			return stop, fmt.Errorf("bench: start holder: %w", err)
		}
		cmds = append(cmds, c)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "ready") {
			return stop, fmt.Errorf("bench: holder failed: %q %v", line, err)
		}
	}
	return stop, nil
}

// benchHold runs in a child: open --conns connections to a listener of its
// own inside the namespace, say "ready", and hold them until killed or
// for ten minutes at most.
func benchHold(cmd *cobra.Command, e *Env, o *benchOpts) error {
	ns, err := netns.Default().Named(o.holdIn)
	if err != nil {
		return err
	}
	if o.conns > perHolder {
		return usageErr("bench: a holder takes at most %d connections", perHolder)
	}
	var fds []int
	err = netns.Do(ns, func() error {
		l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, l)
		if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(l, 4096); err != nil {
			return err
		}
		sa, err := unix.Getsockname(l)
		if err != nil {
			return err
		}
		for i := 0; i < o.conns; i++ {
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("bench: socket %d: %w", i, err)
			}
			fds = append(fds, c)
			if err := unix.Connect(c, sa); err != nil {
				return fmt.Errorf("bench: connect %d: %w", i, err)
			}
			a, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
			if err != nil {
				return fmt.Errorf("bench: accept %d: %w", i, err)
			}
			fds = append(fds, a)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(e.Stdout, "ready")
	_ = e.Sleep(cmd.Context(), 10*time.Minute)
	for _, fd := range fds {
		unix.Close(fd)
	}
	return nil
}

// childPeakRSS runs a fresh tcpdoctor that collects once (with owners)
// and returns its peak resident memory from the kernel's rusage.
func childPeakRSS(e *Env, ns string) (int64, error) {
	cmd := exec.Command(e.Args0, "bench", "--once-in", ns)
	cmd.Stderr = e.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("bench: child collector: %w", err)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, errors.New("bench: no rusage for child")
	}
	var r struct{ Sockets int }
	if err := json.Unmarshal(out, &r); err != nil || r.Sockets == 0 {
		return 0, fmt.Errorf("bench: child collected nothing: %s", out)
	}
	return ru.Maxrss * 1024, nil
}

func benchOnce(e *Env, name string) error {
	ns, err := netns.Default().Named(name)
	if err != nil {
		return err
	}
	c := &collect.Collector{Opts: collect.Options{Owners: true, ProcRoot: e.ProcRoot}, Now: time.Now}
	s := c.Collect([]netns.NS{ns})[0]
	return json.NewEncoder(e.Stdout).Encode(map[string]int{"Sockets": len(s.Sockets)})
}
