// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"cmp"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// Connections that live a few milliseconds (a new connection per request)
// are gone by the time the owner scan reaches their process, so churn
// would have no opener. A second, quick look names it: the processes the
// scan saw holding sockets newer than the dump are opening sockets now;
// for each, dump the namespace's connections and read its fds at once,
// and match inodes within the same millisecond or so.
const (
	// flowMaxSockets: beyond this many sockets the extra dumps cost too
	// much; the openers stay unnamed, and the snapshot says why.
	flowMaxSockets = 50_000
	// flowMaxDump: a dump walks the host's TCP tables, every namespace's
	// sockets included, so the namespace's own count is not enough. A
	// dump of D reaches a connection of lifetime L while it lives with a
	// chance of about L/D, so when the look's first dump takes longer than
	// this (fewer than 8 rounds fit flowBudget) the look stops: the
	// openers stay unnamed rather than the budget go on dumps that catch
	// nothing.
	flowMaxDump  = flowBudget / 8
	flowMaxFlows = 16
	flowMaxProcs = 8
	flowRounds   = 64
	// flowBudget bounds the second look's time per namespace.
	flowBudget = 150 * time.Millisecond
	// flowChurnTW: a flow is looked for only when at least this many of
	// its connections closed in the last flowChurnAge (10/s): churn worth
	// naming, not the odd closed connection every host has.
	flowChurnTW  = 20
	flowChurnAge = 2 * time.Second
)

type flowKey struct {
	local  netip.Addr
	remote netip.AddrPort
}

// keyOf is the flow from local to remote as tcpmodel.FlowOf keys it
// (IPv4-mapped addresses in IPv4 form).
func keyOf(local netip.Addr, remote netip.AddrPort) flowKey {
	f := tcpmodel.FlowOf(local, remote)
	return flowKey{f.Opener, f.Service}
}

// unownedFlows lists client-side flows with no owner in s that churn:
// flowChurnTW TIME_WAIT sockets (of either side) younger than
// flowChurnAge. The churning flows are found first: owners are looked up
// for them alone, so a namespace of a million idle connections builds no
// map of every owned flow.
func unownedFlows(s *snapshot.Snapshot) map[flowKey]bool {
	// One pass finds the listeners and the TIME_WAIT sockets, which
	// are few: at a million sockets each pass is 192 MB to read.
	listen := map[uint16]bool{}
	var tw []int
	for i := range s.Sockets {
		switch s.Sockets[i].State {
		case snapshot.Listen:
			listen[s.Sockets[i].Local.Port()] = true
		case snapshot.TimeWait:
			tw = append(tw, i)
		}
	}
	// The opener's side: a server's connection is keyed from the remote
	// end connecting to us.
	key := func(sk *snapshot.Socket) (flowKey, bool) {
		if listen[sk.Local.Port()] {
			return keyOf(sk.Remote.Addr(), sk.Local.AddrPort()), true
		}
		return keyOf(sk.Local.Addr(), sk.Remote.AddrPort()), false
	}
	closed := map[flowKey]int{}
	for _, i := range tw {
		sk := &s.Sockets[i]
		if k, server := key(sk); server || sk.Pids.Len() == 0 {
			if tcpmodel.TimeWaitAge(sk) < flowChurnAge {
				closed[k]++
			}
		}
	}
	need := map[flowKey]bool{}
	for k, n := range closed {
		if n >= flowChurnTW {
			need[k] = true
		}
	}
	if len(need) == 0 {
		return need
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		switch sk.State {
		case snapshot.Listen, snapshot.Close, snapshot.BoundInactive:
			continue
		}
		if sk.Pids.Len() == 0 {
			continue
		}
		if k, server := key(sk); !server {
			delete(need, k) // owned
		}
	}
	return need
}

// nameFlowOwners fills s.FlowOwners for flows the owner scan left
// unowned, looking again at the processes opening sockets now.
func (c *Collector) nameFlowOwners(ns netns.NS, s *snapshot.Snapshot, own *procs.Owners, root string) {
	if own == nil {
		return
	}
	need := unownedFlows(s)
	if len(need) == 0 || len(need) > flowMaxFlows {
		return
	}
	if len(s.Sockets) > flowMaxSockets {
		// Worded the same in every sample, so a report says it once.
		s.AddError(snapshot.SourceFlowOwners, fmt.Errorf("second look not taken: more than %d sockets in the namespace", flowMaxSockets))
		return
	}
	var top uint32
	for i := range s.Sockets {
		top = max(top, s.Sockets[i].Inode)
	}
	// Socket inodes come from per-CPU batches of 1024: allow one batch
	// per CPU below the dump's newest.
	slack := uint32(1024 * (runtime.NumCPU() + 1))
	var cands []int
	for pid, ino := range own.Newest {
		if top > slack && ino+slack >= top {
			cands = append(cands, pid)
		}
	}
	// The newest sockets first: the busiest openers.
	slices.SortFunc(cands, func(a, b int) int { return cmp.Compare(own.Newest[b], own.Newest[a]) })
	if len(cands) > flowMaxProcs {
		cands = cands[:flowMaxProcs]
	}
	if len(cands) == 0 {
		return
	}
	found := map[flowKey]map[int]int{}
	comms := map[int]string{}
	sc := procs.Scanner{Root: root}
	// One thread in the namespace for every round: entering it costs more
	// than these connections live.
	deadline := time.Now().Add(flowBudget)
	slow := false
	_ = netns.Do(ns, func() error {
		dumps := 0
		for round := 0; round < flowRounds && len(found) < len(need) && time.Now().Before(deadline) && !slow; round++ {
			for _, pid := range cands {
				if !time.Now().Before(deadline) || slow {
					break
				}
				// fds first, then the dump: a dump walks every socket of the
				// namespace (about a microsecond each, TIME_WAIT included),
				// longer than these connections live, and reaches each one at
				// a random moment of the walk.
				comm, held, err := sc.Sockets(pid)
				if err != nil || len(held) == 0 {
					continue
				}
				holds := make(map[uint32]bool, len(held))
				for _, ino := range held {
					holds[ino] = true
				}
				start := time.Now()
				_ = sockdiag.Dump(sockdiag.Options{States: 1<<snapshot.Established | 1<<snapshot.SynSent | 1<<snapshot.CloseWait}, func(sk *snapshot.Socket) error {
					if k := keyOf(sk.Local.Addr(), sk.Remote.AddrPort()); need[k] && holds[sk.Inode] {
						if found[k] == nil {
							found[k] = map[int]int{}
						}
						found[k][pid]++
						comms[pid] = comm
					}
					return nil
				})
				if dumps++; dumps == 1 {
					slow = time.Since(start) > flowMaxDump
				}
			}
		}
		return nil
	})
	if slow && len(found) == 0 {
		// The message is the same in every sample, so a report says it
		// once.
		s.AddError(snapshot.SourceFlowOwners, fmt.Errorf("second look stopped: a dump of this namespace, which walks the host's TCP tables (every namespace's sockets), took longer than %s, so it reaches connections this short after they closed", flowMaxDump))
	}
	for k, pids := range found {
		for pid, n := range pids {
			s.FlowOwners = append(s.FlowOwners, snapshot.FlowOwner{Local: k.local, Remote: k.remote, Pid: pid, Sockets: n})
			if s.Procs == nil {
				s.Procs = map[int]*snapshot.Proc{}
			}
			if s.Procs[pid] == nil {
				s.Procs[pid] = &snapshot.Proc{Pid: pid, Command: comms[pid], FDs: -1}
			}
		}
	}
}
