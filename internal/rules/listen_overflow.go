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
	// listenNearFull: a listener whose accept queue reached this share of
	// its backlog in either sample can explain an overflow.
	listenNearFull = 0.9
	// listenCritRate: overflows per second at which the finding is
	// critical (clients are being dropped every second).
	listenCritRate = 10.0
	// listenMaxFindings caps per-listener findings; the rest are summed up.
	listenMaxFindings = 10
)

func listenOverflow() diag.Rule {
	return diag.Rule{ID: "listen-overflow", Title: "Accept queue overflow", Check: checkListenOverflow,
		Keeps: []diag.Keeper{diag.Keep(acceptedOwned{})}}
}

// acceptedOwned keeps the owned connections each listener had accepted
// in the window's first sample, by the listener's cookie
// (tcpmodel.AcceptedOwned): a server that takes no more than it held
// then has stopped accepting.
type acceptedOwned struct{}

// Keep tallies s.
func (acceptedOwned) Keep(s *snapshot.Snapshot) map[uint64]int {
	return tcpmodel.AcceptedOwned(s, tcpmodel.ListenersOf(s))
}

// listener is one LISTEN socket with its queue in both samples.
type listener struct {
	sk       *snapshot.Socket
	prevQ    uint32
	hasPrev  bool
	peak     uint32 // largest Recv-Q seen in either sample
	fullNow  bool   // the kernel drops the next handshake: Recv-Q > backlog
	nearFull bool   // peak >= listenNearFull x backlog
	// namedBy says what ties an overflow to a listener that was not seen
	// near full; "" when it was.
	namedBy string
}

// acceptNearFull: an accept queue of q at listenNearFull of its backlog
// or more.
func acceptNearFull(q, backlog uint32) bool {
	return q > 0 && float64(q) >= listenNearFull*float64(backlog)
}

func (l *listener) fill() float64 {
	return tcpmodel.Fill{Queue: l.peak, Backlog: l.sk.SendQ}.Frac()
}

// listeners returns the LISTEN sockets of in.Cur, fullest first.
func listeners(in *diag.Input) []listener {
	var out []listener
	for i := range in.Cur.Sockets {
		sk := &in.Cur.Sockets[i]
		if sk.State != snapshot.Listen {
			continue
		}
		l := listener{sk: sk, peak: sk.RecvQ}
		if p := in.PrevOf(sk); p != nil && in.Prev != nil {
			l.prevQ, l.hasPrev = p.RecvQ, true
			l.peak = max(l.peak, p.RecvQ)
		}
		l.fullNow = tcpmodel.FillOf(sk).Full()
		l.nearFull = acceptNearFull(l.peak, sk.SendQ)
		out = append(out, l)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].fill() > out[j].fill() })
	return out
}

func checkListenOverflow(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if msg, failed := cur.Failed(snapshot.SourceSockdiag); failed && len(cur.Sockets) == 0 {
		return nil, diag.Unknownf("no listeners: sock_diag failed: %s", msg)
	}
	ls := listeners(in)
	over, hasOver := in.CounterDelta("TcpExt.ListenOverflows")
	drops, hasDrops := in.CounterDelta("TcpExt.ListenDrops")
	var notes []diag.Evidence
	if hasOver && over < 0 {
		hasOver = false
		notes = append(notes, diag.Evidence{Name: "ListenOverflows", Value: fmt.Sprintf("went backwards by %d (netns recreated?): window ignored", -over), Source: "/proc/net/netstat TcpExt.ListenOverflows"})
	}
	if hasDrops && drops < 0 {
		hasDrops = false
	}
	var fs []diag.Finding
	switch {
	case hasOver && over > 0:
		// A near-full listener explains the netns-wide counter; so do the
		// eBPF source's drops at a listener (the kernel names it), and the
		// only listener there is (a queue of 5 fills and drains between
		// samples). No eBPF drops at the only listener do not clear it:
		// SYNs a full queue refuses are freed with consume_skb, not
		// counted as drops, yet count in ListenOverflows.
		var explain []listener
		for _, l := range ls {
			dropped, _ := tcpmodel.DropsAt(cur, l.sk.Local.AddrPort())
			switch {
			case l.nearFull:
			case dropped > 0:
				l.namedBy = "the eBPF source counted its drops"
			case len(ls) == 1:
				l.namedBy = "it is the namespace's only listener"
			default:
				continue
			}
			explain = append(explain, l)
		}
		if len(explain) == 0 {
			fs = append(fs, transientOverflow(in, ls, over, drops, hasDrops))
			break
		}
		for i, l := range explain {
			if i == listenMaxFindings {
				fs = append(fs, moreListeners(cur, explain[i:]))
				break
			}
			fs = append(fs, listenerFinding(in, l, over, drops, hasDrops, len(explain), notes))
		}
	case in.Prev == nil || hasOver:
		// No overflow in the window (or a single sample): a listener full
		// now still refuses the next connection.
		n := 0
		for _, l := range ls {
			if !l.fullNow {
				continue
			}
			if n == listenMaxFindings {
				var rest []listener
				for _, r := range ls {
					if r.fullNow {
						rest = append(rest, r)
					}
				}
				fs = append(fs, moreListeners(cur, rest[n:]))
				break
			}
			fs = append(fs, listenerFinding(in, l, 0, 0, false, 0, notes))
			n++
		}
		if in.Prev == nil {
			if f, ok := overflowsSinceBoot(cur, ls); ok {
				fs = append(fs, f)
			}
		}
	default:
		// Two samples but no usable counter: say so rather than pass.
		for _, l := range ls {
			if l.fullNow {
				fs = append(fs, listenerFinding(in, l, 0, 0, false, 0, notes))
			}
		}
		if len(fs) == 0 {
			return nil, diag.Unknownf("TcpExt.ListenOverflows missing or reset in the window and no listener is full")
		}
	}
	return fs, nil
}

// listenerFinding describes one listener that can explain the overflows
// (over > 0) or whose queue is full now (over == 0).
func listenerFinding(in *diag.Input, l listener, over, drops int64, hasDrops bool, sharing int, notes []diag.Evidence) diag.Finding {
	cur := in.Cur
	sk := l.sk
	sub := subject(cur, nil, sk)
	somax, hasSomax := cur.SysctlInt("net.core.somaxconn")
	binding, why := tcpmodel.BacklogBinding(int64(sk.SendQ), somax, hasSomax)
	target := tcpmodel.BacklogTarget(int64(l.peak), int64(sk.SendQ))

	qv := fmt.Sprintf("%d now", sk.RecvQ)
	if l.hasPrev {
		qv += fmt.Sprintf(", %d in the previous sample", l.prevQ)
	}
	ev := []diag.Evidence{
		{Name: "accept queue (Recv-Q)", Value: qv, Source: "sock_diag LISTEN idiag_rqueue", Threshold: fmt.Sprintf(">= %.0f%% of backlog %d", listenNearFull*100, sk.SendQ)},
		{Name: "effective backlog (Send-Q)", Value: fmt.Sprint(sk.SendQ), Source: "sock_diag LISTEN idiag_wqueue = min(listen() backlog, somaxconn)"},
		somaxEvidence(somax, hasSomax),
		{Name: "binding limit", Value: why, Source: "derived: Send-Q against net.core.somaxconn"},
		{Name: "owner", Value: tcpmodel.Who(cur, sk.Pids.List()), Source: "/proc/PID/fd socket inodes"},
	}
	var summary string
	sev := diag.Warning
	port := sk.Local.Port()
	who := sub.Command
	if who == "" {
		who = "unknown owner"
	} else {
		who = fmt.Sprintf("%s pid %d", who, sub.Pid)
	}
	if over > 0 {
		rate := float64(over) / in.Window().Seconds()
		if rate >= listenCritRate {
			sev = diag.Critical
		}
		shared := "netns-wide counter"
		if sharing > 1 {
			shared = fmt.Sprintf("netns-wide counter, %d listeners near full", sharing)
		}
		ev = append(ev, diag.Evidence{Name: "ListenOverflows", Value: fmt.Sprintf("+%d in %s (%.1f/s, %s)", over, units.Dur(in.Window()), rate, shared), Source: "/proc/net/netstat TcpExt.ListenOverflows", Threshold: fmt.Sprintf("> 0; critical at >= %.0f/s", listenCritRate)})
		if hasDrops {
			ev = append(ev, diag.Evidence{Name: "ListenDrops", Value: fmt.Sprintf("+%d in %s", drops, units.Dur(in.Window())), Source: "/proc/net/netstat TcpExt.ListenDrops"})
		}
		summary = fmt.Sprintf("listener :%d (%s) overflowed its accept queue %d times in %s; queue %d/%d, backlog %d is %s",
			port, who, over, units.Dur(in.Window()), l.peak, sk.SendQ, sk.SendQ, binding)
		if l.namedBy != "" {
			summary += fmt.Sprintf("; transient: the queue filled and drained between samples (%s)", l.namedBy)
		}
	} else {
		summary = fmt.Sprintf("listener :%d (%s) has a full accept queue (%d/%d): the next connections overflow; backlog %d is %s",
			port, who, sk.RecvQ, sk.SendQ, sk.SendQ, binding)
	}
	dropped, dropEv := overflowDropEvidence(in, sk.Local.AddrPort())
	ev = append(ev, dropEv, synRetransmitEvidence(in, sk.Local.AddrPort()))
	if dropped > 0 {
		summary += fmt.Sprintf("; listener %s dropped %d handshakes (kfree_skb %s)", listenerName(sk.Local.AddrPort()), dropped, tcpmodel.ReasonListenOverflow)
	}
	ev = append(ev, abortOnOverflowEvidence(cur))
	acc := acceptedOn(cur, sk, func(c *snapshot.Socket) bool { return in.PrevOf(c) == nil })
	if acc.total > 0 {
		ev = append(ev, diag.Evidence{Name: "accepted connections held", Value: acc.String(cur),
			Source: "sock_diag connections on the listener's address and port, by owner (/proc/PID/fd)"})
	}
	ev = append(ev, notes...)
	fixes := backlogFixes(cur, sk, target, somax, hasSomax)
	if capped(in, &l, acc) {
		fixes = append([]diag.Fix{connCapFix(cur, sk, acc)}, fixes...)
	}
	return diag.Finding{Severity: sev, Subject: sub, Summary: summary, Evidence: ev, Fixes: fixes}
}

// capMinHeld: a full queue in both samples while the owners hold at least
// this many accepted connections points at a connection cap of the
// server's own (nginx worker_connections: 768 in Debian's nginx.conf).
const capMinHeld = 256

// capped: the accept queue was near full in both samples while the
// owners held at least capMinHeld accepted connections, no more than
// before (1 % or 8 more at most), some of them new: they take a
// connection only when one closes. A slow acceptor under a storm holds
// more at each sample (the lab's C2); one whose accept loop is stuck
// takes no new ones.
func capped(in *diag.Input, l *listener, now accepted) bool {
	if !l.hasPrev || !acceptNearFull(l.sk.RecvQ, l.sk.SendQ) || !acceptNearFull(l.prevQ, l.sk.SendQ) || now.owned < capMinHeld || now.fresh == 0 {
		return false
	}
	p := in.PrevOf(l.sk)
	if p == nil {
		return false
	}
	accepted, _ := diag.KeptOf(in, acceptedOwned{})
	before := accepted[p.Cookie]
	return now.owned <= before+max(8, before/100)
}

// accepted is the connections a listener accepted that are still open,
// by owner; unowned ones are in its queue or were not matched to a
// process.
type accepted struct {
	// by names the owners (the first few, for the evidence); byPid
	// counts every one (nginx may run a worker per CPU).
	by           tcpmodel.Tally
	byPid        map[int]int
	total, owned int
	// fresh is the owned ones new since the previous sample.
	fresh int
}

// String is "1940 in all: nginx(pid 8397) 713 open, nginx(pid 8398) 712
// open; 515 with no owner (...)".
func (a *accepted) String(s *snapshot.Snapshot) string {
	v := fmt.Sprintf("%d in all", a.total)
	if l := a.by.List(s); l != "" {
		v += ": " + l
	}
	if un := a.total - a.owned; un > 0 {
		v += fmt.Sprintf("; %d with no owner (in the accept queue, or not matched)", un)
	}
	return v
}

// acceptedOn counts the open connections on ln's address and port
// (tcpmodel.AcceptedOn); isNew, when not nil, tells the owned ones new
// since the previous sample.
func acceptedOn(s *snapshot.Snapshot, ln *snapshot.Socket, isNew func(*snapshot.Socket) bool) accepted {
	var each func(int, *snapshot.Socket) bool
	if isNew != nil {
		each = func(_ int, c *snapshot.Socket) bool { return isNew(c) }
	}
	return acceptedOnAll(s, []*snapshot.Socket{ln}, each)[0]
}

// acceptedOnAll is acceptedOn for each of lns, in one pass over s's
// sockets (a host holds a million sockets and a listener per worker);
// isNew is asked with the listener's index in lns.
func acceptedOnAll(s *snapshot.Snapshot, lns []*snapshot.Socket, isNew func(k int, c *snapshot.Socket) bool) []accepted {
	out := make([]accepted, len(lns))
	// The listeners of each port, by index in lns (a map lookup per
	// socket cost more).
	byPort := new(tcpmodel.PortTable[int])
	for i, ln := range lns {
		out[i].byPid = map[int]int{}
		byPort.Add(ln.Local.Port(), i)
	}
	// A listener's connections from one owner mostly come together in a
	// dump: they are counted in a run, added when the run ends.
	runK, runPid, run := -1, 0, 0
	flush := func() {
		if run > 0 {
			out[runK].by.AddN(runPid, run)
			out[runK].byPid[runPid] += run
		}
		run = 0
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		for _, k := range byPort.At(sk.Local.Port()) {
			ln := lns[k]
			if !tcpmodel.AcceptedOn(ln, sk) {
				continue
			}
			a := &out[k]
			a.total++
			if pid, _ := s.Owner(sk); pid != 0 {
				a.owned++
				if k != runK || pid != runPid {
					flush()
					runK, runPid = k, pid
				}
				run++
				if isNew != nil && isNew(k, sk) {
					a.fresh++
				}
			}
		}
	}
	flush()
	return out
}

// connCapFix: the owners stopped accepting while holding many
// connections; a larger backlog only lengthens the wait.
func connCapFix(s *snapshot.Snapshot, ln *snapshot.Socket, h accepted) diag.Fix {
	_, cmd := tcpmodel.FirstOwner(s, ln)
	most := 0
	for _, c := range h.byPid {
		most = max(most, c)
	}
	f := diag.Fix{Scope: "application", Target: "connection-cap",
		Text: fmt.Sprintf("the queue stayed full in both samples while the owners hold %d accepted connections (up to %d per process): a server stops accepting at a connection cap of its own, and a larger backlog only makes clients wait longer; raise the cap: nginx worker_connections (768 in Debian's nginx.conf, 512 built in) with worker_rlimit_nofile, Tomcat maxConnections, HAProxy maxconn, Node server.maxConnections",
			h.owned, most),
		Risk: "each connection holds memory and a descriptor: raise the file limit with it (nginx worker_rlimit_nofile, systemd LimitNOFILE)"}
	if procs := len(h.byPid); strings.HasPrefix(cmd, "nginx") && procs > 0 {
		// Room for what is held and what waits (total counts both), twice
		// over, per worker.
		n := tcpmodel.NextPow2(int64(2 * h.total / procs))
		f.Target = "nginx"
		f.Text = fmt.Sprintf("nginx's %d workers hold %d accepted connections (up to %d each) and the queue stayed full in both samples: each worker stops accepting at worker_connections (768 in Debian's nginx.conf, 512 built in), and a larger backlog only makes clients wait longer", procs, h.owned, most)
		f.Command = fmt.Sprintf("events { worker_connections %d; }  worker_rlimit_nofile %d;", n, 2*n)
	}
	return f
}

// transientOverflow is the finding when counters moved but no listener
// was seen near full: the queue filled and drained between samples.
func transientOverflow(in *diag.Input, ls []listener, over, drops int64, hasDrops bool) diag.Finding {
	cur := in.Cur
	rate := float64(over) / in.Window().Seconds()
	sev := diag.Warning
	if rate >= listenCritRate {
		sev = diag.Critical
	}
	var names []string
	var largest int64
	for i, l := range ls {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(ls)-5))
			break
		}
		names = append(names, fmt.Sprintf(":%d %s backlog %d queue %d", l.sk.Local.Port(), tcpmodel.Who(cur, l.sk.Pids.List()), l.sk.SendQ, l.peak))
		largest = max(largest, int64(l.sk.SendQ))
	}
	listed := "none"
	if len(names) > 0 {
		listed = strings.Join(names, "; ")
	}
	somax, hasSomax := cur.SysctlInt("net.core.somaxconn")
	ev := []diag.Evidence{
		{Name: "ListenOverflows", Value: fmt.Sprintf("+%d in %s (%.1f/s, netns-wide)", over, units.Dur(in.Window()), rate), Source: "/proc/net/netstat TcpExt.ListenOverflows", Threshold: fmt.Sprintf("> 0; critical at >= %.0f/s", listenCritRate)},
		{Name: "listeners (fullest first)", Value: listed, Source: "sock_diag LISTEN Recv-Q/Send-Q", Threshold: fmt.Sprintf("none at >= %.0f%% of its backlog in either sample", listenNearFull*100)},
		somaxEvidence(somax, hasSomax),
		abortOnOverflowEvidence(cur),
	}
	if hasDrops {
		ev = append(ev, diag.Evidence{Name: "ListenDrops", Value: fmt.Sprintf("+%d in %s", drops, units.Dur(in.Window())), Source: "/proc/net/netstat TcpExt.ListenDrops"})
	}
	named := ""
	bev := diag.Evidence{Name: "overflow drops (eBPF)", Source: "eBPF tp_btf/kfree_skb reason " + tcpmodel.ReasonListenOverflow + ", rx_sk = the listener"}
	switch ds, ok := tcpmodel.OverflowDrops(cur); {
	case !ok:
		bev.Value = "unknown, so the listener cannot be named: " + tcpmodel.ProgramMissing(cur, snapshot.ProgDrops)
	case len(ds) == 0:
		bev.Value = "none counted in this namespace in " + units.Dur(cur.Events.Interval())
		if over > 0 {
			bev.Value = unseenOverflows(0, over, "in this namespace")
		}
	default:
		var parts []string
		for i, d := range ds {
			if i == 5 {
				parts = append(parts, fmt.Sprintf("and %d more", len(ds)-5))
				break
			}
			parts = append(parts, fmt.Sprintf("listener %s dropped %d handshakes", listenerName(d.Listener), d.Count))
		}
		bev.Value = strings.Join(parts, "; ") + " in " + units.Dur(cur.Events.Interval())
		var n uint64
		for _, d := range ds {
			n += d.Count
		}
		bev.Value += unseenOverflows(n, over, "")
		named = fmt.Sprintf("; eBPF names it: listener %s dropped %d handshakes (kfree_skb %s)", listenerName(ds[0].Listener), ds[0].Count, tcpmodel.ReasonListenOverflow)
	}
	ev = append(ev, bev)
	target := tcpmodel.BacklogTarget(0, largest)
	fixes := []diag.Fix{{
		Scope: "application", Target: "diagnosis",
		Text:    "the overflow was transient (the queue filled and drained between samples); sample faster during the burst to see which listener fills",
		Command: "tcpdoctor check --interval 1s",
	}}
	if !hasSomax || somax < target {
		fixes = append(fixes, remedy.Somaxconn(target, somax, hasSomax))
	}
	return diag.Finding{
		Severity: sev,
		Subject:  diag.Subject{Netns: cur.Netns.Name},
		Summary: fmt.Sprintf("accept queues overflowed %d times in %s (%.1f/s) but no listener was seen near full: transient, the queue filled and drained between samples (%d listeners)%s",
			over, units.Dur(in.Window()), rate, len(ls), named),
		Evidence: ev,
		Fixes:    fixes,
	}
}

// overflowsSinceBoot reports the counters' totals as context for a
// single snapshot, when they are non-zero.
func overflowsSinceBoot(cur *snapshot.Snapshot, ls []listener) (diag.Finding, bool) {
	over, ok := cur.Counter("TcpExt.ListenOverflows")
	if !ok || over == 0 {
		return diag.Finding{}, false
	}
	ev := []diag.Evidence{{Name: "ListenOverflows", Value: fmt.Sprintf("%d since the netns was created", over), Source: "/proc/net/netstat TcpExt.ListenOverflows"}}
	if d, ok := cur.Counter("TcpExt.ListenDrops"); ok {
		ev = append(ev, diag.Evidence{Name: "ListenDrops", Value: fmt.Sprintf("%d since the netns was created", d), Source: "/proc/net/netstat TcpExt.ListenDrops"})
	}
	return diag.Finding{
		Severity: diag.Info,
		Subject:  diag.Subject{Netns: cur.Netns.Name},
		Summary:  fmt.Sprintf("accept queues have overflowed %d times since boot (one sample: cannot tell whether it is happening now; %d listeners)", over, len(ls)),
		Evidence: ev,
		Fixes: []diag.Fix{{Scope: "application", Target: "diagnosis",
			Text: "take two samples to see whether the counter still moves", Command: "tcpdoctor check --interval 5s"}},
	}, true
}

// moreListeners sums up the listeners beyond the cap.
func moreListeners(cur *snapshot.Snapshot, rest []listener) diag.Finding {
	var ports []string
	for i, l := range rest {
		if i == 20 {
			ports = append(ports, "...")
			break
		}
		ports = append(ports, fmt.Sprintf(":%d", l.sk.Local.Port()))
	}
	return diag.Finding{
		Severity: diag.Warning,
		Subject:  diag.Subject{Netns: cur.Netns.Name},
		Summary:  fmt.Sprintf("%d more listeners with a full or nearly full accept queue", len(rest)),
		Evidence: []diag.Evidence{{Name: "listeners", Value: strings.Join(ports, " "), Source: "sock_diag LISTEN Recv-Q/Send-Q", Threshold: fmt.Sprintf(">= %.0f%% of backlog", listenNearFull*100)}},
		Fixes:    []diag.Fix{{Scope: "application", Target: "diagnosis", Text: "list every listener's queue and backlog", Command: "ss -lnt"}},
	}
}

func somaxEvidence(somax int64, ok bool) diag.Evidence {
	ev := diag.Evidence{Name: "somaxconn", Source: "sysctl net.core.somaxconn"}
	if ok {
		ev.Value = fmt.Sprint(somax)
	} else {
		ev.Value = "unknown (not collected)"
	}
	return ev
}

func abortOnOverflowEvidence(s *snapshot.Snapshot) diag.Evidence {
	ev := diag.Evidence{Name: "tcp_abort_on_overflow", Source: "sysctl net.ipv4.tcp_abort_on_overflow"}
	switch v, ok := s.SysctlInt("net.ipv4.tcp_abort_on_overflow"); {
	case !ok:
		ev.Value = "unknown (not collected)"
	case v == 0:
		ev.Value = "0: overflowing handshakes are dropped silently; clients retransmit and wait (1 s, 2 s, ...) instead of failing; keep 0 unless failing fast is wanted"
	default:
		ev.Value = fmt.Sprintf("%d: overflowing handshakes are answered with RST; clients see \"connection reset\" at once", v)
	}
	return ev
}

// backlogFixes gives the settings that raise sk's backlog to n, in the
// terms of the listener's owner.
func backlogFixes(s *snapshot.Snapshot, sk *snapshot.Socket, n, somax int64, hasSomax bool) []diag.Fix {
	_, cmd := tcpmodel.FirstOwner(s, sk)
	return remedy.Backlog(cmd, sk.Local.Port(), n, somax, hasSomax)
}

// listenerName is ":8080" for a listener on every address, else
// "10.0.0.1:8080".
func listenerName(l netip.AddrPort) string {
	if l.Addr().IsUnspecified() {
		return fmt.Sprintf(":%d", l.Port())
	}
	return l.String()
}

// overflowDropEvidence is the handshakes the listener at local dropped
// for a full queue, as the eBPF source counted them in the current
// snapshot's window; n is 0 when unknown.
func overflowDropEvidence(in *diag.Input, local netip.AddrPort) (uint64, diag.Evidence) {
	cur := in.Cur
	ev := diag.Evidence{Name: "overflow drops (eBPF)", Source: "eBPF tp_btf/kfree_skb reason " + tcpmodel.ReasonListenOverflow + ", rx_sk = this listener"}
	n, ok := tcpmodel.DropsAt(cur, local)
	if !ok {
		ev.Value = "unknown (ListenOverflows is netns-wide): " + tcpmodel.ProgramMissing(cur, snapshot.ProgDrops)
		return 0, ev
	}
	over, _ := in.CounterDelta("TcpExt.ListenOverflows")
	if n == 0 && over > 0 {
		ev.Value = unseenOverflows(0, over, "at this listener")
		return 0, ev
	}
	ev.Value = fmt.Sprintf("listener %s dropped %d handshakes in %s", listenerName(local), n, units.Dur(cur.Events.Interval()))
	ev.Value += unseenOverflows(n, over, "")
	return n, ev
}

// unseenOverflows says what of the namespace's over ListenOverflows the
// drop program cannot see, counted of them. The kernel refuses a SYN at
// a full accept queue in tcp_conn_request and frees it with consume_skb,
// not kfree_skb, so no drop reason is ever recorded for it: only a
// handshake's final ACK (or first data) meeting a full queue is dropped
// with TCP_LISTEN_OVERFLOW. With none counted (where says where) the
// line must not read "0"; with some, it says the rest were not visible.
func unseenOverflows(counted uint64, over int64, where string) string {
	const why = "SYNs refused at a full accept queue are freed without a drop reason (consume_skb, not kfree_skb), so eBPF counts only final ACKs that meet a full queue"
	if over <= 0 || counted >= uint64(over) {
		return ""
	}
	if counted == 0 {
		return fmt.Sprintf("cannot see these: ListenOverflows +%d in the namespace, none freed with %s %s: %s", over, tcpmodel.ReasonListenOverflow, where, why)
	}
	return fmt.Sprintf("; the other %d of ListenOverflows +%d (netns-wide) were not visible to eBPF: other listeners', or %s", uint64(over)-counted, over, why)
}

// synRetransmitEvidence is the client side of a full queue: SYNs sent
// from this namespace to the listener that went unanswered.
func synRetransmitEvidence(in *diag.Input, local netip.AddrPort) diag.Evidence {
	cur := in.Cur
	ev := diag.Evidence{Name: "SYN retransmits to it (eBPF)", Source: "eBPF tp_btf/tcp_retransmit_skb in SYN_SENT, clients in this namespace"}
	rs, ok := tcpmodel.SynRetransmits(cur, func(d netip.AddrPort) bool { return tcpmodel.SameListener(local, d) })
	if !ok {
		ev.Value = "unknown: " + tcpmodel.ProgramMissing(cur, snapshot.ProgRetransmits)
		return ev
	}
	var n uint64
	for _, r := range rs {
		n += r.Count
	}
	if n == 0 {
		ev.Value = fmt.Sprintf("none from clients in this namespace in %s (clients elsewhere count them in theirs)", units.Dur(cur.Events.Interval()))
		return ev
	}
	ev.Value = fmt.Sprintf("%d in %s: %s", n, units.Dur(cur.Events.Interval()), tcpmodel.TopPeers(rs, 5))
	return ev
}
