// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// socketsIn keeps how many sockets the whole first sample held; counts
// says how often it ran.
type socketsIn struct{ counts *atomic.Int32 }

func (k socketsIn) Keep(s *snapshot.Snapshot) int {
	if k.counts != nil {
		k.counts.Add(1)
	}
	return len(s.Sockets)
}

// pidsIn is a second key of another type.
type pidsIn struct{}

func (pidsIn) Keep(s *snapshot.Snapshot) []int {
	var out []int
	for i := range s.Sockets {
		out = append(out, s.Sockets[i].Pids.List()...)
	}
	return out
}

func baseSample() *snapshot.Snapshot {
	ap := netip.MustParseAddrPort
	ln := snapshot.Socket{Family: 2, State: snapshot.Listen, Cookie: 1, Local: snapshot.EndpointOf(ap("198.18.0.1:80")), Pids: snapshot.PidsOf(10)}
	acc := snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: 2, Local: snapshot.EndpointOf(ap("198.18.0.1:80")), Remote: snapshot.EndpointOf(ap("198.18.0.2:40000")), Pids: snapshot.PidsOf(10)}
	cli := snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: 3, Local: snapshot.EndpointOf(ap("198.18.0.1:40001")), Remote: snapshot.EndpointOf(ap("198.18.0.3:443")), Pids: snapshot.PidsOf(20), RecvQ: 7}
	tw := snapshot.Socket{Family: 2, State: snapshot.TimeWait, Cookie: 4, Local: snapshot.EndpointOf(ap("198.18.0.1:40002")), Remote: snapshot.EndpointOf(ap("198.18.0.3:443"))}
	return &snapshot.Snapshot{Sockets: []snapshot.Socket{ln, acc, cli, tw}}
}

// A base keeps every socket as a Was, only the ones not established
// whole, and what its keepers asked of the whole sample, each once.
func TestNewBase(t *testing.T) {
	s := baseSample()
	var runs atomic.Int32
	count := socketsIn{&runs}
	b := NewBase(s, KeepsOf([]Rule{
		{ID: "a", Keeps: []Keeper{Keep(count)}},
		{ID: "b", Keeps: []Keeper{Keep(count), Keep(pidsIn{})}},
	}))
	if len(b.Was) != 4 || b.Was[2].Cookie != 3 || b.Was[2].RecvQ != 7 {
		t.Errorf("Was: %+v", b.Was)
	}
	if len(b.Snap.Sockets) != 2 || b.Snap.Sockets[0].Cookie != 1 || b.Snap.Sockets[1].Cookie != 4 {
		t.Errorf("whole sockets: %+v", b.Snap.Sockets)
	}
	if len(s.Sockets) != 4 {
		t.Errorf("NewBase changed its sample: %d sockets", len(s.Sockets))
	}
	if runs.Load() != 1 {
		t.Errorf("a key two rules keep ran %d times, want once", runs.Load())
	}
	cli := s.Sockets[2]
	in := NewInputFrom(b, &snapshot.Snapshot{Sockets: []snapshot.Socket{cli}}, Options{})
	if p := in.PrevOf(&in.Cur.Sockets[0]); p == nil || p.RecvQ != 7 || p.State != snapshot.Established {
		t.Errorf("PrevOf: %+v", p)
	}
	if n, ok := KeptOf(in, count); !ok || n != 4 {
		t.Errorf("kept socket count %d %v, want 4 of the whole sample", n, ok)
	}
	if p, ok := KeptOf(in, pidsIn{}); !ok || len(p) != 3 {
		t.Errorf("kept pids %v %v", p, ok)
	}
	if runs.Load() != 1 {
		t.Errorf("reading a kept value ran its keeper again (%d runs)", runs.Load())
	}
	if _, ok := KeptOf(NewInput(nil, s, Options{}), count); ok {
		t.Error("kept value without a first sample")
	}
}

// NewBase takes the records the dump made (Snapshot.Was) when there is
// one for each socket, and makes them itself when not.
func TestNewBaseTakesDumpWas(t *testing.T) {
	s := baseSample()
	s.Was = snapshot.WasOf(s.Sockets)
	if b := NewBase(s, nil); &b.Was[0] != &s.Was[0] || b.Snap.Was != nil {
		t.Error("the dump's records were not taken, or stayed in the base's sample")
	}
	s.Was = s.Was[:2]
	if b := NewBase(s, nil); len(b.Was) != 4 || &b.Was[0] == &s.Was[0] {
		t.Errorf("records for 2 of 4 sockets taken: %d", len(b.Was))
	}
}

// A rule that reads what it did not list in its Keeps is reported
// unknown with the key it missed, not judged on an empty tally.
func TestKeptOfUndeclared(t *testing.T) {
	b := NewBase(baseSample(), nil)
	in := NewInputFrom(b, &snapshot.Snapshot{}, Options{})
	r := Rule{ID: "forgetful", Check: func(in *Input) ([]Finding, error) {
		KeptOf(in, pidsIn{})
		return nil, nil
	}}
	var res Result
	Run([]Rule{r}, in, &res)
	if len(res.Unknown) != 1 || !strings.Contains(res.Unknown[0].Reason, "diag.pidsIn was not kept") {
		t.Errorf("unknown: %+v", res.Unknown)
	}
}

// NewInput keeps its previous sample whole: a rule's keepers run on it
// when first asked, once, however many rules ask at once.
func TestKeptOfWholeSample(t *testing.T) {
	var runs atomic.Int32
	in := NewInput(baseSample(), &snapshot.Snapshot{}, Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if n, ok := KeptOf(in, socketsIn{&runs}); !ok || n != 4 {
				t.Errorf("kept %d %v, want 4", n, ok)
			}
		})
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Errorf("keeper ran %d times, want once", runs.Load())
	}
}

// sumCookies is a Memo over the current sample; its field counts runs.
type sumCookies struct{ runs *atomic.Int32 }

func (m sumCookies) Compute(in *Input) uint64 {
	m.runs.Add(1)
	var n uint64
	for i := range in.Cur.Sockets {
		n += in.Cur.Sockets[i].Cookie
	}
	return n
}

// A Memo is computed once per Input, typed, whoever asks first; another
// Input computes its own.
func TestMemoOf(t *testing.T) {
	var runs atomic.Int32
	in := NewInput(nil, baseSample(), Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := MemoOf(in, sumCookies{&runs}); got != 10 {
				t.Errorf("memo %d, want 10", got)
			}
		})
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Errorf("memo computed %d times, want once", runs.Load())
	}
	if got := MemoOf(NewInput(nil, &snapshot.Snapshot{}, Options{}), sumCookies{&runs}); got != 0 || runs.Load() != 2 {
		t.Errorf("another input: %d after %d runs", got, runs.Load())
	}
}
