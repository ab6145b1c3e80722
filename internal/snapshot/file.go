package snapshot

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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
}

// Writer writes a snapshot file.
type Writer struct {
	w *bufio.Writer
	// buf holds one socket's JSON at a time.
	buf []byte
}

// NewWriter writes the header and returns a Writer.
func NewWriter(w io.Writer, tool string) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(Header{Format: FormatName, Version: FormatVersion, Tool: tool}); err != nil {
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
// a tree of it is held, so reading costs about the snapshot's own size.
type Reader struct {
	br     *bufio.Reader
	line   int
	Header Header
}

// ErrNotSnapshot is wrapped by errors for files that are not snapshot files.
var ErrNotSnapshot = errors.New("not a tcpdoctor snapshot file")

// maxHeader bounds the header line that is read before it is judged.
const maxHeader = 1 << 16

// NewReader checks the header and returns a Reader.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("snapshot: gzip: %w", err)
		}
		br = bufio.NewReaderSize(gz, 1<<16)
	}
	rd := &Reader{br: br}
	if _, err := br.Peek(1); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("snapshot: empty file: %w", ErrNotSnapshot)
		}
		return nil, fmt.Errorf("snapshot: line 1: %w", err)
	}
	rd.line = 1
	lr := &lineReader{br: br}
	dec := json.NewDecoder(io.LimitReader(lr, maxHeader))
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

// Next returns the next snapshot, or io.EOF after the last one.
func (r *Reader) Next() (*Snapshot, error) {
	for {
		if _, err := r.br.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("snapshot: line %d: %w", r.line+1, err)
		}
		r.line++
		s, err := decodeLine(&lineReader{br: r.br})
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the line ended inside the snapshot
		}
		if err != nil {
			return nil, fmt.Errorf("snapshot: line %d: %w", r.line, err)
		}
		if s == nil {
			continue // a blank line
		}
		if s.Taken.IsZero() {
			return nil, fmt.Errorf("snapshot: line %d: snapshot has no \"taken\" time", r.line)
		}
		return s, nil
	}
}

// decodeLine decodes the snapshot on one line, nil for a blank line. The
// sockets are decoded one by one into a Store; every other field is
// gathered as raw JSON and decoded as a Snapshot, so fields keep their
// usual JSON rules.
func decodeLine(lr *lineReader) (*Snapshot, error) {
	dec := json.NewDecoder(lr)
	t, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
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
		key, _ := t.(string)
		if !strings.EqualFold(key, "sockets") {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, err
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
		if sockets, err = decodeSockets(dec, &st); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	head.WriteByte('}')
	var s Snapshot
	if err := json.Unmarshal(head.Bytes(), &s); err != nil {
		return nil, err
	}
	s.Sockets = sockets
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one JSON value on the line")
	}
	return &s, nil
}

// decodeSockets decodes a "sockets" value: null or an array of sockets.
func decodeSockets(dec *json.Decoder, st *Store) ([]Socket, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, nil
	}
	if t != json.Delim('[') {
		return nil, fmt.Errorf("sockets: want an array, got %v", t)
	}
	out := []Socket{}
	for dec.More() {
		var sk Socket
		if err := dec.Decode(&sk); err != nil {
			return nil, fmt.Errorf("socket %d: %w", len(out), err)
		}
		out = append(out, st.Keep(&sk))
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

// lineReader reads one line of br, without its newline, then io.EOF.
type lineReader struct {
	br   *bufio.Reader
	done bool
}

func (l *lineReader) Read(p []byte) (int, error) {
	if l.done {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if l.br.Buffered() == 0 {
		if _, err := l.br.Peek(1); err != nil {
			l.done = true
			if errors.Is(err, io.EOF) {
				return 0, io.EOF // the last line has no newline
			}
			return 0, err
		}
	}
	b, _ := l.br.Peek(min(l.br.Buffered(), len(p)))
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		n := copy(p, b[:i])
		_, _ = l.br.Discard(i + 1)
		l.done = true
		return n, nil
	}
	n := copy(p, b)
	_, _ = l.br.Discard(n)
	return n, nil
}

// ReadAll reads every snapshot in r.
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
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
}
