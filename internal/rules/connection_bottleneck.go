// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

const (
	// bottleneckMaxConns: a process's traffic to one peer carried by this
	// many connections or fewer can be "too few" (Dubbo's default is 1).
	bottleneckMaxConns = 2
	// bottleneckMinBusy: each of them busy (data in flight) at least this
	// share of the window. RPC traffic comes in waves: between them the
	// connection is idle, during them it is held back. So the connection
	// is judged over its busy time, and the window need only hold enough
	// of it to judge.
	bottleneckMinBusy = 0.25
	// bottleneckLimited: rwnd_limited + sndbuf_limited share of busy time
	// that counts as limited by window or buffer.
	bottleneckLimited = 0.3
	// bottleneckMinConns: the smallest pool to recommend; in case C1, 4
	// connections took 800 callers from 430 ms to 160 ms, 6-8 gave 156 ms.
	bottleneckMinConns = 4
	// bottleneckMaxRecommend caps the recommendation.
	bottleneckMaxRecommend = 16
	// bottleneckMinSegRate: data segments per second of busy time, each
	// way. Requests and responses multiplexed on the connection are what
	// more connections can split; a bulk stream one way (0/s in) is not,
	// and rwnd-limited or sndbuf-limited speak for it. C1's own figures
	// are 14 calls/s of 500 KB on one connection: each small request one
	// segment or a few, 14/s. Counting per busy second, not per second of
	// the window, keeps waves of calls with idle gaps between them in.
	bottleneckMinSegRate = 5
	// bottleneckPathFrac: the group moving this share of the known path
	// rate (--bandwidth) is limited by the path, not by its connections.
	bottleneckPathFrac = 0.7
	// bottleneckCwndFull: in flight at this share of cwnd in both samples,
	// with the kernel putting most busy time on neither window nor buffer,
	// is congestion-limited.
	bottleneckCwndFull = 0.8
	// bottleneckChronoSure: a rwnd+sndbuf share this high is believed
	// even when in flight reaches cwnd.
	bottleneckChronoSure = 0.5
)

func connectionBottleneck() diag.Rule {
	return diag.Rule{ID: "connection-bottleneck", Title: "Too few connections to a peer", NeedsDelta: true, Traceable: true, Check: checkConnectionBottleneck}
}

// flowKey is one process's traffic to one peer: as a client (remote
// ip:port) or as a server (local listening port and the client's address).
type flowKey struct {
	pid    int
	local  snapshot.Endpoint // server side only
	remote snapshot.Endpoint // port zero on the server side
}

type flow struct {
	n       int // connections; socks holds the first few
	socks   []*snapshot.Socket
	limited int
	why     []string
	acked   float64
	segsIn  float64 // data segments per second in, summed
	segsOut float64
}

func checkConnectionBottleneck(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagReady(cur); err != nil {
		return nil, err
	}
	window := in.Window()
	ls := tcpmodel.ListenersOf(cur)
	flows := map[flowKey]*flow{}
	var last *flow
	var lastK flowKey
	var tb, wb snapshot.TCPInfo
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if sk.State != snapshot.Established {
			continue
		}
		// Sockets whose owner is unknown group under pid 0: judged the
		// same way, named "owner unknown" with the reason.
		pid, _ := cur.Owner(sk)
		k := flowKey{pid: pid, remote: sk.Remote}
		if ls.At(sk.Local.Port()) != nil {
			k = flowKey{pid: pid, local: sk.Local, remote: sk.Remote.WithPort(0)}
		}
		// A flow's sockets mostly come together in a dump: the last
		// one's entry is tried before the map.
		f := last
		if f == nil || k != lastK {
			if f = flows[k]; f == nil {
				f = &flow{}
				flows[k] = f
			}
			last, lastK = f, k
		}
		f.n++
		if f.n > bottleneckMaxConns {
			continue // too many to be the pool this rule judges
		}
		f.socks = append(f.socks, sk)
		w := in.PrevOf(sk)
		if w == nil {
			continue
		}
		ti, wi := sk.TCP(&tb), w.TCP(&wb)
		sh, ok := snapshot.ChronoShares(wi, ti, window)
		if !ok {
			continue
		}
		segIn, segOut, ok := segRates(ti, wi, sh.Busy)
		if !ok || segIn < bottleneckMinSegRate || segOut < bottleneckMinSegRate {
			continue // not multiplexed: one stream one way, or idle
		}
		p := w.As(sk)
		if why, ok := connLimited(sk, &p, window); ok {
			f.limited++
			f.why = append(f.why, why)
			f.segsIn += segIn
			f.segsOut += segOut
			if ti.BytesAcked >= wi.BytesAcked {
				f.acked += float64(ti.BytesAcked - wi.BytesAcked)
			}
		}
	}
	bw := in.Options.Bandwidth / 8
	keys := make([]flowKey, 0)
	for k, f := range flows {
		if f.n > bottleneckMaxConns || f.limited != f.n {
			continue
		}
		if bw > 0 && window > 0 && f.acked/window.Seconds() >= bottleneckPathFrac*bw {
			continue // the path is the limit: more connections share it
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pid != keys[j].pid {
			return keys[i].pid < keys[j].pid
		}
		return keys[i].remote.String() < keys[j].remote.String()
	})
	rates := peerRates(in)
	idx := in.CurTuples()
	var fs []diag.Finding
	for _, k := range keys {
		f := flows[k]
		sk := f.socks[0]
		n := f.n
		per := f.acked / float64(n) / window.Seconds()
		pp := tcpmodel.PathOf(in.Options.Bandwidth, rates, idx, sk)
		path, pathSrc := pp.Rate, pp.Source
		verdict := pp.Judge(f.acked / window.Seconds())
		want := max(bottleneckMinConns, 2*n)
		reason := fmt.Sprintf("at least %d (C1: 4 connections took most of the gain)", bottleneckMinConns)
		if path > 0 && per > 0 {
			want = max(want, int(math.Ceil(path/per)))
			reason = fmt.Sprintf("ceil(%s path (%s) / %s per connection)", units.Rate(path), pathSrc, units.Rate(per))
		}
		want = min(want, bottleneckMaxRecommend)
		peer := k.remote.String()
		if k.local.IsValid() {
			peer = k.remote.Addr().String() + " (clients of " + k.local.String() + ")"
		}
		ev := []diag.Evidence{
			{Name: "connections to the peer", Value: fmt.Sprint(n), Source: "sock_diag, grouped by owner and peer", Threshold: fmt.Sprintf("<= %d", bottleneckMaxConns)},
			{Name: "why each is saturated", Value: joinWhy(f.why), Source: "sock_diag tcp_info busy_time, rwnd_limited, sndbuf_limited (delta); unacked, snd_wnd, snd_cwnd, Send-Q, Recv-Q, SK_MEMINFO in both samples",
				Threshold: fmt.Sprintf("busy >= %s of the window and limited by the connection while busy (rwnd+sndbuf >= %s of busy time, in flight filling the peer's window or the send buffer, the peer's unchanged window bounding the rate, Send-Q or Recv-Q stuck at the buffer), not by cwnd", units.Pct(bottleneckMinBusy), units.Pct(bottleneckLimited))},
		}
		ev = append(ev, diag.Evidence{Name: "requests multiplexed", Value: fmt.Sprintf("%.0f data segments per busy second in, %.0f out", f.segsIn, f.segsOut),
			Source: "sock_diag tcp_info.data_segs_in, data_segs_out, busy_time (delta)", Threshold: fmt.Sprintf(">= %d per busy second each way on every connection", bottleneckMinSegRate)})
		if per > 0 {
			v := units.Rate(per)
			if bw > 0 {
				v += fmt.Sprintf(" (%s in all, %s of the %s path)", units.Rate(f.acked/window.Seconds()), units.Pct(f.acked/window.Seconds()/bw), units.Rate(bw))
			}
			ev = append(ev, diag.Evidence{Name: "per connection", Value: v, Source: "sock_diag tcp_info.bytes_acked (delta / window); --bandwidth",
				Threshold: fmt.Sprintf("all connections < %s of the path rate when known", units.Pct(bottleneckPathFrac))})
		}
		ev = append(ev, diag.Evidence{Name: "performance", Value: verdict.Why, Source: "sock_diag tcp_info.bytes_acked (delta); --bandwidth or the path's measured rate",
			Threshold: fmt.Sprintf("warning below %s of the path", units.Pct(tcpmodel.LostShare))})
		if k.pid == 0 {
			if note, ok := ownersNote(cur); ok {
				ev = append(ev, note)
			}
		}
		sev := diag.Info
		if verdict.Lost {
			sev = diag.Warning
		}
		sum := fmt.Sprintf("%s carries its traffic to %s on %s, each held back by its buffer or window while busy; use about %d",
			tcpmodel.Who(cur, sk.Pids.List()), peer, units.N(n, "connection"), want)
		sub := subject(cur, ls, sk)
		if _, other, there := elsewhere(in, sk); there != nil && !k.local.IsValid() {
			// The provider is on this host: name it, and what it holds
			// unread or pinned.
			sub.Peer = there
			sum += fmt.Sprintf("; the peer %s is on this host: %s", peer, there)
			if other.Mem != nil {
				ev = append(ev, diag.Evidence{Name: "peer on this host", Value: fmt.Sprintf("%s: rcvbuf %s, Recv-Q %s, sndbuf %s, Send-Q %s", there,
					units.Bytes(float64(other.Mem.Rcvbuf)), units.Bytes(float64(other.RecvQ)), units.Bytes(float64(other.Mem.Sndbuf)), units.Bytes(float64(other.SendQ))),
					Source: "sock_diag SK_MEMINFO and queues of the reverse tuple in netns " + there.Netns})
			}
		}
		if k.local.IsValid() {
			// Server side: the peer is the client's address, its ports
			// are one per connection.
			sub.Remote = diag.Host(k.remote.Addr())
			sub.Peers = []diag.Count{{Key: k.remote.Addr().String(), N: n}}
		}
		fixes := []diag.Fix{
			{Scope: "application", Target: "dubbo", Text: fmt.Sprintf("more connections per provider: %s", reason), Command: fmt.Sprintf(`<dubbo:reference connections="%d" .../>`, want),
				Risk: "more sockets and IO threads on both sides"},
			{Scope: "application", Target: "grpc", Text: fmt.Sprintf("a pool of %d channels (HTTP/2 multiplexes every call onto one connection)", want), Risk: "more connections to balance"},
			{Scope: "application", Text: fmt.Sprintf("HTTP/JDBC clients: pool size / max connections per host >= %d; at least as many connections as IO threads or cores", want), Risk: "server-side connection limits"},
		}
		fs = append(fs, diag.Finding{Severity: sev, Subject: sub, Summary: sum, Evidence: ev, Fixes: append(fixes, bufferFixes(cur, f.socks)...)})
	}
	return fs, ownersGone(cur, snapshot.Established)
}

// segRates is the data segments per second of busy time each way between
// the previous sample's tcp_info p and the current one ti.
func segRates(ti, p *snapshot.TCPInfo, busy time.Duration) (in, out float64, ok bool) {
	if ti == nil || p == nil || busy <= 0 || ti.Len < snapshot.EndChrono ||
		ti.DataSegsIn < p.DataSegsIn || ti.DataSegsOut < p.DataSegsOut {
		return 0, 0, false
	}
	sec := busy.Seconds()
	return float64(ti.DataSegsIn-p.DataSegsIn) / sec, float64(ti.DataSegsOut-p.DataSegsOut) / sec, true
}

// connLimited says whether a connection was busy and held back by its
// own buffer or window, not by cwnd, across the window, and how.
func connLimited(sk, p *snapshot.Socket, window time.Duration) (string, bool) {
	var tb, pb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	sh, ok := snapshot.ChronoShares(p.TCP(&pb), ti, window)
	var why []string
	busy := ok && snapshot.Frac(sh.Busy, window) >= bottleneckMinBusy
	if busy {
		chrono := snapshot.Frac(sh.Rwnd+sh.Sndbuf, sh.Busy)
		if chrono >= bottleneckLimited {
			why = append(why, fmt.Sprintf("rwnd+sndbuf limited %s of busy", units.Pct(chrono)))
		}
		if l, full := wndFullBoth(sk, p); full {
			why = append(why, fmt.Sprintf("in flight %s fills the peer's window %s (cwnd %s)", units.Bytes(l.inflight), units.Bytes(l.wnd), units.Bytes(l.cwnd)))
		} else if l, frac, ok := wndBound(sk, p, window); ok {
			why = append(why, fmt.Sprintf("the peer's unchanged window %s bounds the rate (%s of it per RTT; cwnd %s)", units.Bytes(l.wnd), units.Pct(frac), units.Bytes(l.cwnd)))
		}
		// A full send buffer limits only if what is in flight fills a
		// good part of it; an autotuned buffer full of unsent data behind
		// a slower path is path-limited, and more connections do not help.
		var inflight uint64
		if ti != nil {
			inflight = uint64(ti.Unacked) * uint64(ti.SndMSS)
		}
		if l, ok := lookSndbuf(sk); ok && l.limited() {
			if pl, ok := lookSndbuf(p); ok && pl.limited() {
				why = append(why, "in flight at the send buffer")
			}
		} else if sk.Mem != nil && p.Mem != nil && sk.Mem.Sndbuf > 0 &&
			2*sk.SendQ >= sk.Mem.Sndbuf && 2*p.SendQ >= p.Mem.Sndbuf && 4*inflight >= uint64(sk.Mem.Sndbuf) {
			why = append(why, fmt.Sprintf("Send-Q %s stuck at sndbuf %s", units.Bytes(float64(sk.SendQ)), units.Bytes(float64(sk.Mem.Sndbuf))))
		}
		if len(why) > 0 && chrono < bottleneckChronoSure && cwndFull(sk) && cwndFull(p) {
			return "", false // congestion-limited: cwnd, not the connection
		}
		if len(why) > 0 {
			why[0] = fmt.Sprintf("busy %s, ", units.Pct(snapshot.Frac(sh.Busy, window))) + why[0]
		}
	}
	if backedUp(sk) && backedUp(p) {
		why = append(why, fmt.Sprintf("Recv-Q %s stuck (one reader cannot drain it)", units.Bytes(float64(sk.RecvQ))))
	}
	return strings.Join(why, ", "), len(why) > 0
}

// cwndFull: in flight at cwnd, so congestion control is what holds the
// connection back.
func cwndFull(sk *snapshot.Socket) bool {
	var tb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	return ti != nil && ti.SndCwnd > 0 && float64(ti.Unacked) >= bottleneckCwndFull*float64(ti.SndCwnd)
}

func joinWhy(ws []string) string {
	out := ""
	for i, w := range ws {
		if i > 0 {
			out += "; "
		}
		out += w
	}
	return out
}

// bufferFixes names what sizes the connections' buffers: the application
// only when the lock bits say it pinned them (else a hint says so, lock
// bits unread), the sysctl when a send buffer sits at tcp_wmem's maximum,
// autotuned.
func bufferFixes(s *snapshot.Snapshot, socks []*snapshot.Socket) []diag.Fix {
	snd := tcpmodel.SndLimits(s)
	var pinned, unread, atMax bool
	for _, sk := range socks {
		if sk.Mem == nil {
			continue
		}
		pin := tcpmodel.JudgeBufFrom(sk.Mem.Sndbuf, 0, sk.BufLock, tcpmodel.LockSnd|tcpmodel.LockRcv, snd, s.BufLocks)
		switch {
		case pin.Proof && pin.Pinned:
			pinned = true
		case !pin.Proof:
			unread = true
		}
		atMax = atMax || !pin.Pinned && snd.Auto > 0 && int64(sk.Mem.Sndbuf) >= snd.Auto
	}
	var fs []diag.Fix
	switch {
	case pinned:
		fs = append(fs, diag.Fix{Scope: "application", Text: "do not pin small socket buffers on these connections: the lock bits show SO_SNDBUF or SO_RCVBUF set (see sndbuf-limited, rwnd-limited)", Risk: "memory per connection"})
	case unread && !atMax:
		fs = append(fs, diag.Fix{Scope: "application", Text: "if the application sets SO_SNDBUF or SO_RCVBUF on these connections (the lock bits were not read), stop pinning them (see sndbuf-limited, rwnd-limited)", Risk: "memory per connection"})
	}
	if w, ok := s.SysctlInts("net.ipv4.tcp_wmem"); ok && len(w) == 3 && atMax {
		fs = append(fs, remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl",
			Text: fmt.Sprintf("their send buffers are at net.ipv4.tcp_wmem's maximum %s, autotuned: raise it to the path's BDP (see sndbuf-limited; doubling shown)", units.Bytes(float64(w[2]))),
			Risk: "more memory per busy connection; bounded by tcp_mem"}, "", remedy.Sysctl(s, "net.ipv4.tcp_wmem", w[0], w[1], 2*w[2])))
	}
	return fs
}
