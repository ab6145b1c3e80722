package rules

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

const (
	// bottleneckMaxConns: a process's traffic to one peer carried by this
	// many connections or fewer can be "too few" (Dubbo's default is 1).
	bottleneckMaxConns = 2
	// bottleneckBusy: each of them busy this share of the window.
	bottleneckBusy = 0.8
	// bottleneckLimited: rwnd_limited + sndbuf_limited share of busy time
	// that counts as limited by window or buffer.
	bottleneckLimited = 0.3
	// bottleneckMinConns: the smallest pool to recommend; in case C1, 4
	// connections took 800 callers from 430 ms to 160 ms, 6-8 gave 156 ms.
	bottleneckMinConns = 4
	// bottleneckMaxRecommend caps the recommendation.
	bottleneckMaxRecommend = 16
)

func connectionBottleneck() diag.Rule {
	return diag.Rule{ID: "connection-bottleneck", Title: "Too few connections to a peer", NeedsDelta: true, Check: checkConnectionBottleneck}
}

// flowKey is one process's traffic to one peer: as a client (remote
// ip:port) or as a server (local listening port and the client's address).
type flowKey struct {
	pid    int
	local  netip.AddrPort // server side only
	remote netip.AddrPort // port zero on the server side
}

type flow struct {
	socks   []*snapshot.Socket
	limited int
	why     []string
	acked   float64
}

func checkConnectionBottleneck(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagReady(cur); err != nil {
		return nil, err
	}
	window := in.Window()
	listening := map[uint16]bool{}
	for i := range cur.Sockets {
		if cur.Sockets[i].State == snapshot.Listen {
			listening[cur.Sockets[i].Local.Port()] = true
		}
	}
	flows := map[flowKey]*flow{}
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if sk.State != snapshot.Established || len(sk.Pids) == 0 {
			continue
		}
		k := flowKey{pid: sk.Pids[0], remote: sk.Remote}
		if listening[sk.Local.Port()] {
			k = flowKey{pid: sk.Pids[0], local: sk.Local, remote: netip.AddrPortFrom(sk.Remote.Addr(), 0)}
		}
		f := flows[k]
		if f == nil {
			f = &flow{}
			flows[k] = f
		}
		f.socks = append(f.socks, sk)
		if len(f.socks) > bottleneckMaxConns {
			continue
		}
		p := in.PrevSocket(sk.Cookie)
		if p == nil {
			continue
		}
		if why, ok := connLimited(sk, p, window); ok {
			f.limited++
			f.why = append(f.why, why)
			if sk.Info != nil && p.Info != nil && sk.Info.BytesAcked >= p.Info.BytesAcked {
				f.acked += float64(sk.Info.BytesAcked - p.Info.BytesAcked)
			}
		}
	}
	keys := make([]flowKey, 0)
	for k, f := range flows {
		if len(f.socks) <= bottleneckMaxConns && f.limited == len(f.socks) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pid != keys[j].pid {
			return keys[i].pid < keys[j].pid
		}
		return keys[i].remote.String() < keys[j].remote.String()
	})
	rates := peerRates(cur)
	var fs []diag.Finding
	for _, k := range keys {
		f := flows[k]
		sk := f.socks[0]
		n := len(f.socks)
		per := f.acked / float64(n) / window.Seconds()
		path, pathSrc := pathRate(in, rates, sk, per)
		want := max(bottleneckMinConns, 2*n)
		reason := fmt.Sprintf("at least %d (C1: 4 connections took most of the gain)", bottleneckMinConns)
		if path > 0 && per > 0 {
			want = max(want, int(math.Ceil(path/per)))
			reason = fmt.Sprintf("ceil(%s path (%s) / %s per connection)", fmtRate(path), pathSrc, fmtRate(per))
		}
		want = min(want, bottleneckMaxRecommend)
		peer := k.remote.String()
		if k.local.IsValid() {
			peer = k.remote.Addr().String() + " (clients of " + k.local.String() + ")"
		}
		ev := []diag.Evidence{
			{Name: "connections to the peer", Value: fmt.Sprint(n), Source: "sock_diag, grouped by owner and peer", Threshold: fmt.Sprintf("<= %d", bottleneckMaxConns)},
			{Name: "why each is saturated", Value: joinWhy(f.why), Source: "sock_diag tcp_info busy_time, rwnd_limited, sndbuf_limited (delta); Send-Q, Recv-Q, SK_MEMINFO in both samples",
				Threshold: fmt.Sprintf("busy >= %s and limited (rwnd+sndbuf >= %s of busy, Send-Q or Recv-Q stuck at half the buffer)", pct(bottleneckBusy), pct(bottleneckLimited))},
		}
		if per > 0 {
			ev = append(ev, diag.Evidence{Name: "per connection", Value: fmtRate(per), Source: "sock_diag tcp_info.bytes_acked (delta / window)"})
		}
		sum := fmt.Sprintf("%s carries its traffic to %s on %d connection(s), each saturated and limited by buffer or window; use about %d",
			owners(cur, sk.Pids), peer, n, want)
		fs = append(fs, diag.Finding{Severity: diag.Warning, Subject: subject(cur, sk), Summary: sum, Evidence: ev, Fixes: []diag.Fix{
			{Scope: "application", Target: "dubbo", Text: fmt.Sprintf("more connections per provider: %s", reason), Command: fmt.Sprintf(`<dubbo:reference connections="%d" .../>`, want),
				Risk: "more sockets and IO threads on both sides"},
			{Scope: "application", Target: "grpc", Text: fmt.Sprintf("a pool of %d channels (HTTP/2 multiplexes every call onto one connection)", want), Risk: "more connections to balance"},
			{Scope: "application", Text: fmt.Sprintf("HTTP/JDBC clients: pool size / max connections per host >= %d; at least as many connections as IO threads or cores", want), Risk: "server-side connection limits"},
			{Scope: "application", Text: "do not pin small socket buffers on these connections (see sndbuf-limited, rwnd-limited)", Risk: "memory per connection"},
		}})
	}
	return fs, nil
}

// connLimited says whether a connection was busy and held back by buffer
// or window across the window, and how.
func connLimited(sk, p *snapshot.Socket, window time.Duration) (string, bool) {
	sh, ok := snapshot.ChronoShares(p.Info, sk.Info, window)
	var why string
	busy := ok && snapshot.Frac(sh.Busy, window) >= bottleneckBusy
	if busy {
		if s := snapshot.Frac(sh.Rwnd+sh.Sndbuf, sh.Busy); s >= bottleneckLimited {
			why = fmt.Sprintf("busy %s, rwnd+sndbuf limited %s", pct(snapshot.Frac(sh.Busy, window)), pct(s))
		}
		// A full send buffer limits only if what is in flight fills a
		// good part of it; an autotuned buffer full of unsent data behind
		// a slower path is path-limited, and more connections do not help.
		var inflight uint64
		if sk.Info != nil {
			inflight = uint64(sk.Info.Unacked) * uint64(sk.Info.SndMSS)
		}
		if why == "" && sk.Mem != nil && p.Mem != nil && sk.Mem.Sndbuf > 0 &&
			2*sk.SendQ >= sk.Mem.Sndbuf && 2*p.SendQ >= p.Mem.Sndbuf && 4*inflight >= uint64(sk.Mem.Sndbuf) {
			why = fmt.Sprintf("busy %s, Send-Q %s stuck at sndbuf %s", pct(snapshot.Frac(sh.Busy, window)), fmtBytes(float64(sk.SendQ)), fmtBytes(float64(sk.Mem.Sndbuf)))
		}
		if why == "" {
			if l, ok := lookSndbuf(sk); ok && l.limited() {
				if pl, ok := lookSndbuf(p); ok && pl.limited() {
					why = fmt.Sprintf("busy %s, in flight at the send buffer", pct(snapshot.Frac(sh.Busy, window)))
				}
			}
		}
	}
	if why == "" && backedUp(sk) && backedUp(p) {
		why = fmt.Sprintf("Recv-Q %s stuck (one reader cannot drain it)", fmtBytes(float64(sk.RecvQ)))
	}
	return why, why != ""
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
