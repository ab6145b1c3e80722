// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// Verdict is what a transfer is judged to have lost and why.
type Verdict struct {
	// Ideal is the transfer's time at the path's rate.
	Ideal    time.Duration `json:"ideal_ns"`
	PathRate float64       `json:"path_rate_Bps"`
	PathFrom string        `json:"path_from"`
	// PathKnown: PathRate is the path's (--bandwidth or measured), not
	// the reference rate a path inside the host or an unknown one is
	// judged against; only a known rate sizes a buffer.
	PathKnown bool `json:"path_known"`
	// Slow: moving less than tcpmodel.LostShare of the path's rate, for
	// longer than MinSlow and over two sampling intervals at least.
	Slow bool   `json:"slow"`
	Held Holder `json:"held_by"`
	// HeldFor is the time Held took.
	HeldFor time.Duration `json:"held_ns"`
	// Line is what happened to this transfer: its size, time and what
	// held it (the fix is the connection's, ConnLine).
	Line string `json:"line,omitempty"`
	// FixBytes is the buffer size the connection's fix asks for (the
	// largest any of its slow transfers needs), on each of its slow
	// transfers; 0 without a size.
	FixBytes int64 `json:"fix_bytes,omitempty"`
	// ConnLine is the connection's verdict, said once: on the slow
	// transfer of the connection (and direction) that lost the most.
	ConnLine string `json:"conn_line,omitempty"`
}

// ConnVerdict is the verdict on one connection's slow transfers in one
// direction: what held them longest, and one fix with one size.
type ConnVerdict struct {
	Conn   int            `json:"conn"`
	Local  netip.AddrPort `json:"local"`
	Remote netip.AddrPort `json:"remote"`
	Dir    Direction      `json:"dir"`
	// Slow of Transfers were slow; Bytes and Dur are the slow ones'.
	Slow, Transfers int
	Bytes           uint64
	Dur             time.Duration
	// Held held the slow transfers longest, HeldFor in all.
	Held     Holder
	HeldFor  time.Duration
	FixBytes int64
	Line     string
}

// JudgeOptions say what transfers are judged against.
type JudgeOptions struct {
	// Bandwidth is the path's rate in bits/s (--bandwidth); 0: estimated
	// from the recording (Paths).
	Bandwidth float64
	// MinSlow: shorter transfers are never called slow; 0 means the
	// larger of 20 ms and two sample intervals.
	MinSlow time.Duration
}

// PathRate is what trace judges the transfers to one peer address by.
type PathRate struct {
	Peer netip.Addr
	// Rate is bytes/s; 0: unknown (judged against tcpmodel.ReferenceRate).
	Rate   float64
	Source string
	// Local: the path never leaves the host.
	Local bool
}

// pathSpans lists, per peer address, the stretches in which only the
// path held a sender to it (tcpmodel.PathSpanOf over each sampling
// interval), consecutive qualifying intervals of a connection joined into
// one stretch so that the chronographs' jiffies are counted over it whole;
// and the spans the traced senders to it shared (tcpmodel.SharedSpanOf
// over each sampling interval they were read at both ends of).
func pathSpans(tr *Trace) (own, shared map[netip.Addr][]tcpmodel.PathSpan) {
	own, shared = map[netip.Addr][]tcpmodel.PathSpan{}, map[netip.Addr][]tcpmodel.PathSpan{}
	type slot struct {
		peer     netip.Addr
		from, to time.Duration
	}
	slots := map[slot][]tcpmodel.PathSender{}
	for _, c := range tr.Conns {
		a := c.Remote.Addr().Unmap()
		var run tcpmodel.PathSpan
		flush := func() {
			if run.Busy > 0 {
				own[a] = append(own[a], run)
			}
			run = tcpmodel.PathSpan{}
		}
		for i := 1; i < len(c.Points); i++ {
			p, q := &c.Points[i-1], &c.Points[i]
			k := slot{a, p.T, q.T}
			slots[k] = append(slots[k], tcpmodel.PathSender{From: p.reading(), To: q.reading()})
			s, ok := tcpmodel.PathSpanOf(p.reading(), q.reading(), q.T-p.T)
			if !ok {
				flush()
				continue
			}
			run.Acked, run.Busy = run.Acked+s.Acked, run.Busy+s.Busy
		}
		flush()
	}
	for k, ss := range slots { // the median does not depend on the order
		if s, ok := tcpmodel.SharedSpanOf(k.to-k.from, ss); ok {
			shared[k.peer] = append(shared[k.peer], s)
		}
	}
	return own, shared
}

// Paths says what each peer address of tr is judged by: --bandwidth when
// given; a path inside the host (a loopback peer, or both ends traced)
// against tcpmodel.ReferenceRate, as check does (a rate there is a burst
// of memory copies); else the path's rate measured from the stretches in
// which only the path held a sender to that address (tcpmodel's
// PathEstimate, as check measures it); else unknown, judged against the
// reference rate as check does.
func Paths(tr *Trace, o JudgeOptions) map[netip.Addr]PathRate {
	traced := map[tcpmodel.Tuple]bool{}
	for _, c := range tr.Conns {
		traced[tcpmodel.Tuple{Local: c.Local, Remote: c.Remote}] = true
	}
	own, shared := pathSpans(tr)
	out := map[netip.Addr]PathRate{}
	for _, c := range tr.Conns {
		a := c.Remote.Addr().Unmap()
		p := out[a]
		p.Peer = a
		p.Local = p.Local || tcpmodel.IsLoopback(a) || traced[tcpmodel.Tuple{Local: c.Remote, Remote: c.Local}]
		out[a] = p
	}
	for a, p := range out {
		switch e, ok := tcpmodel.PathEstimateOf(own[a], shared[a]); {
		case o.Bandwidth > 0:
			p.Rate, p.Source = o.Bandwidth/8, "--bandwidth"
		case p.Local:
			p.Source = "inside the host: judged against the reference " + units.Rate(tcpmodel.ReferenceRate) + " as check does (--bandwidth overrides)"
		case ok:
			p.Rate, p.Source = e.Rate, e.Source()
		default:
			p.Source = fmt.Sprintf("unknown (under %s of busy time in which only the path held a sender): judged against the reference %s as check does; give --bandwidth",
				units.Dur(tcpmodel.PathMinBusy), units.Rate(tcpmodel.ReferenceRate))
		}
		out[a] = p
	}
	return out
}

// Judge fills each transfer's Verdict and returns the verdicts per
// connection and direction. The path's rate comes from Paths; a transfer
// is slow when tcpmodel's Path.Judge says it lost performance; a
// connection's slow transfers get one verdict naming what held them
// longest, the side to change and check's fix, sized for the largest
// any of them needs.
func Judge(tr *Trace, ts []Transfer, o JudgeOptions) []ConnVerdict {
	minSlow := o.MinSlow
	if minSlow <= 0 {
		minSlow = max(20*time.Millisecond, 2*tr.Header.Interval)
	}
	paths := Paths(tr, o)
	byTuple := map[tcpmodel.Tuple]*Conn{}
	for _, c := range tr.Conns {
		byTuple[tcpmodel.Tuple{Local: c.Local, Remote: c.Remote}] = c
	}
	for i := range ts {
		t := &ts[i]
		pr := paths[t.Remote.Addr().Unmap()]
		path := tcpmodel.Path{Local: pr.Local, Rate: pr.Rate, Source: pr.Source}
		v := path.Judge(t.Goodput)
		rate := v.Against
		if path.Rate > 0 {
			rate = path.Rate
		}
		// A transfer inside one sampling interval has a duration no better
		// than that interval (a small request): not judged.
		verdict := &Verdict{PathRate: rate, PathFrom: pr.Source, PathKnown: pr.Rate > 0, Slow: v.Lost && t.Dur >= minSlow && t.Samples >= 3 && !t.Uncertain}
		if verdict.PathFrom == "" {
			verdict.PathFrom = "reference " + units.Rate(tcpmodel.ReferenceRate)
		}
		if rate > 0 {
			verdict.Ideal = time.Duration(float64(t.Bytes) / rate * float64(time.Second))
		}
		verdict.Held, verdict.HeldFor = t.Split.Largest(t.Dir)
		if verdict.Slow {
			verdict.Line = transferLine(t, verdict)
		}
		t.Verdict = verdict
	}
	return connVerdicts(ts, byTuple)
}

// connVerdicts groups the slow transfers by connection and direction and
// says one verdict for each, attached to the one that lost the most.
func connVerdicts(ts []Transfer, byTuple map[tcpmodel.Tuple]*Conn) []ConnVerdict {
	type key struct {
		conn int
		dir  Direction
	}
	idx := map[key][]int{}
	var keys []key
	// Uncertain transfers are counted apart: neither slow nor in the
	// total the slow ones are out of.
	total, unsure := map[key]int{}, map[key]int{}
	for i := range ts {
		k := key{ts[i].Conn, ts[i].Dir}
		if ts[i].Uncertain {
			unsure[k]++
			continue
		}
		total[k]++
		if ts[i].Verdict == nil || !ts[i].Verdict.Slow {
			continue
		}
		if idx[k] == nil {
			keys = append(keys, k)
		}
		idx[k] = append(idx[k], i)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].conn != keys[j].conn {
			return keys[i].conn < keys[j].conn
		}
		return keys[i].dir < keys[j].dir
	})
	var out []ConnVerdict
	for _, k := range keys {
		is := idx[k]
		first := &ts[is[0]]
		cv := ConnVerdict{Conn: k.conn, Local: first.Local, Remote: first.Remote, Dir: k.dir, Slow: len(is), Transfers: total[k]}
		var sum Split
		var rtt time.Duration
		worst := is[0]
		for _, i := range is {
			t := &ts[i]
			cv.Bytes += t.Bytes
			cv.Dur += t.Dur
			sum.Rwnd += t.Split.Rwnd
			sum.Sndbuf += t.Split.Sndbuf
			sum.Congestion += t.Split.Congestion
			sum.Recovery += t.Split.Recovery
			sum.App += t.Split.App
			sum.Other += t.Split.Other
			sum.RwndDerived = sum.RwndDerived || t.Split.RwndDerived
			sum.SndbufDerived = sum.SndbufDerived || t.Split.SndbufDerived
			rtt = max(rtt, t.RTTMin)
			if t.Dur-t.Verdict.Ideal > ts[worst].Dur-ts[worst].Verdict.Ideal {
				worst = i
			}
		}
		cv.Held, cv.HeldFor = sum.Largest(k.dir)
		// One size: the largest any of the slow transfers needs (the
		// path's rate is the peer's; the RTT the largest minimum).
		var plan bdp.Plan // no size without the path's rate, as check
		if first.Verdict.PathKnown {
			plan = bdp.For(rtt, first.Verdict.PathRate*8, &snapshot.Snapshot{})
		}
		switch cv.Held {
		case HeldRwnd:
			cv.FixBytes = int64(plan.AskRcvBuf)
		case HeldSndbuf:
			cv.FixBytes = int64(plan.AskSndBuf)
		}
		agg := Transfer{Conn: k.conn, Local: first.Local, Remote: first.Remote, Dir: k.dir, Bytes: cv.Bytes, Dur: cv.Dur, Split: sum, RTTMin: rtt}
		agg.RTTMax, agg.CwndMin, agg.CwndMax = spans(ts, is)
		for _, i := range is {
			agg.Retrans += ts[i].Retrans
			agg.PeakWnd = max(agg.PeakWnd, ts[i].PeakWnd)
			agg.SkBuf = max(agg.SkBuf, ts[i].SkBuf)
		}
		v := &Verdict{PathRate: first.Verdict.PathRate, Held: cv.Held, HeldFor: cv.HeldFor}
		head := fmt.Sprintf("%d of %d %s transfers slow", cv.Slow, cv.Transfers, k.dir)
		if n := unsure[k]; n > 0 {
			head += fmt.Sprintf(" (%d more uncertain, not judged)", n)
		}
		cv.Line = head + ": " + verdictLine(&agg, v, plan, byTuple[tcpmodel.Tuple{Local: first.Remote, Remote: first.Local}])
		for _, i := range is {
			ts[i].Verdict.FixBytes = cv.FixBytes
		}
		ts[worst].Verdict.ConnLine = cv.Line
		out = append(out, cv)
	}
	return out
}

// spans is the largest RTT and the cwnd range over transfers is.
func spans(ts []Transfer, is []int) (rttMax time.Duration, cwndMin, cwndMax uint32) {
	cwndMin = ^uint32(0)
	for _, i := range is {
		rttMax = max(rttMax, ts[i].RTTMax)
		cwndMin, cwndMax = min(cwndMin, ts[i].CwndMin), max(cwndMax, ts[i].CwndMax)
	}
	return rttMax, cwndMin, cwndMax
}

// transferLine is what happened to one slow transfer, without the fix.
func transferLine(t *Transfer, v *Verdict) string {
	return fmt.Sprintf("%s: %s %s", units.Bytes(float64(t.Bytes)), units.Share(v.HeldFor, t.Dur), waitWord(v.Held))
}

// verdictLine says, in one line, which side to change and how, with check's fix
// wording; t is the connection's slow transfers taken together.
func verdictLine(t *Transfer, v *Verdict, plan bdp.Plan, peer *Conn) string {
	head := fmt.Sprintf("%s: %s %s", units.Bytes(float64(t.Bytes)), units.Share(v.HeldFor, t.Dur), waitWord(v.Held))
	rtt := t.RTTMin
	switch v.Held {
	case HeldRwnd:
		who := "the receiver " + t.Remote.String()
		pin := ""
		if peer != nil && len(peer.Points) > 0 {
			rb := peer.Points[len(peer.Points)-1].SkRcv
			if p := tcpmodel.JudgeBuf(rb, rb, snapshot.Flags{}, tcpmodel.LockRcv, tcpmodel.Limits{}); p.Pinned {
				pin = fmt.Sprintf("; its rcvbuf %s looks pinned: %s", units.Bytes(float64(rb)), p.Why)
			}
		}
		if t.Split.RwndDerived {
			head += " (the kernel's rwnd_limited, and the window seen under half of cwnd with data waiting)"
		}
		return fmt.Sprintf("%s, the peer advertising at most %s%s: %s; %s", head, units.Bytes(float64(t.PeakWnd)), pin,
			fixText(remedy.UnpinRcvBuf(who)), fixText(remedy.SizeRcvBuf(plan, rtt)))
	case HeldSndbuf:
		how := "the kernel's sndbuf_limited"
		if t.Split.SndbufDerived {
			how = "buffer full with everything in flight"
		}
		pin := ""
		if p := tcpmodel.JudgeBuf(t.SkBuf, t.SkBuf, snapshot.Flags{}, tcpmodel.LockSnd, tcpmodel.Limits{}); p.Pinned {
			pin = "; it looks pinned: " + p.Why
		}
		return fmt.Sprintf("%s (%s), sndbuf %s%s: the sender %s to change: %s; %s", head, how, units.Bytes(float64(t.SkBuf)), pin, t.Local,
			fixText(remedy.UnpinSndBuf()), fixText(remedy.SizeSndBuf(plan, rtt)))
	case HeldRecovery:
		return fmt.Sprintf("%s, %d retransmits: loss on the path from %s to %s; no buffer to change (see check's retransmissions finding)", head, t.Retrans, t.Local, t.Remote)
	case HeldCongestion:
		return fmt.Sprintf("%s, cwnd %d..%d segments, RTT %s..%s: the path (congestion control), no buffer to change", head, t.CwndMin, t.CwndMax, units.RTT(t.RTTMin), units.RTT(t.RTTMax))
	case HeldAppWrite:
		return fmt.Sprintf("%s: the sending application %s wrote slower than the network took it; the network is not the limit", head, t.Local)
	case HeldAppRead:
		return fmt.Sprintf("%s: the receiving application %s left its window closed with data unread; it reads too slowly (see check's slow-reader)", head, t.Local)
	}
	return fmt.Sprintf("%s: the sender %s or the network; trace the sending side for its chronographs", head, t.Remote)
}

func waitWord(h Holder) string {
	switch h {
	case HeldRwnd:
		return "waiting for the peer's receive window"
	case HeldSndbuf:
		return "held by the send buffer"
	case HeldCongestion:
		return "held by congestion control"
	case HeldRecovery:
		return "in retransmission recovery"
	case HeldAppWrite:
		return "with the application not writing"
	case HeldAppRead:
		return "with the application not reading"
	}
	return "held by the sender or the network"
}

// fixText keeps a fix's text, with its command when it has one.
func fixText(f diag.Fix) string {
	if f.Command == "" {
		return f.Text
	}
	return f.Text + " (" + f.Command + ")"
}

// Slowest returns the transfers sorted by time lost against the ideal,
// most first, slow ones before the rest.
func Slowest(ts []Transfer) []Transfer {
	out := append([]Transfer(nil), ts...)
	lost := func(t *Transfer) time.Duration {
		if t.Verdict == nil {
			return t.Dur
		}
		return t.Dur - t.Verdict.Ideal
	}
	sort.SliceStable(out, func(i, j int) bool {
		si, sj := out[i].Verdict != nil && out[i].Verdict.Slow, out[j].Verdict != nil && out[j].Verdict.Slow
		if si != sj {
			return si
		}
		return lost(&out[i]) > lost(&out[j])
	})
	return out
}

// Dedupe drops receive transfers whose sending socket is in the trace too
// (a connection inside the namespace): the send side carries the
// chronographs and tells the same transfer.
func Dedupe(tr *Trace, ts []Transfer) []Transfer {
	traced := map[tcpmodel.Tuple]bool{}
	for _, c := range tr.Conns {
		traced[tcpmodel.Tuple{Local: c.Local, Remote: c.Remote}] = true
	}
	var out []Transfer
	for _, t := range ts {
		if t.Dir == Recv && traced[tcpmodel.Tuple{Local: t.Remote, Remote: t.Local}] {
			continue
		}
		out = append(out, t)
	}
	return out
}
