package snapshot

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// File format (docs/snapshot-format.md): JSON Lines. The first line is a
// Header; every further line is one Snapshot (one netns at one instant).
// A gzip-compressed file is read transparently.
const (
	FormatName    = "tcpdoctor-snapshot"
	FormatVersion = 1
	// maxLine bounds one snapshot line (100k sockets is about 150 MB).
	maxLine = 1 << 30
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
// every completed sample readable. Sockets are encoded one at a time, so
// memory stays near the snapshot's own size even at 100,000 sockets.
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
		sb, err := json.Marshal(&s.Sockets[j])
		if err != nil {
			return fmt.Errorf("snapshot: write socket %d: %w", j, err)
		}
		w.w.Write(sb)
	}
	w.w.WriteByte(']')
	w.w.Write(b[i+len(key):])
	w.w.WriteByte('\n')
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("snapshot: write: %w", err)
	}
	return nil
}

// Reader reads a snapshot file one snapshot at a time.
type Reader struct {
	sc     *bufio.Scanner
	line   int
	Header Header
}

// ErrNotSnapshot is wrapped by errors for files that are not snapshot files.
var ErrNotSnapshot = errors.New("not a tcpdoctor snapshot file")

// NewReader checks the header and returns a Reader.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("snapshot: gzip: %w", err)
		}
		r = gz
	} else {
		r = br
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), maxLine)
	rd := &Reader{sc: sc}
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("snapshot: line 1: %w", err)
		}
		return nil, fmt.Errorf("snapshot: empty file: %w", ErrNotSnapshot)
	}
	rd.line = 1
	dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
	if err := dec.Decode(&rd.Header); err != nil || rd.Header.Format != FormatName {
		return nil, fmt.Errorf("snapshot: line 1: no %q header: %w", FormatName, ErrNotSnapshot)
	}
	if rd.Header.Version < 1 || rd.Header.Version > FormatVersion {
		return nil, fmt.Errorf("snapshot: format version %d not supported (this build reads 1..%d)", rd.Header.Version, FormatVersion)
	}
	return rd, nil
}

// Next returns the next snapshot, or io.EOF after the last one.
func (r *Reader) Next() (*Snapshot, error) {
	for r.sc.Scan() {
		r.line++
		b := bytes.TrimSpace(r.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var s Snapshot
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("snapshot: line %d: %w", r.line, err)
		}
		if s.Taken.IsZero() {
			return nil, fmt.Errorf("snapshot: line %d: snapshot has no \"taken\" time", r.line)
		}
		return &s, nil
	}
	if err := r.sc.Err(); err != nil {
		return nil, fmt.Errorf("snapshot: line %d: %w", r.line+1, err)
	}
	return nil, io.EOF
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
