// SPDX-License-Identifier: Apache-2.0

package labcli

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/cobra"
)

// TestCleansUpCommands: the commands that build namespaces or start
// processes are the ones that catch SIGPIPE (docs/lab.md lists them).
func TestCleansUpCommands(t *testing.T) {
	var got []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Annotations[cleansUp] != "" {
			got = append(got, c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRoot(&Env{Stdout: io.Discard, Stderr: io.Discard}))
	slices.Sort(got)
	want := []string{"tcpdoctor-lab bench", "tcpdoctor-lab link-bench", "tcpdoctor-lab run", "tcpdoctor-lab serve-bench", "tcpdoctor-lab trace-bench"}
	if !slices.Equal(got, want) {
		t.Errorf("commands marked cleansUp: %v, want %v", got, want)
	}
}

// TestCatchSIGPIPEWhen: the root calls Env.CatchSIGPIPE before a command
// marked cleansUp runs (also one that fails its flags' checks), and never
// for the others.
func TestCatchSIGPIPEWhen(t *testing.T) {
	for _, c := range []struct {
		args  []string
		catch bool
	}{
		{[]string{"bench", "--sizes", "nine"}, true},
		{[]string{"run", "no-such-scenario"}, true},
		{[]string{"list"}, false},
		{[]string{"clean", "extra"}, false},
	} {
		caught := 0
		e := &Env{Stdout: io.Discard, Stderr: io.Discard, ProcRoot: "/proc", CatchSIGPIPE: func() { caught++ }}
		run(context.Background(), c.args, e)
		if (caught > 0) != c.catch || caught > 1 {
			t.Errorf("%s: CatchSIGPIPE called %d times, want it called: %v", strings.Join(c.args, " "), caught, c.catch)
		}
	}
}

// TestStickyWriter keeps the first error and writes nothing after it.
func TestStickyWriter(t *testing.T) {
	var b strings.Builder
	fails := 0
	w := &stickyWriter{w: writerFunc(func(p []byte) (int, error) {
		if strings.HasPrefix(string(p), "bad") {
			fails++
			return 0, syscall.EPIPE
		}
		return b.WriteString(string(p))
	})}
	for _, s := range []string{"one ", "bad", "two"} {
		_, _ = w.Write([]byte(s))
	}
	if !errors.Is(w.err, syscall.EPIPE) || b.String() != "one " || fails != 1 {
		t.Errorf("err %v, wrote %q, %d failed writes; want EPIPE, %q, 1", w.err, b.String(), fails, "one ")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
