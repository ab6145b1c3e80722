// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"errors"
	"fmt"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procnet"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/source"
)

// maxHeld is how many sockets Stream holds while the owners are found
// beside the dump (about 480 bytes each); a dump that reaches it waits.
const maxHeld = 32768

// ownersDone is the outcome of Stream's owner walk.
type ownersDone struct {
	own *procs.Owners
	fw  *fileWalk     // the kernel's walk, if one ran
	res source.Result // the whole walk's
	// named is what could not be resolved of the owners' workloads.
	named error
}

// walkOwners finds every socket's owners: by the kernel's file walk when
// Files loads it, else (or if that walk fails) from /proc. Every
// socket inode is kept: the walk comes before or beside the dump, so
// which ones it will list is not known yet.
//
// The owners' workloads are resolved here too, so that a walk beside the
// dump names them beside it as well.
func (p *pass) walkOwners(root string) ownersDone {
	var out ownersDone
	out.res = source.Exec(p.opts.Phases, source.Step{Name: snapshot.SourceOwners, Run: func() error {
		if p.opts.Files != nil && root == "/proc" {
			out.fw = p.walkFiles(OpenFiles(root))
			out.own = out.fw.owners()
		}
		if out.own != nil {
			return nil
		}
		var err error
		_ = p.step(source.Step{Phase: "owners: /proc walk", Run: func() error {
			out.own, err = procs.Scanner{Root: root}.Scan(nil)
			return nil
		}})
		return err
	}})
	if out.own != nil {
		_ = p.step(source.Step{Phase: "owners: name workloads", Run: func() error {
			out.named = nameAll(out.own.Procs, p.opts.Workloads)
			return nil
		}})
	}
	return out
}

// record notes the walk in every header and gives them its processes.
func (o ownersDone) record(heads []*snapshot.Snapshot) {
	for _, s := range heads {
		o.fw.note(s)
		o.res.Record(s)
		if o.own != nil {
			s.Procs = o.own.Procs
		}
		if o.named != nil && s == heads[0] {
			s.AddError(snapshot.SourceContainers, o.named) // said once: the processes are every namespace's
		}
	}
}

// heldRows are sockets dumped before their owners were known, copied.
type heldRows struct {
	store snapshot.Store
	socks []snapshot.Socket
}

func (h *heldRows) add(sk *snapshot.Socket) { h.socks = append(h.socks, h.store.Keep(sk)) }

// Streamer hands out each socket as the dump decodes it, without holding
// the namespace's sockets: what `sockets` needs to print 1,000,000 rows in
// constant memory. Rules need whole snapshots; they use Collector.
type Streamer struct {
	// Opts says what to dump. With Files set (and ProcRoot /proc, and no
	// BufLock) the owners are found beside the first dump, whose sockets
	// wait in a bounded buffer until they are known.
	Opts Options
	Now  func() time.Time
	// Events, when set, adds the eBPF connection events to each header.
	Events EventReader
	// hold is how many sockets may wait for the owners (maxHeld when 0;
	// tests make it small).
	hold int
}

// Stream dumps each namespace in turn and calls fn with each socket. The
// socket, its extras and its Pids (sorted, unique, all owners) are reused:
// valid only during the call. s is the namespace's header, also reused for
// all its sockets: Netns, Taken (when its dump began), Procs (every
// process seen holding a socket, in any namespace, shared by all headers)
// and the errors so far. An error from fn stops Stream and is returned as
// is; a source's failure is recorded in the header instead, and the
// headers come back complete (Sources, Errors, Events) once every
// namespace is done.
func (st *Streamer) Stream(nss []netns.NS, fn func(s *snapshot.Snapshot, sk *snapshot.Socket) error) ([]*snapshot.Snapshot, error) {
	heads := make([]*snapshot.Snapshot, len(nss))
	for i, ns := range nss {
		heads[i] = header(ns)
	}
	root := st.Opts.ProcRoot
	if root == "" {
		root = "/proc"
	}
	p := &pass{opts: st.Opts, now: st.Now}
	to := &rows{fn: fn, heads: heads, limit: st.hold}
	if to.limit == 0 {
		to.limit = maxHeld
	}
	// With the kernel's walk to load, the owners are found beside the
	// first dump (the load is mostly user-space work, the dump the
	// kernel's); otherwise before it.
	if st.Opts.Owners {
		if st.Opts.Files != nil && root == "/proc" && !st.Opts.BufLock {
			to.beside = make(chan ownersDone, 1)
			go func() { to.beside <- p.walkOwners(root) }()
		} else {
			o := p.walkOwners(root)
			o.record(heads)
			to.own = o.own
		}
	}
	// Never return while the walk runs: the caller closes what it loaded.
	defer to.takeOwners(p, true)
	to.probe = st.Opts.BufLock && to.own != nil
	if to.probe {
		if why := netCgroupV1(root); why != "" {
			to.probe = false
			for _, s := range heads {
				s.AddError(snapshot.SourceBufLock, fmt.Errorf("not probed: %s", why))
			}
		}
	}
	if err := p.namespaces(nss, heads, to); err != nil {
		return heads, err
	}
	if st.Events != nil {
		p.events(st.Events, heads)
	}
	return heads, nil
}

// rows is Streamer's sink: each socket handed to fn as the dump decodes
// it, with its owners and lock bits.
type rows struct {
	fn    func(s *snapshot.Snapshot, sk *snapshot.Socket) error
	heads []*snapshot.Snapshot
	own   *procs.Owners
	// beside, when set, brings the owners walked beside the first dump;
	// its sockets wait in held (limit at most) until they come.
	beside chan ownersDone
	limit  int
	probe  bool
	pids   []int
}

// counters reads sockstat alone: how big the namespace is, to split
// its dump; nothing is kept.
func (*rows) counters(_ *pass, _ *snapshot.Snapshot) (used, room int) {
	counts := make(map[string]int64, 16)
	if procnet.Default().Sockstats(counts) != nil {
		return 0, 0 // dumped whole
	}
	used, _ = expectedOf(counts)
	return used, 0
}

func (*rows) joinsAfter() bool { return false }

// takeOwners puts the walk's owners in place once it is done, waiting
// for it if block; it reports whether they are in place.
func (r *rows) takeOwners(p *pass, block bool) bool {
	if r.beside == nil {
		return true
	}
	var o ownersDone
	if block {
		_ = p.step(source.Step{Phase: "dump: wait for owners", Run: func() error {
			o = <-r.beside
			return nil
		}})
	} else {
		select {
		case o = <-r.beside:
		default:
			return false
		}
	}
	r.beside = nil
	o.record(r.heads)
	r.own = o.own
	return true
}

func (r *rows) dump(p *pass, s *snapshot.Snapshot, in *opened) error {
	var find func(int, uint64) (bpfsource.SockLock, bool)
	if locks := in.locks.record(p.opts.LocksOff, s); locks != nil {
		find = locks.Joiner()
	}
	var fnErr error
	var probes probeCount
	emit := func(sk *snapshot.Socket) error {
		sk.Pids = snapshot.PidList{}
		if r.own != nil {
			r.pids = ownerPids(r.own, sk.Inode, r.pids[:0])
			sk.Pids = snapshot.PidsAt(&r.pids) // rewritten for the next socket
		}
		if r.probe && find == nil {
			probes.probe(r.own, sk)
		}
		if err := r.fn(s, sk); err != nil {
			fnErr = err
			return err
		}
		return nil
	}
	var held heldRows
	flush := func() error {
		for i := range held.socks {
			if err := emit(&held.socks[i]); err != nil {
				return err
			}
		}
		held = heldRows{}
		return nil
	}
	res := source.Exec(nil, source.Step{Name: snapshot.SourceSockdiag, Run: func() error {
		if in.conn == nil {
			return in.err
		}
		opts := sockdiag.Options{States: p.opts.States, Info: true, Mem: true, Filter: p.opts.Filter, Reuse: true, OneWalk: true, Split: true}
		began := p.opts.Phases.Stamp()
		split, err := in.conn.DumpHalves(opts, func(_ int, sk *snapshot.Socket) error {
			if find != nil {
				if v := lockOf(find, sk); v.Known() {
					sk.BufLock = v
				}
			}
			if len(held.socks) > 0 || r.beside != nil {
				if !r.takeOwners(p, len(held.socks) >= r.limit) {
					held.add(sk)
					return nil
				}
				if err := flush(); err != nil {
					return err
				}
			}
			return emit(sk)
		})
		_ = in.conn.Close()
		// The phase is named by how the dump went.
		if split {
			p.opts.Phases.Span("dump, two halves at once", began)
		} else {
			p.opts.Phases.Span("dump", began)
		}
		if fnErr == nil && len(held.socks) > 0 {
			r.takeOwners(p, true)
			_ = flush() // an error is in fnErr
		}
		return err
	}})
	if fnErr != nil {
		return fnErr
	}
	probes.record(s)
	res.Record(s)
	return nil
}

// probeCount is the pidfd_getfd probes of one namespace (Stream's, or
// probeBufLocks').
type probeCount struct {
	fn             func(procs.FDRef, uint32) (uint8, error) // procs.BufLock when nil
	probed, failed int
	lastErr        error
}

// probe reads SO_BUF_LOCK of sk if it is owned, established, without lock
// bits yet and looks pinned, while fewer than maxBufLockProbes were read.
func (p *probeCount) probe(own *procs.Owners, sk *snapshot.Socket) {
	if p.probed == maxBufLockProbes || sk.BufLock.Known() || sk.State != snapshot.Established || sk.Mem == nil || !looksPinned(sk.Mem) {
		return
	}
	refs := own.Refs(sk.Inode)
	if len(refs) == 0 {
		return
	}
	p.probed++
	fn := p.fn
	if fn == nil {
		fn = procs.BufLock
	}
	v, err := fn(refs[0], sk.Inode)
	switch {
	case errors.Is(err, procs.ErrFDReused):
		// closed since the scan: nothing to say
	case err != nil:
		p.failed++
		p.lastErr = err
	default:
		sk.BufLock = snapshot.FlagsOf(v)
	}
}

// record notes the probes in s: the failures summarised once, and where
// the lock bits came from.
func (p *probeCount) record(s *snapshot.Snapshot) {
	if p.failed > 0 {
		s.AddError(snapshot.SourceBufLock, fmt.Errorf("%d sockets not probed: %w", p.failed, p.lastErr))
	}
	if p.probed > 0 {
		o := &snapshot.BufLockOrigin{From: snapshot.LocksPidfd, Why: "only owned, established sockets that looked pinned were probed"}
		if s.BufLocks != nil && s.BufLocks.Why != "" {
			o.Why += "; iter/tcp: " + s.BufLocks.Why
		}
		s.BufLocks = o
	}
}

// ownerPids appends the sorted, unique pids holding inode to buf.
func ownerPids(own *procs.Owners, inode uint32, buf []int) []int {
	if inode == 0 {
		return buf
	}
	return own.AppendPids(buf, inode)
}
