// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// joinPrev must find what a map of the previous sample by cookie finds,
// whatever the window did to the dump: sockets closed (gaps), opened (new
// cookies anywhere, in runs longer than the lookahead), a dump in another
// order.
func TestJoinPrevMatchesCookieMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	mk := func(cookies []uint64) []snapshot.Socket {
		s := make([]snapshot.Socket, len(cookies))
		for i, c := range cookies {
			s[i] = snapshot.Socket{Cookie: c, RecvQ: uint32(i)}
		}
		return s
	}
	seq := func(n int) []uint64 {
		c := make([]uint64, n)
		for i := range c {
			c[i] = uint64(1000 + i)
		}
		return c
	}
	closeSome := func(c []uint64) []uint64 {
		return slices.DeleteFunc(slices.Clone(c), func(uint64) bool { return rng.IntN(5) == 0 })
	}
	openSome := func(c []uint64) []uint64 {
		var out []uint64
		next := uint64(1 << 40)
		for _, x := range c {
			for range rng.IntN(3) * rng.IntN(2) * 20 { // sometimes runs of 20-40
				out = append(out, next)
				next++
			}
			out = append(out, x)
		}
		return out
	}
	base := seq(2000)
	shuffled := slices.Clone(base)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, c := range []struct {
		name      string
		prev, cur []uint64
	}{
		{"same", base, base},
		{"closed", base, closeSome(base)},
		{"opened", base, openSome(base)},
		{"both", closeSome(base), openSome(closeSome(base))},
		{"reordered", base, shuffled},
		{"empty prev", nil, base},
	} {
		prev, cur := mk(c.prev), mk(c.cur)
		want := map[uint64]int{}
		for i := range prev {
			want[prev[i].Cookie] = i
		}
		in := NewInput(&snapshot.Snapshot{Sockets: prev}, &snapshot.Snapshot{Sockets: cur}, Options{})
		for i := range cur {
			got := in.PrevOf(&cur[i])
			j, ok := want[cur[i].Cookie]
			switch {
			case !ok && got != nil:
				t.Fatalf("%s: cur[%d] cookie %d found at prev RecvQ %d, want none", c.name, i, cur[i].Cookie, got.RecvQ)
			case ok && (got == nil || got != &in.base.Was[j]):
				t.Fatalf("%s: cur[%d] cookie %d: got %v, want prev[%d]", c.name, i, cur[i].Cookie, got, j)
			}
			// A copy (not in Cur) is looked up by cookie alone.
			cp := cur[i]
			if byCookie := in.PrevOf(&cp); byCookie != got {
				t.Fatalf("%s: copy of cur[%d] found %v, position found %v", c.name, i, byCookie, got)
			}
		}
	}
}

// Cookies repeated in a file (a live dump has none): a current socket
// takes the one at its place in dump order; a lookup by cookie alone,
// the last, as a map filled in order would.
func TestJoinPrevRepeatedCookies(t *testing.T) {
	prev := []snapshot.Socket{{Cookie: 5}, {Cookie: 6}, {Cookie: 5}, {Cookie: 7}, {Cookie: 6}}
	cur := []snapshot.Socket{{Cookie: 5}, {Cookie: 6}, {Cookie: 7}, {Cookie: 8}}
	in := NewInput(&snapshot.Snapshot{Sockets: prev}, &snapshot.Snapshot{Sockets: cur}, Options{})
	was := in.base.Was
	for i, want := range []*snapshot.Was{&was[0], &was[1], &was[3], nil} {
		if got := in.PrevOf(&cur[i]); got != want {
			t.Errorf("cur[%d]: %p, want %p", i, got, want)
		}
	}
	if got := in.PrevOf(&snapshot.Socket{Cookie: 6}); got != &was[4] {
		t.Errorf("by cookie: %p, want the last (%p)", got, &was[4])
	}
}

func TestPrevOfWithoutPrev(t *testing.T) {
	cur := &snapshot.Snapshot{Sockets: []snapshot.Socket{{Cookie: 1}}}
	if p := NewInput(nil, cur, Options{}).PrevOf(&cur.Sockets[0]); p != nil {
		t.Errorf("no previous sample, found %+v", p)
	}
	if p := (&Input{Cur: cur}).PrevOf(&cur.Sockets[0]); p != nil {
		t.Errorf("bare Input, found %+v", p)
	}
}
