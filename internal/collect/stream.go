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
)

// maxHeld is how many sockets Stream holds while the owners are found
// beside the dump (about 480 bytes each); a dump that reaches it waits.
const maxHeld = 32768

// ownersDone is the outcome of Stream's owner walk.
type ownersDone struct {
	own *procs.Owners
	fw  *fileWalk // the kernel's walk, if one ran
	err error     // the /proc walk's
	d   time.Duration
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
func (st *Streamer) walkOwners(root string) ownersDone {
	start := time.Now()
	ph := st.Opts.Phases
	var out ownersDone
	if st.Opts.Files != nil && root == "/proc" {
		end := ph.Begin("owners: eBPF iter/task_file load")
		l, err := st.Opts.Files()
		end()
		if err == nil {
			end := ph.Begin("owners: kernel file walk")
			w := walkFiles(l, OpenFiles(root))
			end()
			out.fw, out.own = &w, w.own
		}
	}
	if out.own == nil {
		end := ph.Begin("owners: /proc walk")
		out.own, out.err = procs.Scanner{Root: root}.Scan(nil)
		end()
	}
	out.d = time.Since(start)
	if out.own != nil {
		end := ph.Begin("owners: name workloads")
		out.named = nameAll(out.own.Procs, st.Opts.Workloads)
		end()
	}
	return out
}

// record notes the walk in every header and gives them its processes.
func (o ownersDone) record(heads []*snapshot.Snapshot) {
	for _, s := range heads {
		o.fw.note(s)
		s.Sources = append(s.Sources, snapshot.SourceStat{Source: snapshot.SourceOwners, OK: o.err == nil, Duration: o.d})
		if o.err != nil {
			s.AddError(snapshot.SourceOwners, o.err)
		}
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
	var own *procs.Owners
	// With the kernel's walk to load, the owners are found beside the
	// first dump (the load is mostly user-space work, the dump the
	// kernel's); otherwise before it.
	var beside chan ownersDone
	if st.Opts.Owners {
		if st.Opts.Files != nil && root == "/proc" && !st.Opts.BufLock {
			beside = make(chan ownersDone, 1)
			go func() { beside <- st.walkOwners(root) }()
		} else {
			o := st.walkOwners(root)
			o.record(heads)
			own = o.own
		}
	}
	// takeOwners puts the walk's owners in place once it is done, waiting
	// for it if block; it reports whether they are in place.
	takeOwners := func(block bool) bool {
		if beside == nil {
			return true
		}
		var o ownersDone
		if block {
			end := st.Opts.Phases.Begin("dump: wait for owners")
			o = <-beside
			end()
		} else {
			select {
			case o = <-beside:
			default:
				return false
			}
		}
		beside = nil
		o.record(heads)
		own = o.own
		return true
	}
	// Never return while the walk runs: the caller closes what it loaded.
	defer takeOwners(true)
	limit := st.hold
	if limit == 0 {
		limit = maxHeld
	}
	var pids []int
	probe := st.Opts.BufLock && own != nil
	if probe {
		if why := netCgroupV1(root); why != "" {
			probe = false
			for _, s := range heads {
				s.AddError(snapshot.SourceBufLock, fmt.Errorf("not probed: %s", why))
			}
		}
	}
	opts := sockdiag.Options{States: st.Opts.States, Info: true, Mem: true, Filter: st.Opts.Filter, Reuse: true, OneWalk: true, Split: true}
	for i, ns := range nss {
		s := heads[i]
		var fnErr error
		var probes probeCount
		// In the namespace: the lock bits and the netlink socket, which
		// belongs to it from then on. The dump runs after, on this
		// goroutine rather than netns.Do's locked thread, which would
		// have to be woken for each datagram the receiver hands over.
		var find func(int, uint64) (bpfsource.SockLock, bool)
		var conn *sockdiag.Conn
		var openErr error
		var start time.Time
		err := netns.Do(ns, func() error {
			s.Taken = st.Now()
			if locks := readLocks(st.Opts.Locks, st.Opts.LocksOff, s); locks != nil {
				find = locks.Joiner()
			}
			start = time.Now()
			conn, openErr = sockdiag.Open()
			if openErr == nil {
				// A big namespace is dumped in two halves at once:
				// sockstat says how big (the dump is whole where
				// sockstat or the second socket fails).
				counts := make(map[string]int64, 16)
				if procnet.Default().Sockstats(counts) == nil {
					if used, _ := expectedOf(counts); st.Opts.splits(used) {
						_ = conn.OpenHalf()
					}
				}
			}
			return nil
		})
		emit := func(sk *snapshot.Socket) error {
			sk.Pids = snapshot.PidList{}
			if own != nil {
				pids = ownerPids(own, sk.Inode, pids[:0])
				sk.Pids = snapshot.PidsAt(&pids) // rewritten for the next socket
			}
			if probe && find == nil {
				probes.probe(own, sk)
			}
			if err := fn(s, sk); err != nil {
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
		if err == nil {
			dumpErr := openErr
			if conn != nil {
				began := st.Opts.Phases.Stamp()
				var split bool
				split, dumpErr = conn.DumpHalves(opts, func(_ int, sk *snapshot.Socket) error {
					if find != nil {
						if v := lockOf(find, sk); v.Known() {
							sk.BufLock = v
						}
					}
					if len(held.socks) > 0 || beside != nil {
						if !takeOwners(len(held.socks) >= limit) {
							held.add(sk)
							return nil
						}
						if err := flush(); err != nil {
							return err
						}
					}
					return emit(sk)
				})
				if split {
					st.Opts.Phases.Span("dump, two halves at once", began)
				} else {
					st.Opts.Phases.Span("dump", began)
				}
				_ = conn.Close()
			}
			if fnErr == nil && len(held.socks) > 0 {
				takeOwners(true)
				_ = flush() // an error is in fnErr
			}
			if fnErr == nil {
				probes.record(s)
				s.Sources = append(s.Sources, snapshot.SourceStat{Source: snapshot.SourceSockdiag, OK: dumpErr == nil, Duration: time.Since(start)})
				if dumpErr != nil {
					s.AddError(snapshot.SourceSockdiag, dumpErr)
				}
			}
		}
		if fnErr != nil {
			return heads, fnErr
		}
		if err != nil {
			u := Unreachable(s.Netns, st.Now(), err)
			s.Taken, s.Errors = u.Taken, append(s.Errors, u.Errors...)
		}
	}
	if st.Events != nil {
		// Collector.addEvents reads once for all namespaces as well.
		(&Collector{Events: st.Events}).addEvents(heads)
	}
	return heads, nil
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
