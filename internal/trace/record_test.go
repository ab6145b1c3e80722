// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/sockdiag"
)

func TestRoundTrip(t *testing.T) {
	tr, _ := pageTrace()
	var buf bytes.Buffer
	if err := WriteAll(&buf, tr); err != nil {
		t.Fatal(err)
	}
	back, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Conns) != 2 || len(back.Conns[1].Points) != len(tr.Conns[1].Points) || back.Conns[1].Points[3] != tr.Conns[1].Points[3] {
		t.Fatalf("round trip lost data: %+v", back.Conns)
	}
	if back.Header.Interval != tr.Header.Interval || !back.Header.Started.Equal(tr.Header.Started) {
		t.Errorf("header %+v, want %+v", back.Header, tr.Header)
	}
}

func TestReadErrors(t *testing.T) {
	for _, c := range []struct {
		in   string
		want error
	}{
		{"", ErrNoHeader},
		{`{"p":{"t":1,"c":1}}`, ErrNoHeader},
		{`{"header":{"trace":1,"interval_ns":10000000}}` + "\n" + `{"p":{"t":1,"c":7}}`, ErrFormat},
		{`{"header":{"trace":3,"interval_ns":10000000}}`, ErrFormat},
		{`{"header":{"trace":1,"interval_ns":10000000}}` + "\n" + `{"conn":{"id":1}}` + "\n" + `{"p":{"t":5,"c":1}}` + "\n" + `{"p":{"t":4,"c":1}}`, ErrFormat},
		{`{"header":{"trace":1,"interval_ns":10000000}}` + "\nnot json", ErrFormat},
	} {
		if _, err := Read(strings.NewReader(c.in)); !errors.Is(err, c.want) {
			t.Errorf("%q: %v, want %v", c.in, err, c.want)
		}
	}
	// A snapshot file given to trace --from: the error says what reads it.
	_, err := Read(strings.NewReader(`{"format":"tcpdoctor-snapshot","version":1}` + "\n"))
	if !errors.Is(err, ErrNoHeader) || !strings.Contains(err.Error(), "check --from and sockets --from read record's snapshots") {
		t.Errorf("a snapshot file: %v", err)
	}
}

// TestReadTornAndTimes: a last line the file ends inside is dropped as a
// *jsonl.TornError with what came before; a damaged line before the
// end, two points of a connection at one time and an over-long line are
// errors naming the line.
func TestReadTornAndTimes(t *testing.T) {
	head := `{"header":{"trace":2,"interval_ns":10000000}}` + "\n" + `{"conn":{"id":1}}` + "\n" + `{"p":{"t":5,"c":1,"acked":1}}` + "\n"
	for _, cut := range []string{`{"p":{"t":6,"c":1,"ack`, `{"p":`, `{`} {
		tr, err := Read(strings.NewReader(head + cut))
		var torn *jsonl.TornError
		if !errors.As(err, &torn) || torn.Line != 4 || tr == nil || len(tr.Conns) != 1 || len(tr.Conns[0].Points) != 1 {
			t.Errorf("%q cut: %v, %+v", cut, err, tr)
		}
	}
	for name, c := range map[string]struct{ in, want string }{
		"middle":   {head + `{"p":{"t":6,"c":1,"ack` + "\n" + `{"p":{"t":7,"c":1}}` + "\n", "malformed line 4"},
		"bad-end":  {head + `{"p":{"t":6,"c":1}}}`, "malformed line 4"},
		"same-t":   {head + `{"p":{"t":5,"c":1,"acked":9}}` + "\n", "malformed line 4: connection 1: point at 5ns, not after its previous one at 5ns"},
		"too-long": {head + `{"p":{"t":6,"c":1,"cc":"` + strings.Repeat("x", maxLine) + `"}}` + "\n", "malformed line 4: longer than the limit of 1048576 bytes"},
	} {
		_, err := Read(strings.NewReader(c.in))
		var torn *jsonl.TornError
		if err == nil || errors.As(err, &torn) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// FuzzRead: any input is read or refused with an error, never a panic,
// and what is read analyses and renders; a torn last line leaves what
// came before it. No connection has two points at one time.
func FuzzRead(f *testing.F) {
	tr, _ := pageTrace()
	var buf bytes.Buffer
	_ = WriteAll(&buf, tr)
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:buf.Len()-15]) // a torn last line
	f.Add([]byte(`{"header":{"trace":1,"interval_ns":1}}` + "\n" + `{"conn":{"id":1}}` + "\n" + `{"p":{"t":0,"c":1,"acked":5,"busy":9}}` + "\n" + `{"p":{"t":1,"c":1,"acked":1}}`))
	f.Add([]byte(`{"header":{"trace":2,"interval_ns":1}}` + "\n" + `{"conn":{"id":1}}` + "\n" + `{"p":{"t":3,"c":1}}` + "\n" + `{"p":{"t":3,"c":1}}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := Read(bytes.NewReader(b))
		var torn *jsonl.TornError
		if errors.As(err, &torn) {
			if tr == nil || torn.Line < 2 {
				t.Fatalf("torn line %d with trace %v", torn.Line, tr)
			}
		} else if err != nil {
			return
		}
		for _, c := range tr.Conns {
			for i := 1; i < len(c.Points); i++ {
				if c.Points[i].T <= c.Points[i-1].T {
					t.Fatalf("connection %d: point %d at %v after %v", c.ID, i, c.Points[i].T, c.Points[i-1].T)
				}
			}
		}
		ts := Segment(tr, SegmentOptions{})
		Judge(tr, ts, JudgeOptions{})
		for _, x := range ts {
			if x.Dur <= 0 || x.Split.App < 0 || x.Split.Congestion < 0 {
				t.Fatalf("bad transfer %+v", x)
			}
		}
		var out bytes.Buffer
		if err := WriteTable(&out, ts, 10); err != nil {
			t.Fatal(err)
		}
		if err := WriteHTML(&out, tr, ts, "fuzz"); err != nil {
			t.Fatal(err)
		}
	})
}

// fakeSource serves sockets from a table the test changes between ticks.
type fakeSource struct {
	socks   map[uint64]*snapshot.Socket
	dumps   int
	lookups int
}

func (f *fakeSource) Dump(o sockdiag.Options, fn func(*snapshot.Socket) error) error {
	f.dumps++
	for c := uint64(1); c <= uint64(len(f.socks)+5); c++ {
		if sk, ok := f.socks[c]; ok {
			cp := *sk
			if err := fn(&cp); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *fakeSource) Lookup(o sockdiag.Options, keys []sockdiag.Key, fn func(int, *snapshot.Socket) error) error {
	f.lookups++
	for i, k := range keys {
		if sk, ok := f.socks[k.Cookie]; ok {
			cp := *sk
			if err := fn(i, &cp); err != nil {
				return err
			}
		}
	}
	return nil
}

// fakeClock advances only when slept on, and by cost per Now call when
// told to, so dump costs are seen.
type fakeClock struct {
	now  time.Time
	cost time.Duration
	tick func(time.Duration)
}

func (c *fakeClock) Now() time.Time { c.now = c.now.Add(c.cost); return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	if c.tick != nil {
		c.tick(d)
	}
	return ctx.Err()
}

func TestRecordDiscoversAndLooksUp(t *testing.T) {
	src := &fakeSource{socks: map[uint64]*snapshot.Socket{}}
	mk := func(cookie uint64, acked uint64) *snapshot.Socket {
		return &snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: cookie, Inode: uint32(cookie),
			Local: snapshot.EndpointOf(netip.MustParseAddrPort("127.0.0.1:80")), Remote: snapshot.EndpointOf(netip.AddrPortFrom(netip.MustParseAddrPort("127.0.0.1:1").Addr(), uint16(cookie))),
			Info: snapshot.TCPOf(&snapshot.TCPInfo{Len: snapshot.SizeKnown, BytesAcked: acked})}
	}
	src.socks[1] = mk(1, 0)
	clk := &fakeClock{now: time.Unix(1000, 0)}
	ticks := 0
	clk.tick = func(time.Duration) {
		ticks++
		if sk := src.socks[1]; sk != nil {
			sk.TCP(nil).BytesAcked += 1000
		}
		if ticks == 50 {
			src.socks[2] = mk(2, 0)
		}
		if ticks == 80 {
			delete(src.socks, 1)
		}
	}
	var out bytes.Buffer
	tr, st, err := Record(context.Background(), Config{Source: src, Interval: 10 * time.Millisecond, Duration: time.Second,
		Now: clk.Now, Sleep: clk.Sleep, Sink: NewWriter(&out),
		Inodes: func() (map[uint32]bool, error) { return map[uint32]bool{1: true, 2: true}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if st.Ticks != 100 {
		t.Errorf("%d ticks in 1s at 100/s", st.Ticks)
	}
	// No cost seen: dumps run every tick.
	if src.dumps != 100 || src.lookups != 0 {
		t.Errorf("%d dumps %d lookups, want 100 0", src.dumps, src.lookups)
	}
	if len(tr.Conns) != 2 || len(tr.Conns[0].Points) != 80 || len(tr.Conns[1].Points) != 50 {
		t.Fatalf("conns %d, points %d %d", len(tr.Conns), len(tr.Conns[0].Points), len(tr.Conns[1].Points))
	}
	back, err := Read(&out)
	if err != nil || len(back.Conns) != 2 || len(back.Conns[0].Points) != 80 {
		t.Fatalf("recorded file: %v", err)
	}
	for _, j := range st.Jitter {
		if j != 0 {
			t.Fatalf("jitter %v on a fake clock", j)
		}
	}
}

// When a dump costs more than the share allows, ticks between dumps use
// lookups.
func TestRecordPacesDumps(t *testing.T) {
	src := &fakeSource{socks: map[uint64]*snapshot.Socket{1: {Family: 2, State: snapshot.Established, Cookie: 1, Info: snapshot.TCPOf(&snapshot.TCPInfo{})}}}
	clk := &fakeClock{now: time.Unix(1000, 0), cost: 150 * time.Microsecond}
	_, st, err := Record(context.Background(), Config{Source: src, Interval: 10 * time.Millisecond, Duration: time.Second,
		Now: clk.Now, Sleep: clk.Sleep, DumpShare: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	// Each dump is seen to cost 300 µs (a clock read stamps its sample,
	// another ends it): at 1 % one fits every 30 ms, so every third 10 ms
	// tick dumps and the rest look up.
	if src.dumps < 25 || src.dumps > 40 || src.lookups < 55 {
		t.Errorf("%d dumps, %d lookups of %d ticks", src.dumps, src.lookups, st.Ticks)
	}
}

func TestRecordStopsOnCancel(t *testing.T) {
	src := &fakeSource{socks: map[uint64]*snapshot.Socket{}}
	ctx, cancel := context.WithCancel(context.Background())
	clk := &fakeClock{now: time.Unix(1000, 0)}
	n := 0
	clk.tick = func(time.Duration) {
		if n++; n == 7 {
			cancel()
		}
	}
	_, st, err := Record(ctx, Config{Source: src, Interval: 10 * time.Millisecond, Now: clk.Now, Sleep: clk.Sleep})
	if err != nil || st.Ticks != 7 {
		t.Errorf("err %v after %d ticks, want nil after 7", err, st.Ticks)
	}
}

// A quiet connection is read every IdleEvery-th tick until it moves.
func TestRecordIdleEvery(t *testing.T) {
	sk := &snapshot.Socket{Family: 2, State: snapshot.Established, Cookie: 1, Info: snapshot.TCPOf(&snapshot.TCPInfo{Len: snapshot.SizeKnown})}
	src := &fakeSource{socks: map[uint64]*snapshot.Socket{1: sk}}
	clk := &fakeClock{now: time.Unix(1000, 0)}
	ticks := 0
	clk.tick = func(time.Duration) {
		if ticks++; ticks >= 50 {
			sk.TCP(nil).BytesAcked += 1000
		}
	}
	tr, st, err := Record(context.Background(), Config{Source: src, Interval: 10 * time.Millisecond, Duration: time.Second,
		Discover: time.Hour, IdleEvery: 10, Now: clk.Now, Sleep: clk.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	var quiet, moving int
	for _, p := range tr.Conns[0].Points {
		if p.T < 500*time.Millisecond {
			quiet++
		} else {
			moving++
		}
	}
	// Quiet: the dump, two samples to call it quiet, then one in ten.
	if quiet < 5 || quiet > 10 || moving < 48 || st.Ticks != 100 {
		t.Errorf("%d samples while quiet, %d while moving, of %d ticks", quiet, moving, st.Ticks)
	}
}

// The traced process ending ends the recording, keeping what was seen;
// a process missing at the start is an error.
func TestRecordProcessEnds(t *testing.T) {
	src := &fakeSource{socks: map[uint64]*snapshot.Socket{}}
	clk := &fakeClock{now: time.Unix(1000, 0)}
	calls := 0
	inodes := func() (map[uint32]bool, error) {
		if calls++; calls > 3 {
			return nil, errors.New("open /proc/42/fd: no such file or directory")
		}
		return map[uint32]bool{}, nil
	}
	_, st, err := Record(context.Background(), Config{Source: src, Interval: 10 * time.Millisecond, Duration: time.Second,
		Now: clk.Now, Sleep: clk.Sleep, Inodes: inodes})
	if err != nil || st.Ended == "" || st.Ticks != 4 {
		t.Errorf("err %v, ended %q after %d ticks", err, st.Ended, st.Ticks)
	}
	calls = 10
	if _, _, err := Record(context.Background(), Config{Source: src, Interval: 10 * time.Millisecond, Duration: time.Second,
		Now: clk.Now, Sleep: clk.Sleep, Inodes: inodes}); err == nil {
		t.Error("a process missing at the start: no error")
	}
}
