// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/tcpmodel"
)

// viewOf is the reflection-encoded form of a row: what `sockets --json`
// printed before the hand encoder, and the reference it must equal.
func viewOf(r *Row) view {
	v := view{Netns: r.Subject.Netns, Names: r.Subject.Workload.Names(), Socket: *r.Socket}
	if l := r.Limited; l != nil {
		v.Limited = &limitedView{WindowMS: float64(l.Window) / float64(time.Millisecond), Busy: l.Busy, Sndbuf: l.Sndbuf,
			Rwnd: l.Rwnd, Congestion: l.Congestion}
	}
	if r.Subject.HasPid {
		pid := r.Subject.Pid
		v.Pid = &pid
	}
	if r.Subject.HasCommand {
		c := r.Subject.Command
		v.Command = &c
	}
	return v
}

// rowOf is the row of sk in namespace netns, owned as sk.Pids says, with
// command when hasCommand (even with no owner: the encoder takes each
// member as it comes).
func rowOf(netns string, sk *snapshot.Socket, command string, hasCommand bool) Row {
	s := output.Subject{Netns: netns, Command: command, HasCommand: hasCommand}
	if sk.Pids.Len() > 0 {
		s.Pid, s.HasPid = sk.Pids.List()[0], true
	}
	return Row{Subject: s, Socket: sk}
}

// checkRow fails unless the hand encoder and encoding/json agree on r.
func checkRow(t *testing.T, r *Row) {
	t.Helper()
	want, err := json.Marshal(viewOf(r))
	if err != nil {
		t.Fatal(err)
	}
	got := appendJSON(nil, r)
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("hand encoder differs from encoding/json at byte %d:\n got %s\nwant %s", i, got[max(i-40, 0):], want[max(i-40, 0):])
	}
}

// randString mixes what JSON must escape: quotes, backslashes, control
// characters, HTML characters, U+2028/2029, other Unicode, invalid UTF-8.
func randString(rng *rand.Rand) string {
	pieces := []string{"a", "java", "\"", "\\", "\n", "\t", "\r", "\b", "\f", "\x00", "\x1f", "\x7f", "<", ">", "&",
		"\u2028", "\u2029", "é", "日本", "\U0001F600", "\xff", "\xc3", "\xe2\x80", " ", "/", "%"}
	n := rng.IntN(6)
	var b []byte
	for range n {
		b = append(b, pieces[rng.IntN(len(pieces))]...)
	}
	return string(b)
}

func randAddrPort(rng *rand.Rand) netip.AddrPort {
	port := uint16(rng.IntN(65536))
	switch rng.IntN(5) {
	case 0:
		return netip.AddrPort{}
	case 1:
		var a [4]byte
		for i := range a {
			a[i] = byte(rng.IntN(256))
		}
		return netip.AddrPortFrom(netip.AddrFrom4(a), port)
	case 2:
		return netip.AddrPortFrom(netip.AddrFrom16(netip.MustParseAddr("192.0.2.1").As16()), port)
	case 3:
		return netip.AddrPortFrom(netip.MustParseAddr("fe80::1").WithZone(randString(rng)+"x"), port)
	}
	var a [16]byte
	for i := range a {
		a[i] = byte(rng.IntN(256))
	}
	return netip.AddrPortFrom(netip.AddrFrom16(a), port)
}

func randFloat(rng *rand.Rand) float64 {
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return rng.Float64() * 1e-7
	case 2:
		return rng.Float64() * 1e25
	case 3:
		return float64(rng.IntN(2000))
	case 4:
		return math.Float64frombits(rng.Uint64() &^ (0x7ff << 52)) // tiny denormals and small values
	}
	return rng.Float64()
}

// fill sets every field of the struct v points at to a random value, so a
// field added to snapshot.Socket, TCPInfo or MemInfo and not to the hand
// encoder fails this test. A field of a kind it does not know fails it too.
func fill(t *testing.T, rng *rand.Rand, v reflect.Value) {
	t.Helper()
	switch v.Type() {
	case reflect.TypeFor[netip.AddrPort]():
		v.Set(reflect.ValueOf(randAddrPort(rng)))
		return
	case reflect.TypeFor[snapshot.State]():
		v.SetUint(uint64(rng.IntN(16)))
		return
	}
	zero := rng.IntN(4) == 0 // omitempty needs zeros too
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() { // not JSON's
				fill(t, rng, v.Field(i))
			}
		}
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if !zero {
			v.SetUint(rng.Uint64() >> rng.IntN(64))
		}
	case reflect.Int, reflect.Int64:
		if !zero {
			v.SetInt(rng.Int64N(1<<40) - 1<<39)
		}
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.String:
		if !zero {
			v.SetString(randString(rng))
		}
	case reflect.Pointer:
		if rng.IntN(3) > 0 {
			p := reflect.New(v.Type().Elem())
			fill(t, rng, p.Elem())
			v.Set(p)
		}
	case reflect.Slice:
		n := rng.IntN(4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(t, rng, s.Index(i))
		}
		v.Set(s)
	default:
		t.Fatalf("fill: no random value for %v: teach fill and appendJSON about it", v.Type())
	}
}

func TestSocketJSONMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var sk snapshot.Socket
		fill(t, rng, reflect.ValueOf(&sk).Elem())
		r := rowOf(randString(rng), &sk, randString(rng), rng.IntN(3) > 0)
		if rng.IntN(2) == 0 {
			var w snapshot.Workload
			fill(t, rng, reflect.ValueOf(&w).Elem())
			r.Subject.Workload = &w
		}
		if rng.IntN(2) == 0 {
			r.Limited = &tcpmodel.Limited{Window: time.Duration(randFloat(rng) * 1e6), Busy: randFloat(rng), Sndbuf: randFloat(rng),
				Rwnd: randFloat(rng), Congestion: randFloat(rng)}
		}
		checkRow(t, &r)
	}
}

// The printed array is valid JSON holding the rows, empty or not.
func TestSocketPrinterJSONArray(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		p := NewPrinter(w, Options{JSON: true})
		for i := range n {
			sk := snapshot.Socket{Inode: uint32(i), State: snapshot.Established}
			r := rowOf("ns", &sk, "", false)
			if err := p.Row(&r); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		var rows []map[string]any
		if err := json.Unmarshal(buf.Bytes(), &rows); err != nil || len(rows) != n {
			t.Fatalf("%d rows: got %d (%v):\n%s", n, len(rows), err, buf.Bytes())
		}
	}
}

// FuzzSocketJSON: for any strings and numbers, the hand encoder writes
// valid JSON equal to encoding/json's.
func FuzzSocketJSON(f *testing.F) {
	f.Add("host", "java", "bbr", uint64(1), uint32(2), 0.5, []byte{1, 2})
	f.Add("", "\xff<\u2028>", "\x00", uint64(0), uint32(0), 1e-9, []byte(nil))
	f.Add("ns\"\\", "a\tb", "cubic", ^uint64(0), ^uint32(0), 1e22, []byte{0xff})
	f.Fuzz(func(t *testing.T, netns, command, cc string, cookie uint64, q uint32, share float64, extra []byte) {
		if math.IsNaN(share) || math.IsInf(share, 0) {
			share = 0
		}
		rng := rand.New(rand.NewPCG(cookie, uint64(q)))
		var sk snapshot.Socket
		fill(t, rng, reflect.ValueOf(&sk).Elem())
		sk.CC, sk.Cookie, sk.RecvQ = snapshot.CCOf(cc), cookie, q
		if len(extra) > 0 {
			sk.Local = snapshot.EndpointOf(netip.AddrPortFrom(netip.MustParseAddr("fe80::1").WithZone(string(extra)), uint16(q)))
		}
		r := rowOf(netns, &sk, command, len(extra)%2 == 0)
		r.Limited = &tcpmodel.Limited{Window: time.Duration(share * 1e6), Busy: share, Sndbuf: -share, Rwnd: share / 3, Congestion: share * 7}
		got := appendJSON(nil, &r)
		if !json.Valid(got) {
			t.Fatalf("invalid JSON: %s", got)
		}
		checkRow(t, &r)
	})
}

// TestSocketPrinterAllocs: a row costs no allocation, in JSON and, once
// the table's columns are sized, in the table (docs/performance.md).
func TestSocketPrinterAllocs(t *testing.T) {
	sk := snapshot.Socket{State: snapshot.Established, Local: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.1:80")),
		Remote: snapshot.EndpointOf(netip.MustParseAddrPort("10.0.0.2:40000")), Pids: snapshot.PidsOf(42), Mem: &snapshot.MemInfo{Sndbuf: 87040, Rcvbuf: 131072}}
	lim := tcpmodel.Limited{Window: time.Second, Busy: 0.5, Sndbuf: 0.25, Rwnd: 0.25, Congestion: 0.5}
	r := rowOf("host", &sk, "nginx", true)
	r.Limited = &lim
	for _, asJSON := range []bool{false, true} {
		p := NewPrinter(bufio.NewWriter(io.Discard), Options{JSON: asJSON, Netns: true, Limited: true})
		for range tableLookAhead + 1 {
			if err := p.Row(&r); err != nil {
				t.Fatal(err)
			}
		}
		if n := testing.AllocsPerRun(200, func() { _ = p.Row(&r) }); n != 0 {
			t.Errorf("json %v: %.1f allocations a row, want 0", asJSON, n)
		}
	}
}
