// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"cmp"
	"slices"
)

// sortKeys sorts Attach's keys, inode<<32|index made in ascending order
// of index, as numbers, as slices.Sort would: an LSD radix sort of the
// high halves, a byte a pass, keeping the order of keys whose inodes are
// equal; passes whose byte is the same in every key are skipped. A few
// linear passes over a million sockets' keys instead of a comparison
// sort (BenchmarkSortKeys), for a second copy of them (8 bytes a
// socket) while it runs, after the dump.
func sortKeys(keys []uint64) {
	if len(keys) < 2 {
		return
	}
	tmp := make([]uint64, len(keys))
	src, dst := keys, tmp
	for shift := uint(32); shift < 64; shift += 8 {
		var count [256]int
		for _, k := range src {
			count[byte(k>>shift)]++
		}
		if count[byte(src[0]>>shift)] == len(src) {
			continue // this byte is the same in every key
		}
		at := 0
		for b, n := range count {
			count[b] = at
			at += n
		}
		for _, k := range src {
			b := byte(k >> shift)
			dst[count[b]] = k
			count[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
}

// sortRefs sorts refs by inode, pid and fd, in place: it runs in the
// file walk beside the dump, at the peak of a collection's memory, where
// a radix sort's second copy of every record would add to it.
func sortRefs(refs []inodeRef) {
	slices.SortFunc(refs, func(a, b inodeRef) int {
		if c := cmp.Compare(a.ino, b.ino); c != 0 {
			return c
		}
		if c := cmp.Compare(a.pid, b.pid); c != 0 {
			return c
		}
		return cmp.Compare(a.fd, b.fd)
	})
}
