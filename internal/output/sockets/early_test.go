package sockets

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestEarlyQueueSameRows: rows whose early part was queued while their
// owners were found print byte for byte as rows printed at once, in the
// table (sized from its first rows) and in JSON, with rows left out
// between them and the queue used twice.
func TestEarlyQueueSameRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	socks := make([]snapshot.Socket, 2500)
	for i := range socks {
		fill(t, rng, reflect.ValueOf(&socks[i]).Elem())
		socks[i].State = snapshot.State(1 + rng.IntN(11))
	}
	left := func(i int) bool { return i%7 == 3 }
	for _, o := range []Options{{}, {JSON: true}, {Netns: true, Workload: true, Limited: true}} {
		var want, got bytes.Buffer
		pw := NewPrinter(bufio.NewWriter(&want), o)
		pg := NewPrinter(bufio.NewWriter(&got), o)
		q := NewEarlyQueue(o)
		for lo := 0; lo < len(socks); lo += 1200 { // two rounds of holding
			hi := min(lo+1200, len(socks))
			for i := lo; i < hi; i++ {
				if left(i) {
					q.Leave()
				} else {
					q.Push(&socks[i])
				}
			}
			for i := lo; i < hi; i++ {
				if !q.Pending() {
					t.Fatalf("%+v: queue empty at row %d", o, i)
				}
				pre := q.Pop()
				if left(i) != (pre == nil) {
					t.Fatalf("%+v: row %d left out %v, popped %v", o, i, left(i), pre)
				}
				if pre == nil {
					continue
				}
				r := rowOf("ns1", &socks[i], "proc", i%2 == 0)
				if err := pw.Row(&r); err != nil {
					t.Fatal(err)
				}
				if err := pg.RowEarly(&r, pre); err != nil {
					t.Fatal(err)
				}
			}
			if q.Pending() {
				t.Fatalf("%+v: rows left in the queue", o)
			}
		}
		for _, p := range []*Printer{pw, pg} {
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if err := p.w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if want.Len() == 0 || !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%+v: queued rows differ from rows printed at once (%d and %d bytes)", o, got.Len(), want.Len())
		}
	}
}
