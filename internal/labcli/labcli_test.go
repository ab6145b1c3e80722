// SPDX-License-Identifier: Apache-2.0

package labcli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

// runLab runs tcpdoctor-lab in process and returns its exit code, stdout
// and stderr.
func runLab(t *testing.T, e *Env, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if e == nil {
		e = &Env{ProcRoot: "/proc"}
	}
	e.Stdout, e.Stderr = &out, &errb
	code := run(context.Background(), args, e)
	return code, out.String(), errb.String()
}

// TestUsageErrors: bad command lines exit 2 with one line saying why.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"rn"}, `unknown command "rn" (did you mean run?)`},
		{[]string{"zzzz"}, "(tcpdoctor-lab --help lists them)"},
		{[]string{"nosuch"}, "unknown command"},
		{[]string{"link-bench", "--rate", "100"}, "has no unit"},
		{[]string{"run", "no-such-scenario"}, `unknown scenario "no-such-scenario" (see tcpdoctor-lab list)`},
		{[]string{"run", "c1", "--quick"}, `unknown scenario "c1" (did you mean c1-rpc-connections?)`},
		{[]string{"run", "C2"}, "(did you mean c2-accept-backlog, c2-port-exhaustion, c2-app-cap?)"},
		{[]string{"bench", "--sizes", "nine"}, "--sizes"},
		{[]string{"run"}, "run: name one scenario, or all (tcpdoctor-lab list lists them)"},
		{[]string{"run", "a", "b"}, "run: name one scenario"},
		{[]string{"list", "--bogus"}, "unknown flag: --bogus (see tcpdoctor-lab list --help)"},
	} {
		code, _, stderr := runLab(t, nil, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.msg) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want %d and one line with %q", tc.args, code, stderr, ExitUsage, tc.msg)
		}
	}
}

// TestRunCompletion completes the scenario names and "all".
func TestRunCompletion(t *testing.T) {
	_, out, _ := runLab(t, nil, "__complete", "run", "")
	for _, w := range []string{"all", "c1-rpc-connections", "c5-small-rcvbuf"} {
		if !slices.Contains(strings.Split(out, "\n"), w) {
			t.Errorf("%q missing from %q", w, out)
		}
	}
}

// TestFindTcpdoctor: --tcpdoctor first, then the tcpdoctor next to
// tcpdoctor-lab, then $PATH; none is a usage error saying how to give one.
func TestFindTcpdoctor(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	exe := func(path string) string {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	self := exe(filepath.Join(dir, "tcpdoctor-lab"))
	onPath := exe(filepath.Join(other, "tcpdoctor"))
	lookPath := func(string) (string, error) { return onPath, nil }
	noPath := func(string) (string, error) { return "", errors.New("not found") }

	e := &Env{Self: self, LookPath: lookPath}
	if got, err := e.tcpdoctor(); err != nil || got != onPath {
		t.Errorf("nothing beside: %q %v, want $PATH's %q", got, err, onPath)
	}
	next := exe(filepath.Join(dir, "tcpdoctor"))
	if got, err := e.tcpdoctor(); err != nil || got != next {
		t.Errorf("one beside: %q %v, want %q", got, err, next)
	}
	flag := exe(filepath.Join(t.TempDir(), "my-tcpdoctor"))
	e.tcpdoctorFlag = flag
	if got, err := e.tcpdoctor(); err != nil || got != flag {
		t.Errorf("--tcpdoctor: %q %v, want %q", got, err, flag)
	}
	e.tcpdoctorFlag = filepath.Join(dir, "missing")
	if _, err := e.tcpdoctor(); !isUsage(err) || !strings.Contains(err.Error(), "--tcpdoctor") {
		t.Errorf("--tcpdoctor missing: %v, want a usage error", err)
	}
	e = &Env{Self: filepath.Join(other, "sub", "tcpdoctor-lab"), LookPath: noPath}
	if _, err := e.tcpdoctor(); !isUsage(err) || !strings.Contains(err.Error(), "give --tcpdoctor PATH") {
		t.Errorf("none anywhere: %v, want a usage error naming --tcpdoctor", err)
	}
}

func isUsage(err error) bool {
	var ee *exitError
	return errors.As(err, &ee) && ee.code == ExitUsage
}

// TestVersion: --version prints the build on one line, as tcpdoctor's
// does, and the real environment carries this binary's build.
func TestVersion(t *testing.T) {
	b := version.Info{Version: "v9.8.7-test", Commit: "0123abc", Date: "2026-01-02T03:04:05Z", GoVersion: "go1.99", Platform: "linux/amd64"}
	code, out, stderr := runLab(t, &Env{ProcRoot: "/proc", Build: b}, "--version")
	if want := "tcpdoctor-lab " + b.String() + "\n"; code != ExitOK || out != want || stderr != "" {
		t.Errorf("--version: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, stderr, want)
	}
	code, out, _ = runLab(t, nil, "--version")
	if want := "tcpdoctor-lab " + version.FromBuildInfo("", nil).String() + "\n"; code != ExitOK || out != want {
		t.Errorf("--version of an unknown build: exit %d, %q; want %q", code, out, want)
	}
	if got, want := DefaultEnv().Build, version.Get(); got != want {
		t.Errorf("DefaultEnv().Build = %+v, want version.Get() %+v", got, want)
	}
}

// TestShellCompletion: tcpdoctor-lab writes bash, zsh and fish
// completions, as tcpdoctor does, and they complete its own commands.
func TestShellCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, stderr := runLab(t, nil, "completion", shell)
		if code != ExitOK || !strings.Contains(out, "tcpdoctor-lab") || stderr != "" {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", shell, code, stderr, len(out))
		}
	}
	_, out, _ := runLab(t, nil, "__complete", "")
	got := strings.Split(out, "\n")
	for _, w := range []string{"list", "run", "clean", "link-bench", "completion"} {
		if !slices.ContainsFunc(got, func(l string) bool { return strings.HasPrefix(l, w+"\t") || l == w }) {
			t.Errorf("command %q missing from %q", w, out)
		}
	}
	for _, hidden := range []string{"traffic", "delay-line", "hold"} {
		if slices.ContainsFunc(got, func(l string) bool { return strings.HasPrefix(l, hidden+"\t") || l == hidden }) {
			t.Errorf("hidden command %q completed: %q", hidden, out)
		}
	}
}

// TestLongHelpFitsEightyColumns: every command's description keeps its
// own line breaks inside 80 columns, so a terminal of 80 does not break
// its lines again mid-word.
func TestLongHelpFitsEightyColumns(t *testing.T) {
	todo := []*cobra.Command{NewRoot(&Env{ProcRoot: "/proc"})}
	for len(todo) > 0 {
		c := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], c.Commands()...)
		for i, line := range strings.Split(c.Long, "\n") {
			if n := utf8.RuneCountInString(line); n > 80 {
				t.Errorf("%s: line %d of its description is %d columns: %q", c.CommandPath(), i+1, n, line)
			}
		}
	}
}
