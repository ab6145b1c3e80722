// SPDX-License-Identifier: Apache-2.0

package bpfsource

// The loader of bpf/events.c and the stream of its ring buffer (Events).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// EventKind says what happened in an Event.
type EventKind uint8

// The kinds of Event (numbers as in bpf/events_shared.h).
const (
	// FailedConnect: a connect() ended before a connection; Reason is
	// the errno the kernel left (EADDRNOTAVAIL: no free ephemeral port,
	// ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH...) or Abandoned. Pid and
	// Comm are the caller's for EADDRNOTAVAIL and Abandoned; the others
	// end in softirq or timer context, with Pid 0.
	FailedConnect EventKind = 1
	// ResetSent: this host sent a RST; Reason names why.
	ResetSent EventKind = 2
	// ResetReceived: a connection was reset by its peer.
	ResetReceived EventKind = 3
	// ListenOverflow: a listener's accept queue was full when a
	// handshake's final ACK (or first data) arrived; Local is the
	// listener, Remote the client.
	ListenOverflow EventKind = 4
	// SynRetransmit: a SYN went unanswered and was sent again (the client
	// side of a full accept queue, a lost SYN or a dead peer).
	SynRetransmit EventKind = 5
)

var kindNames = [...]string{
	FailedConnect:  "failed-connect",
	ResetSent:      "reset-sent",
	ResetReceived:  "reset-received",
	ListenOverflow: "listen-overflow",
	SynRetransmit:  "syn-retransmit",
}

// String is the kind's stable name, as in --json output.
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind-%d", uint8(k))
}

// Event is one rare event, seen in the kernel as it happened.
type Event struct {
	// Time is when the kernel saw it (its monotonic clock mapped to wall
	// clock time when the stream started).
	Time time.Time
	Kind EventKind
	// Netns is the network namespace inode (0 when the kernel did not
	// tell: a packet without a device).
	Netns uint64
	// Pid and Comm are the process whose action caused the event; 0 and
	// "" when it happened in interrupt or timer context, where the task
	// on the CPU is unrelated (retransmits, received resets, overflows).
	Pid  int
	Comm string
	// Local and Remote are this host's end and the peer's. A socket
	// aborted by close() has already given its port back when it sends
	// its reset: Local's port is then 0.
	Local, Remote netip.AddrPort
	// Reason is the kernel's reason in its own words: the drop reason
	// (TCP_LISTEN_OVERFLOW), the reset reason sent (sk_rst_reason without
	// its prefix, e.g. TCP_ABORT_ON_LINGER), the errno of a failed
	// connect (EADDRNOTAVAIL, ECONNREFUSED...) or Abandoned; "" when the kernel gives none (received resets, SYN
	// retransmits).
	Reason string
}

// Abandoned is a failed connect's Reason when the process closed the
// socket before the handshake finished: no errno, its own choice.
const Abandoned = "abandoned"

// connectFailure names a failed connect's reason: the errno the kernel
// left on the socket (bpf/lifecycle.c), or Abandoned for none.
func connectFailure(errno uint32) string {
	if errno == 0 {
		return Abandoned
	}
	if n := unix.ErrnoName(syscall.Errno(errno)); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", errno)
}

// eventSize is sizeof(struct event) (bpf/events_shared.h).
const eventSize = 80

// fromProcess reports whether a reset sent for this reason comes from the
// process's own close(), shutdown() or disconnect, so the task on the CPU
// is the one that caused it. TCP_STATE is tcp_disconnect(): close() with
// SO_LINGER 0 (measured on 6.18) or connect(AF_UNSPEC).
func fromProcess(reason string) bool {
	switch reason {
	case "TCP_STATE", "TCP_ABORT_ON_CLOSE", "TCP_ABORT_ON_LINGER", "TCP_ABORT_ON_DATA", "TCP_DISCONNECT_WITH_DATA":
		return true
	}
	return false
}

// decoder turns ring records into Events.
type decoder struct {
	names *reasonNames
	// wall maps a CLOCK_MONOTONIC reading in ns to wall clock time.
	wall func(mono uint64) time.Time
}

// decode decodes one struct event. Records come from the kernel, but
// their shape is still checked: a short record or an unknown kind or
// family is an error, never a panic.
func (d *decoder) decode(b []byte) (Event, error) {
	if len(b) < eventSize {
		return Event{}, fmt.Errorf("bpfsource: event of %d bytes, want %d", len(b), eventSize)
	}
	ne := binary.NativeEndian
	kind := EventKind(b[70])
	if kind < FailedConnect || kind > SynRetransmit {
		return Event{}, fmt.Errorf("bpfsource: event of unknown kind %d", b[70])
	}
	e := Event{Time: d.wall(ne.Uint64(b[0:])), Kind: kind, Netns: uint64(ne.Uint32(b[8:]))}
	fam := ne.Uint16(b[68:])
	local, err := addrOf(fam, b[32:48])
	if err != nil {
		return Event{}, err
	}
	remote, _ := addrOf(fam, b[48:64]) // the same family: cannot fail
	e.Local = netip.AddrPortFrom(local, ne.Uint16(b[64:]))
	e.Remote = netip.AddrPortFrom(remote, ne.Uint16(b[66:]))
	reason := ne.Uint32(b[72:])
	pid, comm := int(ne.Uint32(b[12:])), cString(b[16:32])
	switch kind {
	case FailedConnect:
		e.Reason = connectFailure(reason)
		e.Pid, e.Comm = pid, comm
	case ResetSent:
		e.Reason = d.names.reset(reason)
		if fromProcess(e.Reason) {
			e.Pid, e.Comm = pid, comm
		}
	case ListenOverflow:
		e.Reason = d.names.drop(reason)
	}
	return e, nil
}

// eventsDeadline bounds how long a batched event waits in the ring: the
// kernel wakes the reader only once wakeup_bytes are pending, so the
// reader also looks this often.
const eventsDeadline = 100 * time.Millisecond

// Events streams the rare events (failed connects, resets, listen
// overflow drops, SYN retransmits) of every namespace as they happen, a
// few at a time: the kernel batches wakeups, so an event reaches the
// channel at most about 100 ms after it happened when the stream is quiet.
// The channel is closed when ctx is done or the Source is closed. One
// stream per Source; a second call while one runs is an error, as is a
// Source whose event programs did not load (see Missing). Events the
// kernel could not queue because the ring was full are counted in
// Reading.LostEvents; a slow receiver makes that happen.
func (s *Source) Events(ctx context.Context) (<-chan Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, errors.New("bpfsource: events: source closed")
	case s.reader != nil:
		return nil, errors.New("bpfsource: events: a stream is already running")
	case s.attached == 0 || s.shared.ring == nil:
		return nil, errors.New("bpfsource: events: no event program loaded")
	}
	rd, err := ringbuf.NewReader(s.shared.ring)
	if err != nil {
		return nil, fmt.Errorf("bpfsource: events: %w", err)
	}
	// The programs fill the ring only while a stream runs.
	if err := s.shared.stream.Put(uint32(0), uint32(1)); err != nil {
		_ = rd.Close()
		return nil, fmt.Errorf("bpfsource: events: %w", err)
	}
	s.reader = rd
	d := &decoder{names: &s.names, wall: s.wallClock()}
	ch := make(chan Event, 256)
	go func() {
		defer close(ch)
		defer s.stopReader(rd)
		var rec ringbuf.Record
		for ctx.Err() == nil {
			rd.SetDeadline(time.Now().Add(eventsDeadline))
			err := rd.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if err != nil {
				return // closed
			}
			e, err := d.decode(rec.RawSample)
			if err != nil {
				s.badEvents.Add(1)
				continue
			}
			select {
			case ch <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// stopReader ends a stream: closes its reader unless Close did.
func (s *Source) stopReader(rd *ringbuf.Reader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reader == rd {
		_ = s.shared.stream.Put(uint32(0), uint32(0))
		_ = rd.Close()
		s.reader = nil
	}
}

// wallClock maps the kernel's monotonic clock (bpf_ktime_get_ns) to wall
// clock time, anchored now.
func (s *Source) wallClock() func(uint64) time.Time {
	var ts unix.Timespec
	wall := s.now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// Cannot happen on Linux; without it the events get the reader's
		// time instead, which is late by at most the batching deadline.
		return func(uint64) time.Time { return s.now() }
	}
	mono := uint64(ts.Nano())
	return func(ns uint64) time.Time { return wall.Add(time.Duration(int64(ns - mono))) }
}

// reasonNames are the kernel's names for drop and reset reasons, read
// from its BTF (the numbers differ between kernels).
type reasonNames struct {
	drops, resets map[uint32]string
}

func (n *reasonNames) drop(r uint32) string {
	if s, ok := n.drops[r]; ok {
		return s
	}
	return fmt.Sprintf("reason %d", r)
}

func (n *reasonNames) reset(r uint32) string {
	if s, ok := n.resets[r]; ok {
		return s
	}
	return fmt.Sprintf("reason %d", r)
}

// dropValue returns the number of the drop reason named name, if present.
func (n *reasonNames) dropValue(name string) (uint32, bool) {
	for v, s := range n.drops {
		if s == name {
			return v, true
		}
	}
	return 0, false
}

// sharedMaps are created once and handed to every program: the ring of
// events, the lost counters and the counting maps of events.c.
type sharedMaps struct {
	ring, lost, stream, drops, retrans, resets *ebpf.Map
}

func (m *sharedMaps) close() error {
	var errs []error
	for _, mp := range []*ebpf.Map{m.ring, m.lost, m.stream, m.drops, m.retrans, m.resets} {
		if mp != nil {
			errs = append(errs, mp.Close())
		}
	}
	return errors.Join(errs...)
}

func newSharedMaps(spec *ebpf.CollectionSpec) (sharedMaps, error) {
	var m sharedMaps
	for _, x := range []struct {
		name string
		dst  **ebpf.Map
	}{{eventsMapEvents, &m.ring}, {eventsMapEvLost, &m.lost}, {eventsMapEvStream, &m.stream},
		{eventsMapDrops, &m.drops}, {eventsMapRetrans, &m.retrans}, {eventsMapResets, &m.resets}} {
		mp, err := ebpf.NewMap(spec.Maps[x.name])
		if err != nil {
			_ = m.close()
			return sharedMaps{}, loadError(fmt.Errorf("create map %s: %w", x.name, err))
		}
		*x.dst = mp
	}
	return m, nil
}

func (m *sharedMaps) replacements() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		eventsMapEvents: m.ring, eventsMapEvLost: m.lost, eventsMapEvStream: m.stream,
		eventsMapDrops: m.drops, eventsMapRetrans: m.retrans, eventsMapResets: m.resets,
	}
}

// eventProgram is one program of events.c and how to check that the
// kernel's tracepoint matches what it reads.
type eventProgram struct {
	prog, tracepoint string
	// check inspects the tracepoint's parameters (context first) and
	// sets the program's variables in spec.
	check func(params []btf.FuncParam, spec *ebpf.CollectionSpec, names *reasonNames) error
}

// eventPrograms lists the programs of events.c in load order.
func eventPrograms() []eventProgram {
	return []eventProgram{
		{eventsProgDrop, "kfree_skb", checkDrop},
		{eventsProgRetransmit, "tcp_retransmit_skb", checkSockFirst},
		{eventsProgResetSent, "tcp_send_reset", checkSendReset},
		{eventsProgResetReceived, "tcp_receive_reset", checkSockFirst},
	}
}

// checkDrop wants (ctx, skb, location, reason[, rx_sk]): the reason came
// in 5.17 and rx_sk (the listener of TCP_LISTEN_OVERFLOW) in 6.11.
func checkDrop(params []btf.FuncParam, spec *ebpf.CollectionSpec, names *reasonNames) error {
	if len(params) < 4 || !isEnum(params[3].Type, "skb_drop_reason") {
		return notSupported("kfree_skb has no drop reason argument (Linux 5.17 added it)")
	}
	if names.drops == nil {
		return notSupported("kernel BTF has no enum skb_drop_reason")
	}
	set := func(v string, x uint32) error { return spec.Variables[v].Set(x) }
	if len(params) >= 5 {
		if err := set(eventsVarDropHasRxSk, 1); err != nil {
			return err
		}
	}
	// The loader compares against the kernel's own numbers; a name this
	// kernel lacks gets a number no reason has.
	for v, name := range map[string]string{
		eventsVarDropListenOverflow: "TCP_LISTEN_OVERFLOW",
		eventsVarDropSkipA:          "NOT_SPECIFIED", // also every kfree_skb() without a reason
		eventsVarDropSkipB:          "QUEUE_PURGE",   // every normal close frees its queues
		eventsVarDropSkipBelow:      "NOT_SPECIFIED", // NOT_DROPPED_YET and CONSUMED are below
	} {
		n, ok := names.dropValue(name)
		if !ok {
			n = 1<<32 - 1
			if v == eventsVarDropSkipBelow {
				n = 0
			}
		}
		if err := set(v, n); err != nil {
			return err
		}
	}
	return nil
}

func checkSockFirst(params []btf.FuncParam, _ *ebpf.CollectionSpec, _ *reasonNames) error {
	if len(params) < 2 {
		return notSupported("tracepoint has no socket argument")
	}
	if !isSockPtr(params[1].Type) {
		return notSupported("argument 1 is %v, not a pointer to struct sock", params[1].Type)
	}
	return nil
}

// checkSendReset wants (ctx, sk, skb, reason): the reason came in 6.10.
func checkSendReset(params []btf.FuncParam, spec *ebpf.CollectionSpec, names *reasonNames) error {
	if err := checkSockFirst(params, spec, names); err != nil {
		return err
	}
	if len(params) < 4 || !isEnum(params[3].Type, "sk_rst_reason") {
		return notSupported("tcp_send_reset has no reason argument (Linux 6.10 added it)")
	}
	if names.resets == nil {
		return notSupported("kernel BTF has no enum sk_rst_reason")
	}
	return nil
}

// openEventProgram loads one program of events.c alone (the others not
// even in its collection) against the shared maps, and attaches it. It
// works on a copy of espec, the parsed events.c, which it leaves as is.
func (s *Source) openEventProgram(ksp *btf.Spec, espec *ebpf.CollectionSpec, ep eventProgram) error {
	params, err := tracepointParams(ksp, ep.tracepoint)
	if err != nil {
		return err
	}
	spec := espec.Copy()
	if err := spec.Variables[eventsVarWakeupBytes].Set(uint64(wakeupBytes)); err != nil {
		return fmt.Errorf("bpfsource: %w", err)
	}
	if err := ep.check(params, spec, &s.names); err != nil {
		return err
	}
	for name := range spec.Programs {
		if name != ep.prog {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: s.shared.replacements(), Cache: s.cache})
	if err != nil {
		return loadError(err)
	}
	prog := coll.DetachProgram(ep.prog)
	coll.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		_ = prog.Close()
		return loadError(fmt.Errorf("attach tp_btf/%s: %w", ep.tracepoint, err))
	}
	s.progs = append(s.progs, prog)
	s.progNames = append(s.progNames, ep.tracepoint)
	s.links = append(s.links, l)
	return nil
}

// wakeupBytes is how much waits in the ring before the kernel wakes the
// reader (BPF_RB_NO_WAKEUP below it).
const wakeupBytes = 64 << 10
