// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"net/netip"
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
	// churnWarnRate: new connections per second from one opener to one
	// service that cost measurable time and CPU: each pays a handshake
	// round trip, slow start and, on the closing side, a TIME_WAIT socket.
	churnWarnRate = 100.0
	// churnInfoRate: a rate worth a note.
	churnInfoRate = 10.0
	// churnMaxFindings caps per-flow findings.
	churnMaxFindings = 10
)

func connectionChurn() diag.Rule {
	return diag.Rule{ID: "connection-churn", Title: "New connection per request instead of reuse", NeedsDelta: true, Check: checkConnectionChurn,
		// app-connection-cap's keeps: its verdict (capsOf) says which
		// churn is a capped server's clients turned away.
		Keeps: []diag.Keeper{diag.Keep(flowOpeners{}), diag.Keep(capHeld{}), diag.Keep(acceptedOwned{}), diag.Keep(queuedAt{})}}
}

// churnSeverity is a warning for a fast churn the host can fix (the
// opener is here), a note for slower churn, openers elsewhere, or
// connections that are reused (reused).
func churnSeverity(c *tcpmodel.Churn) diag.Severity {
	r := c.Rate()
	switch {
	case r >= churnWarnRate && c.LocalOpener && !reused(c):
		return diag.Warning
	case r >= churnInfoRate:
		return diag.Info
	}
	return 0
}

func checkConnectionChurn(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagGone(cur); err != nil {
		return nil, err
	}
	if in.Prev == nil || in.Window() <= 0 {
		return nil, diag.Unknownf("needs two samples: connection rates come from TIME_WAIT sockets closed during the window")
	}
	var hits []scored
	flows := tcpmodel.ChurnOf(cur, prevState(in), in.Window())
	if f, ok := resetChurnUnseen(in, flows); ok {
		hits = append(hits, scored{f: f, score: 0})
	}
	for _, c := range flows {
		sev := churnSeverity(c)
		if sev == 0 {
			continue
		}
		// Clients a server at its own limit turns away reconnect: that
		// churn is app-connection-cap's finding, not a second warning.
		capped := sev == diag.Warning && c.LocalService && diag.MemoOf(in, capsOf{}).turnsAway(c.Service)
		if capped {
			sev = diag.Info
		}
		f := churnFinding(in, c, sev)
		if capped {
			f.Summary += fmt.Sprintf("; %s is at its own connection limit and turns clients away (app-connection-cap): this churn is them reconnecting, and raising that limit ends it", c.Service)
			f.Evidence = append(f.Evidence, diag.Evidence{Name: "service at its own connection limit", Value: fmt.Sprintf("%s: see app-connection-cap's critical finding", c.Service),
				Source: "app-connection-cap's verdict on the same window", Threshold: fmt.Sprintf("a warning at >= %.0f/s otherwise; info here", churnWarnRate)})
		}
		hits = append(hits, scored{f: f, score: c.Rate()})
	}
	sort.SliceStable(hits, func(i, j int) bool {
		a, b := hits[i].f.Subject, hits[j].f.Subject
		ar, br := a.Remote.String(), b.Remote.String()
		return ar < br || ar == br && a.Local.String() < b.Local.String()
	})
	return rankFindings(hits, churnMaxFindings, func(n int) diag.Finding {
		return moreFinding(cur, n, "flows", "open a new connection per request", "sock_diag TIME-WAIT sockets by opener and service")
	}), churnOwnersGone(cur, hits)
}

func churnFinding(in *diag.Input, c *tcpmodel.Churn, sev diag.Severity) diag.Finding {
	cur := in.Cur
	pid := c.Openers.Top()
	if pid == 0 {
		pid = prevOpener(in, c.Flow)
	}
	cmd := tcpmodel.Command(cur, pid)
	if cmd == "" && pid != 0 {
		cmd = tcpmodel.Command(in.Prev, pid)
	}
	// Connections too short for any socket scan: the eBPF source saw the
	// process call connect().
	var byConnect *tcpmodel.ConnectProc
	if pid == 0 && c.Connects != nil {
		if byConnect = c.Connects.Top(); byConnect != nil {
			pid, cmd = byConnect.Pid, byConnect.Command
		}
	}
	opener := fmt.Sprintf("clients at %s", c.Opener)
	switch {
	case pid != 0:
		opener = fmt.Sprintf("%s (pid %d)", cmd, pid)
	case c.LocalOpener:
		opener = fmt.Sprintf("an unknown process at %s", c.Opener)
	}
	service, server := c.Service.String(), ""
	if c.LocalService {
		if s := c.Server.Top(); s != 0 {
			server = tcpmodel.Command(cur, s)
			service += fmt.Sprintf(" (%s pid %d)", server, s)
		}
	}
	// The new connections' lifetime: a pool's old ones do not count, and
	// it cannot show more than the window.
	life := c.NewLifetime()
	long := reused(c)
	sum := fmt.Sprintf("%s opens %.0f new connections/s to %s", opener, c.Rate(), service)
	switch {
	case long && c.Exchanges >= churnReusedTurns:
		sum += fmt.Sprintf(", each open about %s and carrying %d request/response turns or more", units.Dur(life), c.Exchanges)
	case long:
		sum += fmt.Sprintf(", each open %s or more", units.Dur(life))
	case life > 0:
		sum += fmt.Sprintf(", each open about %s", units.Dur(life))
	}
	if life < churnShortLife && !long {
		sum += ": about one request per connection"
	}
	byService := c.ServiceCloses()
	// Connections ended by a reset of their own side's close leave no
	// TIME_WAIT (close() with SO_LINGER 0, or with unread data).
	byReset := byService && 2*c.ResetByService > c.ClosedByService+c.ResetByService ||
		!byService && 2*c.ResetByOpener > c.ClosedByOpener+c.ResetByOpener
	switch {
	case byService && byReset:
		sum += "; the service ends them with a reset (its close() with SO_LINGER 0 or with the request unread: no TIME_WAIT)"
	case byReset:
		sum += "; the opener ends each with a reset (close() with SO_LINGER 0: no TIME_WAIT, so each close costs the service a reset instead)"
	case byService && long:
		sum += "; the service closes first (TIME_WAIT on its side)"
	case byService:
		sum += "; the service closes first (TIME_WAIT on its side: " + remedy.ServerCloses(server) + ")"
	default:
		sum += "; the opener closes first (TIME_WAIT on its side, holding its ports)"
	}
	if oldCloses(c) {
		sum += fmt.Sprintf("; %d of the %d closed were already open at the previous sample and not replaced (a restart, a pool draining, the end of a load): not in the rate", c.Unreplaced(), c.Closed())
	}
	if long {
		// Either side may close first when the service ends a connection
		// with "Connection: close" (wrk against nginx: both, about half each).
		sum += "; these connections are reused, and end after a number of requests or an idle time set by the client's pool (a maximum lifetime) or by the service: " + remedy.KeepAliveLimits(server)
	}
	ev := []diag.Evidence{
		closedEvidence(c),
		{Name: "open now", Value: fmt.Sprintf("%d, %d of them opened in the window (their mean lifetime %s by Little's law: opened in the window and open / rate; %s over all open)", c.Open, c.OpenNew, units.Dur(life), units.Dur(c.Lifetime())),
			Source: "sock_diag connections of the flow in other states; the previous sample for which are new"},
	}
	if c.LocalOpener {
		v := c.Openers.List(cur)
		if v == "" {
			v = "unknown: the open connections have no known owner"
			if why := tcpmodel.OwnersMissing(cur); why != "" {
				v += "; owner scan: " + why
			}
		}
		src := "/proc/PID/fd socket inodes of the flow's open connections"
		switch {
		case byConnect != nil:
			v = fmt.Sprintf("%s(pid %d) from its connect() calls: no socket of the flow had an owner when sampled", cmd, pid)
			src = "eBPF tp_btf/inet_sock_set_state: CLOSE->SYN_SENT in the caller's context"
		case c.Openers.Len() == 0 && pid != 0:
			v = tcpmodel.Who(in.Prev, []int{pid}) + " (from the previous sample)"
		case pid == 0 && life < time.Second:
			if why, skipped := cur.Failed(snapshot.SourceFlowOwners); skipped {
				v += fmt.Sprintf(" (connections living about %s ended before the owner scan reached them; %s)", units.Dur(life), why)
			} else {
				v += fmt.Sprintf(" (connections living about %s ended before the owner scan and its second look reached them)", units.Dur(life))
			}
		}
		if pid == 0 && c.Connects == nil {
			v += "; the eBPF source (--bpf) would name it from its connect() calls: " + tcpmodel.EventsMissing(cur)
		}
		ev = append(ev, diag.Evidence{Name: "opener", Value: v, Source: src})
		if c.Connects != nil {
			ev = append(ev, connectsEvidence(c.Connects))
		}
	} else {
		ev = append(ev, diag.Evidence{Name: "opener", Value: fmt.Sprintf("%s is not on this host (in this namespace): the pool to fix is the client's", c.Opener), Source: "no client-side socket of the flow here"})
	}
	ev = append(ev, diag.Evidence{Name: "resets on this flow (eBPF)", Value: tcpmodel.ResetSummary(cur, tcpmodel.OnFlow(c.Opener, c.Service)),
		Source: "eBPF tp_btf/tcp_send_reset (reason: the kernel's sk_rst_reason; TCP_STATE is close() with SO_LINGER 0) and tcp_receive_reset; an abortive close leaves no TIME_WAIT, so the closes above miss it"})
	for _, k := range []string{"Tcp.ActiveOpens", "Tcp.PassiveOpens"} {
		if d, ok := in.CounterDelta(k); ok && d >= 0 {
			ev = append(ev, diag.Evidence{Name: k + " (netns)", Value: fmt.Sprintf("%.1f/s", float64(d)/c.Window.Seconds()), Source: "/proc/net/snmp " + k})
		}
	}
	var fixes []diag.Fix
	switch {
	case long:
		if c.LocalService {
			fixes = append(fixes, diag.Fix{Scope: "application", Target: "server", Text: "let each connection carry more requests if the reconnects matter: " + remedy.KeepAliveLimits(server),
				Risk: "a cap on requests per connection frees per-connection memory now and then; raise it, do not remove it"})
		}
		who := "the opener"
		if cmd != "" {
			who = cmd
		}
		fixes = append(fixes, diag.Fix{Scope: "application", Target: "connection-pool", Text: fmt.Sprintf("let %s's pool keep connections to %s longer if the reconnects matter: its maximum connection lifetime and idle timeout (HikariCP maxLifetime, idleTimeout; Go Transport.IdleConnTimeout; OkHttp ConnectionPool keep-alive)", who, c.Service),
			Risk: "a pool's lifetime must stay below the server's and any middlebox's idle timeout, or it reuses connections they already dropped"})
	default:
		fixes = append(fixes, remedy.Reuse(cmd, c.Service, poolSize(c.Open)))
		switch {
		case byReset && !byService:
			// The opener ends them: the service has nothing to change.
		case byService && c.LocalService:
			fixes = append(fixes, diag.Fix{Scope: "application", Target: "server", Text: "make the service keep connections open between requests with HTTP/1.1 keep-alive, and have clients send Connection: keep-alive; the service's settings: " + remedy.KeepAliveLimits(server),
				Risk: "idle connections use memory and a file descriptor each"})
		case c.LocalService:
			// A keep-alive client closes first when the response says it
			// must (wrk against python3 -m http.server: most closes).
			fixes = append(fixes, diag.Fix{Scope: "application", Target: "server", Text: "if the client already keeps connections alive, the service may be ending them: a client closes first itself when the server says so (HTTP/1.0, or Connection: close; python3's http.server answers HTTP/1.0 by default: set protocol_version = \"HTTP/1.1\" on its handler); make the service keep connections open between requests",
				Risk: "idle connections use memory and a file descriptor each"})
		}
	}
	sub := diag.Subject{Netns: cur.Netns.Name, Local: diag.Host(c.Opener), Remote: diag.At(c.Service), Pid: pid, Command: cmd}
	if c.LocalService {
		sub.Service = diag.At(c.Service)
	}
	return diag.Finding{Severity: sev, Subject: sub, Summary: sum, Evidence: ev, Fixes: fixes}
}

// closedEvidence is the closes in the window: TIME_WAIT sockets, and the
// resets of abortive closes where the eBPF source counted them.
func closedEvidence(c *tcpmodel.Churn) diag.Evidence {
	w := units.Dur(c.Window)
	tw := c.ClosedByOpener + c.ClosedByService
	v := fmt.Sprintf("%.1f/s: %d in %s (%d closed first by the opener, %d by the service), %d in the last %s", c.CloseRate(), tw, w, c.ClosedByOpener, c.ClosedByService, c.ClosedRecent, units.Dur(c.Recent))
	src := "sock_diag TIME-WAIT sockets younger than the window (idiag_expires), either side; the higher of the window's rate and the last second's (TIME_WAIT sockets are recycled within the window at high rates)"
	if n := c.Resets(); n > 0 {
		v = fmt.Sprintf("%.1f/s: %d with a FIN in %s (%d closed first by the opener, %d by the service), %d in the last %s; %d with a reset in %s (%d by the opener, %d by the service)",
			c.CloseRate(), tw, w, c.ClosedByOpener, c.ClosedByService, c.ClosedRecent, units.Dur(c.Recent), n, units.Dur(c.ResetInterval), c.ResetByOpener, c.ResetByService)
		src += "; eBPF tp_btf/tcp_send_reset for resets sent by a side's own close (TCP_STATE: close() with SO_LINGER 0; TCP_ABORT_ON_CLOSE: closed unread), which leave no TIME_WAIT"
	}
	return diag.Evidence{Name: "connections closed", Value: v, Source: src,
		Threshold: fmt.Sprintf("warning >= %.0f/s with the opener on this host, info >= %.0f/s", churnWarnRate, churnInfoRate)}
}

// churnShortLife: connections living less than this on average carry
// about one request each.
const churnShortLife = 100 * time.Millisecond

// churnLongLife: connections living this long on average are reused
// (wrk against a stock nginx: about 2 s, ended by keepalive_requests
// 1000), and their setup is a small share of their use: a note at most,
// whatever the rate. The port and TIME_WAIT rules judge the ports they
// hold.
const churnLongLife = time.Second

// reused: the connections opened in the window live churnLongLife on
// average (Churn.NewLifetime, so that a pool's old connections beside
// one-request ones do not count), or three quarters of a shorter window,
// the most that estimate can show; or the open ones have carried
// churnReusedTurns request/response turns.
func reused(c *tcpmodel.Churn) bool {
	return c.NewLifetime() >= min(churnLongLife, c.Window*3/4) || c.Exchanges >= churnReusedTurns
}

// churnReusedTurns: open connections that have carried this many
// request/response turns (Churn.Exchanges, the median) are reused
// whatever they live: wrk against nginx at 68,000 requests/s over 50
// connections ends each after 1,000 requests in about 0.7 s. An SMTP
// session of one mail is about 7.
const churnReusedTurns = 32

// oldCloses: a quarter or more of the connections closed in the window
// were already open at the previous sample and were not replaced, worth
// saying: Churn.Rate leaves them out.
func oldCloses(c *tcpmodel.Churn) bool {
	return c.Closed() > 0 && 4*c.Unreplaced() >= c.Closed()
}

// connectsEvidence is the eBPF count of connect() calls to one service.
func connectsEvidence(cn *tcpmodel.Connects) diag.Evidence {
	w := units.Dur(cn.Interval)
	v := fmt.Sprintf("%d connect() calls in %s (%.1f/s)", cn.Opens, w, float64(cn.Opens)/max(cn.Interval.Seconds(), 1e-9))
	if cn.Failed > 0 {
		v += fmt.Sprintf(", %d failed for want of a port (EADDRNOTAVAIL)", cn.Failed)
	}
	var who []string
	for i, p := range cn.Procs {
		if i == 3 {
			who = append(who, fmt.Sprintf("%d more", len(cn.Procs)-i))
			break
		}
		who = append(who, fmt.Sprintf("%s(pid %d) %d", p.Command, p.Pid, p.Opens))
	}
	if len(who) > 0 {
		v += ": " + strings.Join(who, ", ")
	}
	return diag.Evidence{Name: "connects (eBPF)", Value: v, Source: "eBPF tp_btf/inet_sock_set_state: CLOSE->SYN_SENT (connect()) and SYN_SENT->CLOSE without a source port, counted in the kernel per process and destination"}
}

// churnOwnersGone: unknown when a flow's opener went unnamed because no
// process could be named at all.
func churnOwnersGone(cur *snapshot.Snapshot, hits []scored) error {
	for _, h := range hits {
		if h.f.Subject.Pid == 0 {
			return ownersGone(cur, snapshot.Established, snapshot.SynSent, snapshot.CloseWait)
		}
	}
	return nil
}

// resetChurnUnseen is the churn of connections this namespace opens and
// ends with a reset (close() with SO_LINGER 0 leaves no TIME_WAIT) when
// the eBPF source, which would name the flow, did not count resets: the
// namespace's counters show it. Tcp.ActiveOpens counts the connect()s;
// TcpExt.TCPAbortOnData (close() with SO_LINGER 0, or data arriving after
// close), TCPAbortOnClose (closed unread) and TCPAbortOnLinger the
// abortive closes, each a reset (Tcp.OutRsts). It fires when the opens
// the flows' TIME_WAIT closes leave unexplained reach churnWarnRate and
// at least half of them match an abortive close.
func resetChurnUnseen(in *diag.Input, flows []*tcpmodel.Churn) (diag.Finding, bool) {
	cur := in.Cur
	if tcpmodel.ProgramMissing(cur, snapshot.ProgResetsSent) == "" {
		return diag.Finding{}, false // the flows carry their resets
	}
	w := in.Window().Seconds()
	opens, ok := in.CounterDelta("Tcp.ActiveOpens")
	if !ok || w <= 0 || opens <= 0 {
		return diag.Finding{}, false
	}
	var aborts int64
	for _, k := range []string{"TcpExt.TCPAbortOnData", "TcpExt.TCPAbortOnClose", "TcpExt.TCPAbortOnLinger"} {
		if d, ok := in.CounterDelta(k); ok && d > 0 {
			aborts += d
		}
	}
	explained := 0
	for _, c := range flows {
		if c.LocalOpener {
			explained += c.Closed()
		}
	}
	unexplained := opens - int64(explained)
	if float64(unexplained)/w < churnWarnRate || 2*aborts < unexplained {
		return diag.Finding{}, false
	}
	rate := float64(unexplained) / w
	passive, _ := in.CounterDelta("Tcp.PassiveOpens")
	rsts, _ := in.CounterDelta("Tcp.OutRsts")
	svc, how := resetChurnService(in, opens, passive)
	sub := diag.Subject{Netns: cur.Netns.Name}
	sum := fmt.Sprintf("processes in this namespace open %.0f connections/s and end them with a reset, leaving no TIME_WAIT (close() with SO_LINGER 0, or closed with data unread)", rate)
	if svc.IsValid() {
		sub.Remote = diag.At(svc)
		sum += fmt.Sprintf(", most likely to %s (%s)", svc, how)
		if tcpmodel.ListenersOf(cur).Of(&snapshot.Socket{State: snapshot.Established, Local: snapshot.EndpointOf(svc)}) != nil {
			sub.Service = diag.At(svc)
		}
	}
	sum += ": about one request per connection; which process opens them is not known without the eBPF source"
	sev := diag.Warning
	if svc.IsValid() && diag.MemoOf(in, capsOf{}).turnsAway(svc) {
		sev = diag.Info
		sum += fmt.Sprintf("; %s is at its own connection limit and turns clients away (app-connection-cap): this churn is them reconnecting", svc)
	}
	ev := []diag.Evidence{
		{Name: "Tcp.ActiveOpens (netns)", Value: fmt.Sprintf("%.1f/s: %d in %s, %d of them closed with a FIN (TIME_WAIT) by the flows above", float64(opens)/w, opens, units.Dur(in.Window()), explained),
			Source: "/proc/net/snmp Tcp.ActiveOpens; sock_diag TIME-WAIT sockets", Threshold: fmt.Sprintf("warning when those without a TIME_WAIT reach %.0f/s", churnWarnRate)},
		{Name: "abortive closes (netns)", Value: fmt.Sprintf("%.1f/s: %d (Tcp.OutRsts %d, Tcp.PassiveOpens %d)", float64(aborts)/w, aborts, rsts, passive),
			Source: "/proc/net/netstat TcpExt.TCPAbortOnData (close() with SO_LINGER 0, or data after close) + TCPAbortOnClose (closed unread) + TCPAbortOnLinger; /proc/net/snmp", Threshold: "at least half of the opens without a TIME_WAIT"},
		{Name: "opener", Value: "unknown: the connections end before a socket scan sees them; the eBPF source (--bpf) names the process and the destination from its connect() calls and resets: " + tcpmodel.ProgramMissing(cur, snapshot.ProgResetsSent),
			Source: "sock_diag, /proc/PID/fd"},
	}
	return diag.Finding{Severity: sev, Subject: sub, Summary: sum, Evidence: ev,
		Fixes: []diag.Fix{remedy.Reuse("", svc, poolSize(1))}}, true
}

// resetChurnService is the service the unseen reset churn most likely
// goes to, and how it was chosen: the destination of most connections
// the current sample caught that the previous one did not have, else the
// one listener of the namespace when it accepted about as many
// connections as the namespace opened (within a tenth).
func resetChurnService(in *diag.Input, opens, passive int64) (netip.AddrPort, string) {
	cur := in.Cur
	ls := tcpmodel.ListenersOf(cur)
	prev := prevState(in)
	n := map[netip.AddrPort]int{}
	var best netip.AddrPort
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		switch sk.State {
		case snapshot.Listen, snapshot.TimeWait, snapshot.Close, snapshot.BoundInactive:
			continue
		}
		if ls.Of(sk) != nil {
			continue
		}
		if prev != nil {
			if _, was := prev(sk); was {
				continue
			}
		}
		d := tcpmodel.Unmapped(sk.Remote.AddrPort())
		n[d]++
		if n[d] > n[best] || n[d] == n[best] && d.String() < best.String() {
			best = d
		}
	}
	if best.IsValid() {
		return best, units.N(n[best], "new connection") + " to it caught at the sample"
	}
	var only *snapshot.Socket
	for i := range cur.Sockets {
		if sk := &cur.Sockets[i]; sk.State == snapshot.Listen {
			if only != nil {
				return netip.AddrPort{}, ""
			}
			only = sk
		}
	}
	if only != nil && 10*abs64(passive-opens) <= opens {
		a := only.Local.Addr().Unmap()
		if a.IsUnspecified() {
			a = netip.AddrFrom4([4]byte{127, 0, 0, 1})
			if only.Local.Addr().Is6() && !only.Local.Addr().Is4In6() {
				a = netip.IPv6Loopback()
			}
		}
		return netip.AddrPortFrom(a, only.Local.Port()), fmt.Sprintf("the namespace's only listener, which accepted %d connections as it opened %d", passive, opens)
	}
	return netip.AddrPort{}, ""
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
