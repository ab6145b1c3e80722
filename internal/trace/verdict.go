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
	// Slow: moving less than tcpmodel.LostShare of the path's rate, for
	// longer than MinSlow and over two sampling intervals at least.
	Slow bool   `json:"slow"`
	Held Holder `json:"held_by"`
	// HeldFor is the time Held took.
	HeldFor time.Duration `json:"held_ns"`
	// Line is the one-line verdict: the side and the value to change.
	Line string `json:"line,omitempty"`
}

// JudgeOptions say what transfers are judged against.
type JudgeOptions struct {
	// Bandwidth is the path's rate in bits/s (--bandwidth); 0: the best
	// delivery rate measured to the same peer.
	Bandwidth float64
	// MinSlow: shorter transfers are never called slow; 0 means the
	// larger of 20 ms and two sample intervals.
	MinSlow time.Duration
}

// Judge fills each transfer's Verdict. Rates come from --bandwidth or the
// best tcp_info.delivery_rate seen towards the same peer address; a
// transfer is slow when tcpmodel's Path.Judge says it lost performance;
// the line names what held it longest, the side to change and check's fix.
func Judge(tr *Trace, ts []Transfer, o JudgeOptions) {
	minSlow := o.MinSlow
	if minSlow <= 0 {
		minSlow = max(20*time.Millisecond, 2*tr.Header.Interval)
	}
	rates := map[netip.Addr]float64{}
	byTuple := map[tcpmodel.Tuple]*Conn{}
	for _, c := range tr.Conns {
		byTuple[tcpmodel.Tuple{Local: c.Local, Remote: c.Remote}] = c
		a := c.Remote.Addr().Unmap()
		for i := range c.Points {
			rates[a] = max(rates[a], float64(c.Points[i].Rate))
		}
	}
	for i := range ts {
		t := &ts[i]
		peer := byTuple[tcpmodel.Tuple{Local: t.Remote, Remote: t.Local}]
		path := tcpmodel.Path{Local: tcpmodel.IsLoopback(t.Remote.Addr()) || peer != nil}
		switch r := rates[t.Remote.Addr().Unmap()]; {
		case o.Bandwidth > 0:
			path.Rate, path.Source = o.Bandwidth/8, "--bandwidth"
		case r > 0 && !path.Local:
			path.Rate, path.Source = r, "best tcp_info.delivery_rate to "+t.Remote.Addr().String()
		}
		v := path.Judge(t.Goodput)
		rate := v.Against
		if path.Rate > 0 {
			rate = path.Rate
		}
		// A transfer inside one sampling interval has a duration no better
		// than that interval (a small request): not judged.
		verdict := &Verdict{PathRate: rate, PathFrom: path.Source, Slow: v.Lost && t.Dur >= minSlow && t.Samples >= 3}
		if verdict.PathFrom == "" {
			verdict.PathFrom = "reference " + units.Rate(tcpmodel.ReferenceRate)
		}
		if rate > 0 {
			verdict.Ideal = time.Duration(float64(t.Bytes) / rate * float64(time.Second))
		}
		verdict.Held, verdict.HeldFor = t.Split.Largest(t.Dir)
		if verdict.Slow {
			verdict.Line = verdictLine(t, verdict, peer)
		}
		t.Verdict = verdict
	}
}

// verdictLine says, in one line, which side to change and how, with check's fix
// wording.
func verdictLine(t *Transfer, v *Verdict, peer *Conn) string {
	share := units.Pct(snapshot.Frac(v.HeldFor, t.Dur))
	head := fmt.Sprintf("%s in %s, %s (%s) %s", units.Bytes(float64(t.Bytes)), units.Dur(t.Dur), units.Dur(v.HeldFor), share, waitWord(v.Held))
	rtt := t.RTTMin
	plan := bdp.For(rtt, v.PathRate*8, &snapshot.Snapshot{})
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
