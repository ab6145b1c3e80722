package bpfsource

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"time"

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
