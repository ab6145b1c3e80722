// SPDX-License-Identifier: Apache-2.0

package jsonl

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
)

var errNotX = errors.New("not an x file")

const head = `{"format":"x","version":1,"tool":"t"}` + "\n"

// gz compresses s; flushed but without its trailer when open.
func gz(s string, open bool) []byte {
	var b bytes.Buffer
	w, _ := NewGzipWriter(&b, gzip.BestCompression)
	_, _ = w.WriteString(s)
	if open {
		_ = w.Flush()
	} else {
		_ = w.Close()
	}
	return b.Bytes()
}

type val struct {
	A int `json:"a"`
}

// readAll reads the header and every value; it returns the values
// before the first error and that error (nil at the end).
func readAll(in []byte, o Options) (Header, []int, error) {
	r, err := NewReader(bytes.NewReader(in), o)
	if err != nil {
		return Header{}, nil, err
	}
	h, err := r.ReadHeader("x", 2, errNotX)
	if err != nil {
		return h, nil, err
	}
	var out []int
	for {
		var v val
		err := r.Decode(&v)
		if errors.Is(err, io.EOF) {
			return h, out, nil
		}
		if err != nil {
			return h, out, err
		}
		out = append(out, v.A)
	}
}

// TestReader: plain and gzip read alike; a last line the input ends
// inside is a *TornError naming it, with the lines before it read; a
// damaged line followed by others, a line past the limit and a foreign
// header are errors, not torn.
func TestReader(t *testing.T) {
	body := head + `{"a":1}` + "\n\n" + `{"a":2}` + "\n"
	for _, in := range [][]byte{[]byte(body), gz(body, false)} {
		h, got, err := readAll(in, Options{MaxLine: 100})
		if err != nil || h.Tool != "t" || len(got) != 2 || got[1] != 2 {
			t.Fatalf("whole: %+v %v %v", h, got, err)
		}
	}
	o := Options{MaxLine: 100}
	torn := func(in []byte, line, n int) {
		t.Helper()
		_, got, err := readAll(in, o)
		var te *TornError
		if !errors.As(err, &te) || te.Line != line || len(got) != n || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: %v, %v; want line %d torn after %d values", in, got, err, line, n)
		}
	}
	torn([]byte(body+`{"a":`), 5, 2)
	torn(gz(body+`{"a":3`, false), 5, 2)
	whole := gz(body, false)
	torn(whole[:len(whole)-8], 5, 2) // the trailer cut off after whole lines
	for name, c := range map[string]struct {
		in   []byte
		o    Options
		want string
	}{
		"middle":  {[]byte(head + `{"a":` + "\n" + `{"a":2}` + "\n"), o, "unexpected end of JSON input"},
		"long":    {[]byte(head + `{"a":` + strings.Repeat(" ", 100) + "1}\n"), o, "line 2: the line is longer than the limit of 100 bytes"},
		"foreign": {[]byte(`{"format":"y","version":1}` + "\n"), o, `line 1: no "x" header: not an x file`},
		"future":  {[]byte(`{"format":"x","version":3}` + "\n"), o, "format version 3 not supported (this build reads 1..2)"},
		"empty":   {nil, o, "empty file: not an x file"},
		"cut":     {gz("", true), o, "line 1: unexpected EOF"},
		"plain":   {[]byte(body), Options{MaxLine: 100, Gzip: true}, "gzip: "},
	} {
		_, _, err := readAll(c.in, c.o)
		var te *TornError
		if err == nil || errors.As(err, &te) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	// A gzip stream still being written ends at its last whole line.
	open := Options{MaxLine: 100, Gzip: true, Growing: true}
	if _, got, err := readAll(gz(body, true), open); err != nil || len(got) != 2 {
		t.Errorf("growing: %v %v", got, err)
	}
	if _, got, err := readAll(gz(body+`{"a":3`, true), open); !errors.As(err, new(*TornError)) || len(got) != 2 {
		t.Errorf("growing, cut inside a line: %v %v", got, err)
	}
}

// TestHeld: a line is given up to MaxHeld bytes past its mark.
func TestHeld(t *testing.T) {
	r, _ := NewReader(strings.NewReader("0123456789\n"), Options{MaxLine: 100, MaxHeld: 4, HeldName: "a value"})
	l, _ := r.Next()
	p := make([]byte, 3)
	if n, err := io.ReadFull(l, p); n != 3 || err != nil {
		t.Fatal(n, err)
	}
	l.Mark(3)
	if b, err := io.ReadAll(l); string(b) != "3456" || err == nil || err.Error() != "a value is longer than the limit of 4 bytes" {
		t.Errorf("%q %v", b, err)
	}
}

// FuzzReader: any input is read or refused with an error, never a
// panic; a torn line is the last one, after the header (a header cut
// short is no header, not a torn file).
func FuzzReader(f *testing.F) {
	body := head + `{"a":1}` + "\n" + `{"a":2}` + "\n"
	f.Add([]byte(body), false)
	f.Add([]byte(body+`{"a":`), false)
	f.Add(gz(body, false), false)
	f.Add(gz(body, true), true)
	f.Add(gz(body+`{"a`, true), true)
	whole := gz(body, false)
	f.Add(whole[:len(whole)-8], false)
	f.Add([]byte(head+`{"a":`+strings.Repeat("9", 80)+"}\n"), false)
	f.Add([]byte("\x1f\x8b"), false)
	f.Add([]byte(`{"format":"x"`), false)
	f.Add(gz("", true), false)
	f.Fuzz(func(t *testing.T, in []byte, growing bool) {
		o := Options{MaxLine: 64, MaxHeld: 32, HeldName: "a value", GzipRatio: 50, GzipFloor: 1 << 10, Growing: growing}
		r, err := NewReader(bytes.NewReader(in), o)
		if err != nil {
			return
		}
		if _, err := r.ReadHeader("x", 2, errNotX); err != nil {
			if errors.As(err, new(*TornError)) {
				t.Fatalf("a header cut short is torn: %v", err)
			}
			return
		}
		for range 1000 {
			var v val
			err := r.Decode(&v)
			var te *TornError
			if errors.As(err, &te) {
				if te.Line < 2 || te.Line < r.Line() || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("torn line %d after line %d: %v", te.Line, r.Line(), err)
				}
				if err := r.Decode(&v); !errors.Is(err, io.EOF) && !errors.As(err, &te) {
					t.Fatalf("a line after a torn one: %v", err)
				}
				return
			}
			if err != nil {
				if err.Error() == "" {
					t.Fatal("empty error")
				}
				return
			}
		}
	})
}
