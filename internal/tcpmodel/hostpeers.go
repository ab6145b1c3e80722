// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"net/netip"
	"sync"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// HostPeers finds the other end of a connection in another network
// namespace of the same collection (check --all-netns, serve): both ends
// on one host, such as two pods on one node talking over their pod
// addresses. It reads the snapshots it is given and nothing else; a peer
// behind NAT (a Service's virtual address) is not found. Safe for
// concurrent use.
type HostPeers struct {
	snaps []*snapshot.Snapshot
	once  sync.Once
	// at lists, per address a namespace's connections use locally, the
	// snapshots using it (the first look builds it: the rules look up
	// only their candidates).
	at map[netip.Addr][]int
}

// NewHostPeers indexes snaps, the current samples of every namespace of
// one collection (on the first lookup).
func NewHostPeers(snaps []*snapshot.Snapshot) *HostPeers {
	return &HostPeers{snaps: snaps}
}

func (h *HostPeers) build() {
	h.at = map[netip.Addr][]int{}
	for i, s := range h.snaps {
		seen := map[netip.Addr]bool{}
		for j := range s.Sockets {
			sk := &s.Sockets[j]
			if sk.State == snapshot.Listen || sk.State == snapshot.TimeWait {
				continue
			}
			a := sk.Local.Addr().Unmap()
			if !seen[a] && !a.IsLoopback() && !a.IsUnspecified() {
				seen[a] = true
				h.at[a] = append(h.at[a], i)
			}
		}
	}
}

// Peer is the socket at the other end of sk (a socket of from) and the
// snapshot holding it, when it is in another of the namespaces; nil
// otherwise. A loopback peer is always in sk's own namespace
// (Tuples.Peer finds it).
func (h *HostPeers) Peer(from *snapshot.Snapshot, sk *snapshot.Socket) (*snapshot.Snapshot, *snapshot.Socket) {
	if h == nil || sk.Remote.Addr().Unmap().IsLoopback() {
		return nil, nil
	}
	h.once.Do(h.build)
	want := keyOf(sk.Remote, sk.Local)
	for _, i := range h.at[sk.Remote.Addr().Unmap()] {
		s := h.snaps[i]
		if s == from || s.Netns.Inode != 0 && s.Netns.Inode == from.Netns.Inode {
			continue
		}
		for j := range s.Sockets {
			p := &s.Sockets[j]
			if p.State != snapshot.Listen && p.State != snapshot.TimeWait && keyOf(p.Local, p.Remote) == want {
				return s, p
			}
		}
	}
	return nil, nil
}
