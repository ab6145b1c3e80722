package rules

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// capTurnedRate is the rate (per second, over the window) of connections
// a server at its cap ends itself from which clients count as turned
// away: the finding is then critical.
const capTurnedRate = 1.0

func appConnectionCap() diag.Rule {
	return diag.Rule{ID: "app-connection-cap", Title: "A server at its own connection limit", Check: checkAppCap,
		Keeps: []diag.Keeper{diag.Keep(capHeld{})}}
}

// capHeld keeps what each capped process held in the window's first
// sample (tcpmodel.CapHeld): a plateau shows as the same count twice.
type capHeld struct{}

// Keep tallies s.
func (capHeld) Keep(s *snapshot.Snapshot) map[int]int { return tcpmodel.CapHeld(s) }

func checkAppCap(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagGone(cur); err != nil {
		return nil, err
	}
	msg, failed := cur.Failed(snapshot.SourceAppCaps)
	if cur.AppCaps == nil {
		switch why := tcpmodel.OwnersMissing(cur); {
		case failed:
			return nil, diag.Unknownf("servers' own limits not read: %s", msg)
		case why != "":
			return nil, diag.Unknownf("servers' own limits not read: the listeners' owners are unknown: %s", why)
		default:
			return nil, diag.Unknownf("servers' own limits not read (not collected in this snapshot)")
		}
	}
	var prevHeld map[int]int
	if in.Prev != nil {
		prevHeld, _ = diag.KeptOf(in, capHeld{})
	}
	var fs []diag.Finding
	for i := range cur.AppCaps {
		c := &cur.AppCaps[i]
		u := tcpmodel.CapUseOf(cur, c)
		if !tcpmodel.AtCap(u.Held[u.Top], tcpmodel.CapLimit(c)) {
			continue
		}
		fs = append(fs, capFinding(in, &u, prevHeld))
	}
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Severity > fs[j].Severity })
	if failed && len(fs) == 0 {
		return nil, diag.Unknownf("some servers' own limits not read: %s", msg)
	}
	return fs, nil
}

// capFinding is the finding for a server at its cap.
func capFinding(in *diag.Input, u *tcpmodel.CapUse, prevHeld map[int]int) diag.Finding {
	cur, c := in.Cur, u.Cap
	win := in.Window()
	held := u.Held[u.Top]
	limit := tcpmodel.CapLimit(c)
	sub := diag.Subject{Netns: cur.Netns.Name, Pid: c.Pid, Command: c.Command}
	var addrs []string
	for _, ln := range u.Listeners {
		addrs = append(addrs, tcpmodel.Unmapped(ln.Local).String())
	}
	if len(addrs) > 0 {
		sub.Local, sub.Service = addrs[0], addrs[0]
	}
	whose := fmt.Sprintf("%s (pid %d)", c.Command, c.Pid)
	if c.Per == snapshot.CapPerProcess && u.Top != c.Pid {
		whose = fmt.Sprintf("%s worker pid %d", c.Command, u.Top)
	}
	ev := []diag.Evidence{{Name: c.Setting, Value: fmt.Sprint(c.Value), Source: c.Source + " (read through /proc/PID/root)"}}
	setting := fmt.Sprintf("%s %d", c.Setting, c.Value)
	if c.Reserved > 0 {
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
	heldV := fmt.Sprintf("%d of %d%s", held, limit, parts)
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
		Threshold: fmt.Sprintf("at the cap from %d (the limit less 5%%, at least 2)", tcpmodel.CapNear(limit))})

	// Who was turned away in the window.
	passive, hasPassive := in.CounterDelta("Tcp.PassiveOpens")
	ta := tcpmodel.TurnedAwayOf(cur, u, prevState(in), win, passive, hasPassive)
	sev := diag.Info
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
		if evidenceOfRequests && perSec >= capTurnedRate {
			sev = diag.Critical
			turned = fmt.Sprintf(" and ends %.0f connections/s on %s right after accepting them: clients are turned away", perSec, strings.Join(addrs, ", "))
		}
	}
	// A server that stops accepting at its limit leaves the clients in
	// its accept queue instead (listen-overflow names the overflow).
	for _, ln := range u.Listeners {
		if acceptNearFull(ln.RecvQ, ln.SendQ) {
			ev = append(ev, diag.Evidence{Name: "accept queue of " + tcpmodel.Unmapped(ln.Local).String(), Value: fmt.Sprintf("%d of %d", ln.RecvQ, ln.SendQ),
				Source: "sock_diag LISTEN Recv-Q / Send-Q", Threshold: fmt.Sprintf(">= %.0f%% of the backlog: it stopped accepting", listenNearFull*100)})
			if sev != diag.Critical {
				sev = diag.Critical
				turned = fmt.Sprintf(" and has stopped accepting: the accept queue of %s is full, clients wait in it or are dropped", tcpmodel.Unmapped(ln.Local))
			}
			break
		}
	}
	if sev == diag.Info {
		turned = "; nobody was seen turned away in the window yet"
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
	value := tcpmodel.NextPow2(max(need+c.Reserved, 2*c.Value))
	*ev = append(*ev, diag.Evidence{Name: "connections wanted",
		Value:  fmt.Sprintf("at least %.0f clients (%d held + %.0f turned away each second) x %.2f connections each, over %d process(es): %d each", want, clients, math.Ceil(perSec), per, len(u.Pids), need),
		Source: "the counts above; a client turned away that retries within a second counts once"})
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
		return remedy.PostgresMaxConnections(value, file, clients)
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
