package rules

import (
	"net/netip"
	"testing"
	"time"

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
			Sockets: []snapshot.Socket{{Family: 2, State: snapshot.Established, Local: netip.MustParseAddrPort("10.0.0.1:8080"),
				Remote: netip.MustParseAddrPort(remote), Cookie: 1,
				Info: &snapshot.TCPInfo{Len: 232, RTT: 5100, DeliveryRate: 1_562_500_000}}}}
	}
	if res := runRule(bufferLimits(), nil, snap("127.0.0.1:38816")); len(res.Findings) != 0 {
		t.Errorf("loopback: %+v", res.Findings)
	}
	if res := runRule(bufferLimits(), nil, snap("198.18.0.9:38816")); len(res.Findings) == 0 {
		t.Error("remote peer at 12.5 Gbit/s x 5.1 ms: no finding")
	}
	// Both ends in this namespace on another address: no path either.
	s := snap("10.0.0.1:38816")
	s.Sockets = append(s.Sockets, snapshot.Socket{Family: 2, State: snapshot.Established, Local: netip.MustParseAddrPort("10.0.0.1:38816"),
		Remote: netip.MustParseAddrPort("10.0.0.1:8080"), Cookie: 2})
	if res := runRule(bufferLimits(), nil, s); len(res.Findings) != 0 {
		t.Errorf("local peer: %+v", res.Findings)
	}
}
