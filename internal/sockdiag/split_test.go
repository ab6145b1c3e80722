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
// every pair of ports goes to exactly one: the first when either port is
// at or above the split.
func TestSplitProgramsPartition(t *testing.T) {
	for _, p := range []uint16{1, 2, 1024, SplitPort, 65535} {
		high, low := splitPrograms(p)
		for _, bc := range [][]byte{high, low} {
			if err := auditBytecode(bc); err != nil {
				t.Fatalf("split %d: audit: %v", p, err)
			}
		}
		ports := []uint16{0, 1, 80, p - 1, p, p + 1, 32768, 46883, 46884, 60999, 65534, 65535}
		for _, sp := range ports {
			for _, dp := range ports {
				l := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), sp)
				r := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), dp)
				h := runBytecode(high, 2, l, r)
				lo := runBytecode(low, 2, l, r)
				want := sp >= p || dp >= p
				if h != want || lo == want {
					t.Errorf("split %d, ports %d -> %d: high %v low %v, want high %v", p, sp, dp, h, lo, want)
				}
			}
		}
	}
}

// TestSplitSameSockets: a split dump lists what a whole dump lists, with
// the extras asked for, on sockets in both halves (the scenario's, a
// listener at a high port and a connection to it).
func TestSplitSameSockets(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a split dump needs two CPUs")
	}
	ns := newNetns(t)
	f := newFDs(t)
	ns.do(func() {
		build(t, f)
		// Connections whose ports are all low, and one with a high port
		// at each end, beside the scenario's (ephemeral ports, either).
		lfd, port := f.listen(mustAddrPort("127.0.0.1", 20001), 8)
		f.connectFrom(20002, mustAddrPort("127.0.0.1", port))
		f.accept(lfd)
		hfd, hport := f.listen(mustAddrPort("127.0.0.1", SplitPort+100), 8)
		f.connectFrom(20003, mustAddrPort("127.0.0.1", hport))
		f.accept(hfd)
	})
	key := func(s *snapshot.Socket) string {
		return fmt.Sprintf("%d %v %v %v %d %d info=%v mem=%v cc=%q", s.Family, s.State, s.Local, s.Remote, s.Cookie, s.Inode,
			s.TCP(nil) != nil, s.Mem != nil, s.CC)
	}
	keys := func(opts Options) (k []string, high int) {
		for _, s := range dumpAll(t, ns, opts) {
			k = append(k, key(s))
			if s.Local.Port() >= SplitPort || s.Remote.Port() >= SplitPort {
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
				t.Fatalf("%+v: %d of %d sockets in the high half: both halves must hold some", opts, high, len(whole))
			}
			return slices.Equal(got, whole)
		})
	}
}

// TestSplitStopsOnFnError: an error from fn ends a split dump and comes
// back as it is.
func TestSplitStopsOnFnError(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a split dump needs two CPUs")
	}
	ns := newNetns(t)
	f := newFDs(t)
	ns.do(func() { build(t, f) })
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
