// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// fakeEvents is an EventSource the test feeds.
type fakeEvents struct {
	watched     map[uint64]bool
	unwatched   []uint64
	queue       []bpfsource.TraceEvent
	established uint64
	// moved lists the cookies that moved since the last Moved call;
	// noActivity makes Moved say it cannot tell.
	moved      map[uint64]bool
	noActivity bool
	movedCalls int
}

func (f *fakeEvents) Moved(c uint64) (bool, bool) {
	f.movedCalls++
	if f.noActivity {
		return false, false
	}
	m := f.moved[c]
	delete(f.moved, c)
	return m, true
}

func (f *fakeEvents) Watch(c uint64) error { f.watched[c] = true; return nil }
func (f *fakeEvents) Unwatch(c uint64) error {
	delete(f.watched, c)
	f.unwatched = append(f.unwatched, c)
	return nil
}
func (f *fakeEvents) Established() (uint64, bool, error) {
	return f.established, true, nil
}

func (f *fakeEvents) Drain(fn func(bpfsource.TraceEvent)) error {
	for _, e := range f.queue {
		fn(e)
	}
	f.queue = nil
	return nil
}

// TestRecordEvents: events of watched sockets land on their connection at
// their kernel time, survive the file, and are counted on the transfer
// they fall in; the socket is unwatched when it goes; due dumps are
// skipped while the count of new connections stands still.
func TestRecordEvents(t *testing.T) {
	mk := func(cookie uint64) *snapshot.Socket {
		return &snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: cookie,
			Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:80")), Remote: snapshot.EndpointFrom(netip.MustParseAddr("127.0.0.1"), uint16(1000+cookie)),
			Info: snapshot.TCPOf(&snapshot.TCPInfo{Len: snapshot.SizeKnown})}
	}
	src := &fakeSource{socks: map[uint64]*snapshot.Socket{1: mk(1)}}
	ev := &fakeEvents{watched: map[uint64]bool{}, moved: map[uint64]bool{}}
	clk := &fakeClock{now: time.Unix(1000, 0)}
	const monoStart = 50 * time.Second // the kernel clock at the start
	mono := monoStart
	ticks := 0
	clk.tick = func(d time.Duration) {
		mono += d
		ticks++
		sk := src.socks[1]
		switch {
		case ticks >= 10 && ticks < 30: // sending for 20 ticks
			sk.TCP(nil).BytesAcked += 10000
			sk.SendQ = 5000
		case ticks == 30:
			sk.SendQ = 0
		}
		if ticks == 15 {
			// A retransmit 3 ms into the interval after the 15th tick.
			ev.queue = append(ev.queue, bpfsource.TraceEvent{Mono: mono + 3*time.Millisecond, Cookie: 1, Kind: bpfsource.TraceRetransmit})
		}
		if ticks == 40 {
			src.socks[2] = mk(2)
			ev.established++
		}
		if ticks == 60 {
			ev.queue = append(ev.queue, bpfsource.TraceEvent{Mono: mono - time.Millisecond, Cookie: 1, Kind: bpfsource.TraceResetSent, Reason: "TCP_ABORT_ON_CLOSE"},
				bpfsource.TraceEvent{Mono: mono, Cookie: 99, Kind: bpfsource.TraceRetransmit}) // not ours
			delete(src.socks, 1)
			ev.moved[1] = true // the close is a state change
		}
	}
	var out bytes.Buffer
	tr, st, err := Record(context.Background(), Config{Source: src, Interval: 10 * time.Millisecond, Duration: time.Second,
		Now: clk.Now, Sleep: clk.Sleep, Sink: NewWriter(&out), Events: ev, Mono: func() time.Duration { return mono }})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Header.Events || len(tr.Conns) != 2 {
		t.Fatalf("header %+v, %d conns", tr.Header, len(tr.Conns))
	}
	// A dump at the first tick and one after the new connection; every
	// other tick with a dump due skipped it.
	if st.Dumps != 2 || st.DumpsSkipped == 0 {
		t.Errorf("%d dumps, %d skipped; want 2 and some", st.Dumps, st.DumpsSkipped)
	}
	if len(ev.unwatched) != 1 || ev.unwatched[0] != 1 || !ev.watched[2] {
		t.Errorf("unwatched %v, watched %v", ev.unwatched, ev.watched)
	}
	es := tr.Conns[0].Events
	if len(es) != 2 || st.Events != 2 {
		t.Fatalf("events %+v (%d counted)", es, st.Events)
	}
	if es[0].Kind != EvRetransmit || es[0].T != 153*time.Millisecond {
		t.Errorf("retransmit %+v, want at 153ms", es[0])
	}
	if es[1].Kind != EvResetSent || es[1].Reason != "TCP_ABORT_ON_CLOSE" || es[1].T != 599*time.Millisecond {
		t.Errorf("reset %+v, want sent at 599ms", es[1])
	}
	back, err := Read(&out)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Header.Events || len(back.Conns[0].Events) != 2 || back.Conns[0].Events[0] != es[0] {
		t.Fatalf("file lost the events: %+v", back.Conns[0].Events)
	}
	a := Analyze(back, SegmentOptions{}, JudgeOptions{Bandwidth: 1e9})
	var send *Transfer
	for i := range a.Transfers {
		if a.Transfers[i].Conn == 1 && a.Transfers[i].Dir == Send {
			send = &a.Transfers[i]
		}
	}
	if send == nil || send.Events == nil || send.Events.Retransmits != 1 || send.Events.ResetsSent != 0 {
		t.Fatalf("send transfer %+v", send)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, a.Transfers, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "1 retx") {
		t.Errorf("table does not count the retransmit:\n%s", table.String())
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, back, a.Transfers, "test"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `"kind":"retransmit"`) || !strings.Contains(page.String(), "Events timed by the kernel") {
		t.Error("page has no event markers")
	}
}

func TestReadEventErrors(t *testing.T) {
	head := `{"header":{"trace":2,"interval_ns":10000000}}` + "\n" + `{"conn":{"id":1}}` + "\n"
	for _, in := range []string{
		head + `{"ev":{"t":1,"c":2,"kind":"retransmit"}}`,
		head + `{"ev":{"t":1,"c":1,"kind":"explosion"}}`,
	} {
		if _, err := Read(strings.NewReader(in)); err == nil {
			t.Errorf("no error for %q", in)
		}
	}
	// Version 1 files (no events) still read.
	if _, err := Read(strings.NewReader(`{"header":{"trace":1,"interval_ns":10000000}}`)); err != nil {
		t.Error(err)
	}
}

// TestRecordReadsQuietOnlyWhenMoved: with activity from the event
// source, a quiet connection is read once a second until it moves, then
// at the very next tick; without it, every tick.
func TestRecordReadsQuietOnlyWhenMoved(t *testing.T) {
	for _, noActivity := range []bool{false, true} {
		mk := func(cookie uint64) *snapshot.Socket {
			return &snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: cookie,
				Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:80")), Remote: snapshot.EndpointFrom(netip.MustParseAddr("127.0.0.1"), uint16(1000+cookie)),
				Info: snapshot.TCPOf(&snapshot.TCPInfo{Len: snapshot.SizeKnown})}
		}
		src := &fakeSource{socks: map[uint64]*snapshot.Socket{1: mk(1), 2: mk(2)}}
		ev := &fakeEvents{watched: map[uint64]bool{}, moved: map[uint64]bool{}, noActivity: noActivity}
		clk := &fakeClock{now: time.Unix(1000, 0)}
		ticks := 0
		clk.tick = func(time.Duration) {
			ticks++
			if ticks == 50 { // the application writes between ticks 50 and 51
				src.socks[1].TCP(nil).BytesAcked += 1000
				ev.moved[1] = true
			}
		}
		tr, _, err := Record(context.Background(), Config{Source: src, Interval: 10 * time.Millisecond, Duration: 2 * time.Second,
			Now: clk.Now, Sleep: clk.Sleep, Events: ev, Mono: func() time.Duration { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		var moved, still *Conn
		for _, c := range tr.Conns {
			if c.Cookie == 1 {
				moved = c
			} else {
				still = c
			}
		}
		if noActivity {
			if len(still.Points) != 200 {
				t.Errorf("without activity: %d points of the quiet connection in 200 ticks, want 200", len(still.Points))
			}
			continue
		}
		// The first dump and two quiet samples, then one a second.
		if n := len(still.Points); n < 3 || n > 6 {
			t.Errorf("quiet connection read %d times in 2s, want 3 to 6", n)
		}
		var at time.Duration = -1
		for _, p := range moved.Points {
			if p.Acked > 0 {
				at = p.T
				break
			}
		}
		if at != 500*time.Millisecond {
			t.Errorf("the write was seen at %v, want 500ms (the tick after it)", at)
		}
	}
}
