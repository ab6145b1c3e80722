// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"net/netip"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestSocketFilterKernel: the kernel is asked for the states sock_diag
// reports as the ones chosen (a bound socket as CLOSE, a request socket
// as SYN-RECV), and for port bytecode only when a port is chosen.
func TestSocketFilterKernel(t *testing.T) {
	f := &SocketFilter{States: map[snapshot.State]bool{snapshot.Close: true, snapshot.SynRecv: true}}
	var o Options
	f.Apply(&o)
	want := uint32(1<<snapshot.Close | 1<<snapshot.BoundInactive | 1<<snapshot.SynRecv | 1<<snapshot.NewSynRecv)
	if o.States != want || o.Filter != nil {
		t.Errorf("states %#x filter %v, want %#x and none", o.States, o.Filter, want)
	}
	f = &SocketFilter{Port: 80, RPort: 443}
	f.Apply(&o)
	if o.States != 0 || o.Filter == nil || len(o.Filter.Ports) != 1 || o.Filter.Ports[0] != 80 || len(o.Filter.RPorts) != 1 || len(o.Filter.LPorts) != 0 {
		t.Errorf("ports: states %#x filter %+v", o.States, o.Filter)
	}
}

// TestSocketFilterMatch: state, port and owner tests together.
func TestSocketFilterMatch(t *testing.T) {
	sk := &snapshot.Socket{State: snapshot.Established,
		Local: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.0.1:8080")), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("198.18.0.2:40000"))}
	for _, c := range []struct {
		f    SocketFilter
		want bool
	}{
		{SocketFilter{}, true},
		{SocketFilter{Port: 40000}, true},
		{SocketFilter{LPort: 40000}, false},
		{SocketFilter{States: map[snapshot.State]bool{snapshot.Listen: true}}, false},
		{SocketFilter{Pid: 7}, false},
	} {
		if got := c.f.Match(sk); got != c.want {
			t.Errorf("%+v: %v, want %v", c.f, got, c.want)
		}
	}
}
