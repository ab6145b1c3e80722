// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"bufio"
	"unicode/utf8"
)

// tableLookAhead is how many rows (the header included) size the columns
// of a streamed table. Later rows keep those widths; a wider cell pushes
// the rest of its row right by what it overflows, keeping one space.
const tableLookAhead = 1000

// table prints aligned columns as rows stream in, holding at most
// tableLookAhead rows: unlike text/tabwriter, which holds the whole table
// until Flush. Cells are separated by at least one space; the last cell of
// a row is not padded.
type table struct {
	w      *bufio.Writer
	widths []int // columns' widths, separator included, once sized
	// The rows held while sizing: their bytes and the end of each cell.
	held     []byte
	heldEnds [][]int
	// The row being built.
	row  []byte
	ends []int
}

func newTable(w *bufio.Writer) *table { return &table{w: w} }

// cell ends the current cell: the bytes appended to t.row since the
// previous one.
func (t *table) cell() { t.ends = append(t.ends, len(t.row)) }

// endRow ends the current row (its cells ended with cell) and prints it,
// or holds it while the columns are being sized.
func (t *table) endRow() error {
	if t.widths == nil {
		t.held = append(t.held, t.row...)
		t.heldEnds = append(t.heldEnds, append([]int(nil), t.ends...))
		t.row, t.ends = t.row[:0], t.ends[:0]
		if len(t.heldEnds) < tableLookAhead {
			return nil
		}
		return t.size()
	}
	err := t.print(t.row, t.ends)
	t.row, t.ends = t.row[:0], t.ends[:0]
	return err
}

// flush prints the rows still held.
func (t *table) flush() error {
	if t.widths == nil {
		return t.size()
	}
	return nil
}

// size fixes the widths from the held rows and prints them.
func (t *table) size() error {
	t.widths = []int{}
	off := 0
	for _, ends := range t.heldEnds {
		prev := 0
		for i, e := range ends {
			if i == len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], utf8.RuneCount(t.held[off+prev:off+e])+1)
			prev = e
		}
		off += prev
	}
	off = 0
	for _, ends := range t.heldEnds {
		n := 0
		if len(ends) > 0 {
			n = ends[len(ends)-1]
		}
		if err := t.print(t.held[off:off+n], ends); err != nil {
			return err
		}
		off += n
	}
	t.held, t.heldEnds = nil, nil
	return nil
}

// print writes one row: row holds its cells, ends where each ends.
func (t *table) print(row []byte, ends []int) error {
	start, over := 0, 0
	for i, e := range ends {
		c := row[start:e]
		start = e
		if _, err := t.w.Write(c); err != nil {
			return err
		}
		if i == len(ends)-1 {
			break
		}
		w := 1
		if i < len(t.widths) {
			w = t.widths[i]
		}
		// What an earlier cell overflowed is taken back from this one's
		// padding, down to the one space every cell keeps.
		pad := w - utf8.RuneCount(c) - over
		over = 0
		if pad < 1 {
			over = 1 - pad
			pad = 1
		}
		for pad > 0 {
			n := min(pad, len(spaces))
			if _, err := t.w.WriteString(spaces[:n]); err != nil {
				return err
			}
			pad -= n
		}
	}
	return t.w.WriteByte('\n')
}

// spaces pads cells a piece at a time.
const spaces = "                                                                "

// dashes adds n cells holding "-".
func (t *table) dashes(n int) {
	for range n {
		t.row = append(t.row, '-')
		t.cell()
	}
}
