package snapshot

import (
	"net/netip"
	"time"
)

// Events is what the eBPF lifecycle source (internal/bpfsource) counted in
// this namespace between Since and Until: the interval since its previous
// read, which for every snapshot after the first is the time since the
// previous snapshot. Flows hold only processes and peers that had events.
type Events struct {
	Since time.Time   `json:"since"`
	Until time.Time   `json:"until"`
	Flows []EventFlow `json:"flows,omitempty"`
	// Lost counts events (any namespace) not counted because the kernel
	// map was full: the counts are then lower bounds.
	Lost uint64 `json:"lost,omitempty"`
}

// Interval is Until - Since.
func (e *Events) Interval() time.Duration { return e.Until.Sub(e.Since) }

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
