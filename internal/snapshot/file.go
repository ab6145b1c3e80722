// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
)

// File format (docs/snapshot-format.md): JSON Lines. The first line is a
// Header; every further line is one Snapshot (one netns at one instant).
// A gzip-compressed file is read transparently.
const (
	FormatName    = "tcpdoctor-snapshot"
	FormatVersion = 1
)

// Writer writes a snapshot file.
type Writer struct {
	w *jsonl.Writer
	// buf holds one socket's JSON at a time.
	buf []byte
}

// NewWriter writes the header and returns a Writer.
func NewWriter(w io.Writer, tool string) (*Writer, error) {
	return NewWriterHeader(w, jsonl.Header{Tool: tool})
}

// NewWriterHeader writes h, with this format's name and version, as the
// header and returns a Writer.
func NewWriterHeader(w io.Writer, h jsonl.Header) (*Writer, error) {
	h.Format, h.Version = FormatName, FormatVersion
	jw := jsonl.NewWriter(w)
	if err := jw.Encode(h); err != nil {
		return nil, fmt.Errorf("snapshot: write header: %w", err)
	}
	if err := jw.Flush(); err != nil {
		return nil, fmt.Errorf("snapshot: write header: %w", err)
	}
	return &Writer{w: jw}, nil
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
	jr     *jsonl.Reader
	lim    Limits
	Header jsonl.Header
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
	jr, err := jsonl.NewReader(r, jsonl.Options{
		MaxLine: lim.Line, MaxHeld: lim.Value, HeldName: "one value (a socket, or the fields besides the sockets)",
		GzipRatio: lim.GzipRatio, GzipFloor: gzipFloor,
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	rd := &Reader{jr: jr, lim: lim, last: map[string]sampleAt{}}
	if rd.Header, err = jr.ReadHeader(FormatName, FormatVersion, ErrNotSnapshot); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return rd, nil
}

// Next returns the next snapshot, or io.EOF after the last one. A last
// line the input ends inside is a *TornError; a damaged line before the
// end is an error. Each namespace's samples must be in time order.
func (r *Reader) Next() (*Snapshot, error) {
	for {
		lr, err := r.jr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !isTorn(err) {
				err = fmt.Errorf("snapshot: %w", err)
			}
			return nil, err
		}
		s, err := decodeLine(lr, r.lim.Sockets)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the line ended inside the snapshot
		}
		if err != nil {
			if torn := lr.Torn(err); torn != nil {
				return nil, torn
			}
			return nil, fmt.Errorf("snapshot: line %d: %w", r.Line(), err)
		}
		if s == nil {
			continue // a blank line
		}
		if err := r.inOrder(s); err != nil {
			return nil, fmt.Errorf("snapshot: line %d: %w", r.Line(), err)
		}
		return s, nil
	}
}

// Line is the line of the snapshot Next returned last.
func (r *Reader) Line() int { return r.jr.Line() }

func isTorn(err error) bool {
	var torn *jsonl.TornError
	return errors.As(err, &torn)
}

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
	r.last[s.Netns.Name] = sampleAt{taken: s.Taken, line: r.Line()}
	return nil
}

// decodeLine decodes the snapshot on one line, nil for a blank line. The
// sockets are decoded one by one into a Store; every other field is
// gathered as raw JSON and decoded as a Snapshot, so fields keep their
// usual JSON rules.
func decodeLine(lr *jsonl.Line, maxSockets int) (*Snapshot, error) {
	dec := json.NewDecoder(lr)
	done := func() { lr.Mark(dec.InputOffset()) } // a value or token is consumed
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
			if int64(head.Len()+len(key)+len(raw)) > lr.MaxHeld() {
				return nil, lr.HeldErr()
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
		if sockets, err = decodeSockets(dec, &st, maxSockets, done); err != nil {
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
func decodeSockets(dec *json.Decoder, st *Store, maxSockets int, done func()) ([]Socket, error) {
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
		if len(out) >= maxSockets {
			return nil, fmt.Errorf("more than the limit of %d sockets in one snapshot", maxSockets)
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

// ReadAll reads every snapshot in r. A *jsonl.TornError comes with the complete
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
		if isTorn(err) {
			return out, err
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
}
