// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

const (
	// retransHostWarn/Crit: Tcp.RetransSegs / Tcp.OutSegs over the window.
	// A healthy LAN or data-centre host retransmits well under 0.1 %; 1 %
	// already costs loss-based congestion control much of its rate.
	retransHostWarn = 0.01
	retransHostCrit = 0.05
	// retransHostMinSegs: below this many segments sent the ratio is noise.
	retransHostMinSegs = 1000
	// retransPeerWarn/Crit: bytes_retrans / bytes_sent to one remote address.
	retransPeerWarn = 0.02
	retransPeerCrit = 0.10
	// retransPeerUnknownPath: without the path's rate, a loss rate that
	// caps any loss-based sender (a few segments per RTT) warns; below
	// it, loss at a full bottleneck queue is how congestion control finds
	// the path's rate, and --bandwidth tells whether it costs anything.
	retransPeerUnknownPath = 0.05
	// retransQueuedRTT: smoothed RTT at least this many times the
	// minimum RTT means a queue on the path (see queued).
	retransQueuedRTT = 1.2
	// retransPeerMinBytes: a peer must have been sent this much in the window.
	retransPeerMinBytes = 1 << 20
	retransMaxFindings  = 10
)

func retransmissions() diag.Rule {
	return diag.Rule{ID: "retransmissions", Title: "Retransmission rate", NeedsDelta: true, Check: checkRetransmissions}
}

type peerRetrans struct {
	addr           netip.Addr
	sent, retrans  uint64
	acked          uint64 // bytes acked over the window
	conns, backoff int
	maxRTO, lost   uint32
	pids           []int
	sample         *snapshot.Socket // the busiest connection, to judge the path by
	sampleAcked    uint64
}

// verdict says whether the loss to this peer costs throughput: flows
// still moving near their path's rate lose packets at a full bottleneck
// queue, as loss-probing congestion control does by design.
// queued: the busiest connection's smoothed RTT stands well above its
// minimum, so a queue has built on the path and losses come from it
// overflowing: a flow filling its bottleneck. Loss without a queue is
// the path's own (a bad link, a policer), and costs every connection.
func (pr *peerRetrans) queued() bool {
	var tb snapshot.TCPInfo
	ti := sampleTCP(pr, &tb)
	if ti == nil || ti.MinRTT == 0 {
		return true // unknown: no loss is blamed on the path without it
	}
	return float64(ti.RTT) >= retransQueuedRTT*float64(ti.MinRTT)
}

// sampleTCP is the busiest connection's tcp_info, nil without one.
func sampleTCP(pr *peerRetrans, buf *snapshot.TCPInfo) *snapshot.TCPInfo {
	if pr.sample == nil {
		return nil
	}
	return pr.sample.TCP(buf)
}

// known is false when the path's rate is unknown: then only a loss rate
// that hurts any loss-based sender (retransPeerUnknownPath) warns.
func (pr *peerRetrans) verdict(in *diag.Input, rates tcpmodel.PathRates, idx tcpmodel.Tuples) (v tcpmodel.Verdict, known bool) {
	w := in.Window().Seconds()
	if pr.sample == nil || w <= 0 {
		return tcpmodel.Verdict{Why: "throughput unknown"}, false
	}
	rate := float64(pr.acked) / w
	p := tcpmodel.PathOf(in.Options.Bandwidth, rates, idx, pr.sample)
	return p.Judge(rate), p.Rate > 0
}

// losslessPathRates is the path's rate to each peer (tcpmodel.PathRatesOf)
// measured only from connections that retransmitted nothing in the
// window. A sender that lost segments is held by a cwnd its loss shrank:
// its rate is the loss's consequence, and taken for the path it would make
// any loss seem free (TestRetransmissionsOwnRateNotPath).
func losslessPathRates(in *diag.Input) tcpmodel.PathRates {
	if in.Prev == nil {
		return tcpmodel.PathRates{}
	}
	return tcpmodel.PathRatesOf(in.Cur, in.Window(), func(sk *snapshot.Socket) *snapshot.Socket {
		p := prevAs(in, sk)
		if p == nil {
			return nil
		}
		var tb, pb snapshot.TCPInfo
		ti, pi := sk.TCP(&tb), p.TCP(&pb)
		if ti == nil || pi == nil || ti.TotalRetrans != pi.TotalRetrans || ti.BytesRetrans != pi.BytesRetrans {
			return nil
		}
		return p
	})
}

func checkRetransmissions(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	var fs []diag.Finding
	out, ok1 := in.CounterDelta("Tcp.OutSegs")
	re, ok2 := in.CounterDelta("Tcp.RetransSegs")
	hostKnown := ok1 && ok2 && out >= 0 && re >= 0
	if hostKnown && out >= retransHostMinSegs {
		// SYNs this namespace's clients sent again because its own full
		// listeners dropped the first ones are listen-overflow's, not a
		// lossy path's: at most as many as the listeners dropped.
		synExplained := int64(0)
		if syn, ok := in.CounterDelta("TcpExt.TCPSynRetrans"); ok && syn > 0 {
			if drops, ok := in.CounterDelta("TcpExt.ListenDrops"); ok && drops > 0 {
				synExplained = min(syn, drops, re)
			}
		}
		r := float64(re-synExplained) / float64(out)
		if r >= retransHostWarn {
			sev := diag.Warning
			if r >= retransHostCrit {
				sev = diag.Critical
			}
			ev := []diag.Evidence{{Name: "retransmitted segments", Value: fmt.Sprintf("%d of %d sent (%.2f%%)", re, out, 100*r),
				Source: "/proc/net/snmp Tcp.RetransSegs / Tcp.OutSegs (delta)", Threshold: fmt.Sprintf(">= %.0f%% warning, >= %.0f%% critical", 100*retransHostWarn, 100*retransHostCrit)}}
			for _, c := range []string{"TCPLostRetransmit", "TCPTimeouts", "TCPSynRetrans"} {
				if d, ok := in.CounterDelta("TcpExt." + c); ok && d > 0 {
					ev = append(ev, diag.Evidence{Name: c, Value: fmt.Sprintf("+%d", d), Source: "/proc/net/netstat TcpExt." + c})
				}
			}
			if synExplained > 0 {
				ev = append(ev, diag.Evidence{Name: "SYN retransmits left out", Value: fmt.Sprintf("%d (as many as the namespace's listeners dropped)", synExplained),
					Source: "/proc/net/netstat TcpExt.TCPSynRetrans and TcpExt.ListenDrops (delta): the clients' answer to its own full accept queues (listen-overflow)"})
			}
			ev = append(ev, retransByPeerEvidence(cur))
			fs = append(fs, diag.Finding{Severity: sev, Subject: diag.Subject{Netns: cur.Netns.Name},
				Summary:  fmt.Sprintf("host-wide retransmission rate %.2f%% over %s (%d of %d segments)", 100*r, units.Dur(in.Window()), re-synExplained, out),
				Evidence: ev, Fixes: retransFixes("the lossy paths (per-peer findings below)")})
		}
	}

	peers := map[netip.Addr]*peerRetrans{}
	sawInfo := false
	var tb, pb snapshot.TCPInfo
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if sk.State == snapshot.Listen || !sk.HasTCP() {
			continue
		}
		ti := sk.TCP(&tb)
		if !ti.Has(snapshot.EndBytesRetrans) {
			continue
		}
		sawInfo = true
		sent, rtx := ti.BytesSent, ti.BytesRetrans
		p := in.PrevOf(sk)
		var pi *snapshot.TCPInfo
		if p != nil {
			pi = p.TCP(&pb)
			if !pi.Has(snapshot.EndBytesRetrans) || pi.BytesSent > sent || pi.BytesRetrans > rtx {
				continue
			}
			sent, rtx = sent-pi.BytesSent, rtx-pi.BytesRetrans
		} // else: new in the window, its totals are the window's
		a := sk.Remote.Addr().Unmap()
		pr := peers[a]
		if pr == nil {
			pr = &peerRetrans{addr: a}
			peers[a] = pr
		}
		pr.sent += sent
		pr.retrans += rtx
		pr.conns++
		if pi != nil && ti.BytesAcked >= pi.BytesAcked {
			d := ti.BytesAcked - pi.BytesAcked
			pr.acked += d
			if pr.sample == nil || d > pr.sampleAcked {
				pr.sample, pr.sampleAcked = sk, d
			}
		}
		if ti.Backoff > 0 {
			pr.backoff++
		}
		pr.maxRTO = max(pr.maxRTO, ti.RTO)
		pr.lost += ti.Lost
		if pid, _ := cur.Owner(sk); pid != 0 && len(pr.pids) < 3 && !containsInt(pr.pids, pid) {
			pr.pids = append(pr.pids, pid)
		}
	}
	if !hostKnown && !sawInfo {
		return nil, diag.Unknownf("neither Tcp.OutSegs/RetransSegs deltas nor tcp_info.bytes_retrans (Linux 4.19+) available")
	}
	var bad []*peerRetrans
	for _, pr := range peers {
		if pr.sent >= retransPeerMinBytes && float64(pr.retrans) >= retransPeerWarn*float64(pr.sent) {
			bad = append(bad, pr)
		}
	}
	sort.Slice(bad, func(i, j int) bool {
		ri, rj := float64(bad[i].retrans)/float64(bad[i].sent), float64(bad[j].retrans)/float64(bad[j].sent)
		if ri != rj {
			return ri > rj
		}
		return bad[i].addr.Less(bad[j].addr)
	})
	rates := losslessPathRates(in)
	idx := in.CurTuples()
	var pf []diag.Finding
	costly := false
	for _, pr := range bad {
		r := float64(pr.retrans) / float64(pr.sent)
		v, known := pr.verdict(in, rates, idx)
		sev := diag.Info
		switch {
		case r >= retransPeerCrit:
			sev = diag.Critical // connections stall in RTO backoff
		case known && v.Lost, !known && r >= retransPeerUnknownPath, !known && !pr.queued():
			sev = diag.Warning
		}
		costly = costly || sev >= diag.Warning
		sub := diag.Subject{Netns: cur.Netns.Name, Remote: diag.Host(pr.addr)}
		if len(pr.pids) == 1 {
			sub.Pid = pr.pids[0]
			if p := cur.Procs[sub.Pid]; p != nil {
				sub.Command = p.Command
			}
		}
		ev := []diag.Evidence{
			{Name: "retransmitted bytes", Value: fmt.Sprintf("%s of %s sent (%.1f%%) on %d connections", units.Bytes(float64(pr.retrans)), units.Bytes(float64(pr.sent)), 100*r, pr.conns),
				Source: "sock_diag tcp_info.bytes_retrans / bytes_sent (delta)", Threshold: fmt.Sprintf(">= %.0f%% warning, >= %.0f%% critical, of >= %s sent", 100*retransPeerWarn, 100*retransPeerCrit, units.Bytes(retransPeerMinBytes))},
			{Name: "largest RTO", Value: units.RTT(rttDur(pr.maxRTO)), Source: "sock_diag tcp_info.rto"},
		}
		ev = append(ev, retransToEvidence(cur, pr.addr))
		if pr.backoff > 0 {
			ev = append(ev, diag.Evidence{Name: "connections in RTO backoff", Value: fmt.Sprint(pr.backoff), Source: "sock_diag tcp_info.backoff"})
		}
		if pr.lost > 0 {
			ev = append(ev, diag.Evidence{Name: "segments marked lost now", Value: fmt.Sprint(pr.lost), Source: "sock_diag tcp_info.lost"})
		}
		if len(pr.pids) > 0 {
			ev = append(ev, diag.Evidence{Name: "processes", Value: tcpmodel.Who(cur, pr.pids), Source: "procs owners"})
		}
		ev = append(ev, diag.Evidence{Name: "performance", Value: v.Why, Source: "sock_diag tcp_info.bytes_acked (delta); --bandwidth or the path's measured rate",
			Threshold: fmt.Sprintf("warning when the flows move below %s of a known path rate; with the rate unknown, at %.0f%% loss, or at any loss above %.0f%% without a queue on the path; critical at %.0f%% whatever the rate", units.Pct(tcpmodel.LostShare), 100*retransPeerUnknownPath, 100*retransPeerWarn, 100*retransPeerCrit)})
		var sb snapshot.TCPInfo
		if ti := sampleTCP(pr, &sb); ti != nil && ti.MinRTT > 0 {
			q := "a queue has built (losses at a full bottleneck queue)"
			if !pr.queued() {
				q = "no queue (the path itself drops: a bad link or a policer)"
			}
			ev = append(ev, diag.Evidence{Name: "queue on the path", Value: fmt.Sprintf("smoothed RTT %s against minimum %s: %s", units.RTT(tcpmodel.RTT(ti)), units.RTT(time.Duration(ti.MinRTT)*time.Microsecond), q),
				Source: "sock_diag tcp_info.rtt, min_rtt of the busiest connection", Threshold: fmt.Sprintf("queue: rtt >= %.1f x min_rtt", retransQueuedRTT)})
		}
		pf = append(pf, diag.Finding{Severity: sev, Subject: sub,
			Summary:  fmt.Sprintf("%.1f%% of bytes sent to %s were retransmitted over %s", 100*r, pr.addr, units.Dur(in.Window())),
			Evidence: ev, Fixes: retransFixes("the path to " + pr.addr.String())})
	}
	pf = capFindings(pf, retransMaxFindings, func(n int) diag.Finding {
		return diag.Finding{Severity: diag.Info, Subject: diag.Subject{Netns: cur.Netns.Name}, Summary: fmt.Sprintf("%d more peers above the retransmission threshold", n),
			Evidence: []diag.Evidence{{Name: "peers not shown", Value: fmt.Sprint(n), Source: "sock_diag tcp_info.bytes_retrans"}},
			Fixes:    []diag.Fix{{Scope: "kernel", Text: "see the findings above"}}}
	})
	// The host-wide ratio alone: a warning only when some peer's loss
	// costs throughput, or when no per-connection data can tell.
	if sawInfo && !costly {
		for i := range fs {
			if fs[i].Severity == diag.Warning {
				fs[i].Severity = diag.Info
				fs[i].Evidence = append(fs[i].Evidence, diag.Evidence{Name: "consequence", Value: "no peer's flows lose throughput to it (loss at a full bottleneck queue, which congestion control probes for)",
					Source: "per-peer tcp_info.bytes_retrans, bytes_acked against the path"})
			}
		}
	}
	return append(fs, pf...), nil
}

func rttDur(us uint32) time.Duration { return time.Duration(us) * time.Microsecond }

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func retransFixes(where string) []diag.Fix {
	return []diag.Fix{
		{Scope: "kernel", Text: "find the lossy hop on " + where + ": per-hop loss with mtr, interface errors and drops on both ends",
			Command: "mtr -rwc 100 <peer>; ip -s link; ethtool -S <if> | grep -i -e drop -e err", Risk: "none (read-only)"},
		remedy.SetSysctls(diag.Fix{Scope: "kernel", Text: "check path MTU (black holes show as timeouts of full-size segments): probe with DF set; enable MTU probing if ICMP is filtered",
			Command: "ping -M do -s 1472 <peer>", Risk: "mtu_probing is host-wide; low risk"}, "", remedy.Setting("net.ipv4.tcp_mtu_probing", "1")),
		{Scope: "kernel", Text: "look for queue drops on this host's egress (qdisc, NIC ring)",
			Command: "tc -s qdisc show; ethtool -g <if>", Risk: "none (read-only)"},
	}
}

// retransByPeerEvidence names the peers the host retransmitted to most,
// connections closed between the samples included, as eBPF counted.
func retransByPeerEvidence(cur *snapshot.Snapshot) diag.Evidence {
	ev := diag.Evidence{Name: "retransmits by peer (eBPF)", Source: "eBPF tp_btf/tcp_retransmit_skb, per peer (accepted connections: client address on the local port)"}
	ps, ok := tcpmodel.Retransmits(cur)
	switch {
	case !ok:
		ev.Value = "unknown: " + tcpmodel.ProgramMissing(cur, snapshot.ProgRetransmits)
	case len(ps) == 0:
		ev.Value = "none counted in " + units.Dur(cur.Events.Interval())
	default:
		ev.Value = tcpmodel.TopPeers(ps, 5) + " in " + units.Dur(cur.Events.Interval())
	}
	return ev
}

// retransToEvidence is the segments retransmitted to one peer address as
// eBPF counted them: every connection, closed ones included.
func retransToEvidence(cur *snapshot.Snapshot, a netip.Addr) diag.Evidence {
	ev := diag.Evidence{Name: "retransmitted segments (eBPF)", Source: "eBPF tp_btf/tcp_retransmit_skb to this address, connections closed between the samples included"}
	n, ok := tcpmodel.RetransmitsTo(cur, a)
	if !ok {
		ev.Value = "unknown: " + tcpmodel.ProgramMissing(cur, snapshot.ProgRetransmits)
		return ev
	}
	ev.Value = fmt.Sprintf("%d in %s", n, units.Dur(cur.Events.Interval()))
	return ev
}
