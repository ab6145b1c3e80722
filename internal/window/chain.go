// SPDX-License-Identifier: Apache-2.0

package window

import (
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// Chain keeps each namespace's latest sample as the start of its next
// window, as serve's loop needs from one collection to the next: as a
// diag.Base holding what its rules list in their Keeps, nothing older.
// Its samples are not followed by the next collection (no snapshot.Prior):
// a shared value would pin a whole block of an old cycle's values for one
// idle connection, cycle after cycle. Not safe for concurrent use.
type Chain struct {
	keep []diag.Keeper
	last map[string]*diag.Base
}

// NewChain returns a Chain keeping what rs read of a window's first
// sample.
func NewChain(rs []diag.Rule) *Chain {
	return &Chain{keep: diag.KeepsOf(rs), last: map[string]*diag.Base{}}
}

// Input is the window from the kept sample of cur's namespace to cur, nil
// when there is none: cur is its first sample, the clock went backwards,
// or the name now belongs to another namespace (deleted and re-created,
// or a pid:N name passed on).
func (ch *Chain) Input(cur *snapshot.Snapshot, opts diag.Options) *diag.Input {
	base := ch.last[cur.Netns.Name]
	if base == nil || !cur.Taken.After(base.Snap.Taken) || base.Snap.Netns.Inode != cur.Netns.Inode {
		return nil
	}
	return diag.NewInputFrom(base, cur, opts)
}

// Keep makes snaps the starts of the next windows (the first of each
// namespace name) and forgets every namespace not among them.
func (ch *Chain) Keep(snaps []*snapshot.Snapshot) {
	// The old bases are dropped before the new ones are built, so that
	// two of a million connections are not held at once.
	ch.last = make(map[string]*diag.Base, len(snaps))
	for _, s := range snaps {
		if _, dup := ch.last[s.Netns.Name]; !dup {
			ch.last[s.Netns.Name] = diag.NewBase(s, ch.keep)
		}
	}
}

// Base is the kept start of the next window of the namespace named name,
// nil when there is none.
func (ch *Chain) Base(name string) *diag.Base { return ch.last[name] }

// Len is how many namespaces have a kept start.
func (ch *Chain) Len() int { return len(ch.last) }

// Windows are the windows one collection ends (one snapshot per
// namespace, taken at about the same time): each namespace's (the first
// snapshot of each name counts) from its kept start, none for a namespace
// without one (Input says when). Connections between the namespaces find
// their other end in the others' current samples (diag.Input.Host).
func (ch *Chain) Windows(snaps []*snapshot.Snapshot, opts diag.Options) []*diag.Input {
	var ins []*diag.Input
	seen := make(map[string]bool, len(snaps))
	for _, cur := range snaps {
		if seen[cur.Netns.Name] {
			continue
		}
		seen[cur.Netns.Name] = true
		if in := ch.Input(cur, opts); in != nil {
			ins = append(ins, in)
		}
	}
	if len(ins) > 1 {
		curs := make([]*snapshot.Snapshot, len(ins))
		for i, in := range ins {
			curs[i] = in.Cur
		}
		host := tcpmodel.NewHostPeers(curs)
		for _, in := range ins {
			in.Host = host
		}
	}
	return ins
}
