// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

const (
	// fdWarnFrac and fdCritFrac: open files against RLIMIT_NOFILE (per
	// process) or fs.file-max (host).
	fdWarnFrac = 0.80
	fdCritFrac = 0.95
	// fdMinLimit is the smallest limit recommended.
	fdMinLimit = 65536
	// fdMaxFindings caps per-process findings.
	fdMaxFindings = 10
)

func fdExhaustion() diag.Rule {
	return diag.Rule{ID: "fd-exhaustion", Title: "File descriptors near their limit", Check: checkFDExhaustion}
}

func fdSeverity(frac float64) diag.Severity {
	switch {
	case frac >= fdCritFrac:
		return diag.Critical
	case frac >= fdWarnFrac:
		return diag.Warning
	}
	return 0
}

func checkFDExhaustion(in *diag.Input) ([]diag.Finding, error) {
	cur := in.Cur
	var fs []diag.Finding
	known := 0
	type hit struct {
		p    *snapshot.Proc
		frac float64
	}
	var hits []hit
	for _, p := range cur.Procs {
		if p == nil || p.FDs < 0 || p.NofileSoft == nil || *p.NofileSoft <= 0 {
			continue // unknown or unlimited
		}
		known++
		if f := float64(p.FDs) / float64(*p.NofileSoft); fdSeverity(f) > 0 {
			hits = append(hits, hit{p, f})
		}
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].frac != hits[j].frac {
			return hits[i].frac > hits[j].frac
		}
		return hits[i].p.Pid < hits[j].p.Pid
	})
	if len(hits) > fdMaxFindings {
		hits = hits[:fdMaxFindings]
	}
	// Each finding counts its process's sockets: one pass for all.
	counts := map[int]*[2]int{}
	for _, h := range hits {
		counts[h.p.Pid] = new([2]int)
	}
	if len(counts) > 0 {
		for i := range cur.Sockets {
			sk := &cur.Sockets[i]
			pid, _ := cur.Owner(sk)
			if pid == 0 {
				continue
			}
			if c := counts[pid]; c != nil {
				c[0]++
				if sk.State == snapshot.CloseWait {
					c[1]++
				}
			}
		}
	}
	for _, h := range hits {
		c := counts[h.p.Pid]
		fs = append(fs, fdProcFinding(in, h.p, h.frac, c[0], c[1]))
	}
	host, hostOK := fdHostFinding(cur)
	if hostOK {
		fs = append(fs, host)
	}
	_, fileNr := cur.Sysctls["fs.file-nr"]
	if known == 0 && !fileNr {
		msg, _ := cur.Failed(snapshot.SourceOwners)
		return fs, diag.Unknownf("no process fd counts or limits and no fs.file-nr collected %s", msg)
	}
	return fs, nil
}

// fdProcFinding is the finding for process p at frac of its limit,
// holding socks TCP sockets (cw of them in CLOSE_WAIT) as first owner.
func fdProcFinding(in *diag.Input, p *snapshot.Proc, frac float64, socks, cw int) diag.Finding {
	cur := in.Cur
	soft := *p.NofileSoft
	n := tcpmodel.NextPow2(max(fdMinLimit, int64(2*p.FDs)))
	ev := []diag.Evidence{
		{Name: "open files", Value: fmt.Sprintf("%d of %d (%s)", p.FDs, soft, units.Pct(frac)), Source: "/proc/PID/fd count, /proc/PID/limits Max open files (soft)", Threshold: fmt.Sprintf("warning >= %.0f%%, critical >= %.0f%%", fdWarnFrac*100, fdCritFrac*100)},
	}
	hard := "unknown"
	if p.NofileHard != nil {
		hard = fmt.Sprint(*p.NofileHard)
		if *p.NofileHard < 0 {
			hard = "unlimited"
		}
	}
	ev = append(ev, diag.Evidence{Name: "hard limit", Value: hard, Source: "/proc/PID/limits Max open files (hard)"})
	summary := fmt.Sprintf("%s (pid %d) has %d of %d file descriptors open (%s): accept() and connect() fail with EMFILE at the limit", p.Command, p.Pid, p.FDs, soft, units.Pct(frac))
	if in.Prev != nil {
		if pp := in.Prev.Procs[p.Pid]; pp != nil && pp.FDs >= 0 && in.Window() > 0 {
			rate := float64(p.FDs-pp.FDs) / in.Window().Seconds()
			v := fmt.Sprintf("%d -> %d (%+.1f/s)", pp.FDs, p.FDs, rate)
			if rate > 0 && int64(p.FDs) < soft {
				v += fmt.Sprintf(", limit reached in about %s", units.Dur(units.Seconds(float64(soft-int64(p.FDs))/rate)))
				summary += fmt.Sprintf("; growing %+.1f/s", rate)
			}
			ev = append(ev, diag.Evidence{Name: "growth", Value: v, Source: "/proc/PID/fd, previous and current sample"})
		}
	}
	ev = append(ev, diag.Evidence{Name: "TCP sockets / CLOSE_WAIT among them", Value: fmt.Sprintf("%d / %d", socks, cw), Source: "sock_diag sockets owned by the pid"})
	leak := diag.Fix{Scope: "application", Target: "leak-check",
		Text:    "check for a leak before raising the limit: if descriptors only grow, the limit just postpones the failure",
		Command: fmt.Sprintf("ls -l /proc/%d/fd | awk '{print $NF}' | sed 's/:.*//' | sort | uniq -c | sort -rn | head", p.Pid)}
	if cw > 0 {
		leak.Text = fmt.Sprintf("%d of its descriptors are CLOSE_WAIT sockets it never closed: fix that first (see close-wait-leak)", cw)
	}
	fixes := []diag.Fix{leak,
		{Scope: "kernel", Target: "systemd", Text: fmt.Sprintf("raise the limit of the service to %d", n),
			Command: fmt.Sprintf("systemctl edit UNIT  ->  [Service] LimitNOFILE=%d ; systemctl restart UNIT", n), Risk: "each descriptor costs kernel memory; the hard limit cannot exceed fs.nr_open"},
		{Scope: "kernel", Target: "prlimit", Text: "raise it on the running process without a restart",
			Command: fmt.Sprintf("prlimit --pid %d --nofile=%d:%d", p.Pid, n, n), Risk: "lost at the next restart: persist it as above"},
		{Scope: "kernel", Target: "limits.conf", Text: "for processes started from a login shell",
			Command: fmt.Sprintf("ulimit -n %d  (or in /etc/security/limits.conf: USER soft nofile %d / USER hard nofile %d)", n, n, n)},
	}
	sev := fdSeverity(frac)
	if c, own, ok := capBindsFirst(cur, p, socks); ok {
		// The server's own connection limit turns clients away before
		// its descriptors run out: no accept() fails with EMFILE, and a
		// higher LimitNOFILE lifts nothing (memcached even sets its own
		// to -c). app-connection-cap judges that limit.
		sev = diag.Info
		limit := tcpmodel.CapLimitIn(cur, c)
		summary = fmt.Sprintf("%s (pid %d) has %d of %d file descriptors open (%s), but its own connection limit binds first: %s %d lets clients have %d connections, and with the %d descriptors it holds besides them that stays below %d, so it turns clients away before accept() could fail with EMFILE; raising the open-file limit does not lift it (app-connection-cap judges that limit)",
			p.Command, p.Pid, p.FDs, soft, units.Pct(frac), c.Setting, c.Value, limit, own, soft)
		if c.App == "memcached" {
			summary += "; memcached sets its own open-file limit to -c when it starts"
		}
		ev = append(ev, diag.Evidence{Name: "its own connection limit", Value: fmt.Sprintf("%s %d (%s): %d for clients + %d other descriptors <= %d", c.Setting, c.Value, c.Source, limit, own, soft),
			Source: "internal/appcaps; tcpmodel.CapLimitIn", Threshold: "the limit binds first when clients at it plus the other descriptors fit the open-file limit: not above info"})
		fixes = []diag.Fix{{Scope: "application", Target: c.App,
			Text: fmt.Sprintf("if clients are turned away, raise %s's own limit (%s), as app-connection-cap computes it, not the open-file limit", c.Command, c.Setting)}}
		if cw > 0 || in.Prev != nil && in.Prev.Procs[p.Pid] != nil && in.Prev.Procs[p.Pid].FDs < p.FDs {
			fixes = append([]diag.Fix{leak}, fixes...)
		}
	}
	return diag.Finding{Severity: sev, Subject: diag.Subject{Netns: cur.Netns.Name, Pid: p.Pid, Command: p.Command},
		Summary: summary, Evidence: ev, Fixes: fixes}
}

// capBindsFirst finds the connection limit p's server set for itself
// (snapshot.AppCaps: p is its process or one of its held processes) that
// binds before the open-file limit: the connections clients may have at
// it plus the descriptors p holds besides its socks TCP sockets fit
// under NofileSoft. own is those other descriptors.
func capBindsFirst(cur *snapshot.Snapshot, p *snapshot.Proc, socks int) (c *snapshot.AppCap, own int64, ok bool) {
	for i := range cur.AppCaps {
		c := &cur.AppCaps[i]
		if c.Pid != p.Pid && !slices.Contains(c.Pids, p.Pid) {
			continue
		}
		own := int64(max(p.FDs-socks, 0))
		if limit := tcpmodel.CapLimitIn(cur, c); limit > 0 && limit+own <= *p.NofileSoft {
			return c, own, true
		}
	}
	return nil, 0, false
}

// fdHostFinding checks fs.file-nr (allocated, 0, max) against file-max.
func fdHostFinding(cur *snapshot.Snapshot) (diag.Finding, bool) {
	v, ok := cur.SysctlInts("fs.file-nr")
	if !ok || len(v) != 3 || v[2] <= 0 {
		return diag.Finding{}, false
	}
	frac := float64(v[0]) / float64(v[2])
	sev := fdSeverity(frac)
	if sev == 0 {
		return diag.Finding{}, false
	}
	n := tcpmodel.NextPow2(2 * v[0])
	return diag.Finding{Severity: sev, Subject: diag.Subject{Netns: cur.Netns.Name},
		Summary: fmt.Sprintf("the host has %d of %d file handles allocated (%s): open() and socket() fail with ENFILE at the limit", v[0], v[2], units.Pct(frac)),
		Evidence: []diag.Evidence{{Name: "allocated file handles", Value: fmt.Sprintf("%d of %d", v[0], v[2]), Source: "sysctl fs.file-nr (allocated, free, max)",
			Threshold: fmt.Sprintf("warning >= %.0f%%, critical >= %.0f%%", fdWarnFrac*100, fdCritFrac*100)}},
		Fixes: []diag.Fix{remedy.SetSysctls(diag.Fix{Scope: "kernel", Target: "sysctl", Text: fmt.Sprintf("raise the host limit to %d and persist it; find the process holding most first", n),
			Risk: strings.TrimSpace("kernel memory per open file; a leak keeps growing")}, "60-file-max.conf", remedy.Sysctl(cur, "fs.file-max", n))},
	}, true
}
