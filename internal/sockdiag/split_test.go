// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestSplitProgramsPartition: the kernel's audit takes both halves, and
// every pair of ports goes to exactly one: the first when exactly one
// port is at or above the split (HalfOf at SplitPort).
func TestSplitProgramsPartition(t *testing.T) {
	for _, p := range []uint16{1, 2, 1024, SplitPort, 65535} {
		first, second := splitPrograms(p)
		for _, bc := range [][]byte{first, second} {
			if err := auditBytecode(bc); err != nil {
				t.Fatalf("split %d: audit: %v", p, err)
			}
		}
		ports := []uint16{0, 1, 80, p - 1, p, p + 1, 32768, 46883, 46884, 60999, 65534, 65535}
		for _, sp := range ports {
			for _, dp := range ports {
				l := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), sp)
				r := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), dp)
				a := runBytecode(first, 2, l, r)
				b := runBytecode(second, 2, l, r)
				want := (sp >= p) != (dp >= p)
				if a != want || b == want {
					t.Errorf("split %d, ports %d -> %d: first %v second %v, want first %v", p, sp, dp, a, b, want)
				}
				if p == SplitPort && (HalfOf(sp, dp) == 0) != want {
					t.Errorf("HalfOf(%d, %d) = %d, the bytecode says first %v", sp, dp, HalfOf(sp, dp), want)
				}
			}
		}
	}
}

// TestSplitSameSockets: a split dump lists what a whole dump lists, with
// the extras asked for, on sockets in both halves (the scenario's, a
// listener at a high port and a connection to it).
func TestSplitSameSockets(t *testing.T) {
	ns, f := splitScenario(t)
	ns.do(func() {
		// Connections whose ports are all low, and one with a high port
		// at each end, beside the scenario's (ephemeral ports, either).
		f.pair(20001, 20002)
		f.pair(SplitPort+100, 20003)
	})
	key := func(s *snapshot.Socket) string {
		return fmt.Sprintf("%d %v %v %v %d %d info=%v mem=%v cc=%q", s.Family, s.State, s.Local, s.Remote, s.Cookie, s.Inode,
			s.TCP(nil) != nil, s.Mem != nil, s.CC)
	}
	keys := func(opts Options) (k []string, high int) {
		for _, s := range dumpAll(t, ns, opts) {
			k = append(k, key(s))
			if HalfOf(s.Local.Port(), s.Remote.Port()) == 0 {
				high++
			}
		}
		slices.Sort(k)
		return k, high
	}
	for _, opts := range []Options{
		{Info: true, Mem: true, OneWalk: true, Reuse: false},
		{States: 1 << snapshot.Established, Info: true, OneWalk: true},
	} {
		eventually(t, fmt.Sprintf("a split dump lists what a whole one lists (%+v)", opts), func() bool {
			whole, high := keys(opts)
			split := opts
			split.Split = true
			got, _ := keys(split)
			if high == 0 || high == len(whole) {
				t.Fatalf("%+v: %d of %d sockets in the first half: both halves must hold some", opts, high, len(whole))
			}
			return slices.Equal(got, whole)
		})
	}
}

// TestDumpHalvesOrder: Conn.DumpHalves tells each socket's half as
// HalfOf does, and each half comes in the order a whole dump lists its
// sockets (which the lock-bit join follows, a place per half). Without
// OpenHalf it is whole, every socket in half 0.
func TestDumpHalvesOrder(t *testing.T) {
	ns, f := splitScenario(t)
	ns.do(func() {
		for i := range 40 {
			// Ports on both sides of the split, at both ends.
			lp := uint16(20000 + i)
			if i%2 == 1 {
				lp = SplitPort + uint16(i)
			}
			from := 21000 + i
			if i%4 >= 2 {
				from = SplitPort + 1000 + i
			}
			f.pair(lp, from)
		}
	})
	opts := Options{Info: true, Mem: true, OneWalk: true, Split: true}
	dump := func(half bool) (got [2][]uint64, split bool) {
		var err error
		ns.do(func() {
			c, oerr := Open()
			if oerr != nil {
				err = oerr
				return
			}
			defer c.Close()
			if half {
				if err = c.OpenHalf(); err != nil {
					return
				}
			}
			split, err = c.DumpHalves(opts, func(h int, sk *snapshot.Socket) error {
				if want := HalfOf(sk.Local.Port(), sk.Remote.Port()); split && h != want {
					t.Errorf("%v -> %v came in half %d, HalfOf says %d", sk.Local, sk.Remote, h, want)
				}
				got[h] = append(got[h], sk.Cookie)
				return nil
			})
		})
		if err != nil {
			t.Fatalf("DumpHalves: %v", err)
		}
		return got, split
	}
	eventually(t, "each half in the whole dump's order", func() bool {
		whole, split := dump(false)
		if split || len(whole[1]) != 0 {
			t.Fatalf("without OpenHalf: split %v, %d sockets in half 1", split, len(whole[1]))
		}
		halves, split := dump(true)
		if !split {
			t.Fatal("with OpenHalf: not split")
		}
		if len(halves[0]) == 0 || len(halves[1]) == 0 {
			t.Fatalf("halves of %d and %d sockets: both must hold some", len(halves[0]), len(halves[1]))
		}
		var want [2][]uint64
		for _, sk := range dumpAll(t, ns, Options{OneWalk: true}) {
			h := HalfOf(sk.Local.Port(), sk.Remote.Port())
			want[h] = append(want[h], sk.Cookie)
		}
		return slices.Equal(halves[0], want[0]) && slices.Equal(halves[1], want[1])
	})
}

// TestSplitStopsOnFnError: an error from fn ends a split dump and comes
// back as it is.
func TestSplitStopsOnFnError(t *testing.T) {
	ns, _ := splitScenario(t)
	stop := errors.New("enough")
	n := 0
	var err error
	ns.do(func() {
		err = Dump(Options{Info: true, OneWalk: true, Split: true}, func(*snapshot.Socket) error { n++; return stop })
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("got %v after %d sockets, want the fn's error after 1", err, n)
	}
}

// splitScenario skips without two CPUs, else builds the scenario's
// sockets in a namespace of their own.
func splitScenario(t *testing.T) (*netns, *fds) {
	t.Helper()
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a split dump needs two CPUs")
	}
	ns := newNetns(t)
	f := newFDs(t)
	ns.do(func() { build(t, f) })
	return ns, f
}

// pair opens a connection on 127.0.0.1 from port from to a listener on
// port lport, and accepts it.
func (f *fds) pair(lport uint16, from int) {
	f.t.Helper()
	lfd, port := f.listen(mustAddrPort("127.0.0.1", lport), 8)
	f.connectFrom(from, mustAddrPort("127.0.0.1", port))
	f.accept(lfd)
}

// connectFrom connects from 127.0.0.1:port to to.
func (f *fds) connectFrom(port int, to netip.AddrPort) {
	f.t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		f.t.Fatalf("socket: %v", err)
	}
	f.add(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		f.t.Fatalf("bind :%d: %v", port, err)
	}
	if err := unix.Connect(fd, sockaddr(to)); err != nil {
		f.t.Fatalf("connect %v: %v", to, err)
	}
}
