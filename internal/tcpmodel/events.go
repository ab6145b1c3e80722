// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// The eBPF event counts rules cite as evidence (snapshot.Events): drops
// by reason, retransmits and resets by peer. Each accessor's ok is false
// when the program that counts it did not run in s's window, so a rule
// can say the evidence is unknown rather than zero.

// ReasonListenOverflow is the kernel's drop reason for a handshake that
// found its listener's accept queue full.
const ReasonListenOverflow = "TCP_LISTEN_OVERFLOW"

// ListenerDrops is the handshakes one listener dropped for a full queue.
type ListenerDrops struct {
	Listener netip.AddrPort
	Count    uint64
}

// OverflowDrops returns the listeners that dropped handshakes for a full
// accept queue in s's eBPF window, most first.
func OverflowDrops(s *snapshot.Snapshot) ([]ListenerDrops, bool) {
	if !s.Events.Has(snapshot.ProgDrops) {
		return nil, false
	}
	var out []ListenerDrops
	for _, d := range s.Events.Drops {
		if d.Reason == ReasonListenOverflow && d.Listener.IsValid() {
			out = append(out, ListenerDrops{d.Listener, d.Count})
		}
	}
	slices.SortFunc(out, func(a, b ListenerDrops) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), a.Listener.Compare(b.Listener))
	})
	return out, true
}

// DropsAt returns the handshakes the listener at local dropped for a full
// accept queue.
func DropsAt(s *snapshot.Snapshot, local netip.AddrPort) (uint64, bool) {
	ds, ok := OverflowDrops(s)
	var n uint64
	for _, d := range ds {
		if d.Listener == local {
			n += d.Count
		}
	}
	return n, ok
}

// PeerCount is a count towards one peer (for connections accepted on
// LocalPort, the peer's port is 0).
type PeerCount struct {
	Remote    netip.AddrPort
	LocalPort uint16
	Count     uint64
}

// String is "10.0.0.5:8080 12" or, for accepted connections,
// "10.0.0.9 on :8080 12".
func (p PeerCount) String() string {
	if p.LocalPort != 0 && p.Remote.Port() == 0 {
		return fmt.Sprintf("%v on :%d %d", p.Remote.Addr(), p.LocalPort, p.Count)
	}
	return fmt.Sprintf("%v %d", p.Remote, p.Count)
}

func sortPeers(ps []PeerCount) {
	slices.SortFunc(ps, func(a, b PeerCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), a.Remote.Compare(b.Remote), cmp.Compare(a.LocalPort, b.LocalPort))
	})
}

// SynRetransmits returns the SYNs retransmitted from s (nobody answered)
// by destination, most first, for destinations match accepts (all when
// match is nil).
func SynRetransmits(s *snapshot.Snapshot, match func(netip.AddrPort) bool) ([]PeerCount, bool) {
	if !s.Events.Has(snapshot.ProgRetransmits) {
		return nil, false
	}
	var out []PeerCount
	for _, r := range s.Events.Retransmits {
		if r.SYN && (match == nil || match(r.Remote)) {
			out = append(out, PeerCount{Remote: r.Remote, Count: r.Count})
		}
	}
	sortPeers(out)
	return out, true
}

// Retransmits returns the data retransmits (not SYNs) by peer, most first.
func Retransmits(s *snapshot.Snapshot) ([]PeerCount, bool) {
	if !s.Events.Has(snapshot.ProgRetransmits) {
		return nil, false
	}
	var out []PeerCount
	for _, r := range s.Events.Retransmits {
		if !r.SYN {
			out = append(out, PeerCount{Remote: r.Remote, LocalPort: r.LocalPort, Count: r.Count})
		}
	}
	sortPeers(out)
	return out, true
}

// ReasonCount is resets for one reason.
type ReasonCount struct {
	Reason string
	Count  uint64
}

// Resets sums the resets sent (sent true) or received for which match
// accepts the reset (all when nil), by reason, most first. The program
// for that direction must have run.
func Resets(s *snapshot.Snapshot, sent bool, match func(snapshot.EventReset) bool) ([]ReasonCount, bool) {
	prog := snapshot.ProgResetsReceived
	if sent {
		prog = snapshot.ProgResetsSent
	}
	if !s.Events.Has(prog) {
		return nil, false
	}
	by := map[string]uint64{}
	for _, r := range s.Events.Resets {
		if r.Sent == sent && (match == nil || match(r)) {
			by[r.Reason] += r.Count
		}
	}
	out := make([]ReasonCount, 0, len(by))
	for k, v := range by {
		out = append(out, ReasonCount{k, v})
	}
	slices.SortFunc(out, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
	return out, true
}

// JoinReasons prints reset counts as "TCP_STATE 120, NO_SOCKET 3"; a
// received reset, which carries no reason, prints as "received".
func JoinReasons(rs []ReasonCount) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		name := r.Reason
		if name == "" {
			name = "received"
		}
		parts[i] = fmt.Sprintf("%s %d", name, r.Count)
	}
	return strings.Join(parts, ", ")
}

// TopPeers prints at most n peer counts and how many more there were.
func TopPeers(ps []PeerCount, n int) string {
	var parts []string
	for i, p := range ps {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more peers", len(ps)-n))
			break
		}
		parts = append(parts, p.String())
	}
	return strings.Join(parts, "; ")
}

// SameListener reports whether a destination dst reaches the listener at
// local: same port, and the same address unless the listener is bound to
// a wildcard address.
func SameListener(local, dst netip.AddrPort) bool {
	if local.Port() != dst.Port() {
		return false
	}
	return local.Addr().IsUnspecified() || local.Addr() == dst.Addr()
}

// SameListenerAt is SameListener for two socket endpoints, without
// converting them.
func SameListenerAt(local, dst snapshot.Endpoint) bool {
	if local.Port() != dst.Port() {
		return false
	}
	return local.IsUnspecified() || local.SameAddr(dst)
}

// RetransmitsTo sums the data retransmits to peer address a, on every
// port.
func RetransmitsTo(s *snapshot.Snapshot, a netip.Addr) (uint64, bool) {
	ps, ok := Retransmits(s)
	var n uint64
	for _, p := range ps {
		if p.Remote.Addr().Unmap() == a.Unmap() {
			n += p.Count
		}
	}
	return n, ok
}

// OnFlow matches the resets of the connections from opener to service on
// either side: the opener's sockets key by the service's address and
// port, the service's accepted sockets by the opener's address and the
// service port. An invalid opener matches any client.
func OnFlow(opener netip.Addr, service netip.AddrPort) func(snapshot.EventReset) bool {
	return func(r snapshot.EventReset) bool {
		if Unmapped(r.Remote) == Unmapped(service) && r.LocalPort == 0 {
			return true
		}
		return r.LocalPort == service.Port() && r.Remote.Port() == 0 && (!opener.IsValid() || r.Remote.Addr().Unmap() == opener.Unmap())
	}
}

// ResetSummary prints the resets sent and received that match, by
// reason: "sent TCP_STATE 120; received 118", "none", or the reason
// they are unknown.
func ResetSummary(s *snapshot.Snapshot, match func(snapshot.EventReset) bool) string {
	if !s.Events.Has(snapshot.ProgResetsSent) && !s.Events.Has(snapshot.ProgResetsReceived) {
		return "unknown: " + ProgramMissing(s, snapshot.ProgResetsSent)
	}
	sent, okS := Resets(s, true, match)
	recv, okR := Resets(s, false, match)
	var parts []string
	switch {
	case !okS:
		parts = append(parts, "sent unknown: "+ProgramMissing(s, snapshot.ProgResetsSent))
	case len(sent) > 0:
		parts = append(parts, "sent "+JoinReasons(sent))
	}
	switch {
	case !okR:
		parts = append(parts, "received unknown: "+ProgramMissing(s, snapshot.ProgResetsReceived))
	case len(recv) > 0:
		var n uint64
		for _, r := range recv {
			n += r.Count
		}
		parts = append(parts, fmt.Sprintf("received %d", n))
	}
	if len(parts) == 0 {
		return "none in " + units.Dur(s.Events.Interval())
	}
	return strings.Join(parts, "; ") + " in " + units.Dur(s.Events.Interval())
}
