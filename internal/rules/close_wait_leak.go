// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

const (
	// cwWarnCount: CLOSE_WAIT sockets in one process, in a single sample.
	cwWarnCount = 100
	// cwWarnAged: CLOSE_WAIT sockets of one process that were already in
	// CLOSE_WAIT in the previous sample (never closed for a whole window).
	cwWarnAged = 10
	// cwCritCount: CLOSE_WAIT sockets in one process: critical.
	cwCritCount = 1000
	// cwMaxFindings caps per-process findings.
	cwMaxFindings = 10
)

func closeWaitLeak() diag.Rule {
	return diag.Rule{ID: "close-wait-leak", Title: "CLOSE_WAIT sockets leaking", Check: checkCloseWaitLeak}
}

// cwKey groups CLOSE_WAIT sockets by owner and by the service they were
// accepted on (invalid for client-side sockets). Sockets whose owner is
// unknown group under pid 0 by service, never into one heap.
type cwKey struct {
	pid     int
	service netip.AddrPort
}

type cwGroup struct {
	cwKey
	n, prevN, aged int
	// queued is how many of the group's CLOSE_WAIT sockets the accept
	// queue holds (left out of n): never accepted.
	queued int
	recvQ  uint64
	// remotes counts sockets per peer: the client address for accepted
	// sockets, the destination ip:port for outgoing ones.
	remotes map[string]int
	// first is the first peer seen, the subject's remote when it is
	// the only one.
	first diag.Address
	sev   diag.Severity
}

// cwKeyOf is the group a CLOSE_WAIT socket of s belongs to.
func cwKeyOf(s *snapshot.Snapshot, ls tcpmodel.Listeners, sk *snapshot.Socket) cwKey {
	pid, _ := s.Owner(sk)
	return cwKey{pid: pid, service: ls.Service(sk)}
}

func checkCloseWaitLeak(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagGone(cur); err != nil {
		return nil, err
	}
	ls := tcpmodel.ListenersOf(cur)
	groups := map[cwKey]*cwGroup{}
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if sk.State != snapshot.CloseWait {
			continue
		}
		k := cwKeyOf(cur, ls, sk)
		g := groups[k]
		if g == nil {
			g = &cwGroup{cwKey: k, remotes: map[string]int{}}
			groups[k] = g
		}
		g.n++
		g.recvQ += uint64(sk.RecvQ)
		peer := diag.At(sk.Remote.AddrPort())
		if k.service.IsValid() {
			peer = diag.Host(sk.Remote.Addr())
		}
		if len(g.remotes) == 0 {
			g.first = peer
		}
		if key := peer.String(); len(g.remotes) < 1000 || g.remotes[key] > 0 {
			g.remotes[key]++
		}
		if p := in.PrevOf(sk); p != nil && in.Prev != nil && p.State == snapshot.CloseWait {
			g.aged++
		}
	}
	if in.Prev != nil {
		pls := tcpmodel.ListenersOf(in.Prev)
		for i := range in.Prev.Sockets {
			sk := &in.Prev.Sockets[i]
			if sk.State != snapshot.CloseWait {
				continue
			}
			if g := groups[cwKeyOf(in.Prev, pls, sk)]; g != nil {
				g.prevN++
			}
		}
	}
	// CLOSE_WAIT sockets still in a listener's accept queue were never
	// accepted: no process has them to close, and they are not its leak
	// (clients that gave up waiting for a server at its limit: see
	// app-connection-cap). They have no owner; up to the queue's length
	// of a listener's ownerless ones are taken as queued.
	queuedOn := func(ls tcpmodel.Listeners, svc netip.AddrPort) int {
		q := 0
		for _, ln := range ls.At(svc.Port()) {
			if tcpmodel.SameListener(tcpmodel.Unmapped(ln.Local.AddrPort()), tcpmodel.Unmapped(svc)) {
				q += int(ln.RecvQ)
			}
		}
		return q
	}
	var pls tcpmodel.Listeners
	if in.Prev != nil {
		pls = tcpmodel.ListenersOf(in.Prev)
	}
	for _, g := range groups {
		if g.pid != 0 || !g.service.IsValid() {
			continue
		}
		q := min(queuedOn(ls, g.service), g.n)
		g.queued = q
		g.n -= q
		g.aged -= min(q, g.aged)
		if pls != nil {
			g.prevN -= min(queuedOn(pls, g.service), g.prevN)
		}
	}
	// Owners read in full and none for these sockets: their process closed
	// them between the dump and the owner walk, and a socket it closed is
	// not leaking. Unless they were in CLOSE_WAIT a window ago too.
	ownersRead := tcpmodel.OwnersMissing(cur) == ""
	var hits []*cwGroup
	for _, g := range groups {
		if g.pid == 0 && ownersRead && g.aged == 0 {
			continue
		}
		switch {
		case g.n >= cwCritCount:
			g.sev = diag.Critical
		case g.n >= cwWarnCount || in.Prev != nil && g.aged >= cwWarnAged:
			g.sev = diag.Warning
		default:
			continue
		}
		hits = append(hits, g)
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].sev != hits[j].sev {
			return hits[i].sev > hits[j].sev
		}
		if hits[i].n != hits[j].n {
			return hits[i].n > hits[j].n
		}
		if hits[i].pid != hits[j].pid {
			return hits[i].pid < hits[j].pid
		}
		return hits[i].service.String() < hits[j].service.String()
	})
	var fs []diag.Finding
	for i, g := range hits {
		if i == cwMaxFindings {
			fs = append(fs, diag.Finding{Severity: g.sev, Subject: diag.Subject{Netns: cur.Netns.Name},
				Summary:  fmt.Sprintf("%d more processes hold many CLOSE_WAIT sockets", len(hits)-i),
				Evidence: []diag.Evidence{{Name: "processes", Value: fmt.Sprint(len(hits) - i), Source: "sock_diag CLOSE-WAIT by owner", Threshold: fmt.Sprintf(">= %d sockets or >= %d older than the window", cwWarnCount, cwWarnAged)}},
				Fixes:    []diag.Fix{{Scope: "application", Target: "diagnosis", Text: "list them", Command: "ss -tanp state close-wait"}}})
			break
		}
		fs = append(fs, cwFinding(in, g))
	}
	return fs, ownersGone(cur, snapshot.CloseWait)
}

// topCounts lists the n largest counts, largest first, then by key.
func topCounts[K comparable](m map[K]int, n int, key func(K) string) []diag.Count {
	out := make([]diag.Count, 0, len(m))
	for k, v := range m {
		out = append(out, diag.Count{Key: key(k), N: v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Key < out[j].Key
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func fmtCounts(cs []diag.Count) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %d", c.Key, c.N)
	}
	return strings.Join(parts, ", ")
}

func cwFinding(in *diag.Input, g *cwGroup) diag.Finding {
	cur := in.Cur
	cmd := tcpmodel.Command(cur, g.pid)
	who := "an unknown process"
	if g.pid != 0 {
		who = fmt.Sprintf("%s (pid %d)", cmd, g.pid)
	}
	peers := topCounts(g.remotes, 5, func(k string) string { return k })
	sub := diag.Subject{Netns: cur.Netns.Name, Pid: g.pid, Command: cmd, Peers: peers}
	where := "on outgoing connections"
	if g.service.IsValid() {
		sub.Service = diag.At(g.service)
		sub.Local = diag.At(g.service)
		where = "accepted on " + g.service.String()
	}
	if len(peers) == 1 {
		sub.Remote = g.first
	}
	summary := fmt.Sprintf("%s holds %d CLOSE_WAIT sockets %s: the peers closed, the application never called close()", who, g.n, where)
	ev := []diag.Evidence{
		{Name: "CLOSE_WAIT sockets", Value: fmt.Sprint(g.n), Source: "sock_diag CLOSE-WAIT, by first owner and service", Threshold: fmt.Sprintf("warning >= %d, critical >= %d", cwWarnCount, cwCritCount)},
		{Name: "unread bytes in them", Value: units.Bytes(float64(g.recvQ)), Source: "sock_diag Recv-Q of the CLOSE-WAIT sockets"},
		{Name: "peers", Value: fmt.Sprintf("%s (%d distinct)", fmtCounts(peers), len(g.remotes)), Source: "sock_diag remote address"},
	}
	if g.service.IsValid() {
		ev = append(ev, diag.Evidence{Name: "service", Value: g.service.String() + ": the listener these connections were accepted on", Source: "sock_diag LISTEN socket on the same local port"})
		if g.queued > 0 {
			ev = append(ev, diag.Evidence{Name: "left out: still in the accept queue", Value: fmt.Sprintf("%d more CLOSE_WAIT sockets without an owner, as many as the listener's accept queue holds: never accepted, so no process can close them", g.queued),
				Source: "sock_diag LISTEN Recv-Q"})
		}
	} else {
		ev = append(ev, diag.Evidence{Name: "side", Value: "client: the application opened these connections and never closed them after the servers did", Source: "sock_diag: local port is no listener's"})
	}
	// A leak's sockets end in resets when the peer gives up or the
	// process finally exits; an abortive close by the peer shows here too.
	match := func(r snapshot.EventReset) bool { return r.LocalPort == 0 && g.remotes[r.Remote.String()] > 0 }
	if g.service.IsValid() {
		match = tcpmodel.OnFlow(netip.Addr{}, g.service)
	}
	ev = append(ev, diag.Evidence{Name: "resets with these peers (eBPF)", Value: tcpmodel.ResetSummary(cur, match),
		Source: "eBPF tp_btf/tcp_send_reset (reason: the kernel's sk_rst_reason) and tcp_receive_reset, on the service's port or to these destinations"})
	if g.pid == 0 {
		if note, ok := ownersNote(cur); ok {
			ev = append(ev, note)
		} else {
			ev = append(ev, diag.Evidence{Name: "owners", Value: "no process holds them: the application closed its descriptors in another way, or the sockets belong to a process that cannot be read", Source: "/proc/PID/fd socket inodes"})
		}
	}
	if in.Prev != nil {
		w := units.Dur(in.Window())
		summary += fmt.Sprintf("; %d -> %d in %s, %d older than %s", g.prevN, g.n, w, g.aged, w)
		ev = append(ev,
			diag.Evidence{Name: "growth", Value: fmt.Sprintf("%d -> %d in %s (%+.1f/s)", g.prevN, g.n, w, float64(g.n-g.prevN)/in.Window().Seconds()), Source: "sock_diag, previous and current sample"},
			diag.Evidence{Name: "older than the window", Value: fmt.Sprint(g.aged), Source: "same socket cookie in CLOSE-WAIT in both samples", Threshold: fmt.Sprintf(">= %d", cwWarnAged)})
	}
	if p := cur.Procs[g.pid]; p != nil && p.FDs >= 0 && p.NofileSoft != nil && *p.NofileSoft > 0 {
		ev = append(ev, diag.Evidence{Name: "open files", Value: fmt.Sprintf("%d of %d (%s)", p.FDs, *p.NofileSoft, units.Pct(float64(p.FDs)/float64(*p.NofileSoft))), Source: "/proc/PID/fd, /proc/PID/limits (see fd-exhaustion)"})
	}
	fixes := []diag.Fix{cwCodeFix(cmd),
		{Scope: "application", Target: "connection-pool", Text: "if the sockets belong to a client pool, evict idle and half-closed connections",
			Command: "Apache HttpClient: evictExpiredConnections() + evictIdleConnections(30s); OkHttp: ConnectionPool(maxIdle, 30s); Go: http.Transport{IdleConnTimeout: 30 * time.Second}"},
		{Scope: "application", Target: "restart", Text: "stopgap: restarting the process frees them; no sysctl closes CLOSE_WAIT (the kernel waits for the application)",
			Risk: "the leak comes back at the same rate"},
	}
	return diag.Finding{Severity: g.sev, Subject: sub, Summary: summary, Evidence: ev, Fixes: fixes}
}

func cwCodeFix(cmd string) diag.Fix {
	f := diag.Fix{Scope: "application", Target: "code", Text: "close every socket on every path, including errors and peer EOF (read() returning 0 / -1)"}
	switch {
	case strings.HasPrefix(cmd, "java"):
		f.Target, f.Command = "java", "try (Socket s = ...; InputStream in = s.getInputStream()) { ... }  // try-with-resources, or close() in finally; close HTTP responses (EntityUtils.consume / response.close())"
	case strings.HasPrefix(cmd, "python"):
		f.Target, f.Command = "python", "with socket.create_connection(addr) as s: ...  (requests: use a Session and close responses)"
	case strings.HasPrefix(cmd, "node"):
		f.Target, f.Command = "node", "socket.on('end', () => socket.end()); socket.on('error', () => socket.destroy())"
	default:
		f.Command = "Go: defer resp.Body.Close() (and read it to EOF) after every http request, defer conn.Close(); Java: try-with-resources; C: close(fd) when read() returns 0"
	}
	return f
}
