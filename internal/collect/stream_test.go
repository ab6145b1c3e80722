// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/phases"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// brokenFiles is a FileLister whose walk fails.
type brokenFiles struct{}

func (brokenFiles) Files(func(tgid, pid, fd, ino uint32)) error {
	return errors.New("iterator read: truncated record")
}

// streamed is one Stream of a namespace: each socket's owners by its
// addresses, in the order the rows came, and the namespace's header.
type streamed struct {
	owners map[string][]int
	order  []string
	head   *snapshot.Snapshot
}

// streamOwners streams ns with load as Options.Files and hold
// as Streamer.hold; every row must come with its header's processes.
func streamOwners(t *testing.T, ns netns.NS, load func() (procs.FileLister, error), hold int) streamed {
	t.Helper()
	st := &Streamer{Opts: Options{Owners: true, ProcRoot: "/proc", Files: load}, Now: time.Now, hold: hold}
	out := streamed{owners: map[string][]int{}}
	heads, err := st.Stream([]netns.NS{ns}, func(s *snapshot.Snapshot, sk *snapshot.Socket) error {
		if s.Procs == nil {
			t.Errorf("a row came before its header's processes")
		}
		k := sk.Local.String() + ">" + sk.Remote.String()
		out.owners[k] = slices.Clone(sk.Pids.List())
		out.order = append(out.order, k)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out.head = heads[0]
	return out
}

// loader is a Files source that waits, then returns l or err.
func loader(l procs.FileLister, err error, wait time.Duration) func() (procs.FileLister, error) {
	return func() (procs.FileLister, error) {
		time.Sleep(wait)
		return l, err
	}
}

// TestStreamFileOwners: owners found by the kernel's file walk beside the
// dump are those the /proc walk finds, rows in the same order, also when
// the walk ends after the dump and when it outlasts the sockets Stream
// may hold; a program that cannot load leaves the /proc walk without a
// word, and a walk that fails is said.
func TestStreamFileOwners(t *testing.T) {
	ns := testns.New(t, "strown")
	var closers []func()
	t.Cleanup(func() {
		for _, c := range closers {
			c()
		}
	})
	err := netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		closers = append(closers, func() { ln.Close() })
		for range 3 {
			c, s, err := testns.DialAccept(ln)
			if err != nil {
				return err
			}
			closers = append(closers, func() { c.Close(); s.Close() })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	viaProc := streamOwners(t, ns, nil, 0)
	if len(viaProc.order) != 7 {
		t.Fatalf("streamed %d sockets, want 7 (a listener, three pairs)", len(viaProc.order))
	}
	for k, pids := range viaProc.owners {
		if !slices.Contains(pids, os.Getpid()) {
			t.Fatalf("/proc walk: %s owned by %v, want us (%d)", k, pids, os.Getpid())
		}
	}
	same := func(what string, got streamed) {
		t.Helper()
		if !slices.Equal(got.order, viaProc.order) {
			t.Errorf("%s: rows in order %v, /proc walk %v", what, got.order, viaProc.order)
		}
		for k, want := range viaProc.owners {
			if !slices.Equal(got.owners[k], want) {
				t.Errorf("%s: %s owned by %v, /proc walk %v", what, k, got.owners[k], want)
			}
		}
	}

	fo, err := bpfsource.OpenFileOwners(nil)
	if err != nil {
		t.Logf("iter/task_file cannot load here (%v): only the fallbacks are checked", err)
	} else {
		defer fo.Close()
		for _, c := range []struct {
			what string
			wait time.Duration
			hold int
		}{
			{"kernel walk", 0, 0},
			{"kernel walk ending after the dump", 200 * time.Millisecond, 0},
			{"kernel walk outlasting two held sockets", 200 * time.Millisecond, 2},
		} {
			got := streamOwners(t, ns, loader(fo, nil, c.wait), c.hold)
			same(c.what, got)
			if !hasSource(got.head, snapshot.SourceFileOwners, true) {
				t.Errorf("%s: sources %+v, want %s ok", c.what, got.head.Sources, snapshot.SourceFileOwners)
			}
		}
	}

	refused := streamOwners(t, ns, loader(nil, errors.New("not root"), 0), 0)
	same("program refused", refused)
	if hasSource(refused.head, snapshot.SourceFileOwners, true) || hasSource(refused.head, snapshot.SourceFileOwners, false) || len(refused.head.Errors) > 0 && slices.ContainsFunc(refused.head.Errors, func(e snapshot.SourceError) bool { return e.Source == snapshot.SourceFileOwners }) {
		t.Errorf("a program that did not load is recorded: sources %+v, errors %+v", refused.head.Sources, refused.head.Errors)
	}

	broken := streamOwners(t, ns, loader(brokenFiles{}, nil, 0), 0)
	same("failed kernel walk", broken)
	if !hasSource(broken.head, snapshot.SourceFileOwners, false) {
		t.Errorf("sources %+v: want %s, failed", broken.head.Sources, snapshot.SourceFileOwners)
	}
	said := false
	for _, e := range broken.head.Errors {
		said = said || e.Source == snapshot.SourceFileOwners && strings.Contains(e.Err, "truncated record") && strings.Contains(e.Err, "/proc/PID/fd instead")
	}
	if !said {
		t.Errorf("errors %+v: the failed walk and the fallback are not said", broken.head.Errors)
	}
}

func hasSource(s *snapshot.Snapshot, name string, ok bool) bool {
	for _, src := range s.Sources {
		if src.Source == name && src.OK == ok {
			return true
		}
	}
	return false
}

// TestStreamSplit: a namespace at SplitMin or more is dumped in two
// halves at once (the phase says so), and lists the same sockets with
// the same owners and lock bits (where iter/tcp loads) as a whole dump;
// below it the dump is whole.
func TestStreamSplit(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a split dump needs two CPUs")
	}
	ns := testns.New(t, "strsplit")
	for _, addr := range []string{"127.0.0.1:20001", "127.0.0.1:" + strconv.Itoa(sockdiag.SplitPort+1)} {
		conns := testns.ConnectionsAt(t, ns, addr, 8)
		// A pinned send buffer at one client of each: its lock bit.
		if err := conns[0][0].(*net.TCPConn).SetWriteBuffer(64 << 10); err != nil {
			t.Fatal(err)
		}
	}
	var locks LockReader
	if l, err := bpfsource.OpenSockLocks(nil); err == nil {
		defer func() { _ = l.Close() }()
		locks = l
	} else {
		t.Logf("iter/tcp cannot load here (%v): lock bits not compared", err)
	}
	list := func(splitMin int) (rows []string, phase string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "phases")
		rec := phases.New(phases.Now(), path)
		st := &Streamer{Opts: Options{Owners: true, ProcRoot: "/proc", SplitMin: splitMin, Phases: rec, Locks: locks}, Now: time.Now}
		var halves [2]int
		pinned := 0
		if _, err := st.Stream([]netns.NS{ns}, func(_ *snapshot.Snapshot, sk *snapshot.Socket) error {
			rows = append(rows, fmt.Sprint(sk.State, sk.Local, sk.Remote, sk.Cookie, sk.Pids.List(), sk.BufLock))
			if sk.BufLock.Known() && sk.BufLock.Bits() != 0 {
				pinned++
			}
			halves[sockdiag.HalfOf(sk.Local.Port(), sk.Remote.Port())]++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if halves[0] == 0 || halves[1] == 0 {
			t.Fatalf("halves of %v sockets: both must hold some", halves)
		}
		if locks != nil && pinned != 2 {
			t.Errorf("%d sockets with lock bits, want the 2 pinned", pinned)
		}
		if err := rec.Write(); err != nil {
			t.Fatal(err)
		}
		f, err := phases.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range f.Spans {
			if strings.HasPrefix(s.Name, "dump") {
				phase = s.Name
			}
		}
		slices.Sort(rows)
		return rows, phase
	}
	whole, wp := list(-1)
	split, sp := list(1)
	if wp != "dump" || sp != "dump, two halves at once" {
		t.Errorf("phases %q and %q, want a whole dump, then two halves", wp, sp)
	}
	if !slices.Equal(whole, split) {
		t.Errorf("split dump listed\n%v\nwhole dump\n%v", split, whole)
	}
	if _, p := list(1 << 20); p != "dump" {
		t.Errorf("under SplitMin: phase %q, want a whole dump", p)
	}
}
