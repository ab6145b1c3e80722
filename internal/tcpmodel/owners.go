// SPDX-License-Identifier: Apache-2.0

package tcpmodel

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Command returns the command of pid, "" if unknown.
func Command(s *snapshot.Snapshot, pid int) string {
	if p := s.Procs[pid]; p != nil {
		return p.Command
	}
	return ""
}

// FirstOwner returns a socket's first owning pid and its command; 0 and
// "" when the owner scan did not find it.
func FirstOwner(s *snapshot.Snapshot, sk *snapshot.Socket) (int, string) {
	pid, p := s.Owner(sk)
	if p == nil {
		return pid, ""
	}
	return pid, p.Command
}

// Who describes owners as "nginx(pid 12), nginx(pid 13)", or "unknown
// owner" when the owner scan did not find any.
func Who(s *snapshot.Snapshot, pids []int) string {
	if len(pids) == 0 {
		return "unknown owner"
	}
	parts := make([]string, 0, len(pids))
	for _, pid := range pids {
		cmd := Command(s, pid)
		if cmd == "" {
			cmd = "?"
		}
		parts = append(parts, fmt.Sprintf("%s(pid %d)", cmd, pid))
	}
	return strings.Join(parts, ", ")
}

// OwnersMissing says why sockets may lack owners in s: the owner scan
// failed or was partial. "" when it ran cleanly.
func OwnersMissing(s *snapshot.Snapshot) string {
	if msg, failed := s.Failed(snapshot.SourceOwners); failed {
		return msg
	}
	for _, st := range s.Sources {
		if st.Source == snapshot.SourceOwners {
			return ""
		}
	}
	return "owners were not collected"
}

// tallyMax bounds the pids a Tally keeps.
const tallyMax = 8

// Tally counts sockets per owning pid, keeping the first tallyMax pids.
type Tally struct {
	pids []int
	n    []int
}

// Add counts one socket of pid.
func (t *Tally) Add(pid int) { t.AddN(pid, 1) }

// AddN counts n sockets of pid.
func (t *Tally) AddN(pid, n int) {
	for i, p := range t.pids {
		if p == pid {
			t.n[i] += n
			return
		}
	}
	if len(t.pids) < tallyMax {
		t.pids = append(t.pids, pid)
		t.n = append(t.n, n)
	}
}

// Len is the number of pids kept.
func (t *Tally) Len() int { return len(t.pids) }

// Top returns the pid holding most sockets, 0 if none.
func (t *Tally) Top() int {
	best, pid := 0, 0
	for i, p := range t.pids {
		if t.n[i] > best {
			best, pid = t.n[i], p
		}
	}
	return pid
}

// List prints "nginx(pid 900) 812 open, ..." or "" when empty.
func (t *Tally) List(s *snapshot.Snapshot) string {
	parts := make([]string, len(t.pids))
	for i, p := range t.pids {
		parts[i] = fmt.Sprintf("%s %d open", Who(s, []int{p}), t.n[i])
	}
	return strings.Join(parts, ", ")
}

// PortTable holds values by port: a table rather than a map, as rules
// look up each of a million sockets' ports. The zero table (and a nil
// one) holds nothing.
type PortTable[T any] struct {
	// at is, by port, 1 + the index in lists of the port's values; 0
	// for a port without one.
	at    [1 << 16]uint32
	lists [][]T
}

// Add adds v to port's values.
func (t *PortTable[T]) Add(port uint16, v T) {
	if t.at[port] == 0 {
		t.lists = append(t.lists, nil)
		t.at[port] = uint32(len(t.lists))
	}
	t.lists[t.at[port]-1] = append(t.lists[t.at[port]-1], v)
}

// At returns port's values.
func (t *PortTable[T]) At(port uint16) []T {
	if t == nil || t.at[port] == 0 {
		return nil
	}
	return t.lists[t.at[port]-1]
}

// Groups returns the values of each port, ports in the order of their
// first value. The caller must not change them.
func (t *PortTable[T]) Groups() [][]T {
	if t == nil {
		return nil
	}
	return t.lists
}

// Ports is how many ports have a value.
func (t *PortTable[T]) Ports() int {
	if t == nil {
		return 0
	}
	return len(t.lists)
}

// Listeners indexes a snapshot's listeners by port, to find the service
// a server-side socket came from.
type Listeners = *ListenerIndex

// ListenerIndex is what Listeners points to: a PortTable of listeners.
// The zero index (and a nil one) has no listener.
type ListenerIndex struct{ t PortTable[*snapshot.Socket] }

// ListenersOf indexes the listeners of s.
func ListenersOf(s *snapshot.Snapshot) Listeners {
	l := &ListenerIndex{}
	for i := range s.Sockets {
		if sk := &s.Sockets[i]; sk.State == snapshot.Listen {
			l.t.Add(sk.Local.Port(), sk)
		}
	}
	return l
}

// At returns the listeners on port.
func (l *ListenerIndex) At(port uint16) []*snapshot.Socket {
	if l == nil {
		return nil
	}
	return l.t.At(port)
}

// Groups returns the listeners of each port, ports in the order of their
// first listener in the snapshot. The caller must not change them.
func (l *ListenerIndex) Groups() [][]*snapshot.Socket {
	if l == nil {
		return nil
	}
	return l.t.Groups()
}

// Ports is how many ports have a listener.
func (l *ListenerIndex) Ports() int {
	if l == nil {
		return 0
	}
	return l.t.Ports()
}

// Of returns the listener that accepted sk: same local port, same address
// or a wildcard one; nil for a client-side socket.
func (l *ListenerIndex) Of(sk *snapshot.Socket) *snapshot.Socket {
	if sk.State == snapshot.Listen {
		return nil
	}
	var wild *snapshot.Socket
	for _, ln := range l.At(sk.Local.Port()) {
		a := ln.Local.Addr()
		switch {
		case a == sk.Local.Addr() || a.Unmap() == sk.Local.Addr().Unmap():
			return ln
		case a.IsUnspecified():
			wild = ln
		}
	}
	return wild
}

// Service names the service a server-side socket belongs to: its local
// address and port ("127.0.0.1:8080"); invalid for client-side sockets.
func (l *ListenerIndex) Service(sk *snapshot.Socket) netip.AddrPort {
	if l.Of(sk) == nil {
		return netip.AddrPort{}
	}
	return sk.Local.AddrPort()
}

// AcceptedOn says whether sk is a connection listener ln accepted: an
// open one (not in a listener's queue nor in TIME_WAIT) of the same
// family on the listener's address and port.
func AcceptedOn(ln, sk *snapshot.Socket) bool {
	switch sk.State {
	case snapshot.Listen, snapshot.TimeWait, snapshot.SynRecv, snapshot.NewSynRecv, snapshot.Close, snapshot.BoundInactive:
		return false
	}
	return sk.Family == ln.Family && SameListenerAt(ln.Local, sk.Local)
}

// AcceptedOwned counts, for each listener of s (ls, ListenersOf(s)) by
// cookie, the accepted connections (AcceptedOn) that have an owner.
func AcceptedOwned(s *snapshot.Snapshot, ls Listeners) map[uint64]int {
	out := make(map[uint64]int, ls.Ports())
	// A listener's connections mostly come together in a dump: the last
	// port's listeners are kept, and the last listener's count is added
	// to the map when another one's starts.
	var lns []*snapshot.Socket
	port, lastCookie, n := -1, uint64(0), 0
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.Pids.Len() == 0 {
			continue
		}
		if p := int(sk.Local.Port()); p != port {
			lns, port = ls.At(sk.Local.Port()), p
		}
		for _, ln := range lns {
			if !AcceptedOn(ln, sk) {
				continue
			}
			if ln.Cookie != lastCookie {
				if n > 0 {
					out[lastCookie] += n
				}
				lastCookie, n = ln.Cookie, 0
			}
			n++
		}
	}
	if n > 0 {
		out[lastCookie] += n
	}
	return out
}

// Openers names, for each flow of s, the process holding most of its
// sockets (TIME_WAIT ones have no owner) and of the connections the
// owner scan saw only in passing (FlowOwners). Connections accepted on
// a listener (ls, ListenersOf(s)) are left out: their peer opened them,
// and as flows (the server to its client's ephemeral port) no one asks
// for them.
func Openers(s *snapshot.Snapshot, ls Listeners) map[Flow]int {
	tallies := map[Flow]*Tally{}
	// A flow's sockets mostly come together in a dump: the last one's
	// tally is tried before the map.
	var last *Tally
	var lastF Flow
	add := func(f Flow, pid int) {
		t := last
		if t == nil || f != lastF {
			if t = tallies[f]; t == nil {
				t = &Tally{}
				tallies[f] = t
			}
			last, lastF = t, f
		}
		t.Add(pid)
	}
	for i := range s.Sockets {
		sk := &s.Sockets[i]
		if sk.State == snapshot.TimeWait || sk.Pids.Len() == 0 || ls.Of(sk) != nil {
			continue
		}
		pid, _ := s.Owner(sk)
		add(FlowOf(sk.Local.Addr(), sk.Remote.AddrPort()), pid)
	}
	for _, fo := range s.FlowOwners {
		add(FlowOf(fo.Local, fo.Remote), fo.Pid)
	}
	out := make(map[Flow]int, len(tallies))
	for f, t := range tallies {
		out[f] = t.Top()
	}
	return out
}
