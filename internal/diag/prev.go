// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"cmp"
	"slices"
	"sync"
	"unsafe"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// prevIndex matches a window's current sockets to its previous ones.
type prevIndex struct {
	// at holds, for each current socket, its index in the previous
	// sample, -1 when it was not there.
	at []int32
	// sorted is the previous sample by cookie, built at first need.
	sorted []cookieAt
	once   sync.Once
}

type cookieAt struct {
	cookie uint64
	i      int32
}

// joinPrev matches cur to prev in dump order (snapshot.Follower); the
// sockets it misses (new connections, a reordered dump) go to a cookie
// index built only then.
func joinPrev(prev []snapshot.Was, cur []snapshot.Socket) *prevIndex {
	x := &prevIndex{at: make([]int32, len(cur))}
	f := snapshot.Follow(prev)
	for i := range cur {
		c := cur[i].Cookie
		x.at[i] = -1
		if k, ok := f.Next(c); ok {
			x.at[i] = int32(k)
		} else if k, ok := x.find(prev, c); ok {
			x.at[i] = int32(k)
		}
	}
	return x
}

// find looks c up in the cookie index, building it at the first call.
func (x *prevIndex) find(prev []snapshot.Was, c uint64) (int, bool) {
	x.once.Do(func() {
		x.sorted = make([]cookieAt, len(prev))
		for i := range prev {
			x.sorted[i] = cookieAt{prev[i].Cookie, int32(i)}
		}
		// Of equal cookies (none in one dump, but files may hold them)
		// the last wins, as in a map filled in order.
		slices.SortFunc(x.sorted, func(a, b cookieAt) int { return cmp.Or(cmp.Compare(a.cookie, b.cookie), cmp.Compare(a.i, b.i)) })
	})
	n, ok := slices.BinarySearchFunc(x.sorted, c, func(e cookieAt, c uint64) int { return cmp.Compare(e.cookie, c) })
	if !ok {
		return 0, false
	}
	for n+1 < len(x.sorted) && x.sorted[n+1].cookie == c {
		n++
	}
	return int(x.sorted[n].i), true
}

// byCookie is the previous socket with cookie c, nil when none.
func (x *prevIndex) byCookie(prev []snapshot.Was, c uint64) *snapshot.Was {
	if k, ok := x.find(prev, c); ok {
		return &prev[k]
	}
	return nil
}

// indexIn says where sk is in s, if it points into s.
func indexIn(s []snapshot.Socket, sk *snapshot.Socket) (int, bool) {
	if len(s) == 0 || sk == nil {
		return 0, false
	}
	base, p := uintptr(unsafe.Pointer(&s[0])), uintptr(unsafe.Pointer(sk))
	size := unsafe.Sizeof(s[0])
	if p < base || p >= base+uintptr(len(s))*size || (p-base)%size != 0 {
		return 0, false
	}
	return int((p - base) / size), true
}
