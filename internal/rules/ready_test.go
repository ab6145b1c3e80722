// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestSockdiagReady: the rules that read tcp_info say unknown when no
// established socket has one, counting them all, and go ahead when any
// has, wherever it stands in the dump.
func TestSockdiagReady(t *testing.T) {
	var ti snapshot.TCPInfo
	bare := snapshot.Socket{State: snapshot.Established}
	full := snapshot.Socket{State: snapshot.Established, Info: snapshot.TCPOf(&ti)}
	ln := snapshot.Socket{State: snapshot.Listen}
	for _, c := range []struct {
		name    string
		sockets []snapshot.Socket
		want    string // "" ready, else part of the reason
	}{
		{"empty", nil, ""},
		{"listener only", []snapshot.Socket{ln}, ""},
		{"none has tcp_info", []snapshot.Socket{bare, ln, bare, bare}, "any of 3 established"},
		{"the last has one", []snapshot.Socket{bare, ln, bare, full}, ""},
		{"the first has one", []snapshot.Socket{full, bare}, ""},
	} {
		err := sockdiagReady(&snapshot.Snapshot{Sockets: c.sockets})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want ready", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestQueuedNearBufOnlyRulesOut: sndbuf-limited skips a socket whose
// meminfo fails queuedNearBuf before unpacking its tcp_info, which is
// right only if no socket failing it is limited. Random sockets around
// the thresholds, and the edge where queued is exactly the fraction.
func TestQueuedNearBufOnlyRulesOut(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	limited, passed := 0, 0
	for i := range 200_000 {
		m := &snapshot.MemInfo{Sndbuf: r.Uint32N(1 << 17), WmemQueued: r.Uint32N(1 << 17)}
		if i%7 == 0 {
			m.WmemQueued = uint32(float64(m.Sndbuf) * sndbufQueuedFrac)
		}
		ti := &snapshot.TCPInfo{SndMSS: 1 + r.Uint32N(9000), Unacked: r.Uint32N(100), SndCwnd: r.Uint32N(400), SndWnd: r.Uint32N(1 << 22)}
		look, ok := lookSndbufOf(ti, m)
		if ok && look.limited() {
			limited++
			if !queuedNearBuf(m, sndbufQueuedFrac) {
				t.Fatalf("limited with meminfo %+v, tcp_info %+v, but queuedNearBuf says no", m, ti)
			}
		}
		if ok && look.limitedAt(sndbufQueuedLow) && !queuedNearBuf(m, sndbufQueuedLow) {
			t.Fatalf("limited at %.2f with meminfo %+v, tcp_info %+v, but queuedNearBuf says no", sndbufQueuedLow, m, ti)
		}
		if queuedNearBuf(m, sndbufQueuedFrac) {
			passed++
		}
	}
	if limited == 0 || passed == 200_000 {
		t.Fatalf("%d limited, %d of 200000 passed: the sample does not test the filter", limited, passed)
	}
	if queuedNearBuf(nil, sndbufQueuedFrac) || queuedNearBuf(&snapshot.MemInfo{}, sndbufQueuedLow) {
		t.Error("no meminfo, or no send buffer, passed")
	}
}
