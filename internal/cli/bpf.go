package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
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
