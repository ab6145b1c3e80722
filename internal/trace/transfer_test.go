// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

const msec = time.Millisecond

// series builds a connection from rows: t (msec), acked, recvd, busy (µs),
// rwnd_limited (µs), sendq.
func series(rows [][6]int64) *Conn {
	c := &Conn{ID: 1, Local: netip.MustParseAddrPort("198.18.0.1:80"), Remote: netip.MustParseAddrPort("198.18.1.2:40000")}
	for _, r := range rows {
		c.Points = append(c.Points, Point{T: time.Duration(r[0]) * msec, Conn: 1, State: snapshot.Established, Acked: uint64(r[1]), Recvd: uint64(r[2]),
			Busy: uint64(r[3]), Rwnd: uint64(r[4]), SendQ: uint32(r[5]), Chrono: true, MSS: 1000, Cwnd: 10, RTT: 2000})
	}
	return c
}

// window2K is series with the peer's window at 2K, segments of 1K and
// cwnd at cwnd segments: a receiver pinned small on a fast path.
func window2K(cwnd uint32, rows [][6]int64) *Conn {
	c := series(rows)
	for i := range c.Points {
		c.Points[i].SndWnd, c.Points[i].Cwnd, c.Points[i].MSS = 2048, cwnd, 1024
	}
	return c
}

func trace1(c ...*Conn) *Trace {
	return &Trace{Header: Header{Trace: Version, Interval: 10 * msec}, Conns: c}
}

// A response, a request (the turn), a second response.
func TestSegmentTurnsAndEdges(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 100, 0, 0, 0},
		{10, 10000, 100, 4000, 0, 5000},     // started 4 msec before the sample
		{20, 30000, 100, 14000, 5000, 5000}, // 5 msec of it waiting for the window
		{30, 50000, 100, 24000, 5000, 5000}, //
		{40, 60000, 100, 27000, 5000, 0},    // done 3 msec after t=30
		{50, 60000, 600, 27000, 5000, 0},    // the next request arrives
		{60, 70000, 600, 37000, 5000, 1000}, // second response, busy all interval
		{70, 80000, 600, 42000, 5000, 0},    // done 5 msec after t=60
		{80, 80000, 600, 42000, 5000, 0},    //
		{200, 80000, 600, 42000, 5000, 0},   //
	})
	ts := Segment(trace1(c), SegmentOptions{})
	if len(ts) != 3 {
		t.Fatalf("got %d transfers, want 3: %+v", len(ts), ts)
	}
	first, second, req := ts[0], ts[1], ts[2]
	if first.Dir != Send || first.Bytes != 60000 || first.Start != 6*msec || first.Dur != 27*msec {
		t.Errorf("first: %s %d bytes at %v for %v, want send 60000 at 6ms for 27ms", first.Dir, first.Bytes, first.Start, first.Dur)
	}
	want := Split{Rwnd: 5 * msec, Congestion: 22 * msec}
	if first.Split != want {
		t.Errorf("first split %+v, want %+v", first.Split, want)
	}
	if second.Bytes != 20000 || second.Start != 50*msec || second.Dur != 15*msec || second.Split.Congestion != 15*msec || second.Split.App != 0 {
		t.Errorf("second: %d bytes at %v for %v split %+v", second.Bytes, second.Start, second.Dur, second.Split)
	}
	if req.Dir != Recv || req.Bytes != 500 || req.Start != 40*msec || req.Dur != 10*msec {
		t.Errorf("request: %s %d at %v for %v", req.Dir, req.Bytes, req.Start, req.Dur)
	}
	if first.Goodput != 60000/0.027 {
		t.Errorf("goodput %v", first.Goodput)
	}
}

// An idle gap of 50 msec or more ends a transfer; a shorter one does not;
// an application that writes with pauses shows as App.
func TestSegmentGap(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 1000, 0, 10000, 0, 0},
		{20, 2000, 0, 20000, 0, 0},
		{30, 2000, 0, 20000, 0, 0}, // 20 msec idle: same transfer
		{40, 2000, 0, 20000, 0, 0},
		{50, 3000, 0, 30000, 0, 0},
		{60, 4000, 0, 40000, 0, 0},
		{120, 4000, 0, 40000, 0, 0}, // 60 msec idle: a new one
		{130, 5000, 0, 50000, 0, 0},
	})
	ts := Segment(trace1(c), SegmentOptions{})
	if len(ts) != 2 {
		t.Fatalf("got %d transfers, want 2: %+v", len(ts), ts)
	}
	if ts[0].Bytes != 4000 || ts[0].Start != 0 || ts[0].Dur != 60*msec || ts[0].Split.Congestion != 40*msec || ts[0].Split.App != 20*msec {
		t.Errorf("first: %d bytes at %v for %v split %+v", ts[0].Bytes, ts[0].Start, ts[0].Dur, ts[0].Split)
	}
	if ts[1].Bytes != 1000 || ts[1].Start != 120*msec || ts[1].Dur != 10*msec {
		t.Errorf("second: %d at %v for %v", ts[1].Bytes, ts[1].Start, ts[1].Dur)
	}
}

// A stall at a zero window keeps the transfer open (data queued) and
// counts as the peer's window; a full send buffer with everything in
// flight counts as the send buffer though the chronograph reads 0;
// retransmissions count as recovery.
func TestSplitStallSndbufRecovery(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 5000, 0, 10000, 0, 9000},
		{20, 5000, 0, 20000, 10000, 9000}, // zero window: no bytes acked
		{30, 5000, 0, 30000, 20000, 9000},
		{40, 15000, 0, 40000, 20000, 9000}, // send buffer full, all in flight
		{50, 25000, 0, 50000, 20000, 9000}, // a retransmission
		{60, 30000, 0, 55000, 20000, 0},
	})
	for i := range c.Points {
		c.Points[i].SndWnd = 65535
	}
	c.Points[2].SndWnd, c.Points[3].SndWnd = 0, 0
	p := &c.Points[4]
	p.SkSnd, p.Queued, p.Notsent, p.Unacked = 20000, 18000, 0, 9
	c.Points[5].Retrans, c.Points[6].Retrans = 1, 1
	ts := Segment(trace1(c), SegmentOptions{})
	if len(ts) != 1 {
		t.Fatalf("got %d transfers, want 1: %+v", len(ts), ts)
	}
	tr := ts[0]
	want := Split{Rwnd: 20 * msec, Sndbuf: 10 * msec, Congestion: 15 * msec, Recovery: 10 * msec, App: 0, SndbufDerived: true}
	if tr.Dur != 55*msec || tr.Split != want {
		t.Errorf("dur %v split %+v, want 55ms %+v", tr.Dur, tr.Split, want)
	}
	if tr.ZeroWindow != 1 || tr.Retrans != 1 {
		t.Errorf("zero windows %d retrans %d, want 1 1", tr.ZeroWindow, tr.Retrans)
	}
}

// A small peer window on a fast or paced path: the kernel counted most
// busy time outside rwnd_limited (as a CI run on loopback did, 4K window,
// cwnd 102 x 2048), but the samples show the window far under cwnd with
// data waiting, so that time is the window's; the edge intervals, idle at
// one end, count too. With a window cwnd fills, or too little data
// waiting, it stays congestion.
func TestSplitSmallWindowDerived(t *testing.T) {
	build := func(wnd, notsent, midWnd uint32) Split {
		c := series([][6]int64{
			{0, 0, 0, 0, 0, 0},
			{10, 1 << 20, 0, 10000, 2000, 3 << 20},
			{20, 2 << 20, 0, 20000, 4000, 3 << 20},
			{30, 3 << 20, 0, 30000, 8000, 3 << 20},
			{40, 4 << 20, 0, 38000, 8000, 0},
		})
		for i := range c.Points[1:4] {
			p := &c.Points[1+i]
			p.MSS, p.Cwnd, p.Unacked, p.SndWnd, p.Notsent = 2048, 102, 2, wnd, notsent
		}
		c.Points[2].SndWnd = midWnd
		ts := Segment(trace1(c), SegmentOptions{})
		if len(ts) != 1 {
			t.Fatalf("got %d transfers, want 1: %+v", len(ts), ts)
		}
		return ts[0].Split
	}
	if got, want := build(4096, 3<<20, 4096), (Split{Rwnd: 38 * msec, RwndDerived: true}); got != want {
		t.Errorf("4K window: %+v, want %+v", got, want)
	}
	// The window opened at 20 ms: the intervals either side of that
	// sample keep their congestion time (8 + 6 ms).
	if got, want := build(4096, 3<<20, 1<<20), (Split{Rwnd: 24 * msec, Congestion: 14 * msec, RwndDerived: true}); got != want {
		t.Errorf("window opened mid-transfer: %+v, want %+v", got, want)
	}
	if got, want := build(1<<20, 3<<20, 1<<20), (Split{Rwnd: 8 * msec, Congestion: 30 * msec}); got != want {
		t.Errorf("window above cwnd: %+v, want %+v", got, want)
	}
	if got, want := build(4096, 2048, 4096), (Split{Rwnd: 8 * msec, Congestion: 30 * msec}); got != want {
		t.Errorf("under a window waiting: %+v, want %+v", got, want)
	}
}

// Receive side: edges placed at the rate between them; the time with a
// zero window advertised and data unread is the application's.
func TestSegmentRecv(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 0, 5000, 0, 0, 0},  // 5 msec at 1 MB/s
		{20, 0, 15000, 0, 0, 0}, // 10000 in 10 msec
		{30, 0, 25000, 0, 0, 0},
		{40, 0, 27000, 0, 0, 0}, // 2 msec
		{50, 0, 27000, 0, 0, 0},
	})
	for i := 1; i <= 3; i++ {
		c.Points[i].RcvWnd = 65535
	}
	c.Points[2].RecvQ, c.Points[3].RecvQ = 4000, 4000
	c.Points[2].RcvWnd, c.Points[3].RcvWnd = 0, 0
	ts := Segment(trace1(c), SegmentOptions{})
	if len(ts) != 1 {
		t.Fatalf("got %d transfers: %+v", len(ts), ts)
	}
	r := ts[0]
	if r.Dir != Recv || r.Start != 5*msec || r.Dur != 27*msec || r.Split.App != 10*msec || r.Split.Other != 17*msec {
		t.Errorf("%s at %v for %v split %+v", r.Dir, r.Start, r.Dur, r.Split)
	}
}

func TestJudgeNamesReceiver(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 10000, 0, 10000, 8000, 9000},
		{20, 20000, 0, 20000, 16000, 9000},
		{30, 30000, 0, 30000, 24000, 9000},
		{40, 40000, 0, 40000, 32000, 0},
	})
	for i := range c.Points {
		c.Points[i].SndWnd = 16384
	}
	tr := trace1(c)
	ts := Segment(tr, SegmentOptions{})
	cvs := Judge(tr, ts, JudgeOptions{Bandwidth: 100e6})
	v := ts[0].Verdict
	if v == nil || !v.Slow || v.Held != HeldRwnd || v.HeldFor != 32*msec {
		t.Fatalf("verdict %+v", v)
	}
	// 40000 bytes at 12.5 MB/s.
	if v.Ideal != 3200*time.Microsecond {
		t.Errorf("ideal %v, want 3.2ms", v.Ideal)
	}
	if len(cvs) != 1 || cvs[0].Line != v.ConnLine {
		t.Fatalf("connection verdicts %+v; want one, on the transfer", cvs)
	}
	for _, s := range []string{"waiting for the peer's receive window", "receiver side, the receiver 198.18.1.2:40000: stop pinning the receive buffer", "SO_RCVBUF=", "16K"} {
		if !strings.Contains(v.ConnLine, s) {
			t.Errorf("line lacks %q: %s", s, v.ConnLine)
		}
	}
}

// Back-to-back responses: the next request arrives in the interval that
// carries the last ACKs of the response before it.
func TestSegmentBackToBack(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 0, 100, 0, 0, 0},            // request 1
		{20, 10000, 100, 10000, 0, 5000}, // response 1
		{30, 20000, 100, 20000, 0, 5000}, //
		{40, 30000, 200, 30000, 0, 5000}, // its tail, and request 2
		{50, 40000, 200, 40000, 0, 5000}, // response 2
		{60, 50000, 200, 50000, 0, 5000}, //
		{70, 60000, 300, 60000, 0, 5000}, // its tail, and request 3
		{80, 65000, 300, 65000, 0, 0},    // response 3, short
		{90, 65000, 300, 65000, 0, 0},
	})
	var sends []Transfer
	for _, x := range Segment(trace1(c), SegmentOptions{}) {
		if x.Dir == Send {
			sends = append(sends, x)
		}
	}
	if len(sends) != 3 {
		t.Fatalf("%d send transfers, want 3: %+v", len(sends), sends)
	}
	for i, want := range []struct {
		bytes      uint64
		start, dur time.Duration
	}{{30000, 10 * msec, 30 * msec}, {30000, 40 * msec, 30 * msec}, {5000, 75 * msec, 5 * msec}} {
		if got := sends[i]; got.Bytes != want.bytes || got.Start != want.start || got.Dur != want.dur {
			t.Errorf("response %d: %d bytes at %v for %v, want %d at %v for %v", i+1, got.Bytes, got.Start, got.Dur, want.bytes, want.start, want.dur)
		}
	}
}

// A connection open for 15 minutes before the trace, found halfway
// through a 4 MB write, then sleeping 1 s (its ca_state left in
// Recovery, nothing queued or in flight), then writing 4 MB more: the first
// transfer counts only what the samples saw (clipped at its start), no
// transfer carries the connection's past (1.7 GB, 908 s busy, 5000
// retransmits), and neither the sleep nor the writes are recovery (no
// retransmission in the trace).
func TestFoundMidLifeCountsOnlyTheTrace(t *testing.T) {
	const past = 1_700_000_000 // acked before the first sample
	const pastBusy = 908_000_000
	c := series([][6]int64{
		{0, past, 0, pastBusy, 0, 2_000_000},                          // half of a write queued
		{100, past + 1_000_000, 0, pastBusy + 100_000, 0, 1_000_000},  // busy all the interval
		{200, past + 2_000_000, 0, pastBusy + 200_000, 0, 0},          // done at the sample
		{600, past + 2_000_000, 0, pastBusy + 200_000, 0, 0},          // asleep
		{1200, past + 2_000_000, 0, pastBusy + 200_000, 0, 0},         //
		{1300, past + 3_000_000, 0, pastBusy + 300_000, 0, 3_000_000}, // the next write, busy all the interval
		{1700, past + 6_000_000, 0, pastBusy + 700_000, 0, 0},         // done at the sample
		{1800, past + 6_000_000, 0, pastBusy + 700_000, 0, 0},
	})
	for i := range c.Points {
		c.Points[i].Retrans = 5000 // the connection's past losses
	}
	c.Points[3].CA, c.Points[4].CA = caRecovery, caRecovery // left so while asleep
	ts := Segment(trace1(c), SegmentOptions{})
	var sends []Transfer
	for _, x := range ts {
		if x.Dir == Send {
			sends = append(sends, x)
		}
	}
	if len(sends) != 2 {
		t.Fatalf("%d send transfers, want 2: %+v", len(sends), sends)
	}
	first, second := sends[0], sends[1]
	if first.Bytes != 2_000_000 || first.Start != 0 || first.Dur != 200*msec || !first.Clipped || !first.ClippedStart || first.ClippedEnd || first.StartEstimated {
		t.Errorf("first: %d bytes at %v for %v, clipped %v start %v end %v estimated %v; want 2000000 at 0 for 200ms, clipped at its start",
			first.Bytes, first.Start, first.Dur, first.Clipped, first.ClippedStart, first.ClippedEnd, first.StartEstimated)
	}
	if second.Bytes != 4_000_000 || second.Start != 1200*msec || second.Dur != 500*msec || second.Clipped {
		t.Errorf("second: %d bytes at %v for %v clipped %v; want 4000000 at 1.2s for 500ms, not clipped", second.Bytes, second.Start, second.Dur, second.Clipped)
	}
	for _, x := range sends {
		if x.Split.Recovery != 0 || x.Retrans != 0 {
			t.Errorf("transfer at %v: recovery %v, %d retransmits; want none (no retransmission in the trace)", x.Start, x.Split.Recovery, x.Retrans)
		}
	}
	if sum := first.Bytes + second.Bytes; sum != 6_000_000 {
		t.Errorf("transfers add up to %d bytes, the trace saw 6000000 acked", sum)
	}
}

// An idle sender left in Recovery is not recovering; one with data in
// flight, or a retransmission counted, is.
func TestRecoveringNeedsDataOrRetransmits(t *testing.T) {
	idleRec := Point{CA: caRecovery}
	busyRec := Point{CA: caRecovery, Unacked: 3, SendQ: 3000}
	open := Point{}
	retx := Point{Retrans: 1}
	for _, c := range []struct {
		a, b Point
		want bool
	}{
		{idleRec, idleRec, false},
		{idleRec, busyRec, true},
		{open, open, false},
		{open, retx, true},
	} {
		if got := recovering(&c.a, &c.b); got != c.want {
			t.Errorf("recovering(%+v, %+v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// Issue 38: four traced connections to one peer sharing a 100 Mbit/s
// path each move 25, every one held only by the path. The path is what
// they moved together (tcpmodel.PathEstimateOf, as check measures it),
// not one connection's share; one of them traced alone sees only its 25.
func TestPathsSharedByTracedConns(t *testing.T) {
	const n, per = 4, 31250 // bytes per 10 ms each: 25 Mbit/s
	var cs []*Conn
	for i := range n {
		var rows [][6]int64
		for k := range int64(31) {
			rows = append(rows, [6]int64{10 * k, per * k, 0, 10000 * k, 0, 50000})
		}
		c := series(rows)
		c.ID, c.Remote = i+1, netip.AddrPortFrom(c.Remote.Addr(), uint16(40000+i))
		for j := range c.Points {
			c.Points[j].Conn, c.Points[j].Notsent = c.ID, 40000
		}
		cs = append(cs, c)
	}
	peer := cs[0].Remote.Addr()
	p := Paths(trace1(cs...), JudgeOptions{})[peer]
	if p.Rate < 99e6/8 || p.Rate > 101e6/8 || !strings.Contains(p.Source, "summed over all the senders busy with it") {
		t.Errorf("four connections of 25 Mbit/s each: path %.1f Mbit/s (%s), want 100", p.Rate*8/1e6, p.Source)
	}
	if one := Paths(trace1(cs[0]), JudgeOptions{})[peer]; one.Rate < 24.9e6/8 || one.Rate > 25.1e6/8 {
		t.Errorf("one connection traced alone: path %.1f Mbit/s, want its own 25", one.Rate*8/1e6)
	}
}

// lateSeries is a server sending 3.4 MB responses at 12,500 bytes a msec
// over a 30 msec path, each a round trip after its request, sampled every
// 10 msec; late, when set, is a sample (msec) after which the sampler
// stalls for 100 msec, as on a busy host. rows are t (msec), acked, recvd,
// busy (µs), msec since the request came.
func lateSeries(late int64) *Conn { return exchangeSeries(late, false) }

// exchangeSeries is lateSeries, or with client its client's side: each
// request (100 bytes, bytes_sent and last_data_sent) goes out just after
// the sample at 0 and then as the last byte of the response before
// comes, and is acknowledged with the response's first bytes, which
// arrive a round trip later, the rest at the same rate (bytes_received,
// last_data_recv).
func exchangeSeries(late int64, client bool) *Conn {
	const rate, size, rtt = 12500, 3_400_000, 30
	// Response k is requested at req[k] and acked from req[k]+rtt at rate.
	req := []int64{0}
	for k := 1; k < 3; k++ {
		req = append(req, req[k-1]+rtt+size/rate)
	}
	end := req[2] + rtt + size/rate + 100
	c := &Conn{ID: 1, Local: netip.MustParseAddrPort("198.18.0.1:80"), Remote: netip.MustParseAddrPort("198.18.1.2:40000")}
	for t := int64(0); t <= end; t += 10 {
		if t > late && t < late+100 {
			continue
		}
		var acked, recvd, busy, since, sendq, lastByte, reqAcked int64
		for _, r := range req {
			if t < r {
				break
			}
			recvd += 100
			if t >= r+rtt {
				reqAcked += 100 // with the response's first bytes
			}
			since = t - r
			a := min(size, max(0, (t-r-rtt)*rate))
			acked, sendq = acked+a, size-a // written at once, acked as it goes
			busy += min(rtt+size/rate, t-r) * 1000
			if a > 0 {
				lastByte = min(t, r+rtt+size/rate)
			}
		}
		p := Point{T: time.Duration(t) * msec, Conn: 1, State: snapshot.Established, Acked: uint64(acked), Recvd: uint64(recvd),
			Busy: uint64(busy), SendQ: uint32(sendq), Chrono: true, MSS: 1448, Cwnd: 300, RTT: rtt * 1000, MinRTT: rtt * 1000, SinceRecv: uint32(since)}
		if client {
			// The server's acked bytes are the client's received ones; the
			// request at 0 goes out just after the first sample.
			sent := recvd
			if t == 0 {
				sent, since = 0, 0
			}
			p.Acked, p.Recvd, p.Busy, p.SendQ = uint64(reqAcked), uint64(acked), 0, 0
			p.Sent, p.SinceSent, p.SinceRecv = uint64(sent), uint32(since), uint32(t-lastByte)
		}
		c.Points = append(c.Points, p)
	}
	return c
}

// segmentDir is c's transfers in direction dir.
func segmentDir(c *Conn, dir Direction) []Transfer {
	var out []Transfer
	for _, x := range Segment(trace1(c), SegmentOptions{}) {
		if x.Dir == dir {
			out = append(out, x)
		}
	}
	return out
}

// TestSegmentLateSample: a sample 100 msec late spans the end of a
// response, the next request and the first 70 msec of the next response.
// The turn cannot be placed inside it: both responses are uncertain, the
// others right to the byte. Before, the first was reported as one
// response with 875,000 bytes of the next (26 %) and nothing said.
func TestSegmentLateSample(t *testing.T) {
	sends := func(c *Conn) []Transfer { return segmentDir(c, Send) }
	// On time, each response runs from its request (at 0, 302 and 604
	// msec) to its last ACK 302 msec later: the request's time inside its
	// interval is last_data_recv's, not the interval's end.
	for i, x := range sends(lateSeries(1 << 40)) {
		if x.Uncertain || x.Bytes != 3_400_000 {
			t.Errorf("sampled on time: %d bytes, uncertain %v, want 3400000 and certain", x.Bytes, x.Uncertain)
		}
		if at := time.Duration(302*i) * msec; i > 0 && (x.Start != at || x.Dur != 302*msec || x.RequestWait != 0) {
			t.Errorf("response %d: at %v for %v, %v after its request, want at %v for 302ms at once", i, x.Start, x.Dur, x.RequestWait, at)
		}
	}
	// The first response is acked from 30 to 302 msec, the second
	// requested at 302: the sample after 270 comes at 370.
	ts := sends(lateSeries(270))
	if len(ts) != 3 {
		t.Fatalf("%d send transfers, want 3: %+v", len(ts), ts)
	}
	for i, x := range ts {
		wrong := x.Bytes != 3_400_000
		if i < 2 && !x.Uncertain {
			t.Errorf("transfer %d: %d bytes, not marked uncertain", i, x.Bytes)
		}
		if i == 2 && (x.Uncertain || wrong) {
			t.Errorf("transfer 2: %d bytes, uncertain %v, want 3400000 and certain", x.Bytes, x.Uncertain)
		}
	}
}

// TestSegmentHiddenGap: a late sample spans the end of one send, 60 msec
// of idle sender and the start of the next, with no request between:
// busy time short of the interval by more than the gap says a boundary
// may hide there, so the joined transfer is uncertain. An interval as
// long but busy throughout, with data seen waiting at its samples
// (cwnd held it), is not; with nothing seen waiting at either end, the
// samples cannot say what held those intervals, so it is (unseen).
func TestSegmentHiddenGap(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 1000, 0, 10000, 0, 0},
		{20, 2000, 0, 20000, 0, 0},
		{120, 5000, 0, 60000, 0, 0}, // busy 40 of 100 msec
		{130, 6000, 0, 70000, 0, 0},
		{140, 7000, 0, 80000, 0, 0},
		{230, 16000, 0, 170000, 0, 0}, // late but busy throughout
		{240, 17000, 0, 180000, 0, 0},
		{400, 17000, 0, 180000, 0, 0},
	})
	ts := Segment(trace1(c), SegmentOptions{})
	if len(ts) != 1 || !ts[0].Uncertain {
		t.Fatalf("got %+v, want one uncertain transfer", ts)
	}
	c.Points[3].Busy = 110000 // busy all of 20..120
	for i := 4; i < len(c.Points); i++ {
		c.Points[i].Busy += 50000
	}
	if ts := Segment(trace1(c), SegmentOptions{}); len(ts) != 1 || !ts[0].Uncertain {
		t.Errorf("busy throughout, nothing seen waiting: %+v, want one uncertain transfer", ts)
	}
	for _, i := range []int{3, 6} {
		c.Points[i].Notsent = 1000
	}
	if ts := Segment(trace1(c), SegmentOptions{}); len(ts) != 1 || ts[0].Uncertain {
		t.Errorf("busy throughout, data waiting: %+v, want one certain transfer", ts)
	}
}

// TestSegmentUnseenBurst: a 4 MB burst through a 2K window, the sampler
// away for 75 ms of it (a loaded host): the sample before is idle, the
// one after at its tail with nothing unsent, and rwnd_limited counted 8
// of the 72 ms busy (the sender paced). Neither sample shows what held
// the burst: uncertain, not judged, rather than 64 ms of congestion.
func TestSegmentUnseenBurst(t *testing.T) {
	c := window2K(196, [][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 0, 0, 0, 0, 0},
		{85, 4_192_256, 0, 72000, 8000, 2048},
		{90, 4_194_304, 0, 72000, 8000, 0},
		{200, 4_194_304, 0, 72000, 8000, 0},
	})
	c.Points[2].Unacked = 2
	a := Analyze(trace1(c), SegmentOptions{}, JudgeOptions{Bandwidth: 1e10})
	if len(a.Transfers) != 1 || !a.Transfers[0].Uncertain || a.Transfers[0].Verdict == nil || a.Transfers[0].Verdict.Slow {
		t.Fatalf("got %+v, want one uncertain transfer, not judged slow", a.Transfers)
	}
}

// TestUncertainNotJudged: uncertain transfers carry "?" (after "*" when
// clipped too) and the note in
// the table, are never slow, and the connection's line counts them apart.
func TestUncertainNotJudged(t *testing.T) {
	tr := trace1(lateSeries(270))
	// A path far faster than the responses: every certain one is slow.
	a := Analyze(tr, SegmentOptions{}, JudgeOptions{Bandwidth: 1e10})
	var unsure int
	for _, x := range a.Transfers {
		if x.Uncertain {
			unsure++
			if x.Verdict == nil || x.Verdict.Slow {
				t.Errorf("uncertain transfer judged: %+v", x.Verdict)
			}
		}
	}
	if unsure != 2 {
		t.Fatalf("%d uncertain transfers, want 2", unsure)
	}
	var b strings.Builder
	if err := WriteTable(&b, a.Transfers, 0); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Count(out, "ms?")+strings.Count(out, "ms*?") != 2 || !strings.Contains(out, UncertainNote) || !strings.Contains(out, "1 of 1 send transfers slow (2 more uncertain, not judged)") {
		t.Errorf("table:\n%s", out)
	}
}

// TestSegmentPausedTail: the server's application pauses longer than the
// gap before writing a response's last 100,000 bytes, which are acked in
// the interval the next request arrives in (a busy host, recorded in the
// lab): that interval is the paused tail, not the next response's start.
// Before, the tail was counted into the next response.
func TestSegmentPausedTail(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 100000, 42, 10000, 0, 200000},
		{20, 200000, 42, 20000, 0, 100000},
		{30, 300000, 42, 30000, 0, 0},       // all acked; the writer paused
		{90, 300000, 42, 40000, 0, 100000},  // writes the rest 50 msec later
		{100, 400000, 84, 50000, 0, 300000}, // the rest acked, the next request came
		{110, 500000, 84, 60000, 0, 200000},
		{120, 600000, 84, 70000, 0, 100000},
		{130, 700000, 84, 80000, 0, 0},
		{300, 700000, 84, 80000, 0, 0},
	})
	for i := range c.Points {
		c.Points[i].MinRTT, c.Points[i].RTT = 30000, 30000 // 30 msec: the reply cannot be acked within 10
		c.Points[i].Unacked = c.Points[i].SendQ / 1000
	}
	var got []uint64
	for _, x := range Segment(trace1(c), SegmentOptions{}) {
		if x.Dir == Send {
			got = append(got, x.Bytes)
			if x.Uncertain {
				t.Errorf("%d bytes uncertain", x.Bytes)
			}
		}
	}
	ts := Segment(trace1(c), SegmentOptions{})
	if n := len(ts); n < 3 || ts[2].Dir != Send || ts[2].RequestWait != 0 {
		t.Errorf("the next response: %+v, want it answering its request at once", ts)
	}
	if !slices.Equal(got, []uint64{300000, 100000, 300000}) {
		t.Errorf("send transfers %v, want 300000, the paused tail 100000, the next response 300000", got)
	}
}

// TestRequestWait: a server that writes its response 40 msec after the
// request came: the transfer starts at the write, and RequestWait is the
// 40 msec a client's own time has on top of it.
func TestRequestWait(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 0, 42, 0, 0, 0}, // the request, 3 msec before the sample
		{20, 0, 42, 0, 0, 0},
		{30, 0, 42, 0, 0, 0},
		{40, 0, 42, 0, 0, 0},
		{50, 10000, 42, 3000, 0, 90000}, // written 47 msec in
		{60, 60000, 42, 13000, 0, 40000},
		{70, 100000, 42, 20000, 0, 0},
		{200, 100000, 42, 20000, 0, 0},
	})
	for i := range c.Points {
		c.Points[i].MinRTT, c.Points[i].SinceRecv = 2000, uint32(c.Points[i].T/msec)-7
	}
	for _, x := range Segment(trace1(c), SegmentOptions{}) {
		if x.Dir == Send && (x.Start != 47*msec || x.RequestWait != 40*msec) {
			t.Errorf("at %v, %v after the request; want at 47ms, 40ms after", x.Start, x.RequestWait)
		}
	}
}

// TestSendSplitDrainedTail: a burst through a 2K window whose last
// sample before the end finds it drained (all sent, the window's worth in
// flight) after a late interval: the interval's busy time is the
// window's, as at its window-bound start, not congestion (rwnd_limited
// counted none of it: the sender paced).
func TestSendSplitDrainedTail(t *testing.T) {
	c := window2K(194, [][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 600_000, 0, 10000, 4000, 1_600_000},
		{48, 2_198_000, 0, 46000, 4000, 2048},
		{50, 2_200_000, 0, 46000, 4000, 0},
		{200, 2_200_000, 0, 46000, 4000, 0},
	})
	c.Points[1].Notsent, c.Points[1].Unacked = 1_597_952, 2
	c.Points[2].Unacked = 2
	ts := Segment(trace1(c), SegmentOptions{})
	if len(ts) != 1 {
		t.Fatalf("got %+v, want one transfer", ts)
	}
	if s := ts[0].Split; s.Congestion > 4*msec || s.Rwnd < 40*msec {
		t.Errorf("split %+v: want the window's 46 ms, no congestion", s)
	}
}

// TestSegmentRecvLateSample: the client's side of TestSegmentLateSample.
// On time, each response runs from its request going out (last_data_sent)
// to its last byte coming (last_data_recv), the client's own
// request-to-last-byte time, 302 msec, to the msec. Before, the next
// request was seen only when acknowledged with the next response's first
// bytes, which were counted into the response before it (3,500,000
// bytes), and the edges sat at sample times. A sample 100 msec late
// across a turn leaves the two responses around it uncertain.
func TestSegmentRecvLateSample(t *testing.T) {
	recvs := func(c *Conn) []Transfer { return segmentDir(c, Recv) }
	ts := recvs(exchangeSeries(1<<40, true))
	if len(ts) != 3 {
		t.Fatalf("%d receive transfers, want 3: %+v", len(ts), ts)
	}
	for i, x := range ts {
		if at := time.Duration(302*i) * msec; x.Uncertain || x.Bytes != 3_400_000 || x.Start != at || x.Dur != 302*msec || x.RequestWait != 0 {
			t.Errorf("response %d: %d bytes at %v for %v (wait %v, uncertain %v), want 3400000 at %v for 302ms", i, x.Bytes, x.Start, x.Dur, x.RequestWait, x.Uncertain, at)
		}
	}
	ts = recvs(exchangeSeries(270, true))
	if len(ts) != 3 {
		t.Fatalf("late sample: %d receive transfers, want 3: %+v", len(ts), ts)
	}
	for i, x := range ts {
		if i < 2 && !x.Uncertain {
			t.Errorf("late sample: transfer %d: %d bytes, not marked uncertain", i, x.Bytes)
		}
		if i == 2 && (x.Uncertain || x.Bytes != 3_400_000 || x.Start != 604*msec || x.Dur != 302*msec) {
			t.Errorf("late sample: transfer 2: %d bytes at %v for %v, uncertain %v, want 3400000 at 604ms for 302ms, certain", x.Bytes, x.Start, x.Dur, x.Uncertain)
		}
	}
}

// TestSegmentRecvPausedTail: the client's side of TestSegmentPausedTail.
// The server pauses 60 msec before the last 100,000 bytes of a response;
// the client reads them and sends its next request in the same interval.
// That interval is the paused tail, and the next response runs from the
// request (last_data_sent) to its last byte (last_data_recv). Before, the
// tail and the next response's first interval were one transfer.
func TestSegmentRecvPausedTail(t *testing.T) {
	c := series([][6]int64{
		{0, 0, 0, 0, 0, 0},
		{10, 0, 0, 0, 0, 0}, // request 1 out at 2
		{20, 0, 0, 0, 0, 0},
		{30, 0, 0, 0, 0, 0},
		{40, 100, 100000, 0, 0, 0}, // from 32, with the request's ACK
		{50, 100, 200000, 0, 0, 0},
		{60, 100, 300000, 0, 0, 0}, // last byte at 58; the server pauses
		{70, 100, 300000, 0, 0, 0},
		{120, 100, 300000, 0, 0, 0},
		{130, 100, 400000, 0, 0, 0}, // the tail, last byte at 125; request 2 out at 126
		{140, 100, 400000, 0, 0, 0},
		{150, 100, 400000, 0, 0, 0},
		{160, 200, 500000, 0, 0, 0}, // from 156
		{170, 200, 600000, 0, 0, 0},
		{180, 200, 700000, 0, 0, 0}, // last byte at 178
		{300, 200, 700000, 0, 0, 0},
	})
	lastByte := map[int64]int64{0: 0, 40: 40, 50: 50, 60: 58, 130: 125, 160: 160, 170: 170, 180: 178}
	var lb, sentAt, sent int64
	for i := range c.Points {
		p := &c.Points[i]
		ms := int64(p.T / msec)
		if at, ok := lastByte[ms]; ok {
			lb = at
		}
		switch ms {
		case 10:
			sentAt, sent = 2, 100
		case 130:
			sentAt, sent = 126, 200
		}
		p.MinRTT, p.RTT = 30000, 30000
		p.Sent, p.SinceSent, p.SinceRecv = uint64(sent), uint32(ms-sentAt), uint32(ms-lb)
	}
	type got struct {
		bytes      uint64
		start, dur time.Duration
		unsure     bool
	}
	var gs []got
	for _, x := range Segment(trace1(c), SegmentOptions{}) {
		if x.Dir == Recv {
			gs = append(gs, got{x.Bytes, x.Start, x.Dur, x.Uncertain})
		}
	}
	want := []got{{300000, 2 * msec, 56 * msec, false}, {100000, 120 * msec, 5 * msec, false}, {300000, 126 * msec, 52 * msec, false}}
	if !slices.Equal(gs, want) {
		t.Errorf("receive transfers %+v, want %+v: response 1, its paused tail, response 2 from its request to its last byte", gs, want)
	}
}

// TestSegmentRecvFoundMidResponse: a client found 8 msec after a
// response's bytes last came, with nothing more in the next interval (its
// small window drained, as in the lab's C5 run): the response was under
// way at the first sample and is clipped, not taken for one that starts
// there. Data last come more than the gap before the first sample, and
// a response after our own request, start afresh.
func TestSegmentRecvFoundMidResponse(t *testing.T) {
	var rows [][6]int64 // t (msec), bytes received
	for _, r := range [][2]int64{{200, 386700}, {210, 386700}, {220, 492732}, {230, 600000}, {240, 700000}, {400, 700000}} {
		rows = append(rows, [6]int64{r[0], 43, r[1]})
	}
	c := series(rows)
	for i := range c.Points {
		p := &c.Points[i]
		p.MinRTT, p.RTT, p.Sent = 30000, 30000, 42
		p.SinceRecv, p.SinceSent = uint32(max(0, p.T/msec-232)), uint32(p.T/msec-32)
	}
	c.Points[0].SinceRecv, c.Points[1].SinceRecv = 8, 18
	recv := func() Transfer {
		t.Helper()
		out := segmentDir(c, Recv)
		if len(out) != 1 {
			t.Fatalf("%d receive transfers, want 1: %+v", len(out), out)
		}
		return out[0]
	}
	if x := recv(); !x.Clipped || !x.ClippedStart || x.Bytes != 313300 {
		t.Errorf("found mid-response: %d bytes, clipped %v (start %v), want 313300 clipped at its start", x.Bytes, x.Clipped, x.ClippedStart)
	}
	c.Points[0].SinceRecv, c.Points[1].SinceRecv = 100, 110
	if x := recv(); x.Clipped {
		t.Errorf("data last came 100 msec before the first sample: clipped, want a transfer of its own")
	}
	c.Points[0].SinceRecv, c.Points[1].SinceRecv = 8, 18
	c.Points[1].Sent, c.Points[1].SinceSent = 84, 1 // our request at 209
	for i := 2; i < len(c.Points); i++ {
		c.Points[i].Sent, c.Points[i].SinceSent = 84, uint32(c.Points[i].T/msec-209)
	}
	if x := recv(); x.Clipped || x.Start != 209*msec {
		t.Errorf("after our request at 209 msec: clipped %v, start %v, want its own from the request", x.Clipped, x.Start)
	}
}
