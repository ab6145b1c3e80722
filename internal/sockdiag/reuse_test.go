// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"reflect"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Decoding into a reused socket gives each socket the values a fresh
// decode gives, extras absent where they were absent, and allocates
// nothing per socket.
func TestReuseDecodesTheSame(t *testing.T) {
	_, dgrams, seq := fixtureMessages(t)
	var fresh []*snapshot.Socket
	for _, d := range dgrams {
		if _, err := parseDump(d, seq, 0, func(sk *snapshot.Socket) error { fresh = append(fresh, sk); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	reuse := new(full)
	i := 0
	var shared *snapshot.Socket
	for _, d := range dgrams {
		_, err := parseDumpInto(d, seq, 0, reuse, func(sk *snapshot.Socket) error {
			if shared == nil {
				shared = sk
			}
			if sk != shared {
				t.Fatal("Reuse handed out a second socket")
			}
			if !reflect.DeepEqual(sk, fresh[i]) {
				t.Fatalf("socket %d: reused %+v, fresh %+v", i, *sk, *fresh[i])
			}
			i++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if i != len(fresh) || i == 0 {
		t.Fatalf("%d reused sockets, %d fresh", i, len(fresh))
	}
	allocs := testing.AllocsPerRun(20, func() {
		for _, d := range dgrams {
			_, _ = parseDumpInto(d, seq, 0, reuse, func(*snapshot.Socket) error { return nil })
		}
	})
	if allocs > 0 {
		t.Errorf("%.0f allocations per pass over %d sockets with Reuse", allocs, i)
	}
}
