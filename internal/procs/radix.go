package procs

import (
	"cmp"
	"slices"
)

// radixSort sorts xs by key, keeping the order of elements whose keys
// are equal: an LSD radix sort, a byte a pass, passes whose byte is the
// same in every key skipped. A few linear passes over a million sockets'
// records instead of a comparison sort (BenchmarkSortKeys).
func radixSort[T any](xs []T, key func(T) uint32) {
	if len(xs) < 2 {
		return
	}
	tmp := make([]T, len(xs))
	src, dst := xs, tmp
	for shift := uint(0); shift < 32; shift += 8 {
		var count [256]int
		for _, x := range src {
			count[byte(key(x)>>shift)]++
		}
		if count[byte(key(src[0])>>shift)] == len(src) {
			continue // this byte is the same in every key
		}
		at := 0
		for b, n := range count {
			count[b] = at
			at += n
		}
		for _, x := range src {
			b := byte(key(x) >> shift)
			dst[count[b]] = x
			count[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &xs[0] {
		copy(xs, src)
	}
}

// sortByHigh sorts keys made in ascending order of their low 32 bits (as
// Attach's inode<<32|index are) as numbers, as slices.Sort would.
func sortByHigh(keys []uint64) {
	radixSort(keys, func(k uint64) uint32 { return uint32(k >> 32) })
}

// sortRefs sorts refs by inode, pid and fd. The kernel's file walk lists
// them by pid and fd already, which a stable sort by inode keeps; refs in
// any other order take a comparison sort.
func sortRefs(refs []inodeRef) {
	byPidFD := func(a, b inodeRef) int {
		if c := cmp.Compare(a.pid, b.pid); c != 0 {
			return c
		}
		return cmp.Compare(a.fd, b.fd)
	}
	if slices.IsSortedFunc(refs, byPidFD) {
		radixSort(refs, func(r inodeRef) uint32 { return r.ino })
		return
	}
	slices.SortFunc(refs, func(a, b inodeRef) int {
		if c := cmp.Compare(a.ino, b.ino); c != 0 {
			return c
		}
		return byPidFD(a, b)
	})
}
