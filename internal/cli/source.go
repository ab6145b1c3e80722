// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/capability"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// sourceOpts are the flags every reading command shares: where the
// snapshots come from.
type sourceOpts struct {
	from     string
	netns    string
	allNetns bool
	// workload, set by a command with --pod and --container, narrows
	// what is read to the namespaces that may hold them.
	workload *workloadOpts
	// noBPF is --bpf off: the namespaces are found without the kernel's
	// walk of every process too.
	noBPF bool
	// pid, set by a command's --pid, is read in its process's namespace
	// unless --netns or --all-netns says where.
	pid int
	// begin, when set, is called once the namespaces are known and the
	// sampling starts (progress is said then, not before an error found
	// at once).
	begin func()
}

// plain reports whether only our own namespace is read live, as a bare
// command does.
func (o *sourceOpts) plain() bool {
	return o.from == "" && o.netns == "" && !o.allNetns && o.pid == 0 && (o.workload == nil || !o.workload.Set())
}

// othersNote says, after a plain command, how many other network
// namespaces the host has that it did not look in.
func (o *sourceOpts) othersNote(e *Env) {
	if !o.plain() {
		return
	}
	all, _ := e.finder().All() // a partial list undercounts; the note is a hint
	if n := len(all) - 1; n > 0 {
		e.progress("note: %s not checked (--all-netns or --netns)", otherNetns(n)) // 80 columns up to 9
	}
}

func otherNetns(n int) string {
	if n == 1 {
		return "1 other network namespace"
	}
	return strconv.Itoa(n) + " other network namespaces"
}

// where names what was read, for notes: the file, or the namespaces.
func (o *sourceOpts) where() string {
	switch {
	case o.from != "":
		return o.from
	case o.allNetns:
		return "any network namespace"
	case o.netns != "":
		return "netns " + o.netns
	case o.pid > 0:
		return "the network namespace of pid " + strconv.Itoa(o.pid)
	}
	return "this network namespace (--all-netns looks in every one)"
}

func (o *sourceOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.from, "from", "", "read snapshots from `FILE`, written by tcpdoctor record, instead of the live host (- for standard input)")
	fs.StringVar(&o.netns, "netns", "", "collect in the named network namespace (ip netns)")
	fs.BoolVar(&o.allNetns, "all-netns", false, "collect in every network namespace on the host")
}

func (o *sourceOpts) validate() error {
	if o.netns != "" && o.allNetns {
		return usageErr("--netns and --all-netns exclude each other")
	}
	if o.from != "" && (o.netns != "" || o.allNetns) {
		return usageErr("--from reads a file; --netns and --all-netns apply to live collection only")
	}
	if w := o.workload; w != nil && w.Set() {
		if err := w.validate(); err != nil {
			return err
		}
		// A pod's namespace is not ours: look in every one.
		o.allNetns = o.allNetns || o.from == "" && o.netns == ""
	}
	return nil
}

// narrow keeps, of live namespaces nss, those that may hold --pod and
// --container, once they are known to exist (else a usage error listing
// what does).
func (o *sourceOpts) narrow(e *Env, nss []netns.NS) ([]netns.NS, error) {
	w := o.workload
	if w == nil || !w.Set() {
		return nss, nil
	}
	known, _, err := knownLive(e, w.cmd, nss)
	if err != nil {
		return nil, err
	}
	if err := w.find("on this host", known); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(nss, func(ns netns.NS) bool { return !w.MayHold(ns.Workload) }), nil
}

// narrowSeries is narrow for a snapshot file's series: names are the
// ones the file stored.
func (o *sourceOpts) narrowSeries(ss []series) ([]series, error) {
	w := o.workload
	if w == nil || !w.Set() {
		return ss, nil
	}
	if err := w.find("in "+o.from, knownIn(ss)); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ss, func(sr series) bool {
		return len(sr.Snaps) > 0 && !w.MayHold(sr.Snaps[len(sr.Snaps)-1].Netns.Workload)
	}), nil
}

// series is the samples of one namespace, oldest first.
type series = window.Series

// findNamespaces resolves --netns / --all-netns / --pid (default: our
// own). With --all-netns a partial list (processes we may not inspect)
// comes with the error.
func (o *sourceOpts) findNamespaces(e *Env) ([]netns.NS, error) {
	w := collect.Where{All: o.allNetns, Netns: o.netns, Pid: o.pid, ProcOnly: o.noBPF}
	nss, err := w.Find(e.finder())
	if err != nil && !w.All && w.Netns == "" && w.Pid > 0 {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, usageErr("--pid %d: no such process", o.pid)
		}
		return nil, usageErr("--pid %d: %v", o.pid, err)
	}
	return nss, err
}

// namespaces is findNamespaces for one-shot commands: a partial list is
// used, with a note.
func (o *sourceOpts) namespaces(e *Env) ([]netns.NS, error) {
	nss, err := o.findNamespaces(e)
	if err != nil && len(nss) > 0 {
		e.progress("note: %v; their namespaces may be missing%s", err, permissionHint(err, capability.Have))
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return o.narrow(e, nss)
}

// sample returns, per namespace, count samples interval apart for the
// rules rs, live or from --from. Progress goes to stderr.
func (o *sourceOpts) sample(ctx context.Context, e *Env, c *collect.Collector, count int, interval time.Duration, rs []diag.Rule) ([]series, error) {
	if o.from != "" {
		ss, torn, err := readSeries(e, o.from)
		if err == nil && torn && count > 1 {
			for _, sr := range ss {
				if len(sr.Snaps) < count {
					e.progress("note: %s: netns %s has only one complete sample: the rules that need a window of two are reported unknown", o.from, sr.Netns)
				}
			}
		}
		if err != nil {
			return nil, err
		}
		return o.narrowSeries(ss)
	}
	nss, err := o.namespaces(e)
	var xe *exitError
	if errors.As(err, &xe) {
		return nil, err
	}
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if o.begin != nil {
		o.begin()
	}
	out, err := window.Sample(ctx, c, nss, count, interval, e.Sleep, rs)
	if err != nil {
		return nil, err
	}
	if window.NothingCollected(out) {
		return out, collectErr(errors.New("nothing could be collected: " + window.FirstErrorText(out)))
	}
	return out, nil
}

// readSeries reads a snapshot file's series (window.ReadSeries). A last
// line cut short is dropped with a note (torn true); any other fault of
// the file is a usage error.
func readSeries(e *Env, path string) (ss []series, torn bool, err error) {
	f, err := e.openInput(path)
	if err != nil {
		return nil, false, usageErr("--from: %v", err)
	}
	defer f.Close()
	ss, te, err := window.ReadKept(f)
	if te != nil {
		n := window.Samples(ss)
		plural := "s"
		if n == 1 {
			plural = ""
		}
		e.progress("note: %s: line %d is incomplete (a recorder stopped mid-write): used the %d complete sample%s before it", path, te.Line, n, plural)
		torn = true
	}
	if errors.As(err, &te) && len(ss) == 0 {
		return nil, false, usageErr("--from %s: no complete sample: %v", path, err)
	}
	if err != nil {
		return nil, false, usageErr("--from %s: %v", path, err)
	}
	return ss, torn, nil
}

// warnErrors prints each source failure once to stderr, however many
// namespaces it struck (window.Failure.Note).
func warnErrors(e *Env, ss []series) {
	for _, f := range window.Failures(ss) {
		fmt.Fprintf(e.Stderr, "tcpdoctor: note: %s\n", f.Note())
	}
}
