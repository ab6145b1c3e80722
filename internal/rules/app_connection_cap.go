// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// capWarnFrac is the share of its own limit a server holds from which
// the finding is a warning; at the limit (tcpmodel.AtCap: less 5 %, at
// least 2) it is critical: the same headroom fd-exhaustion gives open
// files (80 %, 95 %).
const capWarnFrac = 0.80

// capTurnedRate is the rate (per second, over the window) of connections
// a server at its cap ends itself from which clients count as turned
// away: the finding is then critical.
const capTurnedRate = 1.0

func appConnectionCap() diag.Rule {
	return diag.Rule{ID: "app-connection-cap", Title: "A server at its own connection limit", Check: checkAppCap,
		Keeps: []diag.Keeper{diag.Keep(capHeld{}), diag.Keep(acceptedOwned{}), diag.Keep(queuedAt{})}}
}

// capHeld keeps what each capped process held in the window's first
// sample (tcpmodel.CapHeld): a plateau shows as the same count twice.
type capHeld struct{}

// Keep tallies s.
func (capHeld) Keep(s *snapshot.Snapshot) map[int]int { return tcpmodel.CapHeld(s) }

// capsOf is the rule's verdict on a window, worked out once for it and
// for connection-churn, which leaves to it the churn of clients a capped
// server turns away.
type capsOf struct{}

// capVerdict is capsOf's result: the findings, the rule's unknown error,
// and the listeners of the servers turning clients away (a critical
// finding).
type capVerdict struct {
	fs      []diag.Finding
	err     error
	turning []*snapshot.Socket
}

// Compute judges in.
func (capsOf) Compute(in *diag.Input) capVerdict {
	fs, turning, err := judgeAppCaps(in)
	return capVerdict{fs: fs, err: err, turning: turning}
}

// turnsAway says whether a server at its cap turns clients away from
// the listener service (its address and port) in this window.
func (v capVerdict) turnsAway(service netip.AddrPort) bool {
	for _, ln := range v.turning {
		if tcpmodel.SameListener(ln.Local.AddrPort(), service) {
			return true
		}
	}
	return false
}

func checkAppCap(in *diag.Input) ([]diag.Finding, error) {
	v := diag.MemoOf(in, capsOf{})
	// The memo is shared: hand out copies.
	fs := make([]diag.Finding, len(v.fs))
	for i, f := range v.fs {
		f.Evidence, f.Fixes = slices.Clone(f.Evidence), slices.Clone(f.Fixes)
		fs[i] = f
	}
	return fs, v.err
}

func judgeAppCaps(in *diag.Input) ([]diag.Finding, []*snapshot.Socket, error) {
	cur := in.Cur
	if err := sockdiagGone(cur); err != nil {
		return nil, nil, err
	}
	msg, failed := cur.Failed(snapshot.SourceAppCaps)
	// A recording drops an empty list (omitempty): the source's own
	// record says whether it ran.
	read := false
	for _, st := range cur.Sources {
		read = read || st.Source == snapshot.SourceAppCaps && st.OK
	}
	if cur.AppCaps == nil && !read {
		switch why := tcpmodel.OwnersMissing(cur); {
		case failed:
			return nil, nil, diag.Unknownf("servers' own limits not read: %s", msg)
		case why != "":
			return nil, nil, diag.Unknownf("servers' own limits not read: the listeners' owners are unknown: %s", why)
		default:
			return nil, nil, diag.Unknownf("servers' own limits not read (not collected in this snapshot)")
		}
	}
	var prevHeld map[int]int
	if in.Prev != nil {
		prevHeld, _ = diag.KeptOf(in, capHeld{})
	}
	var fs []diag.Finding
	var turning []*snapshot.Socket
	for i := range cur.AppCaps {
		c := &cur.AppCaps[i]
		u := tcpmodel.CapUseOf(cur, c)
		// Judged over the window: a holder at the line in either sample
		// (a busy nginx worker swings by tens of connections between
		// turning clients away and reopening its upstream ones).
		held := max(u.Held[u.Top], prevHeld[u.Top])
		if lim := tcpmodel.CapLimitIn(cur, c); lim <= 0 || float64(held) < capWarnFrac*float64(lim) {
			continue
		}
		f := capFinding(in, &u, prevHeld)
		if f.Severity == diag.Critical {
			turning = append(turning, u.Listeners...)
		}
		fs = append(fs, f)
	}
	for _, h := range measuredCaps(in) {
		fs = append(fs, h.f)
		turning = append(turning, h.ln)
	}
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Severity > fs[j].Severity })
	if failed && len(fs) == 0 {
		return nil, nil, diag.Unknownf("some servers' own limits not read: %s", msg)
	}
	return fs, turning, nil
}

// capFinding is the finding for a server at its cap.
func capFinding(in *diag.Input, u *tcpmodel.CapUse, prevHeld map[int]int) diag.Finding {
	cur, c := in.Cur, u.Cap
	win := in.Window()
	held := u.Held[u.Top]
	limit := tcpmodel.CapLimitIn(cur, c)
	sub := diag.Subject{Netns: cur.Netns.Name, Pid: c.Pid, Command: c.Command}
	var addrs []string
	for _, ln := range u.Listeners {
		addrs = append(addrs, tcpmodel.Unmapped(ln.Local.AddrPort()).String())
	}
	if len(u.Listeners) > 0 {
		first := diag.At(tcpmodel.Unmapped(u.Listeners[0].Local.AddrPort()))
		sub.Local, sub.Service = first, first
	}
	whose := fmt.Sprintf("%s (pid %d)", c.Command, c.Pid)
	if c.Per == snapshot.CapPerProcess && u.Top != c.Pid {
		whose = fmt.Sprintf("%s worker pid %d", c.Command, u.Top)
	}
	ev := []diag.Evidence{{Name: c.Setting, Value: fmt.Sprint(c.Value), Source: c.Source + " (read through /proc/PID/root)"}}
	setting := fmt.Sprintf("%s %d", c.Setting, c.Value)
	switch reserved := c.Value - limit; {
	case c.App == "memcached" && reserved > 0:
		setting += fmt.Sprintf(", %d of them for clients", limit)
		v := fmt.Sprintf("%d: memcached turns a client away once accept() returns a descriptor at -c - 1 (%d) or above, and holds %d descriptors besides its clients'", reserved, c.Value-1, reserved-1)
		src := "/proc/PID/fd open files less its TCP connections (sock_diag), plus one"
		if own := cur.Procs[c.Pid]; own == nil || own.FDs < 0 {
			v = fmt.Sprintf("about %d: memcached turns a client away once accept() returns a descriptor at -c - 1 or above; estimated from its threads (4 descriptors each plus 9, memcached 1.6.18): its open files were not read", reserved)
			src = "internal/appcaps estimate from -t"
		}
		ev = append(ev, diag.Evidence{Name: "kept from -c for itself", Value: v, Source: src})
	case c.App == "nginx" && reserved > 0:
		ev = append(ev, diag.Evidence{Name: "kept from worker_connections by each worker",
			Value:  fmt.Sprintf("%d: one for its channel to the master, and %d (worker_connections / 16) it keeps free by closing connections still waiting for a request and idle keep-alive ones as newcomers need slots (\"worker_connections are not enough, reusing connections\", a warn-level log line)", reserved, reserved-1),
			Source: "nginx's own connection handling (ngx_drain_connections); tcpmodel.NginxReserve"})
	case reserved > 0:
		setting += fmt.Sprintf(", %d of them for ordinary clients", limit)
	}
	for _, r := range c.Related {
		ev = append(ev, diag.Evidence{Name: r.Name, Value: r.Value, Source: r.Source})
	}
	var parts string
	if c.Per == snapshot.CapPerProcess {
		nl := held - u.Clients[u.Top] - u.Outgoing[u.Top]
		ls := "listeners"
		if nl == 1 {
			ls = "listener"
		}
		parts = fmt.Sprintf(" (%d clients, %d it opened, %d %s)", u.Clients[u.Top], u.Outgoing[u.Top], nl, ls)
	}
	of := limit
	if c.App == "nginx" {
		// Held against worker_connections itself: an nginx worker keeps
		// part of it (above) and is at its cap below it.
		of = c.Value
	}
	heldV := fmt.Sprintf("%d of %d%s", held, of, parts)
	if p, ok := prevHeld[u.Top]; ok {
		heldV += fmt.Sprintf("; %d at the window's start", p)
		if p == held {
			heldV += " (flat)"
		}
	}
	if len(u.Pids) > 1 {
		var each []string
		for _, pid := range u.Pids {
			each = append(each, fmt.Sprintf("%d: %d", pid, u.Held[pid]))
		}
		heldV += "; each: " + strings.Join(each, ", ")
	}
	src := "sock_diag sockets of the pid (/proc/PID/fd)"
	if c.Per == snapshot.CapPerListener {
		src = "sock_diag connections accepted on its listeners"
	}
	ev = append(ev, diag.Evidence{Name: "connections held by " + whose, Value: heldV, Source: src,
		Threshold: capThreshold(limit, of)})

	// Who was turned away in the window.
	passive, hasPassive := in.CounterDelta("Tcp.PassiveOpens")
	ta := tcpmodel.TurnedAwayOf(cur, u, prevState(in), win, passive, hasPassive)
	// Headroom as fd-exhaustion judges open files: at the limit (less
	// 5 %, at least 2) the next client is turned away, critical even
	// before one is seen; from capWarnFrac a warning. A pooler holding
	// the connections sized its pool to the limit on purpose: a note.
	atCap := tcpmodel.AtCap(held, limit)
	pooler := tcpmodel.PoolerHolding(cur, u.Listeners)
	sev := diag.Warning
	if atCap {
		sev = diag.Critical
	}
	if pooler != "" {
		sev = diag.Info
	}
	var perSec float64
	turned := ""
	if win > 0 {
		secs := win.Seconds()
		ended := float64(ta.Ended())
		perSec = ended / secs
		v := fmt.Sprintf("%d closed by the server first in %s (%.1f/s)", ta.Closed, units.Dur(win), float64(ta.Closed)/secs)
		src := "sock_diag TIME-WAIT sockets on its listeners younger than the window"
		if ta.HasCloses {
			v += fmt.Sprintf("; %d accepted connections it closed first (eBPF)", ta.Closes)
			src += "; eBPF tp_btf/inet_sock_set_state active closes"
		}
		if ta.HasEstimate {
			v += fmt.Sprintf("; about %d accepted in the namespace and gone within the window (%.0f/s)", ta.Estimated, float64(ta.Estimated)/secs)
			src += "; /proc/net/snmp Tcp.PassiveOpens less the accepted connections open now that are new and the other listeners' young TIME-WAIT (netns-wide: a reset or a close by the client first leaves nothing on the server)"
		}
		ev = append(ev, diag.Evidence{Name: "connections it ended on " + strings.Join(addrs, ", "), Value: v, Source: src})
		// Clients turned away rather than served and done: resets from
		// requests that came after the close, or more connections ended
		// in the window than the server holds at once.
		evidenceOfRequests := ended >= float64(held)
		if ta.HasResets {
			var rs []string
			for r, n := range ta.ResetsSent {
				rs = append(rs, fmt.Sprintf("%s %d", r, n))
			}
			sort.Strings(rs)
			if len(rs) == 0 {
				rs = []string{"none"}
			}
			ev = append(ev, diag.Evidence{Name: "resets sent from its listeners' ports (eBPF)", Value: strings.Join(rs, ", "),
				Source: "eBPF tp_btf/tcp_send_reset: TCP_TIMEWAIT_SOCKET and TCP_ABORT_ON_DATA are requests that arrived after the server closed, TCP_ABORT_ON_CLOSE requests it closed unread"})
			evidenceOfRequests = evidenceOfRequests || float64(ta.Resets())/secs >= capTurnedRate
		} else if rst, ok := in.CounterDelta("Tcp.OutRsts"); ok {
			ev = append(ev, diag.Evidence{Name: "resets sent (netns)", Value: fmt.Sprintf("%d in %s", rst, units.Dur(win)), Source: "/proc/net/snmp Tcp.OutRsts (eBPF reset reasons not loaded)"})
			evidenceOfRequests = evidenceOfRequests || float64(rst)/secs >= capTurnedRate
		}
		if ta.HasClientResets && ta.ResetsToClients > 0 {
			ev = append(ev, diag.Evidence{Name: "resets its clients on this host received (eBPF)", Value: fmt.Sprintf("%d in %s", ta.ResetsToClients, units.Dur(win)),
				Source: "eBPF tp_btf/tcp_receive_reset, connections from this namespace to its listeners"})
		}
		// Turned away proves the limit binds, even when the sample
		// caught the holder a little below it (nginx's workers swing by
		// a few connections between turning clients away).
		if evidenceOfRequests && perSec >= capTurnedRate {
			sev = diag.Critical
			turned = fmt.Sprintf(" and ends %.0f connections/s on %s right after accepting them: clients are turned away", perSec, strings.Join(addrs, ", "))
		}
	}
	// A server that stops accepting at its limit leaves the clients in
	// its accept queue instead (listen-overflow names the overflow).
	for _, ln := range u.Listeners {
		if acceptNearFull(ln.RecvQ, ln.SendQ) {
			ev = append(ev, diag.Evidence{Name: "accept queue of " + tcpmodel.Unmapped(ln.Local.AddrPort()).String(), Value: fmt.Sprintf("%d of %d", ln.RecvQ, ln.SendQ),
				Source: "sock_diag LISTEN Recv-Q / Send-Q", Threshold: fmt.Sprintf(">= %.0f%% of the backlog: it stopped accepting", listenNearFull*100)})
			if turned == "" && atCap {
				sev = diag.Critical
				turned = fmt.Sprintf(" and has stopped accepting: the accept queue of %s is full, clients wait in it or are dropped", tcpmodel.Unmapped(ln.Local.AddrPort()))
			}
			break
		}
	}
	if turned == "" {
		switch {
		case pooler != "":
			turned = fmt.Sprintf("; nobody was seen turned away in the window yet, and %s (a pooler) holds them: its pool is sized to the limit, its clients wait in it", pooler)
		case atCap:
			turned = "; nobody was seen turned away in the window yet, but the next client will be (at the limit: critical, as fd-exhaustion judges open files)"
		default:
			turned = fmt.Sprintf("; %d left before the limit (warning from %.0f%%)", limit-int64(held), capWarnFrac*100)
		}
	}
	summary := fmt.Sprintf("%s is at its %s (%s): %s holds %d connections%s", c.Command, setting, c.Source, whose, held, turned)
	if c.Per == snapshot.CapPerListener {
		summary = fmt.Sprintf("%s is at its %s (%s): %d connections on its listeners%s", whose, setting, c.Source, held, turned)
	}
	if own := cur.Procs[u.Top]; own != nil && own.NofileSoft != nil {
		ev = append(ev, diag.Evidence{Name: "open files limit of pid " + fmt.Sprint(u.Top), Value: fmt.Sprint(*own.NofileSoft), Source: "/proc/PID/limits Max open files (soft)"})
	}
	fixes := capFixes(cur, u, perSec, &ev)
	return diag.Finding{Severity: sev, Subject: sub, Summary: summary, Evidence: ev, Fixes: fixes}
}

// capThreshold says from how many held connections a server is at its
// cap: limit less 5 %, at least 2; of is what the held count is shown
// against (worker_connections for nginx, which keeps part of it).
func capThreshold(limit, of int64) string {
	if of != limit {
		return fmt.Sprintf("at the cap from %d (the %d it gives its connections less 5%%, at least 2)", tcpmodel.CapNear(limit), limit)
	}
	return fmt.Sprintf("at the cap from %d (the limit less 5%%, at least 2)", tcpmodel.CapNear(limit))
}

// capFixes works out the new limit from what was measured: the clients
// held plus those turned away in one second, times the connections each
// client costs (itself and its share of the connections the server
// opens), spread over the processes, plus their listeners; at least
// double the limit. It adds the demand to ev.
func capFixes(cur *snapshot.Snapshot, u *tcpmodel.CapUse, perSec float64, ev *[]diag.Evidence) []diag.Fix {
	c := u.Cap
	var clients, outgoing int
	for _, pid := range u.Pids {
		clients += u.Clients[pid]
		outgoing += u.Outgoing[pid]
	}
	listeners := u.Held[u.Top] - u.Clients[u.Top] - u.Outgoing[u.Top]
	want := float64(clients) + math.Ceil(perSec)
	per := 1.0
	if clients > 0 {
		per += float64(outgoing) / float64(clients)
	}
	need := int64(math.Ceil(want*per/float64(len(u.Pids)))) + int64(max(listeners, 0))
	// The demand below the warning line of the new limit (it fills at
	// most capWarnFrac of it), so the fix leaves the rule quiet.
	room := capHeadroom(int(need))
	value := tcpmodel.NextPow2(max(room+tcpmodel.CapReserved(cur, c), 2*c.Value))
	// nginx's reserve grows with the value (tcpmodel.NginxReserve).
	for c.App == "nginx" && c.Per == snapshot.CapPerProcess && value-tcpmodel.NginxReserve(value) < room {
		value *= 2
	}
	*ev = append(*ev, diag.Evidence{Name: "connections wanted",
		Value:  fmt.Sprintf("about %.0f clients (%d held + %.0f turned away each second) x %.2f connections each, over %d process(es): %d each; the value below gives them at least %d, so they fill under %.0f%% of it (the warning line)", want, clients, math.Ceil(perSec), per, len(u.Pids), need, room, capWarnFrac*100),
		Source: "the counts above: a client turned away that retries within a second counts once, one that retries faster once per retry, so this is an upper bound for fast retriers (the value below is on the safe side)"})
	// The lower bound: connections that want the listeners now, each
	// client address:port once.
	var seen wanted
	for _, ln := range u.Listeners {
		w := distinctWanted(cur, ln)
		seen.held, seen.queued, seen.synRecv, seen.synSent = seen.held+w.held, seen.queued+w.queued, seen.synRecv+w.synRecv, seen.synSent+w.synSent
	}
	*ev = append(*ev, diag.Evidence{Name: "connections seen wanting it at once", Value: seen.String(),
		Source: "sock_diag: distinct client address:port pairs on its listeners (held and queued), SYN-RECV, and this namespace's SYN-SENT to them; a lower bound: a client waiting to retry holds no socket"})
	file := c.Source
	if i := strings.LastIndexByte(file, ':'); i > 0 {
		file = file[:i]
	}
	if r, ok := c.RelatedValue("config"); ok && strings.HasPrefix(c.Source, "default") {
		file = r.Value
	}
	switch c.App {
	case "nginx":
		nofile := tcpmodel.NextPow2(2 * value)
		if own := cur.Procs[u.Top]; own != nil && own.NofileSoft != nil && *own.NofileSoft > nofile {
			nofile = *own.NofileSoft
		}
		return remedy.NginxConnections(value, file, nofile)
	case "redis":
		return remedy.RedisMaxclients(value, file)
	case "postgresql":
		return remedy.PostgresMaxConnections(value, file, clients, tcpmodel.CapLimitIn(cur, c), tcpmodel.PoolerHolding(cur, u.Listeners))
	case "haproxy":
		fe := ""
		if n, ok := strings.CutPrefix(c.Setting, "maxconn (frontend "); ok {
			fe = strings.TrimSuffix(n, ")")
		}
		return remedy.HAProxyMaxconn(value, file, fe)
	case "memcached":
		return remedy.MemcachedConns(value)
	case "envoy":
		if r, ok := c.RelatedValue("config"); ok {
			file = r.Value
		}
	case "tomcat":
		var port uint16
		if len(c.Ports) > 0 {
			port = c.Ports[0]
		}
		if r, ok := c.RelatedValue("config"); ok {
			file = r.Value
		}
		return remedy.TomcatMaxConnections(value, file, port)
	}
	return []diag.Fix{remedy.AppCap(c.App, c.Setting, value, file)}
}

// measuredMinHeld is the fewest connections a server must hold at both
// ends of the window for its plateau to count as a limit of its own when
// no file names one.
const measuredMinHeld = 4

// measuredCaps finds the servers whose limit no file tcpdoctor reads
// names (apache2's MaxRequestWorkers, a Node or Python server's own cap)
// from the kernel's evidence alone, each listener on its own: the
// connections its owners hold on it flat across the window (a plateau),
// while
// clients are turned away: its accept queue full in both samples with
// handshakes dropped in the window, or resets sent from its port for
// requests that came after it closed the connection (eBPF) while a
// quarter of what it holds outlived the window. A plateau
// alone is a steady load, a full queue alone a slow server: it takes
// both. Listeners whose limit was read, and owners near their open-file
// limit (fd-exhaustion names that), are left out.
func measuredCaps(in *diag.Input) []measuredHit {
	cur := in.Cur
	if in.Prev == nil {
		return nil
	}
	before, ok := diag.KeptOf(in, acceptedOwned{})
	queued, ok2 := diag.KeptOf(in, queuedAt{})
	if !ok || !ok2 {
		return nil
	}
	var lns []*snapshot.Socket
	var ps []*snapshot.Was
	for i := range cur.Sockets {
		ln := &cur.Sockets[i]
		if ln.State != snapshot.Listen || ln.Pids.Len() == 0 || capRead(cur, ln) {
			continue
		}
		if p := in.PrevOf(ln); p != nil {
			lns, ps = append(lns, ln), append(ps, p)
		}
	}
	if len(lns) == 0 {
		return nil
	}
	// Taken in the window: new, or waiting in the queue at its start.
	accs := acceptedOnAll(cur, lns, func(k int, c *snapshot.Socket) bool {
		_, wasQueued := slices.BinarySearch(queued[ps[k].Cookie], c.Cookie)
		return wasQueued || in.PrevOf(c) == nil
	})
	var hs []measuredHit
	for i, ln := range lns {
		p, acc := ps[i], accs[i]
		was := before[p.Cookie]
		if acc.owned < measuredMinHeld || was < measuredMinHeld || !flat(was, acc.owned) || nearFDLimit(cur, acc.byPid) {
			continue
		}
		if f, ok := measuredCapFinding(in, ln, p, acc, was, queued[p.Cookie]); ok {
			hs = append(hs, measuredHit{f: f, ln: ln})
		}
	}
	return hs
}

// measuredHit is a finding of measuredCaps and its listener.
type measuredHit struct {
	f  diag.Finding
	ln *snapshot.Socket
}

// queuedAt keeps the connections waiting in each listener's accept queue
// in the window's first sample (accepted, no owner yet), by the
// listener's cookie, sorted: one a server owns at the end was taken in
// the window. At most a backlog's worth per listener.
type queuedAt struct{}

// Keep lists them in s.
func (queuedAt) Keep(s *snapshot.Snapshot) map[uint64][]uint64 {
	out := map[uint64][]uint64{}
	ls := tcpmodel.ListenersOf(s)
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.Pids.Len() > 0 {
			continue
		}
		for _, ln := range ls.At(sk.Local.Port()) {
			if tcpmodel.AcceptedOn(ln, sk) {
				out[ln.Cookie] = append(out[ln.Cookie], sk.Cookie)
			}
		}
	}
	for _, cs := range out {
		slices.Sort(cs)
	}
	return out
}

// flat: held at the end within 5 % (at least 1) of held at the start.
func flat(was, now int) bool {
	d := now - was
	return max(d, -d) <= max(1, was/20)
}

// capRead says whether a limit read from the configuration (AppCaps)
// covers listener ln: its owner and, where the limit names ports, its
// port.
func capRead(s *snapshot.Snapshot, ln *snapshot.Socket) bool {
	for i := range s.AppCaps {
		c := &s.AppCaps[i]
		if (slices.Contains(ln.Pids.List(), c.Pid) || slices.ContainsFunc(c.Pids, func(p int) bool { return slices.Contains(ln.Pids.List(), p) })) &&
			(len(c.Ports) == 0 || slices.Contains(c.Ports, ln.Local.Port())) {
			return true
		}
	}
	return false
}

// nearFDLimit: one of the holders has open files at fd-exhaustion's
// warning share of its limit: the kernel's limit, not the server's own.
func nearFDLimit(s *snapshot.Snapshot, byPid map[int]int) bool {
	for pid := range byPid {
		if pr := s.Procs[pid]; pr != nil && pr.FDs >= 0 && pr.NofileSoft != nil && *pr.NofileSoft > 0 &&
			float64(pr.FDs) >= fdWarnFrac*float64(*pr.NofileSoft) {
			return true
		}
	}
	return false
}

// measuredCapFinding is the finding for listener ln (p in the window's
// first sample) whose owners held acc at the end and was at the start,
// if clients were turned away; ok is false when none were.
func measuredCapFinding(in *diag.Input, ln *snapshot.Socket, p *snapshot.Was, acc accepted, was int, startQueued []uint64) (diag.Finding, bool) {
	cur := in.Cur
	win := in.Window()
	secs := win.Seconds()
	if secs <= 0 {
		return diag.Finding{}, false
	}
	svc := tcpmodel.Unmapped(ln.Local.AddrPort())
	addr := svc.String()
	sub := subject(cur, nil, ln)
	sub.Service = diag.At(svc)
	pids := make([]int, 0, len(acc.byPid))
	for pid := range acc.byPid {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	cmd := sub.Command
	if cmd == "" {
		cmd = tcpmodel.Command(cur, pids[0])
	}
	var ev []diag.Evidence
	var why string

	// A full accept queue at both ends, handshakes dropped in the window.
	dropped, hasDropped := tcpmodel.DropsAt(cur, ln.Local.AddrPort())
	over, hasOver := in.CounterDelta("TcpExt.ListenOverflows")
	if acceptNearFull(ln.RecvQ, ln.SendQ) && acceptNearFull(p.RecvQ, ln.SendQ) && (dropped > 0 || hasOver && over > 0) {
		ev = append(ev, diag.Evidence{Name: "accept queue of " + addr, Value: fmt.Sprintf("%d of %d now, %d at the window's start", ln.RecvQ, ln.SendQ, p.RecvQ),
			Source: "sock_diag LISTEN Recv-Q / Send-Q", Threshold: fmt.Sprintf(">= %.0f%% of the backlog in both samples: it takes no more than it holds", listenNearFull*100)})
		if hasDropped && dropped > 0 {
			ev = append(ev, diag.Evidence{Name: "handshakes dropped at " + addr + " (eBPF)", Value: fmt.Sprintf("%d in %s (%.1f/s)", dropped, units.Dur(win), float64(dropped)/secs),
				Source: "eBPF tp_btf/kfree_skb reason " + tcpmodel.ReasonListenOverflow + ", rx_sk = the listener"})
		}
		if hasOver {
			ev = append(ev, diag.Evidence{Name: "ListenOverflows (netns)", Value: fmt.Sprintf("+%d in %s (%.1f/s)", over, units.Dur(win), float64(over)/secs),
				Source: "/proc/net/netstat TcpExt.ListenOverflows", Threshold: "> 0"})
		}
		why = fmt.Sprintf("its accept queue stayed full (%d of %d) and handshakes were dropped: clients wait or are turned away", ln.RecvQ, ln.SendQ)
	}
	// Or a long accept queue that does not drain, before it fills: at
	// both ends as many connections waiting as held (and at least
	// measuredMinHeld), and of those waiting at the window's start at most
	// a quarter given to the server: each waits longer than the window
	// for a slot (apache2 at MaxRequestWorkers 16 behind a slow backend:
	// 184 of 511 waiting, 16 held, clients timing out).
	if why == "" {
		taken := 0
		for i := range cur.Sockets {
			sk := &cur.Sockets[i]
			if sk.Pids.Len() > 0 && tcpmodel.AcceptedOn(ln, sk) {
				if _, ok := slices.BinarySearch(startQueued, sk.Cookie); ok {
					taken++
				}
			}
		}
		n := len(startQueued)
		if int(ln.RecvQ) >= max(measuredMinHeld, acc.owned) && int(p.RecvQ) >= max(measuredMinHeld, was) && n > 0 && 4*taken <= n {
			ev = append(ev, diag.Evidence{Name: "accept queue of " + addr, Value: fmt.Sprintf("%d of %d now, %d at the window's start; %d of the %d connections waiting at its start were taken in %s", ln.RecvQ, ln.SendQ, p.RecvQ, taken, n, units.Dur(win)),
				Source:    "sock_diag LISTEN Recv-Q / Send-Q; connections accepted on the listener without an owner at the window's start, and which of them a process holds at its end (by socket cookie)",
				Threshold: fmt.Sprintf("at both ends at least as many waiting as held (and >= %d), and at most a quarter of those waiting at the start taken: the queue does not drain", measuredMinHeld)})
			why = fmt.Sprintf("its accept queue held %d and %d connections (backlog %d) and gave the server %d of the %d waiting at the window's start: each client waits longer than %s for a slot", p.RecvQ, ln.RecvQ, ln.SendQ, taken, n, units.Dur(win))
		}
	}
	// Or the server ended connections right after accepting them: resets
	// for requests that came after its close, while it kept a quarter or
	// more of what it holds across the window. A keep-alive server that
	// ends its connections after some requests resets the requests racing
	// its close too, but what it holds is all new.
	// Either way a keep-alive server that ends connections after some
	// requests looks alike, but what it holds is then all new; unless
	// most of what the namespace accepted ended in a reset (Node at
	// server.maxConnections with clients arriving in step).
	passive, hasPassive := in.CounterDelta("Tcp.PassiveOpens")
	var turnedPerSec float64
	steady := acc.owned-acc.fresh >= max(1, acc.owned/4)
	var ta tcpmodel.TurnedAway
	if why == "" {
		u := tcpmodel.CapUse{Cap: &snapshot.AppCap{Pid: sub.Pid}, Listeners: []*snapshot.Socket{ln}, Pids: pids}
		ta = tcpmodel.TurnedAwayOf(cur, &u, prevState(in), win, passive, hasPassive && passive >= 0)
	}
	// Without the eBPF source: the namespace's counters, where the
	// listener is its only one. Connections it accepted in the window
	// that are neither held now nor closed first by another listener's
	// server (TurnedAway.Estimated), at capTurnedRate or more, with as
	// many resets sent (Tcp.OutRsts) as half of them: ended as they came.
	if why == "" && !ta.HasResets {
		rsts, hasRsts := in.CounterDelta("Tcp.OutRsts")
		_, sole := tcpmodel.SoleListeningPort(cur)
		est := ta.Estimated
		if !sole || !hasRsts || !ta.HasEstimate || float64(est)/secs < capTurnedRate || 2*rsts < est || !steady && 2*rsts < passive {
			return diag.Finding{}, false
		}
		ev = append(ev, diag.Evidence{Name: "accepted and ended at once (netns)", Value: fmt.Sprintf("%d of the %d connections accepted in %s (%.1f/s) neither held now nor closed first by another listener; Tcp.OutRsts +%d", est, passive, units.Dur(win), float64(est)/secs, rsts),
			Source:    "/proc/net/snmp Tcp.PassiveOpens and Tcp.OutRsts; sock_diag held connections and other listeners' TIME_WAIT (the namespace's only listening port)",
			Threshold: fmt.Sprintf(">= %.0f/s, with resets at least half of them", capTurnedRate)})
		why = fmt.Sprintf("the namespace accepted %.0f connections/s more than it holds and sent %d resets: clients are ended right after being accepted", float64(est)/secs, rsts)
		turnedPerSec = float64(est) / secs
	}
	if why == "" {
		mostly := hasPassive && passive > 0 && 2*int64(ta.Resets()) >= passive
		if !steady && !mostly || float64(ta.Resets())/secs < capTurnedRate {
			return diag.Finding{}, false
		}
		var rs []string
		for r, n := range ta.ResetsSent {
			rs = append(rs, fmt.Sprintf("%s %d", r, n))
		}
		sort.Strings(rs)
		ev = append(ev, diag.Evidence{Name: "resets sent from " + addr + " (eBPF)", Value: fmt.Sprintf("%s in %s (%.1f/s)", strings.Join(rs, ", "), units.Dur(win), float64(ta.Resets())/secs),
			Source:    "eBPF tp_btf/tcp_send_reset: TCP_TIMEWAIT_SOCKET and TCP_ABORT_ON_DATA are requests that arrived after the server closed, TCP_ABORT_ON_CLOSE requests it closed unread",
			Threshold: fmt.Sprintf(">= %.0f/s", capTurnedRate)})
		why = fmt.Sprintf("it sent %.0f resets/s from %s for requests it closed before reading: clients are turned away", float64(ta.Resets())/secs, addr)
		turnedPerSec = float64(ta.Resets()) / secs
	}
	held := acc.owned
	var each []string
	for _, pid := range pids {
		each = append(each, fmt.Sprintf("%s(pid %d) %d", tcpmodel.Command(cur, pid), pid, acc.byPid[pid]))
	}
	ev = append([]diag.Evidence{{Name: "connections held on " + addr,
		Value:     fmt.Sprintf("%d at the window's end, %d at its start (%s); each: %s", held, was, turnover(acc.fresh), strings.Join(each, ", ")),
		Source:    "sock_diag connections accepted on the listener that a process holds (/proc/PID/fd); the ones still in the accept queue have no owner and are not counted",
		Threshold: fmt.Sprintf("at least %d in both samples, within 5%% (at least 1) of each other", measuredMinHeld)}}, ev...)
	ev = append(ev, diag.Evidence{Name: "the limit read from its files", Value: "none: tcpdoctor reads no connection limit of " + cmd,
		Source: "internal/appcaps (nginx, Redis, PostgreSQL, haproxy, memcached, Tomcat, Envoy)"})
	d := distinctWanted(cur, ln)
	ev = append(ev, diag.Evidence{Name: "connections wanted at once", Value: d.String(),
		Source: "sock_diag: distinct client address:port pairs of the connections on the listener (held and queued), its SYN-RECV requests, and this namespace's own SYN-SENT connects to it; a client whose SYN was dropped and who is on another host is not seen"})
	value := tcpmodel.NextPow2(int64(max(2*held, d.total())))
	basis := ""
	if turnedPerSec > 0 {
		// Clients it ends at once come back: the clients seen are those
		// it holds and those it turned away in a second of the window (a
		// client that retries within a second counts once, one that
		// retries faster once per retry: an upper bound for them). The
		// value gives them the headroom a limit read from a file is
		// judged by: they fill at most capWarnFrac of it.
		seen := held + int(math.Ceil(turnedPerSec))
		value = max(int64(2*held), int64(d.total()), capHeadroom(seen))
		ev = append(ev, diag.Evidence{Name: "clients seen", Value: fmt.Sprintf("%d: %d held + %.0f turned away each second (%d in %s)", seen, held, math.Ceil(turnedPerSec), int(math.Round(turnedPerSec*secs)), units.Dur(win)),
			Source:    "the counts above: a client turned away that retries within a second counts once, one that retries faster once per retry (an upper bound for them), one that waits longer than a second may be missed; at least the connections wanted at once were there",
			Threshold: fmt.Sprintf("the new limit at least %d: these clients at most %.0f%% of it, below the warning line", capHeadroom(seen), capWarnFrac*100)})
		basis = fmt.Sprintf("%d clients seen (%d held + %.0f turned away each second; fewer if they retry more often than once a second, as each retry counts), at most %.0f%% of the new value: the headroom below the warning line a server's own limit is judged by", seen, held, math.Ceil(turnedPerSec), capWarnFrac*100)
	}
	summary := fmt.Sprintf("%s's own limit near %d on %s (measured: held %d at both ends of %s while %s); no file tcpdoctor reads names it",
		cmd, held, addr, held, units.Dur(win), why)
	if was != held {
		summary = fmt.Sprintf("%s's own limit near %d on %s (measured: held %d at the window's start and %d at its end, %s, while %s); no file tcpdoctor reads names it",
			cmd, held, addr, was, held, units.Dur(win), why)
	}
	return diag.Finding{Severity: diag.Critical, Subject: sub, Summary: summary, Evidence: ev,
		Fixes: remedy.MeasuredCap(cmd, held, value, d.String(), basis)}, true
}

// capHeadroom is the smallest limit that n connections fill less than
// capWarnFrac of: a server at it is below the warning line.
func capHeadroom(n int) int64 { return int64(float64(n)/capWarnFrac) + 1 }

// turnover says how many of the held connections the server took in the
// window.
func turnover(fresh int) string {
	if fresh == 0 {
		return "the same ones throughout: none ended in the window, as with requests longer than it; a server that stopped serving would look the same, so check that it answers"
	}
	return fmt.Sprintf("%d of them taken in the window: it takes one as another ends", fresh)
}

// wanted is the distinct connections that wanted listener ln at once, by
// where they were seen.
type wanted struct {
	held, queued, synRecv, synSent int
}

func (w wanted) total() int { return w.held + w.queued + w.synRecv + w.synSent }

func (w wanted) String() string {
	return fmt.Sprintf("%d: %d held, %d in the accept queue, %d in the SYN queue, %d connects from this namespace still waiting (SYN-SENT)",
		w.total(), w.held, w.queued, w.synRecv, w.synSent)
}

// distinctWanted counts the connections that want ln now, each client
// address:port once, wherever it is: a client retrying with a new port
// after a failure counts again only while both attempts are open.
func distinctWanted(s *snapshot.Snapshot, ln *snapshot.Socket) wanted {
	var w wanted
	seen := map[netip.AddrPort]bool{}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		var slot *int
		switch {
		case tcpmodel.AcceptedOn(ln, sk):
			slot = &w.queued
			if sk.Pids.Len() > 0 {
				slot = &w.held
			}
		case (sk.State == snapshot.SynRecv || sk.State == snapshot.NewSynRecv) && tcpmodel.SameListenerAt(ln.Local, sk.Local):
			slot = &w.synRecv
		case sk.State == snapshot.SynSent && sk.Remote.Port() == ln.Local.Port() &&
			(ln.Local.Addr().IsUnspecified() || tcpmodel.Unmapped(sk.Remote.AddrPort()).Addr() == tcpmodel.Unmapped(ln.Local.AddrPort()).Addr()):
			// The client's own side: its peer is the listener, its local
			// address:port is what the server would see.
			if k := tcpmodel.Unmapped(sk.Local.AddrPort()); !seen[k] {
				seen[k] = true
				w.synSent++
			}
			continue
		default:
			continue
		}
		if k := tcpmodel.Unmapped(sk.Remote.AddrPort()); !seen[k] {
			seen[k] = true
			*slot++
		}
	}
	return w
}
