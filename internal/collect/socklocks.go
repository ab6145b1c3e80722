// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"fmt"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/source"
)

// LockReader walks the TCP sockets of the namespace the calling thread is
// in and returns their lock bits (*bpfsource.SockLocks, eBPF iter/tcp);
// hint is how many sockets to expect.
type LockReader interface {
	Read(hint int) (*bpfsource.Locks, error)
}

// lockWalk is a walk of one namespace's sockets for their lock bits,
// started by startLocks or lockNow.
type lockWalk struct {
	r    LockReader
	wait func() lockResult
}

type lockResult struct {
	l   *bpfsource.Locks
	res source.Result
}

// startLocks is startLocks of c's LockReader (the tests' way in).
func (c *Collector) startLocks(ns netns.NS, hint int) lockWalk {
	return startLocks(c.Opts.Locks, ns, hint)
}

// startLocks starts reading the lock bits of ns with r beside the dump,
// in a thread of its own in that namespace; nothing is read without a
// LockReader.
func startLocks(r LockReader, ns netns.NS, hint int) lockWalk {
	if r == nil {
		return lockWalk{}
	}
	return lockWalk{r: r, wait: background(func() lockResult {
		var out lockResult
		out.res = source.Exec(nil, source.Step{Name: snapshot.SourceSockLocks, Run: func() error {
			var err error
			if derr := netns.Do(ns, func() error {
				yieldToDump() // Do's thread exits with it
				out.l, err = r.Read(hint)
				return nil
			}); derr != nil {
				return derr
			}
			return err
		}})
		return out
	})}
}

// lockNow is startLocks in the calling thread, which is in the
// namespace: the walk is done when it returns.
func lockNow(r LockReader, hint int) lockWalk {
	w := lockWalk{r: r}
	if r != nil {
		var out lockResult
		out.res = source.Exec(nil, source.Step{Name: snapshot.SourceSockLocks, Run: func() (err error) {
			out.l, err = r.Read(hint)
			return err
		}})
		w.wait = func() lockResult { return out }
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
	out := w.wait()
	l, res := out.l, out.res
	if res.Err == nil && l.Netns != 0 && s.Netns.Inode != 0 && l.Netns != s.Netns.Inode {
		res.Err = fmt.Errorf("bpfsource: socklocks: the iterator walked namespace %d, not %d", l.Netns, s.Netns.Inode)
	}
	res.Record(s)
	if res.Err != nil {
		s.BufLocks = &snapshot.BufLockOrigin{Why: res.Err.Error()}
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
