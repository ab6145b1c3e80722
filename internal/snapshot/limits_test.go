// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
)

const header = `{"format":"tcpdoctor-snapshot","version":1}` + "\n"

// TestReaderLimits: each limit stops a line that passes it, with an error
// naming the line and the limit, and lets through one that does not.
func TestReaderLimits(t *testing.T) {
	sockets := `{"taken":"2026-11-22T05:00:00Z","sockets":[{"state":"LISTEN"},{"state":"LISTEN"},{"state":"LISTEN"}]}`
	longHead := `{"taken":"2026-11-22T05:00:00Z","host":"` + strings.Repeat("h", 300) + `"}`
	longSocket := `{"taken":"2026-11-22T05:00:00Z","sockets":[{"cc":"` + strings.Repeat("c", 300) + `"}]}`
	spaces := `{"taken":"2026-11-22T05:00:00Z","host":` + strings.Repeat(" ", 300) + `"h"}`
	first := `{"taken":"2026-11-22T04:59:00Z"}` + "\n"
	wide := Limits{Line: 1 << 20, Value: 1 << 20, Sockets: 100, GzipRatio: 400}
	for _, tc := range []struct {
		name, line string
		lim        Limits
		want       string
	}{
		{"line", sockets, Limits{Line: int64(len(sockets)) - 1, Value: 1 << 20, Sockets: 100}, fmt.Sprintf("line 3: the line is longer than the limit of %d bytes", len(sockets)-1)},
		{"head", longHead, Limits{Line: 1 << 20, Value: 200, Sockets: 100}, "line 3: one value (a socket, or the fields besides the sockets) is longer than the limit of 200 bytes"},
		{"socket", longSocket, Limits{Line: 1 << 20, Value: 200, Sockets: 100}, "line 3: socket 0: one value"},
		{"held-space", spaces, Limits{Line: 1 << 20, Value: 200, Sockets: 100}, "limit of 200 bytes"},
		{"sockets", sockets, Limits{Line: 1 << 20, Value: 1 << 20, Sockets: 2}, "line 3: more than the limit of 2 sockets"},
	} {
		in := header + first + tc.line + "\n"
		r, err := NewReaderLimits(strings.NewReader(in), tc.lim)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Next(); err != nil {
			t.Fatalf("%s: first line: %v", tc.name, err)
		}
		_, err = r.Next()
		var torn *jsonl.TornError
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &torn) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
		r, _ = NewReaderLimits(strings.NewReader(in), wide)
		r.Next()
		if s, err := r.Next(); err != nil || s == nil {
			t.Errorf("%s: under wide limits: %v", tc.name, err)
		}
	}
	// A zero limit is the default's.
	r0, err := NewReaderLimits(strings.NewReader(header+sockets+"\n"), Limits{Value: 1 << 20})
	if err != nil || r0.lim.Line != DefaultMaxLine || r0.lim.Sockets != DefaultMaxSockets || r0.lim.GzipRatio != DefaultGzipRatio || r0.lim.Value != 1<<20 {
		t.Errorf("zero limits: %+v %v", r0, err)
	}
	// Exactly at the limits is within them.
	r, _ := NewReaderLimits(strings.NewReader(header+sockets+"\n"), Limits{Line: int64(len(sockets)), Value: 1 << 20, Sockets: 3})
	if s, err := r.Next(); err != nil || len(s.Sockets) != 3 {
		t.Errorf("a line at the limits: %v", err)
	}
}

// endless gives prefix, then n bytes of fill, then suffix, without
// holding them.
type endless struct {
	prefix, suffix string
	fill           byte
	n              int64
}

func (e *endless) Read(p []byte) (int, error) {
	if e.prefix != "" {
		k := copy(p, e.prefix)
		e.prefix = e.prefix[k:]
		return k, nil
	}
	if e.n > 0 {
		k := int(min(int64(len(p)), e.n))
		for i := range p[:k] {
			p[i] = e.fill
		}
		e.n -= int64(k)
		return k, nil
	}
	if e.suffix != "" {
		k := copy(p, e.suffix)
		e.suffix = e.suffix[k:]
		return k, nil
	}
	return 0, io.EOF
}

// TestReaderMemoryBounded: with the default limits a line holding one
// value twice DefaultMaxValue long, plain or as a gzip bomb, is refused
// before its memory is spent.
func TestReaderMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 130 MB")
	}
	const n = 2*DefaultMaxValue + 1<<20
	line := func() io.Reader {
		return &endless{prefix: header + `{"taken":"2026-11-22T05:00:00Z","host":"`, fill: 'a', n: n, suffix: "\"}\n"}
	}
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
	io.Copy(zw, line())
	zw.Close()
	for name, in := range map[string]func() io.Reader{
		"plain": line,
		"gzip":  func() io.Reader { return bytes.NewReader(z.Bytes()) },
	} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, err := ReadAll(in())
		runtime.ReadMemStats(&after)
		grew := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %v in %v, %d MiB allocated", name, err, time.Since(start), grew>>20)
		if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "limit") {
			t.Errorf("%s: err %v, want a limit error on line 2", name, err)
		}
		if grew > 512<<20 {
			t.Errorf("%s: %d MiB allocated reading a %d MiB line", name, grew>>20, n>>20)
		}
	}
}

// TestReaderTornLastLine: the input ending inside the last line is a
// *jsonl.TornError after the complete snapshots; a damaged line before the end
// is another error.
func TestReaderTornLastLine(t *testing.T) {
	a, b := sample(), sample()
	b.Taken = a.Taken.Add(time.Second)
	whole := written(t, a, b).String()
	last := whole[strings.LastIndex(whole[:len(whole)-1], "\n")+1:]
	partial := last[:len(last)/2]
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(whole + partial))
	zw.Flush() // no end marker: the stream is cut
	for name, in := range map[string][]byte{
		"plain":     []byte(whole + partial),
		"gzip":      z.Bytes(),
		"gzip-cut":  z.Bytes()[:z.Len()-3],
		"first-key": []byte(whole + `{"taken":"2026-11-22T05:00:09Z","sock`),
		"open":      []byte(whole + "{"),
	} {
		got, err := ReadAll(bytes.NewReader(in))
		var torn *jsonl.TornError
		if len(got) != 2 || !errors.As(err, &torn) || torn.Line != 4 || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %d snapshots, err %v; want 2 and line 4 torn", name, len(got), err)
		}
	}
	for name, in := range map[string]string{
		"middle":      whole + partial + "\n" + last,
		"middle-last": whole + partial + "\n",
		"bad-end":     whole + `{"taken":12}`,
	} {
		got, err := ReadAll(strings.NewReader(in))
		var torn *jsonl.TornError
		if err == nil || errors.As(err, &torn) || !strings.Contains(err.Error(), "line 4") || got != nil {
			t.Errorf("%s: %d snapshots, err %v; want an error on line 4", name, len(got), err)
		}
	}
	// A complete last line without its newline is complete.
	if got, err := ReadAll(strings.NewReader(strings.TrimSuffix(whole, "\n"))); err != nil || len(got) != 2 {
		t.Errorf("no final newline: %d snapshots, err %v", len(got), err)
	}
}

// TestReaderTimeOrder: a namespace's samples must follow each other in
// time, so that every window is positive.
func TestReaderTimeOrder(t *testing.T) {
	line := func(ns, taken string) string {
		return `{"taken":"` + taken + `","netns":{"name":"` + ns + `"}}` + "\n"
	}
	ok := header + line("a", "2026-11-22T05:00:00Z") + line("b", "2026-11-22T05:00:00Z") + line("a", "2026-11-22T05:00:00.000000001Z") + line("b", "1999-01-01T00:00:00Z")
	if _, err := ReadAll(strings.NewReader(ok[:strings.LastIndex(ok[:len(ok)-1], "\n")+1])); err != nil {
		t.Errorf("namespaces in order: %v", err)
	}
	for name, tc := range map[string]struct{ in, want string }{
		"equal":    {header + line("a", "2026-11-22T05:00:00Z") + line("a", "2026-11-22T05:00:00Z"), "line 3: netns \"a\": taken 2026-11-22T05:00:00Z, not after its previous sample's 2026-11-22T05:00:00Z (line 2)"},
		"reversed": {ok, "line 5: netns \"b\": taken 1999-01-01T00:00:00Z, not after"},
		"too-far":  {header + line("a", "1700-01-01T00:00:00Z") + line("a", "2026-11-22T05:00:00Z"), "line 3: netns \"a\": taken 2026-11-22T05:00:00Z, too far after"},
		"no-time":  {header + line("a", "0001-01-01T00:00:00Z"), "line 2: snapshot has no \"taken\" time"},
	} {
		if _, err := ReadAll(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
	}
}

// TestDefaultLimitsFitRecordings: a line of DefaultMaxSockets sockets as
// the writer writes them, every number at its largest, with the fields
// besides them at the held limit, is within DefaultMaxLine; and a
// repetitive recording compresses well under DefaultGzipRatio.
func TestDefaultLimitsFitRecordings(t *testing.T) {
	sk := sample().Sockets[0]
	sk.Family, sk.CC = 10, CCOf("cubic0123456789")
	sk.Local = EndpointOf(netip.MustParseAddrPort("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"))
	sk.Remote = sk.Local
	sk.RecvQ, sk.SendQ, sk.UID, sk.Inode, sk.IfIndex, sk.Expires = math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32
	sk.Cookie, sk.Timer, sk.Retrans = math.MaxUint64, math.MaxUint8, math.MaxUint8
	lock := uint8(3)
	sk.BufLock, sk.Pids = FlagsOf(lock), PidsOf(4194304, 4194303, 4194302, 4194301)
	ti := new(TCPInfo)
	v := reflect.ValueOf(ti).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(math.MaxUint64 >> (64 - 8*f.Type().Size()))
		case reflect.Bool:
			f.SetBool(true)
		}
	}
	sk.Info = TCPOf(ti)
	sk.Mem = &MemInfo{math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32}
	worst := int64(len(sk.AppendJSON(nil))) + 1 // and its comma
	typical := len(sample().Sockets[0].AppendJSON(nil))
	t.Logf("a socket: %d bytes (sample), %d with every number at its largest", typical, worst)
	if need := DefaultMaxSockets*worst + DefaultMaxValue; need > DefaultMaxLine {
		t.Errorf("%d sockets of %d bytes need %d bytes, DefaultMaxLine is %d", DefaultMaxSockets, worst, need, DefaultMaxLine)
	}

	// Sockets differing as an idle host's do: ports, inodes, cookies, a
	// few counters. Lines under gzip's window, so each compresses
	// against the one before.
	var snaps []*Snapshot
	for i := range 2000 {
		s := sample()
		s.Taken = s.Taken.Add(time.Duration(i) * time.Second)
		s.Sockets = s.Sockets[:1]
		s.Sockets[0].Local = EndpointFrom(s.Sockets[0].Local.Addr(), uint16(40000+i%20))
		s.Sockets[0].Inode, s.Sockets[0].Cookie = uint32(7+i%20), uint64(9+i%20)
		s.Counters["TcpExt.ListenOverflows"] = int64(i)
		snaps = append(snaps, s)
	}
	plain := written(t, snaps...).Bytes()
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	zw.Write(plain)
	zw.Close()
	ratio := len(plain) / z.Len()
	t.Logf("a repetitive recording: %d bytes, %d gzipped: %d times", len(plain), z.Len(), ratio)
	if ratio*2 > DefaultGzipRatio {
		t.Errorf("a recording compresses %d times: DefaultGzipRatio %d leaves too little room", ratio, DefaultGzipRatio)
	}
}
