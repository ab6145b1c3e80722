// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
)

func sample() *Snapshot {
	sh := uint8(1)
	return &Snapshot{
		Taken: time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC),
		Netns: Netns{Name: "host", Inode: 4026531840},
		Sockets: []Socket{{
			Family: 2, State: Established,
			Local:  EndpointOf(netip.MustParseAddrPort("198.18.1.2:40000")),
			Remote: EndpointOf(netip.MustParseAddrPort("198.18.2.2:80")),
			Inode:  7, Cookie: 9, Shutdown: FlagsOf(sh),
			Info: TCPOf(&TCPInfo{Len: SizeKnown, RTT: 20000, SndCwnd: 10, BusyTime: 5}),
			Mem:  &MemInfo{Sndbuf: 32768},
			Pids: PidsOf(42),
		}, {Family: 10, State: TimeWait, Local: EndpointOf(netip.MustParseAddrPort("[::1]:5")), Remote: EndpointOf(netip.MustParseAddrPort("[::1]:6"))}},
		Counters: map[string]int64{"TcpExt.ListenOverflows": 3, "Tcp.MaxConn": -1},
		Sysctls:  map[string]string{"net.core.somaxconn": "4096"},
		Procs:    map[int]*Proc{42: {Pid: 42, Command: "java", FDs: 10}},
		Errors:   []SourceError{{Source: SourceOwners, Err: "partial"}},
	}
}

// written is a snapshot file holding snaps, in order.
func written(t *testing.T, snaps ...*Snapshot) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	return &buf
}

func TestRoundTrip(t *testing.T) {
	in := sample()
	later := sample()
	later.Taken = in.Taken.Add(time.Second)
	buf := written(t, in, later)
	for _, compress := range []bool{false, true} {
		data := buf.Bytes()
		if compress {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(data)
			zw.Close()
			data = z.Bytes()
		}
		got, err := ReadAll(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("read %d snapshots", len(got))
		}
		s := got[0]
		var tb TCPInfo
		ti := s.Sockets[0].TCP(&tb)
		if !s.Taken.Equal(in.Taken) || s.Sockets[0].Local != in.Sockets[0].Local || s.Sockets[0].State != Established ||
			ti == nil || ti.RTT != 20000 || ti.Len != SizeKnown || s.Sockets[0].Shutdown.Bits() != 1 ||
			s.Sockets[1].State != TimeWait || s.Sockets[1].HasTCP() || s.Procs[42].Command != "java" {
			t.Errorf("round trip changed the snapshot: %+v", s)
		}
		if v, ok := s.Counter("Tcp.MaxConn"); !ok || v != -1 {
			t.Errorf("negative counter lost: %v %v", v, ok)
		}
		if _, ok := s.Counter("TcpExt.TCPWantZeroWindowAdv"); ok {
			t.Error("absent counter present")
		}
		if v, ok := s.SysctlInt("net.core.somaxconn"); !ok || v != 4096 {
			t.Errorf("sysctl %v %v", v, ok)
		}
	}
}

func TestReaderErrors(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"empty":     {"", "empty file"},
		"foreign":   {`{"a":1}`, "not a tcpdoctor snapshot file"},
		"binary":    {"\x00\x01\x02", "not a tcpdoctor snapshot file"},
		"future":    {`{"format":"tcpdoctor-snapshot","version":7}`, "version 7 not supported"},
		"no-snaps":  {`{"format":"tcpdoctor-snapshot","version":1}` + "\n", "no snapshots"},
		"truncated": {`{"format":"tcpdoctor-snapshot","version":1}` + "\n" + `{"taken":"2026-11-22T05:00:00Z","sockets":[{"fam`, "line 2"},
		"no-time":   {`{"format":"tcpdoctor-snapshot","version":1}` + "\n{}\n", "no \"taken\""},
		"bad-state": {`{"format":"tcpdoctor-snapshot","version":1}` + "\n" + `{"taken":"2026-11-22T05:00:00Z","sockets":[{"state":"NAPPING"}]}`, "unknown tcp state"},
		"bad-gzip":  {"\x1f\x8b\x08garbage", "gzip"},
		"zone":      {`{"format":"tcpdoctor-snapshot","version":1}` + "\n" + `{"taken":"2026-11-22T05:00:00Z","sockets":[{"state":"ESTAB","local":"[fe80::1%eth0]:80"}]}`, "line 2: socket 0: snapshot: a socket address with a zone"},
		"bad-addr":  {`{"format":"tcpdoctor-snapshot","version":1}` + "\n" + `{"taken":"2026-11-22T05:00:00Z","sockets":[{"state":"ESTAB","remote":"1.2.3.4"}]}`, "line 2"},
		"bad-pids":  {`{"format":"tcpdoctor-snapshot","version":1}` + "\n" + `{"taken":"2026-11-22T05:00:00Z","sockets":[{"state":"ESTAB","pids":[1,"x"]}]}`, "line 2"},
		"bad-flags": {`{"format":"tcpdoctor-snapshot","version":1}` + "\n" + `{"taken":"2026-11-22T05:00:00Z","sockets":[{"state":"ESTAB","buf_lock":300}]}`, "line 2"},
	} {
		_, err := ReadAll(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to mention %q", name, err, tc.want)
		}
	}
	_, err := ReadAll(strings.NewReader(`{"a":1}`))
	if !errors.Is(err, ErrNotSnapshot) {
		t.Errorf("foreign file error does not wrap ErrNotSnapshot: %v", err)
	}
}

func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, "fuzz")
	w.Write(sample())
	f.Add(buf.Bytes())
	whole := buf.String()
	f.Add([]byte(whole + whole[len(header):len(whole)-40])) // a torn last line
	f.Add([]byte(whole + whole[len(header):]))              // the same time twice
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(buf.Bytes())
	zw.Write(buf.Bytes()[len(header) : buf.Len()-9])
	zw.Flush()
	f.Add(z.Bytes()) // a gzip stream cut inside a line
	f.Add([]byte(header + `{"taken":"2026-11-22T05:00:00Z","host":"` + strings.Repeat("h", 600) + `"}` + "\n"))
	f.Add([]byte(header + `{"taken":"2026-11-22T05:00:00Z","sockets":[{},{},{},{},{},{},{},{},{}]}` + "\n"))
	f.Add([]byte(`{"format":"tcpdoctor-snapshot","version":1}` + "\n{\"taken\":\"2026-11-22T05:00:00Z\"}\n"))
	f.Add([]byte("\x1f\x8b"))
	small := Limits{Line: 1 << 10, Value: 256, Sockets: 4, GzipRatio: 400}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := -1
		for _, lim := range []Limits{small, DefaultLimits()} {
			r, err := NewReaderLimits(bytes.NewReader(data), lim)
			if err != nil {
				return
			}
			last := map[string]time.Time{}
			i := 0
			for ; i < 1000; i++ {
				s, err := r.Next()
				var torn *jsonl.TornError
				if errors.As(err, &torn) && (torn.Line < 2 || !errors.Is(err, io.ErrUnexpectedEOF)) {
					t.Fatalf("torn line %d: %v", torn.Line, err)
				}
				if err != nil {
					if !errors.Is(err, io.EOF) && err.Error() == "" {
						t.Fatal("empty error")
					}
					break
				}
				if s.Taken.IsZero() || len(s.Sockets) > lim.Sockets {
					t.Fatalf("snapshot taken %v with %d sockets accepted", s.Taken, len(s.Sockets))
				}
				if p, ok := last[s.Netns.Name]; ok && !s.Taken.After(p) {
					t.Fatalf("window from %v to %v accepted", p, s.Taken)
				}
				last[s.Netns.Name] = s.Taken
			}
			// Limits only stop reading early.
			if n > i {
				t.Fatalf("%d snapshots within small limits, %d within the defaults", n, i)
			}
			n = i
		}
	})
}

func TestChronoShares(t *testing.T) {
	prev := &TCPInfo{Len: SizeKnown, BusyTime: 1_000_000, RwndLimited: 100_000, SndbufLimited: 0}
	cur := &TCPInfo{Len: SizeKnown, BusyTime: 3_000_000, RwndLimited: 1_100_000, SndbufLimited: 500_000}
	sh, ok := ChronoShares(prev, cur, 4*time.Second)
	if !ok || sh.Busy != 2*time.Second || sh.Rwnd != time.Second || sh.Sndbuf != 500*time.Millisecond || sh.Cwnd != 500*time.Millisecond {
		t.Errorf("shares %+v ok %v", sh, ok)
	}
	if Frac(sh.Busy, sh.Window) != 0.5 {
		t.Errorf("busy fraction %v", Frac(sh.Busy, sh.Window))
	}
	old := &TCPInfo{Len: EndDeliveryRate}
	if _, ok := ChronoShares(old, cur, time.Second); ok {
		t.Error("shares from a kernel without chronographs")
	}
	if _, ok := ChronoShares(cur, prev, time.Second); ok {
		t.Error("shares from counters that went backwards")
	}
	if _, ok := ChronoShares(nil, cur, time.Second); ok {
		t.Error("shares without a previous sample")
	}
}

func TestStateNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want State
	}{{"ESTAB", Established}, {"established", Established}, {"time-wait", TimeWait}, {"TIME_WAIT", TimeWait}, {"close-wait", CloseWait}, {"listen", Listen}, {"syn-recv", SynRecv}} {
		if got, ok := ParseState(tc.in); !ok || got != tc.want {
			t.Errorf("ParseState(%q) = %v %v", tc.in, got, ok)
		}
	}
	if _, ok := ParseState("bogus"); ok {
		t.Error("bogus state parsed")
	}
	if State(99).String() != "UNKNOWN" {
		t.Error("out-of-range state")
	}
}

func TestReaderTruncatedIsNotEOF(t *testing.T) {
	in := `{"format":"tcpdoctor-snapshot","version":1}` + "\n" + `{"taken": 12` + "\n"
	r, err := NewReader(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Next()
	if err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a snapshot cut short: err %v, want a line 2 error that is not io.EOF", err)
	}
}

// TestReaderMatchesUnmarshal: streaming the sockets reads a line exactly
// as decoding it whole does (blank lines skipped, absent sockets nil).
func TestReaderMatchesUnmarshal(t *testing.T) {
	buf := written(t, sample())
	lines := strings.SplitAfter(buf.String(), "\n")
	extra := []string{
		`{"taken":"2026-11-22T05:00:01Z","netns":{"name":"x"}}`,
		`{"taken":"2026-11-22T05:00:02Z","sockets":[],"Sockets":null}`,
		`{"SOCKETS":[{"state":"LISTEN"}],"taken":"2026-11-22T05:00:03Z"}`,
	}
	in := lines[0] + lines[1] + "\n  \n" + strings.Join(extra, "\n") + "\n"
	got, err := ReadAll(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{strings.TrimSpace(lines[1])}
	want = append(want, extra...)
	if len(got) != len(want) {
		t.Fatalf("read %d snapshots, want %d", len(got), len(want))
	}
	for i, line := range want {
		var s Snapshot
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(&s)
		b, _ := json.Marshal(unpacked(got[i]))
		if !bytes.Equal(a, b) || (s.Sockets == nil) != (got[i].Sockets == nil) {
			t.Errorf("snapshot %d:\n got %s\nwant %s", i, b, a)
		}
	}
	bad := `{"format":"tcpdoctor-snapshot","version":1}` + "\n" + `{"taken":"2026-11-22T05:00:00Z"} {"taken":"2026-11-22T05:00:00Z"}` + "\n"
	if _, err := ReadAll(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("two values on a line: err %v", err)
	}
}

// TestWriterMatchesEncodingJSON: a written snapshot's line is what
// encoding/json makes of the snapshot, byte for byte, with the hand
// encoder's escapes, omitted fields and nil extras among its sockets.
func TestWriterMatchesEncodingJSON(t *testing.T) {
	in := sample()
	lock, zero := uint8(3), uint8(0)
	in.Sockets = append(in.Sockets, Socket{
		Family: 10, State: SynSent, CC: CCOf("bbr<\"\\\u2028\xff>"), Timer: 1, Expires: 200, Retrans: 2, IfIndex: 3,
		Local: EndpointOf(netip.AddrPortFrom(netip.MustParseAddr("fe80::1").WithZone("eth\"0"), 1)),
		Info:  TCPOf(&TCPInfo{Len: 104, DeliveryRateAppLimited: true, BytesAcked: 1 << 60}),
		Pids:  PidsOf(7, 9), BufLock: FlagsOf(lock), Shutdown: FlagsOf(zero),
	}, Socket{})
	buf := written(t, in)
	want, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	if len(lines) != 3 || lines[1] != string(want) {
		t.Errorf("written line differs from encoding/json:\n got %s\nwant %s", lines[1], want)
	}
}

// unpacked is s with its sockets' tcp_info in Info, for encoding/json,
// which does not see a Store's packed copies.
func unpacked(s *Snapshot) *Snapshot {
	out := *s
	if s.Sockets == nil {
		return &out
	}
	out.Sockets = make([]Socket, len(s.Sockets))
	for i := range s.Sockets {
		out.Sockets[i] = s.Sockets[i]
		if ti := s.Sockets[i].TCP(new(TCPInfo)); ti != nil {
			out.Sockets[i].Info = TCPOf(ti)
		}
	}
	return &out
}
