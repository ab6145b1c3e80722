package rules

import (
	"fmt"
	"sort"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

const (
	// slowReaderMinQ: Recv-Q (bytes received, not yet read) in both
	// samples. A reader that keeps up drains to near zero between reads.
	slowReaderMinQ = 16 << 10
	// slowReaderFill: rmem_alloc at least this share of rcvbuf in both
	// samples, so the queue is eating the window the peer can use.
	slowReaderFill = 0.5
	// slowReaderBigQ: a Recv-Q this large counts on its own, whatever the
	// rcvbuf (autotuned buffers can be many MB).
	slowReaderBigQ = 1 << 20
	// slowReaderCritFill: the buffer was this full in both samples: the
	// advertised window is about closed.
	slowReaderCritFill    = 0.9
	slowReaderMaxFindings = 10
)

func slowReader() diag.Rule {
	return diag.Rule{ID: "slow-reader", Title: "Application not reading fast enough", NeedsDelta: true, Check: checkSlowReader}
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
	crit  bool
	total uint64
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
		p := in.PrevSocket(sk.Cookie)
		if p == nil || !backedUp(p) {
			continue
		}
		pid := -1 // unknown owner: one group per socket below
		if len(sk.Pids) > 0 {
			pid = sk.Pids[0]
		}
		key := pid
		if pid < 0 {
			key = -1 - i
		}
		g := groups[key]
		if g == nil {
			g = &readerGroup{pid: pid}
			groups[key] = g
		}
		g.socks = append(g.socks, sk)
		g.prevs = append(g.prevs, p)
		g.total += uint64(sk.RecvQ)
		if fill(sk) >= slowReaderCritFill && fill(p) >= slowReaderCritFill {
			g.crit = true
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
		if list[i].total != list[j].total {
			return list[i].total > list[j].total
		}
		return list[i].pid < list[j].pid
	})
	idx := byTuple(cur)
	fs := make([]diag.Finding, 0, len(list))
	for _, g := range list {
		fs = append(fs, slowReaderFinding(in, g, idx))
	}
	return capFindings(fs, slowReaderMaxFindings, func(n int) diag.Finding {
		return moreFinding(cur, n, "processes", "have receive queues that stay full", "sock_diag Recv-Q")
	}), nil
}

func slowReaderFinding(in *diag.Input, g *readerGroup, idx map[tuple]*snapshot.Socket) diag.Finding {
	cur := in.Cur
	// Worst connection first: the largest queue.
	w := 0
	for i, sk := range g.socks {
		if sk.RecvQ > g.socks[w].RecvQ {
			w = i
		}
	}
	sk, p := g.socks[w], g.prevs[w]
	who := owners(cur, sk.Pids)
	ev := []diag.Evidence{
		{Name: "Recv-Q", Value: fmt.Sprintf("%s then %s, %s apart", fmtBytes(float64(p.RecvQ)), fmtBytes(float64(sk.RecvQ)), fmtDur(in.Window())),
			Source: "sock_diag idiag_rqueue, both samples", Threshold: fmt.Sprintf(">= %s and >= %s of rcvbuf in both, or >= %s", fmtBytes(slowReaderMinQ), pct(slowReaderFill), fmtBytes(slowReaderBigQ))},
	}
	if sk.Mem != nil {
		ev = append(ev, diag.Evidence{Name: "receive buffer", Value: fmt.Sprintf("rmem_alloc %s of rcvbuf %s (%s full)", fmtBytes(float64(sk.Mem.RmemAlloc)), fmtBytes(float64(sk.Mem.Rcvbuf)), pct(fill(sk))),
			Source: "sock_diag SK_MEMINFO rmem_alloc, rcvbuf", Threshold: "critical at " + pct(slowReaderCritFill) + " in both samples"})
	}
	if sk.Info != nil && p.Info != nil && sk.Info.BytesReceived >= p.Info.BytesReceived {
		got := sk.Info.BytesReceived - p.Info.BytesReceived
		v := fmt.Sprintf("%s arrived in the window", fmtBytes(float64(got)))
		if got == 0 {
			v += ": nothing read or received, the reader looks stuck"
		}
		ev = append(ev, diag.Evidence{Name: "received", Value: v, Source: "sock_diag tcp_info.bytes_received (delta)"})
	}
	if sk.Info.Has(snapshot.EndRcvWnd) {
		ev = append(ev, diag.Evidence{Name: "advertised window", Value: fmtBytes(float64(sk.Info.RcvWnd)), Source: "sock_diag tcp_info.rcv_wnd"})
	}
	if len(g.socks) > 1 {
		ev = append(ev, diag.Evidence{Name: "backed-up connections", Value: fmt.Sprintf("%d, %s queued in all", len(g.socks), fmtBytes(float64(g.total))), Source: "sock_diag Recv-Q"})
	}
	peerNote := "its peer " + sk.Remote.String() + " is held back by the shrinking window (rwnd-limited)"
	if peer := localPeer(idx, sk); peer != nil {
		peerNote = fmt.Sprintf("its local peer %s (%s) is held back by the shrinking window", sk.Remote, owners(cur, peer.Pids))
		if pp := in.PrevSocket(peer.Cookie); pp != nil && peer.Info != nil {
			if sh, ok := snapshot.ChronoShares(pp.Info, peer.Info, in.Window()); ok && sh.Busy > 0 {
				peerNote += fmt.Sprintf(" (rwnd-limited %s of its busy time)", pct(snapshot.Frac(sh.Rwnd, sh.Busy)))
				ev = append(ev, diag.Evidence{Name: "peer rwnd_limited", Value: pct(snapshot.Frac(sh.Rwnd, sh.Busy)) + " of busy time", Source: "sock_diag tcp_info.rwnd_limited of the reverse tuple (delta)"})
			}
		}
	}
	sev := diag.Warning
	if g.crit {
		sev = diag.Critical
	}
	n := ""
	if len(g.socks) > 1 {
		n = fmt.Sprintf(" on %d connections", len(g.socks))
	}
	sum := fmt.Sprintf("%s is not reading fast enough%s: Recv-Q stayed at %s (%s of rcvbuf) across the window; %s",
		who, n, fmtBytes(float64(sk.RecvQ)), pct(fill(sk)), peerNote)
	return diag.Finding{Severity: sev, Subject: subject(cur, sk), Summary: sum, Evidence: ev, Fixes: []diag.Fix{
		{Scope: "application", Text: "read faster: more IO/reader threads or event loops (Netty workerGroup threads, one per core), keep slow work (decoding, business logic, blocking calls) off the IO thread, read in larger chunks",
			Risk: "more threads means more contention; measure"},
		{Scope: "application", Text: "spread the traffic over more connections so more IO threads share it (Dubbo connections, gRPC channel pool, HTTP client pool size); see connection-bottleneck",
			Risk: "more sockets and memory"},
		{Scope: "application", Text: "a larger receive buffer only hides the delay; it does not make the reader faster", Risk: "more memory queued per connection"},
	}}
}
