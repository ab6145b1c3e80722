// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

const (
	// sndbufInflightFrac: data in flight (unacked x mss) at least this share
	// of sndbuf. Autotuning keeps sndbuf several times what is in flight
	// (about 2 x cwnd x per-segment truesize), so a healthy sender sits far
	// below; a pinned 32K buffer measured about 2 x sndbuf in flight.
	sndbufInflightFrac = 0.5
	// sndbufQueuedFrac: wmem_queued at least this share of sndbuf, i.e. the
	// buffer is full and the application is blocked writing.
	sndbufQueuedFrac = 0.75
	// sndbufChronoShare and sndbufQueuedLow judge the buffer over the
	// window rather than at one instant: with the kernel's sndbuf_limited
	// at least sndbufChronoShare of busy time, a sample's wmem_queued need
	// only reach sndbufQueuedLow of sndbuf. An epoll writer (Netty, as in
	// Dubbo and grpc-java) writes again only when woken with room in the
	// buffer, so its wmem_queued swings between about 0.7 and 1.6 x sndbuf
	// and either sample can land low while the buffer limits all along.
	sndbufChronoShare = 0.3
	sndbufQueuedLow   = 0.5
	// sndbufHeadroom: cwnd x mss and the peer's window must each exceed the
	// data in flight by this factor, so neither is the limit.
	sndbufHeadroom = 1.5
	// sndbufBusyShare: share of the window the connection had data
	// outstanding (tcp_info.busy_time), so it wanted to send.
	sndbufBusyShare = 0.5
	// sndbufAutoShortfall: a sender at the tcp_wmem maximum (not pinned) is
	// reported only when it moves this much less than its path is known
	// to carry; a healthy gigabit transfer may sit at the maximum.
	sndbufAutoShortfall = 0.2
	sndbufMaxFindings   = 10
)

func sndbufLimited() diag.Rule {
	return diag.Rule{ID: "sndbuf-limited", Title: "Throughput capped by the send buffer", Traceable: true, Check: checkSndbufLimited}
}

// sndbufLook is the instantaneous evidence from one sample.
type sndbufLook struct {
	inflight, cwnd, wnd, sndbuf, queued float64
	hasWnd                              bool
	// The sample's tcp_info fields its evidence shows.
	unacked, mss, sndCwnd, notsent uint32
	// prev: the look is of the previous sample (lookPrevSndbuf).
	prev bool
}

// lookSndbuf measures one sample; ok is false without tcp_info or meminfo.
func lookSndbuf(sk *snapshot.Socket) (sndbufLook, bool) {
	if sk == nil {
		return sndbufLook{}, false
	}
	var tb snapshot.TCPInfo
	return lookSndbufOf(sk.TCP(&tb), sk.Mem)
}

// lookPrevSndbuf is lookSndbuf of the previous sample's (nil: none).
func lookPrevSndbuf(p *snapshot.Was) (sndbufLook, bool) {
	if p == nil {
		return sndbufLook{}, false
	}
	var tb snapshot.TCPInfo
	l, ok := lookSndbufOf(p.TCP(&tb), p.Mem)
	l.prev = true
	return l, ok
}

func lookSndbufOf(ti *snapshot.TCPInfo, m *snapshot.MemInfo) (sndbufLook, bool) {
	if ti == nil || m == nil || ti.SndMSS == 0 || m.Sndbuf == 0 {
		return sndbufLook{}, false
	}
	inflight, cwnd := tcpmodel.Flight(ti)
	return sndbufLook{
		inflight: inflight,
		cwnd:     cwnd,
		wnd:      float64(ti.SndWnd),
		hasWnd:   ti.Has(snapshot.EndSndWnd),
		sndbuf:   float64(m.Sndbuf),
		queued:   float64(m.WmemQueued),
		unacked:  ti.Unacked,
		mss:      ti.SndMSS,
		sndCwnd:  ti.SndCwnd,
		notsent:  ti.NotsentBytes,
	}, true
}

// queuedNearBuf is the part of limited that meminfo alone decides: a
// socket whose queued bytes are short of frac of the buffer is not
// limited, whatever its tcp_info says.
func queuedNearBuf(m *snapshot.MemInfo, frac float64) bool {
	return m != nil && m.Sndbuf != 0 && float64(m.WmemQueued) >= frac*float64(m.Sndbuf)
}

// limited: in flight near the buffer, buffer full, cwnd and the peer's
// window well above what is in flight.
func (l sndbufLook) limited() bool { return l.limitedAt(sndbufQueuedFrac) }

// limitedAt is limited with the buffer counted full at frac of sndbuf.
func (l sndbufLook) limitedAt(frac float64) bool {
	return l.inflight > 0 &&
		l.inflight >= sndbufInflightFrac*l.sndbuf &&
		l.queued >= frac*l.sndbuf &&
		l.cwnd >= sndbufHeadroom*l.inflight &&
		(!l.hasWnd || l.wnd >= sndbufHeadroom*l.inflight)
}

func checkSndbufLimited(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagReady(cur); err != nil {
		return nil, err
	}
	window := in.Window()
	rates := peerRates(in)
	idx := in.CurTuples()
	lim := tcpmodel.SndLimits(cur)
	var hits []scored // score: share of the path rate not used; 0 when unknown
	var tb snapshot.TCPInfo
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if sk.State != snapshot.Established {
			continue
		}
		prev := in.PrevOf(sk)
		look, ok := sndbufGate(sk, prev, window)
		if !ok {
			continue
		}
		rtt := tcpmodel.RTT(sk.TCP(&tb))
		if rtt <= 0 {
			continue
		}
		if h, ok := sndbufFinding(in, sk, prev, look, rtt, window, rates, idx, lim); ok {
			hits = append(hits, h)
		}
	}
	return rankFindings(hits, sndbufMaxFindings, func(n int) diag.Finding {
		return moreFinding(cur, n, "connections", "look send-buffer-limited", "sock_diag")
	}), nil
}

// sndbufGate finds the sample that shows sk limited by its send buffer.
// Each sample reads one instant, and a writer descheduled on a busy host
// can leave the buffer briefly short: either sample may show the limit,
// and with the kernel's sndbuf_limited over the window high enough, a
// sample with the buffer fairly full does (sndbufChronoShare). The
// meminfo rules most connections out before their tcp_info is unpacked
// (queuedNearBuf).
func sndbufGate(sk *snapshot.Socket, prev *snapshot.Was, window time.Duration) (sndbufLook, bool) {
	if queuedNearBuf(sk.Mem, sndbufQueuedFrac) {
		if l, ok := lookSndbuf(sk); ok && l.limited() {
			return l, true
		}
	}
	if prev == nil {
		return sndbufLook{}, false
	}
	if queuedNearBuf(prev.Mem, sndbufQueuedFrac) {
		if l, ok := lookPrevSndbuf(prev); ok && l.limited() {
			return l, true
		}
	}
	if !queuedNearBuf(sk.Mem, sndbufQueuedLow) && !queuedNearBuf(prev.Mem, sndbufQueuedLow) {
		return sndbufLook{}, false
	}
	var tb, pb snapshot.TCPInfo
	sh, ok := snapshot.ChronoShares(prev.TCP(&pb), sk.TCP(&tb), window)
	if !ok || sh.Busy <= 0 || snapshot.Frac(sh.Sndbuf, sh.Busy) < sndbufChronoShare {
		return sndbufLook{}, false
	}
	if l, ok := lookSndbuf(sk); ok && l.limitedAt(sndbufQueuedLow) {
		return l, true
	}
	if l, ok := lookPrevSndbuf(prev); ok && l.limitedAt(sndbufQueuedLow) {
		return l, true
	}
	return sndbufLook{}, false
}

func sndbufFinding(in *diag.Input, sk *snapshot.Socket, prev *snapshot.Was, look sndbufLook, rtt, window time.Duration,
	rates tcpmodel.PathRates, idx tcpmodel.Tuples, lim tcpmodel.Limits) (scored, bool) {
	var tb, pb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	ev := []diag.Evidence{}
	confident := false // two samples agree
	var thr float64    // observed bytes/s over the window, 0 when unknown
	busyShare := -1.0
	if prev != nil && window > 0 {
		busy := -1.0
		pi := prev.TCP(&pb)
		if sh, ok := snapshot.ChronoShares(pi, ti, window); ok {
			busy = snapshot.Frac(sh.Busy, window)
			ev = append(ev, diag.Evidence{Name: "busy", Value: units.Pct(busy) + " of the " + units.Dur(window) + " window",
				Source: "sock_diag tcp_info.busy_time (delta)", Threshold: ">= " + units.Pct(sndbufBusyShare)})
			if sh.Busy > 0 {
				v := units.Pct(snapshot.Frac(sh.Sndbuf, sh.Busy)) + " of busy time"
				v += chronoNote(snapshot.Frac(sh.Sndbuf, sh.Busy), sk.CC.String())
				ev = append(ev, diag.Evidence{Name: "kernel sndbuf_limited", Value: v, Source: "sock_diag tcp_info.sndbuf_limited (delta)"})
			}
		}
		if pi != nil && ti.BytesAcked >= pi.BytesAcked {
			thr = float64(ti.BytesAcked-pi.BytesAcked) / window.Seconds()
		}
		if busy >= 0 && busy < sndbufBusyShare {
			return scored{}, false
		}
		if busy < 0 && thr == 0 {
			return scored{}, false
		}
		// look is the current sample's whenever that one shows the limit.
		pl, ok := lookPrevSndbuf(prev)
		confident = ok && pl.limited() && !look.prev
		busyShare = busy
	}
	if thr > 0 {
		ev = append(ev, diag.Evidence{Name: "throughput", Value: units.Rate(thr), Source: "sock_diag tcp_info.bytes_acked (delta / window)"})
	}
	if ti.Has(snapshot.EndDeliveryRate) && ti.DeliveryRate > 0 {
		ev = append(ev, diag.Evidence{Name: "delivery rate", Value: units.Rate(float64(ti.DeliveryRate)), Source: "sock_diag tcp_info.delivery_rate"})
	}
	own := thr
	if own == 0 {
		own = tcpmodel.OwnRate(ti)
	}
	ev = append(ev,
		diag.Evidence{Name: "in flight", Value: fmt.Sprintf("%d segments x %d = %s (%.1f x sndbuf)", look.unacked, look.mss, units.Bytes(look.inflight), look.inflight/look.sndbuf),
			Source: "sock_diag tcp_info.unacked x snd_mss", Threshold: ">= " + units.Pct(sndbufInflightFrac) + " of sndbuf"},
		diag.Evidence{Name: "send buffer", Value: fmt.Sprintf("sndbuf %s, queued %s", units.Bytes(look.sndbuf), units.Bytes(look.queued)),
			Source: "sock_diag SK_MEMINFO sndbuf, wmem_queued", Threshold: "queued >= " + units.Pct(sndbufQueuedFrac) + " of sndbuf (full)"},
		diag.Evidence{Name: "congestion window", Value: fmt.Sprintf("%d x %d = %s (%.1f x in flight)", look.sndCwnd, look.mss, units.Bytes(look.cwnd), look.cwnd/look.inflight),
			Source: "sock_diag tcp_info.snd_cwnd", Threshold: fmt.Sprintf(">= %.1f x in flight: not the limit", sndbufHeadroom)},
	)
	if look.hasWnd {
		ev = append(ev, diag.Evidence{Name: "peer window", Value: fmt.Sprintf("%s (%.1f x in flight)", units.Bytes(look.wnd), look.wnd/look.inflight),
			Source: "sock_diag tcp_info.snd_wnd", Threshold: fmt.Sprintf(">= %.1f x in flight: not the limit", sndbufHeadroom)})
	}
	if look.notsent > 0 {
		ev = append(ev, diag.Evidence{Name: "not yet sent", Value: units.Bytes(float64(look.notsent)), Source: "sock_diag tcp_info.notsent_bytes"})
	}
	// A pinned buffer is no hard cap on what is in flight (the writer
	// tops up the unsent tail skb past it): the ceiling is what is seen in
	// flight per RTT, not sndbuf / RTT.
	ceil := max(look.inflight, look.sndbuf) / rtt.Seconds() // bytes/s
	ev = append(ev, diag.Evidence{Name: "buffer ceiling", Value: fmt.Sprintf("%s in flight (%.1f x sndbuf %s) per RTT %s = %s", units.Bytes(max(look.inflight, look.sndbuf)), max(look.inflight, look.sndbuf)/look.sndbuf, units.Bytes(look.sndbuf), units.RTT(rtt), units.Rate(ceil)),
		Source: "tcp_info.unacked x snd_mss, SK_MEMINFO sndbuf, tcp_info.rtt"})

	var prevSize uint32
	if prev != nil && prev.Mem != nil {
		prevSize = prev.Mem.Sndbuf
	}
	pin := tcpmodel.JudgeBufFrom(sk.Mem.Sndbuf, prevSize, sk.BufLock, tcpmodel.LockSnd, lim, in.Cur.BufLocks)
	atAuto := lim.Auto > 0 && int64(sk.Mem.Sndbuf) >= lim.Auto
	switch {
	case pin.Pinned && pin.Proof:
		ev = append(ev, diag.Evidence{Name: "pinned", Value: "SO_SNDBUF set by the application: " + pin.Why, Source: pin.Source()})
	case pin.Pinned:
		// Only the lock bit proves the application set it.
		ev = append(ev, diag.Evidence{Name: "set by SO_SNDBUF (a hint)", Value: pin.Why, Source: pin.Source()})
	case atAuto:
		v := fmt.Sprintf("sndbuf at net.ipv4.tcp_wmem's maximum %s: autotuning can grow it no further", units.Bytes(float64(lim.Auto)))
		src := "sysctl net.ipv4.tcp_wmem"
		if pin.Proof {
			v += "; not pinned (" + pin.Why + ")"
			src += " and " + pin.Source()
		}
		ev = append(ev, diag.Evidence{Name: "autotuning maximum", Value: v, Source: src})
	case pin.Proof:
		ev = append(ev, diag.Evidence{Name: "pinned", Value: pin.Why, Source: pin.Source()})
	}

	pp := tcpmodel.PathOf(in.Options.Bandwidth, rates, idx, sk)
	path := pp.Rate
	verdict := pp.Judge(own)
	var plan bdp.Plan
	short := 0.0
	if path > 0 {
		plan = bdp.For(rtt, path*8, in.Cur)
		ev = append(ev, pathEvidence(path, rtt, plan.BDP, pp.Source))
		if own > 0 && own < path {
			short = 1 - own/path
		}
	}
	ev = append(ev, diag.Evidence{Name: "performance", Value: verdict.Why, Source: "sock_diag tcp_info.bytes_acked or delivery_rate; --bandwidth or the path's measured rate",
		Threshold: fmt.Sprintf("warning below %s of the path's rate", units.Pct(tcpmodel.LostShare))})
	if !confident {
		ev = append(ev, diag.Evidence{Name: "confidence", Value: "instantaneous evidence from one sample", Source: "sock_diag", Threshold: "two samples agreeing for full confidence"})
	}

	// Severity is the consequence. A pinned buffer warns when the flow
	// moves well below what its path carries. Autotuning at its maximum
	// warns only when the path is known to carry clearly more; with the
	// path unknown, a buffer full at the maximum in both samples, cwnd and
	// the peer's window to spare, is a note naming the sysctl (its own
	// rate is the buffer's and says nothing of the path). Anything else is
	// autotuning still catching up.
	sev := diag.Info
	switch {
	case pin.Pinned && verdict.Lost:
		sev = diag.Warning
	case atAuto && path > 0 && short >= sndbufAutoShortfall:
		sev = diag.Warning
	case atAuto && path == 0 && confident && verdict.Lost:
	case atAuto, !verdict.Lost:
		return scored{}, false
	}
	how := "in one sample"
	switch {
	case confident:
		how = "in both samples"
	case look.prev:
		how = "in the first sample"
	}
	if busyShare >= 0 {
		how = fmt.Sprintf("busy %s of the window and limited %s", units.Pct(busyShare), how)
	} else {
		how = "limited " + how
	}
	what := fmt.Sprintf("its send buffer is %s", units.Bytes(look.sndbuf))
	switch {
	case pin.Pinned && pin.Proof && pin.Capped:
		what = fmt.Sprintf("its send buffer is pinned at %s (SO_SNDBUF capped by net.core.wmem_max)", units.Bytes(look.sndbuf))
	case pin.Pinned && pin.Proof:
		what = fmt.Sprintf("its send buffer is pinned at %s (SO_SNDBUF %s)", units.Bytes(look.sndbuf), units.Bytes(look.sndbuf/2))
	case pin.Pinned && pin.Capped:
		what = fmt.Sprintf("its send buffer is %s, 2 x net.core.wmem_max, where SO_SNDBUF requests are capped (a hint: the lock bits were not read)", units.Bytes(look.sndbuf))
	case pin.Pinned:
		what = fmt.Sprintf("its send buffer is %s, the size SO_SNDBUF %s gives (a hint: the lock bits were not read)", units.Bytes(look.sndbuf), units.Bytes(look.sndbuf/2))
	case atAuto:
		what = fmt.Sprintf("its send buffer is at net.ipv4.tcp_wmem's maximum %s (autotuned, not set by the application)", units.Bytes(look.sndbuf))
	}
	sum := fmt.Sprintf("send-buffer-limited (%s): %s; it keeps %s in flight per RTT %s", how, what, units.Bytes(max(look.inflight, look.sndbuf)), units.RTT(rtt))
	if own > 0 {
		sum += fmt.Sprintf(", moving %s", units.Rate(own))
	} else {
		sum += fmt.Sprintf(", about %s", units.Rate(ceil))
	}
	if path > 0 {
		sum += fmt.Sprintf("; the path needs BDP %s for %s", units.Bytes(plan.BDP), units.Rate(path))
	}
	sub := subject(in.Cur, tcpmodel.ListenersOf(in.Cur), sk)
	if _, other, there := elsewhere(in, sk); there != nil {
		// The receiver is on this host: say who, and whether it keeps up.
		sub.Peer = there
		sum += fmt.Sprintf("; the receiver %s is on this host: %s", sk.Remote, there)
		if other.Mem != nil {
			ev = append(ev, diag.Evidence{Name: "receiver", Value: fmt.Sprintf("%s: rcvbuf %s, Recv-Q %s", there, units.Bytes(float64(other.Mem.Rcvbuf)), units.Bytes(float64(other.RecvQ))),
				Source: "sock_diag SK_MEMINFO rcvbuf and Recv-Q of the reverse tuple in netns " + there.Netns})
		}
	}
	return scored{f: diag.Finding{Severity: sev, Subject: sub, Summary: sum, Evidence: ev,
		Fixes: sndbufFixes(in.Cur, plan, pin, atAuto, rtt)}, score: short}, true
}

// sndbufFixes: "stop pinning" only when the lock bit says the
// application set SO_SNDBUF, a conditional one when the bits were not
// read, none when they show the buffer autotuned.
func sndbufFixes(s *snapshot.Snapshot, plan bdp.Plan, pin tcpmodel.Pin, atAuto bool, rtt time.Duration) []diag.Fix {
	var fs []diag.Fix
	switch {
	case pin.Pinned && pin.Proof:
		fs = append(fs, remedy.UnpinSndBuf(), remedy.SizeSndBuf(plan, rtt))
	case !pin.Proof && (pin.Pinned || !atAuto):
		fs = append(fs, remedy.IfSet(remedy.UnpinSndBuf(), "the application", "SO_SNDBUF"), remedy.SizeSndBuf(plan, rtt))
	case !atAuto:
		fs = append(fs, remedy.SizeSndBuf(plan, rtt))
	}
	for _, c := range plan.Checks {
		if c.OK || c.Command == "" {
			continue
		}
		if set, ok := remedy.FromCheck(s, c); ok && (c.Setting == "net.core.wmem_max" || c.Setting == "net.ipv4.tcp_wmem[2]") {
			fs = append(fs, remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: fmt.Sprintf("raise %s from %s to %d (%s)", c.Setting, c.Current, c.Needed, c.Note),
				Risk: "host-wide; persist in /etc/sysctl.d/ once verified"}, "", set))
		}
	}
	if atAuto && plan.BDP == 0 {
		f := diag.Fix{Scope: "kernel", Target: "sysctl", Text: "autotuning is at its maximum: raise net.ipv4.tcp_wmem's maximum to at least the path's BDP (its rate x RTT; this connection's own rate is capped by the buffer and cannot give it): doubling shown, give --bandwidth to compute it",
			Risk: "host-wide memory per busy connection"}
		if w, _ := s.SysctlInts("net.ipv4.tcp_wmem"); len(w) == 3 {
			f = remedy.SetSysctls(f, "", remedy.Sysctl(s, "net.ipv4.tcp_wmem", w[0], w[1], 2*w[2]))
		}
		fs = append(fs, f)
	}
	return fs
}

// sndbufChronoConfirms: a kernel sndbuf_limited share this high confirms
// the buffer is full. Measured with a 16K SO_SNDBUF over 20 ms: 41-85 % for
// paced senders (bbr, or SO_MAX_PACING_RATE), 0-3 % for cubic or reno.
const sndbufChronoConfirms = 0.4

// chronoNote says what the kernel's sndbuf_limited share means here. It
// starts only when a transmit pass leaves the write queue empty with the
// writer waiting for space, which happens when pacing holds data back; an
// unpaced sender pushes each skb at once, so the clock never starts.
func chronoNote(share float64, cc string) string {
	switch {
	case share >= sndbufChronoConfirms:
		return ": confirms the buffer is full"
	case share > 0:
		return ""
	case cc == "bbr":
		return ": 0 under bbr, whose pacing normally makes a full pinned buffer read 40-85 %; derived instead"
	}
	return ": 0 is expected for a sender that is not paced (" + cc + "): the kernel starts this clock only when pacing holds data back; derived instead"
}
