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
	// portWarnFrac and portCritFrac: share of the usable ephemeral range
	// one (source, destination, port) holds: ports connect() cannot pick,
	// open sockets plus TIME_WAIT ones not yet reusable.
	portWarnFrac = remedy.KeepBelow
	portCritFrac = 0.90
	// portWarnETA and portCritETA: forecast time to exhaustion that
	// raises a warning or critical finding below the fractions above.
	portWarnETA = 10 * time.Minute
	portCritETA = time.Minute
	// portMaxFindings caps per-destination findings.
	portMaxFindings = 10
)

func portExhaustion() diag.Rule {
	return diag.Rule{ID: "port-exhaustion", Title: "Ephemeral port exhaustion", Check: checkPortExhaustion,
		Keeps: []diag.Keeper{diag.Keep(portsHeld{}), diag.Keep(flowOpeners{})}}
}

// portsHeld keeps each destination's ephemeral ports held
// (tcpmodel.DestUse.Held) in the window's first sample, from that
// sample's own port space; nil when that was unknown.
type portsHeld struct{}

// Keep tallies s.
func (portsHeld) Keep(s *snapshot.Snapshot) map[tcpmodel.Dest]int {
	p, err := tcpmodel.NewPortSpace(s)
	if err != nil {
		return nil
	}
	held := map[tcpmodel.Dest]int{}
	for k, u := range p.DestUsage(s, nil, 0) {
		held[k] = u.Held()
	}
	return held
}

// portSpaceOf is the current sample's port space (tcpmodel.NewPortSpace):
// port-exhaustion and time-wait-churn both judge it, once.
type portSpaceOf struct{}

type portSpace struct {
	p   *tcpmodel.PortSpace
	err error
}

// Compute builds the port space of in.Cur.
func (portSpaceOf) Compute(in *diag.Input) portSpace {
	p, err := tcpmodel.NewPortSpace(in.Cur)
	return portSpace{p, err}
}

// destUsageOf is every destination's port use in the current sample
// (tcpmodel.PortSpace.DestUsage, the port space portSpaceOf's), which
// port-exhaustion and time-wait-churn both tally: once; nil when the port
// space is unknown.
type destUsageOf struct{}

// Compute tallies in.Cur.
func (destUsageOf) Compute(in *diag.Input) map[tcpmodel.Dest]*tcpmodel.DestUse {
	ps := diag.MemoOf(in, portSpaceOf{})
	if ps.err != nil {
		return nil
	}
	return ps.p.DestUsage(in.Cur, prevState(in), in.Window())
}

// portSeverity grades a destination's forecast, 0 when healthy.
func portSeverity(f tcpmodel.Forecast) diag.Severity {
	switch {
	case f.Full || f.Frac >= portCritFrac || f.Exhausts && f.ETA <= portCritETA:
		return diag.Critical
	case f.Frac >= portWarnFrac || f.Exhausts && f.ETA <= portWarnETA:
		return diag.Warning
	}
	return 0
}

// destHit is one destination's port use and forecast.
type destHit struct {
	key tcpmodel.Dest
	use *tcpmodel.DestUse
	f   tcpmodel.Forecast
	sev diag.Severity
}

// destHits measures every destination's port use and keeps those grade
// fires on: most severe first, then larger rank, then by address.
// p is portSpaceOf's.
func destHits(in *diag.Input, p *tcpmodel.PortSpace, grade func(*tcpmodel.DestUse, tcpmodel.Forecast) diag.Severity, rank func(*tcpmodel.DestUse) int) []destHit {
	use := diag.MemoOf(in, destUsageOf{})
	// What each destination held in the previous sample (portsHeld),
	// unknown (-1) without one or without its port range.
	prevHeld, hasPrev := diag.KeptOf(in, portsHeld{})
	var hits []destHit
	for k, u := range use {
		ph := -1
		if hasPrev && prevHeld != nil {
			ph = prevHeld[k]
		}
		f := u.Forecast(p.Usable(), ph, in.Window(), p.Reuse.Delay)
		if sev := grade(u, f); sev > 0 {
			hits = append(hits, destHit{k, u, f, sev})
		}
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].sev != hits[j].sev {
			return hits[i].sev > hits[j].sev
		}
		if ri, rj := rank(hits[i].use), rank(hits[j].use); ri != rj {
			return ri > rj
		}
		return hits[i].key.Dst.String() < hits[j].key.Dst.String()
	})
	return hits
}

// destFindings builds a finding for each of the first n hits and sums up
// the rest in one.
func destFindings(cur *snapshot.Snapshot, hits []destHit, n int, build func(destHit) diag.Finding) []diag.Finding {
	var fs []diag.Finding
	for i, h := range hits {
		if i == n {
			fs = append(fs, moreDestinations(cur, hits[i:]))
			break
		}
		fs = append(fs, build(h))
	}
	return fs
}

func checkPortExhaustion(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagGone(cur); err != nil {
		return nil, err
	}
	ps := diag.MemoOf(in, portSpaceOf{})
	if ps.err != nil {
		return nil, diag.Unknownf("%v", ps.err)
	}
	p := ps.p
	hits := destHits(in, p, func(_ *tcpmodel.DestUse, f tcpmodel.Forecast) diag.Severity { return portSeverity(f) },
		func(u *tcpmodel.DestUse) int { return u.Held() })
	return destFindings(cur, hits, portMaxFindings, func(h destHit) diag.Finding { return portFinding(in, p, h) }), nil
}

// destPrevOwner is the owner of a destination's connections in the
// previous sample when none of its sockets has an owner now (a range in
// TIME_WAIT, connects failing), else 0: destOwner and processesEvidence
// both use it, and finding it scans the previous sample's sockets.
func destPrevOwner(in *diag.Input, k tcpmodel.Dest, u *tcpmodel.DestUse) int {
	if u.Owners.Len() > 0 {
		return 0
	}
	return prevOpener(in, tcpmodel.Flow{Opener: k.Src, Service: k.Dst})
}

// destOwner names the process holding most open sockets to a destination.
// When none of its sockets is open now, prevPid (destPrevOwner), else the
// process the eBPF source saw call connect() to it.
func destOwner(in *diag.Input, prevPid int, u *tcpmodel.DestUse) (pid int, cmd, who string) {
	pid = u.Owners.Top()
	cmd = tcpmodel.Command(in.Cur, pid)
	if pid == 0 && prevPid != 0 {
		pid, cmd = prevPid, tcpmodel.Command(in.Prev, prevPid)
	}
	// No socket owner seen, now or before: the eBPF source names who
	// calls connect() to it.
	if pid == 0 && u.Connects != nil {
		if top := u.Connects.Top(); top != nil {
			pid, cmd = top.Pid, top.Command
			return pid, cmd, fmt.Sprintf("%s pid %d, from its connect() calls", cmd, pid)
		}
	}
	who = "owner unknown"
	if pid != 0 {
		who = fmt.Sprintf("%s pid %d", cmd, pid)
	}
	return pid, cmd, who
}

func portFinding(in *diag.Input, p *tcpmodel.PortSpace, h destHit) diag.Finding {
	cur := in.Cur
	u, f := h.use, h.f
	prevPid := destPrevOwner(in, h.key, u)
	pid, cmd, who := destOwner(in, prevPid, u)
	sub := diag.Subject{Netns: cur.Netns.Name, Local: diag.Host(h.key.Src), Remote: diag.At(h.key.Dst), Pid: pid, Command: cmd}
	summary := fmt.Sprintf("connections from %s to %s (%s) hold %d of %d usable ephemeral ports (%s)",
		h.key.Src, h.key.Dst, who, u.Held(), p.Usable(), units.Pct(f.Frac))
	switch {
	case u.Connects != nil && u.Connects.Failed > 0:
		summary += fmt.Sprintf(": connect() to it failed with EADDRNOTAVAIL %d times in %s", u.Connects.Failed, units.Dur(u.Connects.Interval))
	case f.Full:
		summary += ": connect() to it fails with EADDRNOTAVAIL now"
	case f.Exhausts:
		summary += fmt.Sprintf("; at %+.1f/s exhausted in about %s", f.Growth, units.Dur(f.ETA))
	}
	ev := portEvidence(p, u, f, in.Window(), fmt.Sprintf("warning >= %.0f%%, critical >= %.0f%%; or forecast exhaustion within %s / %s",
		portWarnFrac*100, portCritFrac*100, units.Dur(portWarnETA), units.Dur(portCritETA)))
	ev = append(ev, processesEvidence(in, prevPid, u), connectFailures(cur, h.key.Dst, u.Connects))
	peak, dev := portDemand(f, u)
	ev = append(ev, dev)
	fixes := []diag.Fix{remedy.Reuse(cmd, h.key.Dst, poolSize(u.Open)), remedy.Spread(peak, p.Usable())}
	if fx, ok := remedy.WidenRange(p, peak); ok {
		fixes = append(fixes, fx)
	}
	if u.TW*2 >= u.Held() {
		if fx, ok := remedy.TWReuse(p.Reuse, u.Reuse); ok {
			fixes = append(fixes, fx)
		}
	}
	return diag.Finding{Severity: h.sev, Subject: sub, Summary: summary, Evidence: ev, Fixes: fixes}
}

// portDemand is the ports the destination's connect() calls want held:
// a range that is full caps what sockets show (held, and the close rate
// of the connects that got a port), so the demand is the failed connects
// plus the held ones. With the eBPF source, every connect() that got a
// port or failed for want of one (refused and unanswered ones aside), per
// second, holds its port for Hold after it ends: open + that rate x Hold,
// at least the sockets' own peak (Forecast.Peak). Without it failed
// connects leave no trace, and the demand is at least the peak.
func portDemand(f tcpmodel.Forecast, u *tcpmodel.DestUse) (int, diag.Evidence) {
	held := u.Held()
	peak := f.Peak(held)
	ev := diag.Evidence{Name: "demand", Source: "derived: open sockets + (connect() calls that got a port or failed for want of one, per second) x " + units.Dur(f.Hold) + " (how long a closed port stays held)"}
	cn := u.Connects
	if cn == nil || cn.Interval <= 0 {
		ev.Value = fmt.Sprintf("at least %d ports (what the sockets hold or level off at); connect() calls that failed are not counted without the eBPF source", peak)
		if f.Full {
			ev.Value = fmt.Sprintf("more than the %d ports the range holds: connect() calls that failed for want of a port are not counted without the eBPF source, so the fixes below size for %d at least", held, peak)
		}
		ev.Source = "sock_diag; the kernel keeps no counter of EADDRNOTAVAIL"
		return peak, ev
	}
	attempts := cn.Opens - min(cn.Unanswered, cn.Opens)
	rate := float64(attempts) / cn.Interval.Seconds()
	want := int(float64(u.Open) + rate*f.Hold.Seconds() + 0.5)
	ev.Value = fmt.Sprintf("about %d ports: %d open + %.1f connect() calls/s (%d in %s, %d of them failed for want of a port) x %s", max(want, peak), u.Open, rate, attempts, units.Dur(cn.Interval), cn.Failed, units.Dur(f.Hold))
	return max(want, peak), ev
}

// connectFailures is the eBPF count of connect() calls to dst that found
// no free port, or what is missing without it.
func connectFailures(cur *snapshot.Snapshot, dst netip.AddrPort, cn *tcpmodel.Connects) diag.Evidence {
	ev := diag.Evidence{Name: "connect() failures", Source: "eBPF tp_btf/inet_sock_set_state: SYN_SENT->CLOSE with no source port, in the caller's context"}
	if cn == nil {
		ev.Value = "not counted: the kernel keeps no counter of EADDRNOTAVAIL (\"Cannot assign requested address\"), which only reaches the application and its log; the eBPF source (--bpf) counts them: " + tcpmodel.EventsMissing(cur)
		ev.Source = "kernel: no counter exists"
		return ev
	}
	w := units.Dur(cn.Interval)
	if cn.Failed == 0 {
		ev.Value = fmt.Sprintf("none in %s (%d connect() calls to %s)", w, cn.Opens, dst)
		return ev
	}
	var parts []string
	for i, p := range cn.Procs {
		if p.Failed == 0 {
			break
		}
		if i == 3 {
			parts = append(parts, "more")
			break
		}
		parts = append(parts, fmt.Sprintf("connect() failed with EADDRNOTAVAIL %d times in %s from %s (pid %d) to %s", p.Failed, w, p.Command, p.Pid, dst))
	}
	ev.Value = strings.Join(parts, "; ") + fmt.Sprintf(" (%d of %d connect() calls)", cn.Failed, cn.Opens)
	return ev
}

// processesEvidence names who holds a destination's open sockets, or
// held them in the previous sample (prevPid, from destPrevOwner).
func processesEvidence(in *diag.Input, prevPid int, u *tcpmodel.DestUse) diag.Evidence {
	cur := in.Cur
	ev := diag.Evidence{Name: "processes", Value: u.Owners.List(cur), Source: "/proc/PID/fd socket inodes"}
	if ev.Value == "" {
		if prevPid != 0 {
			ev.Value = tcpmodel.Who(in.Prev, []int{prevPid}) + " (in the previous sample; none of its connections to this destination is open now)"
			return ev
		}
		ev.Value = "unknown: no open socket to this destination has a known owner (TIME_WAIT sockets belong to no process)"
		if why := tcpmodel.OwnersMissing(cur); why != "" {
			ev.Value += "; owner scan: " + why
		}
	}
	return ev
}

// poolSize is the pool to recommend for open concurrent connections.
func poolSize(open int) int { return int(tcpmodel.NextPow2(int64(max(8, 2*open)))) }

// portEvidence is the shared evidence for a destination's port use.
func portEvidence(p *tcpmodel.PortSpace, u *tcpmodel.DestUse, f tcpmodel.Forecast, window time.Duration, threshold string) []diag.Evidence {
	ev := []diag.Evidence{
		{Name: "ephemeral ports held to this destination", Value: fmt.Sprintf("%d of %d usable (%s): %d open, %d in TIME_WAIT of which %d reusable now", u.Held(), p.Usable(), units.Pct(f.Frac), u.Open, u.TW, u.TWReusable),
			Source: "sock_diag sockets with an ephemeral local port, grouped by (source, destination, port); TIME_WAIT age from its timer", Threshold: threshold},
		{Name: "usable ephemeral ports", Value: fmt.Sprintf("%d = %d-%d (%d ports) minus %d reserved minus %d bound by listeners or bind()", p.Usable(), p.Lo, p.Hi, p.Size(), p.NReserved, len(p.Bound)),
			Source: "sysctl net.ipv4.ip_local_port_range, net.ipv4.ip_local_reserved_ports; sock_diag LISTEN and bound sockets"},
		reuseEvidence(p.Reuse, u),
	}
	if !f.HasRate {
		return ev
	}
	w := units.Dur(window)
	closed := fmt.Sprintf("%.1f/s (%d entered TIME_WAIT in %s; each holds its port %s)", f.CloseRate, u.ClosedIn, w, units.Dur(f.Hold))
	if f.Recent > 0 {
		closed = fmt.Sprintf("%.1f/s (%d in TIME_WAIT younger than %s, counted there because connect() may have taken older ones over; %d in the %s window; each holds its port %s)",
			f.CloseRate, u.ClosedRecent, units.Dur(f.Recent), u.ClosedIn, w, units.Dur(f.Hold))
	}
	ev = append(ev,
		diag.Evidence{Name: "closed first by this host", Value: closed, Source: "sock_diag TIME-WAIT sockets younger than the window (idiag_expires) or not in TIME-WAIT in the previous sample"},
		diag.Evidence{Name: "growth", Value: fmt.Sprintf("%+.1f held ports/s", f.Growth), Source: "sock_diag, previous and current sample"},
		forecastEvidence(f, u, p.Usable()),
	)
	return ev
}

func reuseEvidence(r tcpmodel.Reuse, u *tcpmodel.DestUse) diag.Evidence {
	v := r.Describe(u.Reuse)
	if u.NoTimestamps {
		v = "an established connection to this destination runs without TCP timestamps: TIME_WAIT ports are not reused; " + v
	}
	return diag.Evidence{Name: "TIME_WAIT reuse", Value: v, Source: "sysctl net.ipv4.tcp_tw_reuse, tcp_tw_reuse_delay, tcp_timestamps; tcp_info.options"}
}

func forecastEvidence(f tcpmodel.Forecast, u *tcpmodel.DestUse, usable int) diag.Evidence {
	ev := diag.Evidence{Name: "forecast", Source: fmt.Sprintf("derived: open sockets + close rate x %s (how long a closed port stays held) against usable ports", units.Dur(f.Hold))}
	switch {
	case f.Full:
		ev.Value = "exhausted now: the next connect() to this destination fails with EADDRNOTAVAIL"
	case f.Exhausts:
		ev.Value = fmt.Sprintf("exhausted in about %s at %+.1f ports/s (this rate needs about %.0f ports, more than %d)", units.Dur(f.ETA), f.Growth, f.Plateau, usable)
	default:
		ev.Value = fmt.Sprintf("at this rate use levels off near %.0f ports (%s of the range)", f.Plateau, units.Pct(f.Plateau/float64(usable)))
		if u.Reuse && f.CloseRate > 0 {
			ev.Value += fmt.Sprintf("; without TIME_WAIT reuse it would need %.0f", f.PlateauWithoutReuse(u.Open))
		}
	}
	return ev
}

func moreDestinations(cur *snapshot.Snapshot, rest []destHit) diag.Finding {
	var names []string
	for i, h := range rest {
		if i == 20 {
			names = append(names, "...")
			break
		}
		names = append(names, fmt.Sprintf("%s->%s %s", h.key.Src, h.key.Dst, units.Pct(h.f.Frac)))
	}
	return diag.Finding{
		Severity: rest[0].sev,
		Subject:  diag.Subject{Netns: cur.Netns.Name},
		Summary:  fmt.Sprintf("%d more destinations near ephemeral port exhaustion", len(rest)),
		Evidence: []diag.Evidence{{Name: "destinations", Value: strings.Join(names, ", "), Source: "sock_diag sockets with an ephemeral local port", Threshold: fmt.Sprintf(">= %.0f%% of usable ports", portWarnFrac*100)}},
		Fixes:    []diag.Fix{{Scope: "application", Target: "diagnosis", Text: "count sockets per destination", Command: "ss -tan | awk 'NR>1{print $5}' | sort | uniq -c | sort -rn | head"}},
	}
}
