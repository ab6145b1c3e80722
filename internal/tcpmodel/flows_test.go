// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"net/netip"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// A dual-stack server's accepted socket (IPv4-mapped) and its IPv4
// client are peers; other tuples are not.
func TestTuplesPeerAcrossFamilies(t *testing.T) {
	cli := snapshot.Socket{Family: 2, State: snapshot.Established,
		Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:40000")), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:5201"))}
	srv := snapshot.Socket{Family: 10, State: snapshot.Established,
		Local: snapshot.EndpointOf(netip.MustParseAddrPort("[::ffff:127.0.0.1]:5201")), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("[::ffff:127.0.0.1]:40000"))}
	other := snapshot.Socket{Family: 2, State: snapshot.Established,
		Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:40001")), Remote: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:5201"))}
	idx := TuplesOf(&snapshot.Snapshot{Sockets: []snapshot.Socket{cli, srv, other}})
	if p := idx.Peer(&cli); p == nil || p.Local != srv.Local {
		t.Errorf("peer of the client = %+v, want the accepted socket", p)
	}
	if p := idx.Peer(&srv); p == nil || p.Local != cli.Local {
		t.Errorf("peer of the accepted socket = %+v, want the client", p)
	}
	if p := idx.Peer(&other); p != nil {
		t.Errorf("peer of an unmatched client = %+v, want none", p)
	}
}
