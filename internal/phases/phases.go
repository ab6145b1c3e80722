// SPDX-License-Identifier: Apache-2.0

// Package phases times the parts of one command run for the bench's
// --phases view: spans on the system's monotonic clock, which the bench
// shares, so it can place them between the fork and the exit it saw.
package phases

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Now is CLOCK_MONOTONIC in nanoseconds, the clock of every span. It is
// a system call (BenchmarkNow: 0.3 µs on this VM); a
// Recorder reads it once and counts from there with the runtime's clock,
// the same one.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// Span is one timed part. A span with Count > 0 is a total of Count
// pieces done in between other work (formatting each row as it comes);
// Start is then its first piece's start and End - Start is not its length.
type Span struct {
	Name  string `json:"name"`
	Start int64  `json:"start_ns"`
	End   int64  `json:"end_ns"`
	// Total is the time spent, for a span of pieces.
	Total int64 `json:"total_ns,omitempty"`
	Count int   `json:"count,omitempty"`
}

// Took is the span's time: its length, or its pieces' total.
func (s Span) Took() time.Duration {
	if s.Count > 0 {
		return time.Duration(s.Total)
	}
	return time.Duration(s.End - s.Start)
}

// File is what a run writes: when main began, and its spans.
type File struct {
	Main  int64  `json:"main_ns"`
	Spans []Span `json:"spans"`
}

// Recorder collects spans; a nil Recorder records nothing, so code times
// its parts unconditionally. Safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	file File
	sums map[string]int
	last int64 // the last Mark's end
	path string
	// base is Now when t0 was taken: now() is base plus the time since.
	base int64
	t0   time.Time
}

// New starts a recorder for a run whose main began at main (Now), to
// be written to path.
func New(main int64, path string) *Recorder {
	return &Recorder{file: File{Main: main}, sums: map[string]int{}, path: path, base: Now(), t0: time.Now()}
}

// now is Now without a system call.
func (r *Recorder) now() int64 { return r.base + int64(time.Since(r.t0)) }

// Begin starts span name; the returned func ends it.
func (r *Recorder) Begin(name string) func() {
	if r == nil {
		return func() {}
	}
	start := r.now()
	return func() {
		end := r.now()
		r.mu.Lock()
		r.file.Spans = append(r.file.Spans, Span{Name: name, Start: start, End: end})
		r.mu.Unlock()
	}
}

// Span records span name from start (Stamp) to now: for a part named
// by how it went.
func (r *Recorder) Span(name string, start int64) {
	if r == nil {
		return
	}
	end := r.now()
	r.mu.Lock()
	r.file.Spans = append(r.file.Spans, Span{Name: name, Start: start, End: end})
	r.mu.Unlock()
}

// Mark ends the span name that began where the last Mark ended (or at
// main): the parts a command does one after the other.
func (r *Recorder) Mark(name string) {
	if r == nil {
		return
	}
	end := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.file.Main
	if r.last != 0 {
		start = r.last
	}
	r.last = end
	r.file.Spans = append(r.file.Spans, Span{Name: name, Start: start, End: end})
}

// Add adds a piece from start (Stamp) to now to span name's total.
func (r *Recorder) Add(name string, start int64) {
	if r == nil {
		return
	}
	end := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.sums[name]
	if !ok {
		i = len(r.file.Spans)
		r.sums[name] = i
		r.file.Spans = append(r.file.Spans, Span{Name: name, Start: start})
	}
	s := &r.file.Spans[i]
	s.End = end
	s.Total += end - start
	s.Count++
}

// Stamp is Now when r records, else 0: a piece's start that costs
// nothing when nobody listens.
func (r *Recorder) Stamp() int64 {
	if r == nil {
		return 0
	}
	return r.now()
}

// Spans is a copy of the spans recorded so far; nil for a nil Recorder.
func (r *Recorder) Spans() []Span {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.file.Spans...)
}

// Write writes the spans as JSON to the recorder's path.
func (r *Recorder) Write() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	b, err := json.Marshal(r.file)
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("phases: %w", err)
	}
	if err := os.WriteFile(r.path, b, 0o600); err != nil {
		return fmt.Errorf("phases: %w", err)
	}
	return nil
}

// Read reads a file Write wrote.
func Read(path string) (File, error) {
	var f File
	b, err := os.ReadFile(path)
	if err != nil {
		return f, fmt.Errorf("phases: %w", err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("phases: %s: %w", path, err)
	}
	if f.Main == 0 {
		return f, fmt.Errorf("phases: %s: %w", path, errors.New("no main_ns"))
	}
	return f, nil
}
