// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/serve"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// childArgs, set in the environment, makes the test binary run Main with
// these arguments (separated by US, 0x1f) instead of the tests: a tcpdoctor to
// send signals to. Its Sleep says on stderr when it starts waiting.
const childArgs = "TCPDOCTOR_CLI_TEST_ARGS"

const sleepingMark = "test: sleeping"

// childSegment, set in the environment with childArgs, is the span of
// the child serve's timeline segments (serve.Options.History.SegmentSpan;
// no flag sets it).
const childSegment = "TCPDOCTOR_CLI_TEST_SEGMENT"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(childArgs); ok {
		e := DefaultEnv()
		e.Sleep = func(ctx context.Context, d time.Duration) error {
			fmt.Fprintln(os.Stderr, sleepingMark)
			return window.Sleep(ctx, d)
		}
		if seg, err := time.ParseDuration(os.Getenv(childSegment)); err == nil {
			e.TuneServe = func(o *serve.Options) { o.History.SegmentSpan = seg }
		}
		os.Exit(Main(strings.Split(args, "\x1f"), e))
	}
	os.Exit(m.Run())
}

// TestSignalExitCodes sends a real signal to a running tcpdoctor: a
// command cut short exits 128+signal saying "interrupted"; those that run
// until stopped (trace without --duration, serve) exit as they would
// have. Commands run without root, with --bpf off, over loopback.
func TestSignalExitCodes(t *testing.T) {
	rec := filepath.Join(t.TempDir(), "rec.jsonl")
	for _, c := range []struct {
		args   []string
		sig    syscall.Signal
		ready  string // on stderr when the signal is due
		code   int
		stderr string
	}{
		{[]string{"check", "--interval", "30s", "--bpf", "off", "--no-owners"}, syscall.SIGINT, sleepingMark, 130, "tcpdoctor: interrupted\n"},
		{[]string{"sockets", "--interval", "30s", "--bpf", "off", "--no-owners"}, syscall.SIGINT, sleepingMark, 130, "tcpdoctor: interrupted\n"},
		{[]string{"record", "--interval", "30s", "--count", "3", "--bpf", "off", "--no-owners", "-o", rec}, syscall.SIGTERM, sleepingMark, 143, "tcpdoctor: interrupted\n"},
		{[]string{"trace", "--port", "1", "--rate", "10", "--bpf", "off"}, syscall.SIGINT, "until Ctrl-C", 0, "no connection matched port 1"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--interval", "30s", "--bpf", "off", "--no-owners"}, syscall.SIGTERM, "serving http://127.0.0.1:", 0, ""},
	} {
		name := c.args[0] + " " + c.sig.String()
		code, stdout, stderr := signalled(t, c.args, c.sig, c.ready)
		if code != c.code || !strings.Contains(stderr+stdout, c.stderr) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", name, code, stdout, stderr, c.code, c.stderr)
		}
		if strings.Contains(stderr, "context canceled") {
			t.Errorf("%s: stderr says %q", name, stderr)
		}
	}
	// The recorder, stopped in its second wait, left its first sample whole.
	f, err := os.Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if snaps, err := snapshot.ReadAll(f); err != nil || len(snaps) != 1 {
		t.Errorf("record: %d samples readable after SIGTERM, %v; want 1", len(snaps), err)
	}
}

// signalled runs tcpdoctor args as a child, sends sig once ready shows on
// its stderr, and returns its exit code and output. The child is killed
// if it runs past 20 s.
func signalled(t *testing.T, args []string, sig syscall.Signal, ready string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(args, "\x1f"))
	var stdout strings.Builder
	cmd.Stdout = &stdout
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	sc := bufio.NewScanner(pipe)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		if line == sleepingMark {
			if !sent && ready == sleepingMark {
				_ = cmd.Process.Signal(sig)
				sent = true
			}
			continue
		}
		stderr.WriteString(line + "\n")
		if !sent && strings.Contains(line, ready) {
			_ = cmd.Process.Signal(sig)
			sent = true
		}
	}
	err = cmd.Wait()
	if !sent {
		t.Errorf("%v: never showed %q", args, ready)
	}
	if ctx.Err() != nil {
		t.Errorf("%v: killed after 20 s", args)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stdout.String(), stderr.String()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return 0, stdout.String(), stderr.String()
}

// TestInterruptedInProcess: a command whose context a signal cancelled
// exits 128+signal saying "interrupted", not "context canceled" and 3.
func TestInterruptedInProcess(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&interrupted{sig: syscall.SIGINT})
	var out, errb strings.Builder
	e := &Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, Now: time.Now,
		Sleep: window.Sleep, ProcRoot: "/proc"}
	code := runMain(ctx, []string{"sockets", "--interval", "30s", "--bpf", "off", "--no-owners"}, e)
	if code != 130 || errb.String() != "tcpdoctor: interrupted\n" {
		t.Errorf("sockets after SIGINT: exit %d, stderr %q; want 130 and interrupted", code, errb.String())
	}
}

func TestInterruptCode(t *testing.T) {
	lab := errors.New("lab: interrupted; everything the runs created was removed")
	for _, c := range []struct {
		err, cause error
		code       int
		ok         bool
		stderr     string
	}{
		{collectErr(fmt.Errorf("check: %w", context.Canceled)), &interrupted{sig: syscall.SIGTERM}, 143, true, "tcpdoctor: interrupted\n"},
		{context.Canceled, &interrupted{sig: syscall.SIGINT}, 130, true, "tcpdoctor: interrupted\n"},
		// The command said more than that it was cancelled.
		{lab, &interrupted{sig: syscall.SIGINT}, 130, true, "tcpdoctor: " + lab.Error() + "\n"},
		// Stopped normally by the signal: their own codes.
		{nil, &interrupted{sig: syscall.SIGINT}, 0, false, ""},
		{errFindings, &interrupted{sig: syscall.SIGINT}, 0, false, ""},
		// trace stopped by Ctrl-C whose --html could not be written: 3.
		{collectErr(errors.New("trace: --html: write r.html: no space left on device")), &interrupted{sig: syscall.SIGINT}, 0, false, ""},
		// An error said after the signal is escaped like any other.
		{errors.New("lab: interrupted in netns \x1b[2J"), &interrupted{sig: syscall.SIGINT}, 130, true, "tcpdoctor: lab: interrupted in netns \\x1b[2J\n"},
		// Cancelled without a signal: not an interruption.
		{context.Canceled, context.Canceled, 0, false, ""},
		{context.Canceled, nil, 0, false, ""},
	} {
		var b strings.Builder
		code, ok := interruptCode(c.err, c.cause, &b)
		if code != c.code || ok != c.ok || b.String() != c.stderr {
			t.Errorf("%v after %v: %d %v %q, want %d %v %q", c.err, c.cause, code, ok, b.String(), c.code, c.ok, c.stderr)
		}
	}
}
