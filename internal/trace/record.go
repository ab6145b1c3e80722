// SPDX-License-Identifier: Apache-2.0

// Package trace is tcpdoctor's per-transfer flight recorder: it samples
// chosen connections many times a second (sock_diag, filtered in the
// kernel), cuts each connection's life into transfers, splits each
// transfer's time by what held it, and writes JSON lines, a terminal table
// and an HTML report (docs/trace.md).
package trace

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// Version is the trace file format's version (the header's "trace").
// Version 2 added event lines ("ev"); Read takes both.
const Version = 2

// Header is the first line of a trace file.
type Header struct {
	Trace   int       `json:"trace"`
	Started time.Time `json:"started"`
	// Interval is the time between samples asked for.
	Interval time.Duration `json:"interval_ns"`
	Host     string        `json:"host,omitempty"`
	Netns    string        `json:"netns,omitempty"`
	Filter   string        `json:"filter,omitempty"`
	// Events: the eBPF events of the traced sockets were recorded;
	// NoEvents says why not, when they were not.
	Events   bool   `json:"events,omitempty"`
	NoEvents string `json:"no_events,omitempty"`
	// Workload is the pod, container or unit traced (--pod, --container)
	// or holding the namespace, so a replay names it.
	Workload *snapshot.Workload `json:"workload,omitempty"`
}

// Subject is what the recording is about, as every printer names it:
// its namespace and the pod, container or unit of Workload.
func (h *Header) Subject() output.Subject {
	return output.Subject{Netns: h.Netns, Workload: h.Workload}
}

// Conn is one traced connection, named the first time it is seen.
type Conn struct {
	ID     int            `json:"id"`
	Local  netip.AddrPort `json:"local"`
	Remote netip.AddrPort `json:"remote"`
	Cookie uint64         `json:"cookie"`
	Inode  uint32         `json:"inode,omitempty"`
	CC     string         `json:"cc,omitempty"`
	// Points are the connection's samples, in time order (not written
	// with the Conn line: each is its own line).
	Points []Point `json:"-"`
	// Events are the connection's eBPF events, in time order (each its
	// own line too).
	Events []Event `json:"-"`
}

// The kinds of Event.
const (
	EvRetransmit    = "retransmit"     // a segment retransmitted
	EvRcvSpace      = "rcv_space"      // receive autotuning stepped the buffer or window clamp
	EvResetSent     = "reset_sent"     // we sent a reset
	EvResetReceived = "reset_received" // the peer's reset arrived
)

var eventKinds = []string{EvRetransmit, EvRcvSpace, EvResetSent, EvResetReceived}

// Event is one eBPF event of a traced connection, timed by the kernel
// (CLOCK_MONOTONIC, mapped to the recording's start).
type Event struct {
	T      time.Duration `json:"t"` // since Header.Started, ns
	Conn   int           `json:"c"`
	Kind   string        `json:"kind"`
	Reason string        `json:"reason,omitempty"` // a sent reset's sk_rst_reason
	// Rcvbuf and Clamp are the receive buffer and window clamp at the
	// event, bytes.
	Rcvbuf uint32 `json:"rcvbuf,omitempty"`
	Clamp  uint32 `json:"clamp,omitempty"`
}

// Point is one connection at one tick: the tcp_info and meminfo fields
// the transfer analysis and the report read. Times are microseconds
// unless named otherwise.
type Point struct {
	T       time.Duration  `json:"t"` // since Header.Started, ns
	Conn    int            `json:"c"`
	State   snapshot.State `json:"st"`
	SendQ   uint32         `json:"sq"`
	RecvQ   uint32         `json:"rq"`
	Acked   uint64         `json:"acked"`    // bytes_acked
	Recvd   uint64         `json:"recvd"`    // bytes_received
	Busy    uint64         `json:"busy"`     // busy_time
	Rwnd    uint64         `json:"rwnd_l"`   // rwnd_limited
	Sndbuf  uint64         `json:"sndbuf_l"` // sndbuf_limited
	Chrono  bool           `json:"chrono"`   // the kernel sent the chronographs
	Retrans uint32         `json:"retx"`     // total_retrans
	CA      uint8          `json:"ca"`       // ca_state
	Unacked uint32         `json:"unacked"`  // segments
	MSS     uint32         `json:"mss"`
	Cwnd    uint32         `json:"cwnd"` // segments
	RTT     uint32         `json:"rtt"`
	SndWnd  uint32         `json:"snd_wnd"` // the peer's window, bytes
	RcvWnd  uint32         `json:"rcv_wnd"` // ours, bytes
	Notsent uint32         `json:"notsent"`
	Rate    uint64         `json:"rate"` // delivery_rate, bytes/s
	SkSnd   uint32         `json:"sk_sndbuf"`
	SkRcv   uint32         `json:"sk_rcvbuf"`
	Queued  uint32         `json:"wmem_queued"`
	Rmem    uint32         `json:"rmem_alloc"`
	// MaxPace is the pacing cap the application set (SO_MAX_PACING_RATE),
	// bytes/s; absent when none.
	MaxPace uint64 `json:"max_pace,omitempty"`
	// MinRTT is tcpi_min_rtt, µs; absent in recordings made before it
	// was kept. SinceRecv is tcpi_last_data_recv: ms since data last
	// arrived, read only where MinRTT is set (0 is "just now").
	MinRTT    uint32 `json:"min_rtt,omitempty"`
	SinceRecv uint32 `json:"last_recv_ms,omitempty"`
	// Sent is tcpi_bytes_sent (retransmissions included), SinceSent
	// tcpi_last_data_sent (ms since data last went out, read only where
	// Sent is set); both absent in recordings made before they were kept.
	Sent      uint64 `json:"sent,omitempty"`
	SinceSent uint32 `json:"last_sent_ms,omitempty"`
}

// Inflight is what is in flight, in bytes.
func (p *Point) Inflight() uint64 { return uint64(p.Unacked) * uint64(p.MSS) }

// reading is what tcpmodel's path estimate reads of the sample.
func (p *Point) reading() tcpmodel.Reading {
	return tcpmodel.Reading{Chrono: p.Chrono, Acked: p.Acked, Busy: p.Busy, Rwnd: p.Rwnd, Sndbuf: p.Sndbuf,
		Unacked: p.Unacked, Cwnd: p.Cwnd, MSS: p.MSS, SndWnd: p.SndWnd, Notsent: p.Notsent, SkSndbuf: p.SkSnd, Queued: p.Queued, MaxPace: p.MaxPace}
}

// pointOf reads the fields of a Point from a socket.
func pointOf(t time.Duration, id int, sk *snapshot.Socket) Point {
	p := Point{T: t, Conn: id, State: sk.State, SendQ: sk.SendQ, RecvQ: sk.RecvQ}
	var tb snapshot.TCPInfo
	if ti := sk.TCP(&tb); ti != nil {
		p.Acked, p.Recvd = ti.BytesAcked, ti.BytesReceived
		p.Busy, p.Rwnd, p.Sndbuf = ti.BusyTime, ti.RwndLimited, ti.SndbufLimited
		p.Chrono = ti.Has(snapshot.EndChrono)
		p.Retrans, p.CA = ti.TotalRetrans, ti.CAState
		p.Unacked, p.MSS, p.Cwnd, p.RTT = ti.Unacked, ti.SndMSS, ti.SndCwnd, ti.RTT
		p.SndWnd, p.RcvWnd, p.Notsent, p.Rate = ti.SndWnd, ti.RcvWnd, ti.NotsentBytes, ti.DeliveryRate
		p.MaxPace = tcpmodel.AppPaceCap(ti)
		p.MinRTT, p.SinceRecv = ti.MinRTT, ti.LastDataRecv
		if ti.Has(snapshot.EndBytesRetrans) {
			p.Sent, p.SinceSent = ti.BytesSent, ti.LastDataSent
		}
	}
	if m := sk.Mem; m != nil {
		p.SkSnd, p.SkRcv, p.Queued, p.Rmem = m.Sndbuf, m.Rcvbuf, m.WmemQueued, m.RmemAlloc
	}
	return p
}

// Trace is a recording: the header and every connection with its points.
type Trace struct {
	Header Header
	Conns  []*Conn
}

// line is one line of a trace file: exactly one field is set.
type line struct {
	Header *Header `json:"header,omitempty"`
	Conn   *Conn   `json:"conn,omitempty"`
	Point  *Point  `json:"p,omitempty"`
	Event  *Event  `json:"ev,omitempty"`
}

// Writer writes a trace as JSON lines as it is recorded, each line put
// out as it is written.
type Writer struct {
	w *jsonl.Writer
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: jsonl.NewWriter(w)} }

// Header writes the header line.
func (w *Writer) Header(h *Header) error { return w.write(line{Header: h}) }

// Conn writes a connection line.
func (w *Writer) Conn(c *Conn) error { return w.write(line{Conn: c}) }

// Point writes a point line.
func (w *Writer) Point(p *Point) error { return w.write(line{Point: p}) }

// Event writes an event line.
func (w *Writer) Event(e *Event) error { return w.write(line{Event: e}) }

func (w *Writer) write(l line) error {
	err := w.w.Encode(l)
	if err == nil {
		err = w.w.Flush()
	}
	if err != nil {
		return fmt.Errorf("trace: write: %w", err)
	}
	return nil
}

// WriteAll writes a whole trace: header, connections, points in time order.
func WriteAll(w io.Writer, tr *Trace) error {
	tw := NewWriter(w)
	if err := tw.Header(&tr.Header); err != nil {
		return err
	}
	for _, c := range tr.Conns {
		if err := tw.Conn(c); err != nil {
			return err
		}
		for i := range c.Points {
			if err := tw.Point(&c.Points[i]); err != nil {
				return err
			}
		}
		for i := range c.Events {
			if err := tw.Event(&c.Events[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Errors of Read, wrapped with the line number.
var (
	ErrNoHeader = errors.New("trace: first line is not a trace header")
	ErrFormat   = errors.New("trace: malformed line")
)

// maxLine bounds one line of a trace file.
const maxLine = 1 << 20

// Read reads a trace file, gzip-compressed (as serve --history keeps
// triggered traces) or not. Points must name a connection defined on an
// earlier line and come in time order per connection, no two at one
// time. A last line the file ends inside (a recorder stopped mid-write)
// is a *jsonl.TornError, returned with the trace before it.
func Read(r io.Reader) (*Trace, error) {
	jr, err := jsonl.NewReader(r, jsonl.Options{MaxLine: maxLine})
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	tr := &Trace{}
	byID := map[int]*Conn{}
	for {
		var l line
		err := jr.Decode(&l)
		n := jr.Line()
		if errors.Is(err, io.EOF) {
			break
		}
		var torn *jsonl.TornError
		var long *jsonl.LimitError
		var rerr *jsonl.ReadError
		switch {
		case errors.As(err, &torn) && tr.Header.Trace != 0:
			return sorted(tr), err
		case torn != nil: // no header before it: not a recording
			return nil, fmt.Errorf("%w %d: %w", ErrFormat, n, torn.Err)
		case errors.As(err, &long):
			return nil, fmt.Errorf("%w %d: longer than the limit of %d bytes", ErrFormat, n, maxLine)
		case errors.As(err, &rerr):
			return nil, fmt.Errorf("trace: read %w", err)
		case err != nil:
			return nil, fmt.Errorf("%w %d: %w", ErrFormat, n, err)
		}
		if tr.Header.Trace == 0 {
			if l.Header == nil || l.Header.Trace == 0 {
				return nil, fmt.Errorf("%w (line %d): trace -o writes trace files; check --from and sockets --from read record's snapshots", ErrNoHeader, n)
			}
			if l.Header.Trace < 1 || l.Header.Trace > Version {
				return nil, fmt.Errorf("%w %d: trace format %d, this build reads %d", ErrFormat, n, l.Header.Trace, Version)
			}
			if l.Header.Interval <= 0 {
				return nil, fmt.Errorf("%w %d: interval %v", ErrFormat, n, l.Header.Interval)
			}
			tr.Header = *l.Header
			continue
		}
		switch {
		case l.Conn != nil:
			if _, dup := byID[l.Conn.ID]; dup {
				return nil, fmt.Errorf("%w %d: connection %d defined twice", ErrFormat, n, l.Conn.ID)
			}
			c := *l.Conn
			c.Points = nil
			byID[c.ID] = &c
			tr.Conns = append(tr.Conns, &c)
		case l.Point != nil:
			c := byID[l.Point.Conn]
			if c == nil {
				return nil, fmt.Errorf("%w %d: point of undefined connection %d", ErrFormat, n, l.Point.Conn)
			}
			if k := len(c.Points); k > 0 && l.Point.T <= c.Points[k-1].T {
				return nil, fmt.Errorf("%w %d: connection %d: point at %v, not after its previous one at %v", ErrFormat, n, l.Point.Conn, l.Point.T, c.Points[k-1].T)
			}
			c.Points = append(c.Points, *l.Point)
		case l.Event != nil:
			c := byID[l.Event.Conn]
			if c == nil {
				return nil, fmt.Errorf("%w %d: event of undefined connection %d", ErrFormat, n, l.Event.Conn)
			}
			if !slices.Contains(eventKinds, l.Event.Kind) {
				return nil, fmt.Errorf("%w %d: event of unknown kind %q", ErrFormat, n, l.Event.Kind)
			}
			c.Events = append(c.Events, *l.Event)
		default:
			return nil, fmt.Errorf("%w %d: neither header, conn nor point", ErrFormat, n)
		}
	}
	if tr.Header.Trace == 0 {
		return nil, ErrNoHeader
	}
	return sorted(tr), nil
}

// sorted orders each connection's events: they are drained a tick late
// and a CPU's ring reservations may interleave.
func sorted(tr *Trace) *Trace {
	for _, c := range tr.Conns {
		slices.SortStableFunc(c.Events, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
	}
	return tr
}
