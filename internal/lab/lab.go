// SPDX-License-Identifier: Apache-2.0

// Package lab reproduces the case catalogue in network namespaces: it
// builds a topology with an emulated link, runs traffic, has tcpdoctor
// diagnose it (`tcpdoctor check --from` a recording of its namespaces),
// applies the fix, runs again and reports a before/after table with a
// verdict.
package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/linkemu"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// PidDir holds one file per lab run listing the PIDs it started, so that
// `lab clean` can end them (and only them) after a killed run.
const PidDir = "/run/tcpdoctor-lab"

// Options are what every scenario run shares.
type Options struct {
	// Self is the lab's executable (tcpdoctor-lab): the traffic
	// generators and the delay line run from it.
	Self string
	// Tcpdoctor is the product's executable: the lab diagnoses what it
	// collected with `tcpdoctor check --from`, as a user would.
	Tcpdoctor string
	// DelayLine is the argv that makes Self serve a delay line
	// (linkemu.Params.Exec); empty runs it in this process.
	DelayLine []string
	// Quick runs a reduced matrix with shorter loads (CI).
	Quick bool
	// Keep leaves namespaces and processes in place for inspection.
	Keep bool
	// Log receives progress lines.
	Log io.Writer
	// HTMLDir, when set, receives the trace reports of the scenarios that
	// record one (tcpdoctor trace --html).
	HTMLDir string
}

// Scenario is one reproducible case.
type Scenario struct {
	Name  string // stable id, e.g. "c2-accept-backlog"
	Case  string // C1..C5 or "-"
	Title string
	// Expect lists the rules that must fire (warning or above) before the
	// fix; at least one of them must, and none may after it.
	Expect []string
	Run    func(ctx context.Context, o Options) (*Result, error)
}

// Table is a before/after table.
type Table struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Result is one scenario's outcome.
type Result struct {
	Scenario   string         `json:"scenario"`
	Case       string         `json:"case"`
	Title      string         `json:"title"`
	Table      Table          `json:"table"`
	Before     []diag.Finding `json:"findings_before"`
	After      []diag.Finding `json:"findings_after"`
	Expected   []string       `json:"expected_rules"`
	Reproduced bool           `json:"reproduced"`
	// Verdict explains Reproduced in one or more sentences.
	Verdict []string `json:"verdict"`
	// Notes says where this kernel or the quick form differs from the
	// case as reported.
	Notes   []string      `json:"notes,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Testbed is one scenario's world: its topology, link and processes.
// Close undoes all of it.
type Testbed struct {
	Opts Options
	Topo *topo.Topo
	Link *linkemu.Link

	// ctx is the scenario's context: Ctrl-C cancels it, and waiting on a
	// traffic process then stops at once.
	ctx     context.Context
	mu      sync.Mutex
	procs   []*Proc
	pidFile string
}

// Setup is what a testbed is built from.
type Setup struct {
	Topo topo.Config
	// Link, when set, puts an emulated link between the client and the
	// server; its Exec defaults to Options.DelayLine.
	Link *linkemu.Params
}

// NewTestbed builds a topology and, with s.Link, the emulated link. On
// error it removes what it built and returns nil.
func NewTestbed(ctx context.Context, o Options, s Setup) (_ *Testbed, err error) {
	tb := &Testbed{Opts: o, ctx: ctx}
	defer func() {
		if err != nil {
			tb.Opts.Keep = false // nothing half-built is left behind
			err = errors.Join(err, tb.Close())
		}
	}()
	if tb.Topo, err = topo.Build(s.Topo); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(PidDir, 0o755); err == nil {
		tb.pidFile = filepath.Join(PidDir, tb.Topo.Run+".pids")
	}
	if s.Link != nil {
		p := *s.Link
		if p.Exec == nil {
			p.Exec = o.DelayLine
		}
		if tb.Link, err = linkemu.Start(tb.Topo, p); err != nil {
			return nil, err
		}
	}
	return tb, nil
}

// Logf prints a progress line.
func (tb *Testbed) Logf(format string, a ...any) {
	if tb.Opts.Log != nil {
		fmt.Fprintf(tb.Opts.Log, "lab: "+format+"\n", a...)
	}
}

// Proc is a traffic process the lab started inside a namespace.
type Proc struct {
	Name string
	Pid  int
	// Ready is the server's ready line ({"ready":true,"addr":...}).
	Ready json.RawMessage

	ctx    context.Context
	cmd    *exec.Cmd
	out    *bufio.Reader
	stderr bytes.Buffer
	done   chan struct{}
	result []byte
	err    error
}

// Start runs `Self traffic ARGS...` inside namespace ns. If wantReady, it
// waits (up to 15 s) for the ready line servers print.
func (tb *Testbed) Start(ns string, wantReady bool, args ...string) (*Proc, error) {
	return tb.start(ns, args[0], wantReady, append([]string{tb.Opts.Self, "traffic"}, args...))
}

// StartProgram runs argv, another program than ours (nginx), inside
// namespace ns, as Start does, without waiting for a ready line: the
// caller waits for it to listen. Stop ends it with SIGTERM.
func (tb *Testbed) StartProgram(ns string, argv ...string) (*Proc, error) {
	return tb.start(ns, filepath.Base(argv[0]), false, argv)
}

// start runs argv in namespace ns as the process name.
func (tb *Testbed) start(ns, name string, wantReady bool, argv []string) (*Proc, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	ctx := tb.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	p := &Proc{Name: name, ctx: ctx, cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &p.stderr
	// Its own process group: Close ends the process, never anything else.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// Pdeathsig fires when the forking thread ends, not the process, and
	// goroutines that lock a thread to enter a namespace end theirs: fork
	// from a locked thread that stays until the process is reaped.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			<-p.done
		}
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("lab: start %s: %w", p.Name, err)
	}
	p.Pid = cmd.Process.Pid // ip netns exec execs the program in place
	p.out = bufio.NewReaderSize(stdout, 1<<16)
	tb.mu.Lock()
	tb.procs = append(tb.procs, p)
	tb.recordPids()
	tb.mu.Unlock()
	if wantReady {
		line := make(chan []byte, 1)
		go func() {
			b, _ := p.out.ReadBytes('\n')
			line <- b
		}()
		select {
		case b := <-line:
			if !bytes.Contains(b, []byte(`"ready"`)) {
				p.reap()
				return nil, fmt.Errorf("lab: %s did not start: %s %s", p.Name, bytes.TrimSpace(b), strings.TrimSpace(p.stderr.String()))
			}
			p.Ready = bytes.TrimSpace(b)
		case <-time.After(15 * time.Second):
			p.reap()
			return nil, fmt.Errorf("lab: %s not ready after 15s: %s", p.Name, strings.TrimSpace(p.stderr.String()))
		}
	}
	go func() {
		b, _ := io.ReadAll(p.out)
		p.err = cmd.Wait()
		p.result = lastLine(b)
		close(p.done)
	}()
	return p, nil
}

// Wait waits for the process to finish (at most timeout, or until the run
// is cancelled) and decodes its JSON result line into v.
func (p *Proc) Wait(timeout time.Duration, v any) error {
	select {
	case <-p.done:
	case <-p.ctx.Done():
		p.Stop()
		return fmt.Errorf("lab: %s: %w", p.Name, p.ctx.Err())
	case <-time.After(timeout):
		p.kill()
		<-p.done
		return fmt.Errorf("lab: %s still running after %v; killed", p.Name, timeout)
	}
	if p.err != nil {
		return fmt.Errorf("lab: %s: %w: %s", p.Name, p.err, strings.TrimSpace(p.stderr.String()))
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(p.result, v); err != nil {
		return fmt.Errorf("lab: %s result %q: %w", p.Name, p.result, err)
	}
	return nil
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process (SIGTERM, then SIGKILL) and waits for it.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		p.kill()
		<-p.done
	}
}

func (p *Proc) kill() { _ = p.cmd.Process.Kill() }

// reap kills a process that failed to start and waits for it, which also
// frees the thread that forked it.
func (p *Proc) reap() {
	p.kill()
	p.err = p.cmd.Wait()
	close(p.done)
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// recordPids writes the PIDs started so far; the caller holds tb.mu.
func (tb *Testbed) recordPids() {
	if tb.pidFile == "" {
		return
	}
	var b strings.Builder
	for _, p := range tb.procs {
		b.WriteString(strconv.Itoa(p.Pid) + "\n")
	}
	_ = os.WriteFile(tb.pidFile, []byte(b.String()), 0o644)
}

// Check diagnoses the given lab namespaces over interval: it takes two
// samples of them (sockets with owners and buffer lock bits), records
// them as `tcpdoctor record` does, and has the product diagnose the
// recording (`tcpdoctor check --from FILE --json`, with the emulated
// link's rate as --bandwidth), whose report it returns.
func (tb *Testbed) Check(ctx context.Context, interval time.Duration, nsNames ...string) (*report.Report, error) {
	if tb.Opts.Tcpdoctor == "" {
		return nil, errors.New("lab: check: no tcpdoctor executable to diagnose with")
	}
	f := netns.Default()
	var nss []netns.NS
	for _, n := range nsNames {
		ns, err := f.Named(n)
		if err != nil {
			return nil, err
		}
		nss = append(nss, ns)
	}
	rec, err := os.CreateTemp("", "tcpdoctor-lab-*.jsonl")
	if err != nil {
		return nil, fmt.Errorf("lab: check: %w", err)
	}
	defer os.Remove(rec.Name())
	err = recordSamples(ctx, rec, nss, interval)
	if cerr := rec.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("lab: check: %w", err)
	}
	args := []string{"check", "--from", rec.Name(), "--json"}
	if tb.Link != nil {
		if bw := tb.linkRate(); bw > 0 {
			args = append(args, "--bandwidth", strconv.FormatFloat(bw, 'f', 0, 64)+"bit")
		}
	}
	return runCheck(ctx, tb.Opts.Tcpdoctor, args)
}

// recordSamples writes two samples of nss, interval apart, to w.
func recordSamples(ctx context.Context, w io.Writer, nss []netns.NS, interval time.Duration) error {
	c := &collect.Collector{Opts: collect.Options{Owners: true, BufLock: true, ProcRoot: "/proc"}, Now: time.Now}
	sw, err := snapshot.NewWriter(w, "tcpdoctor-lab")
	if err != nil {
		return err
	}
	_, err = window.Record(ctx, c, nss, 2, interval, window.Sleep, func(_ int, snaps []*snapshot.Snapshot) error {
		for _, s := range snaps {
			if err := sw.Write(s); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

// runCheck runs `tcpdoctor ARGS` (a check --json) and decodes its
// report: exit 0 (healthy) or 1 (findings) with a report is success.
func runCheck(ctx context.Context, tcpdoctor string, args []string) (*report.Report, error) {
	cmd := exec.CommandContext(ctx, tcpdoctor, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return nil, fmt.Errorf("lab: %s %s: %w: %s", tcpdoctor, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	var rep report.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("lab: %s %s: reading its report: %w", tcpdoctor, strings.Join(args, " "), err)
	}
	return &rep, nil
}

// linkRate is the slower configured direction, 0 when unlimited.
func (tb *Testbed) linkRate() float64 {
	p := tb.Link.Params()
	switch {
	case p.RateUp == 0:
		return p.RateDown
	case p.RateDown == 0:
		return p.RateUp
	}
	return min(p.RateUp, p.RateDown)
}

// Close stops every process the run started, the link and the topology,
// unless Keep is set. It is safe to call twice.
func (tb *Testbed) Close() error {
	if tb.Opts.Keep {
		tb.Logf("--keep: leaving run %s in place (tcpdoctor-lab clean removes it)", tb.runID())
		return nil
	}
	tb.mu.Lock()
	procs := tb.procs
	tb.procs = nil
	tb.mu.Unlock()
	for _, p := range procs {
		p.Stop()
	}
	var errs []error
	if tb.Link != nil {
		errs = append(errs, tb.Link.Close())
	}
	if tb.Topo != nil {
		errs = append(errs, tb.Topo.Close())
	}
	if tb.pidFile != "" {
		_ = os.Remove(tb.pidFile)
	}
	return errors.Join(errs...)
}

func (tb *Testbed) runID() string {
	if tb.Topo == nil {
		return "?"
	}
	return tb.Topo.Run
}

// Clean removes what killed runs left: namespaces named tdlab-* and the
// processes recorded in PidDir (only those, by PID, and only if they are
// still our traffic executable).
func Clean(ctx context.Context, self string, log io.Writer) error {
	files, _ := filepath.Glob(filepath.Join(PidDir, "*.pids"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(line)
			if err != nil || pid <= 1 {
				continue
			}
			if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && sameFile(exe, self) {
				fmt.Fprintf(log, "lab clean: ending traffic pid %d\n", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.Remove(f)
	}
	return topo.Clean(ctx, nil, topo.Prefix)
}

func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// FiredOn reports the findings of rule ids at warning or above.
func FiredOn(fs []diag.Finding, ids ...string) []diag.Finding {
	var out []diag.Finding
	for _, f := range fs {
		if f.Severity < diag.Warning {
			continue
		}
		for _, id := range ids {
			if f.Rule == id {
				out = append(out, f)
			}
		}
	}
	return out
}
