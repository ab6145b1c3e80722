// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

func rawLock(cookie uint64, ns uint32, state, locks uint8, snd, rcv int32) []byte {
	ne := binary.NativeEndian
	b := make([]byte, sockLockSize)
	ne.PutUint64(b[0:], cookie)
	ne.PutUint32(b[8:], ns)
	ne.PutUint32(b[12:], uint32(snd))
	ne.PutUint32(b[16:], uint32(rcv))
	b[20], b[21] = state, locks
	return b
}

func TestDecodeSockLocks(t *testing.T) {
	in := append(rawLock(7, 4026531840, 1, 3, 32768, 65536), rawLock(9, 4026531840, 10, 0, 16384, 131072)...)
	got, err := decodeSockLocks(bytes.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]SockLock{
		7: {Cookie: 7, State: 1, Locks: 3},
		9: {Cookie: 9, State: 10},
	}
	if got.Netns != 4026531840 || len(byCookie(got)) != 2 || byCookie(got)[7] != want[7] || byCookie(got)[9] != want[9] {
		t.Errorf("decoded %+v, want netns 4026531840 and %+v", got, want)
	}
	if got, err := decodeSockLocks(bytes.NewReader(nil), 0); err != nil || got.Netns != 0 || len(byCookie(got)) != 0 {
		t.Errorf("empty input = %+v, %v", got, err)
	}
	bad := map[string][]byte{
		"truncated":      in[:30],
		"zero cookie":    rawLock(0, 1, 1, 0, 1, 1),
		"zero netns":     rawLock(1, 0, 1, 0, 1, 1),
		"time-wait":      rawLock(1, 1, 6, 0, 1, 1),
		"state 14":       rawLock(1, 1, 14, 0, 1, 1),
		"bind lock bits": rawLock(1, 1, 1, 4, 1, 1),
		"negative size":  rawLock(1, 1, 1, 0, -1, 1),
		"two namespaces": append(rawLock(1, 1, 1, 0, 1, 1), rawLock(2, 2, 1, 0, 1, 1)...),
	}
	for name, b := range bad {
		if got, err := decodeSockLocks(bytes.NewReader(b), 0); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, got)
		}
	}
}

// byCookie indexes a walk's records by cookie.
func byCookie(l *Locks) map[uint64]SockLock {
	m := make(map[uint64]SockLock, len(l.Recs))
	for _, r := range l.Recs {
		m[r.Cookie] = r
	}
	return m
}

// The joiner finds records asked in walk order, out of it, and not at
// all, the same as an index would.
func TestJoiner(t *testing.T) {
	l := &Locks{}
	for c := uint64(1); c <= 40; c++ {
		l.Recs = append(l.Recs, SockLock{Cookie: c * 10, Locks: uint8(c % 4)})
	}
	find := l.Joiner()
	asks := []uint64{10, 20, 40, 30, 400, 5, 390, 50, 60, 15, 110, 70}
	for i, c := range asks {
		got, ok := find(i%2, c)
		want, wok := byCookie(l)[c]
		if ok != wok || got != want {
			t.Errorf("find(%d) = %+v, %v; want %+v, %v", c, got, ok, want, wok)
		}
	}
}

// TestJoinerLanes: a dump in two halves delivers two interleaved runs of
// the walk's order, half of the records apart in between, one of them
// starting far into the walk; each lane keeps its own place, so a million-socket join finds every socket
// without indexing them all. A socket the walk did not see (opened
// since) is still answered, from the index.
func TestJoinerLanes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	l := &Locks{}
	var lanes [2][]uint64
	for c := uint64(1); c <= 200_000; c++ {
		l.Recs = append(l.Recs, SockLock{Cookie: c, Locks: uint8(c % 4)})
		// Lane 0 starts 1,000 records in, as when the walk's first
		// sockets all have high ports.
		lane := r.IntN(2)
		if c <= 1000 {
			lane = 1
		}
		lanes[lane] = append(lanes[lane], c)
	}
	j := &joiner{recs: l.Recs}
	// The halves alternate in runs, as datagrams of a few hundred
	// sockets each do.
	for at := [2]int{}; at[0] < len(lanes[0]) || at[1] < len(lanes[1]); {
		for lane := range 2 {
			for n := 0; n < 300 && at[lane] < len(lanes[lane]); n++ {
				c := lanes[lane][at[lane]]
				at[lane]++
				if got, ok := j.find(lane, c); !ok || got.Cookie != c {
					t.Fatalf("lane %d: find(%d) = %+v, %v", lane, c, got, ok)
				}
			}
		}
	}
	if j.index != nil {
		t.Fatal("the interleaved halves were joined through the index of every cookie")
	}
	if _, ok := j.find(0, 1_000_000); ok || j.index == nil {
		t.Fatalf("a cookie the walk did not see: found %v, index built %v", ok, j.index != nil)
	}
	if got, ok := j.find(1, 7); !ok || got.Cookie != 7 {
		t.Fatalf("behind the lane's place: find(7) = %+v, %v", got, ok)
	}
}

func FuzzDecodeSockLocks(f *testing.F) {
	f.Add(append(rawLock(7, 4026531840, 1, 3, 32768, 65536), rawLock(9, 4026531840, 10, 0, 16384, 131072)...))
	f.Add(rawLock(1, 1, 6, 0, 1, 1))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeSockLocks(bytes.NewReader(b), 0)
		if err != nil {
			return
		}
		if len(b)%sockLockSize != 0 || len(byCookie(got)) > len(b)/sockLockSize || (len(b) > 0) != (got.Netns != 0) {
			t.Fatalf("decoded %+v from %d bytes", got, len(b))
		}
		for c, sl := range byCookie(got) {
			if c == 0 || sl.Cookie != c || sl.Locks > 3 {
				t.Fatalf("decoded %+v", sl)
			}
		}
	})
}

func TestOpenSockLocksNotRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as non-root: checks the refusal says why")
	}
	_, err := OpenSockLocks(nil)
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), needRoot) {
		t.Errorf("OpenSockLocks as non-root = %v, want not supported: %s", err, needRoot)
	}
}

// bufCase is one client socket: what it asks for before connecting.
type bufCase struct{ snd, rcv int }

// sockFacts is what the socket's owner reads with getsockopt.
type sockFacts struct {
	cookie         uint64
	lock           int
	sndbuf, rcvbuf int
}

// TestSockLocks sets SO_SNDBUF/SO_RCVBUF on real sockets in two private
// namespaces and checks the iterator against getsockopt and sock_diag's
// SK_MEMINFO, socket by socket, and that each walk stays in its
// namespace.
func TestSockLocks(t *testing.T) {
	nss := []netns.NS{testns.New(t, "lk1"), testns.New(t, "lk2")}
	l, err := OpenSockLocks(nil)
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}()
	cases := [][]bufCase{
		{{snd: 16384}, {rcv: 32768}, {snd: 8192, rcv: 65536}, {}},
		{{rcv: 4096}, {snd: 100000, rcv: 100000}, {}},
	}
	seen := map[uint64]bool{}
	for i, ns := range nss {
		var fds []int
		defer func() {
			for _, fd := range fds {
				_ = unix.Close(fd)
			}
		}()
		err := netns.Do(ns, func() error {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				return err
			}
			defer func() { _ = ln.Close() }()
			port := ln.Addr().(*net.TCPAddr).Port
			var accepted []net.Conn
			defer func() {
				for _, c := range accepted {
					_ = c.Close()
				}
			}()
			want := map[uint64]sockFacts{}
			for _, c := range cases[i] {
				fd, err := dialWithBuffers(port, c)
				if err != nil {
					return err
				}
				fds = append(fds, fd)
				a, err := ln.Accept()
				if err != nil {
					return err
				}
				accepted = append(accepted, a)
				f, err := facts(fd)
				if err != nil {
					return err
				}
				want[f.cookie] = f
			}
			got, err := l.Read(0)
			if err != nil {
				return err
			}
			if got.Netns != ns.Inode {
				return fmt.Errorf("iterator read namespace %d inside %s (%d)", got.Netns, ns.Name, ns.Inode)
			}
			// The listener, the clients and the accepted ends.
			if n := 1 + 2*len(cases[i]); len(byCookie(got)) != n {
				return fmt.Errorf("iterator saw %d sockets in %s, want %d: %+v", len(byCookie(got)), ns.Name, n, byCookie(got))
			}
			for c := range byCookie(got) {
				if seen[c] {
					return fmt.Errorf("cookie %d seen in two namespaces", c)
				}
				seen[c] = true
			}
			mem := map[uint64]*snapshot.MemInfo{}
			err = sockdiag.Dump(sockdiag.Options{Mem: true}, func(sk *snapshot.Socket) error {
				mem[sk.Cookie] = sk.Mem
				return nil
			})
			if err != nil {
				return err
			}
			for c, w := range want {
				sl, ok := byCookie(got)[c]
				switch {
				case !ok:
					return fmt.Errorf("socket %+v not in the iterator's walk", w)
				case int(sl.Locks) != w.lock || sl.State != uint8(snapshot.Established):
					return fmt.Errorf("iterator says %+v, getsockopt says %+v", sl, w)
				case mem[c] == nil:
					return fmt.Errorf("socket %+v not in the sock_diag dump", w)
				}
				t.Logf("%s: cookie %d: locks %d (getsockopt agrees)", ns.Name, c, sl.Locks)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// dialWithBuffers connects to 127.0.0.1:port from a socket whose buffers
// are set (when non-zero) before connect, and returns its fd.
func dialWithBuffers(port int, c bufCase) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	set := func(opt, v int) error {
		if v == 0 {
			return nil
		}
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, v)
	}
	if err := errors.Join(set(unix.SO_SNDBUF, c.snd), set(unix.SO_RCVBUF, c.rcv)); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// facts reads what the owner of fd can see of it.
func facts(fd int) (sockFacts, error) {
	var f sockFacts
	var err error
	get := func(opt int) int {
		v, e := unix.GetsockoptInt(fd, unix.SOL_SOCKET, opt)
		err = errors.Join(err, e)
		return v
	}
	f.lock, f.sndbuf, f.rcvbuf = get(unix.SO_BUF_LOCK), get(unix.SO_SNDBUF), get(unix.SO_RCVBUF)
	c, e := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	f.cookie = c
	return f, errors.Join(err, e)
}

// TestSockLocksBitfield loads the program against this kernel's types
// with sk_userlocks declared as the 4-bit bitfield older kernels have
// (over the low bits of the byte it really is, so the memory read is the
// same): the bitfield relocation must still give the bits getsockopt
// reports.
func TestSockLocksBitfield(t *testing.T) {
	ns := testns.New(t, "lkbf")
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Skip(err)
	}
	types := kernel.Copy()
	var sock *btf.Struct
	if err := types.TypeByName("sock", &sock); err != nil {
		t.Fatal(err)
	}
	found := false
	for i := range sock.Members {
		m := &sock.Members[i]
		if m.Name != "sk_userlocks" {
			continue
		}
		if sz, err := btf.Sizeof(m.Type); err != nil || sz != 1 || m.BitfieldSize != 0 {
			t.Skipf("sk_userlocks is %v (bitfield %d) here, not a byte", m.Type, m.BitfieldSize)
		}
		m.Type = &btf.Int{Name: "unsigned char", Size: 1, Encoding: btf.Unsigned}
		m.BitfieldSize = 4
		found = true
	}
	if !found {
		t.Fatal("struct sock has no sk_userlocks")
	}
	l, err := openSockLocks(NewKernel(), &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: types}})
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	err = netns.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer func() { _ = ln.Close() }()
		port := ln.Addr().(*net.TCPAddr).Port
		for _, c := range []bufCase{{snd: 16384}, {rcv: 32768}, {snd: 8192, rcv: 8192}, {}} {
			fd, err := dialWithBuffers(port, c)
			if err != nil {
				return err
			}
			defer func() { _ = unix.Close(fd) }()
			a, err := ln.Accept()
			if err != nil {
				return err
			}
			defer func() { _ = a.Close() }()
			f, err := facts(fd)
			if err != nil {
				return err
			}
			got, err := l.Read(0)
			if err != nil {
				return err
			}
			if sl := byCookie(got)[f.cookie]; int(sl.Locks) != f.lock {
				return fmt.Errorf("bitfield layout: iterator says %+v, getsockopt says %+v", sl, f)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
