// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Limited is how a connection spent a window between two samples, from
// its tcp_info chronographs: the share of the window it was busy, and of
// that busy time the shares limited by the send buffer, by the peer's
// receive window and by congestion (cwnd or pacing).
type Limited struct {
	Window                         time.Duration
	Busy, Sndbuf, Rwnd, Congestion float64
}

// LimitedOf fills l from two samples of one connection's tcp_info taken
// window apart; false when they do not give it (snapshot.ChronoShares).
func LimitedOf(prev, cur *snapshot.TCPInfo, window time.Duration, l *Limited) bool {
	sh, ok := snapshot.ChronoShares(prev, cur, window)
	if !ok {
		return false
	}
	*l = Limited{
		Window:     sh.Window,
		Busy:       snapshot.Frac(sh.Busy, sh.Window),
		Sndbuf:     snapshot.Frac(sh.Sndbuf, sh.Busy),
		Rwnd:       snapshot.Frac(sh.Rwnd, sh.Busy),
		Congestion: snapshot.Frac(sh.Cwnd, sh.Busy),
	}
	return true
}

// Chronos is the first of two samples as Limited needs it: per namespace
// and cookie only the three chronographs, not copies of the sockets, so a
// listing can stream both samples.
type Chronos struct {
	byNS  map[string]map[uint64]chrono
	taken map[string]time.Time
}

type chrono struct{ busy, rwnd, sndbuf uint64 }

// NewChronos returns an empty first sample.
func NewChronos() *Chronos {
	return &Chronos{byNS: map[string]map[uint64]chrono{}, taken: map[string]time.Time{}}
}

// Add keeps sk's chronographs, from s; a socket without them is left out.
func (c *Chronos) Add(s *snapshot.Snapshot, sk *snapshot.Socket) {
	var tb snapshot.TCPInfo
	ti := sk.TCP(&tb)
	if !ti.Has(snapshot.EndChrono) {
		return
	}
	m := c.byNS[s.Netns.Name]
	if m == nil {
		m = map[uint64]chrono{}
		c.byNS[s.Netns.Name] = m
	}
	m[sk.Cookie] = chrono{ti.BusyTime, ti.RwndLimited, ti.SndbufLimited}
}

// Taken records when s, the first sample of its namespace, was taken: a
// window runs from there.
func (c *Chronos) Taken(s *snapshot.Snapshot) { c.taken[s.Netns.Name] = s.Taken }

// Limited fills l for sk of the second sample s; false when the first
// sample did not keep sk or the two do not give it.
func (c *Chronos) Limited(s *snapshot.Snapshot, sk *snapshot.Socket, l *Limited) bool {
	ch, ok := c.byNS[s.Netns.Name][sk.Cookie]
	if !ok {
		return false
	}
	prev := snapshot.TCPInfo{Len: snapshot.EndChrono, BusyTime: ch.busy, RwndLimited: ch.rwnd, SndbufLimited: ch.sndbuf}
	var tb snapshot.TCPInfo
	return LimitedOf(&prev, sk.TCP(&tb), s.Taken.Sub(c.taken[s.Netns.Name]), l)
}
