// SPDX-License-Identifier: Apache-2.0

package bpfsource

// The loader and reader of bpf/lifecycle.c (tp_btf/inet_sock_set_state).

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// Flow is what one process did towards one peer in one namespace over a
// reading's interval.
type Flow struct {
	Pid  int
	Comm string
	// Peer is the connected-to address; for connections the process
	// accepted rather than opened it is the unspecified address with port
	// 0 and LocalPort is the port they were accepted on.
	Peer      netip.AddrPort
	LocalPort uint16
	// Opens counts connect() calls (CLOSE->SYN_SENT), failed ones included.
	Opens uint64
	// FailedPorts counts connect() calls that found no free ephemeral
	// port (EADDRNOTAVAIL).
	FailedPorts uint64
	// Refused, TimedOut and Unreachable count connects the network ended
	// before a connection: a reset answered the SYN (ECONNREFUSED), the
	// SYN retransmits went unanswered (ETIMEDOUT), an ICMP error or any
	// other error (EHOSTUNREACH, ENETUNREACH...). The kernel ends them in
	// softirq or timer context: Pid is 0 unless Options.Lifetimes kept
	// the opener. Abandoned counts connects the process closed before
	// the handshake finished (its own connect timeout), under its pid;
	// also a reset or ICMP error that a reader of SO_ERROR took in the
	// moment before the kernel closed the socket (a timeout taken that
	// way still counts in TimedOut: bpf/lifecycle.c).
	Refused, TimedOut, Unreachable, Abandoned uint64
	// ActiveCloses counts connections this process closed before its peer
	// did (ESTABLISHED->FIN_WAIT1): it holds their TIME_WAIT.
	ActiveCloses uint64
	// PeerCloses counts connections it opened that the peer closed first
	// (with Options.Lifetimes).
	PeerCloses uint64
	// Lifetimes counts connections it opened that ended in the interval;
	// LifetimeTotal is the sum of their lives, connect() to close (with
	// Options.Lifetimes).
	Lifetimes     uint64
	LifetimeTotal time.Duration
}

// openLifecycle loads and attaches lifecycle.c.
func (s *Source) openLifecycle(ksp *btf.Spec, opts Options) error {
	params, err := tracepointParams(ksp, "inet_sock_set_state")
	if err != nil {
		return err
	}
	if err := checkPrototype(params); err != nil {
		return err
	}
	spec, err := loadLifecycle()
	if err != nil {
		return fmt.Errorf("bpfsource: %w", err)
	}
	if opts.Lifetimes {
		if err := spec.Variables[lifecycleVarTrackLifetimes].Set(uint32(1)); err != nil {
			return fmt.Errorf("bpfsource: %w", err)
		}
	}
	if err := spec.Variables[lifecycleVarWakeupBytes].Set(uint64(wakeupBytes)); err != nil {
		return fmt.Errorf("bpfsource: %w", err)
	}
	// The verifier drops the branch the flag rules out, so a kernel
	// without the helper (before 5.11) never sees its call.
	if !opts.helperComm && hasEnumValue(ksp, "bpf_func_id", "BPF_FUNC_get_current_task_btf") {
		if err := spec.Variables[lifecycleVarTaskBtf].Set(uint32(1)); err != nil {
			return fmt.Errorf("bpfsource: %w", err)
		}
	}
	var objs lifecycleObjects
	repl := map[string]*ebpf.Map{lifecycleMapEvents: s.shared.ring, lifecycleMapEvLost: s.shared.lost, lifecycleMapEvStream: s.shared.stream}
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: repl, Cache: s.cache}); err != nil {
		return loadError(err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.Lifecycle, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		_ = objs.Close()
		return loadError(fmt.Errorf("attach tp_btf/inet_sock_set_state: %w", err))
	}
	s.life, s.lifeLink = &objs, l
	return nil
}

// checkPrototype wants (ctx, const struct sock *, int, int): the
// program reads its arguments by position.
func checkPrototype(params []btf.FuncParam) error {
	if len(params) != 4 {
		return notSupported("inet_sock_set_state: unexpected tracepoint prototype with %d parameters (want ctx, sock, oldstate, newstate)", len(params))
	}
	if !isSockPtr(params[1].Type) {
		return notSupported("inet_sock_set_state: argument 1 is %v, not a pointer to struct sock", params[1].Type)
	}
	for _, p := range params[2:] {
		if _, ok := btf.UnderlyingType(p.Type).(*btf.Int); !ok {
			return notSupported("inet_sock_set_state: state argument is %v, not an int", p.Type)
		}
	}
	return nil
}

// maxFlows is the flows map's size (bpf/lifecycle.c).
const maxFlows = 16384

// readFlows adds the flows and lost counts of lifecycle.c to r and
// empties its map; nothing when it is not running.
func (s *Source) readFlows(r *Reading) error {
	if s.life == nil {
		return nil
	}
	err := drain(s.life.Flows, flowKeySize, maxFlows, func(key []byte, val [flowCountsSize]byte) error {
		ns, f, err := decodeFlow(key, val[:])
		if err == nil {
			r.ByNetns[ns] = append(r.ByNetns[ns], f)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bpfsource: read flows: %w", err)
	}
	for i := range s.overflow {
		var n uint64
		if err := s.life.Overflow.Lookup(uint32(i), &n); err != nil {
			return fmt.Errorf("bpfsource: read overflow: %w", err)
		}
		d := n - s.overflow[i]
		s.overflow[i] = n
		if i == 0 {
			r.LostFlows = d
		} else {
			r.LostConns = d
		}
	}
	return nil
}

// Sizes of struct flow_key and struct flow_counts (bpf/lifecycle.c).
const (
	flowKeySize    = 32
	flowCountsSize = 96
)

// decodeFlow turns one raw map entry into its namespace inode and Flow.
func decodeFlow(key, val []byte) (uint64, Flow, error) {
	if len(key) != flowKeySize || len(val) != flowCountsSize {
		return 0, Flow{}, fmt.Errorf("bpfsource: flow entry of %d+%d bytes, want %d+%d", len(key), len(val), flowKeySize, flowCountsSize)
	}
	ne := binary.NativeEndian
	ns := uint64(ne.Uint32(key[0:4]))
	f := Flow{Pid: int(ne.Uint32(key[4:8])), Comm: cString(val[80:96])}
	a, err := addrOf(ne.Uint16(key[28:30]), key[8:24])
	if err != nil {
		return 0, Flow{}, err
	}
	f.Peer = netip.AddrPortFrom(a, ne.Uint16(key[24:26]))
	f.LocalPort = ne.Uint16(key[26:28])
	f.Opens = ne.Uint64(val[0:])
	f.FailedPorts = ne.Uint64(val[8:])
	f.ActiveCloses = ne.Uint64(val[16:])
	f.PeerCloses = ne.Uint64(val[24:])
	f.LifetimeTotal = time.Duration(min(ne.Uint64(val[32:]), 1<<63-1))
	f.Lifetimes = ne.Uint64(val[40:])
	f.Refused = ne.Uint64(val[48:])
	f.TimedOut = ne.Uint64(val[56:])
	f.Unreachable = ne.Uint64(val[64:])
	f.Abandoned = ne.Uint64(val[72:])
	return ns, f, nil
}
