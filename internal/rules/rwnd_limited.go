// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

const (
	// rwndShareWarn: share of busy time spent waiting for the peer's
	// window (tcp_info.rwnd_limited). Reliable on current kernels: a pinned
	// 32K SO_RCVBUF at the receiver measured 98 %.
	rwndShareWarn = 0.3
	// rwndMinBusy: the connection must be busy this share of the window,
	// or rwndMinBusyTime; a connection that sent one small burst says
	// little.
	rwndMinBusy = 0.1
	// rwndMinBusyTime: busy this long is enough whatever the window: a
	// bursty sender (4 MB, then 1 s asleep) into a 2K window was busy
	// 188-760 ms of 2 s windows on a loaded host, 9-38 %, and one window
	// under 10 % made the same flow quiet; on a quiet host one burst takes
	// 70-90 ms, and a 2 s window can hold only one. A 4 MB burst that
	// takes under 64 ms moves over half of 1 Gbit/s and loses nothing
	// against the reference, so 50 ms (12 jiffies of the chronographs,
	// 4 ms at HZ=250) hides no lost burst of that size.
	rwndMinBusyTime = 50 * time.Millisecond
	// rwndMinLifetime: with one sample, the lifetime chronographs are used
	// only when the connection has been busy this long.
	rwndMinLifetime = time.Second
	rwndMaxFindings = 10
	// rwndPacingFill: a local receiver whose Recv-Q holds this share of
	// its buffer is reading slowly, on purpose or not: the window is not
	// too small, the reader is the limit.
	rwndPacingFill = 0.5
	// rwndPacingMinBuf: a local receiver's buffer under this size never
	// shows pacing: 2K unread is half of a 4K rcvbuf (2 x SO_RCVBUF 2048),
	// and under load a prompt reader was caught so, or with its window
	// shut, in both samples of one window in 30 (the bursty sender,
	// TestCheckTraceAgreeBursty). A slow reader behind it is slow-reader's.
	rwndPacingMinBuf = 64 << 10
	// rwndShareSupported: a lower share is enough when evidence that does
	// not depend on congestion control shows the window is the limit. bbr
	// paces, so its rwnd_limited reads 20-41 % on flows where cubic reads
	// 73-99 %.
	rwndShareSupported = 0.1
	// rwndShareAlone: a share this high fires even if the window looks
	// large at both samples (a window that opens and shuts between them).
	rwndShareAlone = 0.5
	// rwndFullFrac: in flight (unacked x mss) at least this share of the
	// peer's window counts as the window being full; measured 0.9-1.0 on
	// window-limited flows under bbr and cubic.
	rwndFullFrac = 0.8
	// rwndCwndRoom: cwnd must exceed in flight by this factor for the
	// window, not cwnd, to be the limit.
	rwndCwndRoom = 1.5
	// rwndSmallWnd: a peer's window below this share of the path's BDP
	// (known path rate x RTT) is too small for the path.
	rwndSmallWnd = 0.5
	// rwndLargeWnd: a window at least this many times what is in flight
	// is not the limit.
	rwndLargeWnd = 2
	// rwndSteadyWnd: the peer's windows in the two samples within this
	// ratio (smaller over larger) are one fixed size. A receiver at its
	// buffer's limit (SO_RCVBUF, or tcp_rmem's maximum) advertises what
	// is free of that buffer, which wobbles with each read: 17-20K at a
	// 32K tcp_rmem maximum (Dubbo, grpc-java). A receiver pacing its
	// reads opens and shuts the window far wider, and autotuning grows it.
	rwndSteadyWnd = 0.8
)

// wndLook is one sample of a sender against its peer's window.
type wndLook struct {
	inflight, wnd, cwnd float64
}

// lookWnd reads in flight, the peer's window and cwnd, in bytes; ok is
// false without snd_wnd (Linux 5.5+) or an mss.
func lookWnd(sk *snapshot.Socket) (wndLook, bool) {
	var tb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	if ti == nil || !ti.Has(snapshot.EndSndWnd) || ti.SndMSS == 0 || ti.SndWnd == 0 {
		return wndLook{}, false
	}
	inflight, cwnd := tcpmodel.Flight(ti)
	return wndLook{inflight: inflight, wnd: float64(ti.SndWnd), cwnd: cwnd}, true
}

// full: in flight fills the peer's window while cwnd has room.
func (l wndLook) full() bool {
	return l.inflight > 0 && l.inflight >= rwndFullFrac*l.wnd && l.cwnd >= rwndCwndRoom*l.inflight
}

// large: the window is well above what is in flight.
func (l wndLook) large() bool { return l.wnd >= rwndLargeWnd*max(l.inflight, 1) }

// underCwnd reads sk's window and cwnd when the window is at most
// 1/rwndCwndRoom of cwnd, or shut (0) with data waiting to be sent.
func underCwnd(sk *snapshot.Socket) (wndLook, bool) {
	var tb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	if ti == nil || !ti.Has(snapshot.EndSndWnd) || ti.SndMSS == 0 {
		return wndLook{}, false
	}
	inflight, cwnd := tcpmodel.Flight(ti)
	l := wndLook{inflight: inflight, wnd: float64(ti.SndWnd), cwnd: cwnd}
	if l.wnd == 0 {
		return l, ti.NotsentBytes > 0
	}
	return l, l.cwnd >= rwndCwndRoom*l.wnd
}

// wndFullBoth says the peer's window was full in sk and, when given, in
// its previous sample p.
func wndFullBoth(sk, p *snapshot.Socket) (cur wndLook, ok bool) {
	cur, ok = lookWnd(sk)
	if !ok || !cur.full() {
		return cur, false
	}
	if p != nil {
		pl, ok := lookWnd(p)
		return cur, ok && pl.full()
	}
	return cur, true
}

func rwndLimited() diag.Rule {
	return diag.Rule{ID: "rwnd-limited", Title: "Sender limited by the peer's receive window", Traceable: true, Check: checkRwndLimited}
}

func checkRwndLimited(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagReady(cur); err != nil {
		return nil, err
	}
	window := in.Window()
	idx := in.CurTuples()
	rates := peerRates(in)
	// TcpExt counters of this host as a receiver advertising, or wanting
	// to advertise, a zero window.
	var zw []diag.Evidence
	for _, c := range []string{"TCPToZeroWindowAdv", "TCPWantZeroWindowAdv", "TCPZeroWindowDrop", "TCPFromZeroWindowAdv"} {
		if d, ok := in.CounterDelta("TcpExt." + c); ok && d > 0 {
			zw = append(zw, diag.Evidence{Name: c, Value: fmt.Sprintf("+%d in the window (this host as receiver)", d), Source: "/proc/net/netstat TcpExt." + c})
		}
	}
	var hits []scored
	var tb, pb snapshot.TCPInfo
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if sk.State != snapshot.Established {
			continue
		}
		ti := sk.TCP(&tb)
		if !ti.Has(snapshot.EndChrono) {
			continue
		}
		var sh snapshot.Shares
		lifetime := false
		if p := in.PrevOf(sk); p != nil && window > 0 {
			var ok bool
			if sh, ok = snapshot.ChronoShares(p.TCP(&pb), ti, window); !ok {
				continue
			}
			if snapshot.Frac(sh.Busy, window) < rwndMinBusy && sh.Busy < rwndMinBusyTime {
				continue
			}
		} else {
			// One sample, or a connection new in the window: lifetime totals.
			sh = snapshot.Shares{Busy: time.Duration(ti.BusyTime) * time.Microsecond, Rwnd: time.Duration(ti.RwndLimited) * time.Microsecond}
			if sh.Busy < rwndMinLifetime {
				continue
			}
			lifetime = true
		}
		share := snapshot.Frac(sh.Rwnd, sh.Busy)
		if share < rwndShareSupported {
			continue
		}
		var prev *snapshot.Socket
		if !lifetime {
			prev = prevAs(in, sk)
		}
		sup := rwndSupport(in, sk, prev, rates, idx, len(zw) > 0)
		switch {
		case share >= rwndShareAlone:
		case share >= rwndShareWarn && !sup.large:
		case len(sup.why) > 0:
		default:
			continue
		}
		if f, ok := rwndFinding(in, sk, sh, share, lifetime, idx, rates, zw, sup); ok {
			hits = append(hits, scored{f: f, score: share})
		}
	}
	return rankFindings(hits, rwndMaxFindings, func(n int) diag.Finding {
		return moreFinding(cur, n, "connections", "are limited by their peer's receive window", "sock_diag tcp_info.rwnd_limited")
	}), nil
}

// wndBound says the peer's window, the same in both samples with cwnd
// well above it, bounded the rate averaged over the window: the bytes
// acked came to at least rwndFullFrac of the window per RTT. Unlike
// in flight, which each sample reads at one instant, this holds for the
// whole window. frac is the rate over window/RTT.
func wndBound(sk, p *snapshot.Socket, window time.Duration) (l wndLook, frac float64, ok bool) {
	if p == nil || window <= 0 || !sameWindow(p, sk) {
		return l, 0, false
	}
	var tb, pb snapshot.TCPInfo
	ti, pi := sk.TCP(&tb), p.TCP(&pb)
	if ti.BytesAcked < pi.BytesAcked {
		return l, 0, false
	}
	l, ok = lookWnd(sk)
	pl, pok := lookWnd(p)
	rtt := tcpmodel.RTT(ti)
	if !ok || !pok || rtt <= 0 || l.cwnd < rwndCwndRoom*l.wnd || pl.cwnd < rwndCwndRoom*pl.wnd {
		return l, 0, false
	}
	rate := float64(ti.BytesAcked-pi.BytesAcked) / window.Seconds()
	frac = rate / (l.wnd / rtt.Seconds())
	return l, frac, frac >= rwndFullFrac
}

// rwndSupp is evidence about the peer's window that does not depend on
// congestion control.
type rwndSupp struct {
	why   []string // each says how the window is shown to be the limit
	full  bool     // in flight fills the window in every sample, or bound
	bound bool     // the unchanged window bounds the rate across the samples
	large bool     // the window is well above in flight in every sample
	under bool     // the window is well under cwnd in both samples
	look  wndLook
}

// rwndSupport gathers it: the window full in both samples, the window
// small against a known path's BDP, a local receiver's small buffer
// advertising zero windows.
func rwndSupport(in *diag.Input, sk, prev *snapshot.Socket, rates tcpmodel.PathRates,
	idx tcpmodel.Tuples, zeroWnd bool) rwndSupp {
	var s rwndSupp
	var under string // said when no stronger evidence (full, bound) is
	// A window that cwnd exceeds by rwndCwndRoom in both samples, about
	// the same in both (or shut, with data waiting, in one), bounds every
	// flight whatever the samples' instant (between a bursty sender's
	// bursts nothing is in flight): cwnd never binds such a sender, and
	// what the chronographs call busy rather than rwnd-limited is pacing
	// (bbr paces at the rate the window let it deliver) or the
	// application.
	if prev != nil {
		c, cok := underCwnd(sk)
		p, pok := underCwnd(prev)
		if cok && pok && (c.wnd == 0 || p.wnd == 0 || steadyWindow(prev, sk)) {
			s.under = true
			w := c
			if w.wnd == 0 {
				w = p
			}
			under = fmt.Sprintf("the peer's window %s is under cwnd's %s in both samples (at most %s of it, or shut with data waiting): cwnd never bound the flight",
				units.Bytes(w.wnd), units.Bytes(w.cwnd), units.Pct(1/rwndCwndRoom))
		}
	}
	look, ok := lookWnd(sk)
	if !ok {
		if s.under {
			s.why = append(s.why, under)
		}
		return s
	}
	s.look = look
	if _, full := wndFullBoth(sk, prev); full {
		s.full = true
		s.why = append(s.why, "in flight fills the peer's window in both samples, cwnd has room")
	} else if _, frac, ok := wndBound(sk, prev, in.Window()); ok {
		s.full, s.bound = true, true
		s.why = append(s.why, fmt.Sprintf("the peer's window was the same in both samples and the flow moved %s of that window per RTT, cwnd has room", units.Pct(frac)))
	} else if s.under {
		s.why = append(s.why, under)
	}
	s.large = look.large()
	if prev != nil {
		if pl, ok := lookWnd(prev); ok {
			s.large = s.large && pl.large()
		}
	}
	// Only a rate other than this connection's own says what the path
	// can carry: a window-limited flow's own rate is window / RTT.
	var tb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	if path := tcpmodel.PathOf(in.Options.Bandwidth, rates, nil, sk).Rate; path > 0 {
		if rtt := tcpmodel.RTT(ti); rtt > 0 {
			if b := path * rtt.Seconds(); look.wnd < rwndSmallWnd*b {
				s.why = append(s.why, fmt.Sprintf("the peer's window %s is under %s of the path's BDP %s", units.Bytes(look.wnd), units.Pct(rwndSmallWnd), units.Bytes(b)))
				s.large = false
			}
		}
	}
	if peer := idx.Peer(sk); peer != nil && zeroWnd && peer.Mem != nil {
		s.why = append(s.why, fmt.Sprintf("this host, where the receiver lives (rcvbuf %s), advertised zero windows", units.Bytes(float64(peer.Mem.Rcvbuf))))
	}
	return s
}

// rwndFinding builds the finding for a window-limited sender, or false
// when no performance that matters is lost: a host-local path, a flow
// near its path's rate, or a receiver reading slowly on purpose.
func rwndFinding(in *diag.Input, sk *snapshot.Socket, sh snapshot.Shares, share float64, lifetime bool,
	idx tcpmodel.Tuples, rates tcpmodel.PathRates, zw []diag.Evidence, sup rwndSupp) (diag.Finding, bool) {
	var tb, pb snapshot.TCPInfo
	cur, ti := in.Cur, sk.TCP(&tb)
	rtt := tcpmodel.RTT(ti)
	scope := "the " + units.Dur(sh.Window) + " window"
	src := "(delta)"
	if lifetime {
		scope = "the connection's life (one sample)"
		src = "(lifetime)"
	}
	thr := fmt.Sprintf(">= %s, or >= %s with the window shown to be the limit below", units.Pct(rwndShareWarn), units.Pct(rwndShareSupported))
	v := units.Share(sh.Rwnd, sh.Busy) + " of busy time"
	if sk.CC.String() == "bbr" {
		v += "; bbr paces, so this reads low on window-limited flows"
	}
	ev := []diag.Evidence{{Name: "rwnd_limited", Value: v, Source: "sock_diag tcp_info.rwnd_limited / busy_time " + src, Threshold: thr}}
	if sup.look.wnd > 0 {
		ev = append(ev, diag.Evidence{Name: "in flight against the window",
			Value:  fmt.Sprintf("%s in flight, %.2f x the peer's window; cwnd %s", units.Bytes(sup.look.inflight), sup.look.inflight/sup.look.wnd, units.Bytes(sup.look.cwnd)),
			Source: "sock_diag tcp_info.unacked x snd_mss, snd_wnd, snd_cwnd", Threshold: fmt.Sprintf("full: >= %.2f x the window with cwnd >= %.1f x in flight, in both samples", rwndFullFrac, rwndCwndRoom)})
	}
	if len(sup.why) > 0 {
		ev = append(ev, diag.Evidence{Name: "window is the limit", Value: strings.Join(sup.why, "; "),
			Source: "derived from tcp_info.unacked, snd_wnd, snd_cwnd, rtt; --bandwidth or the path's measured rate; TcpExt zero-window counters"})
	}
	var acked float64
	if !lifetime {
		if pi := prevTCP(in, sk, &pb); pi != nil && ti.BytesAcked >= pi.BytesAcked {
			acked = float64(ti.BytesAcked - pi.BytesAcked)
			ev = append(ev, diag.Evidence{Name: "this transfer", Value: fmt.Sprintf("%s acked in %s busy of the %s window, %s waiting for the peer's window",
				units.Bytes(acked), sh.Busy.Round(time.Millisecond), units.Dur(sh.Window), units.Share(sh.Rwnd, sh.Busy)), Source: "sock_diag tcp_info.bytes_acked, busy_time, rwnd_limited (delta)"})
		}
	}
	// The rate while it had data to send (busy time), not the window's
	// average: a bursty sender's sleeps are not the network's.
	own := tcpmodel.OwnRate(ti)
	if acked > 0 {
		own = acked / max(min(sh.Busy, sh.Window), time.Millisecond).Seconds()
	}
	wnd := -1.0
	if ti.Has(snapshot.EndSndWnd) {
		wnd = float64(ti.SndWnd)
		v := units.Bytes(wnd)
		if rtt > 0 {
			v += fmt.Sprintf(": at RTT %s at most %s", units.RTT(rtt), units.Rate(wnd/rtt.Seconds()))
		}
		ev = append(ev, diag.Evidence{Name: "peer's window", Value: v, Source: "sock_diag tcp_info.snd_wnd"})
	}
	pp := tcpmodel.PathOf(in.Options.Bandwidth, rates, idx, sk)
	verdict := pp.Judge(own)
	var plan bdp.Plan
	if pp.Rate > 0 && rtt > 0 {
		plan = bdp.For(rtt, pp.Rate*8, cur)
		ev = append(ev, pathEvidence(pp.Rate, rtt, plan.BDP, pp.Source))
	}
	ev = append(ev, zw...)

	// The receiver: in this namespace, else in another one of this
	// host collected with it (there: both ends on one node), whose
	// snapshot ps holds its buffers, sysctls and owner.
	peer, ps := idx.Peer(sk), cur
	var there *diag.Peer
	if peer == nil {
		if s, p := in.HostPeer(sk); p != nil {
			peer, ps, there = p, s, diag.PeerOf(s, p)
		}
	}
	receiver := "the remote receiver " + sk.Remote.String()
	var rcvPin tcpmodel.Pin
	// atMax: the local receiver's buffer is at net.ipv4.tcp_rmem's
	// maximum and not pinned: autotuning, not the application, stopped
	// there, so the sysctl is what to raise.
	var atMax int64
	if peer != nil {
		who := tcpmodel.Who(ps, peer.Pids.List())
		receiver = fmt.Sprintf("the local receiver %s (%s)", sk.Remote, who)
		src := "sock_diag SK_MEMINFO rcvbuf of the reverse tuple "
		if there != nil {
			who = there.String()
			receiver = fmt.Sprintf("the receiver %s on this host: %s", sk.Remote, who)
			src = "sock_diag SK_MEMINFO rcvbuf of the reverse tuple in netns " + there.Netns + " "
		}
		if peer.Mem != nil {
			var prevSize uint32
			if pp := in.PrevOf(peer); there == nil && pp != nil && pp.Mem != nil {
				prevSize = pp.Mem.Rcvbuf
			}
			rcvPin = tcpmodel.JudgeBufFrom(peer.Mem.Rcvbuf, prevSize, peer.BufLock, tcpmodel.LockRcv, tcpmodel.RcvLimits(ps), ps.BufLocks)
			v := fmt.Sprintf("rcvbuf %s, Recv-Q %s", units.Bytes(float64(peer.Mem.Rcvbuf)), units.Bytes(float64(peer.RecvQ)))
			switch {
			case rcvPin.Pinned && rcvPin.Proof:
				v += "; pinned: " + rcvPin.Why
			case rcvPin.Pinned:
				v += "; the size SO_RCVBUF gives, a hint: " + rcvPin.Why
			}
			ev = append(ev, diag.Evidence{Name: "receiver", Value: who + ": " + v, Source: src + bufLockSourceIf(rcvPin)})
			if lim := tcpmodel.RcvLimits(ps); !rcvPin.Pinned && lim.Auto > 0 && int64(peer.Mem.Rcvbuf) >= lim.Auto {
				atMax = lim.Auto
				v := fmt.Sprintf("rcvbuf at net.ipv4.tcp_rmem's maximum %s: autotuning can grow it no further", units.Bytes(float64(lim.Auto)))
				src := "sysctl net.ipv4.tcp_rmem"
				if there != nil {
					src += " in netns " + there.Netns
				}
				if rcvPin.Proof {
					v += "; not pinned (" + rcvPin.Why + ")"
					src += " and " + rcvPin.Source()
				}
				ev = append(ev, diag.Evidence{Name: "autotuning maximum", Value: v, Source: src})
			}
		}
	}
	// Severity is the consequence: a warning when the flow moves well
	// below what its path carries and a larger window would help.
	// A reader that keeps up drains its buffer at once, so the window
	// never closes: a zero window, or a local receiver's buffer holding
	// unread data, means the reader sets the pace, not the window's size.
	// Seen at both samples: one instant of a bursty flow into a small
	// buffer often shows a zero window or a segment unread (2K of a 4K
	// rcvbuf is half full), which made the same flow info in some
	// windows and a warning in others.
	zeroWnd := ti.Has(snapshot.EndSndWnd) && ti.SndWnd == 0
	pacing := zeroWnd || peer != nil && fill(peer) >= rwndPacingFill
	if !lifetime {
		var prevPeer *snapshot.Socket
		if peer != nil {
			prevPeer = prevAs(in, peer)
		}
		pi := prevTCP(in, sk, &pb)
		prevZero := zeroWnd && pi != nil && pi.Has(snapshot.EndSndWnd) && pi.SndWnd == 0
		prevFull := peer != nil && fill(peer) >= rwndPacingFill && prevPeer != nil && fill(prevPeer) >= rwndPacingFill
		pacing = prevZero || prevFull
	}
	if peer != nil && peer.Mem != nil && peer.Mem.Rcvbuf < rwndPacingMinBuf {
		// So small a buffer holds a segment or two: any reader shows
		// it half full, or the window shut, at some instants.
		pacing = false
	}
	sized := rcvPin.Pinned || atMax > 0 || sup.under || sup.full && !lifetime && steadyWindow(prevAs(in, sk), sk)
	ev = append(ev, diag.Evidence{Name: "performance", Value: verdict.Why, Source: "sock_diag tcp_info.bytes_acked or delivery_rate; --bandwidth or the path's measured rate",
		Threshold: fmt.Sprintf("warning below %s of the path's rate, with the window shown to be the limit", units.Pct(tcpmodel.LostShare))})
	var sev diag.Severity
	switch {
	case !verdict.Lost:
		return diag.Finding{}, false
	case pacing:
		sev = diag.Info
		v, src := "the peer advertises a zero window: its application is not reading", "sock_diag tcp_info.snd_wnd"
		if peer != nil && peer.Mem != nil {
			v = fmt.Sprintf("its buffer holds %s unread (%s of rcvbuf %s)", units.Bytes(float64(peer.RecvQ)), units.Pct(fill(peer)), units.Bytes(float64(peer.Mem.Rcvbuf)))
			src = "sock_diag Recv-Q and SK_MEMINFO rmem_alloc, rcvbuf of the reverse tuple"
		}
		ev = append(ev, diag.Evidence{Name: "receiver reads slowly", Value: v + ": the application paces reading (or is slow; see slow-reader); a larger window would not help",
			Source: src, Threshold: fmt.Sprintf("zero window, or a local receiver's buffer >= %s full", units.Pct(rwndPacingFill))})
	case pp.Rate > 0 || sized:
		sev = diag.Warning
	default:
		// Judged against the reference rate only: without a pinned or
		// fixed window, the receiver may be pacing on purpose.
		sev = diag.Info
	}
	sum := fmt.Sprintf("waiting for the peer's receive window %s of busy time over %s", units.Pct(share), scope)
	switch {
	case sup.bound:
		sum = fmt.Sprintf("the peer's unchanged receive window bounds the rate across both samples; waiting for it %s of busy time over %s", units.Pct(share), scope)
	case sup.full:
		sum = fmt.Sprintf("in flight fills the peer's receive window in both samples; waiting for it %s of busy time over %s", units.Pct(share), scope)
	}
	if wnd >= 0 {
		sum += fmt.Sprintf("; the peer advertises %s", units.Bytes(wnd))
	}
	if plan.BDP > 0 {
		sum += fmt.Sprintf(" against a BDP of %s", units.Bytes(plan.BDP))
	}
	sum += "; the receiver to change is " + receiver
	switch {
	case rcvPin.Pinned && rcvPin.Proof && peer != nil && peer.Mem != nil:
		sum += fmt.Sprintf(", its receive buffer pinned at %s (SO_RCVBUF %s)", units.Bytes(float64(peer.Mem.Rcvbuf)), units.Bytes(float64(peer.Mem.Rcvbuf/2)))
	case rcvPin.Pinned && peer != nil && peer.Mem != nil:
		sum += fmt.Sprintf(", its receive buffer %s, the size SO_RCVBUF %s gives (a hint: the lock bits were not read)", units.Bytes(float64(peer.Mem.Rcvbuf)), units.Bytes(float64(peer.Mem.Rcvbuf/2)))
	case atMax > 0:
		sum += fmt.Sprintf(", its receive buffer at net.ipv4.tcp_rmem's maximum %s (autotuned, not set by the application)", units.Bytes(float64(atMax)))
	}
	sub := subject(cur, tcpmodel.ListenersOf(cur), sk)
	sub.Peer = there
	if there != nil && plan.BDP > 0 {
		// The receiver's own sysctls are the ones its fixes set.
		plan = bdp.For(plan.RTT, plan.Rate, ps)
	}
	return diag.Finding{Severity: sev, Subject: sub, Summary: sum, Evidence: ev, Fixes: rwndFixes(ps, peer, there, rcvPin, atMax > 0, plan, rtt)}, true
}

// sameWindow: the peer advertised the same window in both samples, as a
// fixed receive buffer does (an autotuned or paced one moves).
func sameWindow(p, sk *snapshot.Socket) bool {
	if p == nil {
		return false
	}
	var tb, pb snapshot.TCPInfo
	ti, pi := sk.TCP(&tb), p.TCP(&pb)
	return pi.Has(snapshot.EndSndWnd) && ti.Has(snapshot.EndSndWnd) && pi.SndWnd == ti.SndWnd
}

// steadyWindow: the peer advertised about the same window in both
// samples (within rwndSteadyWnd), as a receive buffer held at its limit
// does.
func steadyWindow(p, sk *snapshot.Socket) bool {
	if p == nil {
		return false
	}
	var tb, pb snapshot.TCPInfo
	ti, pi := sk.TCP(&tb), p.TCP(&pb)
	if !pi.Has(snapshot.EndSndWnd) || !ti.Has(snapshot.EndSndWnd) || pi.SndWnd == 0 || ti.SndWnd == 0 {
		return false
	}
	lo, hi := float64(min(pi.SndWnd, ti.SndWnd)), float64(max(pi.SndWnd, ti.SndWnd))
	return lo >= rwndSteadyWnd*hi
}

// pathEvidence is the path's rate, RTT and the BDP they make.
func pathEvidence(rate float64, rtt time.Duration, bdp float64, source string) diag.Evidence {
	return diag.Evidence{Name: "path", Value: fmt.Sprintf("%s x %s = BDP %s", units.Rate(rate), units.RTT(rtt), units.Bytes(bdp)), Source: source + ", tcp_info.rtt"}
}

func bufLockSourceIf(p tcpmodel.Pin) string {
	if p.Pinned || p.Proof {
		return "and " + p.Source()
	}
	return ""
}

// rwndFixes are the receiver's: peer (nil: not on this host) lives in s,
// another namespace of this host when there is set.
//
// "Stop pinning" is said outright only when the receiver's lock bit
// shows SO_RCVBUF set (pin), as a condition when the bit is unknown (a
// receiver elsewhere, or bits not read), not at all when the bit shows
// the buffer autotuned or it sits at tcp_rmem's maximum (atMax): then
// the fix is that maximum, raised to what the path needs when its rate
// is known, else doubled.
func rwndFixes(s *snapshot.Snapshot, peer *snapshot.Socket, there *diag.Peer, pin tcpmodel.Pin, atMax bool, plan bdp.Plan, rtt time.Duration) []diag.Fix {
	who := "on the receiving host"
	if peer != nil {
		who = "in " + tcpmodel.Who(s, peer.Pids.List())
		if there != nil {
			who = "in " + there.String()
		}
		if peer.RecvQ > 0 && peer.Mem != nil && float64(peer.RecvQ) >= 0.25*float64(peer.Mem.Rcvbuf) {
			who += " (its Recv-Q is full: it also reads too slowly; see slow-reader)"
		}
	}
	// The receiver, not the subject (the sender), makes these.
	var fs []diag.Fix
	switch {
	case pin.Proof && pin.Pinned:
		fs = append(fs, remedy.UnpinRcvBuf(who))
	case !pin.Proof && !atMax:
		fs = append(fs, remedy.IfSet(remedy.UnpinRcvBuf(who), "the receiver", "SO_RCVBUF"))
	}
	if !atMax {
		fs = append(fs, remedy.SizeRcvBuf(plan, rtt))
	}
	for i := range fs {
		fs[i].Peer = true
	}
	if peer == nil {
		// The receiver's sysctls are not in this snapshot: give the values.
		// Its values are unknown here: the command raises each only where
		// that host's is lower.
		if plan.BDP > 0 {
			rmax, rmem := remedy.Sysctl(nil, "net.core.rmem_max", int64(plan.AskRcvBuf)), remedy.Sysctl(nil, "net.ipv4.tcp_rmem", 4096, 131072, int64(max(plan.RcvBuf, 6<<20)))
			fs = append(fs, remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl",
				Text: fmt.Sprintf("on the receiving host: let SO_RCVBUF requests and autotuning reach the BDP, raising (never lowering) %s and %s; the command compares each with that host's own value",
					remedy.AtLeast(rmax), remedy.AtLeast(rmem)),
				Risk: "host-wide on the receiver", Peer: true}, "", rmax, rmem))
		}
		return fs
	}
	// Set where the receiver lives, not in the sender's namespace.
	addressed := func(f diag.Fix) diag.Fix {
		if there != nil {
			f.Text = "receiver side, " + who + ": " + f.Text
			f.Peer = true
		}
		return f
	}
	rmem := false
	for _, c := range plan.Checks {
		if !c.OK && c.Command != "" && (c.Setting == "net.core.rmem_max" || c.Setting == "net.ipv4.tcp_rmem[2]" || c.Setting == "net.ipv4.tcp_moderate_rcvbuf") {
			if set, ok := remedy.FromCheck(s, c); ok {
				f := addressed(diag.Fix{Scope: "kernel", Target: "sysctl", Text: fmt.Sprintf("raise %s from %s to %d (%s)", c.Setting, c.Current, c.Needed, c.Note),
					Risk: "host-wide; persist in /etc/sysctl.d/ once verified"})
				fs = append(fs, remedy.SetSysctls(f, "", set))
				rmem = rmem || c.Setting == "net.ipv4.tcp_rmem[2]"
			}
		}
	}
	if r, _ := s.SysctlInts("net.ipv4.tcp_rmem"); atMax && !rmem && len(r) == 3 {
		why := "doubling shown, give --bandwidth to compute it"
		if plan.BDP > 0 {
			why = fmt.Sprintf("it holds the %s twice the BDP asks, yet the window binds: doubling shown", units.Bytes(plan.RcvBuf))
		}
		f := addressed(diag.Fix{Scope: "kernel", Target: "sysctl", Text: "receive autotuning is at its maximum: raise net.ipv4.tcp_rmem's maximum to at least twice the path's BDP (about half of rcvbuf becomes window): " + why,
			Risk: "host-wide memory per busy connection"})
		fs = append(fs, remedy.SetSysctls(f, "", remedy.Sysctl(s, "net.ipv4.tcp_rmem", r[0], r[1], 2*r[2])))
	}
	return fs
}
