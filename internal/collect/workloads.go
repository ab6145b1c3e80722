// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Workloads names the container, pod or unit of a process:
// internal/containers' Resolver.ForPid.
type Workloads interface {
	ForPid(pid int) (snapshot.Workload, error)
}

// EventWorkload names a streamed event's pod, container or unit by
// snapshot.WorkloadIn's rule: its process's (w, at the event's time),
// else its namespace's (names); nil when w is.
func EventWorkload(w Workloads, names *netns.Names) func(pid int, ino uint64) *snapshot.Workload {
	if w == nil {
		return nil
	}
	return func(pid int, ino uint64) *snapshot.Workload {
		var procs map[int]*snapshot.Proc
		if pid > 0 {
			if got, _ := w.ForPid(pid); got != (snapshot.Workload{}) {
				procs = map[int]*snapshot.Proc{pid: {Workload: &got}}
			}
		}
		var ns snapshot.Netns
		if procs == nil {
			if _, ok := names.Of(ino); ok { // Of looks again for a new namespace
				ns.Workload = names.WorkloadOf(ino)
			}
		}
		return snapshot.WorkloadIn(&ns, procs, pid)
	}
}

// header is the snapshot of ns before any source ran: its name and the
// pod, container or unit holding it, with what could not be resolved.
func header(ns netns.NS) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Netns: ns.Snapshot()}
	if ns.WorkloadErr != nil {
		s.AddError(snapshot.SourceContainers, fmt.Errorf("namespace not named: %w", ns.WorkloadErr))
	}
	return s
}

// nameProcs sets the Workload of each of s's processes that runs in a
// container, pod or unit, and notes in s what could not be resolved.
func nameProcs(s *snapshot.Snapshot, w Workloads) {
	if err := nameAll(s.Procs, w); err != nil {
		s.AddError(snapshot.SourceContainers, err)
	}
}

// nameAll sets the Workload of each process in procs that runs in a
// container, pod or unit. A process gone since the owner scan is passed
// over; other failures come back as one error, with the count, and the
// names found are kept.
func nameAll(procs map[int]*snapshot.Proc, w Workloads) error {
	if w == nil {
		return nil
	}
	failed := 0
	var first error
	for pid, p := range procs {
		if p.Workload != nil {
			continue // shared with another namespace's snapshot
		}
		got, err := w.ForPid(pid)
		if got != (snapshot.Workload{}) {
			p.Workload = &got
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d process(es) not fully named: %w", failed, first)
	}
	return nil
}
