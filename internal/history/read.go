// SPDX-License-Identifier: Apache-2.0

package history

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
)

// storeFile is a file of the store as listed.
type storeFile struct {
	fileInfo
	// size is what the file takes on disk: its length, or less for a
	// sparse file (its blocks), so that a file claiming a size it never
	// wrote does not push the real history out.
	size int64
	mod  time.Time
	// aside: a file set aside (asidePrefix), listed first (the oldest).
	aside bool
}

// asidePrefix starts the name of a file set aside: dated in the future,
// it is kept for a person to look at, read by no one, and evicted first.
const asidePrefix = "future-"

// listFiles lists the store's files, oldest first (by the time in their
// names), those set aside before them. Other files are left alone.
func listFiles(dir string) ([]storeFile, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	var out []storeFile
	for _, de := range des {
		name, aside := strings.CutPrefix(de.Name(), asidePrefix)
		fi, ok := parseName(name)
		if !ok || !de.Type().IsRegular() {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		fi.name = de.Name()
		out = append(out, storeFile{fileInfo: fi, size: diskSize(info), mod: info.ModTime(), aside: aside})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].aside != out[j].aside {
			return out[i].aside
		}
		if !out[i].from.Equal(out[j].from) {
			return out[i].from.Before(out[j].from)
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// diskSize is what a file takes: its length, or its blocks when fewer
// (a sparse file).
func diskSize(info os.FileInfo) int64 {
	n := info.Size()
	if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Blocks >= 0 {
		n = min(n, st.Blocks*512)
	}
	return n
}

// maxLine bounds one timeline line: one namespace's window.
const maxLine = 16 << 20

// ErrNotTimeline is wrapped by errors for input that is not a segment.
var ErrNotTimeline = errors.New("not a tcpdoctor history segment")

// ReadSegment reads a timeline segment, calling fn with each entry in
// order. A segment cut short (its writer killed, power lost, disk full)
// or damaged past some point gives the entries before the damage and an
// error saying where; one that ends after a whole line without gzip's
// trailer (the segment serve is writing, or one whose writer was killed)
// is read without error. fn's own error stops it and is returned.
func ReadSegment(r io.Reader, fn func(*Entry) error) error {
	jr, err := jsonl.NewReader(r, jsonl.Options{MaxLine: maxLine, Gzip: true, Growing: true})
	if err != nil {
		return fmt.Errorf("%w: %w", err, ErrNotTimeline)
	}
	if _, err := jr.ReadHeader(FormatName, FormatVersion, ErrNotTimeline); err != nil {
		return err
	}
	for {
		var e Entry
		err := jr.Decode(&e)
		line := jr.Line()
		var torn *jsonl.TornError
		var rerr *jsonl.ReadError
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.As(err, &torn), errors.As(err, &rerr):
			return err
		case err != nil:
			return fmt.Errorf("line %d: %w", line, err)
		}
		if e.From.IsZero() || !e.To.After(e.From) {
			return fmt.Errorf("line %d: a window must end after it starts", line)
		}
		if e.Evidence != "" {
			if fi, ok := parseName(e.Evidence); !ok || !fi.evidence {
				return fmt.Errorf("line %d: evidence %q is not an evidence file name", line, e.Evidence)
			}
		}
		for _, f := range e.Findings {
			if fi, ok := parseName(f.Trace); f.Trace != "" && (!ok || !fi.trace) {
				return fmt.Errorf("line %d: trace %q is not a trace file name", line, f.Trace)
			}
		}
		if err := fn(&e); err != nil {
			return err
		}
	}
}

// Store is a history directory read back.
type Store struct {
	Dir string
	// Notes say what could not be read: segments torn or damaged, and
	// where.
	Notes []string
	files []storeFile
}

// Open lists a history directory.
func Open(dir string) (*Store, error) {
	fs, err := listFiles(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{Dir: dir}
	for _, f := range fs {
		if f.aside {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: set aside, not read: dated in the future when it was found", f.name))
			continue
		}
		s.files = append(s.files, f)
	}
	return s, nil
}

// Entries reads the timeline entries whose windows end in (since,
// until], in time order. A zero since or until is unbounded. A segment
// it cannot read whole gives what it could and a note.
func (s *Store) Entries(since, until time.Time) ([]Entry, error) {
	var out []Entry
	err := s.Walk(since, until, func(e *Entry) error {
		out = append(out, *e)
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].To.Before(out[j].To) })
	return out, err
}

// Walk calls fn with each timeline entry whose window ends in (since,
// until], segment by segment in the order written, holding one entry at
// a time (each namespace's entries come in time order). A zero since or
// until is unbounded. A segment it cannot read whole gives what it could
// and a note. fn's error stops it and is returned.
func (s *Store) Walk(since, until time.Time, fn func(*Entry) error) error {
	for _, f := range s.segments(since, until) {
		fh, err := os.Open(filepath.Join(s.Dir, f.name))
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: %v", f.name, err))
			continue
		}
		var stop error
		err = ReadSegment(bufio.NewReaderSize(fh, 1<<16), func(e *Entry) error {
			if (since.IsZero() || e.To.After(since)) && (until.IsZero() || !e.To.After(until)) {
				if stop = fn(e); stop != nil {
					return stop
				}
			}
			return nil
		})
		_ = fh.Close()
		if stop != nil {
			return stop
		}
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: %v: skipped the rest of it", f.name, err))
		}
	}
	return nil
}

// Bounds is the span of the timeline entries whose windows end in
// (since, until]: the earliest start and the latest end, read from the
// first and last segments that hold any (not the whole store). ok is
// false when none does.
func (s *Store) Bounds(since, until time.Time) (first, last time.Time, ok bool) {
	segs := s.segments(since, until)
	read := func(f storeFile, fn func(*Entry)) {
		fh, err := os.Open(filepath.Join(s.Dir, f.name))
		if err != nil {
			return
		}
		defer fh.Close()
		_ = ReadSegment(bufio.NewReaderSize(fh, 1<<16), func(e *Entry) error {
			if (since.IsZero() || e.To.After(since)) && (until.IsZero() || !e.To.After(until)) {
				fn(e)
			}
			return nil
		})
	}
	for _, f := range segs {
		read(f, func(e *Entry) {
			if !ok || e.From.Before(first) {
				first, ok = e.From, true
			}
		})
		if ok {
			break
		}
	}
	found := false
	for i := len(segs) - 1; i >= 0 && !found; i-- {
		read(segs[i], func(e *Entry) {
			if e.To.After(last) {
				last, found = e.To, true
			}
		})
	}
	return first, last, ok && found
}

// segments is the timeline segments that may hold windows ending in
// (since, until], oldest first: a segment holds the windows ending from
// its name's time (its first window's end) to the next segment's.
func (s *Store) segments(since, until time.Time) []storeFile {
	var segs []storeFile
	for _, f := range s.files {
		if !f.evidence && !f.trace {
			segs = append(segs, f)
		}
	}
	var out []storeFile
	for i, f := range segs {
		if !until.IsZero() && f.from.After(until) {
			break
		}
		if !since.IsZero() && i+1 < len(segs) && !segs[i+1].from.After(since) {
			continue
		}
		out = append(out, f)
	}
	return out
}

// Window is an evidence file: the window it covers and its path.
type Window struct {
	Name     string
	From, To time.Time
}

// Evidence lists the evidence files, oldest first.
func (s *Store) Evidence() []Window {
	var out []Window
	for _, f := range s.files {
		if f.evidence {
			out = append(out, Window{Name: f.name, From: f.from, To: f.to})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].To.Before(out[j].To) })
	return out
}

// Traces lists the trace files kept, by name.
func (s *Store) Traces() map[string]bool {
	out := map[string]bool{}
	for _, f := range s.files {
		if f.trace {
			out[f.name] = true
		}
	}
	return out
}

// Path is the path of a file of the store.
func (s *Store) Path(name string) string { return filepath.Join(s.Dir, name) }

// At finds the evidence window covering t (From < t <= To; the earliest
// such), or else the nearest windows with evidence before and after t.
func (s *Store) At(t time.Time) (cover *Window, before, after *Window) {
	ws := s.Evidence()
	for i := range ws {
		w := &ws[i]
		switch {
		case w.From.Before(t) && !w.To.Before(t):
			if cover == nil {
				cover = w
			}
		case !w.To.After(t):
			before = w
		case after == nil && !w.From.Before(t):
			after = w
		}
	}
	return cover, before, after
}
