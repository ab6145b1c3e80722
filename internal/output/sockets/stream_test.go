// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestWriteStream: the rows are the sockets match and keep both keep, in
// the dump's order; an empty dump still makes a printer (an empty array).
func TestWriteStream(t *testing.T) {
	s := &snapshot.Snapshot{Netns: snapshot.Netns{Name: "ns"}}
	sks := []snapshot.Socket{{Inode: 1, State: snapshot.Established}, {Inode: 2, State: snapshot.Listen}, {Inode: 3, State: snapshot.Established}}
	for _, c := range []struct {
		name  string
		sks   []snapshot.Socket
		match func(*snapshot.Socket) bool
		keep  func(*Row) bool
		want  []float64
	}{
		{"all", sks, func(*snapshot.Socket) bool { return true }, func(*Row) bool { return true }, []float64{1, 2, 3}},
		{"match", sks, func(sk *snapshot.Socket) bool { return sk.State == snapshot.Established }, func(*Row) bool { return true }, []float64{1, 3}},
		{"keep", sks, func(*snapshot.Socket) bool { return true }, func(r *Row) bool { return r.Socket.Inode != 3 }, []float64{1, 2}},
		{"empty", nil, func(*snapshot.Socket) bool { return true }, func(*Row) bool { return true }, nil},
	} {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		stream := func(fn func(*snapshot.Snapshot, *snapshot.Socket) error) ([]*snapshot.Snapshot, error) {
			for i := range c.sks {
				if err := fn(s, &c.sks[i]); err != nil {
					return nil, err
				}
			}
			return []*snapshot.Snapshot{s}, nil
		}
		heads, p, err := WriteStream(w, stream, c.match, c.keep, nil, Options{JSON: true})
		if err != nil || len(heads) != 1 || p == nil {
			t.Fatalf("%s: heads %d, printer %v, err %v", c.name, len(heads), p, err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		var rows []map[string]any
		if err := json.Unmarshal(buf.Bytes(), &rows); err != nil {
			t.Fatalf("%s: %v:\n%s", c.name, err, buf.Bytes())
		}
		if len(rows) != len(c.want) || p.Rows() != len(c.want) {
			t.Fatalf("%s: %d rows (printer says %d), want %d:\n%s", c.name, len(rows), p.Rows(), len(c.want), buf.Bytes())
		}
		for i, r := range rows {
			if r["inode"] != c.want[i] {
				t.Errorf("%s: row %d inode %v, want %v", c.name, i, r["inode"], c.want[i])
			}
		}
	}
}
