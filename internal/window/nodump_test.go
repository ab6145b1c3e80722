// SPDX-License-Identifier: Apache-2.0

package window

import (
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestNoDump: a namespace whose last sample's dump succeeded is a dump,
// whatever came before it; failed dumps and none are not.
func TestNoDump(t *testing.T) {
	snap := func(ok bool) *snapshot.Snapshot {
		return &snapshot.Snapshot{Sources: []snapshot.SourceStat{{Source: snapshot.SourceSockdiag, OK: ok}}}
	}
	for _, c := range []struct {
		name string
		ss   []Series
		want bool
	}{
		{"none", nil, true},
		{"failed", []Series{{Snaps: []*snapshot.Snapshot{snap(false)}}}, true},
		{"one of two namespaces", []Series{{Snaps: []*snapshot.Snapshot{snap(false)}}, {Snaps: []*snapshot.Snapshot{snap(true)}}}, false},
		{"failed last", []Series{{Snaps: []*snapshot.Snapshot{snap(true), snap(false)}}}, true},
		{"no sample", []Series{{}}, true},
	} {
		if got := NoDump(c.ss); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
