// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestLookupCost measures what one exact lookup costs this thread (user
// and system time from RUSAGE_THREAD: the kernel's work for the request
// and the reply is system time) for TCPDOCTOR_LOOKUP_COST sockets (both
// ends of half as many loopback connections in a fresh namespace), read
// 100 times a second as trace does and back to back, with each set of
// extras. Root only; skipped unless the variable is set:
//
//	TCPDOCTOR_LOOKUP_COST=100 go test ./internal/sockdiag -run TestLookupCost -v
func TestLookupCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TCPDOCTOR_LOOKUP_COST"))
	if n <= 0 {
		t.Skip("set TCPDOCTOR_LOOKUP_COST to run")
	}
	if n > 2000 {
		t.Fatalf("TCPDOCTOR_LOOKUP_COST %d: at most 2000", n)
	}
	requireRoot(t)
	ns := newNetns(t)
	f := newFDs(t)
	var keys []Key
	ns.do(func() {
		lfd, port := f.listen(mustAddrPort("127.0.0.1", 0), 4096)
		for range n / 2 {
			f.connect(mustAddrPort("127.0.0.1", port), 0)
			f.accept(lfd)
		}
		err := Dump(Options{Families: []uint8{unix.AF_INET}, States: 1 << snapshot.Established}, func(sk *snapshot.Socket) error {
			keys = append(keys, KeyOf(sk))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	if len(keys) != n/2*2 {
		t.Fatalf("dumped %d established sockets, want %d", len(keys), n/2*2)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var c *Conn
	ns.do(func() {
		var err error
		if c, err = Open(); err != nil {
			t.Fatal(err)
		}
	})
	defer c.Close()
	// The thread's CPU clock is exact; rusage is brought up to date only
	// at ticks and sleeps, so it serves for the user/system split over a
	// whole variant only.
	cpu := func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	rusage := func() (user, sys time.Duration) {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
	}
	variants := []struct {
		name string
		ext  uint8
	}{
		{"info+mem+cong", 1<<(attrInfo-1) | 1<<(attrSkMemInfo-1) | 1<<(attrCong-1)},
		{"info+mem", 1<<(attrInfo-1) | 1<<(attrSkMemInfo-1)},
		{"info", 1 << (attrInfo - 1)},
		{"none", 0},
	}
	const rounds = 300
	for _, paced := range []bool{true, false} {
		for _, v := range variants {
			got := 0
			var total time.Duration
			u0, s0 := rusage()
			for range rounds {
				c0 := cpu()
				err := c.lookup(v.ext, keys, func(int, *snapshot.Socket) error { got++; return nil })
				total += cpu() - c0
				if err != nil {
					t.Fatal(err)
				}
				if paced {
					unix.Nanosleep(&unix.Timespec{Nsec: 10e6}, nil)
				}
			}
			u1, s1 := rusage()
			sysShare := float64(s1-s0) / float64(u1-u0+s1-s0)
			if got != rounds*len(keys) {
				t.Fatalf("%s: %d replies, want %d", v.name, got, rounds*len(keys))
			}
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(got) / 1e3 }
			mode := "back to back"
			if paced {
				mode = "100/s"
			}
			t.Logf("%-13s %-12s %d sockets: %.2f µs per lookup (%.0f %% of it system time); at 100/s that is %.2f %% of a core",
				v.name, mode, len(keys), per(total), 100*sysShare, per(total)*float64(len(keys))*100/1e4)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("loadavg %s", load)
}
