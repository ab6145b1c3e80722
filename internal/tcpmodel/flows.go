// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// RTT is the smoothed RTT of a connection; 0 when unknown.
func RTT(ti *snapshot.TCPInfo) time.Duration {
	if ti == nil {
		return 0
	}
	return time.Duration(ti.RTT) * time.Microsecond
}

// Flight is what is in flight (unacked segments) and cwnd, in bytes of
// snd_mss; the caller checks snd_mss is set.
func Flight(ti *snapshot.TCPInfo) (inflight, cwnd float64) {
	mss := float64(ti.SndMSS)
	return float64(ti.Unacked) * mss, float64(ti.SndCwnd) * mss
}

// Tuple is a connection's (local, remote) pair.
type Tuple struct{ Local, Remote netip.AddrPort }

// Tuples indexes the connected sockets of a snapshot by (local, remote),
// so that a local peer is found by looking up the reverse tuple. The
// index is built on the first lookup: rules ask for it up front but look
// up only their candidates, often none among a million idle sockets.
type Tuples = *TupleIndex

// TupleIndex is what Tuples points to. Its key holds the addresses as
// bytes: 36 bytes without pointers rather than two netip.AddrPort (64
// bytes, each with a pointer for the garbage collector to follow). An
// IPv4 address and its IPv4-mapped IPv6 form are one key: a client's
// AF_INET socket and the AF_INET6 socket a dual-stack listener accepted
// from it are peers. Safe for concurrent use.
type TupleIndex struct {
	snap *snapshot.Snapshot
	once sync.Once
	m    map[tupleKey]*snapshot.Socket
}

type tupleKey struct {
	local, remote [16]byte
	lport, rport  uint16
}

func keyOf(local, remote snapshot.Endpoint) tupleKey {
	return tupleKey{local.As16(), remote.As16(), local.Port(), remote.Port()}
}

// TuplesOf indexes s (on first use).
func TuplesOf(s *snapshot.Snapshot) Tuples {
	return &TupleIndex{snap: s}
}

func (t *TupleIndex) build() {
	s := t.snap
	t.m = make(map[tupleKey]*snapshot.Socket, len(s.Sockets))
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State == snapshot.Listen || sk.State == snapshot.TimeWait {
			continue
		}
		t.m[keyOf(sk.Local, sk.Remote)] = sk
	}
}

// Peer returns the other end of sk when it lives in the same namespace.
func (t *TupleIndex) Peer(sk *snapshot.Socket) *snapshot.Socket {
	t.once.Do(t.build)
	return t.m[keyOf(sk.Remote, sk.Local)]
}

// ReferenceRate (bytes/s) is what a flow over a network path is judged
// against when the path's rate is unknown: 1 Gbit/s, the slowest link a
// server commonly has. --bandwidth replaces it.
const ReferenceRate = 1e9 / 8

// LostShare is the share of its path's rate below which a flow
// has measurably lost performance.
const LostShare = 0.5

// Path is what a connection's path is known to carry.
type Path struct {
	Rate   float64 // bytes/s; 0 when unknown
	Source string  // where Rate came from
	// Local: the path never leaves the host (a loopback address or the
	// peer socket in the same namespace): it carries whatever the two
	// ends process, tens of Gbit/s.
	Local bool
}

// PathOf finds the rate to judge sk by: bandwidth (bits/s, from
// --bandwidth) when given, else, for a path that leaves the host, the
// path's rate measured from the connections to the same peer that only
// the path held (PathRatesOf, the estimate trace uses too).
func PathOf(bandwidth float64, rates PathRates, t Tuples, sk *snapshot.Socket) Path {
	p := Path{Local: IsLoopback(sk.Remote.Addr()) || t != nil && t.Peer(sk) != nil}
	switch e, ok := rates[sk.Remote.Addr().Unmap()]; {
	case bandwidth > 0:
		p.Rate, p.Source = bandwidth/8, "--bandwidth"
	case p.Local:
		// Inside the host a delivery-rate sample is a burst of memory
		// copies (50+ Gbit/s seen on loopback), not a path's rate.
	case ok && e.Rate > 0:
		p.Rate, p.Source = e.Rate, e.Source()
	}
	return p
}

// Verdict is whether a flow held back by some limiter has lost
// performance that matters: judged against its path's rate when known,
// else against ReferenceRate (a host-local path carries far more, so a
// local flow below it is slow by any measure).
type Verdict struct {
	Lost    bool
	Against float64 // the rate judged against, bytes/s; 0 for a local path
	Why     string
}

// Judge compares own (bytes/s moved) with what the path carries.
func (p Path) Judge(own float64) Verdict {
	switch {
	case p.Rate > 0:
		v := Verdict{Against: p.Rate, Lost: own < LostShare*p.Rate}
		v.Why = fmt.Sprintf("moving %s of the path's %s (%s)", units.Rate(own), units.Rate(p.Rate), p.Source)
		return v
	}
	v := Verdict{Against: ReferenceRate, Lost: own < LostShare*ReferenceRate}
	v.Why = fmt.Sprintf("moving %s; path rate unknown, judged against %s (give --bandwidth for the real path)", units.Rate(own), units.Rate(ReferenceRate))
	if p.Local {
		v.Why = fmt.Sprintf("moving %s on a path inside the host, which carries tens of Gbit/s; judged against %s", units.Rate(own), units.Rate(ReferenceRate))
	}
	return v
}

// BusyRate is what a connection moved per second while it had data in
// flight, over its life (bytes_acked / busy_time): its rate when no
// earlier sample gives a window; 0 without the chronograph (Linux 4.10+).
func BusyRate(ti *snapshot.TCPInfo) float64 {
	if !ti.Has(snapshot.EndChrono) || ti.BusyTime == 0 {
		return 0
	}
	return float64(ti.BytesAcked) / (float64(ti.BusyTime) / 1e6)
}

// OwnRate is a connection's rate when there is no window to measure it
// over: the busy-time average, else the kernel's last delivery rate
// sample (one round trip, low when the application paused).
func OwnRate(ti *snapshot.TCPInfo) float64 {
	if r := BusyRate(ti); r > 0 {
		return r
	}
	if ti.Has(snapshot.EndDeliveryRate) {
		return float64(ti.DeliveryRate)
	}
	return 0
}
