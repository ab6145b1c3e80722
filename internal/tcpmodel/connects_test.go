// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"net/netip"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestConnectsOf: only connects that became connections are Opened;
// EADDRNOTAVAIL stays apart from refused, timed-out, unreachable and
// abandoned connects.
func TestConnectsOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	dst := netip.MustParseAddrPort("10.0.0.5:80")
	s := &snapshot.Snapshot{Taken: t0, Events: &snapshot.Events{Since: t0.Add(-5 * time.Second), Until: t0, Flows: []snapshot.EventFlow{
		{Pid: 7, Command: "curl", Remote: dst, Opens: 100, FailedPorts: 4, Refused: 50, TimedOut: 3, Unreachable: 2, Abandoned: 1},
		{Remote: dst, Refused: 9}, // opener unknown, no opens of its own
	}}}
	byDst, ok := ConnectsOf(s)
	if !ok {
		t.Fatal("no connects")
	}
	c := byDst.To(dst)
	if c.Opens != 100 || c.Failed != 4 || c.Unanswered != 56 || c.Opened() != 40 {
		t.Errorf("connects %+v, opened %d; want 100 opens, 4 failed for a port, 56 unanswered, 40 opened", c, c.Opened())
	}
	if top := c.Top(); top == nil || top.Pid != 7 || top.Failed != 4 {
		t.Errorf("top %+v, want curl pid 7 with 4 port failures", top)
	}
}
