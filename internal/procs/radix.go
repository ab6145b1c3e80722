package procs

// sortByHigh sorts keys by their high 32 bits, keeping the order of keys
// whose high halves are equal (an LSD radix sort, a byte a pass, passes
// whose byte is the same in every key skipped). Keys made in ascending
// order of their low halves, as Attach's inode<<32|index are, come out
// sorted as numbers, as slices.Sort would leave them, in a few linear
// passes instead of a comparison sort of a million keys.
func sortByHigh(keys []uint64) {
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
