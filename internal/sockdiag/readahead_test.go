// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Every captured dump's datagrams: only the last ends the dump.
func TestEndsDump(t *testing.T) {
	for _, c := range captures {
		seq, ds := readHex(t, "testdata/dump_"+c.name+".hex")
		for i, d := range ds {
			if got, want := endsDump(d, seq), i == len(ds)-1; got != want {
				t.Errorf("%s: datagram %d of %d: endsDump %v", c.name, i, len(ds), got)
			}
			// Another request's DONE is skipped, as parseDumpInto skips it.
			if i == len(ds)-1 && endsDump(d, seq+1) && len(d) > nlmsgHdrLen+4 {
				t.Errorf("%s: a DONE for seq %d ends the dump of seq %d", c.name, seq, seq+1)
			}
		}
	}
	ack := make([]byte, nlmsgHdrLen+4)
	ne.PutUint32(ack, uint32(len(ack)))
	ne.PutUint16(ack[4:], nlmsgError)
	ne.PutUint32(ack[8:], 7)
	if endsDump(ack, 7) {
		t.Error("an ACK (NLMSG_ERROR 0) ends the dump")
	}
	if !endsDump(ack[:nlmsgHdrLen-1], 7) || !endsDump([]byte{1, 0, 0, 0}, 7) {
		t.Error("a malformed datagram does not end the dump")
	}
}

// Many sockets (many datagrams), dumped read-ahead and one datagram at a
// time: the same sockets, and a dump stopped early by fn returns at once,
// leaves no goroutine behind and the next dump whole.
func TestReadAheadDump(t *testing.T) {
	ns := newNetns(t)
	f := newFDs(t)
	const conns = 1500
	ns.do(func() {
		lfd, port := f.listen(mustAddrPort("127.0.0.1", 0), conns)
		for range conns {
			f.connect(mustAddrPort("127.0.0.1", port), 0)
			f.accept(lfd)
		}
	})
	cookies := func() []uint64 {
		var out []uint64
		for _, s := range dumpAll(t, ns, Options{Info: true, Mem: true, OneWalk: true}) {
			out = append(out, s.Cookie)
		}
		slices.Sort(out)
		return out
	}
	ahead := cookies()
	if len(ahead) != 2*conns+1 {
		t.Fatalf("read ahead: %d sockets, want %d", len(ahead), 2*conns+1)
	}
	prev := runtime.GOMAXPROCS(1)
	one := cookies()
	runtime.GOMAXPROCS(prev)
	if prev < 2 {
		t.Log("one CPU: both dumps were one datagram at a time")
	}
	if !slices.Equal(ahead, one) {
		t.Errorf("read ahead %d sockets, one at a time %d, or other cookies", len(ahead), len(one))
	}

	before := runtime.NumGoroutine()
	stop := errors.New("stop")
	for _, at := range []int{1, 100, 2 * conns} {
		n := 0
		var err error
		start := time.Now()
		ns.do(func() {
			err = Dump(Options{Info: true, Mem: true}, func(*snapshot.Socket) error {
				if n++; n == at {
					return stop
				}
				return nil
			})
		})
		if !errors.Is(err, stop) || n != at {
			t.Errorf("stop at %d: err %v after %d sockets", at, err, n)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("stop at %d: Dump returned after %v", at, d)
		}
	}
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the stopped dumps, %d before", n, before)
	}
	if got := cookies(); !slices.Equal(got, ahead) {
		t.Errorf("after the stopped dumps: %d sockets, want %d", len(got), len(ahead))
	}
}

// readAhead gathers datagrams into a buffer while one of the largest size
// still fits, hands it over whole, and the last at the end of the dump; a
// truncated or empty datagram comes alone after the ones before it, in a
// buffer of one datagram's size, so the caller's checks see it as before
// (a datagram socket stands in for the netlink one).
func TestReadAheadBatches(t *testing.T) {
	const dgram, seq = 64, 9
	if aheadBatch != 4 {
		t.Fatalf("the batches below are for 4 datagrams of 64 bytes a buffer, not %d", aheadBatch)
	}
	msg := func(typ uint16, size int) []byte {
		b := make([]byte, size)
		ne.PutUint32(b, uint32(size))
		ne.PutUint16(b[4:], typ)
		ne.PutUint32(b[8:], seq)
		return b
	}
	const data = 20 // SOCK_DIAG_BY_FAMILY: not the end
	type got struct{ n, len int }
	for _, tc := range []struct {
		name string
		send [][]byte
		want []got // each handed-over buffer: bytes received, buffer length
	}{
		{"done after 10", append(slices.Repeat([][]byte{msg(data, 32)}, 10), msg(nlmsgDone, 20)),
			[]got{{7 * 32, aheadBatch * dgram}, {3*32 + 20, aheadBatch * dgram}}},
		{"truncated after 5", append(slices.Repeat([][]byte{msg(data, 32)}, 5), msg(data, 2*dgram)),
			[]got{{5 * 32, aheadBatch * dgram}, {2 * dgram, dgram}}},
		{"empty after 2", append(slices.Repeat([][]byte{msg(data, 32)}, 2), []byte{}),
			[]got{{2 * 32, aheadBatch * dgram}, {0, dgram}}},
		{"truncated first", [][]byte{msg(data, 2*dgram)}, []got{{2 * dgram, dgram}}},
		{"empty at a buffer's start", append(slices.Repeat([][]byte{msg(data, 32)}, 7), []byte{}),
			[]got{{7 * 32, aheadBatch * dgram}, {0, dgram}}},
	} {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tc.send {
			if _, err := unix.Write(fds[1], d); err != nil {
				t.Fatal(err)
			}
		}
		next, give, stop := readAhead(fds[0], dgram, seq)
		var gotten []got
		for range tc.want {
			b, n, err := next()
			if err != nil {
				t.Fatalf("%s: after %v: %v", tc.name, gotten, err)
			}
			gotten = append(gotten, got{n, len(b)})
			give(b)
		}
		if _, _, err := next(); err == nil {
			t.Errorf("%s: more after the last datagram", tc.name)
		}
		stop()
		_ = unix.Close(fds[0])
		_ = unix.Close(fds[1])
		if !slices.Equal(gotten, tc.want) {
			t.Errorf("%s: handed over %v, want %v", tc.name, gotten, tc.want)
		}
	}
}
