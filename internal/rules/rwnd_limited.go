package rules

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

const (
	// rwndShareWarn: share of busy time spent waiting for the peer's
	// window (tcp_info.rwnd_limited). Reliable on current kernels: a pinned
	// 32K SO_RCVBUF at the receiver measured 98 %.
	rwndShareWarn = 0.3
	// rwndShareCrit with rwndBusyCrit: almost all of a mostly busy window.
	rwndShareCrit = 0.8
	rwndBusyCrit  = 0.5
	// rwndMinBusy: the connection must be busy this share of the window;
	// a connection that sent one small burst says little.
	rwndMinBusy = 0.1
	// rwndMinLifetime: with one sample, the lifetime chronographs are used
	// only when the connection has been busy this long.
	rwndMinLifetime = time.Second
	rwndMaxFindings = 10
)

func rwndLimited() diag.Rule {
	return diag.Rule{ID: "rwnd-limited", Title: "Sender limited by the peer's receive window", Check: checkRwndLimited}
}

type rwndHit struct {
	f     diag.Finding
	share float64
}

func checkRwndLimited(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagReady(cur); err != nil {
		return nil, err
	}
	window := in.Window()
	idx := byTuple(cur)
	rates := peerRates(cur)
	// TcpExt counters of this host as a receiver advertising, or wanting
	// to advertise, a zero window.
	var zw []diag.Evidence
	for _, c := range []string{"TCPToZeroWindowAdv", "TCPWantZeroWindowAdv", "TCPZeroWindowDrop", "TCPFromZeroWindowAdv"} {
		if d, ok := in.CounterDelta("TcpExt." + c); ok && d > 0 {
			zw = append(zw, diag.Evidence{Name: c, Value: fmt.Sprintf("+%d in the window (this host as receiver)", d), Source: "/proc/net/netstat TcpExt." + c})
		}
	}
	var hits []rwndHit
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		ti := sk.Info
		if sk.State != snapshot.Established || !ti.Has(snapshot.EndChrono) {
			continue
		}
		var sh snapshot.Shares
		lifetime := false
		if p := in.PrevSocket(sk.Cookie); p != nil && window > 0 {
			var ok bool
			if sh, ok = snapshot.ChronoShares(p.Info, ti, window); !ok {
				continue
			}
			if snapshot.Frac(sh.Busy, window) < rwndMinBusy {
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
		if share < rwndShareWarn {
			continue
		}
		hits = append(hits, rwndHit{f: rwndFinding(in, sk, sh, share, lifetime, idx, rates, zw), share: share})
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].f.Severity != hits[j].f.Severity {
			return hits[i].f.Severity > hits[j].f.Severity
		}
		return hits[i].share > hits[j].share
	})
	fs := make([]diag.Finding, len(hits))
	for i := range hits {
		fs[i] = hits[i].f
	}
	return capFindings(fs, rwndMaxFindings, func(n int) diag.Finding {
		return diag.Finding{Severity: diag.Info, Subject: diag.Subject{Netns: cur.Netns.Name},
			Summary:  fmt.Sprintf("%d more connections are limited by their peer's receive window", n),
			Evidence: []diag.Evidence{{Name: "connections not shown", Value: fmt.Sprint(n), Source: "sock_diag tcp_info.rwnd_limited"}},
			Fixes:    []diag.Fix{{Scope: "application", Text: "see the findings above; the same fix applies"}}}
	}), nil
}

func rwndFinding(in *diag.Input, sk *snapshot.Socket, sh snapshot.Shares, share float64, lifetime bool,
	idx map[tuple]*snapshot.Socket, rates map[netip.Addr]float64, zw []diag.Evidence) diag.Finding {
	cur, ti := in.Cur, sk.Info
	rtt := rttOf(ti)
	scope := "the " + fmtDur(sh.Window) + " window"
	src := "(delta)"
	if lifetime {
		scope = "the connection's life (one sample)"
		src = "(lifetime)"
	}
	ev := []diag.Evidence{
		{Name: "rwnd_limited", Value: fmt.Sprintf("%s of busy time (%s of %s busy)", pct(share), fmtDur(sh.Rwnd), fmtDur(sh.Busy)),
			Source: "sock_diag tcp_info.rwnd_limited / busy_time " + src, Threshold: ">= " + pct(rwndShareWarn)},
	}
	var acked float64
	if !lifetime {
		if p := in.PrevSocket(sk.Cookie); p != nil && p.Info != nil && ti.BytesAcked >= p.Info.BytesAcked {
			acked = float64(ti.BytesAcked - p.Info.BytesAcked)
			ev = append(ev, diag.Evidence{Name: "this transfer", Value: fmt.Sprintf("%s acked in %s, %s of it waiting for the peer's window",
				fmtBytes(acked), fmtDur(sh.Window), fmtDur(sh.Rwnd)), Source: "sock_diag tcp_info.bytes_acked, rwnd_limited (delta)"})
		}
	}
	own := 0.0
	if acked > 0 {
		own = acked / sh.Window.Seconds()
	} else if ti.Has(snapshot.EndDeliveryRate) {
		own = float64(ti.DeliveryRate)
	}
	wnd := -1.0
	if ti.Has(snapshot.EndSndWnd) {
		wnd = float64(ti.SndWnd)
		v := fmtBytes(wnd)
		if rtt > 0 {
			v += fmt.Sprintf(": at RTT %s at most %s", fmtRTT(rtt), fmtRate(wnd/rtt.Seconds()))
		}
		ev = append(ev, diag.Evidence{Name: "peer's window", Value: v, Source: "sock_diag tcp_info.snd_wnd"})
	}
	path, pathSrc := pathRate(in, rates, sk, own)
	var plan bdp.Plan
	if path > 0 && rtt > 0 {
		plan = bdp.For(rtt, path*8, cur)
		ev = append(ev, diag.Evidence{Name: "path", Value: fmt.Sprintf("%s x %s = BDP %s", fmtRate(path), fmtRTT(rtt), fmtBytes(plan.BDP)), Source: pathSrc + ", tcp_info.rtt"})
	}
	ev = append(ev, zw...)

	peer := localPeer(idx, sk)
	receiver := "the remote receiver " + sk.Remote.String()
	var rcvPin bufPin
	if peer != nil {
		receiver = fmt.Sprintf("the local receiver %s (%s)", sk.Remote, owners(cur, peer.Pids))
		if peer.Mem != nil {
			var prevSize uint32
			if pp := in.PrevSocket(peer.Cookie); pp != nil && pp.Mem != nil {
				prevSize = pp.Mem.Rcvbuf
			}
			rcvPin = judgeBuf(peer.Mem.Rcvbuf, prevSize, peer.BufLock, 2, rcvLimits(cur))
			v := fmt.Sprintf("rcvbuf %s, Recv-Q %s", fmtBytes(float64(peer.Mem.Rcvbuf)), fmtBytes(float64(peer.RecvQ)))
			if rcvPin.Pinned {
				v += "; pinned: " + rcvPin.Why
			}
			ev = append(ev, diag.Evidence{Name: "receiver", Value: owners(cur, peer.Pids) + ": " + v, Source: "sock_diag SK_MEMINFO rcvbuf of the reverse tuple " + bufLockSourceIf(rcvPin)})
		}
	}
	sev := diag.Warning
	if !lifetime && share >= rwndShareCrit && snapshot.Frac(sh.Busy, sh.Window) >= rwndBusyCrit {
		sev = diag.Critical
	}
	sum := fmt.Sprintf("waiting for the peer's receive window %s of busy time over %s", pct(share), scope)
	if wnd >= 0 {
		sum += fmt.Sprintf("; the peer advertises %s", fmtBytes(wnd))
	}
	if plan.BDP > 0 {
		sum += fmt.Sprintf(" against a BDP of %s", fmtBytes(plan.BDP))
	}
	sum += "; the receiver to change is " + receiver
	return diag.Finding{Severity: sev, Subject: subject(cur, sk), Summary: sum, Evidence: ev, Fixes: rwndFixes(cur, peer, plan, rtt)}
}

func bufLockSourceIf(p bufPin) string {
	if p.Pinned || p.Proof {
		return "and " + bufLockSource(p)
	}
	return ""
}

func rwndFixes(s *snapshot.Snapshot, peer *snapshot.Socket, plan bdp.Plan, rtt time.Duration) []diag.Fix {
	who := "on the receiving host"
	if peer != nil {
		who = "in " + owners(s, peer.Pids)
		if peer.RecvQ > 0 && peer.Mem != nil && float64(peer.RecvQ) >= 0.25*float64(peer.Mem.Rcvbuf) {
			who += " (its Recv-Q is full: it also reads too slowly; see slow-reader)"
		}
	}
	fs := []diag.Fix{{Scope: "application", Text: "receiver side, " + who + ": stop pinning the receive buffer (remove Java setReceiveBufferSize, Netty ChannelOption.SO_RCVBUF, Go (*net.TCPConn).SetReadBuffer, setsockopt(SO_RCVBUF)) so receive autotuning grows it up to tcp_rmem[2]",
		Risk: "more memory per busy connection on the receiver"}}
	if plan.BDP > 0 {
		ask := fmt.Sprint(int64(plan.AskRcvBuf))
		fs = append(fs, diag.Fix{Scope: "application", Text: "or set the receiver's buffer to " + ask + " bytes (the kernel doubles it and advertises about half of the result), e.g. Java socket.setReceiveBufferSize(" + ask + ")",
			Command: "SO_RCVBUF=" + ask, Risk: "requests above net.core.rmem_max are silently capped; a fixed size is wrong again when the path changes"})
	} else {
		fs = append(fs, diag.Fix{Scope: "application", Text: "or set the receiver's buffer to at least the path's BDP (the kernel doubles it and advertises about half of the result)",
			Command: "tcpdoctor bdp --rtt " + fmtRTT(rtt) + " --bandwidth <link rate>", Risk: "requests above net.core.rmem_max are silently capped"})
	}
	if peer == nil {
		// The receiver's sysctls are not in this snapshot: give the values.
		if plan.BDP > 0 {
			fs = append(fs, diag.Fix{Scope: "kernel", Target: "sysctl", Text: "on the receiving host, if its limits are lower: let SO_RCVBUF requests and autotuning reach the BDP",
				Command: fmt.Sprintf("sysctl -w net.core.rmem_max=%d; sysctl -w net.ipv4.tcp_rmem='4096 131072 %d'", int64(plan.AskRcvBuf), int64(max(plan.RcvBuf, 6<<20))),
				Risk:    "host-wide on the receiver"})
		}
		return fs
	}
	for _, c := range plan.Checks {
		if !c.OK && c.Command != "" && (c.Setting == "net.core.rmem_max" || c.Setting == "net.ipv4.tcp_rmem[2]" || c.Setting == "net.ipv4.tcp_moderate_rcvbuf") {
			fs = append(fs, diag.Fix{Scope: "kernel", Target: "sysctl", Text: fmt.Sprintf("raise %s from %s to %d (%s)", c.Setting, c.Current, c.Needed, c.Note),
				Command: c.Command, Risk: "host-wide; persist in /etc/sysctl.d/ once verified"})
		}
	}
	return fs
}
