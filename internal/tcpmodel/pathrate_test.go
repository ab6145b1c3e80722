// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func mbit(v float64) float64 { return v * 1e6 / 8 }

// spanAt is a span of busy time d at rate r (bytes/s).
func spanAt(r float64, d time.Duration) PathSpan {
	return PathSpan{Acked: uint64(r * d.Seconds()), Busy: d}
}

// Issue 38: on a link shaped to 20 Mbit/s one reading of 463 Mbit/s among
// readings of 17-19 (median 18) made every transfer slow. The busy-time
// median is 18 whatever that one reads, as long as it holds under half
// the busy time; the sum of bytes over the sum of busy time would not be.
func TestPathEstimateOneBurst(t *testing.T) {
	ss := []PathSpan{spanAt(mbit(18), 300*time.Millisecond), spanAt(mbit(17), 200*time.Millisecond),
		spanAt(mbit(463), 100*time.Millisecond), spanAt(mbit(19), 200*time.Millisecond), spanAt(mbit(18.5), 100*time.Millisecond)}
	e, ok := PathEstimate(ss)
	if !ok || e.Rate < mbit(17.99) || e.Rate > mbit(18.01) || e.Busy != 900*time.Millisecond || e.Spans != 5 {
		t.Errorf("PathEstimate = %.1f Mbit/s over %v in %d spans, %v; want 18 Mbit/s over 900ms in 5", e.Rate*8/1e6, e.Busy, e.Spans, ok)
	}
	var acked uint64
	var busy time.Duration
	for _, s := range ss {
		acked, busy = acked+s.Acked, busy+s.Busy
	}
	if sum := (PathSpan{Acked: acked, Busy: busy}).Rate(); sum < mbit(60) {
		t.Fatalf("the test's burst no longer moves a plain average (%.1f Mbit/s): it proves nothing", sum*8/1e6)
	}
	if !strings.Contains(e.Source(), "900ms") || !strings.Contains(e.Source(), "5 spans") || !strings.Contains(e.Source(), "--bandwidth overrides") {
		t.Errorf("source %q", e.Source())
	}
	// One span is the whole estimate (check's single bulk flow).
	if e, ok := PathEstimate([]PathSpan{spanAt(mbit(19.4), 1900*time.Millisecond)}); !ok || e.Rate < mbit(19.39) || e.Rate > mbit(19.41) {
		t.Errorf("one span: %.2f Mbit/s, %v", e.Rate*8/1e6, ok)
	}
	// Under PathMinBusy in all: no estimate.
	if e, ok := PathEstimate([]PathSpan{spanAt(mbit(18), 40*time.Millisecond), spanAt(mbit(18), 50*time.Millisecond), {Acked: 5}}); ok {
		t.Errorf("90ms of busy time gave %+v", e)
	}
}

// reading is a sender at one instant: busy, rwnd-limited and
// sndbuf-limited times (ms), bytes acked, data unsent; cwnd 10 segments
// of 1448 bytes, the peer's window 1 MB.
func reading(busy, rwnd, sndbuf, acked uint64, notsent uint32) Reading {
	return Reading{Chrono: true, Acked: acked, Busy: busy * 1000, Rwnd: rwnd * 1000, Sndbuf: sndbuf * 1000,
		Unacked: 10, Cwnd: 10, MSS: 1448, SndWnd: 1 << 20, Notsent: notsent, SkSndbuf: 4 << 20, Queued: 1 << 20}
}

func TestPathSpanOf(t *testing.T) {
	const window = 2 * time.Second
	a := reading(1000, 0, 0, 0, 1<<20)
	if s, ok := PathSpanOf(a, reading(2980, 100, 0, 4_950_000, 1<<20), window); !ok || s.Busy != 1980*time.Millisecond || s.Rate() != 2.5e6 {
		t.Errorf("a bulk sender held by cwnd: %+v %v", s, ok)
	}
	for _, c := range []struct {
		why string
		b   Reading
		dt  time.Duration
	}{
		{"busy 30% of the window (bursty)", reading(1600, 0, 0, 1_500_000, 1<<20), window},
		{"the window held it 30% of busy", reading(2980, 600, 0, 4_950_000, 1<<20), window},
		{"the send buffer held it 30% of busy", reading(2980, 0, 600, 4_950_000, 1<<20), window},
		{"nothing unsent at the end (application-limited)", reading(2980, 0, 0, 4_950_000, 0), window},
		{"no time between the readings", reading(2980, 0, 0, 4_950_000, 1<<20), 0},
	} {
		if s, ok := PathSpanOf(a, c.b, c.dt); ok {
			t.Errorf("%s: taken as the path (%+v)", c.why, s)
		}
	}
	// A 2K window under cwnd's 14K with more than it waiting: the window,
	// not the path, bounds the flight, whatever the chronographs say.
	small := reading(2980, 0, 0, 4_950_000, 1<<20)
	small.SndWnd = 2048
	if !small.WndBound() {
		t.Fatal("a 2K window under a 14K cwnd with 1M unsent is not window-bound")
	}
	if _, ok := PathSpanOf(a, small, window); ok {
		t.Error("a window-bound sender taken as the path")
	}
	// A sender the application paced (SO_MAX_PACING_RATE) at 2.6 MB/s
	// moving 2.5: the cap, not the path, held it (issue 38: a sender
	// paced at 50 Mbit/s over a lossy 100 Mbit/s link was taken for a
	// 47 Mbit/s path). A cap four times the rate held nothing.
	paced := reading(2980, 0, 0, 4_950_000, 1<<20)
	paced.MaxPace = 2_600_000
	if s, ok := PathSpanOf(a, paced, window); ok {
		t.Errorf("a sender held by its application's pacing cap taken as the path (%+v)", s)
	}
	paced.MaxPace = 10_000_000
	if _, ok := PathSpanOf(a, paced, window); !ok {
		t.Error("a pacing cap four times the rate disqualified the span")
	}
	ti := &snapshot.TCPInfo{Len: snapshot.SizeKnown, MaxPacingRate: ^uint64(0)}
	if c := AppPaceCap(ti); c != 0 {
		t.Errorf("the kernel's ~0 (no cap) read as a cap of %d", c)
	}
	ti.MaxPacingRate = 6_250_000
	if c := AppPaceCap(ti); c != 6_250_000 {
		t.Errorf("SO_MAX_PACING_RATE 50 Mbit/s read as %d", c)
	}
	full := reading(2980, 0, 0, 4_950_000, 1000)
	full.Unacked, full.Queued = 5, 3<<20
	if !full.SndbufFull() {
		t.Fatal("3M of 4M queued, 1000 bytes unsent, cwnd room: not sndbuf-full")
	}
	if _, ok := PathSpanOf(a, full, window); ok {
		t.Error("a sender held by its full send buffer taken as the path")
	}
}

// pathSock is an established sender to far:5201 from port with reading r.
func pathSock(far netip.Addr, port uint16, r Reading) snapshot.Socket {
	ti := &snapshot.TCPInfo{Len: snapshot.SizeKnown, BytesAcked: r.Acked, BusyTime: r.Busy, RwndLimited: r.Rwnd, SndbufLimited: r.Sndbuf,
		Unacked: r.Unacked, SndCwnd: r.Cwnd, SndMSS: r.MSS, SndWnd: r.SndWnd, NotsentBytes: r.Notsent}
	sk := snapshot.Socket{State: snapshot.Established, Cookie: uint64(port),
		Local:  snapshot.EndpointOf(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), port)),
		Remote: snapshot.EndpointOf(netip.AddrPortFrom(far, 5201)), Mem: &snapshot.MemInfo{Sndbuf: r.SkSndbuf, WmemQueued: r.Queued}}
	sk.Info = snapshot.TCPOf(ti)
	return sk
}

// check measures the path from its window's two samples: a bulk sender
// busy the whole window gives the path; a bursty one and a window-bound
// one give none, so a lone bursty connection is never judged by its own
// rate.
func TestPathRatesOf(t *testing.T) {
	far := netip.MustParseAddr("198.18.1.2")
	sock := func(port uint16, r Reading) snapshot.Socket { return pathSock(far, port, r) }
	prev := &snapshot.Snapshot{Sockets: []snapshot.Socket{sock(1, reading(1000, 0, 0, 0, 1<<20)), sock(2, reading(1000, 0, 0, 0, 1<<20))}}
	bursty := reading(1400, 0, 0, 12_000_000, 1<<20) // 400 ms busy of 2 s at 240 Mbit/s
	cur := &snapshot.Snapshot{Sockets: []snapshot.Socket{sock(2, bursty)}}
	prevOf := func(sk *snapshot.Socket) *snapshot.Socket {
		for i := range prev.Sockets {
			if prev.Sockets[i].Cookie == sk.Cookie {
				return &prev.Sockets[i]
			}
		}
		return nil
	}
	if r := PathRatesOf(cur, 2*time.Second, prevOf); len(r) != 0 {
		t.Errorf("a lone bursty connection measured the path: %+v", r)
	}
	cur.Sockets = append(cur.Sockets, sock(1, reading(2990, 0, 0, 4_975_000, 1<<20)))
	r := PathRatesOf(cur, 2*time.Second, prevOf)
	if e := r[far]; e.Rate != 2.5e6 || e.Spans != 1 {
		t.Errorf("path to %v: %+v, want 20 Mbit/s from the bulk connection alone", far, e)
	}
}

// Issue 38: N connections sharing a 100 Mbit/s path to one peer each move
// about 100/N, every one held only by the path. Each one's rate is its
// share, not the path: connection-bottleneck and retransmissions compare
// the peer's total against the path, so the estimate is what they moved
// together (~100), never less than one connection's own rate.
func TestPathRatesOfShared(t *testing.T) {
	far := netip.MustParseAddr("198.18.1.2")
	const dt = 2 * time.Second
	for _, n := range []int{2, 4, 8} {
		var prev, cur snapshot.Snapshot
		for i := range n {
			port := uint16(40000 + i)
			// ~100/n Mbit/s each over 1.98 s busy of 2 s; shares differ
			// by a few percent as real flows' do.
			each := mbit(100) / float64(n) * (1 + 0.04*float64(i-n/2)/float64(n))
			prev.Sockets = append(prev.Sockets, pathSock(far, port, reading(1000, 0, 0, 0, 1<<20)))
			cur.Sockets = append(cur.Sockets, pathSock(far, port, reading(2980, 0, 0, uint64(each*1.98), 1<<20)))
		}
		prevOf := func(sk *snapshot.Socket) *snapshot.Socket {
			for i := range prev.Sockets {
				if prev.Sockets[i].Cookie == sk.Cookie {
					return &prev.Sockets[i]
				}
			}
			return nil
		}
		e := PathRatesOf(&cur, dt, prevOf)[far]
		// Together they moved 100 Mbit/s * 1.98 s in 2 s: 99 Mbit/s.
		if e.Rate < mbit(97) || e.Rate > mbit(101) || !e.Shared {
			t.Errorf("%d connections of ~%.1f Mbit/s each: path %.1f Mbit/s (shared %v), want ~100", n, 100/float64(n), e.Rate*8/1e6, e.Shared)
		}
		if !strings.Contains(e.Source(), "summed over all the senders busy with it") {
			t.Errorf("%d connections: source %q does not say the rate is their sum", n, e.Source())
		}
	}
	// One window-bound connection and one held only by the path: both
	// moved bytes over the path, so the shared rate counts both; but a
	// window-bound connection alone measures nothing (issue 38: its own
	// rate is never the path).
	a := reading(1000, 0, 0, 0, 1<<20)
	wnd := reading(2980, 0, 0, 2_475_000, 1<<20)
	wnd.SndWnd = 2048
	bulk := reading(2980, 0, 0, 4_950_000, 1<<20)
	if _, ok := SharedSpanOf(dt, []PathSender{{a, wnd}}); ok {
		t.Error("one sender alone made a shared span")
	}
	if _, ok := SharedSpanOf(dt, []PathSender{{a, wnd}, {a, wnd}}); ok {
		t.Error("two window-bound senders made a shared span: none was held only by the path")
	}
	s, ok := SharedSpanOf(dt, []PathSender{{a, wnd}, {a, bulk}})
	if !ok || s.Acked != 7_425_000 || s.Busy != dt {
		t.Errorf("a window-bound and a path-held sender: %+v %v, want 7425000 bytes over 2s", s, ok)
	}
	// Never less than the single-connection median: a shared span below
	// the own spans' median leaves the own estimate.
	own := []PathSpan{spanAt(mbit(20), time.Second)}
	if e, ok := PathEstimateOf(own, []PathSpan{spanAt(mbit(15), 2*time.Second)}); !ok || e.Shared || e.Rate != mbit(20) {
		t.Errorf("a lower shared span replaced the own median: %+v %v", e, ok)
	}
	if _, ok := PathEstimateOf(nil, []PathSpan{spanAt(mbit(100), 2*time.Second)}); ok {
		t.Error("shared spans without an own span gave an estimate")
	}
}
