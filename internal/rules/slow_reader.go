// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"sort"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

const (
	// slowReaderMinQ: Recv-Q (bytes received, not yet read) in both
	// samples. A reader that keeps up drains to near zero between reads.
	slowReaderMinQ = 16 << 10
	// slowReaderFill: rmem_alloc at least this share of rcvbuf in both
	// samples, so the queue is eating the window the peer can use.
	slowReaderFill = 0.5
	// slowReaderBigQ: a Recv-Q this large counts as backed up whatever the
	// rcvbuf (autotuned buffers can be many MB); it is a candidate only:
	// severity comes from what the reader moves and whether it moves.
	slowReaderBigQ = 1 << 20
	// slowReaderFullFill: on kernels without tcp_info.rcv_wnd (before 6.2),
	// a buffer this full in both samples counts as a closed window.
	slowReaderFullFill    = 0.9
	slowReaderMaxFindings = 10
)

func slowReader() diag.Rule {
	return diag.Rule{ID: "slow-reader", Title: "Application not reading fast enough", NeedsDelta: true, Traceable: true, Check: checkSlowReader}
}

// backedUp says whether a sample shows a receive queue that is not drained.
func backedUp(sk *snapshot.Socket) bool {
	if sk.RecvQ >= slowReaderBigQ {
		return true
	}
	if sk.RecvQ < slowReaderMinQ || sk.Mem == nil || sk.Mem.Rcvbuf == 0 {
		return false
	}
	return float64(sk.Mem.RmemAlloc) >= slowReaderFill*float64(sk.Mem.Rcvbuf)
}

// windowClosed: the receiver advertises (about) no window: under two
// segments in tcp_info.rcv_wnd (Linux 6.2+), else a buffer at least
// slowReaderFullFill full.
func windowClosed(sk *snapshot.Socket) bool {
	var tb snapshot.TCPInfo
	if ti := sk.TCP(&tb); ti.Has(snapshot.EndRcvWnd) {
		return ti.RcvWnd < 2*max(ti.RcvMSS, 536)
	}
	return fill(sk) >= slowReaderFullFill
}

func fill(sk *snapshot.Socket) float64 {
	if sk.Mem == nil || sk.Mem.Rcvbuf == 0 {
		return 0
	}
	return float64(sk.Mem.RmemAlloc) / float64(sk.Mem.Rcvbuf)
}

// readerGroup is one process's backed-up connections.
type readerGroup struct {
	pid   int
	socks []*snapshot.Socket
	prevs []*snapshot.Socket
	crit  bool // a reader stopped while its sender waits
	// stuck: a reader stopped whose local sender has nothing left to send
	stuck bool
	// done: every connection's local sender has nothing left to send
	done  bool
	full  bool // a window held closed across the window
	total uint64
}

// senderDone says whether sk's peer is on this host with nothing left to
// send, so that the reader holds nothing back: nothing arrived in the
// window and the peer's Send-Q was empty in both samples (curl
// --limit-rate reading a file nginx sent at once). One look at the peer
// is not enough: on loopback a slow stream into an open window is
// acknowledged at once.
func senderDone(in *diag.Input, sk, p *snapshot.Socket) bool {
	var tb, pb, rb snapshot.TCPInfo
	ti, pi := sk.TCP(&tb), p.TCP(&pb)
	if ti == nil || pi == nil || ti.BytesReceived != pi.BytesReceived {
		return false
	}
	peer := in.CurTuples().Peer(sk)
	if peer == nil || peer.SendQ != 0 {
		return false
	}
	if ri := peer.TCP(&rb); ri != nil && ri.NotsentBytes != 0 {
		return false
	}
	pp := in.PrevOf(peer)
	return pp != nil && pp.SendQ == 0
}

// consumed is what the application read from a connection over the
// window: what arrived less what the queue grew by (a transfer that has
// all arrived is read from the queue, nothing more arriving). ok is
// false without the counters.
func consumed(sk, p *snapshot.Socket) (int64, bool) {
	var tb, pb snapshot.TCPInfo
	ti, pi := sk.TCP(&tb), p.TCP(&pb)
	if ti == nil || pi == nil || ti.BytesReceived < pi.BytesReceived {
		return 0, false
	}
	return int64(ti.BytesReceived-pi.BytesReceived) - (int64(sk.RecvQ) - int64(p.RecvQ)), true
}

// received is what a connection received over the window (bytes/s);
// ok is false without the counters.
func received(sk, p *snapshot.Socket, w time.Duration) (float64, bool) {
	var tb, pb snapshot.TCPInfo
	ti, pi := sk.TCP(&tb), p.TCP(&pb)
	if ti == nil || pi == nil || w <= 0 || ti.BytesReceived < pi.BytesReceived {
		return 0, false
	}
	return float64(ti.BytesReceived-pi.BytesReceived) / w.Seconds(), true
}

func checkSlowReader(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if e, bad := cur.Failed(snapshot.SourceSockdiag); bad {
		return nil, diag.Unknownf("sock_diag failed: %s", e)
	}
	groups := map[int]*readerGroup{}
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if sk.State != snapshot.Established || !backedUp(sk) {
			continue
		}
		p := prevAs(in, sk)
		if p == nil || !backedUp(p) {
			continue
		}
		pid, _ := cur.Owner(sk)
		if pid == 0 {
			pid = -1 // unknown owner: one group per socket below
		}
		key := pid
		if pid < 0 {
			key = -1 - i
		}
		g := groups[key]
		if g == nil {
			g = &readerGroup{pid: pid, done: true}
			groups[key] = g
		}
		g.socks = append(g.socks, sk)
		g.prevs = append(g.prevs, p)
		g.total += uint64(sk.RecvQ)
		if windowClosed(sk) && windowClosed(p) {
			g.full = true
		}
		done := senderDone(in, sk, p)
		g.done = g.done && done
		if n, ok := consumed(sk, p); ok && n <= 0 {
			if done {
				g.stuck = true
			} else {
				g.crit = true
			}
		}
	}
	list := make([]*readerGroup, 0, len(groups))
	for _, g := range groups {
		list = append(list, g)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].crit != list[j].crit {
			return list[i].crit
		}
		if list[i].full != list[j].full {
			return list[i].full
		}
		if list[i].total != list[j].total {
			return list[i].total > list[j].total
		}
		return list[i].pid < list[j].pid
	})
	idx := in.CurTuples()
	ls := tcpmodel.ListenersOf(cur)
	rates := peerRates(in)
	fs := make([]diag.Finding, 0, len(list))
	for _, g := range list {
		if f, ok := slowReaderFinding(in, g, idx, ls, rates); ok {
			fs = append(fs, f)
		}
	}
	return capFindings(fs, slowReaderMaxFindings, func(n int) diag.Finding {
		return moreFinding(cur, n, "processes", "have receive queues that stay full", "sock_diag Recv-Q")
	}), nil
}

// slowReaderFinding judges one process's backed-up connections: critical
// when a reader stopped, a warning when the window stays closed and the
// flow moves well below its path's rate; none when the reader keeps up
// with what the path delivers (a fast local stream whose reader is the
// bottleneck is healthy).
func slowReaderFinding(in *diag.Input, g *readerGroup, idx tcpmodel.Tuples, ls tcpmodel.Listeners, rates tcpmodel.PathRates) (diag.Finding, bool) {
	cur := in.Cur
	// Worst connection first: the largest queue.
	w := 0
	for i, sk := range g.socks {
		if sk.RecvQ > g.socks[w].RecvQ {
			w = i
		}
	}
	sk, p := g.socks[w], g.prevs[w]
	var tb, pb snapshot.TCPInfo
	ti, pi := sk.TCP(&tb), p.TCP(&pb)
	who := tcpmodel.Who(cur, sk.Pids.List())
	ev := []diag.Evidence{
		{Name: "Recv-Q", Value: fmt.Sprintf("%s then %s, %s apart", units.Bytes(float64(p.RecvQ)), units.Bytes(float64(sk.RecvQ)), units.Dur(in.Window())),
			Source: "sock_diag idiag_rqueue, both samples", Threshold: fmt.Sprintf(">= %s and >= %s of rcvbuf in both, or >= %s", units.Bytes(slowReaderMinQ), units.Pct(slowReaderFill), units.Bytes(slowReaderBigQ))},
	}
	if sk.Mem != nil {
		ev = append(ev, diag.Evidence{Name: "receive buffer", Value: fmt.Sprintf("rmem_alloc %s of rcvbuf %s (%s full)", units.Bytes(float64(sk.Mem.RmemAlloc)), units.Bytes(float64(sk.Mem.Rcvbuf)), units.Pct(fill(sk))),
			Source: "sock_diag SK_MEMINFO rmem_alloc, rcvbuf", Threshold: "window closed (tcp_info.rcv_wnd under two segments, or the buffer " + units.Pct(slowReaderFullFill) + " full on kernels before 6.2) in both samples"})
	}
	if n, ok := consumed(sk, p); ok {
		v := fmt.Sprintf("%s arrived and %s was read in the window", units.Bytes(float64(ti.BytesReceived-pi.BytesReceived)), units.Bytes(float64(max(n, 0))))
		if n <= 0 {
			v += ": the application read nothing, it looks stuck"
		}
		ev = append(ev, diag.Evidence{Name: "received / read", Value: v, Source: "sock_diag tcp_info.bytes_received (delta); read = that less the Recv-Q's growth"})
	}
	if ti.Has(snapshot.EndRcvWnd) {
		ev = append(ev, diag.Evidence{Name: "advertised window", Value: units.Bytes(float64(ti.RcvWnd)), Source: "sock_diag tcp_info.rcv_wnd"})
	}
	if len(g.socks) > 1 {
		ev = append(ev, diag.Evidence{Name: "backed-up connections", Value: fmt.Sprintf("%d, %s queued in all", len(g.socks), units.Bytes(float64(g.total))), Source: "sock_diag Recv-Q"})
	}
	peerNote := "its peer " + sk.Remote.String() + " is held back by the shrinking window (rwnd-limited)"
	var thereSub *diag.Peer
	if peer := idx.Peer(sk); peer != nil && g.done {
		peerNote = fmt.Sprintf("its local peer %s (%s) has sent all it had: the data waits in this buffer and holds nothing back", sk.Remote, tcpmodel.Who(cur, peer.Pids.List()))
	} else if _, other, there := elsewhere(in, sk); there != nil {
		peerNote = fmt.Sprintf("its peer %s on this host, %s, is held back by the shrinking window (Send-Q %s)", sk.Remote, there, units.Bytes(float64(other.SendQ)))
		thereSub = there
	} else if peer != nil {
		peerNote = fmt.Sprintf("its local peer %s (%s) is held back by the shrinking window", sk.Remote, tcpmodel.Who(cur, peer.Pids.List()))
		var rb, rpb snapshot.TCPInfo
		if pp := in.PrevOf(peer); pp != nil && peer.HasTCP() {
			if sh, ok := snapshot.ChronoShares(pp.TCP(&rpb), peer.TCP(&rb), in.Window()); ok && sh.Busy > 0 {
				peerNote += fmt.Sprintf(" (rwnd-limited %s of its busy time)", units.Pct(snapshot.Frac(sh.Rwnd, sh.Busy)))
				ev = append(ev, diag.Evidence{Name: "peer rwnd_limited", Value: units.Pct(snapshot.Frac(sh.Rwnd, sh.Busy)) + " of busy time", Source: "sock_diag tcp_info.rwnd_limited of the reverse tuple (delta)"})
			}
		}
	}
	rate, _ := received(sk, p, in.Window())
	verdict := tcpmodel.PathOf(in.Options.Bandwidth, rates, idx, sk).Judge(rate)
	var sev diag.Severity
	switch {
	case g.crit:
		sev = diag.Critical
	case g.stuck:
		sev = diag.Warning
	case g.done:
		sev = diag.Info
	case !verdict.Lost:
		return diag.Finding{}, false
	case g.full:
		sev = diag.Warning
	default:
		sev = diag.Info
	}
	ev = append(ev, diag.Evidence{Name: "performance", Value: verdict.Why, Source: "sock_diag tcp_info.bytes_received (delta); --bandwidth or the path's measured rate",
		Threshold: fmt.Sprintf("critical when nothing is read; warning with the window closed in both samples and the flow below %s of the path", units.Pct(tcpmodel.LostShare))})
	n := ""
	if len(g.socks) > 1 {
		n = fmt.Sprintf(" on %d connections", len(g.socks))
	}
	sum := fmt.Sprintf("%s is not reading fast enough%s: Recv-Q stayed at %s (%s of rcvbuf) across the window; %s",
		who, n, units.Bytes(float64(sk.RecvQ)), units.Pct(fill(sk)), peerNote)
	sub := subject(cur, ls, sk)
	sub.Peer = thereSub
	return diag.Finding{Severity: sev, Subject: sub, Summary: sum, Evidence: ev, Fixes: []diag.Fix{
		{Scope: "application", Text: "read faster: more IO/reader threads or event loops (Netty workerGroup threads, one per core), keep slow work (decoding, business logic, blocking calls) off the IO thread, read in larger chunks",
			Risk: "more threads means more contention; measure"},
		{Scope: "application", Text: "spread the traffic over more connections so more IO threads share it (Dubbo connections, gRPC channel pool, HTTP client pool size); see connection-bottleneck",
			Risk: "more sockets and memory"},
		{Scope: "application", Text: "a larger receive buffer only hides the delay; it does not make the reader faster", Risk: "more memory queued per connection"},
	}}, true
}
