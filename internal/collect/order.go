// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"fmt"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/source"
)

// The order of a collection, one for both ways in (Collector, Streamer),
// which differ in their sink: where a namespace's sockets go.
//
//  1. Before the namespaces: the owners, when the sink hands each socket
//     out with them (Streamer; beside the first dump when the kernel's
//     file walk loads), or the kernel's file walk alone, beside the
//     dumps on a big host (Collector).
//  2. In each namespace (netns.Do): its clock, the counters and sysctls
//     (sockstat alone for a listing), the lock bits (their walk started
//     beside a big dump whose sockets are joined after it) and the
//     sock_diag socket, which belongs to the namespace from then on.
//  3. After it, on this goroutine rather than netns.Do's locked thread
//     (which would have to be woken for each datagram the receiver hands
//     over): the dump into the sink, the lock bits joined.
//  4. After every namespace: the eBPF connection events; the owners, the
//     buffer-lock probe and the workloads' names where the sink kept the
//     sockets; then the servers' own limits.
//
// Every source runs as a source.Step: source.Exec times it and marks its
// phase, and its Result records its SourceStat and error.

// A sink is where the dumps' sockets go.
type sink interface {
	// counters reads, in the namespace, the counters the sink keeps in s
	// and says how many sockets to expect (expectedOf).
	counters(p *pass, s *snapshot.Snapshot) (used, room int)
	// joinsAfter reports whether the sink joins the lock bits after the
	// dump (their walk may then run beside it) rather than as each
	// socket comes.
	joinsAfter() bool
	// dump fills the sink from what the namespace opened.
	dump(p *pass, s *snapshot.Snapshot, in *opened) error
}

// pass is one collection's settings, shared by its steps.
type pass struct {
	opts Options
	now  func() time.Time
}

// opened is what a namespace's visit leaves for its dump.
type opened struct {
	conn  *sockdiag.Conn
	err   error // sockdiag.Open's
	locks lockWalk
}

// step runs st, timed and its phase marked, and records it in snaps.
func (p *pass) step(st source.Step, snaps ...*snapshot.Snapshot) error {
	return source.Run(p.opts.Phases, st, snaps...)
}

// namespaces visits each of nss in turn, heads its snapshots, and dumps
// it into to. An error from the sink (its caller's) stops the pass; a
// namespace that cannot be entered is recorded unreachable.
func (p *pass) namespaces(nss []netns.NS, heads []*snapshot.Snapshot, to sink) error {
	for i, ns := range nss {
		s := heads[i]
		var in opened
		err := netns.Do(ns, func() error {
			s.Taken = p.now()
			used, room := to.counters(p, s)
			if to.joinsAfter() && room >= besideMin {
				in.locks = startLocks(p.opts.Locks, ns, room)
			} else {
				_ = p.step(source.Step{Phase: "lock bits (iter/tcp)", Run: func() error {
					in.locks = lockNow(p.opts.Locks, room)
					return nil
				}})
			}
			in.conn, in.err = sockdiag.Open()
			if in.err == nil && !to.joinsAfter() && p.opts.splits(used) {
				// A big namespace is dumped in two halves at once (the
				// dump is whole where the second socket fails).
				_ = in.conn.OpenHalf()
			}
			return nil
		})
		if err != nil {
			u := Unreachable(s.Netns, p.now(), err)
			s.Taken, s.Errors = u.Taken, append(s.Errors, u.Errors...)
			continue
		}
		if err := to.dump(p, s, &in); err != nil {
			return err
		}
	}
	return nil
}

// events reads the event counters once and gives each snapshot its
// namespace's share. A namespace without events gets an empty section:
// the source ran and saw nothing, which differs from no source.
func (p *pass) events(r EventReader, snaps []*snapshot.Snapshot) {
	var got *bpfsource.Reading
	if p.step(source.Step{Name: snapshot.SourceBPF, Run: func() (err error) {
		got, err = r.Read()
		return err
	}}, snaps...) != nil {
		return
	}
	for _, s := range snaps {
		s.Events = eventsOf(got, s.Netns.Inode)
	}
}

// fileWalk is the outcome of the kernel's walk of every file table,
// indexed.
type fileWalk struct {
	own *procs.Owners // every socket's holders, not yet attached
	res source.Result // the walk alone
}

// walkFiles loads the kernel's file walk (Options.Files) and lists with
// it every process's files, indexing their sockets' owners (it needs
// nothing from the dumps); open is the host's open files (OpenFiles), to
// size the records. Nil when the walk cannot load: the /proc walk stands
// in without a word.
func (p *pass) walkFiles(open int64) *fileWalk {
	var l procs.FileLister
	if p.step(source.Step{Phase: "owners: eBPF iter/task_file load", Run: func() (err error) {
		l, err = p.opts.Files()
		return err
	}}) != nil {
		return nil
	}
	w := &fileWalk{}
	w.res = source.Exec(p.opts.Phases, source.Step{Name: snapshot.SourceFileOwners, Phase: "owners: kernel file walk", Run: func() error {
		files, err := procs.ReadFiles(l, int(min(open, 10_000_000)))
		if err != nil {
			return fmt.Errorf("%w; owners read from /proc/PID/fd instead", err)
		}
		w.own = procs.Scanner{Root: "/proc"}.OwnersOf(files, nil)
		return nil
	}})
	return w
}

// note records the walk as a source of s; nothing when there was none.
func (fw *fileWalk) note(s *snapshot.Snapshot) {
	if fw != nil {
		fw.res.Record(s)
	}
}

// owners is the walk's owners, nil when there was none or it failed.
func (fw *fileWalk) owners() *procs.Owners {
	if fw == nil || fw.res.Err != nil {
		return nil
	}
	return fw.own
}
