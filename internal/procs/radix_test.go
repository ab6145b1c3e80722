// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortKeys: keys made as Attach makes them (inode<<32 | index, in
// index order) come out as slices.Sort leaves them, for inodes spread
// over every byte, over few bytes, and all equal.
func TestSortKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name string
		ino  func() uint32
	}{
		{"spread", r.Uint32},
		{"low byte only", func() uint32 { return 0x4000_0000 | r.Uint32N(256) }},
		{"two bytes", func() uint32 { return 0x0100_0000 | r.Uint32N(1<<16) }},
		{"all equal", func() uint32 { return 77 }},
	} {
		for _, n := range []int{0, 1, 2, 1000, 70_000} {
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = uint64(c.ino())<<32 | uint64(i)
			}
			want := slices.Clone(keys)
			slices.Sort(want)
			sortKeys(keys)
			if !slices.Equal(keys, want) {
				t.Fatalf("%s, %d keys: not sorted as numbers", c.name, n)
			}
		}
	}
}

// TestSortRefs: owner records come out by inode, pid and fd whether
// they arrive in the kernel walk's pid and fd order or in any other,
// sockets shared by several processes and fds included.
func TestSortRefs(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	byAll := func(a, b inodeRef) int {
		if c := cmp.Compare(a.ino, b.ino); c != 0 {
			return c
		}
		if c := cmp.Compare(a.pid, b.pid); c != 0 {
			return c
		}
		return cmp.Compare(a.fd, b.fd)
	}
	for _, n := range []int{0, 1, 5, 50_000} {
		var walk []inodeRef
		for pid := int32(1); len(walk) < n; pid++ {
			for fd := int32(0); fd < 1+r.Int32N(300) && len(walk) < n; fd++ {
				// Few inodes, so that several holders share one.
				walk = append(walk, inodeRef{ino: 1_000_000 + r.Uint32N(uint32(n/3+1))<<uint(r.IntN(12)), pid: pid, fd: fd})
			}
		}
		shuffled := slices.Clone(walk)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for name, refs := range map[string][]inodeRef{"walk order": walk, "shuffled": shuffled} {
			want := slices.Clone(refs)
			slices.SortFunc(want, byAll)
			sortRefs(refs)
			if !slices.Equal(refs, want) {
				t.Fatalf("%d refs in %s: not sorted by inode, pid and fd", n, name)
			}
		}
	}
}

// BenchmarkSortKeys compares sortKeys with slices.Sort on a million
// Attach keys (`go test -run XXX -bench SortKeys -benchtime 5x ./internal/procs`).
func BenchmarkSortKeys(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([]uint64, 1_000_000)
	for i := range keys {
		keys[i] = uint64(r.Uint32N(1<<24)+1_000_000)<<32 | uint64(i)
	}
	work := make([]uint64, len(keys))
	for _, c := range []struct {
		name string
		sort func([]uint64)
	}{{"radix", sortKeys}, {"slices.Sort", slices.Sort[[]uint64]}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				copy(work, keys)
				c.sort(work)
			}
		})
	}
}
