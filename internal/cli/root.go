// SPDX-License-Identifier: Apache-2.0

// Package cli holds tcpdoctor's commands, one file each. I/O is injected
// through Env so commands are testable in-process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/capability"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/containers"
	"github.com/tcpdoctor/tcpdoctor/internal/helptext"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/serve"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// Exit codes (documented in README); a command cut short by a signal
// exits 128 + its number (interruptCode).
const (
	ExitOK       = 0
	ExitFindings = 1
	ExitUsage    = 2
	ExitCollect  = 3
)

// Env is everything a command touches outside itself.
type Env struct {
	Stdout, Stderr io.Writer
	// Stdin is what --from - reads; nil reads nothing.
	Stdin  io.Reader
	Getenv func(string) string
	Now    func() time.Time
	// Sleep waits between samples; it returns early with ctx's error.
	Sleep func(ctx context.Context, d time.Duration) error
	// ProcRoot is "/proc" in production.
	ProcRoot string
	// IsTTY reports whether stdout is a terminal (colour only then).
	IsTTY bool
	// Columns is the terminal's width, to wrap long lines to; 0 (a pipe,
	// a file) wraps nothing. $COLUMNS, when set, overrides it.
	Columns int
	// BPF loads the eBPF programs behind --bpf (bpfload.Open); a
	// nil loader is one this build lacks.
	BPF bpfload.Loaders
	// FileLimit returns the soft RLIMIT_NOFILE, 0 if unknown; serve caps
	// its HTTP connections by it. nil means unknown.
	FileLimit func() uint64
	// Tasks lists every process with its network namespace in one kernel
	// walk (netns.Finder.Tasks); nil reads /proc/PID/ns/net of each.
	Tasks func() ([]netns.Task, error)
	// Workloads names the containers, pods and units of namespaces and
	// processes (docs/containers.md); nil names none.
	Workloads *containers.Resolver
	// Build is this binary's version.Get(). The zero value is a build
	// not known: `version` then says "dev", and check's JSON and a
	// recording's header leave their build object out.
	Build version.Info
	// TuneServe, when set, adjusts serve's options after its flags: what
	// no flag sets (a test's shorter timeline segment). nil: none.
	TuneServe func(*serve.Options)
}

// build is Build, or a "dev" build of this toolchain when not known.
func (e *Env) build() version.Info {
	if e.Build.Version == "" {
		return version.FromBuildInfo("", nil)
	}
	return e.Build
}

// knownBuild is Build for the JSON outputs, nil when not known.
func (e *Env) knownBuild() *version.Info {
	if e.Build.Version == "" {
		return nil
	}
	b := e.Build
	return &b
}

// finder finds namespaces below ProcRoot, named by their pods and
// containers.
func (e *Env) finder() netns.Finder {
	f := netns.Finder{ProcRoot: e.ProcRoot, RunDir: "/run/netns", Tasks: e.Tasks}
	if e.Workloads != nil {
		f.Workloads = e.Workloads
	}
	return f
}

// workloads names the processes of snapshots; nil when Workloads is.
func (e *Env) workloads() collect.Workloads {
	if e.Workloads == nil {
		return nil
	}
	return e.Workloads
}

// DefaultEnv is the real process environment.
func DefaultEnv() *Env {
	fi, _ := os.Stdout.Stat()
	return &Env{
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		Stdin:     os.Stdin,
		Getenv:    os.Getenv,
		Now:       time.Now,
		Sleep:     window.Sleep,
		ProcRoot:  "/proc",
		IsTTY:     fi != nil && fi.Mode()&os.ModeCharDevice != 0,
		Columns:   termColumns(),
		BPF:       bpfload.Programs(),
		Tasks:     bpfload.Tasks,
		FileLimit: softFileLimit,
		Workloads: containers.NewResolver(containers.Options{}),
		Build:     version.Get(),
	}
}

// termColumns is stdout's terminal width, 0 when stdout is no terminal.
func termColumns() int {
	ws, err := unix.IoctlGetWinsize(int(os.Stdout.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// columns is the width to wrap text to: $COLUMNS when set, else the
// terminal's (0: none).
func (e *Env) columns() int {
	if e.Getenv != nil {
		if n, err := strconv.Atoi(e.Getenv("COLUMNS")); err == nil && n > 0 {
			return n
		}
	}
	return e.Columns
}

// softFileLimit is the soft RLIMIT_NOFILE (the Go runtime raises it to
// the hard limit at start), 0 if unknown.
func softFileLimit() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

func collectErr(err error) error { return &exitError{code: ExitCollect, err: err} }

// errFindings makes the command exit 1 without printing an error.
var errFindings = &exitError{code: ExitFindings}

// NewRoot builds the command tree.
func NewRoot(e *Env) *cobra.Command {
	root := &cobra.Command{
		Use:           "tcpdoctor",
		Short:         "Tell why TCP services are slow or fail to connect: kernel evidence, the fix",
		Version:       e.build().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("tcpdoctor {{.Version}}\n")
	root.SetOut(e.Stdout)
	root.SetErr(e.Stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%v (see %s --help)", err, c.CommandPath())
	})
	root.AddCommand(
		newSocketsCmd(e),
		newRecordCmd(e),
		newCheckCmd(e),
		newTraceCmd(e),
		newRulesCmd(e),
		newExplainCmd(e),
		newBDPCmd(e),
		newServeCmd(e),
		newWatchCmd(e),
		newHistoryCmd(e),
		newVersionCmd(e),
	)
	root.DisableSuggestions = true // unknownCommand suggests, on one line
	usageArgs(root)
	complete(root, e)
	helptext.Fit(root, helptext.Width)
	return root
}

// usageArgs makes every argument validator in the tree return a usage
// error, so the exit code comes from the error's type, not its text.
// Command groups (the root) print their help when
// called bare and reject an unknown subcommand (cobra prints help and
// exits 0 for those).
func usageArgs(c *cobra.Command) {
	if !c.Runnable() && c.HasSubCommands() {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return unknownCommand(cmd, args[0])
		}
	}
	if v := c.Args; v != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := v(cmd, args); err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// unknownCommand is the usage error for a subcommand of cmd that does not
// exist, with the names it may have meant (cobra's own suggestion is
// several lines, which printErr would escape onto one).
func unknownCommand(cmd *cobra.Command, name string) error {
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	near := cmd.SuggestionsFor(name)
	switch len(near) {
	case 0:
		return usageErr("unknown command %q for %q (%s --help lists them)", name, cmd.CommandPath(), cmd.CommandPath())
	case 1:
		return usageErr("unknown command %q for %q; did you mean %q?", name, cmd.CommandPath(), near[0])
	}
	return usageErr("unknown command %q for %q; did you mean one of %s?", name, cmd.CommandPath(), quoteList(near))
}

// quoteList is names quoted and joined with commas.
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// Main runs tcpdoctor with args and returns the exit code. SIGINT or
// SIGTERM cancels the command's context, its cause an *interrupted.
func Main(args []string, e *Env) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			if sig, ok := s.(syscall.Signal); ok {
				cancel(&interrupted{sig: sig})
			}
		case <-ctx.Done():
		}
	}()
	return runMain(ctx, args, e)
}

// runMain is Main under ctx.
func runMain(ctx context.Context, args []string, e *Env) int {
	root := NewRoot(e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if code, ok := interruptCode(err, context.Cause(ctx), e.Stderr); ok {
		return code
	}
	return exitCode(root, args, err, e.Stderr)
}

// interrupted is the cause of a command's context when a signal ended it.
type interrupted struct{ sig syscall.Signal }

func (i *interrupted) Error() string { return "interrupted" }

// interruptCode maps a command that failed after a signal (cause) to the
// shell's 128+signal: being interrupted is no failure to collect. It
// prints "interrupted", or the command's own error when it said more than
// that its context ended (lab). Commands a signal stops normally (trace,
// watch, serve) return nil, findings, or an error of their own with its
// code (trace's output that could not be written: 3), which stand.
func interruptCode(err, cause error, stderr io.Writer) (int, bool) {
	var in *interrupted
	var ee *exitError
	if err == nil || !errors.As(cause, &in) {
		return 0, false
	}
	canceled := errors.Is(err, context.Canceled) || errors.As(err, &in)
	if !canceled && errors.As(err, &ee) {
		return 0, false
	}
	if canceled {
		fmt.Fprintln(stderr, "tcpdoctor: interrupted")
	} else {
		fmt.Fprintf(stderr, "tcpdoctor: %s\n", textsafe.String(err.Error()))
	}
	return 128 + int(in.sig), true
}

// exitCode prints err and maps it to an exit code.
func exitCode(root *cobra.Command, args []string, err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			printErr(stderr, ee.err)
		}
		return ee.code
	}
	printErr(stderr, err)
	// Flag and argument errors arrive as exitError (SetFlagErrorFunc,
	// usageArgs); what remains from cobra is a command line naming no
	// command, which Find reports again.
	if _, _, ferr := root.Find(args); ferr != nil {
		return ExitUsage
	}
	return ExitCollect
}

// printErr prints err on one line, escaped: errors quote file, process
// and namespace names (and errors.Join's newlines show as \n).
func printErr(stderr io.Writer, err error) {
	fmt.Fprintf(stderr, "tcpdoctor: %s%s\n", textsafe.String(err.Error()), capability.Hint(err, capability.Have))
}

// permissionHint is capability.Hint (source.go's name for it).
func permissionHint(err error, have func(uint) bool) string { return capability.Hint(err, have) }

// openInput opens a file to read, or standard input for "-" (closing it
// then closes nothing).
func (e *Env) openInput(path string) (io.ReadCloser, error) {
	if path != "-" {
		return os.Open(path)
	}
	if e.Stdin == nil {
		return nil, errors.New("no standard input to read")
	}
	return io.NopCloser(e.Stdin), nil
}

// progress prints a note to stderr on one line, escaped: notes quote
// errors and names from outside.
func (e *Env) progress(format string, a ...any) {
	fmt.Fprintf(e.Stderr, "tcpdoctor: %s\n", textsafe.String(fmt.Sprintf(format, a...)))
}
