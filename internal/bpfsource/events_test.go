// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// testNames stands for a kernel's BTF enums in decoder tests.
var testNames = reasonNames{
	drops:  map[uint32]string{2: "NOT_SPECIFIED", 3: "NO_SOCKET", 77: "TCP_LISTEN_OVERFLOW"},
	resets: map[uint32]string{0: "NOT_SPECIFIED", 1: "NO_SOCKET", 12: "TCP_ABORT_ON_LINGER"},
}

// rawEvent builds a struct event as the kernel writes it.
func rawEvent(kind EventKind, ts uint64, ns, pid uint32, comm string, local, remote netip.AddrPort, reason uint32) []byte {
	ne := binary.NativeEndian
	b := make([]byte, eventSize)
	ne.PutUint64(b[0:], ts)
	ne.PutUint32(b[8:], ns)
	ne.PutUint32(b[12:], pid)
	copy(b[16:32], comm)
	fam := uint16(syscall.AF_INET6)
	if local.Addr().Is4() {
		fam = syscall.AF_INET
		l, r := local.Addr().As4(), remote.Addr().As4()
		copy(b[32:], l[:])
		copy(b[48:], r[:])
	} else {
		l, r := local.Addr().As16(), remote.Addr().As16()
		copy(b[32:], l[:])
		copy(b[48:], r[:])
	}
	ne.PutUint16(b[64:], local.Port())
	ne.PutUint16(b[66:], remote.Port())
	ne.PutUint16(b[68:], fam)
	b[70] = byte(kind)
	ne.PutUint32(b[72:], reason)
	return b
}

func testDecoder() *decoder {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return &decoder{names: &testNames, wall: func(ns uint64) time.Time { return t0.Add(time.Duration(ns)) }}
}

func TestDecodeEvent(t *testing.T) {
	d := testDecoder()
	t0 := d.wall(0)
	l, r := netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.0.5:8080")
	for _, tc := range []struct {
		name string
		raw  []byte
		want Event
	}{
		{"failed connect keeps the caller", rawEvent(FailedConnect, 5, 7, 812, "nginx", netip.AddrPortFrom(netip.IPv4Unspecified(), 0), r, 99),
			Event{Time: t0.Add(5), Kind: FailedConnect, Netns: 7, Pid: 812, Comm: "nginx",
				Local: netip.MustParseAddrPort("0.0.0.0:0"), Remote: r, Reason: "EADDRNOTAVAIL"}},
		{"refused connect: errno, no process", rawEvent(FailedConnect, 5, 7, 0, "", l, r, 111),
			Event{Time: t0.Add(5), Kind: FailedConnect, Netns: 7, Local: l, Remote: r, Reason: "ECONNREFUSED"}},
		{"timed-out connect", rawEvent(FailedConnect, 5, 7, 0, "", l, r, 110),
			Event{Time: t0.Add(5), Kind: FailedConnect, Netns: 7, Local: l, Remote: r, Reason: "ETIMEDOUT"}},
		{"abandoned connect keeps the closer", rawEvent(FailedConnect, 5, 7, 812, "curl", l, r, 0),
			Event{Time: t0.Add(5), Kind: FailedConnect, Netns: 7, Pid: 812, Comm: "curl", Local: l, Remote: r, Reason: Abandoned}},
		{"unnamed errno", rawEvent(FailedConnect, 5, 7, 0, "", l, r, 4000),
			Event{Time: t0.Add(5), Kind: FailedConnect, Netns: 7, Local: l, Remote: r, Reason: "errno 4000"}},
		{"linger reset keeps the closer", rawEvent(ResetSent, 1, 7, 812, "nginx", l, r, 12),
			Event{Time: t0.Add(1), Kind: ResetSent, Netns: 7, Pid: 812, Comm: "nginx", Local: l, Remote: r, Reason: "TCP_ABORT_ON_LINGER"}},
		{"reset for no socket is softirq: no process", rawEvent(ResetSent, 1, 7, 99, "ksoftirqd/0", l, r, 1),
			Event{Time: t0.Add(1), Kind: ResetSent, Netns: 7, Local: l, Remote: r, Reason: "NO_SOCKET"}},
		{"unnamed reset reason", rawEvent(ResetSent, 1, 7, 0, "", l, r, 1000),
			Event{Time: t0.Add(1), Kind: ResetSent, Netns: 7, Local: l, Remote: r, Reason: "reason 1000"}},
		{"received reset", rawEvent(ResetReceived, 2, 7, 5, "x", l, r, 0),
			Event{Time: t0.Add(2), Kind: ResetReceived, Netns: 7, Local: l, Remote: r}},
		{"overflow", rawEvent(ListenOverflow, 3, 7, 0, "", netip.MustParseAddrPort("[::]:8080"), netip.MustParseAddrPort("[2001:db8::1]:5000"), 77),
			Event{Time: t0.Add(3), Kind: ListenOverflow, Netns: 7, Local: netip.MustParseAddrPort("[::]:8080"),
				Remote: netip.MustParseAddrPort("[2001:db8::1]:5000"), Reason: "TCP_LISTEN_OVERFLOW"}},
		{"syn retransmit, v4-mapped", rawEvent(SynRetransmit, 4, 7, 0, "", netip.MustParseAddrPort("[::ffff:10.0.0.1]:40000"), netip.MustParseAddrPort("[::ffff:10.0.0.5]:8080"), 0),
			Event{Time: t0.Add(4), Kind: SynRetransmit, Netns: 7, Local: l, Remote: r}},
	} {
		got, err := d.decode(tc.raw)
		if err != nil || got != tc.want {
			t.Errorf("%s: decode = %+v, %v\nwant %+v", tc.name, got, err, tc.want)
		}
	}
	good := rawEvent(SynRetransmit, 4, 7, 0, "", l, r, 0)
	if _, err := d.decode(good[:eventSize-1]); err == nil {
		t.Error("short event decoded")
	}
	bad := append([]byte(nil), good...)
	bad[70] = 9
	if _, err := d.decode(bad); err == nil {
		t.Error("unknown kind decoded")
	}
	bad = append([]byte(nil), good...)
	bad[68] = 99
	if _, err := d.decode(bad); err == nil {
		t.Error("unknown family decoded")
	}
	if FailedConnect.String() != "failed-connect" || EventKind(0).String() != "kind-0" || EventKind(200).String() != "kind-200" {
		t.Errorf("kind names: %v %v %v", FailedConnect, EventKind(0), EventKind(200))
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add(rawEvent(ResetSent, 1, 7, 812, "nginx", netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), 12))
	f.Add(rawEvent(ListenOverflow, 1<<63, 7, 0, "", netip.MustParseAddrPort("[::1]:1"), netip.MustParseAddrPort("[::2]:2"), 1<<31))
	f.Add(rawEvent(FailedConnect, 1, 7, 0, "", netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:1"), 111))
	f.Add([]byte{})
	d := testDecoder()
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := d.decode(b)
		if err != nil {
			return
		}
		if !e.Local.IsValid() || !e.Remote.IsValid() || e.Kind.String() == "" {
			t.Errorf("decoded event %+v has invalid fields", e)
		}
		if e.Pid != 0 && e.Kind != FailedConnect && e.Kind != ResetSent {
			t.Errorf("pid kept for %v, which runs in softirq or timer context", e.Kind)
		}
	})
}

func rawPeer(ns, reason uint32, peer netip.AddrPort, lport uint16, flag bool) []byte {
	ne := binary.NativeEndian
	k := make([]byte, peerKeySize)
	ne.PutUint32(k[0:], ns)
	ne.PutUint32(k[4:], reason)
	fam := uint16(syscall.AF_INET6)
	a := peer.Addr().As16()
	if peer.Addr().Is4() {
		fam = syscall.AF_INET
		a4 := peer.Addr().As4()
		a = [16]byte{}
		copy(a[:], a4[:])
	}
	copy(k[8:], a[:])
	ne.PutUint16(k[24:], peer.Port())
	ne.PutUint16(k[26:], lport)
	ne.PutUint16(k[28:], fam)
	if flag {
		k[30] = 1
	}
	return k
}

func rawDrop(ns, reason uint32, listener netip.AddrPort) []byte {
	ne := binary.NativeEndian
	k := make([]byte, dropKeySize)
	ne.PutUint32(k[0:], ns)
	ne.PutUint32(k[4:], reason)
	if listener.IsValid() {
		fam := uint16(syscall.AF_INET6)
		a := listener.Addr().As16()
		if listener.Addr().Is4() {
			fam = syscall.AF_INET
			a4 := listener.Addr().As4()
			a = [16]byte{}
			copy(a[:], a4[:])
		}
		copy(k[8:], a[:])
		ne.PutUint16(k[24:], listener.Port())
		ne.PutUint16(k[26:], fam)
	}
	return k
}

func TestDecodeCounters(t *testing.T) {
	ns, d, err := decodeDrop(&testNames, rawDrop(9, 77, netip.MustParseAddrPort("0.0.0.0:8080")), 380)
	if err != nil || ns != 9 || d != (Drop{Reason: "TCP_LISTEN_OVERFLOW", Listener: netip.MustParseAddrPort("0.0.0.0:8080"), Count: 380}) {
		t.Errorf("decodeDrop = %d %+v %v", ns, d, err)
	}
	_, d, err = decodeDrop(&testNames, rawDrop(9, 3, netip.AddrPort{}), 2)
	if err != nil || d.Listener.IsValid() || d.Reason != "NO_SOCKET" {
		t.Errorf("decodeDrop without listener = %+v %v", d, err)
	}
	if _, _, err := decodeDrop(&testNames, make([]byte, 3), 1); err == nil {
		t.Error("short drop key decoded")
	}
	ns, reason, peer, lport, flag, err := decodePeer(rawPeer(9, 12, netip.MustParseAddrPort("[2001:db8::5]:0"), 8080, true))
	if err != nil || ns != 9 || reason != 12 || peer.String() != "[2001:db8::5]:0" || lport != 8080 || !flag {
		t.Errorf("decodePeer = %d %d %v %d %v %v", ns, reason, peer, lport, flag, err)
	}
	k := rawPeer(9, 0, netip.MustParseAddrPort("10.0.0.5:80"), 0, false)
	k[28] = 1
	if _, _, _, _, _, err := decodePeer(k); err == nil {
		t.Error("unknown family decoded")
	}
}

func FuzzDecodeCounters(f *testing.F) {
	f.Add(rawDrop(9, 77, netip.MustParseAddrPort("0.0.0.0:8080")))
	f.Add(rawPeer(9, 12, netip.MustParseAddrPort("10.0.0.5:80"), 0, true))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, key []byte) {
		if _, d, err := decodeDrop(&testNames, key, 1); err == nil && d.Reason == "" {
			t.Errorf("drop without reason: %+v", d)
		}
		if _, _, peer, _, _, err := decodePeer(key); err == nil && !peer.IsValid() {
			t.Errorf("peer decoded invalid: %v", peer)
		}
	})
}

// TestEventsClosed: a closed source streams nothing and says why.
func TestEventsClosed(t *testing.T) {
	s := &Source{closed: true}
	if _, err := s.Events(context.Background()); err == nil {
		t.Error("Events on a closed source succeeded")
	}
	s = &Source{}
	if _, err := s.Events(context.Background()); err == nil {
		t.Error("Events without programs succeeded")
	}
	if err := (&Source{closed: true}).Close(); err != nil || errors.Is(err, ErrNotSupported) {
		t.Errorf("second Close = %v", err)
	}
}
