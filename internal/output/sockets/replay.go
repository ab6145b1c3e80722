// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"bufio"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// Window is one namespace's samples as the listing prints them: the
// sockets of Cur, with the shares of the window from Prev (nil for one
// sample).
type Window struct {
	Netns     string
	Prev, Cur *snapshot.Snapshot
}

// WriteWindows prints the sockets keep keeps of samples already in memory
// (read from a file): a first pass finds which columns the table needs.
func WriteWindows(w *bufio.Writer, ws []Window, keep func(*Row) bool, o Options) (rows int, err error) {
	asJSON := o.JSON
	p := NewPrinter(w, o)
	first := ""
	each := func(fn func(*Row) error) error {
		var lim tcpmodel.Limited
		for _, win := range ws {
			prev, cur := win.Prev, win.Cur
			var prevBy map[uint64]*snapshot.Socket
			if prev != nil {
				prevBy = make(map[uint64]*snapshot.Socket, len(prev.Sockets))
				for i := range prev.Sockets {
					prevBy[prev.Sockets[i].Cookie] = &prev.Sockets[i]
				}
			}
			var tb, pb snapshot.TCPInfo
			for i := range cur.Sockets {
				sk := &cur.Sockets[i]
				r := Row{Subject: output.SocketSubject(&cur.Netns, sk, cur.Procs), Socket: sk}
				if !keep(&r) {
					continue
				}
				if ps := prevBy[sk.Cookie]; ps != nil && tcpmodel.LimitedOf(ps.TCP(&pb), sk.TCP(&tb), cur.Taken.Sub(prev.Taken), &lim) {
					r.Limited = &lim
				}
				if err := fn(&r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if !asJSON {
		_ = each(func(r *Row) error {
			if first == "" {
				first = r.Subject.Netns
			}
			p.o.Netns = p.o.Netns || r.Subject.Netns != first
			p.o.Limited = p.o.Limited || r.Limited != nil
			p.o.Workload = p.o.Workload || r.Subject.Workload != nil
			return nil
		})
	}
	if err := each(p.Row); err != nil {
		return p.Rows(), err
	}
	return p.Rows(), p.Close()
}
