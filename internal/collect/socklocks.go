// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"fmt"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
)

// LockReader walks the TCP sockets of the namespace the calling thread is
// in and returns their lock bits (*bpfsource.SockLocks, eBPF iter/tcp);
// hint is how many sockets to expect.
type LockReader interface {
	Read(hint int) (*bpfsource.Locks, error)
}

// lockWalk is a walk of one namespace's sockets for their lock bits,
// started by startLocks.
type lockWalk struct {
	r    LockReader
	wait func() lockResult
}

type lockResult struct {
	l    *bpfsource.Locks
	err  error
	took time.Duration
}

// startLocks starts reading the lock bits of ns beside the dump, in a
// thread of its own in that namespace; nothing is read without a
// LockReader.
func (c *Collector) startLocks(ns netns.NS, hint int) lockWalk {
	r := c.Opts.Locks
	if r == nil {
		return lockWalk{}
	}
	return lockWalk{r: r, wait: background(func() lockResult {
		var res lockResult
		start := time.Now()
		if err := netns.Do(ns, func() error {
			yieldToDump() // Do's thread exits with it
			res.l, res.err = r.Read(hint)
			return nil
		}); err != nil {
			res.err = err
		}
		res.took = time.Since(start)
		return res
	})}
}

// readLocks reads the lock bits of the namespace the thread is in with
// r, now, and records them as lockWalk.record does.
func readLocks(r LockReader, off string, s *snapshot.Snapshot) *bpfsource.Locks {
	return lockNow(r, len(s.Sockets)).record(off, s)
}

// lockNow is startLocks in the calling thread, which is in the
// namespace: the walk is done when it returns.
func lockNow(r LockReader, hint int) lockWalk {
	w := lockWalk{r: r}
	if r != nil {
		start := time.Now()
		l, err := r.Read(hint)
		res := lockResult{l, err, time.Since(start)}
		w.wait = func() lockResult { return res }
	}
	return w
}

// record waits for the walk and records in s where the bits came from,
// or why there are none (off, when there was no LockReader). It returns
// nil when there are none.
func (w lockWalk) record(off string, s *snapshot.Snapshot) *bpfsource.Locks {
	if w.r == nil {
		if off == "" {
			off = "the eBPF iter/tcp iterator was not loaded"
		}
		s.BufLocks = &snapshot.BufLockOrigin{Why: off}
		return nil
	}
	res := w.wait()
	l, err := res.l, res.err
	if err == nil && l.Netns != 0 && s.Netns.Inode != 0 && l.Netns != s.Netns.Inode {
		err = fmt.Errorf("bpfsource: socklocks: the iterator walked namespace %d, not %d", l.Netns, s.Netns.Inode)
	}
	s.Sources = append(s.Sources, snapshot.SourceStat{Source: snapshot.SourceSockLocks, OK: err == nil, Duration: res.took})
	if err != nil {
		s.AddError(snapshot.SourceSockLocks, err)
		s.BufLocks = &snapshot.BufLockOrigin{Why: err.Error()}
		return nil
	}
	s.BufLocks = &snapshot.BufLockOrigin{From: snapshot.LocksIter}
	return l
}

// joinLocks sets BufLock of every socket the walk saw. Sockets it did not
// see (TIME_WAIT and request sockets, or closed since the dump) stay
// unknown.
func joinLocks(s *snapshot.Snapshot, l *bpfsource.Locks) {
	find := l.Joiner()
	for i := range s.Sockets {
		if v := lockOf(find, &s.Sockets[i]); v.Known() {
			s.Sockets[i].BufLock = v
		}
	}
}

// lockOf returns the lock bits (0..3) the walk saw for sk; unknown when
// it did not see the socket. Sockets without a tcp_sock, which the walk
// skips, are not looked for: they cost no search.
func lockOf(find func(int, uint64) (bpfsource.SockLock, bool), sk *snapshot.Socket) snapshot.Flags {
	if sk.Cookie == 0 || sk.State == snapshot.TimeWait || sk.State == snapshot.SynRecv {
		return snapshot.Flags{}
	}
	if sl, ok := find(laneOf(sk), sk.Cookie); ok && sl.Locks <= 3 {
		return snapshot.FlagsOf(sl.Locks)
	}
	return snapshot.Flags{}
}

// laneOf is the half of a split dump sk is in (sockdiag.HalfOf): each
// half comes in the lock walk's order, whether the dump was split or not
// (bpfsource.Locks.Joiner).
func laneOf(sk *snapshot.Socket) int {
	return sockdiag.HalfOf(sk.Local.Port(), sk.Remote.Port())
}
