// SPDX-License-Identifier: Apache-2.0

// Package collect runs every source for one or more network namespaces
// and assembles snapshots. It is the only place that knows the order of
// sources (order.go), one for whole snapshots (Collector) and listings
// (Streamer); each source is a source.Step, timed and recorded in the
// snapshot by the one executor.
package collect

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/appcaps"
	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/phases"
	"github.com/tcpdoctor/tcpdoctor/internal/procnet"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/source"
)

// Options says what to collect: one value for Collector (whole
// snapshots, for the rules) and Streamer (one socket at a time, for
// listings). bpfload's Extras.Options fills in what --bpf loaded.
type Options struct {
	// Owners maps sockets to processes (walks /proc/*/fd).
	Owners bool
	// States limits the socket dump (bitmask of 1<<state); 0 = all.
	States uint32
	// Filter is run by the kernel on each socket (ports, addresses); nil
	// dumps all.
	Filter *sockdiag.Filter
	// Locks reads the buffer lock bits of every socket in each namespace
	// (eBPF iter/tcp, read-only); nil when not loaded, and LocksOff says
	// why, for the snapshot.
	Locks    LockReader
	LocksOff string
	// Files, when set, lists every process's files for Owners in the
	// kernel (eBPF iter/task_file) instead of a readlink per /proc/PID/fd
	// entry; the /proc walk stands in, without a word, when it cannot
	// load or ProcRoot is not /proc, and is recorded when its walk fails.
	Files FileSource
	// BufLock, an opt-in, probes SO_BUF_LOCK of owned, established
	// sockets that look pinned where Locks gave nothing, by duplicating
	// the owner's fd with pidfd_getfd (needs Owners and CAP_SYS_PTRACE).
	// That is not read-only: under cgroup v1 it re-stamps the socket's
	// net_cls/net_prio values, so it is refused where those are mounted.
	BufLock bool
	// ProcRoot is "/proc" in production.
	ProcRoot string
	// Workloads, when set, names the container, pod or unit of every
	// process in the snapshots (snapshot.Proc.Workload).
	Workloads Workloads
	// Phases times the parts of a collection (the bench's --phases);
	// nil times nothing.
	Phases *phases.Recorder
	// FaultIn faults a large socket slice in at once (newSockets): for
	// a command that samples and exits. serve leaves it off: there the
	// slice of the next window is made while the last is still held,
	// and faulting it in whole raised its peak at a million sockets.
	FaultIn bool
	// Was makes what a window keeps of each socket (Snapshot.Was) during
	// the dump, where the kernel's filling of the next datagram leaves
	// the decoding goroutine time to spare: for a window's first sample.
	Was bool
	// SplitMin is the count of sockets a namespace's sockstat must show
	// for a listing (Streamer) to dump it in two halves at once
	// (sockdiag's Split) on two CPUs: 0 means splitMin, negative never.
	SplitMin int
}

// FileSource gives the kernel's file walk (eBPF iter/task_file), loading
// it when first called if it is not loaded yet.
type FileSource func() (procs.FileLister, error)

// Loaded is the FileSource of a walk already loaded.
func Loaded(l procs.FileLister) FileSource {
	return func() (procs.FileLister, error) { return l, nil }
}

// Collector gathers snapshots. Now is injected so tests control time.
type Collector struct {
	Opts Options
	Now  func() time.Time
	// Events, when set, adds the eBPF connection events to each snapshot.
	Events EventReader
	// Base, when set, holds each namespace's earlier sample by name: a
	// socket whose tcp_info and meminfo did not change since points at
	// that sample's (snapshot.Store.KeepSame), so a window of a million
	// idle connections holds their extras once, not twice.
	Base map[string]snapshot.Prior
	// probe reads SO_BUF_LOCK through pidfd_getfd; procs.BufLock when
	// nil (tests count the calls).
	probe func(procs.FDRef, uint32) (uint8, error)
}

// Collect takes one snapshot of each namespace. Failures of a source are
// recorded in that snapshot; a namespace that cannot be entered yields a
// snapshot holding only the error.
func (c *Collector) Collect(nss []netns.NS) []*snapshot.Snapshot {
	host, _ := os.Hostname()
	kernel := KernelRelease()
	out := make([]*snapshot.Snapshot, len(nss))
	for i, ns := range nss {
		out[i] = header(ns)
		out[i].Host, out[i].Kernel = host, kernel
	}
	p := &pass{opts: c.Opts, now: c.Now}
	// On a big host the kernel's walks of the file tables and of each
	// namespace's sockets for lock bits run beside the dumps (on another
	// CPU) and are joined after them; on a small one they follow the
	// dumps, as they cost less than a second CPU's stolen time is worth
	// to whatever else runs there.
	var files func() *fileWalk
	if c.Opts.Owners && c.Opts.Files != nil && c.procRoot() == "/proc" {
		open := OpenFiles(c.procRoot())
		files = func() *fileWalk { return p.walkFiles(open) }
		if open >= besideMin {
			files = beside(files)
		}
	}
	_ = p.namespaces(nss, out, snapshots{c}) // a snapshot sink never stops
	if c.Events != nil {
		p.events(c.Events, out)
	}
	if c.Opts.Owners {
		var fw *fileWalk
		if files != nil {
			fw = files()
		}
		_ = p.step(source.Step{Phase: "owners: join and name", Run: func() error {
			own := c.attachOwners(p, out, fw)
			for i, s := range out {
				c.nameFlowOwners(nss[i], s, own, c.procRoot())
				nameProcs(s, c.Opts.Workloads)
			}
			return nil
		}})
		// The servers' own limits, read once the listeners' owners are
		// known, within one budget and deadline for every namespace
		// (appcaps.CollectionLimits): a server not read by then is
		// unknown, and the collection goes on.
		_ = p.step(source.Step{Phase: "application limits", Run: func() error {
			budget := appcaps.NewBudget(appcaps.CollectionLimits(), time.Now())
			for _, s := range out {
				_ = p.step(source.Step{Name: snapshot.SourceAppCaps, Run: func() error {
					n := len(s.Errors)
					appcaps.Reader{ProcRoot: c.procRoot(), Budget: budget}.Fill(s)
					if len(s.Errors) > n {
						return source.ErrRecorded
					}
					return nil
				}}, s)
			}
			return nil
		}})
	}
	return out
}

// snapshots is Collector's sink: each namespace's sockets in its
// snapshot, for the rules.
type snapshots struct{ c *Collector }

func (snapshots) counters(p *pass, s *snapshot.Snapshot) (used, room int) {
	// Counters first: sockstat sizes the socket slice.
	_ = p.step(source.Step{Phase: "counters and sysctls", Run: func() error {
		procnet.Default().Fill(s)
		return nil
	}})
	return expectedSockets(s)
}

func (snapshots) joinsAfter() bool { return true }

func (to snapshots) dump(p *pass, s *snapshot.Snapshot, in *opened) error {
	_ = p.step(source.Step{Name: snapshot.SourceSockdiag, Phase: "dump", Run: func() error {
		return to.c.dump(s, in.conn, in.err)
	}}, s)
	var l *bpfsource.Locks
	_ = p.step(source.Step{Phase: "lock bits: wait", Run: func() error {
		l = in.locks.record(p.opts.LocksOff, s)
		return nil
	}})
	if l != nil {
		_ = p.step(source.Step{Phase: "lock bits: join", Run: func() error {
			joinLocks(s, l)
			return nil
		}})
	}
	return nil
}

// Settings is a snapshot of ns without sockets or owners: its counters
// and sysctls (what `bdp` compares a path with).
func Settings(ns netns.NS, now func() time.Time) (*snapshot.Snapshot, error) {
	s := header(ns)
	s.Taken = now()
	if err := netns.Do(ns, func() error { procnet.Default().Fill(s); return nil }); err != nil {
		return nil, err
	}
	return s, nil
}

func (c *Collector) procRoot() string {
	if c.Opts.ProcRoot == "" {
		return "/proc"
	}
	return c.Opts.ProcRoot
}

// Unreachable is the snapshot of a namespace that could not be looked at:
// every source failed with err, so rules say unknown rather than judge an
// empty namespace healthy.
func Unreachable(ns snapshot.Netns, taken time.Time, err error) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Taken: taken, Netns: ns}
	for _, src := range []string{snapshot.SourceNetns, snapshot.SourceSockdiag, snapshot.SourceNetstat,
		snapshot.SourceSNMP, snapshot.SourceSockstat, snapshot.SourceSysctl} {
		s.AddError(src, err)
	}
	return s
}

// dump fills s.Sockets over conn, opened in s's namespace (openErr when
// that failed), and closes it.
func (c *Collector) dump(s *snapshot.Snapshot, conn *sockdiag.Conn, openErr error) error {
	if openErr != nil {
		return openErr
	}
	defer conn.Close()
	b, hasBase := c.Base[s.Netns.Name]
	used, n := expectedSockets(s)
	if cap(b.Spare) >= n {
		// Each append overwrites a whole socket; the old sockets left
		// past the new length are cleared after the dump, so that their
		// extras are not kept alive (clearing it all first was a pass
		// over every socket between the samples). The room past them
		// was never written: clearing it would fault it in.
		s.Sockets = b.Spare[:0]
		old := len(b.Spare)
		defer func() {
			if n := len(s.Sockets); n < old && cap(s.Sockets) >= old {
				clear(s.Sockets[n:old])
			}
		}()
	} else {
		s.Sockets = newSockets(n, used, c.Opts.FaultIn)
	}
	// The decoder's socket is reused (nothing allocated per socket) and
	// copied into the snapshot; one walk of the kernel's tables serves
	// both families.
	var st snapshot.Store
	var base []snapshot.Was
	if hasBase && b.Netns.Inode == s.Netns.Inode {
		base = b.Was
	}
	f := snapshot.Follow(base)
	keepWas := c.Opts.Was
	if keepWas {
		s.Was = make([]snapshot.Was, 0, n)
	}
	opts := sockdiag.Options{States: c.Opts.States, Filter: c.Opts.Filter, Info: true, Mem: true, Reuse: true, OneWalk: true}
	err := conn.Dump(opts, func(sk *snapshot.Socket) error {
		var was *snapshot.Was
		if k, ok := f.Next(sk.Cookie); ok {
			was = &base[k]
		}
		s.Sockets = append(s.Sockets, st.KeepSame(sk, was))
		if keepWas {
			s.Was = append(s.Was, s.Sockets[len(s.Sockets)-1].Was())
		}
		return nil
	})
	return err
}

// expectedSockets sizes the dump from this namespace's sockstat: used is
// TCP and TCP6 sockets in use plus TIME_WAIT, room that with a little
// more, so 100,000 sockets are not copied over and over while the slice
// grows. TCP.alloc is not used: it counts every namespace's sockets.
func expectedSockets(s *snapshot.Snapshot) (used, room int) {
	return expectedOf(s.Sockstat)
}

// expectedOf is expectedSockets of a sockstat map.
func expectedOf(sockstat map[string]int64) (used, room int) {
	n := sockstat["TCP.inuse"] + sockstat["TCP6.inuse"] + sockstat["TCP.tw"]
	if n < 0 || n > 10_000_000 {
		n = 0
	}
	return int(n), int(n + n/16 + 64)
}

// attachOwners scans /proc once for all namespaces: socket inodes are
// unique host-wide.
//
// fw, when not nil, is the kernel's walk of every file table
// (Options.Files); the /proc walk stands in if it failed.
func (c *Collector) attachOwners(p *pass, snaps []*snapshot.Snapshot, fw *fileWalk) *procs.Owners {
	root := c.procRoot()
	// Every socket is kept: the join with the dumps is by sorting
	// (Owners.Attach), and sockets in none of them tell NoteNewest which
	// processes opened sockets since.
	own := fw.owners()
	res := source.Exec(p.opts.Phases, source.Step{Name: snapshot.SourceOwners, Phase: "owners: join", Run: func() (err error) {
		if own == nil {
			own, err = procs.Scanner{Root: root}.Scan(nil)
		}
		if own != nil {
			for _, s := range snaps {
				own.Attach(s)
			}
			own.NoteNewest()
		}
		return err
	}})
	for _, s := range snaps {
		// The walk may have run beside the dumps: its own time;
		// procs.owners is the join.
		fw.note(s)
		if own != nil && c.Opts.BufLock && (s.BufLocks == nil || s.BufLocks.From == "") {
			if why := netCgroupV1(root); why != "" {
				s.AddError(snapshot.SourceBufLock, fmt.Errorf("not probed: %s", why))
			} else {
				probeBufLocks(s, own, c.probe)
			}
		}
		res.Record(s)
	}
	return own
}

// splitMin is Options.SplitMin's default. A split dump walks the
// kernel's whole table twice, and two dumps at once on two CPUs take
// longer than one, so it pays back only for a big namespace: the dump
// of `sockets --no-owners` took as long either way at 20,000 and 100,000
// sockets, and 14% less split at 300,000 (docs/performance-history.md,
// "The night's rerun"; `tcpdoctor-lab bench --inner --split` times both).
const splitMin = 200_000

// splits reports whether a namespace expected to hold used sockets is
// dumped in two halves.
func (o Options) splits(used int) bool {
	m := o.SplitMin
	if m == 0 {
		m = splitMin
	}
	return m > 0 && used >= m
}

// besideMin is the size (sockets in a namespace, open files on the host)
// from which collection walks the kernel's tables beside the dump.
const besideMin = 20_000

// KernelFilesMin is the count of open files on the host (OpenFiles) from
// which a command that lists sockets once loads the kernel's file walk
// (eBPF iter/task_file) for their owners (with --bpf on, at any count):
// its load (2-4 ms) then costs less than the readlink of each
// /proc/PID/fd entry it saves. `bench --sizes 1000,2000,4000 --only
// sockets,kernel-owners,proc-owners` puts the crossing between 1,300 and
// 2,300 open files (docs/performance-history.md).
const KernelFilesMin = 2_000

// OpenFiles is the first field of fs/file-nr: file handles allocated on
// the host, 0 if unreadable.
func OpenFiles(procRoot string) int64 {
	b, err := os.ReadFile(procRoot + "/sys/fs/file-nr")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[0], 10, 64)
	return n
}

// background runs fn in a goroutine of its own; the func returned waits
// for its result.
func background[T any](fn func() T) func() T {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	return func() T { return <-ch }
}

// beside is background for a kernel walk beside a dump: it runs on a
// thread of its own at a lower priority (yieldToDump), so that on two
// CPUs the thread filling the dump is not the one that waits.
func beside[T any](fn func() T) func() T {
	return background(func() T {
		// Never unlocked: the thread exits with this goroutine, and
		// the Go runtime makes no thread from a locked one.
		runtime.LockOSThread()
		yieldToDump()
		return fn()
	})
}

// yieldToDump raises the calling thread's nice value by 10, to 19 at
// most (Linux sets it per thread); the caller keeps the thread to itself
// until it exits.
func yieldToDump() {
	tid := unix.Gettid()
	// The system call returns 20 - nice.
	p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return
	}
	_ = unix.Setpriority(unix.PRIO_PROCESS, tid, min(20-p+10, 19))
}

// maxBufLockProbes bounds the pidfd_getfd probes of one snapshot.
const maxBufLockProbes = 512

// probeBufLocks reads SO_BUF_LOCK for owned, established sockets whose
// buffer sizes look set by hand (a power of two: setsockopt doubles a
// round size), the only ones where the answer changes a verdict: first
// those carrying data (senders), then the rest (a pinned receiver that
// reads fast holds no data yet throttles its peer). Errors are
// summarised once. probe is procs.BufLock when nil.
func probeBufLocks(s *snapshot.Snapshot, own *procs.Owners, probe func(procs.FDRef, uint32) (uint8, error)) {
	p := probeCount{fn: probe}
	for _, busy := range []bool{true, false} {
		for i := range s.Sockets {
			if p.probed == maxBufLockProbes {
				break
			}
			if sk := &s.Sockets[i]; carriesData(sk) == busy {
				p.probe(own, sk)
			}
		}
	}
	p.record(s)
}

// netCgroupV1 says why SO_BUF_LOCK must not be probed here, or "".
// pidfd_getfd re-stamps a socket's cgroup v1 net_cls class id and
// net_prio index with ours, which would change how a host that uses those
// controllers classifies the socket's traffic: tcpdoctor is read-only.
func netCgroupV1(procRoot string) string {
	b, err := os.ReadFile(procRoot + "/self/mounts")
	if err != nil {
		return "cannot read mounts to rule out cgroup v1 net_cls/net_prio: " + err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != "cgroup" {
			continue
		}
		for _, o := range strings.Split(f[3], ",") {
			if o == "net_cls" || o == "net_prio" {
				return "cgroup v1 " + o + " is mounted (" + f[1] + "); pidfd_getfd would re-stamp the socket's " + o + " value"
			}
		}
	}
	return ""
}

// looksPinned: setsockopt doubles the asked size, so a buffer pinned to a
// round size is a power of two; autotuned ones rarely are.
func looksPinned(m *snapshot.MemInfo) bool {
	pow2 := func(v uint32) bool { return v >= 4096 && v&(v-1) == 0 }
	return pow2(m.Sndbuf) || pow2(m.Rcvbuf)
}

func carriesData(sk *snapshot.Socket) bool {
	var tb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	return sk.SendQ > 0 || sk.RecvQ > 0 || (ti != nil && ti.Unacked > 0)
}

// KernelRelease is `uname -r`.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return strings.TrimRight(string(u.Release[:]), "\x00")
}
