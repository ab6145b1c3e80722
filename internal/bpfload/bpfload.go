// SPDX-License-Identifier: Apache-2.0

// Package bpfload is the eBPF loading policy: which of the optional eBPF
// extras a command loads (Need), as its --bpf choice says (Mode), from one
// set of loaders (Loaders); what loaded (Extras) builds the command's
// collect.Collector or collect.Streamer, gives watch its event stream and
// trace its programs.
package bpfload

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/phases"
	"github.com/tcpdoctor/tcpdoctor/internal/procnet"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/source"
)

// Mode is the --bpf choice: what to do about the eBPF extras.
type Mode string

// The --bpf modes.
const (
	// ModeAuto uses what loads and says once why the rest did not.
	ModeAuto Mode = "auto"
	// ModeOn fails (exit 3) when an extra the command needs cannot load.
	ModeOn Mode = "on"
	// ModeOff loads nothing.
	ModeOff Mode = "off"
)

// ParseMode reads a --bpf value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeOn, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("--bpf must be auto, on or off, not %q", s)
}

// Loaders load the eBPF programs; a nil field is one this build lacks.
// Production uses Programs; tests inject their own.
type Loaders struct {
	Events func(*bpfsource.Kernel) (*bpfsource.Source, error)
	Locks  func(*bpfsource.Kernel) (*bpfsource.SockLocks, error)
	Files  func(*bpfsource.Kernel) (*bpfsource.FileOwners, error)
	Trace  func(bpfsource.TraceOptions) (*bpfsource.Tracer, error)
}

// Programs are the real programs of internal/bpfsource.
func Programs() Loaders {
	return Loaders{
		Events: func(k *bpfsource.Kernel) (*bpfsource.Source, error) {
			return bpfsource.Open(bpfsource.Options{Kernel: k})
		},
		Locks: bpfsource.OpenSockLocks,
		Files: bpfsource.OpenFileOwners,
		Trace: bpfsource.OpenTrace,
	}
}

// Tasks is every process with its network namespace from the kernel's
// walk (bpfsource.ProcessNetns), as netns.Finder.Tasks takes it.
func Tasks() ([]netns.Task, error) {
	ps, err := bpfsource.ProcessNetns()
	if err != nil {
		return nil, err
	}
	out := make([]netns.Task, len(ps))
	for i, p := range ps {
		out[i] = netns.Task{Pid: int(p.Pid), Netns: uint64(p.Netns)}
	}
	return out, nil
}

// Need says which extras a command's output uses: the others are not
// loaded (a load, and each iter/tcp walk of the host's TCP tables, cost a
// command that prints one sample), and nothing is said of them.
type Need struct {
	// Events: connection events (lifecycle, drops, resets, retransmits).
	Events bool
	// EventsBeside, with Mode auto and Locks loaded (eBPF works here),
	// loads the events (35-50 ms: several programs verified) on a
	// goroutine of their own, so the first collection runs beside it;
	// their first reading waits for it. The events then count from a
	// little later, but a window counts them from its first sample's
	// reading, which comes after the load either way. Not on a host of
	// eventsBesideMax TCP sockets or more.
	EventsBeside bool
	// Locks: the buffer lock bits of every socket (iter/tcp).
	Locks bool
	// Files: the kernel's walk of every process's files for the owners
	// (iter/task_file), loaded now; a failure is a note.
	Files bool
	// FilesLazily: the same walk, loaded when the owners are first
	// walked and only on a host with collect.KernelFilesMin open files (any, with
	// Mode on); a failure leaves the /proc walk without a word (the owners
	// are the same).
	FilesLazily bool
}

// Config is one command's request for the eBPF extras.
type Config struct {
	Mode Mode
	Need Need
	// Replay: the snapshots come from a file; nothing is loaded.
	Replay bool
	// PidFD turns on the opt-in pidfd_getfd probe (collect.Options.BufLock).
	PidFD bool
	// Command names a command that has no --bpf flag of its own and
	// says itself which programs did not load (watch): errors name it
	// instead of "--bpf on", and Missing programs are not noted here.
	Command string
	// ProcRoot is "/proc" in production (the open-files count).
	ProcRoot string
	Loaders  Loaders
	// Note says on stderr what could not load, or did not close.
	Note func(format string, args ...any)
	// Phases times each load (the bench's --phases).
	Phases *phases.Recorder
}

// Extras is what the --bpf choice loaded, used by every way in
// (collect.Collector, collect.Streamer, watch's stream, trace's programs); Close frees it.
type Extras struct {
	cfg Config
	// Source is the connection-event source (nil when not loaded): the
	// counters for collect.Collector and Streamer, the event stream for
	// watch.
	Source *bpfsource.Source
	locks  collect.LockReader
	// locksOff says why locks is nil, for the snapshot.
	locksOff string
	files    collect.FileSource
	// events, when set, is the connection events loading beside the
	// first collection (Need.EventsBeside); Source is then nil.
	events  *pendingEvents
	closers []func() error
}

// Events is the event counters for collect.Collector and Streamer; nil when not
// loaded.
func (x *Extras) Events() collect.EventReader {
	if x.events != nil {
		return x.events
	}
	if x.Source == nil {
		return nil
	}
	return x.Source
}

// Options adds the extras to a command's collect options: lock bits,
// the pidfd probe where asked (never without owners), the kernel's file
// walk for owners. Without PidFD nothing is written to any socket.
func (x *Extras) Options(o collect.Options) collect.Options {
	o.Locks, o.LocksOff = x.locks, x.locksOff
	o.BufLock = x.cfg.PidFD && o.Owners
	if o.Owners {
		o.Files = x.files
	}
	if o.ProcRoot == "" {
		o.ProcRoot = x.cfg.ProcRoot
	}
	return o
}

// Close frees every program loaded, noting what did not close.
func (x *Extras) Close() {
	for _, c := range x.closers {
		if err := c(); err != nil && x.cfg.Note != nil {
			x.cfg.Note("note: %v", err)
		}
	}
	x.closers = nil
}

// Open loads the extras cfg.Need names, each on its own, as
// cfg.Mode says. An extra left out (off, replaying a file, or in auto
// not loadable) says why; with Mode on a failure is the error. Close the
// result once collection is done.
func Open(cfg Config) (*Extras, error) {
	x := &Extras{cfg: cfg}
	if cfg.Note == nil {
		x.cfg.Note = func(string, ...any) {}
	}
	note := x.cfg.Note
	if cfg.Replay {
		return x, nil
	}
	if cfg.Mode == ModeOff {
		x.locksOff = "eBPF off (--bpf off)"
		return x, nil
	}
	ld := cfg.Loaders
	var evErr, lkErr, flErr error
	// One parse of the kernel's BTF for every load below; freed after.
	kernel := bpfsource.NewKernel()
	switch {
	case cfg.Need.Files && ld.Files != nil:
		f, err := load(x, "eBPF load: owners (iter/task_file)", func() (*bpfsource.FileOwners, error) { return ld.Files(kernel) })
		if err != nil {
			flErr = err
		} else {
			x.files = collect.Loaded(f)
		}
	case cfg.Need.FilesLazily && ld.Files != nil && (cfg.Mode == ModeOn || collect.OpenFiles(cfg.ProcRoot) >= collect.KernelFilesMin):
		x.files = x.lazyFiles(ld.Files)
	}
	switch {
	case !cfg.Need.Locks:
		x.locksOff = "not read: sockets reads buffer lock bits with --json --locks"
	case ld.Locks == nil:
		lkErr = errors.New("this build has no eBPF loader")
	default:
		l, err := load(x, "eBPF load: lock bits (iter/tcp)", func() (*bpfsource.SockLocks, error) { return ld.Locks(kernel) })
		if err != nil {
			lkErr = err
		} else {
			x.locks = l
		}
	}
	if lkErr != nil {
		x.locksOff = "eBPF iter/tcp not loaded: " + lkErr.Error()
	}
	switch {
	case !cfg.Need.Events:
	case ld.Events == nil:
		evErr = errors.New("this build has no eBPF loader")
	case cfg.Need.EventsBeside && cfg.Mode == ModeAuto && cfg.Need.Locks && lkErr == nil && hostSockets(cfg.ProcRoot) < eventsBesideMax:
		// eBPF loads here (iter/tcp did): the events load beside the
		// first sample's collection, and their first reading waits for
		// it.
		x.events = x.eventsBeside(ld.Events, kernel)
	default:
		s, err := load(x, "eBPF load: connection events", func() (*bpfsource.Source, error) { return ld.Events(kernel) })
		if err != nil {
			evErr = err
		} else {
			x.Source = s
			x.noteMissing(s)
		}
	}
	if cfg.Mode == ModeOn {
		if evErr != nil && lkErr != nil && evErr.Error() == lkErr.Error() {
			lkErr = nil // one cause, said once
		}
		if err := errors.Join(evErr, lkErr); err != nil {
			x.Close()
			label := "--bpf on"
			if cfg.Command != "" {
				label = cfg.Command
			}
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		x.noteFiles(flErr)
		return x, nil
	}
	switch {
	case ld.Events == nil && ld.Locks == nil:
		// A build without eBPF: nothing to say.
	case evErr != nil && lkErr != nil && evErr.Error() == lkErr.Error():
		note("note: eBPF off: %v: no connection events, and pinned buffers judged from their sizes only (--bpf off silences this)", evErr)
	default:
		if evErr != nil {
			note(eventsOffNote, evErr)
		}
		if lkErr != nil {
			note("note: eBPF buffer lock bits (iter/tcp) off: %v: pinned buffers judged from their sizes only (--bpf off silences this)", lkErr)
		}
	}
	x.noteFiles(flErr, evErr, lkErr)
	return x, nil
}

// load runs one loader as a step timed in a phase of its own; what loads
// is closed with the rest.
func load[T interface{ Close() error }](x *Extras, phase string, fn func() (T, error)) (T, error) {
	var v T
	err := source.Run(x.cfg.Phases, source.Step{Phase: phase, Run: func() (err error) {
		v, err = fn()
		return err
	}})
	if err == nil {
		x.closers = append(x.closers, v.Close)
	}
	return v, err
}

// eventsBesideMax is the count of TCP sockets on the host (hostSockets)
// from which the events load before the first sample after all. At a
// million the first dump already keeps both CPUs busy, so a load beside
// it made `check` no shorter, and its garbage, made while the heap grew,
// raised the peak by about 4.5 MB (docs/performance-history.md); at 20,000 and
// 100,000 it took 50-100 ms off.
const eventsBesideMax = 500_000

// hostSockets is sockstat's TCP "alloc": the TCP sockets of every
// namespace, which every sock_diag dump walks; 0 if unreadable.
func hostSockets(procRoot string) int64 {
	if procRoot == "" {
		procRoot = "/proc"
	}
	m := map[string]int64{}
	_ = procnet.FS{NetDir: filepath.Join(procRoot, "net")}.Sockstats(m) // what parsed is enough
	return m["TCP.alloc"]
}

// pendingEvents is the connection events loading on their own
// goroutine (Need.EventsBeside): Read waits for the load. A load that
// failed reads as errEventsOff, which the collector takes as no source,
// as when the load failed in Open; the failure, or what did not
// attach, is noted at the first Read or at Close.
type pendingEvents struct {
	done  chan struct{}
	src   *bpfsource.Source
	err   error
	noted sync.Once
	note  func()
}

// errEventsOff is a pendingEvents' Read when its load failed.
var errEventsOff = fmt.Errorf("eBPF connection events not loaded: %w", source.ErrAbsent)

func (p *pendingEvents) Read() (*bpfsource.Reading, error) {
	<-p.done
	p.noted.Do(p.note)
	if p.err != nil {
		return nil, errEventsOff
	}
	return p.src.Read()
}

// eventsBeside starts loading the events with load, k the kernel's BTF
// the other loads used (no longer used by them).
func (x *Extras) eventsBeside(load func(*bpfsource.Kernel) (*bpfsource.Source, error), k *bpfsource.Kernel) *pendingEvents {
	p := &pendingEvents{done: make(chan struct{})}
	cfg := x.cfg
	p.note = func() {
		if p.err != nil {
			cfg.Note(eventsOffNote, p.err)
			return
		}
		x.noteMissing(p.src)
	}
	go func() {
		defer close(p.done)
		_ = source.Run(cfg.Phases, source.Step{Phase: "eBPF load: connection events (beside)", Run: func() error {
			p.src, p.err = load(k)
			return nil
		}})
	}()
	x.closers = append(x.closers, func() error {
		<-p.done
		p.noted.Do(p.note)
		if p.src != nil {
			return p.src.Close()
		}
		return nil
	})
	return p
}

// eventsOffNote says the events did not load, with why.
const eventsOffNote = "note: eBPF connection events off: %v (--bpf off silences this)"

// noteMissing names the event programs of s that did not attach, unless
// the command says so itself (Config.Command).
func (x *Extras) noteMissing(s *bpfsource.Source) {
	if x.cfg.Command != "" {
		return
	}
	for _, m := range s.Missing() {
		// The others run; what this one counts is unknown in findings.
		x.cfg.Note("note: eBPF program on %s off: %s", m.Program, m.Reason)
	}
}

// noteFiles says why the owner walk reads /proc/PID/fd, unless a note
// already gave that cause. The in-kernel walk finds the same owners,
// only faster, so its absence never fails Mode on.
func (x *Extras) noteFiles(flErr error, said ...error) {
	if flErr == nil {
		return
	}
	for _, s := range said {
		if s != nil && s.Error() == flErr.Error() {
			return
		}
	}
	x.cfg.Note("note: eBPF owner walk (iter/task_file) off: %v: socket owners read from /proc/PID/fd, which is slower (--bpf off silences this)", flErr)
}

// lazyFiles loads the file walk once, when first asked; Close frees it.
func (x *Extras) lazyFiles(load func(*bpfsource.Kernel) (*bpfsource.FileOwners, error)) collect.FileSource {
	var loaded *bpfsource.FileOwners
	var loadErr error
	var once sync.Once
	x.closers = append(x.closers, func() error {
		once.Do(func() { loadErr = errors.New("closed") }) // no load after Close
		if loaded != nil {
			return loaded.Close()
		}
		return nil
	})
	return func() (procs.FileLister, error) {
		once.Do(func() { loaded, loadErr = load(nil) })
		if loadErr != nil {
			return nil, loadErr
		}
		return loaded, nil
	}
}

// OpenTrace loads trace's programs for the namespace inode and ports,
// once trace knows them. With Mode auto a failure is a note and why says it, for
// the recording; with Mode on it is an error; with Mode off, why says so.
func (x *Extras) OpenTrace(netns uint64, ports []uint16) (tr *bpfsource.Tracer, why string, err error) {
	switch {
	case x.cfg.Mode == ModeOff:
		return nil, "eBPF off (--bpf off)", nil
	case x.cfg.Loaders.Trace == nil:
		err = errors.New("this build has no eBPF loader")
	default:
		tr, err = x.cfg.Loaders.Trace(bpfsource.TraceOptions{Netns: netns, Ports: ports})
	}
	if err != nil {
		if x.cfg.Mode == ModeOn {
			return nil, "", fmt.Errorf("trace: --bpf on: %w", err)
		}
		x.cfg.Note("note: trace: no eBPF events (retransmits, receive buffer steps, resets with the kernel's timestamps): %v (--bpf off silences this)", err)
		return nil, err.Error(), nil
	}
	for _, m := range tr.Missing() {
		x.cfg.Note("note: trace: eBPF program %s not running: %s", m.Program, m.Reason)
	}
	return tr, "", nil
}

// Collector is the way in of the commands that diagnose (check, record,
// serve): whole snapshots of every namespace, with these extras.
func (x *Extras) Collector(o collect.Options, now func() time.Time) *collect.Collector {
	return &collect.Collector{Opts: x.Options(o), Now: now, Events: x.Events()}
}

// Streamer is the way in of the listing (sockets): one socket at a
// time, with these extras.
func (x *Extras) Streamer(o collect.Options, now func() time.Time) *collect.Streamer {
	return &collect.Streamer{Opts: x.Options(o), Now: now, Events: x.Events()}
}
