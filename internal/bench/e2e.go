// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procnet"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// Command is one row of the end-to-end bench: a tcpdoctor command line
// and the ss that shows the same information, if any.
type Command struct {
	// Name selects the row (--only).
	Name string
	// Args follow our executable.
	Args []string
	// SS is the ss command line timed against it; nil: timed alone.
	SS []string
	// Waits is the sleeping the command does by design (its interval);
	// the table reports the time above it.
	Waits time.Duration
	// Serve marks the exporter: started once, scraped, then killed.
	Serve bool
	// Named rows run only when --only names them.
	Named bool
}

// Commands are the rows in the order they run.
func Commands(serveInterval time.Duration) []Command {
	return []Command{
		{Name: "sockets", Args: []string{"sockets"}, SS: []string{"ss", "-tinmp"}},
		{Name: "no-owners", Args: []string{"sockets", "--no-owners"}, SS: []string{"ss", "-tinm"}},
		{Name: "json", Args: []string{"sockets", "--json"}, SS: []string{"ss", "-tinmp"}},
		// Owners as without eBPF (not root, or --bpf off): a readlink of
		// every /proc/PID/fd entry, as ss -p does.
		{Name: "proc-owners", Args: []string{"sockets", "--bpf", "off"}, SS: []string{"ss", "-tinmp"}},
		// Owners from the kernel's file walk whatever the host's open
		// files (--bpf on): with proc-owners, where the walk starts to pay
		// (collect.KernelFilesMin). Only when named.
		{Name: "kernel-owners", Args: []string{"sockets", "--bpf", "on"}, SS: []string{"ss", "-tinmp"}, Named: true},
		{Name: "check", Args: []string{"check", "--interval", "1s", "--json"}, Waits: time.Second},
		{Name: "record", Args: []string{"record", "--count", "2", "--interval", "1s", "-o", os.DevNull}, Waits: time.Second},
		{Name: "serve", Args: []string{"serve", "--listen", "127.0.0.1:0", "--interval", serveInterval.String()}, Serve: true},
	}
}

// E2EOptions configure EndToEnd.
type E2EOptions struct {
	// Sizes are TCP sockets in the namespace: Size/2 established
	// connections with both ends held, plus one listener per holder.
	Sizes []int
	// Runs of each command; pairs alternate (ours, ss, ours, ss ...).
	Runs int
	// Only names the rows to run (Command.Name); empty runs all.
	Only []string
	// Scrapes of serve's /metrics, ScrapeEvery apart, once its first
	// window is diagnosed; ServeInterval is its --interval.
	Scrapes       int
	ScrapeEvery   time.Duration
	ServeInterval time.Duration
	// Timeout bounds one run of one command; MaxRSS (bytes) kills a child
	// that grows beyond it. Both are reported as the row's error.
	Timeout time.Duration
	MaxRSS  int64
	// Exe is our executable, the binary users run.
	Exe string
	// Parallel holders connect at a time while the namespace fills.
	Parallel int
	// Phases times, at each size, the collection library's parts in
	// the bench's own process (Library) for the phases tables
	// (WritePhases): the product carries no timing flag.
	Phases bool
	// Procs idle processes (sleep) are started on the host before the
	// sizes, for a host with many processes: the owner walks of sockets
	// and ss -p visit every process. They are killed at the end.
	Procs int
	// OnSize, if set, is called as each size completes (to print it
	// before the next size, and before the namespace is torn down).
	OnSize   func(r *E2EResult, i int)
	ProcRoot string
	Self     Self
	Progress io.Writer
}

// Run is one timed run of one process.
type Run struct {
	Wall    time.Duration // fork to reaped, as time(1) sees it
	PeakRSS int64         // ru_maxrss of the reaped child, bytes
	// Floor is our own resident size when the child started: a PeakRSS
	// not above it means "at most Floor" (see lowerHWM).
	Floor int64
	// Phases, for a run timed in parts, is where its time went.
	Phases *RunPhases
	// User and System are the child's CPU time (its rusage).
	User, System time.Duration
}

// Row is one command measured at one size.
type Row struct {
	Command
	Ours, Theirs []Run // ours and ss, in run order
	// Scrapes are serve's scrape latencies (request to last byte).
	Scrapes []time.Duration
	// Err says why the row is incomplete (timeout, memory limit, exit).
	Err string
}

// SizeResult is one size: the namespace, what filling it cost, the rows.
type SizeResult struct {
	Want     int // sockets asked for
	Sockets  int // TCP sockets in use in the namespace (sockstat inuse)
	Conns    int
	Holders  int
	Setup    time.Duration // filling the namespace up from the previous size
	Kernel   KernelMem     // after filling, and at the start of the bench
	Base     KernelMem
	LoadFrom string // /proc/loadavg before and after the rows
	LoadTo   string
	// Files is the host's open files (fs/file-nr) before the rows: the
	// owner walks of sockets and ss -p read every one.
	Files int64
	// Procs is the processes on the host before the rows, the bench's
	// idle ones (IdleProcs) among them.
	Procs, IdleProcs int
	Rows             []Row
	// Library, with E2EOptions.Phases, is Runs collections of the
	// namespace (sockets with owners) by the collection library in the
	// bench's process, timed in parts.
	Library []Run
}

// KernelMem is the kernel memory that grows with sockets: /proc/meminfo
// Slab and SUnreclaim, and TCP's page count from sockstat (bytes).
type KernelMem struct {
	Slab, SUnreclaim, TCPMem int64
}

// E2EResult is what EndToEnd measured.
type E2EResult struct {
	Netns  string
	Kernel string
	Runs   int
	Sizes  []SizeResult
}

// EndToEnd fills one lab namespace up to each size in turn and runs each
// command as a separate process in it (setns before exec, output to
// /dev/null), against the matching ss, recording wall time and peak RSS.
func EndToEnd(ctx context.Context, o E2EOptions) (*E2EResult, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	sizes := slices.Clone(o.Sizes)
	slices.Sort(sizes)
	var cmds []Command
	for _, c := range Commands(o.ServeInterval) {
		if len(o.Only) == 0 && !c.Named || slices.Contains(o.Only, c.Name) {
			cmds = append(cmds, c)
		}
	}
	sp, err := emptySpace(o.Self)
	if err != nil {
		return nil, err
	}
	defer func() {
		o.progress("removing netns %s and its %d holders...", sp.name, len(sp.holders))
		sp.close()
	}()
	idle, err := startIdle(o.Procs)
	defer idle.stop()
	if err != nil {
		return nil, err
	}
	res := &E2EResult{Netns: sp.name, Kernel: collect.KernelRelease(), Runs: o.Runs}
	base, err := kernelMem(sp.ns)
	if err != nil {
		return nil, err
	}
	for _, size := range sizes {
		// Cancelled between sizes (OnSize could not write): measure no more.
		if err := ctx.Err(); err != nil {
			return res, err
		}
		conns := size / 2
		o.progress("filling netns %s to %d connections (%d sockets)...", sp.name, conns, size)
		start := time.Now()
		if err := sp.grow(ctx, conns, o.Parallel); err != nil {
			return nil, err
		}
		sr := SizeResult{Want: size, Conns: sp.conns, Holders: len(sp.holders), Setup: time.Since(start), Base: base}
		runtime.GC()
		if sr.Kernel, err = kernelMem(sp.ns); err != nil {
			return nil, err
		}
		if sr.Sockets, err = socketsInUse(sp.ns); err != nil {
			return nil, err
		}
		sr.LoadFrom = loadavg(o.ProcRoot)
		sr.Files = collect.OpenFiles(o.ProcRoot)
		sr.Procs, sr.IdleProcs = countProcs(o.ProcRoot), len(idle)
		for _, c := range cmds {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			o.progress("%d sockets: %s", sr.Sockets, strings.Join(c.Args, " "))
			sr.Rows = append(sr.Rows, o.row(ctx, sp.ns, c))
		}
		if o.Phases {
			o.progress("%d sockets: the collection library's parts", sr.Sockets)
			if sr.Library, err = o.library(sp.ns); err != nil {
				return nil, err
			}
		}
		sr.LoadTo = loadavg(o.ProcRoot)
		res.Sizes = append(res.Sizes, sr)
		if o.OnSize != nil {
			o.OnSize(res, len(res.Sizes)-1)
		}
	}
	return res, ctx.Err()
}

func (o *E2EOptions) validate() error {
	if len(o.Sizes) == 0 || o.Runs < 1 || o.Runs > 50 || o.Scrapes < 1 || o.Scrapes > 1000 || o.Procs < 0 || o.Procs > MaxIdle {
		return fmt.Errorf("bench: --sizes, --runs 1..50, --scrapes 1..1000, --procs 0..%d", MaxIdle)
	}
	for _, s := range o.Sizes {
		if s < 2 || s/2 > MaxConns {
			return fmt.Errorf("bench: a size is 2..%d sockets", 2*MaxConns)
		}
	}
	var names []string
	for _, c := range Commands(time.Second) {
		names = append(names, c.Name)
	}
	for _, n := range o.Only {
		if !slices.Contains(names, n) {
			return fmt.Errorf("bench: no command %q (have %s)", n, strings.Join(names, ", "))
		}
	}
	if o.Timeout <= 0 || o.MaxRSS <= 0 || o.ServeInterval <= 0 || o.ScrapeEvery <= 0 || o.Exe == "" {
		return errors.New("bench: timeout, memory limit, serve interval, scrape spacing and executable must be set")
	}
	return nil
}

func (o *E2EOptions) progress(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "tcpdoctor: bench: "+format+"\n", a...)
	}
}

// row runs one command o.Runs times (alternating with its ss) or, for
// serve, once with its scrapes. The first failure ends the row.
func (o *E2EOptions) row(ctx context.Context, ns netns.NS, c Command) Row {
	r := Row{Command: c}
	ours := append([]string{o.Exe}, c.Args...)
	if c.Serve {
		run, scrapes, err := o.serve(ctx, ns, ours)
		if err != nil {
			r.Err = err.Error()
			return r
		}
		r.Ours, r.Scrapes = []Run{run}, scrapes
		return r
	}
	for range o.Runs {
		run, err := o.once(ctx, ns, ours, c.Name == "check")
		if err != nil {
			r.Err = err.Error()
			return r
		}
		r.Ours = append(r.Ours, run)
		if c.SS == nil {
			continue
		}
		if run, err = o.once(ctx, ns, c.SS, false); err != nil {
			r.Err = err.Error()
			return r
		}
		r.Theirs = append(r.Theirs, run)
	}
	return r
}

// once runs argv in ns to the end, stdout to /dev/null, and times it.
// findingsOK accepts exit status 1 (check's "findings").
func (o *E2EOptions) once(ctx context.Context, ns netns.NS, argv []string, findingsOK bool) (Run, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return Run{}, err
	}
	defer devnull.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = devnull
	stderr := &tail{max: 2048}
	cmd.Stderr = stderr
	floor := o.lowerHWM()
	var start time.Time
	// Started from a thread inside ns: the child is born there.
	if err := netns.Do(ns, func() error { start = time.Now(); return cmd.Start() }); err != nil {
		return Run{}, fmt.Errorf("%s: %w", argv[0], err)
	}
	stop := o.watch(ctx, cmd.Process.Pid, func() { _ = cmd.Process.Kill() })
	werr := cmd.Wait()
	wall := time.Since(start)
	killedBy := stop()
	name := strings.Join(argv, " ")
	if killedBy != "" {
		return Run{}, fmt.Errorf("%s: %s", name, killedBy)
	}
	var ee *exec.ExitError
	if werr != nil && !(findingsOK && errors.As(werr, &ee) && ee.ExitCode() == 1) {
		return Run{}, fmt.Errorf("%s: %w: %s", name, werr, strings.TrimSpace(stderr.String()))
	}
	rss, err := maxRSS(cmd.ProcessState)
	if err != nil {
		return Run{}, err
	}
	return Run{Wall: wall, PeakRSS: rss, Floor: floor, User: cmd.ProcessState.UserTime(), System: cmd.ProcessState.SystemTime()}, nil
}

// lowerHWM brings our own peak RSS down to what we hold now and returns
// it. The child shares our memory until it execs, and the kernel counts
// that memory's peak into the child's ru_maxrss: a child's peak at or
// below this floor is only known to be at most the floor.
func (o *E2EOptions) lowerHWM() int64 {
	debug.FreeOSMemory()
	// 5: reset the peak resident size to the current one (proc(5)).
	_ = os.WriteFile(o.ProcRoot+"/self/clear_refs", []byte("5"), 0)
	b, err := os.ReadFile(o.ProcRoot + "/self/status")
	if err != nil {
		return 0
	}
	return statusKB(b, "VmHWM:") * 1024
}

// watch kills pid (with kill) when ctx ends, o.Timeout passes or its
// resident memory passes o.MaxRSS. stop ends the watch and says why the
// child was killed, if it was.
func (o *E2EOptions) watch(ctx context.Context, pid int, kill func()) (stop func() string) {
	done := make(chan struct{})
	why := make(chan string, 1)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		deadline := time.NewTimer(o.Timeout)
		defer deadline.Stop()
		for {
			select {
			case <-done:
				why <- ""
				return
			case <-ctx.Done():
				kill()
				<-done
				why <- "interrupted"
				return
			case <-deadline.C:
				kill()
				<-done
				why <- fmt.Sprintf("killed after %s (--timeout)", o.Timeout)
				return
			case <-t.C:
				if rss := residentBytes(o.ProcRoot, pid); rss > o.MaxRSS {
					kill()
					<-done
					why <- fmt.Sprintf("killed at %s resident, above --max-rss %s", mb(rss), mb(o.MaxRSS))
					return
				}
			}
		}
	}()
	return func() string {
		close(done)
		return <-why
	}
}

// serve starts the exporter in ns, waits for its first diagnosed window
// (collections_total >= 2), scrapes it o.Scrapes times and kills it. The
// run's Wall is the time to that first window.
func (o *E2EOptions) serve(ctx context.Context, ns netns.NS, argv []string) (Run, []time.Duration, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return Run{}, nil, err
	}
	floor := o.lowerHWM()
	var start time.Time
	if err := netns.Do(ns, func() error { start = time.Now(); return cmd.Start() }); err != nil {
		return Run{}, nil, fmt.Errorf("serve: %w", err)
	}
	stop := o.watch(ctx, cmd.Process.Pid, func() { _ = cmd.Process.Kill() })
	end := func() string {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return stop()
	}
	// fail prefers why the watch killed the exporter to what that broke.
	fail := func(err error) (Run, []time.Duration, error) {
		if why := end(); why != "" {
			err = errors.New(why)
		}
		return Run{}, nil, fmt.Errorf("serve: %w", err)
	}
	addr, err := serveAddr(errPipe)
	if err != nil {
		return fail(err)
	}
	go func() { _, _ = io.Copy(io.Discard, errPipe) }()
	// The exporter listens inside ns: dial it from there.
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.Do(ns, func() (err error) {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	defer client.CloseIdleConnections()
	url := "http://" + addr + "/metrics"
	var ready time.Duration
	for {
		m, _, err := scrape(client, url)
		if err != nil {
			return fail(err)
		}
		if m["tcpdoctor_collections_total"] >= 2 {
			ready = time.Since(start)
			break
		}
		if err := window.Sleep(ctx, 100*time.Millisecond); err != nil {
			return fail(err)
		}
	}
	var lat []time.Duration
	for range o.Scrapes {
		if err := window.Sleep(ctx, o.ScrapeEvery); err != nil {
			return fail(err)
		}
		s := time.Now()
		if _, _, err := scrape(client, url); err != nil {
			return fail(err)
		}
		lat = append(lat, time.Since(s))
	}
	if why := end(); why != "" {
		return Run{}, nil, fmt.Errorf("serve: %s", why)
	}
	rss, err := maxRSS(cmd.ProcessState)
	if err != nil {
		return Run{}, nil, err
	}
	return Run{Wall: ready, PeakRSS: rss, Floor: floor}, lat, nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }

// residentBytes is pid's VmRSS, 0 if it cannot be read (it has exited).
func residentBytes(procRoot string, pid int) int64 {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	return statusKB(b, "VmRSS:") * 1024
}

// statusKB reads a "Key:   N kB" line of /proc/PID/status or meminfo.
func statusKB(b []byte, key string) int64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// kernelMem reads meminfo (host-wide) and sockstat's TCP pages (ns).
func kernelMem(ns netns.NS) (KernelMem, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return KernelMem{}, fmt.Errorf("bench: %w", err)
	}
	st, err := sockstat(ns)
	if err != nil {
		return KernelMem{}, err
	}
	return KernelMem{
		Slab:       statusKB(b, "Slab:") * 1024,
		SUnreclaim: statusKB(b, "SUnreclaim:") * 1024,
		TCPMem:     st["TCP.mem"] * int64(os.Getpagesize()),
	}, nil
}

// socketsInUse is sockstat's TCP inuse in ns (counted per namespace).
func socketsInUse(ns netns.NS) (int, error) {
	st, err := sockstat(ns)
	if err != nil {
		return 0, err
	}
	return int(st["TCP.inuse"]), nil
}

func sockstat(ns netns.NS) (map[string]int64, error) {
	m := map[string]int64{}
	err := netns.Do(ns, func() error {
		// thread-self: /proc/self/net would show the main thread's namespace.
		f, err := os.Open("/proc/thread-self/net/sockstat")
		if err != nil {
			return err
		}
		defer f.Close()
		return procnet.ParseSockstat(f, m)
	})
	if err != nil {
		return nil, fmt.Errorf("bench: sockstat: %w", err)
	}
	return m, nil
}

func loadavg(procRoot string) string {
	b, err := os.ReadFile(procRoot + "/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
