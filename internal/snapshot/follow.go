// SPDX-License-Identifier: Apache-2.0

package snapshot

// FollowAhead is how far past the expected position a Follower looks for
// a socket: sockets that closed between two dumps leave gaps.
const FollowAhead = 16

// Follower finds the sockets of one dump in an earlier dump of the same
// namespace by position. Two dumps walk the same hash buckets, and a
// bucket keeps its sockets' order (new ones go to its head), so a socket
// is nearly always at the position after the last match or a few further
// on: a million are matched in one pass over both, with no map of a
// million cookies. Sockets it misses (new connections, a reordered dump)
// need a cookie index, which is the caller's to build when it must.
type Follower struct {
	prev []Was
	j    int
}

// Follow starts following prev.
func Follow(prev []Was) Follower { return Follower{prev: prev} }

// Next returns the index in prev of the socket with cookie c, looking
// from just after the last match; ok is false when it is not there.
// Cookies are asked in the later dump's order.
func (f *Follower) Next(c uint64) (int, bool) {
	for k := f.j; k < min(f.j+FollowAhead, len(f.prev)); k++ {
		if f.prev[k].Cookie == c {
			f.j = k + 1
			return k, true
		}
	}
	return 0, false
}
