// SPDX-License-Identifier: Apache-2.0

package window

import (
	"context"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// Samples start interval apart: the wait is what the collection left of
// the interval, never negative.
func TestPause(t *testing.T) {
	for _, c := range []struct{ interval, took, want time.Duration }{
		{time.Second, 300 * time.Millisecond, 700 * time.Millisecond},
		{time.Second, 0, time.Second},
		{time.Second, 2 * time.Second, 0},
		{time.Second, time.Second, 0},
	} {
		if got := Pause(c.interval, c.took); got != c.want {
			t.Errorf("Pause(%v, %v) = %v, want %v", c.interval, c.took, got, c.want)
		}
	}
}

type countLocks struct{ n *int }

func (c countLocks) Read(int) (*bpfsource.Locks, error) {
	*c.n++
	return &bpfsource.Locks{}, nil
}

// The sample that starts the window skips the lock-bit walk; the last
// one reads it, and each says where its bits came from or why not.
func TestSampleWalksLocksForTheLastSampleOnly(t *testing.T) {
	ns, err := netns.Default().Current()
	if err != nil {
		t.Skip(err)
	}
	walks := 0
	c := &collect.Collector{Opts: collect.Options{Locks: countLocks{&walks}, ProcRoot: "/proc"}, Now: time.Now}
	noSleep := func(context.Context, time.Duration) error { return nil }
	ss, err := Sample(context.Background(), c, []netns.NS{ns}, 2, time.Second, noSleep, nil)
	if err != nil || len(ss) != 1 || len(ss[0].Snaps) != 2 {
		t.Fatalf("%v %+v", err, ss)
	}
	first, last := ss[0].Snaps[0].BufLocks, ss[0].Snaps[1].BufLocks
	if walks != 1 || first == nil || first.From != "" || !strings.Contains(first.Why, "starts the window") || last == nil || last.From == "" {
		t.Errorf("%d walks; first %+v, last %+v", walks, first, last)
	}
	if c.Opts.Locks == nil {
		t.Error("Sample changed the caller's collector")
	}
	walks = 0
	if _, err := Sample(context.Background(), c, []netns.NS{ns}, 1, 0, noSleep, nil); err != nil || walks != 1 {
		t.Errorf("one sample: %d walks, %v", walks, err)
	}
}

// The last sample keeps the first's tcp_info and meminfo of a connection
// that moved nothing between them, and its own of one that sent data.
func TestSampleSharesUnchangedExtras(t *testing.T) {
	ns := testns.New(t, "share")
	var idle, busy [2]net.Conn
	err := netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		t.Cleanup(func() { ln.Close() })
		for _, p := range []*[2]net.Conn{&idle, &busy} {
			if p[0], p[1], err = testns.DialAccept(ln); err != nil {
				return err
			}
			t.Cleanup(func() { p[0].Close(); p[1].Close() })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Let the handshakes' last ACKs settle before the first sample.
	time.Sleep(50 * time.Millisecond)
	send := func(context.Context, time.Duration) error {
		if _, err := busy[0].Write(make([]byte, 1000)); err != nil {
			return err
		}
		_, err := io.ReadFull(busy[1], make([]byte, 1000))
		time.Sleep(20 * time.Millisecond)
		return err
	}
	c := &collect.Collector{Opts: collect.Options{ProcRoot: "/proc"}, Now: time.Now}
	ss, err := Sample(context.Background(), c, []netns.NS{ns}, 2, time.Second, send, nil)
	if err != nil || len(ss) != 1 || len(ss[0].Snaps) != 2 {
		t.Fatalf("%v %+v", err, ss)
	}
	base, last := ss[0].Base, ss[0].Snaps[1]
	if base == nil || ss[0].Snaps[0] != base.Snap {
		t.Fatalf("first sample not kept as a base: %+v", ss[0])
	}
	// The base keeps the listener whole and the connections as Was.
	for i := range base.Snap.Sockets {
		if st := base.Snap.Sockets[i].State; st == snapshot.Established {
			t.Errorf("base keeps an established socket whole: %+v", base.Snap.Sockets[i])
		}
	}
	find := func(s *snapshot.Snapshot, end net.Conn) *snapshot.Socket {
		for i := range s.Sockets {
			if sk := &s.Sockets[i]; sk.Local.String() == end.LocalAddr().String() && sk.Remote.String() == end.RemoteAddr().String() {
				return sk
			}
		}
		t.Fatalf("no socket %v-%v in %d sockets", end.LocalAddr(), end.RemoteAddr(), len(s.Sockets))
		return nil
	}
	was := func(b *snapshot.Socket) *snapshot.Was {
		for i := range base.Was {
			if base.Was[i].Cookie == b.Cookie {
				return &base.Was[i]
			}
		}
		t.Fatalf("cookie %d not in the base's %d", b.Cookie, len(base.Was))
		return nil
	}
	var ab, bb snapshot.TCPInfo
	for _, end := range idle {
		b := find(last, end)
		a := was(b)
		if !a.HasTCP() || !b.SharesTCP(a) || b.Mem != a.Mem {
			t.Errorf("idle %v: info shared %v, mem shared %v", end.LocalAddr(), b.SharesTCP(a), b.Mem == a.Mem)
		}
	}
	for _, end := range busy {
		b := find(last, end)
		a := was(b)
		ai, bi := a.TCP(&ab), b.TCP(&bb)
		if ai == nil || bi == nil || b.SharesTCP(a) || bi.BytesAcked+bi.BytesReceived != ai.BytesAcked+ai.BytesReceived+1000 {
			t.Errorf("busy %v: first %+v, last %+v", end.LocalAddr(), ai, bi)
		}
	}
}

// The last sample fills the first's socket slice (what a million sockets
// cost once, not twice) and leaves nothing of the first's sockets past
// its own: there fewer connections were open.
func TestSampleReusesTheFirstSlice(t *testing.T) {
	ns := testns.New(t, "spare")
	conns := testns.Connections(t, ns, 20)
	closeMost := func(context.Context, time.Duration) error {
		for _, c := range conns[5:] {
			// A reset: no TIME_WAIT left behind to dump.
			c[0].(*net.TCPConn).SetLinger(0)
			c[0].Close()
			c[1].(*net.TCPConn).SetLinger(0)
			c[1].Close()
		}
		time.Sleep(50 * time.Millisecond)
		return nil
	}
	c := &collect.Collector{Opts: collect.Options{ProcRoot: "/proc"}, Now: time.Now}
	ss, err := Sample(context.Background(), c, []netns.NS{ns}, 2, time.Second, closeMost, nil)
	if err != nil || len(ss) != 1 || len(ss[0].Snaps) != 2 {
		t.Fatalf("%v %+v", err, ss)
	}
	last := ss[0].Snaps[1].Sockets
	if len(last) >= 41 || len(last) < 11 {
		t.Fatalf("%d sockets in the last sample, want the listener and 5 connections' 10", len(last))
	}
	// A slice made for the last sample has room for its 11 sockets and
	// 64 more; the first's, for 41 and 64 more.
	if cap(last) < 41+64 {
		t.Errorf("the last sample's slice has room for %d sockets: not the first's", cap(last))
	}
	for i, sk := range last[len(last):cap(last)] {
		if !reflect.ValueOf(sk).IsZero() {
			t.Fatalf("socket %d past the last sample's %d is the first's: %+v", len(last)+i, len(last), sk)
		}
	}
}
