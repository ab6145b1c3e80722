// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// The path's rate is measured, by check and by trace alike, as what a
// sender moved per second of busy time (tcp_info bytes_acked over
// busy_time) in stretches in which nothing but the path held it: not a
// delivery_rate sample, which is one round trip's burst and can read many
// times the link (463 Mbit/s on a link shaped to 20 Mbit/s). A stretch is
// the time between two readings of one sender (check: its window's two
// samples; trace: consecutive samples, joined while they qualify).
//
// A stretch qualifies when the sender was busy at least PathBusyShare of
// it, the peer's window and the send buffer (chronographs) held it at most
// PathHeldShare of that busy time, neither reading shows the window
// bounding the flight (WndBound) nor the send buffer full (SndbufFull) at
// the end, data waited unsent at the end (the application was ahead
// of the network), and no pacing cap the application set (SO_MAX_PACING_RATE)
// held it: a span moving at least PathPacedShare of that cap is the
// application's rate, not the path's. The chronographs count whole
// jiffies (4 ms at HZ=250): at 100 samples a second one interval reads 8
// or 12 ms busy, hence the margins.
const (
	PathBusyShare = 0.75
	PathHeldShare = 0.25
	// PathMinBusy is the busy time the qualifying stretches to one peer
	// need in all before their rate is taken for the path's: 25 jiffies,
	// so the chronograph's steps move it by a few percent at most.
	PathMinBusy = 100 * time.Millisecond
	// PathPacedShare: a sender the application capped (SO_MAX_PACING_RATE)
	// moving at least this share of its cap is held by the cap. A sender
	// paced at 50 Mbit/s over a 100 Mbit/s link losing 3 % moved 46-47
	// (92-94 %: retransmissions take part of the paced rate) and was
	// taken for a 47 Mbit/s path, so its loss seemed to cost nothing
	// (livetest TestRetransmissions).
	PathPacedShare = 0.75
)

// Reading is what the path estimate reads of a sender at one instant.
type Reading struct {
	Chrono             bool   // the kernel sent the chronographs
	Acked              uint64 // bytes_acked
	Busy, Rwnd, Sndbuf uint64 // busy_time, rwnd_limited, sndbuf_limited, µs
	Unacked, Cwnd      uint32 // segments
	MSS, SndWnd        uint32 // bytes
	Notsent            uint32 // bytes
	SkSndbuf, Queued   uint32 // SK_MEMINFO sndbuf, wmem_queued; 0 unknown
	MaxPace            uint64 // max_pacing_rate the application set, bytes/s; 0 none
}

// ReadingOf reads sk's tcp_info and SK_MEMINFO; false without tcp_info.
func ReadingOf(sk *snapshot.Socket) (Reading, bool) {
	var tb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	if ti == nil {
		return Reading{}, false
	}
	r := Reading{Chrono: ti.Has(snapshot.EndChrono), Acked: ti.BytesAcked, Busy: ti.BusyTime, Rwnd: ti.RwndLimited, Sndbuf: ti.SndbufLimited,
		Unacked: ti.Unacked, Cwnd: ti.SndCwnd, MSS: ti.SndMSS, Notsent: ti.NotsentBytes}
	if ti.Has(snapshot.EndSndWnd) {
		r.SndWnd = ti.SndWnd
	}
	r.MaxPace = AppPaceCap(ti)
	if m := sk.Mem; m != nil {
		r.SkSndbuf, r.Queued = m.Sndbuf, m.WmemQueued
	}
	return r, true
}

// WndBound says the peer's window bounds the flight at this reading: it is at
// most half of what cwnd allows and more than a window of data waits.
// Neither cwnd nor the application holds such a sender.
func (r Reading) WndBound() bool {
	if r.SndWnd == 0 || r.MSS == 0 {
		return false
	}
	return uint64(r.SndWnd)*2 <= uint64(r.Cwnd)*uint64(r.MSS) && r.Notsent >= r.SndWnd
}

// SndbufFull says the send buffer is the limit at this reading: it is at
// least three quarters full, everything in it is in flight (under two
// segments not sent) and cwnd has room. A pinned or too small buffer looks
// so; a congestion-limited sender has data not yet sent.
func (r Reading) SndbufFull() bool {
	if r.SkSndbuf == 0 || r.MSS == 0 {
		return false
	}
	return uint64(r.Queued)*4 >= uint64(r.SkSndbuf)*3 && r.Notsent < 2*r.MSS && r.Unacked < r.Cwnd
}

// PathSpan is a stretch of one sender's life in which only the path held
// it: the bytes acked and the busy time over it.
type PathSpan struct {
	Acked uint64
	Busy  time.Duration
}

// Rate is the span's bytes per busy second.
func (s PathSpan) Rate() float64 {
	if s.Busy <= 0 {
		return 0
	}
	return float64(s.Acked) / s.Busy.Seconds()
}

// AppPaceCap is the pacing cap the application set on the socket
// (SO_MAX_PACING_RATE), bytes/s; 0 when none (the kernel reports ~0) or
// the kernel did not send the field.
func AppPaceCap(ti *snapshot.TCPInfo) uint64 {
	if !ti.Has(snapshot.EndPacingRate+8) || // max_pacing_rate follows pacing_rate
		ti.MaxPacingRate == ^uint64(0) {
		return 0
	}
	return ti.MaxPacingRate
}

// PathSpanOf is the stretch from reading a to reading b, dt apart, when
// only the path held the sender over it (the thresholds above).
func PathSpanOf(a, b Reading, dt time.Duration) (PathSpan, bool) {
	if dt <= 0 || !a.Chrono || !b.Chrono || b.Busy <= a.Busy || b.Rwnd < a.Rwnd || b.Sndbuf < a.Sndbuf || b.Acked < a.Acked {
		return PathSpan{}, false
	}
	busy := time.Duration(b.Busy-a.Busy) * time.Microsecond
	held := time.Duration(b.Rwnd-a.Rwnd+b.Sndbuf-a.Sndbuf) * time.Microsecond
	if float64(busy) < PathBusyShare*float64(dt) || float64(held) > PathHeldShare*float64(busy) || b.Notsent == 0 ||
		a.WndBound() || b.WndBound() || b.SndbufFull() {
		return PathSpan{}, false
	}
	sp := PathSpan{Acked: b.Acked - a.Acked, Busy: busy}
	if pace := max(a.MaxPace, b.MaxPace); pace > 0 && sp.Rate() >= PathPacedShare*float64(pace) {
		return PathSpan{}, false
	}
	return sp, true
}

// PathSender is one sender's readings at the two ends of an interval.
type PathSender struct{ From, To Reading }

// SharedSpanOf is what the senders to one peer busy together moved over
// an interval dt long in which at least one of them was held only by the
// path (PathSpanOf): connections sharing a path each move only their
// share of it, so one connection's rate is not the path's. A sender
// counts when busy at least PathBusyShare of dt, whatever held it (its
// bytes crossed the path), so any two that count were busy together at
// least half of dt; a sender busy less (a burst) is left out, its bytes
// perhaps moved while the others idled. The span is their bytes_acked in
// all over dt. False unless at least two senders count (one alone is its
// own span, PathSpanOf).
func SharedSpanOf(dt time.Duration, senders []PathSender) (PathSpan, bool) {
	var acked uint64
	var held bool
	n := 0
	for _, s := range senders {
		a, b := s.From, s.To
		if dt <= 0 || !a.Chrono || !b.Chrono || b.Busy <= a.Busy || b.Acked < a.Acked ||
			float64(time.Duration(b.Busy-a.Busy)*time.Microsecond) < PathBusyShare*float64(dt) {
			continue
		}
		n++
		acked += b.Acked - a.Acked
		if _, ok := PathSpanOf(a, b, dt); ok {
			held = true
		}
	}
	if !held || n < 2 {
		return PathSpan{}, false
	}
	return PathSpan{Acked: acked, Busy: dt}, true
}

// PathEst is the path's rate measured from the spans of the senders to
// one peer address.
type PathEst struct {
	Rate  float64       // bytes/s
	Busy  time.Duration // the spans' busy time in all
	Spans int
	// Shared: the rate is what the senders to the peer moved together
	// (SharedSpanOf), above any one sender's.
	Shared bool
}

// PathEstimateOf is the path's rate to one peer from its senders' own
// spans (PathSpanOf) and the spans they shared (SharedSpanOf): the
// busy-time median of the shared spans where it is above the one of the
// own spans (several connections each moving their share), else the
// own spans' median. It is check's and trace's one estimator.
func PathEstimateOf(own, shared []PathSpan) (PathEst, bool) {
	e, ok := PathEstimate(own)
	if !ok {
		return PathEst{}, false
	}
	if s, ok := PathEstimate(shared); ok && s.Rate > e.Rate {
		s.Shared = true
		return s, true
	}
	return e, true
}

// PathEstimate is the busy-time median of the spans' rates: the rate at
// or above which half of their busy time ran. A short stretch reading far
// above the rest (a burst of ACKs, a jiffy's rounding) does not move it;
// false under PathMinBusy in all.
func PathEstimate(spans []PathSpan) (PathEst, bool) {
	var ss []PathSpan
	var total time.Duration
	for _, s := range spans {
		if s.Busy > 0 {
			ss = append(ss, s)
			total += s.Busy
		}
	}
	if total < PathMinBusy {
		return PathEst{}, false
	}
	slices.SortFunc(ss, func(a, b PathSpan) int {
		switch ra, rb := a.Rate(), b.Rate(); {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	var run time.Duration
	for _, s := range ss {
		if run += s.Busy; 2*run >= total {
			return PathEst{Rate: s.Rate(), Busy: total, Spans: len(ss)}, true
		}
	}
	return PathEst{}, false // not reached: run ends at total
}

// Source says where the estimate comes from, as check's evidence and
// trace's path line both print it.
func (e PathEst) Source() string {
	if e.Shared {
		return fmt.Sprintf("tcp_info.bytes_acked per busy_time over %s in which only the path held a sender, summed over all the senders busy with it (busy-time median of %s; --bandwidth overrides)",
			units.Dur(e.Busy), units.N(e.Spans, "span"))
	}
	return fmt.Sprintf("tcp_info.bytes_acked per busy_time over %s in which only the path held a sender (busy-time median of %s; --bandwidth overrides)",
		units.Dur(e.Busy), units.N(e.Spans, "span"))
}

// PathRates holds the measured path rate for each remote address.
type PathRates map[netip.Addr]PathEst

// PathRatesOf measures the path to each remote address from the
// established connections of cur with a reading in the sample taken dt
// before (prevOf finds it; nil when the connection was not there): each
// connection's own span and, where several moved data to one address,
// the span they shared (PathEstimateOf).
func PathRatesOf(cur *snapshot.Snapshot, dt time.Duration, prevOf func(*snapshot.Socket) *snapshot.Socket) PathRates {
	spans := map[netip.Addr][]PathSpan{}
	senders := map[netip.Addr][]PathSender{}
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if sk.State != snapshot.Established {
			continue
		}
		p := prevOf(sk)
		if p == nil {
			continue
		}
		a, okA := ReadingOf(p)
		b, okB := ReadingOf(sk)
		if !okA || !okB {
			continue
		}
		addr := sk.Remote.Addr().Unmap()
		senders[addr] = append(senders[addr], PathSender{From: a, To: b})
		if s, ok := PathSpanOf(a, b, dt); ok {
			spans[addr] = append(spans[addr], s)
		}
	}
	out := PathRates{}
	for a, ss := range spans {
		var shared []PathSpan
		if s, ok := SharedSpanOf(dt, senders[a]); ok {
			shared = append(shared, s)
		}
		if e, ok := PathEstimateOf(ss, shared); ok {
			out[a] = e
		}
	}
	return out
}
