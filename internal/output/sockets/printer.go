// SPDX-License-Identifier: Apache-2.0

// Package sockets prints `tcpdoctor sockets`: the listing as an aligned
// table or a JSON array with one socket a line, streamed as the dump
// comes (nothing holds the sockets), and the tables of eBPF connection
// events printed under `sockets --interval`. Subjects are formatted by
// output.Subject; names from outside are escaped (textsafe) in text.
package sockets

import (
	"bufio"
	"strconv"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// Row is one socket as the listing prints it. The socket is borrowed
// (reused by the dump), nothing is copied.
type Row struct {
	// Subject is the socket's namespace and first owner.
	Subject output.Subject
	Socket  *snapshot.Socket
	// Limited is the window between two samples; nil without one.
	Limited *tcpmodel.Limited
}

// view is one row of `sockets --json` as encoding/json writes it: the
// reference appendJSON must equal (docs/json.md); fields only ever get
// added.
type view struct {
	Netns string `json:"netns"`
	// Pid and Command are the first owner; null when unknown.
	Pid     *int    `json:"pid"`
	Command *string `json:"command"`
	// The owner's workload, else the namespace's, each when known.
	snapshot.Names
	snapshot.Socket
	Limited *limitedView `json:"limited,omitempty"`
}

type limitedView struct {
	WindowMS   float64 `json:"window_ms"`
	Busy       float64 `json:"busy"`
	Sndbuf     float64 `json:"sndbuf"`
	Rwnd       float64 `json:"rwnd"`
	Congestion float64 `json:"congestion"`
}

// Options says what the listing shows.
type Options struct {
	// JSON prints a JSON array, one socket a line, instead of the table.
	JSON bool
	// Netns adds the table's namespace column (more than one namespace).
	Netns bool
	// Limited adds the table's columns of the window's shares.
	Limited bool
	// Workload adds the table's column of the owner's (else the
	// namespace's) pod, container or unit (HasWorkloads).
	Workload bool
	// Locks adds the table's column of the buffers the application
	// pinned (SO_SNDBUF, SO_RCVBUF: "snd", "rcv", "snd,rcv", "-" none,
	// "?" not read).
	Locks bool
}

// HasWorkloads reports whether a snapshot names any pod, container or
// unit: of its namespace or of a process holding sockets. The table
// shows its Workload column then.
func HasWorkloads(s *snapshot.Snapshot) bool {
	if s.Netns.Workload != nil {
		return true
	}
	for _, p := range s.Procs {
		if p.Workload != nil {
			return true
		}
	}
	return false
}

// Printer prints rows as they come: a JSON array, one object a line, or
// a table whose widths come from its first rows.
type Printer struct {
	w    *bufio.Writer
	o    Options
	rows int
	buf  []byte
	tab  *table
}

// NewPrinter prints to w; the caller flushes w after Close.
func NewPrinter(w *bufio.Writer, o Options) *Printer { return &Printer{w: w, o: o} }

// Rows is how many rows were printed.
func (p *Printer) Rows() int { return p.rows }

// Row prints r.
func (p *Printer) Row(r *Row) error {
	p.rows++
	if p.o.JSON {
		p.buf = p.buf[:0]
		if p.rows == 1 {
			p.buf = append(p.buf, "[\n"...)
		} else {
			p.buf = append(p.buf, ",\n"...)
		}
		p.buf = appendJSON(p.buf, r)
		_, err := p.w.Write(p.buf)
		return err
	}
	if p.tab == nil {
		if err := p.header(); err != nil {
			return err
		}
	}
	t := p.tab
	sk := r.Socket
	if p.o.Netns {
		t.row = append(t.row, r.Subject.NetnsText()...)
		t.cell()
	}
	t.row = append(t.row, sk.State.String()...)
	t.cell()
	t.row = strconv.AppendUint(t.row, uint64(sk.RecvQ), 10)
	t.cell()
	t.row = strconv.AppendUint(t.row, uint64(sk.SendQ), 10)
	t.cell()
	t.row = output.AppendAddrPort(t.row, sk.Local.AddrPort())
	t.cell()
	if sk.State == snapshot.Listen {
		t.row = append(t.row, '*')
	} else {
		t.row = output.AppendAddrPort(t.row, sk.Remote.AddrPort())
	}
	t.cell()
	var tb snapshot.TCPInfo
	if in := sk.TCP(&tb); in != nil && sk.State != snapshot.Listen {
		t.row = units.AppendMillis(t.row, in.RTT)
		t.cell()
		t.row = strconv.AppendUint(t.row, uint64(in.SndCwnd), 10)
		t.cell()
		t.row = units.AppendRate(t.row, float64(in.DeliveryRate))
		t.cell()
	} else {
		t.dashes(3)
	}
	if m := sk.Mem; m != nil {
		t.row = units.AppendBytes(t.row, float64(m.Sndbuf))
		t.cell()
		t.row = units.AppendBytes(t.row, float64(m.Rcvbuf))
		t.cell()
	} else {
		t.dashes(2)
	}
	t.row = r.Subject.AppendProcess(t.row)
	t.cell()
	if p.o.Workload {
		t.row = r.Subject.AppendWorkload(t.row)
		t.cell()
	}
	if p.o.Locks {
		t.row = appendLocks(t.row, sk.BufLock)
		t.cell()
	}
	if p.o.Limited {
		if l := r.Limited; l != nil {
			for _, v := range []float64{l.Busy, l.Sndbuf, l.Rwnd, l.Congestion} {
				t.row = strconv.AppendFloat(t.row, v*100, 'f', 0, 64)
				t.row = append(t.row, '%')
				t.cell()
			}
		} else {
			t.dashes(4)
		}
	}
	return t.endRow()
}

// appendLocks is a socket's SO_BUF_LOCK bits as the Pinned column shows
// them.
func appendLocks(b []byte, f snapshot.Flags) []byte {
	bits, ok := f.Get()
	switch {
	case !ok:
		return append(b, '?')
	case bits&3 == 3:
		return append(b, "snd,rcv"...)
	case bits&1 != 0:
		return append(b, "snd"...)
	case bits&2 != 0:
		return append(b, "rcv"...)
	}
	return append(b, '-')
}

func (p *Printer) header() error {
	p.tab = newTable(p.w)
	var cols []string
	if p.o.Netns {
		cols = append(cols, "Netns")
	}
	cols = append(cols, "State", "Recv-Q", "Send-Q", "Local", "Remote", "RTT", "Cwnd", "Rate", "Sndbuf", "Rcvbuf", "Process")
	if p.o.Workload {
		cols = append(cols, "Workload")
	}
	if p.o.Locks {
		cols = append(cols, "Pinned")
	}
	if p.o.Limited {
		cols = append(cols, "Busy", "Sndbuf-lim", "Rwnd-lim", "Cwnd-lim")
	}
	for _, c := range cols {
		p.tab.row = append(p.tab.row, c...)
		p.tab.cell()
	}
	return p.tab.endRow()
}

// Close ends the array or prints the rows the table still holds (the
// header alone when there were no rows).
func (p *Printer) Close() error {
	if p.o.JSON {
		end := "\n]\n"
		if p.rows == 0 {
			end = "[]\n"
		}
		_, err := p.w.WriteString(end)
		return err
	}
	if p.tab == nil {
		if err := p.header(); err != nil {
			return err
		}
	}
	return p.tab.flush()
}
