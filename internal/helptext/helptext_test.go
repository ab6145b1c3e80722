// SPDX-License-Identifier: Apache-2.0

package helptext_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/cli"
	"github.com/tcpdoctor/tcpdoctor/internal/helptext"
	"github.com/tcpdoctor/tcpdoctor/internal/labcli"
)

// TestHelpFits prints --help of every command of tcpdoctor and
// tcpdoctor-lab (completion and help included) and wants no line wider
// than 80 columns, and every flag still listed. A command to copy
// (a tab-indented line of cobra's completion help) stays whole.
func TestHelpFits(t *testing.T) {
	var out bytes.Buffer
	roots := []*cobra.Command{
		cli.NewRoot(&cli.Env{Stdout: &out, Stderr: io.Discard}),
		labcli.NewRoot(&labcli.Env{Stdout: &out, Stderr: io.Discard}),
	}
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		out.Reset()
		if err := c.Help(); err != nil {
			t.Fatalf("%s --help: %v", c.CommandPath(), err)
		}
		n++
		help := out.String()
		for i, l := range strings.Split(help, "\n") {
			if w := len([]rune(l)); w > helptext.Width && !strings.HasPrefix(l, "\t") {
				t.Errorf("%s --help line %d is %d columns: %q", c.CommandPath(), i+1, w, l)
			}
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !strings.Contains(help, "--"+f.Name+" ") && !strings.Contains(help, "--"+f.Name+"\n") {
				t.Errorf("%s --help does not list --%s", c.CommandPath(), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, r := range roots {
		// What Execute adds before it runs a command.
		r.InitDefaultHelpCmd()
		r.InitDefaultCompletionCmd()
		walk(r)
	}
	if n < 20 {
		t.Fatalf("only %d commands' help printed", n)
	}
}

func TestReflow(t *testing.T) {
	in := "one two three four five six seven\neight nine\n\n  kept   as\n  written\n\n" + strings.Repeat("x", 30) + " end"
	want := "one two three\nfour five six\nseven eight\nnine\n\n  kept   as\n  written\n\n" + strings.Repeat("x", 30) + "\nend"
	if got := helptext.Reflow(in, 14); got != want {
		t.Errorf("Reflow:\n%s\nwant:\n%s", got, want)
	}
	if got := helptext.Reflow("", 10); got != "" {
		t.Errorf("Reflow of nothing = %q", got)
	}
}
