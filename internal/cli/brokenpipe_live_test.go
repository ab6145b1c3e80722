package cli

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"
	"github.com/tcpdoctor/tcpdoctor/internal/testns"
)

// TestBenchClosedStdout runs the built tcpdoctor's bench as `bench | head
// -1` would: stdout a pipe the test closes after the first line. The bench
// must stop (no size measured after the failed write), remove its
// namespaces and holders, and exit 3 saying the write broke, not die by
// SIGPIPE with its namespaces left behind.
func TestBenchClosedStdout(t *testing.T) {
	testns.NeedRoot(t)
	if testing.Short() {
		t.Skip("builds tcpdoctor and a lab namespace: not in -short")
	}
	bin := testns.Tcpdoctor(t)
	// Three sizes (100, 200, 300 connections): the write fails after the
	// first or the second, and the third must never be filled.
	cmd := exec.Command(bin, "bench", "--sizes", "200,400,600", "--runs", "1", "--only", "no-owners", "--timeout", "30s")
	// If this test process dies, the bench is told to stop and clean up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout = w // the pipe itself is the child's fd 1, as in a shell
	// A file, not a pipe: Wait must not wait for the holders, which
	// inherit the bench's stderr.
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd.Stderr = errFile
	stderr := func() string {
		b, _ := os.ReadFile(errFile.Name())
		return string(b)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var werr error // set when done closes
	done := make(chan struct{})
	go func() { werr = cmd.Wait(); close(done) }()
	// Whatever happens below, the bench ends by its PID, and whatever it
	// left (the namespaces of its run) is removed.
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
		if run := benchRun(stderr()); run != "" {
			if err := topo.Clean(context.Background(), nil, run); err != nil {
				t.Logf("cleaning %s: %v", run, err)
			}
		}
	})

	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		lines <- line
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "kernel ") {
			t.Errorf("first line %q, want the bench's header", line)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("no line on stdout within 2 minutes; stderr:\n%s", stderr())
	}
	r.Close() // the reader goes away, as head does after its line

	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("bench still running 2 minutes after stdout closed (killed); stderr:\n%s", stderr())
	}
	out := stderr()
	t.Logf("bench: %v; stderr:\n%s", werr, out)
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		t.Fatalf("bench exited %v, want exit status 3", werr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("bench killed by %v, want exit status 3", ws.Signal())
	} else if ee.ExitCode() != ExitCollect {
		t.Errorf("bench exit status %d, want %d", ee.ExitCode(), ExitCollect)
	}
	if !strings.Contains(out, "tcpdoctor: bench: writing results: ") || !strings.Contains(out, "broken pipe") {
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
	left, err := topo.List(run)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if pids := holdersIn(t, run); len(pids) > 0 {
		t.Errorf("holder processes left behind: %v", pids)
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

// holdersIn lists the processes whose command line names a namespace of
// run (the bench's holders run "bench --hold-in NAME").
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
		if strings.Contains(string(b), "--hold-in\x00"+run) {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}
