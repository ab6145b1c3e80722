// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// loopbackPair connects a client to a server over loopback inside ns,
// the client's SO_RCVBUF pinned at rcvbuf when above 0.
func loopbackPair(t *testing.T, ns netns.NS, rcvbuf int) (cfd, sfd int, port uint16) {
	t.Helper()
	var lfd int
	err := netns.Do(ns, func() error {
		var err error
		if lfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err = unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err = unix.Listen(lfd, 4); err != nil {
			return err
		}
		sa, _ := unix.Getsockname(lfd)
		port = uint16(sa.(*unix.SockaddrInet4).Port)
		if cfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if rcvbuf > 0 {
			if err = unix.SetsockoptInt(cfd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf); err != nil {
				return err
			}
		}
		if err = unix.Connect(cfd, sa); err != nil {
			return err
		}
		sfd, _, err = unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		return err
	})
	if lfd > 0 {
		unix.Close(lfd)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(cfd); unix.Close(sfd) })
	return cfd, sfd, port
}

// retransSegs reads Tcp RetransSegs of ns (/proc/net/snmp, as nstat).
func retransSegs(t *testing.T, ns netns.NS) uint64 {
	t.Helper()
	var v uint64
	err := netns.Do(ns, func() error {
		f, err := os.Open("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		var head []string
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) == 0 || fs[0] != "Tcp:" {
				continue
			}
			if head == nil {
				head = fs
				continue
			}
			for i, h := range head {
				if h == "RetransSegs" && i < len(fs) {
					v, err = strconv.ParseUint(fs[i], 10, 64)
					return err
				}
			}
		}
		return fmt.Errorf("no Tcp RetransSegs in /proc/net/snmp")
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// writeAll writes n bytes to fd.
func writeAll(fd int, n int) error {
	buf := make([]byte, 256<<10)
	for n > 0 {
		k, err := unix.Write(fd, buf[:min(n, len(buf))])
		if err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// TestLiveFoundMidLife: a connection that has moved 32 MB and been open
// for seconds before the trace starts, then writes 4 MB three times with
// a second's sleep between (the receiver pinned at SO_RCVBUF 2048, as in
// the bursty case of issue 38): the trace's transfers add up to what the
// application wrote during the trace (within one write), none carries
// the connection's past, each lasts what the reader timed for its burst
// (within two sample intervals, a tenth and the ticks' worst lateness),
// and no time is recovery
// when the namespace counted no retransmission (Tcp RetransSegs). The
// same with the receiver's buffer autotuned (where loopback retransmits
// nothing, so the recovery claim is tested).
func TestLiveFoundMidLife(t *testing.T) {
	testns.NeedRoot(t)
	if raceDetector {
		t.Skip("measures timing; the race detector distorts it (scripts/test.sh runs it without -race)")
	}
	t.Run("rcvbuf 2048", func(t *testing.T) { foundMidLife(t, 2048) })
	t.Run("autotuned", func(t *testing.T) { foundMidLife(t, 0) })
}

func foundMidLife(t *testing.T, rcvbuf int) {
	ns := testns.New(t, "midlife")
	cfd, sfd, port := loopbackPair(t, ns, rcvbuf)
	const burst, bursts, before = 4 << 20, 3, 8

	// The reader: times each burst from its first byte to its last.
	type timing struct{ first, last time.Time }
	var mu sync.Mutex
	var got []timing
	var total int
	readDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		var cur timing
		n := 0
		for {
			k, err := unix.Read(cfd, buf)
			if err != nil || k == 0 {
				readDone <- err
				return
			}
			now := time.Now()
			if n == 0 {
				cur.first = now
			}
			n += k
			if n >= burst {
				cur.last = now
				mu.Lock()
				got = append(got, cur)
				total += n
				mu.Unlock()
				n -= burst
				cur = timing{first: now}
			}
		}
	}()
	// Its past: 32 MB, then a rest.
	for range before {
		if err := writeAll(sfd, burst); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader got %d of %d bursts before the trace in 60s", n, before)
		}
	}
	time.Sleep(time.Second)

	retx0 := retransSegs(t, ns)
	sink := &testns.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var tr *Trace
	var st Stats
	var traceErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		tr, st, traceErr = Live(ctx, LiveOptions{NS: ns, Filter: sockdiag.Filter{Ports: []uint16{port}}, Interval: 10 * time.Millisecond,
			Discover: 100 * time.Millisecond, Duration: 60 * time.Second, Now: time.Now, Sleep: window.Sleep, Sink: NewWriter(sink)})
	}()
	for deadline := time.Now().Add(15 * time.Second); strings.Count(sink.String(), `{"p":`) < 2*3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatalf("the connection was not found and sampled in 15s: %v", traceErr)
		}
	}
	for i := range bursts {
		if i > 0 {
			time.Sleep(time.Second)
		}
		if err := writeAll(sfd, burst); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == before+bursts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader got %d of %d bursts in 60s", n-before, bursts)
		}
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	wg.Wait()
	if traceErr != nil {
		t.Fatal(traceErr)
	}
	retx := retransSegs(t, ns) - retx0

	a := Analyze(tr, SegmentOptions{}, JudgeOptions{})
	var sends []Transfer
	var sum uint64
	var recovery time.Duration
	for _, x := range a.Transfers {
		if x.Dir == Send && x.Local.Port() == port {
			sends = append(sends, x)
			sum += x.Bytes
			recovery += x.Split.Recovery
			t.Logf("transfer at %v: %d bytes in %v, clipped %v, split %+v, %d retransmits", x.Start, x.Bytes, x.Dur, x.Clipped, x.Split, x.Retrans)
		}
	}
	t.Logf("the namespace retransmitted %d segments during the trace", retx)
	const written = bursts * burst
	if sum+burst < written || sum > written+burst {
		t.Errorf("trace's transfers add up to %d bytes; the application wrote %d during the trace (tolerance one write, %d)", sum, written, burst)
	}
	if retx == 0 && recovery != 0 {
		t.Errorf("%v of recovery with no retransmission counted (Tcp RetransSegs)", recovery)
	}
	// Against the reader's own timing, burst by burst: the trace's
	// transfer of each burst lasts the reader's first-to-last byte time,
	// within two sample intervals and a tenth (the edges sit inside
	// their intervals; the reader wakes after the data arrives), plus the
	// latest tick's lateness: a loaded machine (load average 26 on 2
	// cores here) started ticks tens of ms late, leaving long intervals.
	_, _, late := st.JitterSummary()
	t.Logf("ticks late by at most %v", late)
	if len(sends) != bursts {
		t.Fatalf("%d send transfers, want %d (one per burst)", len(sends), bursts)
	}
	mu.Lock()
	own := got[before:]
	mu.Unlock()
	for i, x := range sends {
		d := own[i].last.Sub(own[i].first)
		tol := 2*tr.Header.Interval + d/10 + late
		t.Logf("burst %d: trace %d bytes in %v, the reader timed %v", i+1, x.Bytes, x.Dur, d)
		if x.Bytes != burst {
			t.Errorf("burst %d: trace counted %d bytes, the application wrote %d", i+1, x.Bytes, burst)
		}
		if x.Dur > d+tol || x.Dur < d-tol {
			t.Errorf("burst %d: trace %v against the reader's %v, tolerance %v", i+1, x.Dur, d, tol)
		}
	}
}
