// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

const (
	// synNearFull: a listener holding at least this share of its backlog
	// in SYN-RECV request sockets can explain the SYN queue overflowing
	// (the kernel calls the queue full above the backlog).
	synNearFull = 0.9
	// synCritRate: SYNs dropped per second at which the finding is
	// critical (clients fail or wait seconds every second).
	synCritRate = 10.0
	// synFloodTop and synFloodShare: a queue this full where the top
	// synFloodTop sources hold at least synFloodShare of the requests
	// looks like a flood or a broken client, not many real users.
	synFloodTop   = 3
	synFloodShare = 0.8
	// synMaxFindings caps per-listener findings; the rest are summed up.
	synMaxFindings = 10
)

func synQueueOverflow() diag.Rule {
	return diag.Rule{ID: "syn-queue-overflow", Title: "SYN queue overflow and SYN cookies", Check: checkSynQueueOverflow}
}

// synListener is one LISTEN socket with the request sockets (SYN-RECV)
// sock_diag showed for it.
type synListener struct {
	sk      *snapshot.Socket
	reqs    int
	prev    int // requests in the previous sample, -1 if unknown
	srcs    map[netip.Addr]int
	synacks int // request sockets whose SYN-ACK was retransmitted
}

func (l *synListener) fill() float64 {
	if l.sk.SendQ == 0 {
		return float64(l.reqs)
	}
	return float64(max(l.reqs, l.prev)) / float64(l.sk.SendQ)
}

// nearFull: at synNearFull of the backlog, or one request short of a
// small one (synSmallBacklog, where 90 % is the backlog itself: python3's
// http.server listens with 5).
func (l *synListener) nearFull() bool {
	peak := max(l.reqs, l.prev)
	return peak > 0 && (float64(peak) >= synNearFull*float64(l.sk.SendQ) || l.small() && peak >= int(l.sk.SendQ)-1)
}

// synSmallBacklog: a backlog below this fills and drains between samples
// with a burst a sample cannot catch.
const synSmallBacklog = 10

func (l *synListener) small() bool { return l.sk.SendQ < synSmallBacklog }

// acceptFull says whether the listener's accept queue was near full in
// either sample, as listen-overflow judges it: its backlog then bounds
// both queues, and listen-overflow reports the accept queue.
func (l *synListener) acceptFull(in *diag.Input) bool {
	peak := l.sk.RecvQ
	if p := in.PrevOf(l.sk); p != nil {
		peak = max(peak, p.RecvQ)
	}
	return acceptNearFull(peak, l.sk.SendQ)
}

func (l *synListener) fullNow() bool { return l.reqs > 0 && l.reqs >= int(l.sk.SendQ) }

// synCounters are the window's SYN-queue counter deltas. has* say
// whether the counter was present in both samples and did not go back.
type synCounters struct {
	dropsNotOverflow, reqFullDrop, reqFullCookies, cookiesSent, cookiesFailed, cookiesRecv int64
	// overflows is TcpExt.ListenOverflows' delta (0 when unknown): the
	// accept queue overflowed, which listen-overflow reports.
	overflows                                                                int64
	hasDrops, hasReqFullDrop, hasReqFullCookies, hasSent, hasFailed, hasRecv bool
}

func (c synCounters) any() bool {
	return c.hasDrops || c.hasReqFullDrop || c.hasReqFullCookies || c.hasSent || c.hasFailed
}

// dropped is the SYNs dropped in the window: TCPReqQFullDrop counts the
// SYN queue ones; ListenDrops - ListenOverflows counts those and the
// other non-accept-queue drops (tcp_max_syn_backlog without cookies).
func (c synCounters) dropped() int64 { return max(c.reqFullDrop, c.dropsNotOverflow) }

// cookies is the SYN cookies sent in the window.
func (c synCounters) cookies() int64 { return max(c.reqFullCookies, c.cookiesSent) }

func synDeltas(in *diag.Input) synCounters {
	var c synCounters
	get := func(name string) (int64, bool) {
		d, ok := in.CounterDelta(name)
		if !ok || d < 0 {
			return 0, false
		}
		return d, true
	}
	drops, ok1 := get("TcpExt.ListenDrops")
	over, ok2 := get("TcpExt.ListenOverflows")
	if ok1 && ok2 {
		c.dropsNotOverflow, c.hasDrops = max(0, drops-over), true
	}
	c.overflows = over
	c.reqFullDrop, c.hasReqFullDrop = get("TcpExt.TCPReqQFullDrop")
	c.reqFullCookies, c.hasReqFullCookies = get("TcpExt.TCPReqQFullDoCookies")
	c.cookiesSent, c.hasSent = get("TcpExt.SyncookiesSent")
	c.cookiesFailed, c.hasFailed = get("TcpExt.SyncookiesFailed")
	c.cookiesRecv, c.hasRecv = get("TcpExt.SyncookiesRecv")
	return c
}

// synListeners counts the SYN-RECV request sockets of s per listener (by
// local port and address, a wildcard listener taking what no specific
// one does), and the previous sample's count for the same listeners.
func synListeners(in *diag.Input) []*synListener {
	byPort := map[uint16][]*synListener{}
	var out []*synListener
	for i := range in.Cur.Sockets {
		sk := &in.Cur.Sockets[i]
		if sk.State == snapshot.Listen {
			l := &synListener{sk: sk, prev: -1}
			byPort[sk.Local.Port()] = append(byPort[sk.Local.Port()], l)
			out = append(out, l)
		}
	}
	match := func(sk *snapshot.Socket) *synListener {
		var wild *synListener
		a := sk.Local.Addr().Unmap()
		for _, l := range byPort[sk.Local.Port()] {
			la := l.sk.Local.Addr().Unmap()
			if la == a {
				return l
			}
			if la.IsUnspecified() && (wild == nil || l.sk.Family == sk.Family) {
				wild = l
			}
		}
		return wild
	}
	for i := range in.Cur.Sockets {
		sk := &in.Cur.Sockets[i]
		if sk.State != snapshot.SynRecv && sk.State != snapshot.NewSynRecv {
			continue
		}
		l := match(sk)
		if l == nil {
			continue
		}
		l.reqs++
		if l.srcs == nil {
			l.srcs = map[netip.Addr]int{}
		}
		l.srcs[sk.Remote.Addr().Unmap()]++
		if sk.Retrans > 0 {
			l.synacks++
		}
	}
	if in.Prev != nil {
		prevBy := map[uint64]int{}
		for i := range in.Prev.Sockets {
			sk := &in.Prev.Sockets[i]
			if sk.State != snapshot.SynRecv && sk.State != snapshot.NewSynRecv {
				continue
			}
			for _, l := range byPort[sk.Local.Port()] {
				la := l.sk.Local.Addr().Unmap()
				if la == sk.Local.Addr().Unmap() || la.IsUnspecified() {
					prevBy[l.sk.Cookie]++
					break
				}
			}
		}
		for _, l := range out {
			if in.PrevOf(l.sk) != nil {
				l.prev = prevBy[l.sk.Cookie]
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].fill() > out[j].fill() })
	return out
}

func checkSynQueueOverflow(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	msg, sdFailed := cur.Failed(snapshot.SourceSockdiag)
	ls := synListeners(in)
	c := synDeltas(in)
	cookieMode, hasCookieMode := cur.SysctlInt("net.ipv4.tcp_syncookies")
	// With tcp_syncookies=2 every SYN is answered with a cookie: the
	// cookie counters then say nothing about the queue.
	cookiesMean := !(hasCookieMode && cookieMode == 2)
	dropped := c.dropped()
	cookies := int64(0)
	if cookiesMean {
		cookies = c.cookies()
	}
	moved := dropped > 0 || cookies > 0

	if in.Prev != nil && !c.any() && sdFailed && len(cur.Sockets) == 0 {
		return nil, diag.Unknownf("no SYN-queue counters in /proc/net/netstat and sock_diag failed: %s", msg)
	}

	var fs []diag.Finding
	// With counters moving, a near-full listener explains them; without,
	// only a full one is worth a finding (its next SYNs overflow).
	// Cookies alone with a listener whose accept queue is full and SYN
	// queue not empty: its backlog bounds both (a SYN queue of 5 fills and
	// drains between samples).
	var explain []*synListener
	for _, l := range ls {
		sameBacklog := dropped == 0 && l.small() && max(l.reqs, l.prev) > 0 && l.acceptFull(in)
		if moved && (l.nearFull() || sameBacklog) || !moved && l.fullNow() {
			explain = append(explain, l)
		}
	}
	switch {
	case len(explain) > 0:
		for i, l := range explain {
			if i == synMaxFindings {
				fs = append(fs, moreSynListeners(cur, explain[i:]))
				break
			}
			fs = append(fs, synListenerFinding(in, l, c, cookiesMean, len(explain)))
		}
	case moved:
		fs = append(fs, synTransient(in, ls, c, cookiesMean))
	}
	if in.Prev == nil {
		if f, ok := synSinceBoot(cur); ok {
			fs = append(fs, f)
		}
	} else if !moved && c.hasFailed && c.cookiesFailed > 0 {
		fs = append(fs, synCookiesFailed(in, c))
	}
	if len(fs) == 0 && in.Prev != nil && !c.hasDrops && !c.hasReqFullDrop && !c.hasReqFullCookies && !c.hasSent {
		return nil, diag.Unknownf("TcpExt.ListenDrops/ListenOverflows, TCPReqQFull* and Syncookies* missing or reset in the window, and no listener's SYN queue is full")
	}
	return fs, nil
}

// synCounterEvidence lists the window's counters that apply.
func synCounterEvidence(in *diag.Input, c synCounters, cookiesMean bool) []diag.Evidence {
	w := units.Dur(in.Window())
	var ev []diag.Evidence
	rate := func(n int64) string {
		return fmt.Sprintf("+%d in %s (%.1f/s, netns-wide)", n, w, float64(n)/in.Window().Seconds())
	}
	crit := fmt.Sprintf("> 0; critical at >= %.0f/s", synCritRate)
	if c.hasReqFullDrop {
		ev = append(ev, diag.Evidence{Name: "SYNs dropped, SYN queue full, no cookies", Value: rate(c.reqFullDrop), Source: "/proc/net/netstat TcpExt.TCPReqQFullDrop", Threshold: crit})
	}
	if c.hasDrops {
		ev = append(ev, diag.Evidence{Name: "listen drops not caused by the accept queue", Value: rate(c.dropsNotOverflow), Source: "/proc/net/netstat TcpExt.ListenDrops - TcpExt.ListenOverflows", Threshold: crit})
	}
	th := "> 0"
	if !cookiesMean {
		th = "not judged: tcp_syncookies=2 sends a cookie for every SYN"
	}
	if c.hasReqFullCookies {
		ev = append(ev, diag.Evidence{Name: "SYN queue full, cookie chosen (sent unless the accept queue is full too)", Value: rate(c.reqFullCookies), Source: "/proc/net/netstat TcpExt.TCPReqQFullDoCookies", Threshold: th})
	}
	if c.hasSent {
		ev = append(ev, diag.Evidence{Name: "SYN cookies sent", Value: rate(c.cookiesSent), Source: "/proc/net/netstat TcpExt.SyncookiesSent", Threshold: th})
	}
	if c.hasRecv || c.hasFailed {
		ev = append(ev, diag.Evidence{Name: "SYN cookies returned valid / invalid", Value: fmt.Sprintf("+%d / +%d in %s", c.cookiesRecv, c.cookiesFailed, w), Source: "/proc/net/netstat TcpExt.SyncookiesRecv, TcpExt.SyncookiesFailed"})
	}
	return ev
}

func synSysctlEvidence(s *snapshot.Snapshot) []diag.Evidence {
	somax, hasSomax := s.SysctlInt("net.core.somaxconn")
	ev := []diag.Evidence{somaxEvidence(somax, hasSomax)}
	msb := diag.Evidence{Name: "tcp_max_syn_backlog", Source: "sysctl net.ipv4.tcp_max_syn_backlog"}
	if v, ok := s.SysctlInt("net.ipv4.tcp_max_syn_backlog"); ok {
		msb.Value = fmt.Sprintf("%d (with tcp_syncookies=0, SYNs from unproven peers are dropped once a listener's SYN queue passes 3/4 of it: %d)", v, v-v>>2)
		if c, ok := s.SysctlInt("net.ipv4.tcp_syncookies"); ok && c != 0 {
			msb.Value = fmt.Sprintf("%d: not a cap here (tcp_syncookies=%d): a listener's SYN queue is full at its own backlog, then SYNs get cookies", v, c)
		}
	} else {
		msb.Value = "unknown (not collected)"
	}
	sc := diag.Evidence{Name: "tcp_syncookies", Source: "sysctl net.ipv4.tcp_syncookies"}
	switch v, ok := s.SysctlInt("net.ipv4.tcp_syncookies"); {
	case !ok:
		sc.Value = "unknown (not collected)"
	case v == 0:
		sc.Value = "0: a full SYN queue drops SYNs; clients retransmit after 1 s, 2 s..."
		sc.Threshold = "1 recommended"
	case v == 1:
		sc.Value = "1: cookies are sent only while a listener's SYN queue is full"
	default:
		sc.Value = fmt.Sprintf("%d: a cookie for every SYN, the SYN queue is not used", v)
	}
	return append(ev, msb, sc)
}

// synSources describes where a listener's requests come from, and
// whether a few sources hold most of them.
func synSources(l *synListener) (string, bool, []netip.Addr) {
	type src struct {
		a netip.Addr
		n int
	}
	ss := make([]src, 0, len(l.srcs))
	for a, n := range l.srcs {
		ss = append(ss, src{a, n})
	}
	sort.Slice(ss, func(i, j int) bool {
		if ss[i].n != ss[j].n {
			return ss[i].n > ss[j].n
		}
		return ss[i].a.Less(ss[j].a)
	})
	top, parts := 0, []string{}
	var addrs []netip.Addr
	for i, s := range ss {
		if i < synFloodTop {
			top += s.n
			addrs = append(addrs, s.a)
		}
		if i < 5 {
			parts = append(parts, fmt.Sprintf("%s %d", s.a, s.n))
		}
	}
	if len(ss) > 5 {
		parts = append(parts, fmt.Sprintf("%d more sources", len(ss)-5))
	}
	share := 0.0
	if l.reqs > 0 {
		share = float64(top) / float64(l.reqs)
	}
	few := l.reqs > 0 && share >= synFloodShare
	return fmt.Sprintf("%d sources; top %d hold %s: %s", len(ss), min(synFloodTop, len(ss)), units.Pct(share), strings.Join(parts, ", ")), few, addrs
}

func synListenerFinding(in *diag.Input, l *synListener, c synCounters, cookiesMean bool, sharing int) diag.Finding {
	cur := in.Cur
	sk := l.sk
	sub := subject(cur, nil, sk)
	port := sk.Local.Port()
	who := "unknown owner"
	if sub.Command != "" {
		who = fmt.Sprintf("%s pid %d", sub.Command, sub.Pid)
	}
	qv := fmt.Sprintf("%d now", l.reqs)
	if l.prev >= 0 {
		qv += fmt.Sprintf(", %d in the previous sample", l.prev)
	}
	srcs, few, top := synSources(l)
	ev := []diag.Evidence{
		{Name: "SYN-RECV request sockets (SYN queue)", Value: qv, Source: "sock_diag SYN-RECV sockets on this listener's address and port", Threshold: fmt.Sprintf(">= %.0f%% of backlog %d, or one short of a backlog under %d", synNearFull*100, sk.SendQ, synSmallBacklog)},
		{Name: "backlog (Send-Q), also the SYN queue's limit", Value: fmt.Sprint(sk.SendQ), Source: "sock_diag LISTEN idiag_wqueue = min(listen() backlog, somaxconn)"},
		{Name: "request sources", Value: srcs, Source: "sock_diag SYN-RECV remote addresses", Threshold: fmt.Sprintf("top %d >= %s: flood or clients that never finish the handshake", synFloodTop, units.Pct(synFloodShare))},
		{Name: "SYN-ACKs retransmitted", Value: fmt.Sprintf("%d of %d requests (a retransmitted SYN-ACK was not acknowledged: typical of spoofed floods)", l.synacks, l.reqs), Source: "sock_diag SYN-RECV idiag_retrans"},
		{Name: "accept queue (Recv-Q)", Value: fmt.Sprint(sk.RecvQ), Source: "sock_diag LISTEN idiag_rqueue"},
		{Name: "owner", Value: tcpmodel.Who(cur, sk.Pids.List()), Source: "/proc/PID/fd socket inodes"},
	}
	sev := diag.Warning
	var summary string
	dropped, cookies := c.dropped(), int64(0)
	if cookiesMean {
		cookies = c.cookies()
	}
	// A SYN queue that filled and drained while the accept queue was full
	// overflowed with it: the one backlog is the fault and listen-overflow
	// its warning. A SYN queue full at the sample (clients that never
	// finish, TCP_DEFER_ACCEPT) is a fault of its own.
	both := in.Prev != nil && dropped == 0 && c.overflows > 0 && !l.fullNow() && l.acceptFull(in)
	if both {
		sev = diag.Info
	}
	shared := ""
	if sharing > 1 {
		shared = fmt.Sprintf(" (netns-wide counters, %d listeners near full)", sharing)
	}
	// A queue seen short of full filled and drained between samples.
	queue := fmt.Sprintf("has a full SYN queue (%d requests, backlog %d)", l.reqs, sk.SendQ)
	if !l.fullNow() {
		queue = fmt.Sprintf("had up to %d requests in its SYN queue when sampled (backlog %d)", max(l.reqs, l.prev), sk.SendQ)
	}
	switch {
	case in.Prev != nil && dropped > 0:
		rate := float64(dropped) / in.Window().Seconds()
		if rate >= synCritRate {
			sev = diag.Critical
		}
		summary = fmt.Sprintf("listener :%d (%s) %s: %d SYNs dropped in %s%s",
			port, who, queue, dropped, units.Dur(in.Window()), shared)
	case in.Prev != nil && cookies > 0:
		summary = fmt.Sprintf("listener :%d (%s) %s: %d SYNs found it full in %s and went to SYN cookies (%d cookies sent)%s",
			port, who, queue, cookies, units.Dur(in.Window()), c.cookiesSent, shared)
	default:
		summary = fmt.Sprintf("listener :%d (%s) has a full SYN queue (%d requests, backlog %d): the next SYNs get a cookie or are dropped",
			port, who, l.reqs, sk.SendQ)
	}
	// Few sources is the normal shape behind a load balancer or NAT; only
	// handshakes left unanswered (SYN-ACKs retransmitted) point at a flood.
	flood := few && 2*l.synacks >= l.reqs && l.reqs > 0
	if flood {
		summary += "; few sources hold most requests and leave their SYN-ACKs unanswered: a flood or broken clients"
	}
	if both {
		summary += fmt.Sprintf("; its accept queue is full too (listen-overflow): backlog %d bounds both queues", sk.SendQ)
	}
	if in.Prev != nil {
		ev = append(ev, synCounterEvidence(in, c, cookiesMean)...)
	}
	ev = append(ev, synRetransmitEvidence(in, sk.Local.AddrPort()))
	ev = append(ev, synSysctlEvidence(cur)...)
	return diag.Finding{Severity: sev, Subject: sub, Summary: summary, Evidence: ev, Fixes: synFixes(cur, sk, max(l.reqs, l.prev), flood, top)}
}

// synFixes: a larger backlog (somaxconn and the application's listen()),
// tcp_max_syn_backlog, cookies on, and the flood check.
func synFixes(s *snapshot.Snapshot, sk *snapshot.Socket, peak int, flood bool, top []netip.Addr) []diag.Fix {
	var fixes []diag.Fix
	port := uint16(0)
	var backlog int64
	if sk != nil {
		port, backlog = sk.Local.Port(), int64(sk.SendQ)
	}
	n := tcpmodel.BacklogTarget(int64(peak), backlog)
	if flood && sk != nil {
		srcs := make([]string, len(top))
		for i, a := range top {
			srcs[i] = a.String()
		}
		fixes = append(fixes, diag.Fix{Scope: "kernel", Target: "firewall",
			Text:    fmt.Sprintf("most requests to :%d come from %s: check whether they are a SYN flood (or clients that never finish the handshake); if so, rate-limit or block them", port, strings.Join(srcs, ", ")),
			Command: fmt.Sprintf("ss -tn state syn-recv '( sport = :%d )'; nft add rule inet filter input tcp dport %d ip saddr %s tcp flags syn limit rate over 100/second drop", port, port, srcs[0]),
			Risk:    "spoofed floods rotate source addresses: blocking one address does not help then, SYN cookies do; never block a real client pool by mistake"})
	}
	if sk != nil {
		somax, hasSomax := s.SysctlInt("net.core.somaxconn")
		fixes = append(fixes, backlogFixes(s, sk, n, somax, hasSomax)...)
	} else if somax, ok := s.SysctlInt("net.core.somaxconn"); !ok || somax < n {
		fixes = append(fixes, remedy.Somaxconn(n, somax, ok))
	}
	// tcp_max_syn_backlog caps nothing with cookies on: a SYN queue is
	// full at the listener's own backlog (inet_csk_reqsk_queue_is_full),
	// and then SYNs get cookies. Only with tcp_syncookies=0 does it drop
	// SYNs from unproven peers, once a queue passes 3/4 of it: it must
	// then be 4/3 of the backlog wanted.
	cookies, hasCookies := s.SysctlInt("net.ipv4.tcp_syncookies")
	if want := tcpmodel.NextPow2((4*n + 2) / 3); !hasCookies || cookies == 0 {
		if v, ok := s.SysctlInt("net.ipv4.tcp_max_syn_backlog"); !ok || v-v>>2 < n {
			fixes = append(fixes, remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl",
				Text: fmt.Sprintf("raise tcp_max_syn_backlog to %d: with tcp_syncookies=0, SYNs from unproven peers are dropped once a SYN queue passes 3/4 of it, before a backlog of %d fills (with cookies on it caps nothing)", want, n),
				Risk: "each pending request holds a small request socket (a few hundred bytes) for up to about a minute of SYN-ACK retries"},
				"60-syn-backlog.conf", remedy.Known("net.ipv4.tcp_max_syn_backlog", want, v, ok)))
		}
	}
	if !hasCookies || cookies != 1 {
		now := "unknown"
		if hasCookies {
			now = fmt.Sprint(cookies)
		}
		fixes = append(fixes, remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl",
			Text: fmt.Sprintf("answer SYNs with cookies when a SYN queue is full instead of dropping them (now %s)", now),
			Risk: "a cookie handshake keeps only what fits in the cookie and timestamp: MSS rounded to one of a few values, and without TCP timestamps no window scaling or SACK for that connection"},
			"", remedy.Setting("net.ipv4.tcp_syncookies", "1")))
	}
	return fixes
}

// synTransient is the finding when counters moved but no listener was
// seen with a near-full SYN queue in either sample.
func synTransient(in *diag.Input, ls []*synListener, c synCounters, cookiesMean bool) diag.Finding {
	cur := in.Cur
	dropped := c.dropped()
	sev := diag.Warning
	if float64(dropped)/in.Window().Seconds() >= synCritRate {
		sev = diag.Critical
	}
	var names []string
	for i, l := range ls {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(ls)-5))
			break
		}
		names = append(names, fmt.Sprintf(":%d %s backlog %d SYN-RECV %d", l.sk.Local.Port(), tcpmodel.Who(cur, l.sk.Pids.List()), l.sk.SendQ, max(l.reqs, l.prev)))
	}
	listed := "none"
	if len(names) > 0 {
		listed = strings.Join(names, "; ")
	}
	what := fmt.Sprintf("%d SYNs dropped", dropped)
	if dropped == 0 {
		what = fmt.Sprintf("%d SYNs went to SYN cookies (%d cookies sent)", c.cookies(), c.cookiesSent)
	}
	ev := append(synCounterEvidence(in, c, cookiesMean),
		diag.Evidence{Name: "listeners (fullest SYN queue first)", Value: listed, Source: "sock_diag LISTEN Send-Q and SYN-RECV sockets", Threshold: fmt.Sprintf("none at >= %.0f%% of its backlog (one short of a backlog under %d) in either sample", synNearFull*100, synSmallBacklog)})
	ev = append(ev, synRetransmitsByDest(cur))
	ev = append(ev, synSysctlEvidence(cur)...)
	fixes := []diag.Fix{{Scope: "application", Target: "diagnosis",
		Text:    "the SYN queue filled and drained between samples, or SYNs were dropped for another reason (no route, firewall hook, memory); sample faster during the burst and list the requests",
		Command: "tcpdoctor check --interval 1s; ss -tn state syn-recv"}}
	fixes = append(fixes, synFixes(cur, nil, 0, false, nil)...)
	return diag.Finding{Severity: sev, Subject: diag.Subject{Netns: cur.Netns.Name},
		Summary: fmt.Sprintf("%s in %s (SYN queue or request drops, not the accept queue) but no listener was seen with a near-full SYN queue (%d listeners)",
			what, units.Dur(in.Window()), len(ls)),
		Evidence: ev, Fixes: fixes}
}

// synCookiesFailed: ACKs carrying invalid cookies shortly after an
// overflow, with nothing else moving: stray or forged ACKs.
func synCookiesFailed(in *diag.Input, c synCounters) diag.Finding {
	return diag.Finding{Severity: diag.Info, Subject: diag.Subject{Netns: in.Cur.Netns.Name},
		Summary:  fmt.Sprintf("%d ACKs to listeners carried an invalid SYN cookie in %s (counted only within about 2 minutes of a SYN queue overflow)", c.cookiesFailed, units.Dur(in.Window())),
		Evidence: synCounterEvidence(in, c, true),
		Fixes: []diag.Fix{{Scope: "application", Target: "diagnosis",
			Text: "late ACKs of handshakes whose cookie expired, or forged ACKs (an ACK flood); watch whether the SYN counters move too", Command: "nstat -az TcpExtSyncookiesFailed TcpExtTCPReqQFullDrop TcpExtTCPReqQFullDoCookies"}}}
}

// synSinceBoot reports the totals as context for a single snapshot.
func synSinceBoot(cur *snapshot.Snapshot) (diag.Finding, bool) {
	var ev []diag.Evidence
	for _, n := range []string{"TcpExt.TCPReqQFullDrop", "TcpExt.TCPReqQFullDoCookies", "TcpExt.SyncookiesSent"} {
		if v, ok := cur.Counter(n); ok && v > 0 {
			ev = append(ev, diag.Evidence{Name: strings.TrimPrefix(n, "TcpExt."), Value: fmt.Sprintf("%d since the netns was created", v), Source: "/proc/net/netstat " + n})
		}
	}
	if len(ev) == 0 {
		return diag.Finding{}, false
	}
	return diag.Finding{Severity: diag.Info, Subject: diag.Subject{Netns: cur.Netns.Name},
		Summary:  "SYN queues have overflowed since boot (one sample: cannot tell whether it is happening now)",
		Evidence: ev,
		Fixes: []diag.Fix{{Scope: "application", Target: "diagnosis",
			Text: "take two samples to see whether the counters still move", Command: "tcpdoctor check --interval 5s"}}}, true
}

// moreSynListeners sums up the listeners beyond the cap.
func moreSynListeners(cur *snapshot.Snapshot, rest []*synListener) diag.Finding {
	var ports []string
	for i, l := range rest {
		if i == 20 {
			ports = append(ports, "...")
			break
		}
		ports = append(ports, fmt.Sprintf(":%d", l.sk.Local.Port()))
	}
	return diag.Finding{Severity: diag.Warning, Subject: diag.Subject{Netns: cur.Netns.Name},
		Summary:  fmt.Sprintf("%d more listeners with a full or nearly full SYN queue", len(rest)),
		Evidence: []diag.Evidence{{Name: "listeners", Value: strings.Join(ports, " "), Source: "sock_diag SYN-RECV sockets per listener", Threshold: fmt.Sprintf(">= %.0f%% of backlog", synNearFull*100)}},
		Fixes:    []diag.Fix{{Scope: "application", Target: "diagnosis", Text: "list the pending requests", Command: "ss -tn state syn-recv"}}}
}

// synRetransmitsByDest is every destination this namespace's clients
// retransmitted SYNs to (the client side of full queues), as eBPF counted.
func synRetransmitsByDest(cur *snapshot.Snapshot) diag.Evidence {
	ev := diag.Evidence{Name: "SYN retransmits by destination (eBPF)", Source: "eBPF tp_btf/tcp_retransmit_skb in SYN_SENT, clients in this namespace"}
	rs, ok := tcpmodel.SynRetransmits(cur, nil)
	switch {
	case !ok:
		ev.Value = "unknown: " + tcpmodel.ProgramMissing(cur, snapshot.ProgRetransmits)
	case len(rs) == 0:
		ev.Value = "none from clients in this namespace in " + units.Dur(cur.Events.Interval())
	default:
		ev.Value = tcpmodel.TopPeers(rs, 5) + " in " + units.Dur(cur.Events.Interval())
	}
	return ev
}
