// SPDX-License-Identifier: Apache-2.0

// Package labcli holds tcpdoctor-lab's commands: the case catalogue's
// scenarios, the traffic generators they run, the link emulator and the
// benches. It runs the product as users do, by executing the tcpdoctor
// binary (Env.tcpdoctor); the product links nothing of it.
package labcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/helptext"
	"github.com/tcpdoctor/tcpdoctor/internal/lab/traffic/trafficcmd"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

// Exit codes, as tcpdoctor's: 1 a scenario not reproduced or a target
// missed, 2 a usage error, 3 a run that failed.
const (
	ExitOK      = 0
	ExitFailed  = 1
	ExitUsage   = 2
	ExitCollect = 3
)

// Env is everything a command touches outside itself.
type Env struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader
	// ProcRoot is "/proc" in production.
	ProcRoot string
	// Self is tcpdoctor-lab's own executable: the traffic generators,
	// the delay line and the bench's holders run from it.
	Self string
	// LookPath finds tcpdoctor on $PATH (exec.LookPath).
	LookPath func(string) (string, error)
	// CatchSIGPIPE, called before a command that builds namespaces or
	// starts processes runs, makes a write to a closed stdout return
	// EPIPE, so the command removes what it built before it exits.
	CatchSIGPIPE func()
	// Build is this binary's version.Get(), which --version prints; the
	// zero value is a "dev" build of this toolchain.
	Build version.Info

	// tcpdoctorFlag is --tcpdoctor.
	tcpdoctorFlag string
}

// DefaultEnv is the real process environment.
func DefaultEnv() *Env {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	return &Env{
		Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, ProcRoot: "/proc", Self: self,
		LookPath:     exec.LookPath,
		CatchSIGPIPE: catchSIGPIPE,
		Build:        version.Get(),
	}
}

// build is Build, or a "dev" build of this toolchain when not known.
func (e *Env) build() version.Info {
	if e.Build.Version == "" {
		return version.FromBuildInfo("", nil)
	}
	return e.Build
}

// catchSIGPIPE asks for SIGPIPE on a channel nobody reads (the signal
// package never blocks on it) rather than ignoring it: an ignored signal
// stays ignored in the processes we exec (holders, ss, traffic, tcpdoctor),
// a caught one is reset to the default.
func catchSIGPIPE() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// tcpdoctor is the product binary the lab and the benches run: the one
// --tcpdoctor names, else the tcpdoctor next to tcpdoctor-lab (a release
// ships them side by side), else the one on $PATH.
func (e *Env) tcpdoctor() (string, error) {
	if e.tcpdoctorFlag != "" {
		if err := isExecutable(e.tcpdoctorFlag); err != nil {
			return "", usageErr("--tcpdoctor: %v", err)
		}
		return filepath.Abs(e.tcpdoctorFlag)
	}
	if e.Self != "" {
		next := filepath.Join(filepath.Dir(e.Self), "tcpdoctor")
		if isExecutable(next) == nil {
			return next, nil
		}
	}
	if e.LookPath != nil {
		if p, err := e.LookPath("tcpdoctor"); err == nil {
			return filepath.Abs(p)
		}
	}
	return "", usageErr("no tcpdoctor next to %s nor on $PATH (give --tcpdoctor PATH)", e.Self)
}

// isExecutable says why path is no executable file, nil when it is one.
func isExecutable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

func failedErr(err error) error { return &exitError{code: ExitCollect, err: err} }

// errFailed makes the command exit 1 without printing an error.
var errFailed = &exitError{code: ExitFailed}

// cleansUp marks the commands that build namespaces or start processes
// they must remove before they exit: the root catches SIGPIPE for them.
const cleansUp = "tcpdoctor-lab/cleans-up"

// NewRoot builds the command tree.
func NewRoot(e *Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "tcpdoctor-lab",
		Short: "tcpdoctor's lab: reproduce the case catalogue in network namespaces, emulate links, measure tcpdoctor (root)",
		Long: `tcpdoctor-lab reproduces the case catalogue in network namespaces and
measures tcpdoctor. It runs tcpdoctor as users do, as a separate process:
the binary --tcpdoctor names, else the tcpdoctor next to tcpdoctor-lab,
else the one on $PATH.`,
		Version:       e.build().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("tcpdoctor-lab {{.Version}}\n")
	// Bare, the help; an unknown command is a usage error on one line.
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		cmd.SuggestionsMinimumDistance = 2
		hint := "tcpdoctor-lab --help lists them"
		if near := cmd.SuggestionsFor(args[0]); len(near) > 0 {
			hint = fmt.Sprintf("did you mean %s?", strings.Join(near, ", "))
		}
		return usageErr("unknown command %q (%s)", args[0], hint)
	}
	root.PersistentFlags().StringVar(&e.tcpdoctorFlag, "tcpdoctor", "", "the tcpdoctor binary to run (default: the one next to tcpdoctor-lab, else on $PATH)")
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		if cmd.Annotations[cleansUp] != "" && e.CatchSIGPIPE != nil {
			e.CatchSIGPIPE()
		}
	}
	root.SetOut(e.Stdout)
	root.SetErr(e.Stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	root.AddCommand(
		newListCmd(e), newRunCmd(e), newCleanCmd(e),
		newLinkBenchCmd(e), newBenchCmd(e), newServeBenchCmd(e), newTraceBenchCmd(e),
		trafficcmd.New(e.Stdout, e.ProcRoot),
		newDelayLineCmd(), newHoldCmd(e), newCollectOnceCmd(e),
	)
	usageArgs(root)
	helptext.Fit(root, helptext.Width)
	return root
}

// usageArgs makes the argument checks of every command below root
// return usage errors (exit 2).
func usageArgs(root *cobra.Command) {
	todo := []*cobra.Command{root}
	for len(todo) > 0 {
		c := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], c.Commands()...)
		if check := c.Args; check != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return usageErr("%w", err)
				}
				return nil
			}
		}
	}
}

// Main runs tcpdoctor-lab with args and returns the exit code. SIGINT or
// SIGTERM cancels the command's context: the lab and the benches then
// remove what they built, and the run exits 128 + the signal.
func Main(args []string, e *Env) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var got syscall.Signal
	go func() {
		select {
		case s := <-sigs:
			got, _ = s.(syscall.Signal)
			cancel()
		case <-ctx.Done():
		}
	}()
	code := run(ctx, args, e)
	if ctx.Err() != nil && got != 0 && code != ExitOK {
		return 128 + int(got)
	}
	return code
}

// run is Main under ctx.
func run(ctx context.Context, args []string, e *Env) int {
	root := NewRoot(e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			printErr(e.Stderr, ee.err)
		}
		return ee.code
	}
	printErr(e.Stderr, err)
	if errors.Is(err, trafficcmd.ErrUsage) {
		return ExitUsage
	}
	if _, _, ferr := root.Find(args); ferr != nil {
		return ExitUsage
	}
	return ExitCollect
}

// printErr prints err on one line, escaped.
func printErr(w io.Writer, err error) {
	fmt.Fprintf(w, "tcpdoctor-lab: %s\n", textsafe.String(err.Error()))
}

// stickyWriter keeps the first error of its writes, for printers that
// return none; after one it writes nothing more.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}
