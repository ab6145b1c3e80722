// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Events is what the eBPF source (internal/bpfsource) counted in this
// namespace between Since and Until: the interval since its previous read,
// which for every snapshot after the first is the time since the previous
// snapshot. Flows, Drops, Resets and Retransmits hold only what had
// events; a program listed in Missing did not run, so what it counts is
// unknown rather than zero.
type Events struct {
	Since time.Time   `json:"since"`
	Until time.Time   `json:"until"`
	Flows []EventFlow `json:"flows,omitempty"`
	// Drops are packets the kernel dropped, by reason (kfree_skb).
	Drops []EventDrop `json:"drops,omitempty"`
	// Resets are resets sent and received, by reason and peer.
	Resets []EventReset `json:"resets,omitempty"`
	// Retransmits are retransmitted segments by peer, SYNs apart.
	Retransmits []EventRetransmit `json:"retransmits,omitempty"`
	// Lost counts events (any namespace) not counted because a kernel map
	// was full: the counts are then lower bounds.
	Lost uint64 `json:"lost,omitempty"`
	// Skipped lists the programs whose runs the kernel skipped (any
	// namespace) because the program was already running on that CPU
	// when an interrupt brought another event: their counts are then
	// lower bounds too.
	Skipped []EventProgramSkipped `json:"skipped,omitempty"`
	// Missing lists the programs that did not run, and why.
	Missing []EventProgram `json:"missing,omitempty"`
}

// Has reports whether the program attached at the tracepoint prog ran
// (the section exists and does not list it as missing).
func (e *Events) Has(prog string) bool {
	if e == nil {
		return false
	}
	for _, m := range e.Missing {
		if m.Program == prog {
			return false
		}
	}
	return true
}

// The tracepoints of the eBPF programs, as EventProgram.Program names them.
const (
	ProgLifecycle      = "inet_sock_set_state"
	ProgDrops          = "kfree_skb"
	ProgRetransmits    = "tcp_retransmit_skb"
	ProgResetsSent     = "tcp_send_reset"
	ProgResetsReceived = "tcp_receive_reset"
)

// EventProgramSkipped is the runs the kernel skipped of the program at
// one tracepoint.
type EventProgramSkipped struct {
	Program string `json:"program"`
	Runs    uint64 `json:"runs"`
}

// Incomplete says what the counters missed in any namespace (the
// sources are read once for the host), "" when nothing.
func (e *Events) Incomplete() string {
	var parts []string
	if e.Lost > 0 {
		parts = append(parts, fmt.Sprintf("%d %s found a kernel map full", e.Lost, plural(e.Lost, "event", "events")))
	}
	for _, s := range e.Skipped {
		parts = append(parts, fmt.Sprintf("the kernel skipped %d %s of the program on %s (it was running on that CPU when an interrupt brought another event)", s.Runs, plural(s.Runs, "run", "runs"), s.Program))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + ": the event counts (connects, failures, drops, resets, retransmits) are lower bounds"
}

// EventProgram names an eBPF program that did not run and why.
type EventProgram struct {
	Program string `json:"program"`
	Reason  string `json:"reason"`
}

// EventDrop is packets dropped for one reason.
type EventDrop struct {
	// Reason is the kernel's skb_drop_reason without its prefix, e.g.
	// TCP_LISTEN_OVERFLOW, NO_SOCKET.
	Reason string `json:"reason"`
	// Listener is the listening socket for TCP_LISTEN_OVERFLOW (each drop
	// a handshake that found its accept queue full); absent otherwise.
	Listener netip.AddrPort `json:"listener,omitzero"`
	Count    uint64         `json:"count"`
}

// EventReset is resets with one peer for one reason.
type EventReset struct {
	// Sent is true for resets this namespace sent, false for received.
	Sent bool `json:"sent"`
	// Reason is the kernel's sk_rst_reason without its prefix for sent
	// resets (TCP_STATE is close() with SO_LINGER 0, NO_SOCKET a packet
	// for no socket); "" for received ones.
	Reason string `json:"reason,omitempty"`
	// Remote is the peer. For connections this host accepted its port is
	// 0 and LocalPort is the port they came in on; for connections it
	// opened LocalPort is 0.
	Remote    netip.AddrPort `json:"remote"`
	LocalPort uint16         `json:"local_port,omitempty"`
	Count     uint64         `json:"count"`
}

// EventRetransmit is segments retransmitted to one peer.
type EventRetransmit struct {
	// Remote and LocalPort as in EventReset.
	Remote    netip.AddrPort `json:"remote"`
	LocalPort uint16         `json:"local_port,omitempty"`
	// SYN: SYNs retransmitted because nobody answered (SYN_SENT): the
	// client side of a full accept queue, a lost SYN or a dead peer.
	SYN   bool   `json:"syn,omitempty"`
	Count uint64 `json:"count"`
}

// Interval is Until - Since.
func (e *Events) Interval() time.Duration { return e.Until.Sub(e.Since) }

// Failure is one cause of the connect() calls a flow saw fail.
type Failure struct {
	// Errno is how metrics label it: EADDRNOTAVAIL, ECONNREFUSED,
	// ETIMEDOUT, unreachable (EHOSTUNREACH, ENETUNREACH or another error)
	// or abandoned (no errno: the process gave up).
	Errno string
	// Word is how a table says it ("no port", "refused"...).
	Word string
	N    uint64
}

// Failures is f's failed connects by cause, always in this order.
func (f *EventFlow) Failures() [5]Failure {
	return [5]Failure{
		{"EADDRNOTAVAIL", "no port", f.FailedPorts},
		{"ECONNREFUSED", "refused", f.Refused},
		{"ETIMEDOUT", "timed out", f.TimedOut},
		{"unreachable", "unreachable", f.Unreachable},
		{"abandoned", "abandoned", f.Abandoned},
	}
}

// Unanswered is f's connects that sent their SYN and never became a
// connection: refused, timed out, unreachable or abandoned.
func (f *EventFlow) Unanswered() uint64 {
	return f.Refused + f.TimedOut + f.Unreachable + f.Abandoned
}

// AddFailures adds g's failed connects to f's.
func (f *EventFlow) AddFailures(g *EventFlow) {
	f.FailedPorts += g.FailedPorts
	f.Refused += g.Refused
	f.TimedOut += g.TimedOut
	f.Unreachable += g.Unreachable
	f.Abandoned += g.Abandoned
}

// Accepted reports whether the flow counts connections the process
// accepted on LocalPort rather than opened.
func (f *EventFlow) Accepted() bool { return f.LocalPort != 0 && f.Remote.Port() == 0 }

// EventFlow is one process's connection events towards one peer (or on
// one local port, for connections it accepted).
type EventFlow struct {
	Pid     int    `json:"pid"`
	Command string `json:"command"`
	// Remote is the peer the process connected to. For connections it
	// accepted, Remote is unspecified (0.0.0.0:0) and LocalPort is the
	// port they were accepted on: one entry however many clients.
	Remote    netip.AddrPort `json:"remote"`
	LocalPort uint16         `json:"local_port,omitempty"`
	// Opens counts connect() calls, failed ones included.
	Opens uint64 `json:"opens,omitempty"`
	// FailedPorts counts connect() calls that failed for want of a free
	// ephemeral port (EADDRNOTAVAIL).
	FailedPorts uint64 `json:"failed_ports,omitempty"`
	// Refused, TimedOut and Unreachable count connect() calls the network
	// ended: a reset answered the SYN (ECONNREFUSED: nothing listens
	// there), no answer to the SYN retransmits (ETIMEDOUT: the peer or
	// its path is down, or drops SYNs), an ICMP or other error
	// (EHOSTUNREACH, ENETUNREACH...). Abandoned counts those the process
	// closed before the handshake finished (its own connect timeout).
	// Pid is 0 for the first three when the opener is unknown.
	Refused     uint64 `json:"refused,omitempty"`
	TimedOut    uint64 `json:"timed_out,omitempty"`
	Unreachable uint64 `json:"unreachable,omitempty"`
	Abandoned   uint64 `json:"abandoned,omitempty"`
	// ActiveCloses counts connections the process closed first (it holds
	// their TIME_WAIT); PeerCloses those it opened that the peer closed
	// first.
	ActiveCloses uint64 `json:"active_closes,omitempty"`
	PeerCloses   uint64 `json:"peer_closes,omitempty"`
	// Ended counts connections it opened that ended in the interval and
	// Lifetime their summed lives, connect() to close.
	Ended    uint64        `json:"ended,omitempty"`
	Lifetime time.Duration `json:"lifetime_ns,omitempty"`
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
