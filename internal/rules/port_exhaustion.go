package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

const (
	// portWarnFrac and portCritFrac: share of the usable ephemeral range
	// one (source, destination, port) uses.
	portWarnFrac = 0.70
	portCritFrac = 0.90
	// portWarnETA and portCritETA: forecast time to exhaustion that
	// raises a warning or critical finding below the fractions above.
	portWarnETA = 10 * time.Minute
	portCritETA = time.Minute
	// portMaxFindings caps per-destination findings.
	portMaxFindings = 10
)

func portExhaustion() diag.Rule {
	return diag.Rule{ID: "port-exhaustion", Title: "Ephemeral port exhaustion", Check: checkPortExhaustion}
}

// portSeverity grades a destination's forecast, 0 when healthy.
func portSeverity(f portForecast) diag.Severity {
	switch {
	case f.full || f.frac >= portCritFrac || f.exhausts && f.eta <= portCritETA:
		return diag.Critical
	case f.frac >= portWarnFrac || f.exhausts && f.eta <= portWarnETA:
		return diag.Warning
	}
	return 0
}

func checkPortExhaustion(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	if err := sockdiagGone(cur); err != nil {
		return nil, err
	}
	e, err := ephemeralPorts(cur)
	if err != nil {
		return nil, err
	}
	hits := destHits(in, e, func(_ portUse, f portForecast) diag.Severity { return portSeverity(f) },
		func(u portUse) int { return u.used })
	return destFindings(cur, hits, portMaxFindings, func(h destFinding) diag.Finding { return portFinding(in, e, h) }), nil
}

func portFinding(in *diag.Input, e *ephemeral, h destFinding) diag.Finding {
	cur := in.Cur
	u, f := h.agg.use, h.f
	pid := h.agg.topPid()
	cmd := commandOf(cur, pid)
	sub := diag.Subject{Netns: cur.Netns.Name, Local: h.key.src.String(), Remote: h.key.dst.String(), Pid: pid, Command: cmd}
	who := "owner unknown"
	if pid != 0 {
		who = fmt.Sprintf("%s pid %d", cmd, pid)
	}
	summary := fmt.Sprintf("connections from %s to %s (%s) use %d of %d usable ephemeral ports (%s)",
		h.key.src, h.key.dst, who, u.used, e.usable(), pct(f.frac))
	switch {
	case f.full:
		summary += ": connect() to it fails with EADDRNOTAVAIL now"
	case f.exhausts:
		summary += fmt.Sprintf("; at %+.1f/s exhausted in about %s", f.growth, fmtDur(f.eta))
	}
	ev := portEvidence(e, u, f, in.Window(), fmt.Sprintf("warning >= %.0f%%, critical >= %.0f%%; or forecast exhaustion within %s / %s",
		portWarnFrac*100, portCritFrac*100, fmtDur(portWarnETA), fmtDur(portCritETA)))
	ev = append(ev,
		diag.Evidence{Name: "processes", Value: h.agg.ownerList(cur), Source: "/proc/PID/fd socket inodes"},
		diag.Evidence{Name: "connect() failures", Value: "not counted by the kernel: EADDRNOTAVAIL (\"Cannot assign requested address\") only reaches the application and its log", Source: "kernel: no counter exists"},
	)
	peak := portPeak(u, f)
	fixes := []diag.Fix{reuseFix(cmd, h.key.dst), spreadFix(peak, e.usable())}
	if fx, ok := widenRangeFix(e, peak); ok {
		fixes = append(fixes, fx)
	}
	if u.tw*2 >= u.used {
		if fx, ok := twReuseFix(cur); ok {
			fixes = append(fixes, fx)
		}
	}
	return diag.Finding{Severity: h.sev, Subject: sub, Summary: summary, Evidence: ev, Fixes: fixes}
}

func moreDestinations(cur *snapshot.Snapshot, rest []destFinding) diag.Finding {
	var names []string
	for i, h := range rest {
		if i == 20 {
			names = append(names, "...")
			break
		}
		names = append(names, fmt.Sprintf("%s->%s %s", h.key.src, h.key.dst, pct(h.f.frac)))
	}
	return diag.Finding{
		Severity: rest[0].sev,
		Subject:  diag.Subject{Netns: cur.Netns.Name},
		Summary:  fmt.Sprintf("%d more destinations near ephemeral port exhaustion", len(rest)),
		Evidence: []diag.Evidence{{Name: "destinations", Value: strings.Join(names, ", "), Source: "sock_diag sockets with an ephemeral local port", Threshold: fmt.Sprintf(">= %.0f%% of usable ports", portWarnFrac*100)}},
		Fixes:    []diag.Fix{{Scope: "application", Target: "diagnosis", Text: "count sockets per destination", Command: "ss -tan | awk 'NR>1{print $5}' | sort | uniq -c | sort -rn | head"}},
	}
}
