// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

const (
	// twWarnFrac: TIME_WAIT sockets to one destination holding this share
	// of the usable ephemeral ports, now or once the close rate levels off.
	twWarnFrac = 0.5
	// twCritFrac: the same share at which the finding is critical.
	twCritFrac = 0.8
	// twBucketsWarn: TIME_WAIT sockets in the netns against
	// tcp_max_tw_buckets.
	twBucketsWarn = 0.8
	// twMaxFindings caps per-destination findings.
	twMaxFindings = 10
)

func timeWaitChurn() diag.Rule {
	return diag.Rule{ID: "time-wait-churn", Title: "TIME_WAIT churn from short connections", Check: checkTimeWaitChurn,
		Keeps: []diag.Keeper{diag.Keep(portsHeld{}), diag.Keep(flowOpeners{})}}
}

// twHeld is how many of a destination's ports TIME_WAIT holds: those
// connect() cannot take over yet.
func twHeld(u *tcpmodel.DestUse) int { return u.TW - u.TWReusable }

// twSeverity grades the TIME_WAIT share of a destination's port space;
// 0 when TIME_WAIT is not what holds it.
func twSeverity(u *tcpmodel.DestUse, f tcpmodel.Forecast, usable int) diag.Severity {
	held := twHeld(u)
	if held == 0 || 2*held < u.Held() {
		return 0
	}
	share := float64(held) / float64(max(usable, 1))
	settled := 0.0
	if f.HasRate {
		settled = f.CloseRate * f.Hold.Seconds() / float64(max(usable, 1))
	}
	switch {
	case f.Full || f.Exhausts && f.ETA <= portCritETA || share >= twCritFrac || settled >= 1:
		return diag.Critical
	case share >= twWarnFrac || settled >= twWarnFrac || f.Exhausts:
		return diag.Warning
	}
	return 0
}

func checkTimeWaitChurn(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagGone(cur); err != nil {
		return nil, err
	}
	ps := diag.MemoOf(in, portSpaceOf{})
	if ps.err != nil {
		return nil, diag.Unknownf("%v", ps.err)
	}
	p := ps.p
	hits := destHits(in, p, func(u *tcpmodel.DestUse, f tcpmodel.Forecast) diag.Severity { return twSeverity(u, f, p.Usable()) },
		func(u *tcpmodel.DestUse) int { return u.TW })
	fs := destFindings(cur, hits, twMaxFindings, func(h destHit) diag.Finding { return twFinding(in, p, h) })
	if f, ok := twBuckets(in, p); ok {
		fs = append(fs, f)
	}
	if f, ok := twRecycle(cur); ok {
		fs = append(fs, f)
	}
	return fs, nil
}

func twFinding(in *diag.Input, p *tcpmodel.PortSpace, h destHit) diag.Finding {
	cur := in.Cur
	u, f := h.use, h.f
	prevPid := destPrevOwner(in, h.key, u)
	pid, cmd, _ := destOwner(in, prevPid, u)
	who := "process unknown (TIME_WAIT sockets have no owner and no open connection to it was seen)"
	if pid != 0 {
		who = fmt.Sprintf("%s (pid %d)", cmd, pid)
	}
	summary := fmt.Sprintf("%s closes connections to %s first: %d in TIME_WAIT hold ports, %d of %d usable held in all", who, h.key.Dst, twHeld(u), u.Held(), p.Usable())
	if f.HasRate && f.CloseRate > 0 {
		summary = fmt.Sprintf("%s closes %.0f connections/s to %s first: %d in TIME_WAIT hold ports for %s each, %d of %d usable held in all", who, f.CloseRate, h.key.Dst, twHeld(u), units.Dur(f.Hold), u.Held(), p.Usable())
	}
	switch {
	case f.Full:
		summary += "; the range is exhausted now"
	case f.Exhausts:
		summary += fmt.Sprintf("; exhausted in about %s at this rate", units.Dur(f.ETA))
	case f.HasRate:
		summary += fmt.Sprintf("; levels off near %s of the range", units.Pct(f.Plateau/float64(p.Usable())))
	}
	ev := portEvidence(p, u, f, in.Window(), fmt.Sprintf("TIME_WAIT holding warning >= %.0f%%, critical >= %.0f%% of usable ports, now or at the close rate x hold time", twWarnFrac*100, twCritFrac*100))
	ev = append(ev, processesEvidence(in, prevPid, u))
	if d, ok := in.CounterDelta("Tcp.ActiveOpens"); ok && d >= 0 {
		ev = append(ev, diag.Evidence{Name: "active opens (netns)", Value: fmt.Sprintf("%.1f/s", float64(d)/in.Window().Seconds()), Source: "/proc/net/snmp Tcp.ActiveOpens"})
	}
	fixes := []diag.Fix{remedy.Reuse(cmd, h.key.Dst, poolSize(u.Open))}
	if fx, ok := remedy.TWReuse(p.Reuse, u.Reuse); ok {
		fixes = append(fixes, fx)
	}
	peak := f.Peak(u.Held())
	if fx, ok := remedy.WidenRange(p, peak); ok {
		fixes = append(fixes, fx)
	}
	fixes = append(fixes, remedy.Spread(peak, p.Usable()), remedy.Linger())
	return diag.Finding{Severity: h.sev, Subject: diag.Subject{Netns: cur.Netns.Name, Local: diag.Host(h.key.Src), Remote: diag.At(h.key.Dst), Pid: pid, Command: cmd},
		Summary: summary, Evidence: ev, Fixes: fixes}
}

// twBuckets reports the netns running out of TIME_WAIT buckets: the
// kernel then skips TIME_WAIT and counts TCPTimeWaitOverflow.
func twBuckets(in *diag.Input, p *tcpmodel.PortSpace) (diag.Finding, bool) {
	cur := in.Cur
	maxTW, hasMax := cur.SysctlInt("net.ipv4.tcp_max_tw_buckets")
	tw, incoming := 0, map[uint16]int{}
	for i := range cur.Sockets {
		sk := &cur.Sockets[i]
		if sk.State != snapshot.TimeWait {
			continue
		}
		tw++
		if p.Listen[sk.Local.Port()] {
			incoming[sk.Local.Port()]++
		}
	}
	over, hasOver := in.CounterDelta("TcpExt.TCPTimeWaitOverflow")
	full := hasMax && maxTW > 0 && float64(tw) >= twBucketsWarn*float64(maxTW)
	if !(hasOver && over > 0) && !full {
		return diag.Finding{}, false
	}
	ports := make([]uint16, 0, len(incoming))
	for p := range incoming {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { return incoming[ports[i]] > incoming[ports[j]] })
	var in5 []string
	for i, p := range ports {
		if i == 5 {
			break
		}
		in5 = append(in5, fmt.Sprintf(":%d %d", p, incoming[p]))
	}
	maxS := "unknown"
	if hasMax {
		maxS = fmt.Sprint(maxTW)
	}
	ev := []diag.Evidence{
		{Name: "TIME_WAIT sockets", Value: fmt.Sprint(tw), Source: "sock_diag TIME-WAIT", Threshold: fmt.Sprintf(">= %.0f%% of tcp_max_tw_buckets", twBucketsWarn*100)},
		{Name: "tcp_max_tw_buckets", Value: maxS, Source: "sysctl net.ipv4.tcp_max_tw_buckets"},
		{Name: "closed first by us on listener ports", Value: strings.Join(in5, ", ") + " (incoming connections hold no ephemeral port, only memory)", Source: "sock_diag TIME-WAIT with a listener's local port"},
	}
	if hasOver {
		ev = append(ev, diag.Evidence{Name: "TCPTimeWaitOverflow", Value: fmt.Sprintf("+%d in %s", over, units.Dur(in.Window())), Source: "/proc/net/netstat TcpExt.TCPTimeWaitOverflow", Threshold: "> 0"})
	}
	return diag.Finding{
		Severity: diag.Warning, Subject: diag.Subject{Netns: cur.Netns.Name},
		Summary:  fmt.Sprintf("%d sockets in TIME_WAIT against tcp_max_tw_buckets %s: beyond it the kernel closes connections without TIME_WAIT protection", tw, maxS),
		Evidence: ev,
		Fixes: []diag.Fix{
			{Scope: "application", Target: "connection-pool", Text: "reuse connections (keep-alive, pools) so fewer are closed; for incoming ones, let clients close first (HTTP keep-alive, do not close right after the response)"},
			remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: "raise the bucket limit if memory allows (a TIME_WAIT socket costs about 200 bytes)",
				Risk: "more memory; does not make connections cheaper"}, "", remedy.Sysctl(cur, "net.ipv4.tcp_max_tw_buckets", tcpmodel.NextPow2(int64(2*max(tw, 1))))),
		},
	}, true
}

// twRecycle warns about tcp_tw_recycle, set on a kernel older than 4.12.
func twRecycle(cur *snapshot.Snapshot) (diag.Finding, bool) {
	v, ok := cur.SysctlInt("net.ipv4.tcp_tw_recycle")
	if !ok || v == 0 {
		return diag.Finding{}, false
	}
	return diag.Finding{
		Severity: diag.Warning, Subject: diag.Subject{Netns: cur.Netns.Name},
		Summary: "net.ipv4.tcp_tw_recycle is on: clients behind NAT fail to connect (their timestamps are not monotonic); it was removed in Linux 4.12",
		Evidence: []diag.Evidence{{Name: "tcp_tw_recycle", Value: fmt.Sprint(v), Source: "sysctl net.ipv4.tcp_tw_recycle", Threshold: "!= 0"},
			{Name: "kernel", Value: cur.Kernel, Source: "uname"}},
		Fixes: []diag.Fix{remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: "turn it off (and remove it from /etc/sysctl.d); use connection reuse or tcp_tw_reuse for outgoing connections",
			Risk: "none; more TIME_WAIT sockets remain, which is what TCP intends"}, "", remedy.Setting("net.ipv4.tcp_tw_recycle", "0"))},
	}, true
}
