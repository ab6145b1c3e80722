// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"sync"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Base is the sample that starts a window, kept as what the rules read
// of it: its established connections as snapshot.Was records by cookie
// (PrevOf), and what the rules' Keeps asked of the whole sample (KeptOf).
// Every other socket stays whole in Snap.Sockets. A million established
// connections cost a Was each, a quarter of a Socket (TestSampleSizes
// prints both).
type Base struct {
	// Snap is the sample without its established connections' sockets.
	Snap *snapshot.Snapshot
	// Was holds every socket of the sample, in dump order.
	Was []snapshot.Was
	// kept holds each keeper's value by its key, written only by NewBase.
	kept map[any]any
	// whole is the sample itself when the Base was made of one the
	// caller holds anyway (NewInput): keys not in kept are computed from
	// it at their first ask, in later.
	whole *snapshot.Snapshot
	later onceMap
}

// NewBase keeps of s what a window's rules read, with the value of each
// of keep (KeepsOf the rules). s itself is not changed; the caller drops
// it.
func NewBase(s *snapshot.Snapshot, keep []Keeper) *Base {
	b := &Base{kept: make(map[any]any, len(keep))}
	// The keepers are pure functions of s, each a walk of every socket:
	// they run on the other CPUs while the records are made.
	vals := make([]any, len(keep))
	var wg sync.WaitGroup
	for i, k := range keep {
		wg.Go(func() { vals[i] = k.keep(s) })
	}
	if b.Was = s.Was; len(b.Was) != len(s.Sockets) {
		b.Was = snapshot.WasOf(s.Sockets)
	}
	snap := *s
	snap.Sockets, snap.Was = nil, nil
	for i := range s.Sockets {
		if s.Sockets[i].State != snapshot.Established {
			snap.Sockets = append(snap.Sockets, s.Sockets[i])
		}
	}
	b.Snap = &snap
	wg.Wait()
	for i, k := range keep {
		if _, ok := b.kept[k.key()]; !ok {
			b.kept[k.key()] = vals[i]
		}
	}
	return b
}

// wholeBase is NewBase for a sample the caller keeps whole: what the
// rules ask is computed from it when they ask.
func wholeBase(s *snapshot.Snapshot) *Base {
	b := NewBase(s, nil)
	b.whole = s
	return b
}
