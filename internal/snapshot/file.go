// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

// File format (docs/snapshot-format.md): JSON Lines. The first line is a
// Header; every further line is one Snapshot (one netns at one instant).
// A gzip-compressed file is read transparently.
const (
	FormatName    = "tcpdoctor-snapshot"
	FormatVersion = 1
)

// Header is the first line of a snapshot file.
type Header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Tool    string `json:"tool,omitempty"`
	// Build is the tcpdoctor that recorded the file, when it knew.
	Build *version.Info `json:"build,omitempty"`
}

// Writer writes a snapshot file.
type Writer struct {
	w *bufio.Writer
	// buf holds one socket's JSON at a time.
	buf []byte
}

// NewWriter writes the header and returns a Writer.
func NewWriter(w io.Writer, tool string) (*Writer, error) {
	return NewWriterHeader(w, Header{Tool: tool})
}

// NewWriterHeader writes h, with this format's name and version, as the
// header and returns a Writer.
func NewWriterHeader(w io.Writer, h Header) (*Writer, error) {
	h.Format, h.Version = FormatName, FormatVersion
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(h); err != nil {
		return nil, fmt.Errorf("snapshot: write header: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("snapshot: write header: %w", err)
	}
	return &Writer{w: bw}, nil
}

// Write appends one snapshot and flushes it, so a killed recorder leaves
// every completed sample readable. Sockets are encoded one at a time into
// one buffer (Socket.AppendJSON), so writing a million of them adds
// neither memory nor garbage to the snapshot's own size.
func (w *Writer) Write(s *Snapshot) error {
	head := *s
	head.Sockets = nil
	b, err := json.Marshal(&head)
	if err != nil {
		return fmt.Errorf("snapshot: write: %w", err)
	}
	const key = `"sockets":null`
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return fmt.Errorf("snapshot: write: no sockets field in %.40s", b)
	}
	w.w.Write(b[:i])
	w.w.WriteString(`"sockets":[`)
	for j := range s.Sockets {
		if j > 0 {
			w.w.WriteByte(',')
		}
		w.buf = s.Sockets[j].AppendJSON(w.buf[:0])
		w.w.Write(w.buf)
	}
	w.w.WriteByte(']')
	w.w.Write(b[i+len(key):])
	w.w.WriteByte('\n')
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("snapshot: write: %w", err)
	}
	return nil
}

// Reader reads a snapshot file one snapshot at a time. A snapshot's
// sockets are decoded one at a time from the stream: neither its line nor
// a tree of it is held, so reading costs about the snapshot's own size,
// and Limits bound that size.
type Reader struct {
	br     *bufio.Reader
	lim    Limits
	line   int
	Header Header
	// last is each namespace's previous sample: its time and line.
	last map[string]sampleAt
}

type sampleAt struct {
	taken time.Time
	line  int
}

// Limits bound what a Reader takes from a file. Past one it stops with an
// error naming the limit and the line, before the memory is spent.
type Limits struct {
	// Line bounds the bytes of one line, decompressed.
	Line int64
	// Value bounds the bytes held at once: one socket, or a snapshot's
	// fields other than its sockets together.
	Value int64
	// Sockets bounds the sockets of one snapshot.
	Sockets int
	// GzipRatio bounds the decompressed bytes per compressed byte of a
	// gzip file, once gzipFloor bytes came out.
	GzipRatio int64
}

// The default limits (docs/snapshot-format.md). A line of
// DefaultMaxSockets sockets, each as long as the writer writes one with
// every number at its largest, fits DefaultMaxLine with room for long pid
// lists. The largest value besides a socket is "procs". DefaultGzipRatio
// lies between a repetitive recording's ratio and gzip's own limit of
// about 1,030. TestDefaultLimitsFitRecordings prints a socket's length
// and that ratio, and checks both.
const (
	DefaultMaxSockets = 4 << 20
	DefaultMaxLine    = int64(DefaultMaxSockets) * 4 << 10
	DefaultMaxValue   = 64 << 20
	DefaultGzipRatio  = 400
	gzipFloor         = 64 << 20
)

// DefaultLimits are the limits NewReader applies.
func DefaultLimits() Limits {
	return Limits{Line: DefaultMaxLine, Value: DefaultMaxValue, Sockets: DefaultMaxSockets, GzipRatio: DefaultGzipRatio}
}

// ErrNotSnapshot is wrapped by errors for files that are not snapshot files.
var ErrNotSnapshot = errors.New("not a tcpdoctor snapshot file")

// TornError is a last line the input ends inside, as a recorder stopped
// mid-write (killed, disk full) leaves it: every line before it is
// complete. Readers of recordings drop it and say so. Trace files
// (internal/trace) use it too, so its text names no format.
type TornError struct {
	Line int   // the incomplete line
	Err  error // what reading it met: an unexpected end
}

func (e *TornError) Error() string {
	return fmt.Sprintf("line %d is incomplete (the file ends inside it): %v", e.Line, e.Err)
}

func (e *TornError) Unwrap() error { return e.Err }

// maxHeader bounds the header line that is read before it is judged.
const maxHeader = 1 << 16

// NewReader checks the header and returns a Reader with DefaultLimits.
func NewReader(r io.Reader) (*Reader, error) { return NewReaderLimits(r, DefaultLimits()) }

// NewReaderLimits is NewReader with other limits; a zero field is the
// default's.
func NewReaderLimits(r io.Reader, lim Limits) (*Reader, error) {
	def := DefaultLimits()
	lim.Line = cmp.Or(lim.Line, def.Line)
	lim.Value = cmp.Or(lim.Value, def.Value)
	lim.Sockets = cmp.Or(lim.Sockets, def.Sockets)
	lim.GzipRatio = cmp.Or(lim.GzipRatio, def.GzipRatio)
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		in := &countReader{r: br}
		gz, err := gzip.NewReader(in)
		if err != nil {
			return nil, fmt.Errorf("snapshot: gzip: %w", err)
		}
		br = bufio.NewReaderSize(&ratioReader{r: gz, in: in, ratio: lim.GzipRatio, floor: gzipFloor}, 1<<16)
	}
	rd := &Reader{br: br, lim: lim, last: map[string]sampleAt{}}
	if _, err := br.Peek(1); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("snapshot: empty file: %w", ErrNotSnapshot)
		}
		return nil, fmt.Errorf("snapshot: line 1: %w", err)
	}
	rd.line = 1
	lr := &lineReader{br: br, lim: Limits{Line: maxHeader, Value: maxHeader}}
	dec := json.NewDecoder(lr)
	if err := dec.Decode(&rd.Header); err != nil || rd.Header.Format != FormatName {
		return nil, fmt.Errorf("snapshot: line 1: no %q header: %w", FormatName, ErrNotSnapshot)
	}
	if rd.Header.Version < 1 || rd.Header.Version > FormatVersion {
		return nil, fmt.Errorf("snapshot: format version %d not supported (this build reads 1..%d)", rd.Header.Version, FormatVersion)
	}
	if _, err := io.Copy(io.Discard, lr); err != nil {
		return nil, fmt.Errorf("snapshot: line 1: %w", err)
	}
	return rd, nil
}

// Next returns the next snapshot, or io.EOF after the last one. A last
// line the input ends inside is a *TornError; a damaged line before the
// end is an error. Each namespace's samples must be in time order.
func (r *Reader) Next() (*Snapshot, error) {
	for {
		if _, err := r.br.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, &TornError{Line: r.line + 1, Err: err} // a gzip stream cut after a line
			}
			return nil, fmt.Errorf("snapshot: line %d: %w", r.line+1, err)
		}
		r.line++
		lr := &lineReader{br: r.br, lim: r.lim}
		s, err := decodeLine(lr)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the line ended inside the snapshot
		}
		if err != nil {
			if lr.ended && errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, &TornError{Line: r.line, Err: err}
			}
			return nil, fmt.Errorf("snapshot: line %d: %w", r.line, err)
		}
		if s == nil {
			continue // a blank line
		}
		if err := r.inOrder(s); err != nil {
			return nil, fmt.Errorf("snapshot: line %d: %w", r.line, err)
		}
		return s, nil
	}
}

// Line is the line of the snapshot Next returned last.
func (r *Reader) Line() int { return r.line }

// inOrder checks that s has a time and comes after its namespace's
// previous sample, by a span time.Duration holds: the rules divide by
// the window between two samples.
func (r *Reader) inOrder(s *Snapshot) error {
	if s.Taken.IsZero() {
		return errors.New("snapshot has no \"taken\" time")
	}
	p, ok := r.last[s.Netns.Name]
	if ok {
		d := s.Taken.Sub(p.taken)
		if d <= 0 {
			return fmt.Errorf("netns %q: taken %s, not after its previous sample's %s (line %d): samples of a namespace must be in time order",
				s.Netns.Name, s.Taken.Format(time.RFC3339Nano), p.taken.Format(time.RFC3339Nano), p.line)
		}
		if !p.taken.Add(d).Equal(s.Taken) {
			return fmt.Errorf("netns %q: taken %s, too far after its previous sample's %s (line %d)",
				s.Netns.Name, s.Taken.Format(time.RFC3339Nano), p.taken.Format(time.RFC3339Nano), p.line)
		}
	}
	r.last[s.Netns.Name] = sampleAt{taken: s.Taken, line: r.line}
	return nil
}

// decodeLine decodes the snapshot on one line, nil for a blank line. The
// sockets are decoded one by one into a Store; every other field is
// gathered as raw JSON and decoded as a Snapshot, so fields keep their
// usual JSON rules.
func decodeLine(lr *lineReader) (*Snapshot, error) {
	dec := json.NewDecoder(lr)
	done := func() { lr.mark = dec.InputOffset() } // a value or token is consumed
	t, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	done()
	if t != json.Delim('{') {
		return nil, fmt.Errorf("want a JSON object, got %v", t)
	}
	var head bytes.Buffer
	head.WriteByte('{')
	var sockets []Socket
	var st Store
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		done()
		key, _ := t.(string)
		if !strings.EqualFold(key, "sockets") {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, err
			}
			done()
			if int64(head.Len()+len(key)+len(raw)) > lr.lim.Value {
				return nil, lr.valueErr()
			}
			if head.Len() > 1 {
				head.WriteByte(',')
			}
			kb, _ := json.Marshal(key)
			head.Write(kb)
			head.WriteByte(':')
			head.Write(raw)
			continue
		}
		if sockets, err = decodeSockets(dec, &st, lr, done); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	done()
	head.WriteByte('}')
	var s Snapshot
	if err := json.Unmarshal(head.Bytes(), &s); err != nil {
		return nil, err
	}
	s.Sockets = sockets
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil && !isSyntax(err) {
			return nil, err // a limit, or the input's own error
		}
		return nil, errors.New("more than one JSON value on the line")
	}
	return &s, nil
}

// isSyntax is true for errors of the JSON itself.
func isSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

// decodeSockets decodes a "sockets" value: null or an array of sockets.
func decodeSockets(dec *json.Decoder, st *Store, lr *lineReader, done func()) ([]Socket, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	done()
	if t == nil {
		return nil, nil
	}
	if t != json.Delim('[') {
		return nil, fmt.Errorf("sockets: want an array, got %v", t)
	}
	out := []Socket{}
	var w socketJSON // one for all: Keep copies it
	for dec.More() {
		if len(out) >= lr.lim.Sockets {
			return nil, fmt.Errorf("more than the limit of %d sockets in one snapshot", lr.lim.Sockets)
		}
		w = socketJSON{}
		if err := dec.Decode(&w); err != nil {
			return nil, fmt.Errorf("socket %d: %w", len(out), socketErr(err))
		}
		done()
		w.Socket.Info = TCPOf(w.Info)
		out = append(out, st.Keep(&w.Socket))
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	done()
	return out, nil
}

// socketJSON is how a file's socket is decoded: its tcp_info straight
// into a TCPInfo, which TCPRef.UnmarshalJSON would scan twice more.
type socketJSON struct {
	Socket
	Info *TCPInfo `json:"tcp_info"`
}

// socketErr names the socket in err as decoding a Socket does.
func socketErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Struct == "socketJSON" {
			te.Struct = "Socket"
		}
		te.Field = strings.TrimPrefix(te.Field, "Socket.")
	}
	return err
}

// lineReader reads one line of br, without its newline, then io.EOF. It
// gives at most lim.Line bytes of the line, and at most lim.Value past
// mark, the end of what the decoder has consumed: what it holds at once.
type lineReader struct {
	br   *bufio.Reader
	lim  Limits
	n    int64 // bytes given
	mark int64
	done bool
	err  error // returned again: the decoder asks anew after some errors
	// ended: the input ended inside the line (no newline).
	ended bool
}

func (l *lineReader) valueErr() error {
	return fmt.Errorf("one value (a socket, or the fields besides the sockets) is longer than the limit of %d bytes", l.lim.Value)
}

func (l *lineReader) Read(p []byte) (int, error) {
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
	room := min(l.lim.Line-l.n, l.lim.Value-(l.n-l.mark))
	if room <= 0 {
		if b, _ := l.br.Peek(1); len(b) == 1 && b[0] == '\n' {
			_, _ = l.br.Discard(1) // the line ends at the limit
			l.done = true
			return 0, io.EOF
		}
		if l.lim.Line-l.n <= 0 {
			l.err = fmt.Errorf("the line is longer than the limit of %d bytes", l.lim.Line)
		} else {
			l.err = l.valueErr()
		}
		return 0, l.err
	}
	b, _ := l.br.Peek(int(min(int64(l.br.Buffered()), int64(len(p)), room)))
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		n := copy(p, b[:i])
		_, _ = l.br.Discard(i + 1)
		l.n += int64(n)
		l.done = true
		return n, nil
	}
	n := copy(p, b)
	_, _ = l.br.Discard(n)
	l.n += int64(n)
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

// ReadAll reads every snapshot in r. A *TornError comes with the complete
// snapshots before it.
func ReadAll(r io.Reader) ([]*Snapshot, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	var out []*Snapshot
	for {
		s, err := rd.Next()
		if errors.Is(err, io.EOF) {
			if len(out) == 0 {
				return nil, errors.New("snapshot: file has a header but no snapshots")
			}
			return out, nil
		}
		var torn *TornError
		if errors.As(err, &torn) {
			return out, err
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
}
