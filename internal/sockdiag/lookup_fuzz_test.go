// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// lookupReply frames a reply as the kernel sends one to an exact lookup:
// a datagram of its own, without NLM_F_MULTI, carrying the request's seq.
func lookupReply(typ uint16, seq uint32, body []byte) []byte {
	b := make([]byte, nlmsgHdrLen+len(body))
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], typ)
	ne.PutUint32(b[8:], seq)
	copy(b[nlmsgHdrLen:], body)
	return b
}

// errReply is the NLMSG_ERROR answering req with e (the kernel copies the
// request after the error code).
func errReply(seq uint32, e syscall.Errno, req []byte) []byte {
	body := make([]byte, 4+len(req))
	ne.PutUint32(body, uint32(-int32(e)))
	copy(body[4:], req)
	return lookupReply(nlmsgError, seq, body)
}

// loopbackPair connects two sockets over 127.0.0.1 in this namespace and
// returns the dialer's key as a dump reports it.
func loopbackPair(t testing.TB, c *Conn) Key {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	d, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	port := uint16(d.LocalAddr().(*net.TCPAddr).Port)
	var key Key
	found := false
	err = c.Dump(Options{States: 1 << snapshot.Established, Filter: &Filter{LPorts: []uint16{port}}}, func(sk *snapshot.Socket) error {
		key, found = KeyOf(sk), true
		return nil
	})
	if err != nil || !found {
		t.Fatalf("dumping the dialer on port %d: found %v, %v", port, found, err)
	}
	return key
}

// liveReplies asks the kernel for a loopback socket that exists and one
// that does not, with the package's request encoder, and returns the two
// reply datagrams as received (none where sock_diag cannot be opened).
func liveReplies(t testing.TB, seq uint32) [][]byte {
	t.Helper()
	c, err := Open()
	if err != nil {
		t.Log("no live lookup replies as seeds: no sock_diag here:", err)
		return nil
	}
	defer c.Close()
	key := loopbackPair(t, c)
	gone := key
	gone.Cookie++
	var req []byte
	req = appendExact(req, key, seq, lookupExt(Options{Info: true, Mem: true}))
	req = appendExact(req, gone, seq+1, 0)
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	buf := make([]byte, slotLen)
	for range 2 {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			t.Fatalf("receiving lookup replies: %v", err)
		}
		out = append(out, slices.Clone(buf[:n]))
	}
	return out
}

type lookupSeed struct {
	b     []byte
	first uint32
	n     uint8
}

func lookupSeeds(f *testing.F) []lookupSeed {
	msgs, _, _ := fixtureMessages(f)
	var bodies [][]byte
	for _, m := range msgs {
		if ne.Uint16(m[4:]) == sockDiagByFam && len(bodies) < 6 {
			bodies = append(bodies, m[nlmsgHdrLen:])
		}
	}
	req := appendExact(nil, Key{Family: unix.AF_INET, Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:80")),
		Remote: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:40000")), Cookie: 7}, 7, 0)
	const wrap = 0xfffffff0
	seeds := []lookupSeed{
		{lookupReply(sockDiagByFam, 1000, bodies[0]), 1000, 1},
		{lookupReply(sockDiagByFam, 999, bodies[0]), 1000, 1}, // stale
		{errReply(1003, unix.ENOENT, req), 1000, 8},           // gone
		{errReply(1000, unix.EPERM, req), 1000, 1},            // refused
		{append(lookupReply(sockDiagByFam, 1001, bodies[1]), errReply(1002, unix.ENOENT, req)...), 1000, 4},
		// A batch whose seqs wrap past 2^32: before and after the wrap.
		{lookupReply(sockDiagByFam, wrap+5, bodies[2]), wrap, 63},
		{lookupReply(sockDiagByFam, 5, bodies[3]), wrap, 63},
		{errReply(2, unix.ENOENT, req), wrap, 63},
	}
	for i, b := range bodies {
		seeds = append(seeds, lookupSeed{lookupReply(sockDiagByFam, 50+uint32(i), b), 50, 7})
	}
	for _, d := range liveReplies(f, 4000) {
		seeds = append(seeds, lookupSeed{d, 4000, 1}, lookupSeed{d, 3999, 1}, lookupSeed{d, 4000, 1})
	}
	return seeds
}

type framed struct {
	typ uint16
	seq uint32
}

// frames splits a datagram into netlink messages; ok is false when it is
// not made of whole ones.
func frames(b []byte) (out []framed, ok bool) {
	for off := 0; off < len(b); {
		if len(b)-off < nlmsgHdrLen {
			return nil, false
		}
		n := int(ne.Uint32(b[off:]))
		if n < nlmsgHdrLen || n > len(b)-off {
			return nil, false
		}
		out = append(out, framed{typ: ne.Uint16(b[off+4:]), seq: ne.Uint32(b[off+8:])})
		off += (n + 3) &^ 3
	}
	return out, len(b) > 0
}

// FuzzWalkLookup: the walk of lookup replies never panics, passes only
// indexes inside the batch, and, on a datagram of whole messages, counts
// every reply to one of the batch's requests and passes each socket with
// the index its seq says, whether or not the batch's seqs wrap past 2^32.
func FuzzWalkLookup(f *testing.F) {
	for _, s := range lookupSeeds(f) {
		f.Add(s.b, s.first, s.n)
	}
	f.Fuzz(func(t *testing.T, b []byte, first uint32, n8 uint8) {
		n := int(n8)%lookupBatch + 1
		var c Conn
		var got []int
		replies, err := walkLookup(b, first, n, func(i int, sk *snapshot.Socket) error {
			if i < 0 || i >= n {
				t.Fatalf("index %d in a batch of %d", i, n)
			}
			if sk == nil || !sk.Local.IsValid() || !sk.Remote.IsValid() {
				t.Fatalf("socket %d without addresses: %+v", i, sk)
			}
			got = append(got, i)
			return nil
		}, c.decodeShared)
		if replies < len(got) || replies > len(b)/nlmsgHdrLen {
			t.Fatalf("%d replies, %d sockets, from %d bytes", replies, len(got), len(b))
		}
		msgs, ok := frames(b)
		if !ok || err != nil {
			return
		}
		var want []int
		wantReplies := 0
		for _, m := range msgs {
			k := m.seq - first // a request's place in the batch, modulo 2^32
			if k >= uint32(n) || m.typ != sockDiagByFam && m.typ != nlmsgError {
				continue
			}
			wantReplies++
			if m.typ == sockDiagByFam {
				want = append(want, int(k))
			}
		}
		if replies != wantReplies || !slices.Equal(got, want) {
			t.Fatalf("batch of %d from seq %#x: %d replies, sockets %v; want %d, %v", n, first, replies, got, wantReplies, want)
		}
	})
}

// TestLookupSeqWrap: a Conn whose seq wraps past 2^32 in the middle of a
// batch still gets every reply (they were taken for stale ones, and the
// lookup waited for them forever). Loopback, this namespace, no root.
func TestLookupSeqWrap(t *testing.T) {
	c, err := Open()
	if err != nil {
		t.Skip("no sock_diag here:", err)
	}
	defer c.Close()
	key := loopbackPair(t, c)
	// A stuck lookup fails after 2 s instead of hanging the test.
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2}); err != nil {
		t.Fatal(err)
	}
	keys := make([]Key, 32)
	for i := range keys {
		keys[i] = key
	}
	c.seq = 0xffffffff - 10 // the batch's seqs run from 2^32-10 to 21
	seen := make([]bool, len(keys))
	err = c.Lookup(Options{Info: true}, keys, func(i int, sk *snapshot.Socket) error {
		if sk.Cookie != key.Cookie {
			t.Errorf("key %d: socket %d, want %d", i, sk.Cookie, key.Cookie)
		}
		seen[i] = true
		return nil
	})
	if err != nil {
		t.Fatalf("lookup across the seq wrap: %v", err)
	}
	for i, ok := range seen {
		if !ok {
			t.Errorf("key %d not answered", i)
		}
	}
	if c.seq != 21 {
		t.Errorf("seq %d after the batch, want 21", c.seq)
	}
	start := time.Now()
	if err := c.Lookup(Options{}, keys[:1], func(int, *snapshot.Socket) error { return nil }); err != nil || time.Since(start) > time.Second {
		t.Errorf("the next lookup: %v after %v", err, time.Since(start))
	}
}
