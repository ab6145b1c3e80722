// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestBufferLimitsIgnoresLocalPaths: a loopback connection behind a
// reader that pauses shows 5 ms of RTT at loopback rates, a BDP of
// megabytes that no network path has; the same figures to a remote peer
// are a path that needs the buffer.
func TestBufferLimitsIgnoresLocalPaths(t *testing.T) {
	snap := func(remote string) *snapshot.Snapshot {
		return &snapshot.Snapshot{Taken: time.Unix(5, 0), Netns: snapshot.Netns{Name: "t"},
			Sysctls: map[string]string{"net.ipv4.tcp_wmem": "4096 16384 4194304", "net.ipv4.tcp_rmem": "4096 131072 6291456",
				"net.core.wmem_max": "212992", "net.core.rmem_max": "212992"},
			Sockets: []snapshot.Socket{{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:8080")),
				Remote: snapshot.EndpointOf(netip.MustParseAddrPort(remote)), Cookie: 1,
				Info: snapshot.TCPOf(&snapshot.TCPInfo{Len: 232, RTT: 5100, DeliveryRate: 1_562_500_000})}}}
	}
	if res := runRule(bufferLimits(), nil, snap("127.0.0.1:38816")); len(res.Findings) != 0 {
		t.Errorf("loopback: %+v", res.Findings)
	}
	if res := runRule(bufferLimits(), nil, snap("198.18.0.9:38816")); len(res.Findings) == 0 {
		t.Error("remote peer at 12.5 Gbit/s x 5.1 ms: no finding")
	}
	// Both ends in this namespace on another address: no path either.
	s := snap("10.0.0.1:38816")
	s.Sockets = append(s.Sockets, snapshot.Socket{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:38816")),
		Remote: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:8080")), Cookie: 2})
	if res := runRule(bufferLimits(), nil, s); len(res.Findings) != 0 {
		t.Errorf("local peer: %+v", res.Findings)
	}
}

// TestBufferLimitsIdleSharedInfo: a bulk connection that sent nothing in
// the window keeps the first sample's tcp_info (snapshot.Store.KeepSame),
// whose last_data_sent (400 ms) is a window (1 s) younger than it is: it
// has been idle 1.4 s, past bufIdleBurst, as the same values in two
// copies (a file) say.
func TestBufferLimitsIdleSharedInfo(t *testing.T) {
	snap := func(at int64, info *snapshot.TCPInfo) *snapshot.Snapshot {
		return &snapshot.Snapshot{Taken: time.Unix(at, 0), Netns: snapshot.Netns{Name: "t"},
			Sysctls: map[string]string{"net.ipv4.tcp_slow_start_after_idle": "1"},
			Sockets: []snapshot.Socket{{Family: 2, State: snapshot.Established, Local: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:40000")),
				Remote: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.0.9:443")), Cookie: 1, Info: snapshot.TCPOf(info)}}}
	}
	info := snapshot.TCPInfo{Len: 232, RTT: 20_000, RTO: 220_000, BytesAcked: 64 << 20, LastDataSent: 400}
	bursty := func(res diag.Result) bool {
		for _, f := range res.Findings {
			if strings.Contains(f.Summary, "go idle between bursts") {
				return true
			}
		}
		return false
	}
	if !bursty(runRule(bufferLimits(), snap(5, &info), snap(6, &info))) {
		t.Error("shared tcp_info: idle 1.4 s not counted")
	}
	later := info
	later.LastDataSent = 1400
	if !bursty(runRule(bufferLimits(), snap(5, &info), snap(6, &later))) {
		t.Error("copies: idle 1.4 s not counted")
	}
	recent := info
	if bursty(runRule(bufferLimits(), nil, snap(6, &recent))) {
		t.Error("one sample, idle 400 ms: counted")
	}
}
