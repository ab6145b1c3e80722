package procs

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortByHigh: keys made as Attach makes them (inode<<32 | index, in
// index order) come out as slices.Sort leaves them, for inodes spread
// over every byte, over few bytes, and all equal.
func TestSortByHigh(t *testing.T) {
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
			sortByHigh(keys)
			if !slices.Equal(keys, want) {
				t.Fatalf("%s, %d keys: not sorted as numbers", c.name, n)
			}
		}
	}
}

// BenchmarkSortKeys compares sortByHigh with slices.Sort on a million
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
	}{{"radix", sortByHigh}, {"slices.Sort", slices.Sort[[]uint64]}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				copy(work, keys)
				c.sort(work)
			}
		})
	}
}
