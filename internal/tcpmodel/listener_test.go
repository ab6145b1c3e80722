// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestSameListenerAt answers as SameListener on the same addresses.
func TestSameListenerAt(t *testing.T) {
	aps := []string{"0.0.0.0:80", "[::]:80", "127.0.0.1:80", "[::ffff:127.0.0.1]:80", "127.0.0.1:81", "[::1]:80", "10.0.0.1:80"}
	for _, l := range aps {
		for _, d := range aps {
			lp, dp := netip.MustParseAddrPort(l), netip.MustParseAddrPort(d)
			if got, want := SameListenerAt(snapshot.EndpointOf(lp), snapshot.EndpointOf(dp)), SameListener(lp, dp); got != want {
				t.Errorf("listener %s, destination %s: %v, SameListener says %v", l, d, got, want)
			}
		}
	}
}

// TestCountsInterleaved: the per-listener, per-flow and per-destination
// counts, which reuse the last socket's entry, are right whatever the
// order of the sockets.
func TestCountsInterleaved(t *testing.T) {
	ep := func(s string) snapshot.Endpoint { return snapshot.EndpointOf(netip.MustParseAddrPort(s)) }
	s := &snapshot.Snapshot{Sysctls: map[string]string{"net.ipv4.ip_local_port_range": "40000 40999"}, Sockets: []snapshot.Socket{
		{Family: 2, State: snapshot.Listen, Local: ep("0.0.0.0:80"), Cookie: 1, Pids: snapshot.PidsOf(10)},
		{Family: 2, State: snapshot.Listen, Local: ep("127.0.0.1:81"), Cookie: 2, Pids: snapshot.PidsOf(10)},
		{Family: 2, State: snapshot.Listen, Local: ep("127.0.0.2:81"), Cookie: 3, Pids: snapshot.PidsOf(11)},
	}}
	// Accepted on 80, 81 (.1) and 81 (.2), and clients of 9.9.9.9:443
	// and 8.8.8.8:53, interleaved.
	order := []string{"80", "81a", "c443", "80", "81b", "c53", "81a", "c443", "c443", "80", "81b", "c53", "81a"}
	for i, o := range order {
		sk := snapshot.Socket{Family: 2, State: snapshot.Established, Pids: snapshot.PidsOf(20 + i%2), Cookie: uint64(100 + i)}
		port := uint16(40000 + i)
		switch o {
		case "80":
			sk.Local, sk.Remote = ep("10.0.0.1:80"), snapshot.EndpointFrom(netip.MustParseAddr("10.0.0.9"), port)
		case "81a":
			sk.Local, sk.Remote = ep("127.0.0.1:81"), snapshot.EndpointFrom(netip.MustParseAddr("127.0.0.9"), port)
		case "81b":
			sk.Local, sk.Remote = ep("127.0.0.2:81"), snapshot.EndpointFrom(netip.MustParseAddr("127.0.0.9"), port)
		case "c443":
			sk.Local, sk.Remote = snapshot.EndpointFrom(netip.MustParseAddr("10.0.0.1"), port), ep("9.9.9.9:443")
		case "c53":
			sk.Local, sk.Remote = snapshot.EndpointFrom(netip.MustParseAddr("10.0.0.1"), port), ep("8.8.8.8:53")
		}
		s.Sockets = append(s.Sockets, sk)
	}
	ls := ListenersOf(s)
	if got := AcceptedOwned(s, ls); got[1] != 3 || got[2] != 3 || got[3] != 2 || len(got) != 3 {
		t.Errorf("AcceptedOwned = %v, want 1: 3, 2: 3, 3: 2", got)
	}
	op := Openers(s, ls)
	lo := netip.MustParseAddr("10.0.0.1")
	for f, pid := range op {
		if f.Service.Port() == 443 && pid != 20 || f.Service.Port() == 53 && pid != 21 || f.Opener.Is4() && f.Opener != lo && f.Service.IsValid() {
			t.Errorf("Openers: flow %v opened by %d", f, pid)
		}
	}
	if op[FlowOf(lo, netip.MustParseAddrPort("9.9.9.9:443"))] == 0 || op[FlowOf(lo, netip.MustParseAddrPort("8.8.8.8:53"))] == 0 {
		t.Errorf("Openers = %v, want the two client flows", op)
	}
	p, err := NewPortSpace(s)
	if err != nil {
		t.Fatal(err)
	}
	use := p.DestUsage(s, nil, 0)
	if u, v := use[DestOf(lo, netip.MustParseAddrPort("9.9.9.9:443"))], use[DestOf(lo, netip.MustParseAddrPort("8.8.8.8:53"))]; u == nil || v == nil || u.Open != 3 || v.Open != 2 {
		t.Errorf("DestUsage: 443 %+v, 53 %+v; want 3 and 2 open", u, v)
	}
}

// TestPortTable: values by port, ports in the order of their first
// value; a nil table holds nothing.
func TestPortTable(t *testing.T) {
	var none *PortTable[int]
	if none.At(80) != nil || none.Groups() != nil || none.Ports() != 0 {
		t.Error("a nil table holds something")
	}
	pt := new(PortTable[int])
	for i, p := range []uint16{443, 80, 443, 0, 65535} {
		pt.Add(p, i)
	}
	if !slices.Equal(pt.At(443), []int{0, 2}) || !slices.Equal(pt.At(80), []int{1}) || !slices.Equal(pt.At(65535), []int{4}) || pt.At(8080) != nil {
		t.Errorf("At: 443 %v, 80 %v, 65535 %v, 8080 %v", pt.At(443), pt.At(80), pt.At(65535), pt.At(8080))
	}
	if pt.Ports() != 4 || !slices.Equal(pt.Groups()[0], []int{0, 2}) || !slices.Equal(pt.Groups()[2], []int{3}) {
		t.Errorf("Ports %d, Groups %v", pt.Ports(), pt.Groups())
	}
}
