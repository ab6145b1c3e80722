// SPDX-License-Identifier: Apache-2.0

// Package jsonl is the file kit of tcpdoctor's JSON-lines formats:
// snapshot files (docs/snapshot-format.md), trace recordings
// (docs/trace.md) and history segments (docs/history.md). It holds the
// header of the formats that name themselves, the line reader (gzip
// read transparently, each line bounded, a last line the input ends
// inside told apart from a damaged one: *TornError) and the line writer.
package jsonl

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

// Header is the first line of a snapshot file or a history segment.
type Header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Tool    string `json:"tool,omitempty"`
	// Build is the tcpdoctor that wrote the file, when it knew.
	Build *version.Info `json:"build,omitempty"`
}

// maxHeader bounds a header line.
const maxHeader = 1 << 16

// ReadHeader reads the first line as the header of format, of a version
// from 1 to max. A file that does not start with such a header is an
// error wrapping notFormat; one of a later version is an error naming
// both versions.
func (r *Reader) ReadHeader(format string, max int, notFormat error) (Header, error) {
	var h Header
	l, err := r.Next()
	var torn *TornError
	switch {
	case errors.Is(err, io.EOF):
		return h, fmt.Errorf("empty file: %w", notFormat)
	case errors.As(err, &torn): // no line before it: not torn, damaged
		return h, &ReadError{Line: 1, Err: torn.Err}
	case err != nil:
		return h, err
	}
	b, err := io.ReadAll(io.LimitReader(l, maxHeader))
	if err != nil {
		return h, fmt.Errorf("line 1: %w", err)
	}
	if json.Unmarshal(b, &h) != nil || h.Format != format {
		return h, fmt.Errorf("line 1: no %q header: %w", format, notFormat)
	}
	if h.Version < 1 || h.Version > max {
		return h, fmt.Errorf("format version %d not supported (this build reads 1..%d)", h.Version, max)
	}
	return h, nil
}

// TornError is a last line the input ends inside, as a writer stopped
// mid-write (killed, disk full) leaves it: every line before it is
// complete. Readers of recordings drop it and say so.
type TornError struct {
	Line int   // the incomplete line
	Err  error // what reading it met: an unexpected end
}

func (e *TornError) Error() string {
	return fmt.Sprintf("line %d is incomplete (the file ends inside it): %v", e.Line, e.Err)
}

func (e *TornError) Unwrap() error { return e.Err }

// LimitError is a line, or what a decoder holds of it at once, longer
// than its limit.
type LimitError struct {
	What  string // "the line", or what Options.HeldName says
	Limit int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s is longer than the limit of %d bytes", e.What, e.Limit)
}

// ReadError is a line the input could not be read for: its reader's own
// error, or a limit (*LimitError).
type ReadError struct {
	Line int
	Err  error
}

func (e *ReadError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *ReadError) Unwrap() error { return e.Err }

// Options say how a Reader reads.
type Options struct {
	// MaxLine bounds the bytes of one line, decompressed.
	MaxLine int64
	// MaxHeld, when set, bounds the bytes of a line past its mark
	// (Line.Mark): what a streaming decoder holds at once. HeldName
	// names that in the error.
	MaxHeld  int64
	HeldName string
	// GzipRatio, when set, bounds the decompressed bytes per compressed
	// byte of a gzip input, once GzipFloor bytes came out.
	GzipRatio, GzipFloor int64
	// Gzip: the input must be gzip.
	Gzip bool
	// Growing: the input may be a gzip stream still being appended to
	// (flushed after whole lines, no trailer yet): one that ends after a
	// whole line ends there without error. Only its first gzip member is
	// read.
	Growing bool
}

// Reader reads JSON lines, gunzipping its input when it starts with
// gzip's magic bytes.
type Reader struct {
	br   *bufio.Reader
	o    Options
	line int
	cur  *Line
}

// NewReader reads r as o says.
func NewReader(r io.Reader, o Options) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); o.Gzip || len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		in := &countReader{r: br}
		gz, err := gzip.NewReader(in)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		gz.Multistream(!o.Growing)
		var z io.Reader = gz
		if o.GzipRatio > 0 {
			z = &ratioReader{r: gz, in: in, ratio: o.GzipRatio, floor: o.GzipFloor}
		}
		br = bufio.NewReaderSize(z, 1<<16)
	}
	return &Reader{br: br, o: o}, nil
}

// Line is the number of the line Next returned last.
func (r *Reader) Line() int { return r.line }

// Next returns the next line as a stream, or io.EOF after the last one.
// The line before it is discarded if it was not read to its end. A gzip
// stream cut after a whole line is a *TornError for the line after it
// (unless Options.Growing).
func (r *Reader) Next() (*Line, error) {
	if r.cur != nil && !r.cur.done && r.cur.err == nil {
		if _, err := io.Copy(io.Discard, r.cur); err != nil {
			return nil, &ReadError{Line: r.line, Err: err}
		}
	}
	if _, err := r.br.Peek(1); err != nil {
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF) && r.o.Growing:
			return nil, io.EOF
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, &TornError{Line: r.line + 1, Err: err}
		}
		return nil, &ReadError{Line: r.line + 1, Err: err}
	}
	r.line++
	r.cur = &Line{br: r.br, o: &r.o, n: r.line}
	return r.cur, nil
}

// Decode decodes the next line that is not blank into v, or returns
// io.EOF after the last line. A last line the input ends inside (its
// JSON or the gzip stream ends before the value does) is a *TornError,
// a line that cannot be read a *ReadError; an error of the JSON is
// encoding/json's, for the caller to number with Line.
func (r *Reader) Decode(v any) error {
	for {
		l, err := r.Next()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(l)
		if err != nil {
			if torn := l.Torn(err); torn != nil {
				return torn
			}
			return &ReadError{Line: l.n, Err: err}
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if err := json.Unmarshal(b, v); err != nil {
			if l.ended && errors.Is(json.NewDecoder(bytes.NewReader(b)).Decode(new(json.RawMessage)), io.ErrUnexpectedEOF) {
				return &TornError{Line: l.n, Err: io.ErrUnexpectedEOF}
			}
			return err
		}
		return nil
	}
}

// Line reads one line, without its newline, then io.EOF. It gives at
// most Options.MaxLine bytes, and at most Options.MaxHeld past its mark.
type Line struct {
	br   *bufio.Reader
	o    *Options
	n    int   // its number
	got  int64 // bytes given
	mark int64
	done bool
	err  error // returned again: a decoder asks anew after some errors
	// ended: the input ended inside the line (no newline).
	ended bool
}

// Mark says that a streaming decoder has consumed the line's first n
// bytes: it holds only what comes after.
func (l *Line) Mark(n int64) { l.mark = n }

// MaxHeld is Options.MaxHeld, or MaxLine when none was set.
func (l *Line) MaxHeld() int64 {
	if l.o.MaxHeld > 0 {
		return l.o.MaxHeld
	}
	return l.o.MaxLine
}

// HeldErr is the error of a value past Options.MaxHeld.
func (l *Line) HeldErr() error { return &LimitError{What: l.o.HeldName, Limit: l.MaxHeld()} }

// Torn is a *TornError when err, met decoding the line, is an
// unexpected end and the input ended inside the line; otherwise nil.
func (l *Line) Torn(err error) error {
	if l.ended && errors.Is(err, io.ErrUnexpectedEOF) {
		return &TornError{Line: l.n, Err: err}
	}
	return nil
}

func (l *Line) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	if l.done {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if l.br.Buffered() == 0 {
		if _, err := l.br.Peek(1); err != nil {
			l.done = true
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				l.ended = true
			}
			if errors.Is(err, io.EOF) {
				return 0, io.EOF // the last line has no newline
			}
			l.err = err
			return 0, err
		}
	}
	room := l.o.MaxLine - l.got
	if l.o.MaxHeld > 0 {
		room = min(room, l.o.MaxHeld-(l.got-l.mark))
	}
	if room <= 0 {
		if b, _ := l.br.Peek(1); len(b) == 1 && b[0] == '\n' {
			_, _ = l.br.Discard(1) // the line ends at the limit
			l.done = true
			return 0, io.EOF
		}
		if l.o.MaxLine-l.got <= 0 {
			l.err = &LimitError{What: "the line", Limit: l.o.MaxLine}
		} else {
			l.err = l.HeldErr()
		}
		return 0, l.err
	}
	b, _ := l.br.Peek(int(min(int64(l.br.Buffered()), int64(len(p)), room)))
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		n := copy(p, b[:i])
		_, _ = l.br.Discard(i + 1)
		l.got += int64(n)
		l.done = true
		return n, nil
	}
	n := copy(p, b)
	_, _ = l.br.Discard(n)
	l.got += int64(n)
	return n, nil
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ratioReader is a gzip stream that stops once it has given more than
// ratio bytes per compressed byte read (in), past floor bytes.
type ratioReader struct {
	r            io.Reader
	in           *countReader
	ratio, floor int64
	out          int64
}

func (z *ratioReader) Read(p []byte) (int, error) {
	if z.out > z.floor && z.out > z.ratio*z.in.n {
		return 0, fmt.Errorf("gzip: %d bytes decompressed from %d, more than the limit of %d times the compressed size",
			z.out, z.in.n, z.ratio)
	}
	n, err := z.r.Read(p)
	z.out += int64(n)
	return n, err
}

// Writer writes JSON lines through a buffer, gzip-compressed or not.
// Lines reach the output at Flush.
type Writer struct {
	bw  *bufio.Writer
	enc *json.Encoder
	gz  *gzip.Writer
}

// NewWriter writes lines to w.
func NewWriter(w io.Writer) *Writer {
	bw := bufio.NewWriterSize(w, 1<<16)
	return &Writer{bw: bw, enc: json.NewEncoder(bw)}
}

// NewGzipWriter writes lines to w as one gzip stream of the level given;
// Close ends it.
func NewGzipWriter(w io.Writer, level int) (*Writer, error) {
	gz, err := gzip.NewWriterLevel(w, level)
	if err != nil {
		return nil, err
	}
	jw := NewWriter(gz)
	jw.gz = gz
	return jw, nil
}

// Encode writes v as one line, as encoding/json's Encoder does.
func (w *Writer) Encode(v any) error { return w.enc.Encode(v) }

// Write writes part of a line: a writer that streams a long line writes
// it in parts and ends it with a newline.
func (w *Writer) Write(p []byte) (int, error) { return w.bw.Write(p) }

// WriteString is Write of a string.
func (w *Writer) WriteString(s string) (int, error) { return w.bw.WriteString(s) }

// WriteByte is Write of one byte.
func (w *Writer) WriteByte(c byte) error { return w.bw.WriteByte(c) }

// Flush puts out the lines written so far; a gzip stream is flushed too,
// so a reader of the output reads them at once.
func (w *Writer) Flush() error {
	err := w.bw.Flush()
	if err == nil && w.gz != nil {
		err = w.gz.Flush()
	}
	return err
}

// Close flushes, and ends a gzip stream with its trailer.
func (w *Writer) Close() error {
	err := w.bw.Flush()
	if err == nil && w.gz != nil {
		err = w.gz.Close()
	}
	return err
}
