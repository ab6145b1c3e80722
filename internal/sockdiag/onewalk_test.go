// SPDX-License-Identifier: Apache-2.0

package sockdiag

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestOneWalkSameSockets: the compat request (one walk, both families)
// lists the sockets the per-family requests list, with the states, the
// filter and the extras asked for, on the dump scenario's sockets.
func TestOneWalkSameSockets(t *testing.T) {
	ns := newNetns(t)
	f := newFDs(t)
	var sc *scenario
	ns.do(func() { sc = build(t, f) })
	key := func(s *snapshot.Socket) string {
		return fmt.Sprintf("%d %v %v %v %d %d info=%v mem=%v cc=%q", s.Family, s.State, s.Local, s.Remote, s.Cookie, s.Inode,
			s.TCP(nil) != nil, s.Mem != nil, s.CC)
	}
	keys := func(opts Options) []string {
		var k []string
		for _, s := range dumpAll(t, ns, opts) {
			k = append(k, key(s))
		}
		slices.Sort(k)
		return k
	}
	for _, opts := range []Options{
		{Info: true, Mem: true},
		{},
		{States: 1<<snapshot.Listen | 1<<snapshot.Established, Info: true},
		{States: 1 << snapshot.TimeWait, Mem: true},
		{Filter: &Filter{LPorts: []uint16{sc.l4, sc.l6}}, Info: true, Mem: true},
	} {
		// TIME_WAIT and FIN_WAIT sockets settle asynchronously: ask until
		// two walks of each kind agree.
		eventually(t, fmt.Sprintf("one walk lists what two walks list (%+v)", opts), func() bool {
			per := keys(opts)
			one := opts
			one.OneWalk = true
			got := keys(one)
			if len(per) == 0 {
				t.Fatalf("%+v: nothing dumped", opts)
			}
			return slices.Equal(got, per)
		})
	}
}
