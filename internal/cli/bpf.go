package cli

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// bpfOpts is --bpf, shared by the commands that collect live, and the
// opt-in --pidfd-buflock.
type bpfOpts struct {
	mode  string
	pidfd bool
}

func (o *bpfOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.mode, "bpf", "auto", "eBPF sources: connection events (connects, failed connects by cause, who closed first) and the buffer lock bits of every socket (iter/tcp): "+
		"auto (use what loads, else say once why not), on (fail with exit 3 if one cannot load), off")
	fs.BoolVar(&o.pidfd, "pidfd-buflock", false, "where the eBPF iterator cannot read the buffer lock bits, read SO_BUF_LOCK of owned sockets that look pinned "+
		"through a copy of the owner's fd (pidfd_getfd, needs CAP_SYS_PTRACE); not read-only: it re-stamps the socket's cgroup v1 net_cls/net_prio values, so it is refused where those are mounted")
}

func (o *bpfOpts) validate(src *sourceOpts) error {
	switch o.mode {
	case "auto", "off":
	case "on":
		if src.from != "" {
			return usageErr("--bpf on applies to live collection; --from replays the events recorded in the file")
		}
	default:
		return usageErr("--bpf must be auto, on or off, not %q", o.mode)
	}
	if o.pidfd && src.from != "" {
		return usageErr("--pidfd-buflock applies to live collection; --from replays the lock bits recorded in the file")
	}
	return nil
}

// bpfSet is what --bpf loaded, and how buffer lock bits are read.
type bpfSet struct {
	events collect.EventReader
	locks  collect.LockReader
	// locksOff says why locks is nil.
	locksOff string
	// files lists processes' files for the owner walk (iter/task_file);
	// nil reads /proc/PID/fd.
	files procs.FileLister
	pidfd bool
}

// options adds the lock sources to a command's collect options. Without
// --pidfd-buflock nothing is written to any socket.
func (b bpfSet) options(o collect.Options) collect.Options {
	o.Locks, o.LocksOff = b.locks, b.locksOff
	o.BufLock = b.pidfd && o.Owners
	if o.Owners && b.files != nil {
		o.Files = b.files
	}
	return o
}

// open loads the eBPF sources as the mode says, each on its own. A source
// left nil (off, replaying --from, or in auto not loadable) says why; the
// close func is always safe to call.
func (o *bpfOpts) open(e *Env, src *sourceOpts) (bpfSet, func(), error) {
	return o.openSome(e, src, bpfNeed{events: true, locks: true, files: true})
}

// bpfNeed says which eBPF sources a command's output uses.
type bpfNeed struct{ events, locks, files bool }

// openSome is open for a command whose output uses only some sources:
// those it does not use are not loaded (a load, and each iter/tcp walk of
// the host's TCP tables, cost a command that prints one sample), and
// nothing is said of them.
func (o *bpfOpts) openSome(e *Env, src *sourceOpts, need bpfNeed) (bpfSet, func(), error) {
	set := bpfSet{pidfd: o.pidfd}
	var closers []func() error
	closeAll := func() {
		for _, c := range closers {
			if err := c(); err != nil {
				e.progress("note: %v", err)
			}
		}
	}
	if src.from != "" {
		return set, closeAll, nil
	}
	if o.mode == "off" {
		set.locksOff = "eBPF off (--bpf off)"
		return set, closeAll, nil
	}
	var evErr, lkErr, flErr error
	// One parse of the kernel's BTF for every load below; freed after.
	kernel := bpfsource.NewKernel()
	switch {
	case !need.events:
	case e.OpenEvents == nil:
		evErr = errors.New("this build has no eBPF loader")
	default:
		if s, err := e.OpenEvents(kernel); err != nil {
			evErr = err
		} else {
			set.events = s
			for _, m := range s.Missing() {
				// The others run; what this one counts is unknown in findings.
				e.progress("note: eBPF program on %s off: %s", m.Program, m.Reason)
			}
			closers = append(closers, s.Close)
		}
	}
	switch {
	case !need.files, e.OpenFiles == nil:
	default:
		if f, err := e.OpenFiles(kernel); err != nil {
			flErr = err
		} else {
			set.files = f
			closers = append(closers, f.Close)
		}
	}
	if !need.locks {
		set.locksOff = "not read: sockets reads buffer lock bits with --json --locks"
	} else if e.OpenLocks == nil {
		lkErr = errors.New("this build has no eBPF loader")
	} else if l, err := e.OpenLocks(kernel); err != nil {
		lkErr = err
	} else {
		set.locks = l
		closers = append(closers, l.Close)
	}
	if lkErr != nil {
		set.locksOff = "eBPF iter/tcp not loaded: " + lkErr.Error()
	}
	if o.mode == "on" {
		if evErr != nil && lkErr != nil && evErr.Error() == lkErr.Error() {
			lkErr = nil // one cause, said once
		}
		if err := errors.Join(evErr, lkErr); err != nil {
			closeAll()
			return bpfSet{}, func() {}, collectErr(fmt.Errorf("--bpf on: %w", err))
		}
		o.noteFiles(e, flErr, nil, nil)
		return set, closeAll, nil
	}
	switch {
	case e.OpenEvents == nil && e.OpenLocks == nil:
		// A build without eBPF: nothing to say.
	case evErr != nil && lkErr != nil && evErr.Error() == lkErr.Error():
		e.progress("note: eBPF off: %v: no connection events, and pinned buffers judged from their sizes only (--bpf off silences this)", evErr)
	default:
		if evErr != nil {
			e.progress("note: eBPF connection events off: %v (--bpf off silences this)", evErr)
		}
		if lkErr != nil {
			e.progress("note: eBPF buffer lock bits (iter/tcp) off: %v: pinned buffers judged from their sizes only (--bpf off silences this)", lkErr)
		}
	}
	o.noteFiles(e, flErr, evErr, lkErr)
	return set, closeAll, nil
}

// noteFiles says why the owner walk reads /proc/PID/fd, unless a note
// already gave that cause. The in-kernel walk finds the same owners,
// only faster, so its absence never fails --bpf on.
func (o *bpfOpts) noteFiles(e *Env, flErr error, said ...error) {
	if flErr == nil {
		return
	}
	for _, s := range said {
		if s != nil && s.Error() == flErr.Error() {
			return
		}
	}
	e.progress("note: eBPF owner walk (iter/task_file) off: %v: socket owners read from /proc/PID/fd, which is slower (--bpf off silences this)", flErr)
}

// openEvents is the production loader for Env.OpenEvents.
func openEvents(k *bpfsource.Kernel) (*bpfsource.Source, error) {
	return bpfsource.Open(bpfsource.Options{Kernel: k})
}

// openFiles is the production loader for Env.OpenFiles.
func openFiles(k *bpfsource.Kernel) (*bpfsource.FileOwners, error) {
	return bpfsource.OpenFileOwners(k)
}

// openLocks is the production loader for Env.OpenLocks.
func openLocks(k *bpfsource.Kernel) (*bpfsource.SockLocks, error) {
	return bpfsource.OpenSockLocks(k)
}

// printEvents lists, under the sockets table, the connections each process
// opened and closed between the two samples as the eBPF source counted
// them: most of them never show in a socket dump. Nothing is printed
// without the source. Names are escaped (textsafe).
func printEvents(w io.Writer, ss []series, flt *socketFilter) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, sr := range ss {
		_, cur := sr.Window()
		if cur.Events == nil {
			continue
		}
		secs := cur.Events.Interval().Seconds()
		for _, f := range cur.Events.Flows {
			rp, lp := int(f.Remote.Port()), int(f.LocalPort)
			if (flt.pid != 0 && f.Pid != flt.pid) || !flt.ports(lp, rp) {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\nconnection events between the samples (eBPF, over %s):\n", cur.Events.Interval().Round(time.Millisecond))
				fmt.Fprintln(tw, "NETNS\tPID\tCOMMAND\tREMOTE\tCONNECTS\tPER SEC\tFAILED\tCLOSED FIRST\tPEER CLOSED\tMEAN LIFE")
				header = true
			}
			life := "-"
			if f.Ended > 0 {
				life = (f.Lifetime / time.Duration(f.Ended)).Round(time.Microsecond).String()
			}
			rate := "-"
			if secs > 0 {
				rate = fmt.Sprintf("%.1f", float64(f.Opens)/secs)
			}
			remote := textsafe.String(f.Remote.String())
			if f.Accepted() {
				remote = fmt.Sprintf("accepted on :%d", f.LocalPort)
			}
			pid := "-" // ended by the network, the opener unknown
			if f.Pid != 0 {
				pid = strconv.Itoa(f.Pid)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", textsafe.String(sr.Netns), pid, textsafe.String(f.Command), textsafe.String(remote),
				f.Opens, rate, failedConnects(&f), f.ActiveCloses, f.PeerCloses, life)
		}
	}
	_ = tw.Flush()
	printKernelEvents(w, ss, flt)
}

// failedConnects says how f's failed connects ended ("412 no port, 3
// refused"), or "-" for none.
func failedConnects(f *snapshot.EventFlow) string {
	var parts []string
	for _, c := range []struct {
		n    uint64
		what string
	}{{f.FailedPorts, "no port"}, {f.Refused, "refused"}, {f.TimedOut, "timed out"}, {f.Unreachable, "unreachable"}, {f.Abandoned, "abandoned"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// printKernelEvents lists the drops, resets and retransmits the eBPF
// source counted between the samples (--pid does not apply: they happen
// in the kernel, not in a process's own context).
func printKernelEvents(w io.Writer, ss []series, flt *socketFilter) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	row := func(ns, what, reason, where string, n uint64, rport, lport int) {
		if !flt.ports(lport, rport) {
			return
		}
		if !header {
			fmt.Fprintln(w, "\ndrops, resets and retransmits between the samples (eBPF):")
			fmt.Fprintln(tw, "NETNS\tEVENT\tREASON\tPEER OR LISTENER\tCOUNT")
			header = true
		}
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", textsafe.String(ns), what, textsafe.String(reason), textsafe.String(where), n)
	}
	peer := func(remote netip.AddrPort, lport uint16) string {
		if lport != 0 && remote.Port() == 0 {
			return fmt.Sprintf("%v on :%d", remote.Addr(), lport)
		}
		return remote.String()
	}
	for _, sr := range ss {
		_, cur := sr.Window()
		ev := cur.Events
		if ev == nil || flt.pid != 0 {
			continue
		}
		for _, d := range ev.Drops {
			where, lport := "-", 0
			if d.Listener.IsValid() {
				where, lport = "listener "+d.Listener.String(), int(d.Listener.Port())
			}
			row(sr.Netns, "drop", d.Reason, where, d.Count, 0, lport)
		}
		for _, r := range ev.Resets {
			what := "reset received"
			if r.Sent {
				what = "reset sent"
			}
			row(sr.Netns, what, r.Reason, peer(r.Remote, r.LocalPort), r.Count, int(r.Remote.Port()), int(r.LocalPort))
		}
		for _, r := range ev.Retransmits {
			what := "retransmit"
			if r.SYN {
				what = "SYN retransmit"
			}
			row(sr.Netns, what, "", peer(r.Remote, r.LocalPort), r.Count, int(r.Remote.Port()), int(r.LocalPort))
		}
		for _, m := range ev.Missing {
			fmt.Fprintf(w, "(eBPF program on %s did not run: %s)\n", textsafe.String(m.Program), textsafe.String(m.Reason))
		}
	}
	_ = tw.Flush()
}
