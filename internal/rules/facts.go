package rules

import (
	"fmt"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Shared derivations used by more than one rule. Keep each small and pure.

// subject builds a finding subject for a socket, naming its first owner.
func subject(s *snapshot.Snapshot, sk *snapshot.Socket) diag.Subject {
	sub := diag.Subject{Netns: s.Netns.Name, Local: sk.Local.String()}
	if sk.State != snapshot.Listen {
		sub.Remote = sk.Remote.String()
	}
	if len(sk.Pids) > 0 {
		sub.Pid = sk.Pids[0]
		if p := s.Procs[sk.Pids[0]]; p != nil {
			sub.Command = p.Command
		}
	}
	return sub
}

// owners describes a socket's owners as "nginx(pid 12), nginx(pid 13)",
// or "unknown owner" when the owner scan did not find it.
func owners(s *snapshot.Snapshot, pids []int) string {
	if len(pids) == 0 {
		return "unknown owner"
	}
	parts := make([]string, 0, len(pids))
	for _, pid := range pids {
		cmd := "?"
		if p := s.Procs[pid]; p != nil {
			cmd = p.Command
		}
		parts = append(parts, fmt.Sprintf("%s(pid %d)", cmd, pid))
	}
	return strings.Join(parts, ", ")
}

// fmtBytes prints a byte count the way people size buffers: 16K, 4M, 3.4M.
func fmtBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return trimFloat(b/(1<<30)) + "G"
	case b >= 1<<20:
		return trimFloat(b/(1<<20)) + "M"
	case b >= 1<<10:
		return trimFloat(b/(1<<10)) + "K"
	}
	return fmt.Sprintf("%.0fB", b)
}

// fmtRate prints bytes per second as bits per second: 93.2 Mbit/s.
func fmtRate(bytesPerSec float64) string {
	bits := bytesPerSec * 8
	switch {
	case bits >= 1e9:
		return trimFloat(bits/1e9) + " Gbit/s"
	case bits >= 1e6:
		return trimFloat(bits/1e6) + " Mbit/s"
	case bits >= 1e3:
		return trimFloat(bits/1e3) + " kbit/s"
	}
	return fmt.Sprintf("%.0f bit/s", bits)
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}

// pct prints a fraction as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }
