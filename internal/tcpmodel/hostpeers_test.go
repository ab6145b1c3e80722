// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"net/netip"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestHostPeers(t *testing.T) {
	ep := func(s string) snapshot.Endpoint { return snapshot.EndpointOf(netip.MustParseAddrPort(s)) }
	sock := func(l, r string, st snapshot.State) snapshot.Socket {
		return snapshot.Socket{Local: ep(l), Remote: ep(r), State: st}
	}
	a := &snapshot.Snapshot{Netns: snapshot.Netns{Name: "a", Inode: 1}, Sockets: []snapshot.Socket{
		sock("198.18.7.1:40000", "198.18.7.2:9000", snapshot.Established),
		sock("127.0.0.1:40001", "127.0.0.1:9001", snapshot.Established),
		sock("198.18.7.1:40002", "198.18.9.9:9002", snapshot.Established),
	}}
	b := &snapshot.Snapshot{Netns: snapshot.Netns{Name: "b", Inode: 2}, Sockets: []snapshot.Socket{
		sock("198.18.7.2:9000", "0.0.0.0:0", snapshot.Listen),
		sock("198.18.7.2:9000", "198.18.7.1:40000", snapshot.Established),
		sock("127.0.0.1:9001", "127.0.0.1:40001", snapshot.Established),
	}}
	h := NewHostPeers([]*snapshot.Snapshot{a, b})
	if s, p := h.Peer(a, &a.Sockets[0]); s != b || p != &b.Sockets[1] {
		t.Errorf("peer of %v: %v in %v, want b's established socket", a.Sockets[0].Local, p, s)
	}
	// Loopback never leaves its namespace, however alike the tuples.
	if _, p := h.Peer(a, &a.Sockets[1]); p != nil {
		t.Errorf("loopback peer found in another namespace: %+v", p)
	}
	if _, p := h.Peer(a, &a.Sockets[2]); p != nil {
		t.Errorf("peer off the host found: %+v", p)
	}
	// A namespace is never its own other end.
	if _, p := h.Peer(b, &b.Sockets[1]); p != &a.Sockets[0] {
		t.Errorf("reverse lookup: %+v", p)
	}
	var none *HostPeers
	if _, p := none.Peer(a, &a.Sockets[0]); p != nil {
		t.Error("nil HostPeers found a peer")
	}
}
