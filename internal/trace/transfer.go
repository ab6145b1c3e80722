// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"net/netip"
	"time"
)

// Direction of a transfer, seen from the traced socket.
type Direction string

// Send: bytes_acked grows (we send); Recv: bytes_received grows.
const (
	Send Direction = "send"
	Recv Direction = "recv"
)

// Split is a transfer's time by what held it. For a send transfer the
// parts add up to the duration: Rwnd, Sndbuf, Congestion and Recovery
// share the kernel's busy time, App is the rest. A receive transfer has
// no chronographs of its own: App is the time our application left the
// window closed (zero window advertised with data unread) and Other the
// rest (the sender or the network).
type Split struct {
	Rwnd       time.Duration `json:"rwnd_ns"`       // the peer's receive window
	Sndbuf     time.Duration `json:"sndbuf_ns"`     // the send buffer
	Congestion time.Duration `json:"congestion_ns"` // cwnd or pacing
	Recovery   time.Duration `json:"recovery_ns"`   // retransmission recovery
	App        time.Duration `json:"app_ns"`        // the application (not writing / not reading)
	Other      time.Duration `json:"other_ns"`      // receive side: sender or network
	// SndbufDerived: part of Sndbuf comes from the buffer seen full with
	// everything in flight, not from the kernel's sndbuf_limited.
	SndbufDerived bool `json:"sndbuf_derived,omitempty"`
	// RwndDerived: part of Rwnd comes from the peer's window seen under
	// half of cwnd with data waiting, not from the kernel's rwnd_limited.
	RwndDerived bool `json:"rwnd_derived,omitempty"`
}

// Holder names a part of the split.
type Holder string

// The holders, as the table and the page name them.
const (
	HeldRwnd       Holder = "peer's receive window"
	HeldSndbuf     Holder = "send buffer"
	HeldCongestion Holder = "congestion"
	HeldRecovery   Holder = "retransmission recovery"
	HeldAppWrite   Holder = "application not writing"
	HeldAppRead    Holder = "application not reading"
	HeldOther      Holder = "sender or network"
)

// Largest returns the part holding the transfer longest.
func (s Split) Largest(dir Direction) (Holder, time.Duration) {
	type part struct {
		h Holder
		d time.Duration
	}
	parts := []part{{HeldRwnd, s.Rwnd}, {HeldSndbuf, s.Sndbuf}, {HeldCongestion, s.Congestion}, {HeldRecovery, s.Recovery}, {HeldAppWrite, s.App}}
	if dir == Recv {
		parts = []part{{HeldAppRead, s.App}, {HeldOther, s.Other}}
	}
	best := parts[0]
	for _, p := range parts[1:] {
		if p.d > best.d {
			best = p
		}
	}
	return best.h, best.d
}

// Transfer is one run of data in one direction on one connection.
type Transfer struct {
	Conn   int            `json:"conn"`
	Local  netip.AddrPort `json:"local"`
	Remote netip.AddrPort `json:"remote"`
	Dir    Direction      `json:"dir"`
	Bytes  uint64         `json:"bytes"`
	Start  time.Duration  `json:"start_ns"` // since the trace started
	Dur    time.Duration  `json:"duration_ns"`
	// Goodput is Bytes over Dur, bytes/s.
	Goodput    float64       `json:"goodput_Bps"`
	Split      Split         `json:"split"`
	ZeroWindow int           `json:"zero_window_events"`
	Retrans    uint32        `json:"retransmits"`
	RTTMin     time.Duration `json:"rtt_min_ns"`
	RTTMax     time.Duration `json:"rtt_max_ns"`
	CwndMin    uint32        `json:"cwnd_min"` // segments
	CwndMax    uint32        `json:"cwnd_max"`
	// PeakWnd is the largest window the peer advertised (send) or we
	// advertised (recv), bytes.
	PeakWnd uint32 `json:"peak_window"`
	// SkBuf is the socket's send (send) or receive (recv) buffer size at
	// the end, bytes; 0 when meminfo was not sent.
	SkBuf uint32 `json:"sk_buf"`
	// Samples is how many samples the transfer spans.
	Samples int `json:"samples"`
	// Clipped: the transfer was under way at the connection's first
	// sample or still at its last, so part of it is not in the trace:
	// its bytes, duration and split count only what the samples saw.
	Clipped bool `json:"clipped,omitempty"`
	// ClippedStart: under way at the connection's first sample (data
	// queued or in flight there); ClippedEnd: still at its last.
	ClippedStart bool `json:"clipped_start,omitempty"`
	ClippedEnd   bool `json:"clipped_end,omitempty"`
	// StartEstimated is no longer set (always false): a transfer found
	// under way is clipped and starts at the first sample. Kept because
	// the JSON only ever gains fields.
	StartEstimated bool `json:"start_estimated,omitempty"`
	// Uncertain: a boundary between this transfer and the one before or
	// after it fell inside one long sampling interval (a late sample on
	// a busy host) that may hold bytes of both, or an idle gap long
	// enough to end a transfer hides inside one: its bytes, start and
	// duration may be off by that interval's. Not judged slow or fast,
	// and left out of the connection's verdict (UncertainNote).
	Uncertain bool `json:"uncertain,omitempty"`
	// RequestWait (sending) is the time from the request before it (the
	// other side's data, when tcpi_last_data_recv says it came) to its
	// start: the application answering, not part of the transfer. A
	// client's request-to-last-byte time is about Dur plus this.
	RequestWait time.Duration `json:"request_wait_ns,omitempty"`
	// Events counts the connection's eBPF events within the transfer's
	// sampling intervals; nil when the trace has no events.
	Events *EventCounts `json:"events,omitempty"`
	// Verdict is filled by Judge.
	Verdict *Verdict `json:"verdict,omitempty"`

	first, last int // indices of the points bounding it: first-1 .. last
}

// EventCounts are a transfer's eBPF events by kind: retransmits on a send
// transfer, receive autotuning steps on a receive one, resets on both.
type EventCounts struct {
	Retransmits    int `json:"retransmits"`
	WindowSteps    int `json:"rcv_space_steps"`
	ResetsSent     int `json:"resets_sent"`
	ResetsReceived int `json:"resets_received"`
}

// countEvents counts c's events in (from, to] that belong to direction dir.
func countEvents(c *Conn, dir Direction, from, to time.Duration) *EventCounts {
	var n EventCounts
	for i := range c.Events {
		e := &c.Events[i]
		if e.T <= from || e.T > to {
			continue
		}
		switch {
		case e.Kind == EvRetransmit && dir == Send:
			n.Retransmits++
		case e.Kind == EvRcvSpace && dir == Recv:
			n.WindowSteps++
		case e.Kind == EvResetSent:
			n.ResetsSent++
		case e.Kind == EvResetReceived:
			n.ResetsReceived++
		}
	}
	return &n
}

// SegmentOptions tune how transfers are cut.
type SegmentOptions struct {
	// Gap is the idle time that ends a transfer; 0 means the larger of
	// 50 ms and three sample intervals.
	Gap time.Duration
}

// Segment cuts every connection of tr into transfers, in start order per
// connection. A transfer is a run of sampling intervals in which the
// direction's byte counter grows (or, sending, data stays queued), ended by
// an idle gap or by a turn: the other direction carrying data while this
// one is idle, or starting a message while this one still moves (a
// keep-alive client's next request comes with the last ACK of the
// response before it; that interval ends the earlier transfer).
func Segment(tr *Trace, o SegmentOptions) []Transfer {
	gap := o.Gap
	if gap <= 0 {
		gap = max(50*time.Millisecond, 3*tr.Header.Interval)
	}
	// The recording's last tick: a connection seen until then may have
	// a transfer the recording cut; one that ended earlier was closed.
	var end time.Duration
	for _, c := range tr.Conns {
		if n := len(c.Points); n > 0 {
			end = max(end, c.Points[n-1].T)
		}
	}
	var out []Transfer
	for _, c := range tr.Conns {
		for _, dir := range []Direction{Send, Recv} {
			for _, t := range segmentConn(c, dir, gap, tr.Header.Events) {
				if t.ClippedEnd && c.Points[len(c.Points)-1].T < end-tr.Header.Interval/2 {
					// The connection closed before the recording ended:
					// the transfer ended within a sample of its last.
					t.ClippedEnd = false
					t.Clipped = t.ClippedStart
				}
				out = append(out, t)
			}
		}
	}
	return out
}

func counter(p *Point, dir Direction) uint64 {
	if dir == Send {
		return p.Acked
	}
	return p.Recvd
}

func grow(a, b *Point, dir Direction) uint64 {
	x, y := counter(a, dir), counter(b, dir)
	if y < x {
		return 0
	}
	return y - x
}

func other(dir Direction) Direction {
	if dir == Send {
		return Recv
	}
	return Send
}

// active: interval i (points i-1 .. i) carries data in dir.
func active(ps []Point, i int, dir Direction) bool {
	if grow(&ps[i-1], &ps[i], dir) > 0 {
		return true
	}
	// Sending stalled (zero window, loss) keeps data queued throughout.
	return dir == Send && ps[i-1].SendQ > 0 && ps[i].SendQ > 0
}

func segmentConn(c *Conn, dir Direction, gap time.Duration, events bool) []Transfer {
	ps := c.Points
	var out []Transfer
	first, last := -1, -1
	// unsure: the transfer being built holds a boundary no sample
	// placed; hidden: its last interval hides an idle gap; unsureAt: a
	// transfer starting at that interval follows an uncertain turn.
	unsure, hidden, unsureAt := false, false, -1
	flush := func() {
		if first >= 0 {
			if t, ok := measure(c, ps, dir, first, last, gap); ok {
				if events {
					t.Events = countEvents(c, dir, ps[first-1].T, ps[last].T)
				}
				t.Uncertain = unsure || unseen(ps, dir, first, last, gap)
				out = append(out, t)
			}
		}
		first, last = -1, -1
		unsure, hidden = false, false
	}
	for i := 1; i < len(ps); i++ {
		speaks := otherMoves(ps, i, dir)
		// The other side starts a message: the next request of a
		// keep-alive exchange, often arriving with the last ACK of the
		// response before it (receiving: our request going out after
		// the response's last byte).
		starts := speaks && (i == 1 || !otherMoves(ps, i-1, dir))
		if active(ps, i, dir) {
			if first >= 0 && ps[i-1].T-ps[last].T >= gap {
				flush()
			}
			if first < 0 {
				first = i
				unsure = i == unsureAt
			}
			// An interval inside the transfer (not its last) hiding an
			// idle gap may join two transfers.
			unsure = unsure || hidden
			hidden = first < i && hiddenGap(&ps[i-1], &ps[i], dir, gap)
			last = i
			if !starts {
				continue
			}
			mixed := mixedTurn(&ps[i-1], &ps[i], dir)
			// An interval that starts a transfer with the message before
			// maybe unfinished holds its tail (an application that paused
			// in it longer than the gap).
			tail := first == i && unfinished(&ps[i-1], &ps[i], dir)
			switch {
			case first < i || tail && !mixed:
				if mixed {
					unsure, unsureAt = true, i+1
				}
				flush() // this interval is the tail; the reply starts after it
			case tail:
				unsure = true // the tail's bytes and the reply's share it
			}
			continue
		}
		if first >= 0 && speaks {
			flush() // a turn: the other side speaks while we are idle
		}
	}
	flush()
	return out
}

// otherMoves: in interval i the other side's message moves: sending, its
// data came (bytes_received grew); receiving, our own data went out
// (bytes_sent grew; where it was not recorded, bytes_acked, which
// grows only when the peer acknowledges, often with its reply).
func otherMoves(ps []Point, i int, dir Direction) bool {
	a, b := &ps[i-1], &ps[i]
	if dir == Recv && b.Sent > 0 {
		return b.Sent > a.Sent
	}
	return grow(a, b, other(dir)) > 0
}

// unfinished: bytes of dir in the interval a..b, in which the other side
// starts a message, may be the tail of the message before: sending, data
// was outstanding at a; receiving (bytes_sent recorded), always: the
// reply to our message comes a round trip after it (mixedTurn says
// whether the interval is that long), so only the peer's message before
// can move in it.
func unfinished(a, b *Point, dir Direction) bool {
	if dir == Send {
		return !idle(a)
	}
	return b.Sent > 0
}

// hiddenGap: the interval a..b may hide an idle gap of at least gap in
// dir: sending with chronographs, busy time fell short of the interval
// by that much; otherwise (receiving, or no chronographs) the interval
// itself is that long.
func hiddenGap(a, b *Point, dir Direction, gap time.Duration) bool {
	dt := b.T - a.T
	if dir == Send && a.Chrono && b.Chrono && b.Busy >= a.Busy {
		return dt-time.Duration(b.Busy-a.Busy)*time.Microsecond >= gap
	}
	return dt >= gap
}

// unseen: sending, intervals at least gap long (late samples) with no
// data seen waiting at either end hold half or more of the span from the
// transfer's first sample to its last. Such an interval's busy time not
// on the kernel's rwnd/sndbuf chronographs goes to congestion by default,
// although neither sample shows cwnd or pacing holding data: a burst
// between an idle sample and one at its tail shows the window bound at
// neither (a paced sender leaves rwnd_limited before the window does).
func unseen(ps []Point, dir Direction, first, last int, gap time.Duration) bool {
	if dir != Send {
		return false
	}
	var late time.Duration
	for i := first; i <= last; i++ {
		a, b := &ps[i-1], &ps[i]
		if dt := b.T - a.T; dt >= gap && a.Notsent == 0 && b.Notsent == 0 {
			late += dt
		}
	}
	return 2*late >= ps[last].T-ps[first-1].T
}

// mixedTurn: the interval a..b, in which the other side started a
// message while dir's bytes grew, may also hold the reply's first
// bytes. Those come a round trip after the message (sending: acked a
// round trip after the request came; receiving: arriving a round trip
// after our request left), so only an interval, and the time since the
// message (sinceData, one 4 ms jiffy added) where recorded, at least
// the minimum RTT long can hold them. Recordings without min_rtt take
// half the smoothed RTT.
func mixedTurn(a, b *Point, dir Direction) bool {
	since := b.T - a.T
	rtt := time.Duration(min(a.RTT, b.RTT)) * time.Microsecond / 2
	if b.MinRTT > 0 {
		rtt = time.Duration(b.MinRTT) * time.Microsecond
		if s, ok := sinceData(b, other(dir)); ok {
			since = min(since, s+jiffy)
		}
	}
	return since >= rtt
}

// sinceData is the time, at sample p, since data last moved in
// direction d: came (Recv, tcpi_last_data_recv) or went out (Send,
// tcpi_last_data_sent). Whole ms, with a 4 ms jiffy of grain; false
// where the recording lacks it.
func sinceData(p *Point, d Direction) (time.Duration, bool) {
	switch {
	case p.MinRTT == 0:
		return 0, false
	case d == Recv:
		return time.Duration(p.SinceRecv) * time.Millisecond, true
	case p.Sent > 0:
		return time.Duration(p.SinceSent) * time.Millisecond, true
	}
	return 0, false
}

// measure builds the transfer over intervals first..last. Everything is
// a difference between two samples of the trace: a connection found
// sending counts from its first sample, never its past (its counters and
// chronographs run from its start, minutes or days before the trace).
func measure(c *Conn, ps []Point, dir Direction, first, last int, gap time.Duration) (Transfer, bool) {
	a, b := &ps[first-1], &ps[last]
	t := Transfer{Conn: c.ID, Local: c.Local, Remote: c.Remote, Dir: dir, Bytes: counter(b, dir) - counter(a, dir),
		first: first, last: last, Samples: last - first + 2}
	busyAtStart := dir == Send && ps[0].SendQ > 0 || dir == Recv && ps[0].RecvQ > 0
	busyAtEnd := dir == Send && b.SendQ > 0
	t.ClippedStart = first == 1 && busyAtStart || dir == Recv && recvUnderway(ps, first, gap)
	t.ClippedEnd = last == len(ps)-1 && busyAtEnd
	t.Clipped = t.ClippedStart || t.ClippedEnd
	if t.Bytes == 0 {
		return t, false
	}
	start, end := edges(ps, dir, first, last)
	var lead time.Duration
	if dir == Send {
		start, end, lead = turnEdges(ps, first, last, start, end)
	} else {
		start, end = recvEdges(ps, first, last, start, end)
	}
	t.Start, t.Dur = start, end-start
	if t.Dur <= 0 {
		return t, false
	}
	if at, ok := lastRequest(ps, dir, first); ok {
		t.RequestWait = max(0, start-at)
	}
	t.Goodput = float64(t.Bytes) / t.Dur.Seconds()
	if dir == Send {
		t.Split = sendSplit(ps, first, last, t.Dur)
		// The reply's first round trip, before its first interval.
		lead = min(lead, t.Split.App)
		t.Split.Congestion, t.Split.App = t.Split.Congestion+lead, t.Split.App-lead
	} else {
		t.Split = recvSplit(ps, first, last, start, end)
	}
	t.Retrans = b.Retrans - a.Retrans
	if b.Retrans < a.Retrans {
		t.Retrans = 0
	}
	t.RTTMin = time.Duration(1<<62 - 1)
	t.CwndMin = ^uint32(0)
	prevZero := false
	for i := first - 1; i <= last; i++ {
		p := &ps[i]
		rtt := time.Duration(p.RTT) * time.Microsecond
		t.RTTMin, t.RTTMax = min(t.RTTMin, rtt), max(t.RTTMax, rtt)
		t.CwndMin, t.CwndMax = min(t.CwndMin, p.Cwnd), max(t.CwndMax, p.Cwnd)
		wnd := p.SndWnd
		if dir == Recv {
			wnd = p.RcvWnd
		}
		t.PeakWnd = max(t.PeakWnd, wnd)
		zero := wnd < max(p.MSS, 1) && (dir == Recv && p.RecvQ > 0 || dir == Send && p.SendQ > 0)
		if zero && !prevZero && i >= first {
			t.ZeroWindow++
		}
		prevZero = zero
	}
	t.SkBuf = b.SkSnd
	if dir == Recv {
		t.SkBuf = b.SkRcv
	}
	return t, true
}

// recvUnderway: a receive transfer starting in interval first was under
// way at the connection's first sample: data had come before that
// sample, no interval between carried data or our request for it, and
// the data came (tcpi_last_data_recv) less than the gap before the
// transfer's first interval, so that a sample there would have joined
// them. Without last_data_recv, a transfer starting in the first
// interval.
func recvUnderway(ps []Point, first int, gap time.Duration) bool {
	if ps[0].Recvd == 0 {
		return false
	}
	if _, ok := lastRequest(ps, Recv, first); ok {
		return false
	}
	for j := 1; j < first; j++ {
		if active(ps, j, Recv) || otherMoves(ps, j, Recv) {
			return false
		}
	}
	since, ok := sinceData(&ps[0], Recv)
	if !ok {
		return first == 1
	}
	return ps[first-1].T-(ps[0].T-since) < gap
}

// edges places a transfer's start and end inside its first and last
// sampling intervals. Sending with chronographs: busy time in the first
// interval lies at its end, in the last one at its start. Otherwise the
// edge intervals are assumed to move bytes at the rate of the ones
// between; a transfer of one or two intervals keeps their bounds.
func edges(ps []Point, dir Direction, first, last int) (start, end time.Duration) {
	start, end = ps[first-1].T, ps[last].T
	busy := func(i int) (time.Duration, bool) {
		a, b := &ps[i-1], &ps[i]
		if !a.Chrono || !b.Chrono || b.Busy < a.Busy {
			return 0, false
		}
		d := time.Duration(b.Busy-a.Busy) * time.Microsecond
		return min(d, b.T-a.T), true
	}
	if dir == Send {
		if first == last {
			if d, ok := busy(first); ok && d > 0 {
				return end - d, end
			}
			return start, end
		}
		if d, ok := busy(first); ok && d > 0 {
			start = ps[first].T - d
		}
		if d, ok := busy(last); ok && d > 0 {
			end = ps[last-1].T + d
		}
		return start, end
	}
	if last-first < 2 {
		return start, end
	}
	mid := ps[last-1].T - ps[first].T
	bytes := counter(&ps[last-1], dir) - counter(&ps[first], dir)
	if mid <= 0 || bytes == 0 {
		return start, end
	}
	rate := float64(bytes) / mid.Seconds() // bytes per second between the edges
	at := func(n uint64) time.Duration { return time.Duration(float64(n) / rate * float64(time.Second)) }
	if d := at(grow(&ps[first-1], &ps[first], dir)); d < ps[first].T-ps[first-1].T {
		start = ps[first].T - d
	}
	if d := at(grow(&ps[last-1], &ps[last], dir)); d < ps[last].T-ps[last-1].T {
		end = ps[last-1].T + d
	}
	return start, end
}

// requestAt: the request a transfer of dir answers moved in interval i
// (sending: the other side's data came; receiving: ours went out), and
// the sample at its end says when (sinceData); the time, not before
// the interval.
func requestAt(ps []Point, i int, dir Direction) (time.Duration, bool) {
	a, b := &ps[i-1], &ps[i]
	since, ok := sinceData(b, other(dir))
	if !ok || !otherMoves(ps, i, dir) {
		return 0, false
	}
	return max(a.T, b.T-since), true
}

// lastRequest is when the request a transfer starting in interval first
// answers moved: the latest interval, from first back to the one ending
// the transfer before, in which it did and a sample says when.
func lastRequest(ps []Point, dir Direction, first int) (time.Duration, bool) {
	for j := first; j >= 1; j-- {
		if at, ok := requestAt(ps, j, dir); ok {
			return at, true
		}
		if j < first && active(ps, j, dir) {
			break // the transfer before, with no request in its last interval
		}
	}
	return 0, false
}

// recvEdges moves a receive transfer's edges to what the kernel says:
// its end to when its last byte came (tcpi_last_data_recv, in its last
// interval), its start to when our request went out (tcpi_last_data_sent)
// where the sender answered at once: the request went out at most a
// round trip (the larger smoothed RTT of the first interval's samples,
// plus a 4 ms jiffy) before the interval its first bytes came in. The
// round trip is then the transfer's, as a client's own
// request-to-last-byte time counts it; a later answer leaves the start
// at the first bytes, the wait in RequestWait. Recordings without these
// fields keep the edges' placement.
func recvEdges(ps []Point, first, last int, start, end time.Duration) (time.Duration, time.Duration) {
	if since, ok := sinceData(&ps[last], Recv); ok {
		end = max(ps[last-1].T, ps[last].T-since)
	}
	a, b := &ps[first-1], &ps[first]
	rtt := time.Duration(max(a.RTT, b.RTT)) * time.Microsecond
	if at, ok := lastRequest(ps, Recv, first); ok && at < end && a.T-at <= rtt+jiffy {
		start = at
	}
	return start, end
}

// turnEdges moves a send transfer's edges to the request that turned
// the exchange, where the samples say when it came: the interval it came
// in holds, after it, the reply's first busy time, which edges gives to
// the transfer before. That one ends that much earlier (floored at its
// interval's start); a reply busy from its first sample on starts when
// the request came (a server answering at once), the lead before its
// first interval returned for the split. Within a 10 ms interval this
// moves an edge by under 10 ms; after a late sample by up to a round
// trip.
func turnEdges(ps []Point, first, last int, start, end time.Duration) (time.Duration, time.Duration, time.Duration) {
	if at, ok := requestAt(ps, last, Send); ok && last > first && ps[last].SendQ > 0 {
		end = max(ps[last-1].T, end-(ps[last].T-at))
	}
	var lead time.Duration
	if first >= 2 && start <= ps[first-1].T+jiffy {
		if at, ok := requestAt(ps, first-1, Send); ok && at < start {
			lead, start = start-at, at
		}
	}
	return start, end, lead
}

// jiffy is the chronographs' and last_data_recv's grain at HZ=250.
const jiffy = 4 * time.Millisecond

// sendSplit sums the chronographs over the transfer's intervals. Where the
// kernel's sndbuf_limited stays low but the sample shows the send buffer
// full with nothing waiting to be sent and cwnd not full, the interval's
// congestion time is counted as the send buffer's (unpaced senders never
// start that chronograph). Where the samples show the peer's window
// under half of what cwnd allows with more than a window waiting
// (wndInterval), the congestion time is the window's (a paced or fast
// path leaves rwnd_limited before the window does). Intervals with
// retransmissions or in Recovery or Loss count their congestion time as
// recovery.
func sendSplit(ps []Point, first, last int, dur time.Duration) Split {
	var s Split
	var busy time.Duration
	us := func(v uint64) time.Duration { return time.Duration(v) * time.Microsecond }
	for i := first; i <= last; i++ {
		a, b := &ps[i-1], &ps[i]
		if !a.Chrono || !b.Chrono || b.Busy < a.Busy || b.Rwnd < a.Rwnd || b.Sndbuf < a.Sndbuf {
			continue
		}
		// Not clipped to the interval: the chronographs count whole
		// jiffies (4 ms at HZ=250), so one interval reads 12 ms and the
		// next 8; clipping each would lose time. The total is bounded
		// by the duration below.
		dt := b.T - a.T
		db := us(b.Busy - a.Busy)
		dr := min(us(b.Rwnd-a.Rwnd), db)
		ds := min(us(b.Sndbuf-a.Sndbuf), db-dr)
		rest := db - dr - ds
		busy += db
		s.Rwnd += dr
		s.Sndbuf += ds
		switch {
		case recovering(a, b):
			s.Recovery += rest
		case sndbufFull(b) && dr < dt/2:
			s.Sndbuf += rest
			if rest > 0 {
				s.SndbufDerived = true
			}
		case wndInterval(a, b) && ds < dt/2:
			s.Rwnd += rest
			if rest > 0 {
				s.RwndDerived = true
			}
		default:
			s.Congestion += rest
		}
	}
	// Busy time in the edge intervals lies inside the transfer (edges),
	// so only rounding can make it exceed the duration.
	if busy > dur {
		scale := float64(dur) / float64(busy)
		s.Rwnd = time.Duration(float64(s.Rwnd) * scale)
		s.Sndbuf = time.Duration(float64(s.Sndbuf) * scale)
		s.Congestion = time.Duration(float64(s.Congestion) * scale)
		s.Recovery = time.Duration(float64(s.Recovery) * scale)
		busy = dur
	}
	s.App = dur - busy
	return s
}

// caRecovery is TCP_CA_Recovery; TCP_CA_Loss (4) is above it.
const caRecovery = 3

// recovering: the interval a..b was spent recovering from loss: a
// retransmission was counted in it, or one of its samples is in
// Recovery or Loss with data queued or in flight. An idle sender
// (nothing unsent, nothing in flight, no retransmission counted) is
// never recovering, whatever ca_state it was left in.
func recovering(a, b *Point) bool {
	inLoss := func(p *Point) bool { return p.CA >= caRecovery && !idle(p) }
	return b.Retrans > a.Retrans || inLoss(a) || inLoss(b)
}

// idle: nothing unsent and nothing in flight.
func idle(p *Point) bool { return p.Notsent == 0 && p.Unacked == 0 && p.SendQ == 0 }

// sndbufFull: the send buffer holds the sender at this sample
// (tcpmodel.Reading.SndbufFull).
func sndbufFull(p *Point) bool { return p.reading().SndbufFull() }

// wndBound: the peer's window bounds the flight at this sample
// (tcpmodel.Reading.WndBound): neither cwnd nor the application holds
// such a sender.
func wndBound(p *Point) bool { return p.reading().WndBound() }

// wndInterval: the window bounds the interval's busy time: one end is
// window-bound and the other too, or idle (nothing unsent or in flight:
// the transfer's edge, its busy time next to the bound end), or drained
// at the window (the transfer's tail: all of it sent, a window's worth
// in flight, cwnd twice that).
func wndInterval(a, b *Point) bool {
	idle := func(p *Point) bool { return p.Notsent == 0 && p.Unacked == 0 }
	wa, wb := wndBound(a), wndBound(b)
	return (wa || wb) && (wa || idle(a) || drained(a)) && (wb || idle(b) || drained(b))
}

// drained: nothing unsent and the flight fills the peer's window, at
// most half of what cwnd allows.
func drained(p *Point) bool {
	flight := uint64(p.Unacked) * uint64(p.MSS)
	return p.Notsent == 0 && p.SndWnd > 0 && flight >= uint64(p.SndWnd) && 2*uint64(p.SndWnd) <= uint64(p.Cwnd)*uint64(p.MSS)
}

// recvSplit: the receiver's own part is the time it advertised a zero
// window with data unread (its application not reading), counted per
// interval when both samples show it, clipped to the transfer.
func recvSplit(ps []Point, first, last int, start, end time.Duration) Split {
	var s Split
	for i := first; i <= last; i++ {
		a, b := &ps[i-1], &ps[i]
		if closed(a) && closed(b) {
			lo, hi := max(a.T, start), min(b.T, end)
			if hi > lo {
				s.App += hi - lo
			}
		}
	}
	s.Other = end - start - s.App
	return s
}

func closed(p *Point) bool { return p.RecvQ > 0 && p.RcvWnd < max(p.MSS, 1) }
