// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

type fakeLocks struct {
	l   *bpfsource.Locks
	err error
}

func (f fakeLocks) Read(int) (*bpfsource.Locks, error) { return f.l, f.err }

// joinLocksOf reads and joins the lock bits as Collect does, the walk
// beside (here: before) the dump, in the test's own namespace.
func joinLocksOf(t *testing.T, c *Collector, s *snapshot.Snapshot) {
	t.Helper()
	ns, err := netns.Default().Current()
	if err != nil {
		t.Fatal(err)
	}
	if l := c.startLocks(ns, 0).record(c.Opts.LocksOff, s); l != nil {
		joinLocks(s, l)
	}
}

// The lock bits join by cookie; a failed or foreign walk leaves them
// unknown and says why.
func TestReadLocks(t *testing.T) {
	mk := func() *snapshot.Snapshot {
		return &snapshot.Snapshot{Netns: snapshot.Netns{Inode: 42}, Sockets: []snapshot.Socket{
			{Cookie: 1, State: snapshot.Established}, {Cookie: 2, State: snapshot.Listen}, {Cookie: 3, State: snapshot.TimeWait},
		}}
	}
	walk := &bpfsource.Locks{Netns: 42, Recs: []bpfsource.SockLock{{Cookie: 2}, {Cookie: 1, Locks: 3}}}
	s := mk()
	joinLocksOf(t, &Collector{Opts: Options{Locks: fakeLocks{l: walk}}}, s)
	if s.BufLocks == nil || s.BufLocks.From != snapshot.LocksIter || !s.Sockets[0].BufLock.Known() || s.Sockets[0].BufLock.Bits() != 3 ||
		!s.Sockets[1].BufLock.Known() || s.Sockets[1].BufLock.Bits() != 0 || s.Sockets[2].BufLock.Known() {
		t.Errorf("joined: origin %+v, sockets %+v", s.BufLocks, s.Sockets)
	}
	for name, c := range map[string]*Collector{
		"failed walk":      {Opts: Options{Locks: fakeLocks{err: errors.New("bpfsource: socklocks: open iterator: boom")}}},
		"foreign walk":     {Opts: Options{Locks: fakeLocks{l: &bpfsource.Locks{Netns: 7, Recs: walk.Recs}}}},
		"not loaded":       {Opts: Options{LocksOff: "eBPF off (--bpf off)"}},
		"not loaded, why?": {},
	} {
		s := mk()
		joinLocksOf(t, c, s)
		if s.BufLocks == nil || s.BufLocks.From != "" || s.BufLocks.Why == "" || s.Sockets[0].BufLock.Known() {
			t.Errorf("%s: origin %+v, sockets %+v", name, s.BufLocks, s.Sockets)
		}
		if _, failed := s.Failed(snapshot.SourceSockLocks); failed != (c.Opts.Locks != nil) {
			t.Errorf("%s: errors %+v", name, s.Errors)
		}
	}
}

// TestNoPidfdByDefault holds a pinned, owned, established connection in a
// namespace of its own and collects it as the commands do: without the
// opt-in no fd is ever duplicated; with it, only where the iterator gave
// nothing; with the iterator every socket gets its bits read-only.
func TestNoPidfdByDefault(t *testing.T) {
	ns := testns.New(t, "lock")
	var fds []int
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	var ln net.Listener
	var conn net.Conn
	var cookie uint64
	err := netns.Do(ns, func() error {
		var err error
		if ln, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 16384); err != nil {
			return err
		}
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: ln.Addr().(*net.TCPAddr).Port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if conn, err = ln.Accept(); err != nil {
			return err
		}
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close(); _ = conn.Close() }()
	cgroupV1 := netCgroupV1("/proc") != ""

	collectWith := func(opts Options) (*snapshot.Snapshot, *snapshot.Socket, int) {
		t.Helper()
		probes := 0
		c := &Collector{Opts: opts, Now: time.Now, probe: func(ref procs.FDRef, ino uint32) (uint8, error) {
			probes++
			return procs.BufLock(ref, ino)
		}}
		s := c.Collect([]netns.NS{ns})[0]
		for i := range s.Sockets {
			if s.Sockets[i].Cookie == cookie {
				return s, &s.Sockets[i], probes
			}
		}
		t.Fatalf("pinned socket (cookie %d) not collected: %+v", cookie, s.Errors)
		return nil, nil, 0
	}

	// As check, serve and record collect without eBPF and without the opt-in.
	s, sk, probes := collectWith(Options{Owners: true, LocksOff: "eBPF off (--bpf off)"})
	if probes != 0 || sk.BufLock.Known() || s.BufLocks == nil || s.BufLocks.Why != "eBPF off (--bpf off)" {
		t.Errorf("default: %d pidfd probes, lock %v, origin %+v; want none, unknown, and why", probes, sk.BufLock, s.BufLocks)
	}
	if !cgroupV1 {
		s, sk, probes = collectWith(Options{Owners: true, BufLock: true})
		if probes == 0 || !sk.BufLock.Known() || sk.BufLock.Bits() != bpfsource.LockSnd || s.BufLocks.From != snapshot.LocksPidfd {
			t.Errorf("opt-in: %d probes, lock %v, origin %+v", probes, sk.BufLock, s.BufLocks)
		}
	}
	l, err := bpfsource.OpenSockLocks(nil)
	if errors.Is(err, bpfsource.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	s, sk, probes = collectWith(Options{Owners: true, BufLock: true, Locks: l})
	if probes != 0 || !sk.BufLock.Known() || sk.BufLock.Bits() != bpfsource.LockSnd || s.BufLocks.From != snapshot.LocksIter {
		t.Errorf("iter/tcp: %d probes, lock %v, origin %+v", probes, sk.BufLock, s.BufLocks)
	}
	// What the rules make of it: proof, from the iterator.
	if p := tcpmodel.JudgeBufFrom(sk.Mem.Sndbuf, 0, sk.BufLock, tcpmodel.LockSnd, tcpmodel.SndLimits(s), s.BufLocks); !p.Pinned || !p.Proof ||
		!strings.Contains(p.Source(), "iter/tcp") {
		t.Errorf("pinned sender judged %+v, source %q", p, p.Source())
	}
	for _, o := range s.Sockets {
		if o.State != snapshot.TimeWait && !o.BufLock.Known() {
			t.Errorf("socket %s %s -> %s has no lock bits from iter/tcp", o.State, o.Local, o.Remote)
		}
		if o.Cookie != cookie && o.BufLock.Known() && o.BufLock.Bits() != 0 {
			t.Errorf("socket %s %s: lock %d, set on none but the client", o.State, o.Local, o.BufLock.Bits())
		}
	}
	if !strings.Contains(strings.Join(sourceNames(s), " "), snapshot.SourceSockLocks) {
		t.Errorf("sources %v lack %s", sourceNames(s), snapshot.SourceSockLocks)
	}
}

func sourceNames(s *snapshot.Snapshot) []string {
	var out []string
	for _, st := range s.Sources {
		out = append(out, st.Source)
	}
	return out
}
