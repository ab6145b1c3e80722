// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

func rawTraceEvent(ts, cookie uint64, kind, reason, rcvbuf, clamp uint32) []byte {
	b := make([]byte, traceEventSize)
	ne := binary.NativeEndian
	ne.PutUint64(b[0:], ts)
	ne.PutUint64(b[8:], cookie)
	ne.PutUint32(b[16:], kind)
	ne.PutUint32(b[20:], reason)
	ne.PutUint32(b[24:], rcvbuf)
	ne.PutUint32(b[28:], clamp)
	return b
}

func TestDecodeTraceEvent(t *testing.T) {
	resets := map[uint32]string{2: "TCP_ABORT_ON_LINGER"}
	e, err := decodeTraceEvent(rawTraceEvent(5e9, 77, 3, 2, 131072, 65535), resets)
	if err != nil {
		t.Fatal(err)
	}
	want := TraceEvent{Mono: 5 * time.Second, Cookie: 77, Kind: TraceResetSent, Reason: "TCP_ABORT_ON_LINGER", Rcvbuf: 131072, Clamp: 65535}
	if e != want {
		t.Fatalf("got %+v, want %+v", e, want)
	}
	if e, _ := decodeTraceEvent(rawTraceEvent(1, 1, 3, 9, 0, 0), resets); e.Reason != "reason 9" {
		t.Errorf("unknown reason: %q", e.Reason)
	}
	if e, _ := decodeTraceEvent(rawTraceEvent(1, 1, 1, 9, 0, 0), resets); e.Reason != "" {
		t.Errorf("a retransmit has no reason: %q", e.Reason)
	}
	for _, bad := range [][]byte{rawTraceEvent(1, 1, 0, 0, 0, 0), rawTraceEvent(1, 1, 5, 0, 0, 0), rawTraceEvent(1<<63, 1, 1, 0, 0, 0), make([]byte, 31)} {
		if _, err := decodeTraceEvent(bad, resets); err == nil {
			t.Errorf("no error for %x", bad)
		}
	}
	for k := TraceRetransmit; k <= TraceResetReceived; k++ {
		if got, err := ParseTraceKind(k.String()); err != nil || got != k {
			t.Errorf("ParseTraceKind(%q) = %v, %v", k.String(), got, err)
		}
	}
	if _, err := ParseTraceKind("kind 9"); err == nil {
		t.Error("ParseTraceKind accepted an unknown kind")
	}
}

func FuzzDecodeTraceEvent(f *testing.F) {
	f.Add(rawTraceEvent(5e9, 77, 3, 2, 131072, 65535))
	f.Add(rawTraceEvent(1, 1, 2, 0, 1, 1))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeTraceEvent(b, map[uint32]string{2: "X"})
		if err != nil {
			return
		}
		if e.Kind < TraceRetransmit || e.Kind > TraceResetReceived || e.Mono < 0 {
			t.Fatalf("decoded a bad event %+v", e)
		}
		if (e.Reason != "") != (e.Kind == TraceResetSent) {
			t.Fatalf("reason %q on %v", e.Reason, e.Kind)
		}
	})
}

// TestTracerReset watches both ends of a loopback connection, aborts one
// with SO_LINGER 0, and wants a reset sent by it and received by the
// other, timed between the moments before and after the close; the
// connection is counted established in this namespace on its port.
func TestTracerReset(t *testing.T) {
	testns.NeedRoot(t)
	// The namespace of this thread: another test may have left the
	// process's main thread in one of its own.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	l, port := listenLoopback(t)
	tr, err := OpenTrace(TraceOptions{Netns: st.Ino, Ports: []uint16{port}})
	if _, serr := os.Stat("/sys/kernel/btf/vmlinux"); errors.Is(err, ErrNotSupported) && serr != nil {
		t.Skip(err) // no BTF: tp_btf programs cannot load here
	}
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, m := range tr.Missing() {
		t.Errorf("program not running: %v", m)
	}
	c, a := connectLoopback(t, l, port)
	for _, fd := range []int{c, a} {
		ck, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Watch(ck); err != nil {
			t.Fatal(err)
		}
	}
	if n, ok, err := tr.Established(); err != nil || !ok || n != 2 {
		t.Errorf("established: %d, %v, %v; want both ends counted", n, ok, err)
	}
	if tr.counts == nil {
		t.Error("trace_counts not mapped: Established reads it by a system call each tick")
	} else if err := tr.objs.TraceCounts.Lookup(uint32(0), new(uint64)); err != nil {
		t.Errorf("trace_counts by lookup: %v", err)
	}
	cookie := func(fd int) uint64 {
		ck, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		if err != nil {
			t.Fatal(err)
		}
		return ck
	}
	for _, fd := range []int{c, a} {
		if moved, ok := tr.Moved(cookie(fd)); !ok || moved {
			t.Errorf("fd %d: moved %v, ok %v before any traffic", fd, moved, ok)
		}
	}
	if _, err := unix.Write(c, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if moved, _ := tr.Moved(cookie(a)); !moved {
		t.Errorf("the receiver did not move when the data arrived")
	}
	if _, err := unix.Read(a, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	for _, fd := range []int{c, a} { // the writer's sendmsg, the reader's read
		if moved, ok := tr.Moved(cookie(fd)); !ok || !moved {
			t.Errorf("fd %d: moved %v, ok %v after a write and a read", fd, moved, ok)
		}
		if moved, _ := tr.Moved(cookie(fd)); moved {
			t.Errorf("fd %d: moved again with nothing done", fd)
		}
	}
	before := MonoNow()
	if err := unix.SetsockoptLinger(c, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
		t.Fatal(err)
	}
	unix.Close(c)
	after := MonoNow()
	var got []TraceEvent
	for deadline := time.Now().Add(2 * time.Second); len(got) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := tr.Drain(func(e TraceEvent) { got = append(got, e) }); err != nil {
			t.Fatal(err)
		}
	}
	kinds := map[TraceKind]int{}
	for _, e := range got {
		kinds[e.Kind]++
		if e.Mono < before || e.Mono > after {
			t.Errorf("%v at %v, not within the close (%v..%v)", e.Kind, e.Mono, before, after)
		}
		if e.Kind == TraceResetSent && e.Reason == "" {
			t.Errorf("reset sent without a reason")
		}
	}
	if kinds[TraceResetSent] != 1 || kinds[TraceResetReceived] != 1 {
		t.Errorf("events %+v, want one reset sent and one received", got)
	}
	if n, err := tr.Lost(); err != nil || n != 0 {
		t.Errorf("lost %d, %v", n, err)
	}
}

func listenLoopback(t *testing.T) (int, uint16) {
	t.Helper()
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(l) })
	if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(l, 8); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(l)
	if err != nil {
		t.Fatal(err)
	}
	return l, uint16(sa.(*unix.SockaddrInet4).Port)
}

func connectLoopback(t *testing.T, l int, port uint16) (int, int) {
	t.Helper()
	c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(c, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: int(port)}); err != nil {
		unix.Close(c)
		t.Fatal(err)
	}
	a, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
	if err != nil {
		unix.Close(c)
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(a) })
	return c, a
}
