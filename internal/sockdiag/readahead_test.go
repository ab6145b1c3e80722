package sockdiag

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

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
