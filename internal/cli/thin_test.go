// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"go/build"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestNoKernelReader keeps the CLI thin: flags, options and exit codes.
// The kernel readers are the collectors' and the tracer's to call; a
// command that needs one asks the package that owns its domain.
func TestNoKernelReader(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatalf("read the package's imports: %v", err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports read")
	}
	for _, imp := range pkg.Imports {
		for _, reader := range []string{"sockdiag", "procnet", "procs"} {
			if strings.HasSuffix(imp, "/internal/"+reader) {
				t.Errorf("internal/cli imports %s: the kernel readers belong to collect, trace and the like", imp)
			}
		}
	}
}

// TestOneJSONOption: every command's --json is the one option, with one
// help text.
func TestOneJSONOption(t *testing.T) {
	root := NewRoot(&Env{Stdout: io.Discard, Stderr: io.Discard})
	var want jsonOpt
	fs := pflag.NewFlagSet("want", pflag.ContinueOnError)
	want.register(fs)
	usage := fs.Lookup("json").Usage
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if f := c.Flags().Lookup("json"); f != nil {
			n++
			if f.Usage != usage || f.Value.Type() != "bool" {
				t.Errorf("%s: --json is its own (%s %q), not the shared option", c.CommandPath(), f.Value.Type(), f.Usage)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if n < 7 {
		t.Errorf("%d commands with --json, want check, history, sockets, trace, watch, bdp and version at least", n)
	}
}
