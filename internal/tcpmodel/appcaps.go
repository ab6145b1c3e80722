// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// CapUse is how much of a connection limit a server set for itself
// (snapshot.AppCap) its processes use in one sample.
type CapUse struct {
	Cap *snapshot.AppCap
	// Listeners are the LISTEN sockets of Cap.Pid.
	Listeners []*snapshot.Socket
	// Pids are the processes held to Cap.Value: Cap.Pids (nginx's
	// workers), or Cap.Pid alone for a limit per listener.
	Pids []int
	// Held is what each of Pids counts against the limit: every socket
	// it holds (CapPerProcess), or, for CapPerListener under Cap.Pid,
	// the connections accepted on Listeners whoever holds them.
	Held map[int]int
	// Clients are the connections accepted on Listeners each holds, and
	// Outgoing the ones it opened (to upstreams), CapPerProcess only.
	Clients, Outgoing map[int]int
	// Top is the pid of Pids nearest the limit.
	Top int
}

// CapNear is how close to its limit a holder counts as at the cap: the
// limit less 5% (at least 2), as a server stops short of it by the
// connections it has just closed or is about to accept.
func CapNear(value int64) int64 { return value - max(2, value/20) }

// CapLimit is what ordinary clients of c can have: its value less what
// it reserves.
func CapLimit(c *snapshot.AppCap) int64 { return c.Value - c.Reserved }

// CapLimitIn is CapLimit with what the server reserves as s shows it
// (CapReserved).
func CapLimitIn(s *snapshot.Snapshot, c *snapshot.AppCap) int64 { return c.Value - CapReserved(s, c) }

// CapReserved is what of c.Value its server keeps from its clients in s.
// memcached turns a client away once accept() returns a descriptor at -c
// - 1 or above (maxconns_fast, its default), so every descriptor it holds
// that is not a client connection counts against -c: its open files
// (/proc/PID/fd) less its TCP connections, plus that last one. Without
// the process's open files, or for another server, c.Reserved (for
// memcached, the reading's estimate from its threads). An nginx worker
// keeps NginxReserve of its worker_connections.
func CapReserved(s *snapshot.Snapshot, c *snapshot.AppCap) int64 {
	if c.App == "nginx" && c.Per == snapshot.CapPerProcess {
		return c.Reserved + NginxReserve(c.Value)
	}
	if c.App != "memcached" || s == nil {
		return c.Reserved
	}
	p := s.Procs[c.Pid]
	if p == nil || p.FDs < 0 {
		return c.Reserved
	}
	conns := 0
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State != snapshot.Listen && slices.Contains(sk.Pids.List(), c.Pid) {
			conns++
		}
	}
	own := int64(p.FDs - conns)
	if own < 0 {
		return c.Reserved
	}
	// The connections it holds fit, whatever the descriptor count says:
	// fds and sockets are read moments apart, and a client being turned
	// away holds a descriptor for that moment.
	return max(min(own+1, c.Value-int64(conns)), 0)
}

// NginxReserve is what of worker_connections n an nginx worker does not
// give its TCP connections: one slot for its channel to the master (a
// socketpair), and n/16 it keeps free by closing connections still
// waiting for their first request and idle keep-alive ones whenever
// another connection needs a slot and no more than n/16 are free
// (ngx_drain_connections, logged at warn level as "N worker_connections
// are not enough, reusing connections"). A worker at its limit holds from
// n - n/16 - 1 TCP connections (59 of 64 in the corpus case "nginx full
// at worker_connections, nobody arriving") up to n - 1 when none is left
// to close (248 of 256 in one run of "nginx at worker_connections").
func NginxReserve(n int64) int64 { return n/16 + 1 }

// AtCap says whether held reached the limit value (CapNear).
func AtCap(held int, value int64) bool { return value > 0 && int64(held) >= CapNear(value) }

// CapUseOf measures c in s.
func CapUseOf(s *snapshot.Snapshot, c *snapshot.AppCap) CapUse {
	u := CapUse{Cap: c, Held: map[int]int{}, Clients: map[int]int{}, Outgoing: map[int]int{}}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State == snapshot.Listen && slices.Contains(sk.Pids.List(), c.Pid) && (len(c.Ports) == 0 || slices.Contains(c.Ports, sk.Local.Port())) {
			u.Listeners = append(u.Listeners, sk)
		}
	}
	u.Pids = c.Pids
	if c.Per != snapshot.CapPerProcess || len(u.Pids) == 0 {
		u.Pids = []int{c.Pid}
	}
	accepted := func(sk *snapshot.Socket) bool {
		for _, ln := range u.Listeners {
			if AcceptedOn(ln, sk) {
				return true
			}
		}
		return false
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		switch c.Per {
		case snapshot.CapPerProcess:
			for _, pid := range sk.Pids.List() {
				if !slices.Contains(u.Pids, pid) {
					continue
				}
				u.Held[pid]++
				switch {
				case sk.State == snapshot.Listen:
				case accepted(sk):
					u.Clients[pid]++
				default:
					u.Outgoing[pid]++
				}
			}
		default:
			// A connection with no owner is still in the accept queue
			// (or orphaned): the server does not hold it yet.
			if sk.State != snapshot.Listen && sk.State != snapshot.TimeWait && sk.Pids.Len() > 0 && accepted(sk) {
				u.Held[c.Pid]++
				u.Clients[c.Pid]++
			}
		}
	}
	for _, pid := range u.Pids {
		if u.Top == 0 || u.Held[pid] > u.Held[u.Top] {
			u.Top = pid
		}
	}
	return u
}

// Ports are the local ports of u's listeners.
func (u *CapUse) Ports() []uint16 {
	var ps []uint16
	for _, ln := range u.Listeners {
		ps = append(ps, ln.Local.Port())
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}

// TurnedAway is what a window shows of connections a server accepted
// and ended itself on its listeners.
type TurnedAway struct {
	// Closed are connections accepted on the listeners that the server
	// closed first in the window (TIME_WAIT on its side).
	Closed int
	// Closes are the connections the eBPF source saw the holders close
	// first on the listeners' ports; HasCloses when it ran.
	Closes    uint64
	HasCloses bool
	// ResetsSent are resets the server's side of those ports sent (by
	// reason): a request arriving after the server closed (TIME_WAIT or
	// FIN_WAIT2 answering with a reset, TCP_ABORT_ON_DATA) or unread
	// when it closed (TCP_ABORT_ON_CLOSE); HasResets when it ran.
	ResetsSent map[string]uint64
	HasResets  bool
	// ResetsToClients are the resets clients in this namespace received
	// from the listeners (eBPF tcp_receive_reset); HasClientResets when
	// that program ran.
	ResetsToClients uint64
	HasClientResets bool
	// Estimated: connections the namespace
	// accepted in the window (Tcp.PassiveOpens) that are neither open now
	// nor closed first by another listener's server (its TIME_WAIT):
	// ended soon after being accepted, by either side. HasEstimate when
	// the counter was there.
	Estimated   int64
	HasEstimate bool
}

// Ended is the connections the server ended in the window by the best
// count there is: the largest of its TIME_WAIT, the eBPF closes and the
// namespace-wide estimate (each sees only some: the eBPF closes miss the
// connections its clients closed first after an error reply, the
// TIME_WAIT misses those a reset ended).
func (t *TurnedAway) Ended() int64 {
	n := int64(t.Closed)
	if t.HasCloses {
		n = max(n, int64(t.Closes))
	}
	if t.HasEstimate {
		n = max(n, t.Estimated)
	}
	return n
}

// Resets is the sum of ResetsSent.
func (t *TurnedAway) Resets() uint64 {
	var n uint64
	for _, v := range t.ResetsSent {
		n += v
	}
	return n
}

// TurnedAwayOf gathers u's turned-away connections over the window;
// passive is the namespace's Tcp.PassiveOpens over it (hasPassive when
// known), for the estimate without eBPF.
func TurnedAwayOf(s *snapshot.Snapshot, u *CapUse, prev PrevState, window time.Duration, passive int64, hasPassive bool) TurnedAway {
	var t TurnedAway
	ports := u.Ports()
	if hasPassive && prev != nil && passive >= 0 {
		fresh, elsewhere := acceptedTurnover(s, u, prev, window)
		t.Estimated, t.HasEstimate = max(passive-int64(fresh+elsewhere), 0), true
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State != snapshot.TimeWait || !ClosedInWindow(sk, prev, window) {
			continue
		}
		for _, ln := range u.Listeners {
			if sk.Family == ln.Family && SameListenerAt(ln.Local, sk.Local) {
				t.Closed++
				break
			}
		}
	}
	ev := s.Events
	if ev.Has(snapshot.ProgLifecycle) {
		t.HasCloses = true
		holders := append(slices.Clone(u.Pids), u.Cap.Pid)
		for i := range ev.Flows {
			f := &ev.Flows[i]
			if f.Accepted() && slices.Contains(ports, f.LocalPort) && slices.Contains(holders, f.Pid) {
				t.Closes += f.ActiveCloses
			}
		}
	}
	if ev.Has(snapshot.ProgResetsSent) {
		t.HasResets = true
		t.ResetsSent = map[string]uint64{}
		for _, r := range ev.Resets {
			if port, ok := ResetPort(s, r); ok && slices.Contains(ports, port) {
				t.ResetsSent[r.Reason] += r.Count
			}
		}
	}
	if ev.Has(snapshot.ProgResetsReceived) {
		t.HasClientResets = true
		for _, r := range ev.Resets {
			if r.Sent || r.LocalPort != 0 {
				continue
			}
			for _, ln := range u.Listeners {
				if r.Remote.Port() == ln.Local.Port() && (ln.Local.Addr().IsUnspecified() || Unmapped(r.Remote).Addr() == Unmapped(ln.Local.AddrPort()).Addr()) {
					t.ResetsToClients += r.Count
					break
				}
			}
		}
	}
	return t
}

// CapHeld is CapUse.Held of every cap of s, by pid (for the first sample
// of a window).
func CapHeld(s *snapshot.Snapshot) map[int]int {
	m := map[int]int{}
	for i := range s.AppCaps {
		u := CapUseOf(s, &s.AppCaps[i])
		for pid, n := range u.Held {
			m[pid] = n
		}
	}
	return m
}

// acceptedTurnover counts, over every listener of s, the accepted
// connections open now that the previous sample did not have (fresh), and
// the TIME_WAIT sockets younger than the window on listeners other than
// u's (elsewhere).
func acceptedTurnover(s *snapshot.Snapshot, u *CapUse, prev PrevState, window time.Duration) (fresh, elsewhere int) {
	ls := ListenersOf(s)
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		ln := ls.Of(sk)
		if ln == nil {
			continue
		}
		switch sk.State {
		case snapshot.Listen, snapshot.SynRecv, snapshot.NewSynRecv:
		case snapshot.TimeWait:
			if ClosedInWindow(sk, prev, window) && !slices.Contains(u.Listeners, ln) {
				elsewhere++
			}
		default:
			if _, was := prev(sk); !was {
				fresh++
			}
		}
	}
	return fresh, elsewhere
}

// ResetPort is the local port of the accepted connection a sent reset
// ended, ok false for an opener's reset or one that cannot be placed. The
// eBPF source keys an accepted socket's resets by its port; but close()
// on one with unread data (TCP_ABORT_ON_CLOSE: Node's
// server.maxConnections closes newcomers so) releases the port before
// the reset goes out, and the reset comes keyed by neither port. Such
// one is placed on the namespace's only listening port when there is
// one.
func ResetPort(s *snapshot.Snapshot, r snapshot.EventReset) (uint16, bool) {
	switch {
	case !r.Sent:
		return 0, false
	case r.LocalPort != 0:
		return r.LocalPort, true
	case r.Remote.Port() != 0 || !AbortiveClose(r.Reason):
		return 0, false
	}
	return SoleListeningPort(s)
}

// SoleListeningPort is the one port the namespace listens on, ok false
// when it listens on none or several.
func SoleListeningPort(s *snapshot.Snapshot) (uint16, bool) {
	var port uint16
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State != snapshot.Listen {
			continue
		}
		if port != 0 && sk.Local.Port() != port {
			return 0, false
		}
		port = sk.Local.Port()
	}
	return port, port != 0
}

// poolers are connection poolers by command: a server's connections held
// by one are a pool sized on purpose.
var poolers = []string{"pgbouncer", "odyssey", "pgpool", "pgcat", "pgagroal", "proxysql"}

// PoolerHolding names the connection pooler in s holding most of the
// connections to the listeners (the client side of them, in this
// namespace), when one holds at least half of those whose owner is
// known; "" otherwise.
func PoolerHolding(s *snapshot.Snapshot, listeners []*snapshot.Socket) string {
	by := map[string]int{}
	total := 0
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State != snapshot.Established || sk.Pids.Len() == 0 {
			continue
		}
		for _, ln := range listeners {
			if sk.Remote.Port() == ln.Local.Port() && (ln.Local.IsUnspecified() || Unmapped(sk.Remote.AddrPort()).Addr() == Unmapped(ln.Local.AddrPort()).Addr()) {
				total++
				pid, _ := s.Owner(sk)
				by[Command(s, pid)]++
				break
			}
		}
	}
	for cmd, n := range by {
		if slices.Contains(poolers, cmd) && 2*n >= total {
			return cmd
		}
	}
	return ""
}
