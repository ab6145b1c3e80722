// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// EventReader is the eBPF lifecycle source (*bpfsource.Source): counts
// since its previous read, for every namespace at once.
type EventReader interface {
	Read() (*bpfsource.Reading, error)
}

// AddEvents reads the event counters of r once and gives each of snaps
// its namespace's share, as a collection does after its dumps.
func AddEvents(r EventReader, snaps ...*snapshot.Snapshot) {
	(&pass{}).events(r, snaps)
}

func eventsOf(r *bpfsource.Reading, inode uint64) *snapshot.Events {
	ev := &snapshot.Events{Since: r.Since, Until: r.Until, Lost: r.LostFlows + r.LostDrops + r.LostRetransmits + r.LostResets}
	for _, m := range r.Missing {
		ev.Missing = append(ev.Missing, snapshot.EventProgram{Program: m.Program, Reason: m.Reason})
	}
	for prog, n := range r.Skipped {
		ev.Skipped = append(ev.Skipped, snapshot.EventProgramSkipped{Program: prog, Runs: n})
	}
	slices.SortFunc(ev.Skipped, func(a, b snapshot.EventProgramSkipped) int { return cmp.Compare(a.Program, b.Program) })
	for _, d := range r.Drops[inode] {
		ev.Drops = append(ev.Drops, snapshot.EventDrop{Reason: d.Reason, Listener: d.Listener, Count: d.Count})
	}
	slices.SortFunc(ev.Drops, func(a, b snapshot.EventDrop) int {
		return cmp.Or(cmp.Compare(a.Reason, b.Reason), a.Listener.Compare(b.Listener))
	})
	for _, x := range r.Resets[inode] {
		ev.Resets = append(ev.Resets, snapshot.EventReset{Sent: x.Sent, Reason: x.Reason, Remote: x.Peer, LocalPort: x.LocalPort, Count: x.Count})
	}
	slices.SortFunc(ev.Resets, func(a, b snapshot.EventReset) int {
		return cmp.Or(-cmp.Compare(btoi(a.Sent), btoi(b.Sent)), cmp.Compare(a.Reason, b.Reason), a.Remote.Compare(b.Remote), cmp.Compare(a.LocalPort, b.LocalPort))
	})
	for _, x := range r.Retransmits[inode] {
		ev.Retransmits = append(ev.Retransmits, snapshot.EventRetransmit{Remote: x.Peer, LocalPort: x.LocalPort, SYN: x.SYN, Count: x.Count})
	}
	slices.SortFunc(ev.Retransmits, func(a, b snapshot.EventRetransmit) int {
		return cmp.Or(-cmp.Compare(btoi(a.SYN), btoi(b.SYN)), a.Remote.Compare(b.Remote), cmp.Compare(a.LocalPort, b.LocalPort))
	})
	for _, f := range r.ByNetns[inode] {
		ev.Flows = append(ev.Flows, snapshot.EventFlow{
			Pid: f.Pid, Command: f.Comm, Remote: f.Peer, LocalPort: f.LocalPort,
			Opens: f.Opens, FailedPorts: f.FailedPorts, ActiveCloses: f.ActiveCloses, PeerCloses: f.PeerCloses,
			Refused: f.Refused, TimedOut: f.TimedOut, Unreachable: f.Unreachable, Abandoned: f.Abandoned,
			Ended: f.Lifetimes, Lifetime: f.LifetimeTotal,
		})
	}
	ev.Flows = attributeFailures(ev.Flows)
	slices.SortFunc(ev.Flows, func(a, b snapshot.EventFlow) int {
		return cmp.Or(cmp.Compare(a.Pid, b.Pid), a.Remote.Compare(b.Remote), cmp.Compare(a.LocalPort, b.LocalPort))
	})
	return ev
}

// attributeFailures moves the connects the network ended (refused, timed
// out, unreachable), which the kernel counts under pid 0, to the one
// process that opened connections to the same destination in the same
// interval. With several openers of one command (a health checker that
// runs curl for every probe) they stay under pid 0 with that command;
// with openers of several commands, or none (a timeout whose connect()
// was in an earlier interval), they stay unknown.
func attributeFailures(fs []snapshot.EventFlow) []snapshot.EventFlow {
	// The openers of each destination: the one, or how many and whether
	// they share a command.
	type openers struct {
		first, n int
		command  string
	}
	byDst := map[netip.AddrPort]*openers{}
	for j := range fs {
		if fs[j].Pid == 0 || fs[j].Opens == 0 {
			continue
		}
		o := byDst[fs[j].Remote]
		if o == nil {
			byDst[fs[j].Remote] = &openers{first: j, n: 1, command: fs[j].Command}
			continue
		}
		if o.command != fs[j].Command {
			o.command = ""
		}
		o.n++
	}
	merged := make([]bool, len(fs))
	for i, f := range fs {
		if f.Pid != 0 || f.Opens != 0 || f.Accepted() {
			continue
		}
		o := byDst[f.Remote]
		switch {
		case o == nil:
		case o.n == 1:
			fs[o.first].AddFailures(&fs[i])
			merged[i] = true
		default:
			fs[i].Command = o.command
		}
	}
	out := make([]snapshot.EventFlow, 0, len(fs))
	for i, f := range fs {
		if !merged[i] {
			out = append(out, f)
		}
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
