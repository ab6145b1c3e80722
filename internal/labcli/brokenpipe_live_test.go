// SPDX-License-Identifier: Apache-2.0

package labcli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/lab"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// TestBenchClosedStdout runs the built tcpdoctor-lab's bench as `bench | head
// -1` would: stdout a pipe the test closes after the first line. The bench
// must stop (no size measured after the failed write), remove its
// namespaces and holders, and exit 3 saying the write broke, not die by
// SIGPIPE with its namespaces left behind.
func TestBenchClosedStdout(t *testing.T) {
	testns.NeedRoot(t)
	if testing.Short() {
		t.Skip("builds tcpdoctor-lab and a lab namespace: not in -short")
	}
	// Three sizes (100, 200, 300 connections): the write fails after the
	// first or the second, and the third must never be filled.
	p := headOne(t, false, "bench", "--sizes", "200,400,600", "--runs", "1", "--only", "no-owners", "--timeout", "30s")
	if !strings.HasPrefix(p.line, "kernel ") {
		t.Errorf("first line %q, want the bench's header", p.line)
	}
	out := p.stderr()
	wantExit3(t, p.err)
	if !strings.Contains(out, "tcpdoctor-lab: bench: writing results: ") || !strings.Contains(out, "broken pipe") {
		t.Errorf("stderr lacks the one-line error \"bench: writing results: ... broken pipe\"")
	}
	if strings.Contains(out, "to 300 connections") {
		t.Errorf("the bench filled its third size after its output closed")
	}
	run := benchRun(out)
	if run == "" {
		t.Fatal("stderr names no namespace")
	}
	if !strings.Contains(out, "removing netns "+run) {
		t.Errorf("the bench never said it removed its namespace")
	}
	if left, err := topo.List(run); err != nil || len(left) > 0 {
		t.Errorf("namespaces left behind: %v %v", left, err)
	}
	if pids := holdersIn(t, run); len(pids) > 0 {
		t.Errorf("holder processes left behind: %v", pids)
	}
}

// TestLabClosedOutput runs the built tcpdoctor-lab as `tcpdoctor-lab run
// NAME 2>&1 | head -1` would: its first progress line read, then stdout and
// stderr closed while the scenario runs. The scenario must go on to remove
// its namespaces (recorded as owned by the lab's PID in
// topo.DefaultStateDir) and the lab exit 3, not die by SIGPIPE.
func TestLabClosedOutput(t *testing.T) {
	testns.NeedRoot(t)
	if testing.Short() {
		t.Skip("builds tcpdoctor-lab and runs a lab scenario: not in -short")
	}
	p := headOne(t, true, "run", "c2-accept-backlog", "--quick")
	if !strings.HasPrefix(p.line, "lab: running c2-accept-backlog") {
		t.Errorf("first line %q, want the lab's first progress line", p.line)
	}
	wantExit3(t, p.err)
	for _, run := range ownedBy(t, p.pid, p.start) {
		left, _ := topo.List(run)
		t.Errorf("the lab left run %s behind: namespaces %v", run, left)
	}
}

// piped is a tcpdoctor-lab run whose reader went away after one line.
type piped struct {
	line       string // the first line it wrote
	err        error  // from Wait
	pid        int
	start      string // field 22 of its /proc/PID/stat
	stderr     func() string
	stderrFile string
}

// headOne runs the built tcpdoctor-lab (tcpdoctor beside it) with args, stdout (and, with both,
// stderr) a pipe the test closes after reading one line, as `| head -1`
// does, and waits for it to exit: at most 2 minutes for the line and 2 for
// the exit, then it is killed by its PID and the test fails. Whatever its
// runs left in topo.DefaultStateDir is removed when the test ends.
func headOne(t *testing.T, both bool, args ...string) *piped {
	t.Helper()
	bin := testns.Lab(t)
	cmd := exec.Command(bin, args...)
	// If this test process dies, tcpdoctor-lab is told to stop and clean up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout = w // the pipe itself is the child's fd 1, as in a shell
	p := &piped{stderrFile: filepath.Join(t.TempDir(), "stderr")}
	p.stderr = func() string {
		b, _ := os.ReadFile(p.stderrFile)
		return string(b)
	}
	if both {
		cmd.Stderr = w
	} else {
		// A file, not a pipe read by a goroutine: Wait must not wait for
		// the bench's holders, which inherit its stderr.
		f, err := os.Create(p.stderrFile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stderr = f
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p.pid = cmd.Process.Pid
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid)); err == nil {
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			if f := strings.Fields(string(b)[i+1:]); len(f) >= 20 {
				p.start = f[19]
			}
		}
	}
	done := make(chan struct{})
	go func() { p.err = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
		runs := ownedBy(t, p.pid, p.start)
		if run := benchRun(p.stderr()); run != "" {
			runs = append(runs, run)
		}
		for _, run := range runs {
			if err := topo.Clean(context.Background(), nil, run); err != nil {
				t.Logf("cleaning %s: %v", run, err)
			}
			// The traffic processes it recorded died with it (PR_SET_PDEATHSIG).
			id := strings.TrimSuffix(strings.TrimPrefix(run, topo.Prefix), "-")
			_ = os.Remove(filepath.Join(lab.PidDir, id+".pids"))
		}
	})
	if p.start == "" {
		t.Fatalf("no start time for pid %d", p.pid)
	}

	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		lines <- line
	}()
	select {
	case p.line = <-lines:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%v: no line within 2 minutes; stderr:\n%s", args, p.stderr())
	}
	r.Close() // the reader goes away, as head does after its line
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%v: still running 2 minutes after its output closed (killed); stderr:\n%s", args, p.stderr())
	}
	t.Logf("%v: %v; stderr:\n%s", args, p.err, p.stderr())
	return p
}

// wantExit3 wants exit status 3 from err (Wait's), not death by a signal.
func wantExit3(t *testing.T, err error) {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case !errors.As(err, &ee):
		t.Errorf("exited %v, want exit status %d", err, ExitCollect)
	case ee.Sys().(syscall.WaitStatus).Signaled():
		t.Errorf("killed by %v, want exit status %d", ee.Sys().(syscall.WaitStatus).Signal(), ExitCollect)
	case ee.ExitCode() != ExitCollect:
		t.Errorf("exit status %d, want %d", ee.ExitCode(), ExitCollect)
	}
}

// benchRun is the prefix of the namespaces of the bench run whose stderr
// is out ("tdlab-1f8e9d-" from "filling netns tdlab-1f8e9d-server"), ""
// if it names none.
func benchRun(out string) string {
	m := regexp.MustCompile(`filling netns (` + topo.Prefix + `[0-9a-f]+-)server `).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// ownedBy is the prefixes of the runs whose owner file in
// topo.DefaultStateDir names process pid started at start: topologies
// it built and did not remove.
func ownedBy(t *testing.T, pid int, start string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(topo.DefaultStateDir, topo.Prefix+"*.owner"))
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	want := fmt.Sprintf("%d %s\n", pid, start)
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && string(b) == want {
			runs = append(runs, strings.TrimSuffix(filepath.Base(f), ".owner")+"-")
		}
	}
	return runs
}

// holdersIn lists the processes whose command line names a namespace of
// run (the bench's holders run "tcpdoctor-lab hold NAME").
func holdersIn(t *testing.T, run string) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		if strings.Contains(string(b), "hold\x00"+run) {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}
