// SPDX-License-Identifier: Apache-2.0

package bpfsource

// The counting maps of bpf/events.c: drops, retransmits, resets.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Drop is packets the kernel dropped for one reason in one namespace.
type Drop struct {
	// Reason is the kernel's skb_drop_reason without its prefix
	// (TCP_LISTEN_OVERFLOW, NO_SOCKET, ...), or "reason N" for a number
	// the kernel's BTF does not name.
	Reason string
	// Listener is the listening socket for TCP_LISTEN_OVERFLOW (each
	// drop is a handshake that found its accept queue full); invalid
	// otherwise.
	Listener netip.AddrPort
	Count    uint64
}

// Retransmit is segments retransmitted towards one peer.
type Retransmit struct {
	// Peer is the remote end. For connections this host accepted the
	// port is 0 (one entry per client address, not per connection) and
	// LocalPort is the port they came in on.
	Peer      netip.AddrPort
	LocalPort uint16
	// SYN: the socket was in SYN_SENT, so these are SYNs nobody
	// answered: the client side of a full accept queue, a lost SYN or a
	// dead peer.
	SYN   bool
	Count uint64
}

// Reset is resets sent or received with one peer for one reason.
type Reset struct {
	// Sent is true for resets this host sent, false for received ones.
	Sent bool
	// Reason is the kernel's sk_rst_reason without its prefix
	// (TCP_ABORT_ON_LINGER, NO_SOCKET, ...) for sent resets; "" for
	// received ones (the peer does not say why).
	Reason string
	// Peer and LocalPort as in Retransmit; a reset answering a packet
	// for no socket keys by the local port the packet was sent to.
	Peer      netip.AddrPort
	LocalPort uint16
	Count     uint64
}

// Sizes of struct drop_key and struct peer_key (bpf/events.c).
const (
	dropKeySize = 32
	peerKeySize = 32
)

// decodeDrop decodes one drops entry: its namespace and Drop.
func decodeDrop(names *reasonNames, key []byte, count uint64) (uint64, Drop, error) {
	if len(key) != dropKeySize {
		return 0, Drop{}, fmt.Errorf("bpfsource: drop key of %d bytes, want %d", len(key), dropKeySize)
	}
	ne := binary.NativeEndian
	d := Drop{Reason: names.drop(ne.Uint32(key[4:])), Count: count}
	if fam := ne.Uint16(key[26:]); fam != 0 {
		a, err := addrOf(fam, key[8:24])
		if err != nil {
			return 0, Drop{}, err
		}
		d.Listener = netip.AddrPortFrom(a, ne.Uint16(key[24:]))
	}
	return uint64(ne.Uint32(key[0:])), d, nil
}

// decodePeer decodes one retrans or resets entry: namespace, reason
// number, peer, local port and the flag byte (syn, or sent).
func decodePeer(key []byte) (ns uint64, reason uint32, peer netip.AddrPort, lport uint16, flag bool, err error) {
	if len(key) != peerKeySize {
		return 0, 0, peer, 0, false, fmt.Errorf("bpfsource: peer key of %d bytes, want %d", len(key), peerKeySize)
	}
	ne := binary.NativeEndian
	a, err := addrOf(ne.Uint16(key[28:]), key[8:24])
	if err != nil {
		return 0, 0, peer, 0, false, err
	}
	return uint64(ne.Uint32(key[0:])), ne.Uint32(key[4:]), netip.AddrPortFrom(a, ne.Uint16(key[24:])),
		ne.Uint16(key[26:]), key[30] != 0, nil
}

// readCounters adds the drop, retransmit and reset counts to r.
func (s *Source) readCounters(r *Reading) error {
	if s.shared.drops == nil {
		return nil
	}
	err := drain(s.shared.drops, dropKeySize, 4096, func(key []byte, n uint64) error {
		ns, d, err := decodeDrop(&s.names, key, n)
		if err == nil {
			r.Drops[ns] = append(r.Drops[ns], d)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bpfsource: read drops: %w", err)
	}
	err = drain(s.shared.retrans, peerKeySize, 8192, func(key []byte, n uint64) error {
		ns, _, peer, lport, syn, err := decodePeer(key)
		if err == nil {
			r.Retransmits[ns] = append(r.Retransmits[ns], Retransmit{Peer: peer, LocalPort: lport, SYN: syn, Count: n})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bpfsource: read retransmits: %w", err)
	}
	err = drain(s.shared.resets, peerKeySize, 4096, func(key []byte, n uint64) error {
		ns, reason, peer, lport, sent, err := decodePeer(key)
		if err == nil {
			rs := Reset{Sent: sent, Peer: peer, LocalPort: lport, Count: n}
			if sent {
				rs.Reason = s.names.reset(reason)
			}
			r.Resets[ns] = append(r.Resets[ns], rs)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bpfsource: read resets: %w", err)
	}
	var lost [lostSlots]uint64
	for i := range lost {
		var n uint64
		if err := s.shared.lost.Lookup(uint32(i), &n); err != nil {
			return fmt.Errorf("bpfsource: read lost: %w", err)
		}
		lost[i] = n - s.lost[i]
		s.lost[i] = n
	}
	r.LostDrops, r.LostRetransmits, r.LostResets, r.LostEvents = lost[0], lost[1], lost[2], lost[3]
	return nil
}

// lostSlots is the size of ev_lost (bpf/events_shared.h).
const lostSlots = 4
