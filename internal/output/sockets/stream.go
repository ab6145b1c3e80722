// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"bufio"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// Stream is a live dump (collect.Streamer.Stream): it calls fn with each
// socket as it comes and returns each namespace's snapshot.
type Stream func(fn func(*snapshot.Snapshot, *snapshot.Socket) error) ([]*snapshot.Snapshot, error)

// WriteStream prints the sockets of a live dump as they come: those match
// keeps (on the socket alone, before its subject is named) and keep keeps
// (on the row), with the shares of the window since prev when given. The
// printer is made at the first row, when the owners are named: the table
// has a Workload column when o asks for one or the host names any.
func WriteStream(w *bufio.Writer, stream Stream, match func(*snapshot.Socket) bool, keep func(*Row) bool,
	prev *tcpmodel.Chronos, o Options) ([]*snapshot.Snapshot, *Printer, error) {
	var p *Printer
	var lim tcpmodel.Limited
	heads, err := stream(func(s *snapshot.Snapshot, sk *snapshot.Socket) error {
		if !match(sk) {
			return nil
		}
		r := Row{Subject: output.SocketSubject(&s.Netns, sk, s.Procs), Socket: sk}
		if !keep(&r) {
			return nil
		}
		if p == nil {
			o.Workload = o.Workload || HasWorkloads(s)
			p = NewPrinter(w, o)
		}
		if prev != nil && prev.Limited(s, sk, &lim) {
			r.Limited = &lim
		}
		return p.Row(&r)
	})
	if err == nil && p == nil {
		p = NewPrinter(w, o)
	}
	return heads, p, err
}
