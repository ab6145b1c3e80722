// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"encoding/json"
	"strconv"
)

// PidList is the processes holding a socket, ascending: a pointer to a
// list that every socket the same processes hold can share, 8 bytes in a
// socket instead of a slice's 24. The zero PidList is none (no owner
// found, or owners not read).
type PidList struct{ l *[]int }

// PidsOf returns pids (ascending) as a PidList, holding pids itself, not
// a copy: no one may change them after. An empty list is none.
func PidsOf(pids ...int) PidList {
	if len(pids) == 0 {
		return PidList{}
	}
	return PidList{&pids}
}

// PidsAt returns a PidList holding whatever *h holds when it is read:
// for sockets handed on one at a time, whose list the caller rewrites in
// place for the next one instead of making one for each.
func PidsAt(h *[]int) PidList { return PidList{h} }

// List returns the pids; nil for none. The caller must not change them.
func (p PidList) List() []int {
	if p.l == nil {
		return nil
	}
	return *p.l
}

// Len is how many pids there are.
func (p PidList) Len() int { return len(p.List()) }

// IsZero reports whether there is none (for omitzero).
func (p PidList) IsZero() bool { return p.Len() == 0 }

// Same reports whether p and q are one shared list.
func (p PidList) Same(q PidList) bool { return p.l == q.l }

// MarshalJSON writes the pids as an array.
func (p PidList) MarshalJSON() ([]byte, error) {
	b := []byte{'['}
	for i, pid := range p.List() {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(pid), 10)
	}
	return append(b, ']'), nil
}

// UnmarshalJSON reads an array of pids, or null for none.
func (p *PidList) UnmarshalJSON(b []byte) error {
	var pids []int
	if err := json.Unmarshal(b, &pids); err != nil {
		return err
	}
	*p = PidsOf(pids...)
	return nil
}

// PidSlab makes PidLists out of a few allocations: a million sockets,
// each with a list of its own, were a million small objects for the
// garbage collector. The zero PidSlab is ready to use.
type PidSlab struct{ heads [][]int }

// pidSlabHeads is how many lists one allocation of a PidSlab holds.
const pidSlabHeads = 1024

// Of is PidsOf from the slab.
func (s *PidSlab) Of(pids []int) PidList {
	if len(pids) == 0 {
		return PidList{}
	}
	if len(s.heads) == cap(s.heads) {
		s.heads = make([][]int, 0, pidSlabHeads)
	}
	s.heads = append(s.heads, pids)
	return PidList{&s.heads[len(s.heads)-1]}
}

// First is the first (lowest) pid, 0 for none: the owner every output
// names (Snapshot.Owner).
func (p PidList) First() int {
	if l := p.List(); len(l) > 0 {
		return l[0]
	}
	return 0
}
