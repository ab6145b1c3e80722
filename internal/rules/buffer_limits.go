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
	// bufBusyMinRate: a connection counts as busy for the BDP check when
	// its delivery rate (not app-limited) is at least this, bytes/s
	// (10 Mbit/s): slow links need no tuning.
	bufBusyMinRate = 1_250_000
	// bufIdleBurst: a long-lived connection idle this long (and longer
	// than its RTO) restarts from the initial window under
	// tcp_slow_start_after_idle=1.
	bufIdleBurst = time.Second
	// bufBurstMinBytes: "long-lived bulk" means it has sent this much.
	bufBurstMinBytes = 10 << 20
)

func bufferLimits() diag.Rule {
	return diag.Rule{ID: "buffer-limits", Title: "Host buffer limits and harmful TCP settings", Check: checkBufferLimits}
}

func checkBufferLimits(in *diag.Input) ([]diag.Finding, error) {
	s := in.Cur
	if e, bad := s.Failed(snapshot.SourceSysctl); bad && len(s.Sysctls) == 0 {
		return nil, diag.Unknownf("sysctls not collected: %s", e)
	}
	if len(s.Sysctls) == 0 {
		return nil, diag.Unknownf("no sysctls in the snapshot")
	}
	host := diag.Subject{Netns: s.Netns.Name}
	var fs []diag.Finding
	add := func(sev diag.Severity, sum string, ev []diag.Evidence, fix diag.Fix) {
		fs = append(fs, diag.Finding{Severity: sev, Subject: host, Summary: sum, Evidence: ev, Fixes: []diag.Fix{fix}})
	}
	sysEv := func(name, val, thr string) diag.Evidence {
		return diag.Evidence{Name: name, Value: val, Source: "sysctl " + name, Threshold: thr}
	}

	// Capped SO_SNDBUF/SO_RCVBUF requests: only worth saying when a socket
	// shows the cap (its buffer is exactly 2 x the max).
	snd, rcv := tcpmodel.SndLimits(s), tcpmodel.RcvLimits(s)
	// A capped buffer matters when its own path fills it (tight): the
	// data in flight (rate x RTT) reaches half the buffer, which is about
	// the whole window for a receive buffer, and where a capped send
	// buffer's rate itself stops growing (so the BDP read from it is a
	// lower bound). One far above its path's BDP is only worth an info.
	cappedSnd, cappedRcv, tightSnd, tightRcv := 0, 0, 0, 0
	// Largest BDP among busy connections, and bursty long-lived ones.
	var worst struct {
		bdp  float64
		rtt  time.Duration
		rate float64
	}
	bursty := 0
	// Connections whose send buffer is full at tcp_wmem[2], cwnd and the
	// peer's window to spare: their rate is the buffer's (about tcp_wmem[2]
	// per RTT), and a BDP read from it can never exceed the cap.
	var atMax struct {
		n   int
		rtt time.Duration
	}
	idx := in.CurTuples()
	rates := peerRates(in)
	var tb snapshot.TCPInfo
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State != snapshot.Established {
			continue
		}
		ti := sk.TCP(&tb)
		// A connection to this host has no network path: its RTT is
		// scheduling and its peer's reading (5 ms on loopback behind a
		// reader that pauses), so its rate x RTT sizes no buffer.
		local := tcpmodel.IsLoopback(sk.Remote.Addr()) || idx.Peer(sk) != nil
		if m := sk.Mem; m != nil {
			var need float64
			if !local {
				need = pathBDP(ti, in.Options.Bandwidth)
			}
			if snd.Core > 0 && int64(m.Sndbuf) == 2*snd.Core {
				cappedSnd++
				if need >= float64(m.Sndbuf)/2 {
					tightSnd++
				}
			}
			if rcv.Core > 0 && int64(m.Rcvbuf) == 2*rcv.Core {
				cappedRcv++
				if need >= float64(m.Rcvbuf)/2 {
					tightRcv++
				}
			}
		}
		if ti == nil {
			continue
		}
		rtt := tcpmodel.RTT(ti)
		rate := in.Options.Bandwidth / 8
		switch {
		case !local && sndFullAtMax(sk, snd):
			// Only a rate the buffer does not cap sizes the path: another
			// connection's to the same peer (or --bandwidth). One moving
			// at least half its path (or of 1 Gbit/s, unknown) is not
			// held back: a saturated gigabit path fills 4M buffers too.
			own := max(tcpmodel.OwnRate(ti), float64(ti.DeliveryRate))
			pp := tcpmodel.PathOf(in.Options.Bandwidth, rates, idx, sk)
			if pp.Judge(own).Lost {
				atMax.n++
				atMax.rtt = max(atMax.rtt, rtt)
			}
			rate = pp.Rate
		case rate == 0 && ti.Has(snapshot.EndDeliveryRate) && !ti.DeliveryRateAppLimited && ti.DeliveryRate >= bufBusyMinRate:
			rate = float64(ti.DeliveryRate)
		}
		if rate > 0 && rtt > 0 && !local {
			if b := bdp.Bytes(rate*8, rtt); b > worst.bdp {
				worst.bdp, worst.rtt, worst.rate = b, rtt, rate
			}
		}
		if ti.BytesAcked >= bufBurstMinBytes {
			if idle := sinceSent(in, sk, ti); idle >= bufIdleBurst && idle > time.Duration(ti.RTO)*time.Microsecond {
				bursty++
			}
		}
	}
	if cappedSnd > 0 && snd.Auto > snd.Core {
		add(capSeverity(tightSnd), fmt.Sprintf("%d connections have SO_SNDBUF capped at 2 x net.core.wmem_max (%s) while autotuning could reach %s; %d of them need more for their path", cappedSnd, units.Bytes(float64(snd.Core)), units.Bytes(float64(snd.Auto)), tightSnd),
			[]diag.Evidence{sysEv("net.core.wmem_max", fmt.Sprint(snd.Core), "< tcp_wmem[2] "+fmt.Sprint(snd.Auto)),
				{Name: "capped sockets", Value: fmt.Sprintf("%d with sndbuf %s", cappedSnd, units.Bytes(float64(2*snd.Core))), Source: "sock_diag SK_MEMINFO sndbuf"}},
			remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: "raise wmem_max to the autotuning maximum, or stop setting SO_SNDBUF (see sndbuf-limited)", Risk: "lets applications pin larger buffers; host memory"},
				"", remedy.Sysctl(s, "net.core.wmem_max", snd.Auto)))
	}
	if cappedRcv > 0 && rcv.Auto > rcv.Core {
		add(capSeverity(tightRcv), fmt.Sprintf("%d connections have SO_RCVBUF capped at 2 x net.core.rmem_max (%s) while autotuning could reach %s; %d of them need more for their path", cappedRcv, units.Bytes(float64(rcv.Core)), units.Bytes(float64(rcv.Auto)), tightRcv),
			[]diag.Evidence{sysEv("net.core.rmem_max", fmt.Sprint(rcv.Core), "< tcp_rmem[2] "+fmt.Sprint(rcv.Auto)),
				{Name: "capped sockets", Value: fmt.Sprintf("%d with rcvbuf %s", cappedRcv, units.Bytes(float64(2*rcv.Core))), Source: "sock_diag SK_MEMINFO rcvbuf"}},
			remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: "raise rmem_max to the autotuning maximum, or stop setting SO_RCVBUF (see rwnd-limited)", Risk: "lets applications pin larger buffers; host memory"},
				"", remedy.Sysctl(s, "net.core.rmem_max", rcv.Auto)))
	}
	wmemSaid := false
	if worst.bdp > 0 {
		plan := bdp.For(worst.rtt, worst.rate*8, s)
		src := "busiest connection: tcp_info.delivery_rate x rtt"
		if in.Options.Bandwidth > 0 {
			src = "--bandwidth x largest tcp_info.rtt"
		}
		for _, c := range plan.Checks {
			if c.OK || c.Command == "" || (c.Setting != "net.ipv4.tcp_wmem[2]" && c.Setting != "net.ipv4.tcp_rmem[2]") {
				continue
			}
			set, ok := remedy.FromCheck(s, c)
			if !ok {
				continue
			}
			wmemSaid = wmemSaid || c.Setting == "net.ipv4.tcp_wmem[2]"
			add(diag.Warning, fmt.Sprintf("%s %s is below what an observed path needs (%d for BDP %s = %s x %s)", c.Setting, c.Current, c.Needed, units.Bytes(plan.BDP), units.Rate(worst.rate), units.RTT(worst.rtt)),
				[]diag.Evidence{sysEv(c.Setting, c.Current, fmt.Sprintf(">= %d", c.Needed)), {Name: "path BDP", Value: units.Bytes(plan.BDP), Source: src}},
				remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: c.Note, Risk: "more memory per busy connection; bounded by tcp_mem"}, "", set))
		}
	}
	if w, ok := s.SysctlInts("net.ipv4.tcp_wmem"); ok && len(w) == 3 && atMax.n > 0 && !wmemSaid {
		add(diag.Info, fmt.Sprintf("%d busy connections have their send buffers full at net.ipv4.tcp_wmem's maximum %s, with cwnd and the peer's window to spare: their rate is the buffer's, so it cannot show what the path needs (no other rate to their peers is known)",
			atMax.n, units.Bytes(float64(w[2]))),
			[]diag.Evidence{sysEv("net.ipv4.tcp_wmem", s.Sysctls["net.ipv4.tcp_wmem"], "the path's BDP"),
				{Name: "send buffers at the maximum", Value: fmt.Sprintf("%d connections (largest RTT %s): sndbuf = tcp_wmem[2], queued >= %s and in flight >= %s of it, cwnd and the peer's window >= %.1f x in flight", atMax.n, units.RTT(atMax.rtt), units.Pct(sndbufQueuedFrac), units.Pct(sndbufInflightFrac), sndbufHeadroom),
					Source: "sock_diag SK_MEMINFO sndbuf, wmem_queued; tcp_info.unacked, snd_cwnd, snd_wnd"}},
			remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl",
				Text: fmt.Sprintf("raise net.ipv4.tcp_wmem's maximum to the path's BDP (tcpdoctor bdp --rtt %s --bandwidth <link rate>, or check --bandwidth); doubling shown", units.RTT(atMax.rtt)),
				Risk: "more memory per busy connection; bounded by tcp_mem"}, "", remedy.Sysctl(s, "net.ipv4.tcp_wmem", w[0], w[1], 2*w[2])))
	}
	if v, ok := s.SysctlInt("net.ipv4.tcp_moderate_rcvbuf"); ok && v == 0 {
		add(diag.Warning, "receive buffer autotuning is off (tcp_moderate_rcvbuf=0): every connection keeps tcp_rmem[1] as its receive buffer",
			[]diag.Evidence{sysEv("net.ipv4.tcp_moderate_rcvbuf", "0", "1")},
			remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: "turn receive autotuning back on", Risk: "none known; it is the default"}, "", remedy.Setting("net.ipv4.tcp_moderate_rcvbuf", "1")))
	}
	if v, ok := s.SysctlInt("net.ipv4.tcp_window_scaling"); ok && v == 0 {
		add(diag.Warning, "TCP window scaling is off: no connection can have more than 64K in flight",
			[]diag.Evidence{sysEv("net.ipv4.tcp_window_scaling", "0", "1")},
			remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: "turn window scaling back on (affects new connections)", Risk: "none known; it is the default"}, "", remedy.Setting("net.ipv4.tcp_window_scaling", "1")))
	}
	if v, ok := s.SysctlInt("net.ipv4.tcp_sack"); ok && v == 0 {
		add(diag.Warning, "selective acknowledgements are off (tcp_sack=0): each loss costs more round trips to repair",
			[]diag.Evidence{sysEv("net.ipv4.tcp_sack", "0", "1")},
			remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: "turn SACK back on", Risk: "none known; it is the default"}, "", remedy.Setting("net.ipv4.tcp_sack", "1")))
	}
	// tcp_tw_recycle, when on, is time-wait-churn's: its mere presence
	// (at 0 on every kernel before 4.12) is no problem.
	if v, ok := s.SysctlInt("net.ipv4.tcp_slow_start_after_idle"); ok && v == 1 && bursty > 0 {
		add(diag.Info, fmt.Sprintf("%d long-lived connections go idle between bursts; with tcp_slow_start_after_idle=1 each burst restarts from the initial window", bursty),
			[]diag.Evidence{sysEv("net.ipv4.tcp_slow_start_after_idle", "1", "0 for bursty long-lived connections"),
				{Name: "bursty connections", Value: fmt.Sprintf("%d (sent >= %s, idle >= %s and > RTO)", bursty, units.Bytes(bufBurstMinBytes), units.Dur(bufIdleBurst)), Source: "sock_diag tcp_info.bytes_acked, last_data_sent, rto"}},
			remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: "keep the congestion window across idle periods", Risk: "a burst after idle may hit a path whose capacity changed; host-wide"}, "", remedy.Setting("net.ipv4.tcp_slow_start_after_idle", "0")))
	}
	return fs, nil
}

// capSeverity: a cap is a warning only when some capped connection needs
// more than the cap for its own path (BDP from RTT x rate).
func capSeverity(tight int) diag.Severity {
	if tight > 0 {
		return diag.Warning
	}
	return diag.Info
}

// pathBDP is a connection's bandwidth-delay product in bytes from its RTT
// and --bandwidth or its delivery rate (a lower bound when app-limited);
// 0 when unknown.
func pathBDP(ti *snapshot.TCPInfo, bandwidth float64) float64 {
	if ti == nil {
		return 0
	}
	rtt := tcpmodel.RTT(ti)
	rate := bandwidth
	if rate == 0 && ti.Has(snapshot.EndDeliveryRate) {
		rate = float64(ti.DeliveryRate) * 8
	}
	if rtt <= 0 || rate <= 0 {
		return 0
	}
	return bdp.Bytes(rate, rtt)
}

// sinceSent is how long ago sk (whose tcp_info is ti) last sent data. A
// connection that moved nothing in the window shares the first sample's
// tcp_info (snapshot.Socket.SharesTCP), whose last_data_sent is as old
// as the window less.
func sinceSent(in *diag.Input, sk *snapshot.Socket, ti *snapshot.TCPInfo) time.Duration {
	idle := time.Duration(ti.LastDataSent) * time.Millisecond
	if p := in.PrevOf(sk); p != nil && sk.SharesTCP(p) {
		idle += in.Window()
	}
	return idle
}

// sndFullAtMax: sk's send buffer is autotuned to tcp_wmem[2] and full,
// with cwnd and the peer's window to spare (sndbuf-limited's test).
func sndFullAtMax(sk *snapshot.Socket, snd tcpmodel.Limits) bool {
	if snd.Auto <= 0 || sk.Mem == nil || int64(sk.Mem.Sndbuf) < snd.Auto || !queuedNearBuf(sk.Mem, sndbufQueuedFrac) {
		return false
	}
	l, ok := lookSndbuf(sk)
	return ok && l.limited()
}
