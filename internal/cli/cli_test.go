// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

const overflowFixture = "../rules/testdata/listen-overflow/fires.jsonl"

// run calls Main in-process and returns exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &Env{
		Stdout: &out, Stderr: &errb,
		Getenv:   func(string) string { return "" },
		Now:      time.Now,
		Sleep:    func(ctx context.Context, d time.Duration) error { return window.Sleep(ctx, d) },
		ProcRoot: "/proc",
	}
	code := Main(args, e)
	return code, out.String(), errb.String()
}

// runProcess runs tcpdoctor as a process of its own (this test binary,
// TestMain), as users run it: its collection shares no Go runtime with
// the test's own sockets and goroutines.
func runProcess(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(args, "\x1f"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatalf("%v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (rerun with -update if intended):\n%s", path, got)
	}
}

func TestCheckFromFileText(t *testing.T) {
	code, out, _ := run(t, "check", "--from", overflowFixture)
	if code != ExitFindings {
		t.Fatalf("exit %d, want %d", code, ExitFindings)
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour codes without a terminal")
	}
	golden(t, "check-listen-overflow.txt", out)
}

// TestCheckWrapsToWidth: at a terminal's width (here $COLUMNS), every
// line but a command fits, continuations indented under their text; the
// words are the unwrapped report's.
func TestCheckWrapsToWidth(t *testing.T) {
	_, flat, _ := run(t, "check", "--from", overflowFixture)
	for _, cols := range []int{80, 120} {
		var out, errb bytes.Buffer
		e := &Env{Stdout: &out, Stderr: &errb, Now: time.Now, ProcRoot: "/proc",
			Getenv: func(k string) string {
				if k == "COLUMNS" {
					return strconv.Itoa(cols)
				}
				return ""
			}}
		if code := Main([]string{"check", "--from", overflowFixture}, e); code != ExitFindings {
			t.Fatalf("%d columns: exit %d: %s", cols, code, errb.String())
		}
		golden(t, fmt.Sprintf("check-listen-overflow-%d.txt", cols), out.String())
		commands := map[string]bool{}
		for _, l := range strings.Split(flat, "\n") {
			if strings.HasPrefix(l, "        ") {
				commands[l] = true
			}
		}
		for _, l := range strings.Split(out.String(), "\n") {
			if utf8.RuneCountInString(l) > cols && !commands[l] {
				t.Errorf("%d columns: line of %d: %q", cols, utf8.RuneCountInString(l), l)
			}
		}
		if strings.Join(strings.Fields(out.String()), " ") != strings.Join(strings.Fields(flat), " ") {
			t.Errorf("%d columns: the words differ from the unwrapped report", cols)
		}
	}
}

func TestCheckFromFileJSON(t *testing.T) {
	code, out, _ := run(t, "check", "--from", overflowFixture, "--json")
	if code != ExitFindings {
		t.Fatalf("exit %d", code)
	}
	var rep struct {
		Version  int `json:"version"`
		Window   struct{ Seconds float64 }
		Findings []struct {
			Rule     string
			Severity string
			Subject  struct {
				Netns, Local, Command string
				Pid                   int
			}
			Evidence []struct{ Name, Value, Source string }
			Fixes    []struct{ Scope, Text, Command string }
		}
		Unknown []struct{ Rule, Reason string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Version != 1 || rep.Window.Seconds != 5 {
		t.Errorf("version %d window %v", rep.Version, rep.Window.Seconds)
	}
	if len(rep.Findings) == 0 {
		t.Fatal("no findings")
	}
	f := rep.Findings[0]
	if f.Rule != "listen-overflow" || f.Severity != "critical" || f.Subject.Pid != 4242 || f.Subject.Local != "0.0.0.0:8080" || f.Subject.Command != "java" {
		t.Errorf("first finding: %+v", f)
	}
	// Rules whose inputs the fixture lacks are unknown, never healthy.
	if len(rep.Unknown) == 0 {
		t.Error("fixture lacks tcp_info, yet no rule reported unknown")
	}
}

func TestCheckFailOn(t *testing.T) {
	if code, _, _ := run(t, "check", "--from", overflowFixture, "--fail-on", "critical"); code != ExitFindings {
		t.Errorf("critical finding with --fail-on critical: exit %d", code)
	}
	quiet := "../rules/testdata/listen-overflow/quiet.jsonl"
	if code, out, _ := run(t, "check", "--from", quiet, "--rule", "listen-overflow"); code != ExitOK || !strings.Contains(out, "OK") {
		t.Errorf("quiet fixture: exit %d\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.jsonl")
	os.WriteFile(corrupt, []byte("{\"format\":\"tcpdoctor-snapshot\",\"version\":1}\n{\"taken\": 12\n"), 0o644)
	foreign := filepath.Join(dir, "foreign.json")
	os.WriteFile(foreign, []byte(`{"hello":"world"}`), 0o644)
	future := filepath.Join(dir, "future.jsonl")
	os.WriteFile(future, []byte("{\"format\":\"tcpdoctor-snapshot\",\"version\":99}\n"), 0o644)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"check", "--bogus"}, "unknown flag: --bogus (see tcpdoctor check --help)"},
		{[]string{"check", "--interval", "5"}, `missing unit in duration "5" (see tcpdoctor check --help)`},
		{[]string{"bdp", "--rtt", "20ms", "--bandwidth", "1"}, `tcpdoctor: --bandwidth: bdp: rate "1" has no unit`},
		{[]string{"explain"}, "explain: name one rule (tcpdoctor rules lists them)"},
		{[]string{"explain", "a", "b"}, "explain: name one rule"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"chek"}, `unknown command "chek" for "tcpdoctor"; did you mean "check"?`},
		{[]string{"check", "--netns", "a", "--all-netns"}, "exclude each other"},
		{[]string{"check", "--fail-on", "sometimes"}, "unknown severity"},
		{[]string{"check", "--from", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"check", "--from", corrupt}, "line 2"},
		{[]string{"check", "--from", foreign}, "not a tcpdoctor snapshot file"},
		{[]string{"check", "--from", future}, "version 99 not supported"},
		{[]string{"check", "--from", overflowFixture, "--rule", "nope"}, "unknown rule"},
		{[]string{"check", "--from", overflowFixture, "--bandwidth", "fast"}, "--bandwidth"},
		// A bare number is no rate: 100 bit/s made "BDP: 0 bytes".
		{[]string{"check", "--from", overflowFixture, "--bandwidth", "100"}, "has no unit"},
		{[]string{"bdp", "--rtt", "20ms", "--bandwidth", "100"}, "has no unit"},
		{[]string{"trace", "--from", overflowFixture, "--bandwidth", "100"}, "has no unit"},
		{[]string{"serve", "--bandwidth", "100"}, "has no unit"},
		{[]string{"sockets", "--from", overflowFixture, "--state", "sleepy"}, `unknown state "sleepy" (want estab, syn-sent,`},
		{[]string{"sockets", "--from", overflowFixture, "--port", "70000"}, "out of range"},
		{[]string{"record"}, "-o FILE is required"},
		{[]string{"serve", "--max-connections", "0"}, "--max-connections must be 1..10000"},
		{[]string{"explain", "nope"}, "unknown rule"},
	} {
		code, _, stderr := run(t, tc.args...)
		if strings.Contains(stderr, `\n`) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: stderr %q is not one line", tc.args, stderr)
		}
		if code != ExitUsage || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, stderr, tc.msg)
		}
	}
}

func TestSocketsFromFile(t *testing.T) {
	code, out, _ := run(t, "sockets", "--from", overflowFixture, "--json", "--state", "listen")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d listeners, want 3", len(rows))
	}
	for _, k := range []string{"netns", "state", "local", "remote", "recv_q", "send_q", "inode", "cookie", "pid", "command", "tcp_info", "mem"} {
		if _, ok := rows[0][k]; !ok {
			t.Errorf("sockets --json lacks %q", k)
		}
	}
	code, out, _ = run(t, "sockets", "--from", overflowFixture, "--port", "8080")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	golden(t, "sockets-port-8080.txt", out)
}

func TestRulesAndExplain(t *testing.T) {
	code, out, _ := run(t, "rules")
	if code != ExitOK || !strings.Contains(out, "listen-overflow") {
		t.Fatalf("rules: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, "explain", "listen-overflow")
	if code != ExitOK || !strings.HasPrefix(out, "#") {
		t.Fatalf("explain: exit %d\n%.200s", code, out)
	}
}

func TestBDP(t *testing.T) {
	code, out, _ := run(t, "bdp", "--rtt", "20ms", "--bandwidth", "100mbit", "--from", overflowFixture)
	if code != ExitOK || !strings.Contains(out, "BDP: 250000 bytes") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	golden(t, "bdp-20ms-100mbit.txt", out)
	if code, _, _ := run(t, "bdp", "--rtt", "20ms"); code != ExitUsage {
		t.Errorf("bdp without --bandwidth: exit %d", code)
	}
}

// A system error whose text reads like a usage error (EINVAL is "invalid
// argument") exits 3, and bad arguments exit 2 by their type.
func TestExitCodeByType(t *testing.T) {
	root := NewRoot(&Env{Stdout: io.Discard, Stderr: io.Discard})
	sysErr := fmt.Errorf("sock_diag: %w", syscall.EINVAL)
	if code := exitCode(root, []string{"sockets"}, sysErr, io.Discard); code != ExitCollect {
		t.Errorf("EINVAL from a command: exit %d, want %d", code, ExitCollect)
	}
	for _, args := range [][]string{{"explain"}, {"explain", "a", "b"}, {"rules", "extra"}} {
		if code, _, stderr := run(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, stderr, ExitUsage)
		}
	}
}
