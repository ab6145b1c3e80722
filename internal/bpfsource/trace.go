// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// TraceKind is what a TraceEvent reports.
type TraceKind uint8

// The kinds of trace.c.
const (
	TraceRetransmit    TraceKind = 1 // a segment retransmitted
	TraceRcvSpace      TraceKind = 2 // receive autotuning stepped the buffer or window clamp
	TraceResetSent     TraceKind = 3
	TraceResetReceived TraceKind = 4
)

var traceKindNames = [...]string{TraceRetransmit: "retransmit", TraceRcvSpace: "rcv_space",
	TraceResetSent: "reset_sent", TraceResetReceived: "reset_received"}

func (k TraceKind) String() string {
	if k >= TraceRetransmit && k <= TraceResetReceived {
		return traceKindNames[k]
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// ParseTraceKind is String's inverse.
func ParseTraceKind(s string) (TraceKind, error) {
	for k := TraceRetransmit; k <= TraceResetReceived; k++ {
		if traceKindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("bpfsource: unknown trace event kind %q", s)
}

// TraceEvent is one event of a watched socket, timed by the kernel.
type TraceEvent struct {
	// Mono is the kernel's CLOCK_MONOTONIC at the event (MonoNow's clock).
	Mono   time.Duration
	Cookie uint64
	Kind   TraceKind
	// Reason names a sent reset's sk_rst_reason (from the kernel's BTF).
	Reason string
	// Rcvbuf and Clamp are sk_rcvbuf and the window clamp at the event
	// (for TraceRcvSpace: after the step).
	Rcvbuf, Clamp uint32
}

// traceEventSize is sizeof(struct trace_event).
const traceEventSize = 32

// decodeTraceEvent decodes one struct trace_event; a short record or an
// unknown kind is an error, never a panic.
func decodeTraceEvent(b []byte, resets map[uint32]string) (TraceEvent, error) {
	if len(b) < traceEventSize {
		return TraceEvent{}, fmt.Errorf("bpfsource: trace event of %d bytes, want %d", len(b), traceEventSize)
	}
	ne := binary.NativeEndian
	k := TraceKind(ne.Uint32(b[16:]))
	if ne.Uint32(b[16:]) > uint32(TraceResetReceived) || k < TraceRetransmit {
		return TraceEvent{}, fmt.Errorf("bpfsource: trace event of unknown kind %d", ne.Uint32(b[16:]))
	}
	mono := ne.Uint64(b[0:])
	if mono > 1<<62 {
		return TraceEvent{}, fmt.Errorf("bpfsource: trace event time %d out of range", mono)
	}
	e := TraceEvent{Mono: time.Duration(mono), Cookie: ne.Uint64(b[8:]), Kind: k, Rcvbuf: ne.Uint32(b[24:]), Clamp: ne.Uint32(b[28:])}
	if k == TraceResetSent {
		names := reasonNames{resets: resets}
		e.Reason = names.reset(ne.Uint32(b[20:]))
	}
	return e, nil
}

// MonoNow reads CLOCK_MONOTONIC, the clock of TraceEvent.Mono.
func MonoNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail on Linux
	return time.Duration(ts.Nano())
}

// TraceOptions configure OpenTrace.
type TraceOptions struct {
	// Netns is the inode of the traced network namespace: Established
	// counts its sockets only.
	Netns uint64
	// Ports, when not empty, restricts Established to sockets with one of
	// these ports at either end.
	Ports []uint16
	// Kernel is the kernel BTF shared with the command's other loads;
	// nil parses it for this tracer alone.
	Kernel *Kernel
}

// Tracer is trace.c loaded: events of the watched sockets and the count
// of sockets established in the traced namespace. Not safe for
// concurrent use.
type Tracer struct {
	objs    traceprogObjects
	links   []link.Link
	reader  *ringbuf.Reader
	rec     ringbuf.Record
	resets  map[uint32]string
	missing []Missing
	state   bool // inet_sock_set_state attached: Established counts
	// The activity counters, mapped: each watched socket has a slot;
	// seen is the count at the last Moved. mem is nil when the hooks
	// that make a quiet socket's counter move are not all running.
	mem *ebpf.Memory
	// counts is trace_counts mapped (nil: read by lookup): Established
	// is read every tick, and a lookup is a system call.
	counts *ebpf.Memory
	slotOf map[uint64]uint32
	free   []uint32
	next   uint32
	seen   []uint64
}

// maxWatched is trace.c's MAX_WATCHED.
const maxWatched = 65536

// OpenTrace loads trace.c and attaches each of its programs the kernel
// accepts (Missing lists the others). It fails, wrapping ErrNotSupported,
// when BPF cannot run here or no event program attaches.
func OpenTrace(o TraceOptions) (*Tracer, error) {
	if !privileged() {
		return nil, notSupported(needRoot)
	}
	// One parse of the kernel's BTF for every program's load.
	kernel := o.Kernel.orNew()
	ksp, err := kernel.spec()
	if err != nil {
		return nil, err
	}
	if len(o.Ports) > 256 {
		return nil, fmt.Errorf("bpfsource: trace: %d ports, at most 256", len(o.Ports))
	}
	spec, err := loadTraceprog()
	if err != nil {
		return nil, fmt.Errorf("bpfsource: %w", err)
	}
	set := func(name string, v any) error {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("bpfsource: trace: %w", err)
		}
		return nil
	}
	if err := errors.Join(set(traceprogVarTracedNetns, uint32(o.Netns)), set(traceprogVarAnyPort, boolU32(len(o.Ports) == 0))); err != nil {
		return nil, err
	}
	// Each program on its own: a kernel that refuses one runs the rest.
	progs := spec.Programs
	spec.Programs = nil
	t := &Tracer{resets: enumNames(ksp, "sk_rst_reason", "SK_RST_REASON_"), slotOf: map[uint64]uint32{}}
	if err := spec.LoadAndAssign(&t.objs.traceprogMaps, nil); err != nil {
		return nil, loadError(err)
	}
	// Every program shares these maps; each gets its own copy of the
	// constants (.rodata).
	repl := map[string]*ebpf.Map{}
	for _, name := range []string{traceprogMapPorts, traceprogMapTraceCounts, traceprogMapTraceEvents, traceprogMapWatched, traceprogMapActivity} {
		repl[name] = t.mapByName(name)
	}
	events := 0
	marks := map[string]bool{}
	for name, ps := range progs {
		tp := ps.AttachTo
		one := spec.Copy()
		one.Programs = map[string]*ebpf.ProgramSpec{name: ps}
		coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: repl, Cache: kernel.types()})
		if err != nil {
			t.missing = append(t.missing, Missing{Program: tp, Reason: reason(loadError(err))})
			continue
		}
		prog := coll.Programs[name]
		delete(coll.Programs, name)
		coll.Close()
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			prog.Close()
			t.missing = append(t.missing, Missing{Program: tp, Reason: reason(loadError(fmt.Errorf("attach tp_btf/%s: %w", tp, err)))})
			continue
		}
		t.links = append(t.links, l)
		t.setProgram(name, prog)
		switch tp {
		case "inet_sock_set_state":
			t.state = true
			marks[tp] = true
		case "tcp_sendmsg_locked", "tcp_rcv_space_adjust", "sk_data_ready":
			marks[tp] = true
		default:
			events++
		}
		if tp == "tcp_rcv_space_adjust" {
			events++
		}
	}
	if events == 0 {
		_ = t.Close()
		reasons := make([]string, len(t.missing))
		for i, m := range t.missing {
			reasons[i] = m.String()
		}
		return nil, notSupported("no trace event program loaded: %s", strings.Join(reasons, "; "))
	}
	for _, p := range o.Ports {
		if err := t.objs.Ports.Put(p, uint8(1)); err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("bpfsource: trace: port %d: %w", p, err)
		}
	}
	// A quiet socket moves by a write, data or a FIN arriving, a read or
	// a state change: with these four hooks a counter that stands still
	// means nothing happened on it.
	if marks["tcp_sendmsg_locked"] && marks["sk_data_ready"] && marks["tcp_rcv_space_adjust"] && marks["inet_sock_set_state"] {
		if t.mem, err = t.objs.Activity.Memory(); err != nil {
			t.missing = append(t.missing, Missing{Program: "activity map", Reason: "cannot map it: " + err.Error()})
			t.mem = nil
		}
	}
	if m, err := t.objs.TraceCounts.Memory(); err == nil {
		t.counts = m
	}
	if t.reader, err = ringbuf.NewReader(t.objs.TraceEvents); err != nil {
		_ = t.Close()
		return nil, fmt.Errorf("bpfsource: trace: ring buffer reader: %w", err)
	}
	return t, nil
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func reason(err error) string {
	var ns *NotSupportedError
	if errors.As(err, &ns) {
		return ns.Reason
	}
	return err.Error()
}

func (t *Tracer) mapByName(name string) *ebpf.Map {
	switch name {
	case traceprogMapPorts:
		return t.objs.Ports
	case traceprogMapTraceCounts:
		return t.objs.TraceCounts
	case traceprogMapTraceEvents:
		return t.objs.TraceEvents
	case traceprogMapWatched:
		return t.objs.Watched
	case traceprogMapActivity:
		return t.objs.Activity
	}
	return nil
}

func (t *Tracer) setProgram(name string, p *ebpf.Program) {
	switch name {
	case "trace_retransmit":
		t.objs.TraceRetransmit = p
	case "trace_rcv_space":
		t.objs.TraceRcvSpace = p
	case "trace_reset_sent":
		t.objs.TraceResetSent = p
	case "trace_reset_received":
		t.objs.TraceResetReceived = p
	case "trace_state":
		t.objs.TraceState = p
	case "trace_data_ready":
		t.objs.TraceDataReady = p
	case "trace_send":
		t.objs.TraceSend = p
	default:
		p.Close()
	}
}

// programs lists the attached programs by name.
func (t *Tracer) programs() map[string]*ebpf.Program {
	m := map[string]*ebpf.Program{}
	for name, p := range map[string]*ebpf.Program{"trace_retransmit": t.objs.TraceRetransmit, "trace_rcv_space": t.objs.TraceRcvSpace,
		"trace_reset_sent": t.objs.TraceResetSent, "trace_reset_received": t.objs.TraceResetReceived, "trace_state": t.objs.TraceState,
		"trace_send": t.objs.TraceSend, "trace_data_ready": t.objs.TraceDataReady} {
		if p != nil {
			m[name] = p
		}
	}
	return m
}

// Missing lists the programs that did not load or attach, and why.
func (t *Tracer) Missing() []Missing { return append([]Missing(nil), t.missing...) }

// Watch makes the socket with this cookie emit events and count its
// activity.
func (t *Tracer) Watch(cookie uint64) error {
	if _, ok := t.slotOf[cookie]; ok {
		return nil
	}
	var slot uint32
	switch {
	case len(t.free) > 0:
		slot, t.free = t.free[len(t.free)-1], t.free[:len(t.free)-1]
	case t.next < maxWatched:
		slot = t.next
		t.next++
		t.seen = append(t.seen, 0)
	default:
		return fmt.Errorf("bpfsource: watch cookie %d: %d sockets watched already", cookie, maxWatched)
	}
	t.seen[slot] = t.counter(slot)
	if err := t.objs.Watched.Update(cookie, traceprogWatchedVal{Slot: slot}, ebpf.UpdateNoExist); err != nil {
		t.free = append(t.free, slot)
		return fmt.Errorf("bpfsource: watch cookie %d: %w", cookie, err)
	}
	t.slotOf[cookie] = slot
	return nil
}

// Unwatch stops the socket's events.
func (t *Tracer) Unwatch(cookie uint64) error {
	slot, ok := t.slotOf[cookie]
	if !ok {
		return nil
	}
	delete(t.slotOf, cookie)
	t.free = append(t.free, slot)
	if err := t.objs.Watched.Delete(cookie); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("bpfsource: unwatch cookie %d: %w", cookie, err)
	}
	return nil
}

// counter reads a slot's activity count from the mapped array (0
// without it).
func (t *Tracer) counter(slot uint32) uint64 {
	if t.mem == nil {
		return 0
	}
	var b [8]byte
	if _, err := t.mem.ReadAt(b[:], int64(slot)*8); err != nil {
		return 0
	}
	return binary.NativeEndian.Uint64(b[:])
}

// Moved reports whether the application wrote to or read from the
// watched socket, data or a FIN arrived, or it changed state, since the
// last call for it (or since Watch). ok is false
// when that cannot be told (the hooks are not all running, or the cookie
// is not watched): read the socket then.
func (t *Tracer) Moved(cookie uint64) (moved, ok bool) {
	slot, watched := t.slotOf[cookie]
	if t.mem == nil || !watched {
		return false, false
	}
	n := t.counter(slot)
	moved = n != t.seen[slot]
	t.seen[slot] = n
	return moved, true
}

// Established is how many sockets of the traced namespace (with one of
// the ports) entered ESTABLISHED since OpenTrace; ok is false when that
// program is not running.
func (t *Tracer) Established() (n uint64, ok bool, err error) {
	if !t.state {
		return 0, false, nil
	}
	return t.count(0)
}

// Lost is how many events the ring buffer could not take.
func (t *Tracer) Lost() (uint64, error) {
	n, _, err := t.count(1)
	return n, err
}

func (t *Tracer) count(i uint32) (uint64, bool, error) {
	if t.counts != nil {
		var b [8]byte
		if _, err := t.counts.ReadAt(b[:], int64(i)*8); err != nil {
			return 0, false, fmt.Errorf("bpfsource: trace counts: %w", err)
		}
		return binary.NativeEndian.Uint64(b[:]), true, nil
	}
	var n uint64
	if err := t.objs.TraceCounts.Lookup(i, &n); err != nil {
		return 0, false, fmt.Errorf("bpfsource: trace counts: %w", err)
	}
	return n, true, nil
}

// Drain hands fn every event waiting in the ring buffer, without
// blocking. A malformed record is an error.
func (t *Tracer) Drain(fn func(TraceEvent)) error {
	if t.reader.AvailableBytes() == 0 {
		return nil
	}
	t.reader.SetDeadline(time.Unix(1, 0)) // passed: read what is there
	for {
		err := t.reader.ReadInto(&t.rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bpfsource: trace events: %w", err)
		}
		e, err := decodeTraceEvent(t.rec.RawSample, t.resets)
		if err != nil {
			return err
		}
		fn(e)
	}
}

// Close detaches the programs and frees the maps.
func (t *Tracer) Close() error {
	var errs []error
	if t.reader != nil {
		errs = append(errs, t.reader.Close())
	}
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	errs = append(errs, t.objs.Close())
	return errors.Join(errs...)
}
