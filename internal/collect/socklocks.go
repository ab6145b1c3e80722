package collect

import (
	"fmt"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// LockReader walks the TCP sockets of the namespace the calling thread is
// in and returns their lock bits (*bpfsource.SockLocks, eBPF iter/tcp).
type LockReader interface {
	Read() (*bpfsource.Locks, error)
}

// readLocks runs inside the namespace, after the dump: it joins the
// iterator's lock bits to the dumped sockets by cookie and records where
// the bits came from, or why there are none.
func (c *Collector) readLocks(s *snapshot.Snapshot) {
	if l := readLocks(c.Opts.Locks, c.Opts.LocksOff, s); l != nil {
		joinLocks(s, l)
	}
}

// readLocks reads the lock bits of the namespace the thread is in with
// r, recording in s where the bits came from, or why there are none
// (off, when r is nil). It returns nil when there are none.
func readLocks(r LockReader, off string, s *snapshot.Snapshot) *bpfsource.Locks {
	if r == nil {
		if off == "" {
			off = "the eBPF iter/tcp iterator was not loaded"
		}
		s.BufLocks = &snapshot.BufLockOrigin{Why: off}
		return nil
	}
	start := time.Now()
	l, err := r.Read()
	if err == nil && l.Netns != 0 && s.Netns.Inode != 0 && l.Netns != s.Netns.Inode {
		err = fmt.Errorf("bpfsource: socklocks: the iterator walked namespace %d, not %d", l.Netns, s.Netns.Inode)
	}
	s.Sources = append(s.Sources, snapshot.SourceStat{Source: snapshot.SourceSockLocks, OK: err == nil, Duration: time.Since(start)})
	if err != nil {
		s.AddError(snapshot.SourceSockLocks, err)
		s.BufLocks = &snapshot.BufLockOrigin{Why: err.Error()}
		return nil
	}
	s.BufLocks = &snapshot.BufLockOrigin{From: snapshot.LocksIter}
	return l
}

// joinLocks sets BufLock of every socket the walk saw. Sockets it did not
// see (TIME_WAIT and request sockets, or closed since the dump) stay nil.
func joinLocks(s *snapshot.Snapshot, l *bpfsource.Locks) {
	// The bits are 0..3: sockets point into one array, not an
	// allocation each.
	vals := &[4]uint8{0, 1, 2, 3}
	find := l.Joiner()
	for i := range s.Sockets {
		if v := lockOf(find, &s.Sockets[i], vals); v != nil {
			s.Sockets[i].BufLock = v
		}
	}
}

// lockOf points at the lock bits the walk saw for sk, in vals (which
// holds 0..3); nil when it did not see the socket. Sockets without a
// tcp_sock, which the walk skips, are not looked for: they cost no
// search.
func lockOf(find func(uint64) (bpfsource.SockLock, bool), sk *snapshot.Socket, vals *[4]uint8) *uint8 {
	if sk.Cookie == 0 || sk.State == snapshot.TimeWait || sk.State == snapshot.SynRecv {
		return nil
	}
	if sl, ok := find(sk.Cookie); ok && int(sl.Locks) < len(vals) {
		return &vals[sl.Locks]
	}
	return nil
}
