// SPDX-License-Identifier: Apache-2.0

package history

import (
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// Defaults (docs/history.md): a week, or 256 MiB, whichever is reached
// first; evidence of a finding that keeps going every 5 minutes; a new
// timeline segment every hour.
const (
	DefaultMaxBytes      = 256 << 20
	DefaultMaxAge        = 7 * 24 * time.Hour
	DefaultEvidenceEvery = 5 * time.Minute
	DefaultSegmentSpan   = time.Hour
)

// Options configure a Recorder.
type Options struct {
	Dir string
	// MaxBytes bounds the store's files together; MaxAge their age.
	MaxBytes int64
	MaxAge   time.Duration
	// EvidenceEvery is how often a finding at warning or above that keeps
	// going has its window kept again.
	EvidenceEvery time.Duration
	// SegmentSpan is the span of windows a timeline segment holds before
	// the next is started; a segment is also closed at MaxBytes/16.
	SegmentSpan time.Duration
	// Tool names the writer in the files' headers.
	Tool string
	Now  func() time.Time
	// Logf says a failure once, and that writing works again.
	Logf func(format string, a ...any)
	// Trace, when set, records a short trace of the connections of a
	// finding of a Traceable rule at warning or above (trigger.go).
	Trace *TraceOptions
}

func (o *Options) defaults() {
	o.MaxBytes = cmp.Or(o.MaxBytes, DefaultMaxBytes)
	o.MaxAge = cmp.Or(o.MaxAge, DefaultMaxAge)
	o.EvidenceEvery = cmp.Or(o.EvidenceEvery, DefaultEvidenceEvery)
	o.SegmentSpan = cmp.Or(o.SegmentSpan, DefaultSegmentSpan)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Recorder keeps serve's windows. Add is called from the collection loop
// and never waits for the disk: the files are written by a goroutine of
// the Recorder's own, and a window that arrives while it is still busy is
// dropped (counted in Dropped, and said in the next entry).
type Recorder struct {
	o Options

	// Owned by the caller of Add.
	prev   map[string]*snapshot.Snapshot // the last collection, whole
	active map[findingKey]seen
	jobs   chan *job
	lost   int // collections dropped since the last one queued
	trig   *triggers

	// Triggered traces: one records at a time (tracing), until
	// traceCtx ends (Close).
	tracing     atomic.Bool
	traceWG     sync.WaitGroup
	traceCtx    context.Context
	traceCancel context.CancelFunc

	// Owned by the writer goroutine.
	seg      *os.File
	gz       *jsonl.Writer
	segStart time.Time
	segSize  int64 // bytes of seg known good (the last complete flush)
	failing  bool
	// traceNote says, in the next entry, that a trace was not kept.
	traceNote string

	errs, dropped, written atomic.Int64
	lastEvidence           atomic.Int64 // bytes of the last evidence file
	closeOnce              sync.Once
	done                   chan struct{}
	traces                 atomic.Int64 // triggered traces kept
}

// seen is a finding's state from one window to the next.
type seen struct {
	sev      diag.Severity
	evidence time.Time // when its window was last kept
	lastTo   time.Time // the end of the last window that showed it
}

// pace is how often a finding that goes on has its window kept:
// EvidenceEvery, or less often when the last evidence file was so large
// that keeping one every EvidenceEvery would write more than the store
// holds over its age (MaxBytes / MaxAge).
func (r *Recorder) pace() time.Duration {
	last := r.lastEvidence.Load()
	p := time.Duration(float64(last) / float64(r.o.MaxBytes) * float64(r.o.MaxAge))
	return max(r.o.EvidenceEvery, p)
}

// findingKey identifies a finding from one window to the next: its rule
// and what it is about, without the counts that change every window.
// A finding about endpoints is known by them alone: its owner may exit
// (its sockets left in TIME_WAIT belong to no process) or be named anew
// while it goes on; one about a process alone by the process.
type findingKey struct {
	rule, netns, command   string
	local, remote, service diag.Address
	pid                    int
}

func keyOf(rule string, s *diag.Subject) findingKey {
	if s.Local.IsValid() || s.Remote.IsValid() {
		return findingKey{rule: rule, netns: s.Netns, local: s.Local, remote: s.Remote}
	}
	return findingKey{rule: rule, netns: s.Netns, service: s.Service, command: s.Command, pid: s.Pid}
}

// job is one collection's work for the writer.
type job struct {
	entries []Entry
	// evidence: the two samples of each namespace concerned, first
	// samples first (as `record` writes a collection after another).
	first, last []*snapshot.Snapshot
	// noted marks the entries of the namespaces the evidence is for.
	noted map[string]bool
	// trace, when set, is a recorded trace to keep (and nothing else).
	trace *traceJob
	// done, when set, is closed once the job is written (tests wait on it).
	done chan struct{}
}

// Sync blocks until everything queued before it is written.
func (r *Recorder) Sync() {
	j := &job{done: make(chan struct{})}
	r.jobs <- j
	<-j.done
}

// New starts a Recorder writing into o.Dir, which it creates (mode 0700)
// when missing. It never fails: a directory it cannot write is said once
// and counted, and tried again each window.
func New(o Options) *Recorder {
	o.defaults()
	r := &Recorder{o: o, prev: map[string]*snapshot.Snapshot{}, active: map[findingKey]seen{},
		jobs: make(chan *job, 1), done: make(chan struct{})}
	r.traceCtx, r.traceCancel = context.WithCancel(context.Background())
	if o.Trace != nil && o.Trace.Run != nil {
		r.trig = &triggers{o: *o.Trace, traceable: map[string]bool{}, last: map[findingKey]time.Time{}}
		for _, rl := range o.Trace.Rules {
			if rl.Traceable {
				r.trig.traceable[rl.ID] = true
			}
		}
	}
	go r.run()
	return r
}

// Errors counts writes that failed (tcpdoctor_history_errors_total).
func (r *Recorder) Errors() int64 { return r.errs.Load() }

// Dropped counts windows not kept because the writer was still busy.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Written counts the bytes written to the store.
func (r *Recorder) Written() int64 { return r.written.Load() }

// Traces counts the triggered traces kept.
func (r *Recorder) Traces() int64 { return r.traces.Load() }

// Close ends a trace recording (keeping what it recorded), writes what is
// queued, ends the open segment and waits for the writer.
func (r *Recorder) Close() {
	r.closeOnce.Do(func() {
		r.traceCancel()
		r.traceWG.Wait()
		close(r.jobs)
	})
	<-r.done
}

// Add takes one collection (one snapshot per namespace) and its diagnosis
// (nil when no namespace had a window). A namespace's window runs from
// its previous sample to this one, as the exporter's does.
func (r *Recorder) Add(snaps []*snapshot.Snapshot, rep *report.Report) {
	byNS := map[string]*Entry{}
	var order []string
	next := make(map[string]*snapshot.Snapshot, len(snaps))
	for _, cur := range snaps {
		ns := cur.Netns.Name
		if _, dup := next[ns]; dup {
			continue
		}
		next[ns] = cur
		p := r.prev[ns]
		if p == nil || !cur.Taken.After(p.Taken) || p.Netns.Inode != cur.Netns.Inode {
			continue // no window (window.Chain.Input)
		}
		byNS[ns] = &Entry{Netns: ns, Inode: cur.Netns.Inode, From: p.Taken, To: cur.Taken}
		order = append(order, ns)
	}
	j := &job{noted: map[string]bool{}}
	pace := r.pace()
	var newest time.Time
	if rep != nil {
		for i := range rep.Findings {
			f := &rep.Findings[i]
			e := byNS[f.Subject.Netns]
			if e == nil {
				continue
			}
			e.Findings = append(e.Findings, Finding{Rule: f.Rule, Severity: f.Severity, Subject: f.Subject, Summary: f.Summary})
			if f.Severity < diag.Warning {
				continue
			}
			k := keyOf(f.Rule, &f.Subject)
			was := r.active[k]
			// In the namespace's previous window too: it goes on.
			goesOn := was.lastTo.Equal(e.From)
			now := seen{sev: f.Severity, evidence: was.evidence, lastTo: e.To}
			since := e.To.Sub(was.evidence)
			var due bool
			switch {
			case !goesOn:
				// It starts; again within EvidenceEvery of its last
				// evidence, it is one finding flapping, kept as one
				// that goes on.
				due = was.evidence.IsZero() || since >= r.o.EvidenceEvery
			case f.Severity > was.sev:
				due = true // it worsens
			default:
				due = since >= pace
			}
			if due {
				now.evidence = e.To
				j.noted[e.Netns] = true
			}
			r.active[k] = now
		}
		for _, u := range rep.Unknown {
			if e := byNS[u.Netns]; e != nil {
				e.Unknown++
			}
		}
	}
	// Forget findings gone for longer than the pace: their next start is
	// new.
	for _, ns := range order {
		if byNS[ns].To.After(newest) {
			newest = byNS[ns].To
		}
	}
	for k, s := range r.active {
		if newest.Sub(s.lastTo) > pace+r.o.EvidenceEvery {
			delete(r.active, k)
		}
	}
	var start *pending
	for _, ns := range order {
		if start == nil {
			start = r.pickTrace(byNS[ns])
		}
	}
	for _, ns := range order {
		j.entries = append(j.entries, *byNS[ns])
		if j.noted[ns] {
			j.first = append(j.first, r.prev[ns])
			j.last = append(j.last, next[ns])
		}
	}
	r.prev = next
	if len(j.entries) == 0 {
		return
	}
	if r.lost > 0 {
		j.entries[0].Note = units.N(r.lost, "collection") + " before this one not kept: the writer was busy"
	}
	select {
	case r.jobs <- j:
		r.lost = 0
		if start != nil {
			r.startTrace(start)
		}
	default:
		r.dropped.Add(1)
		r.lost++
		// The finding's evidence was not kept: let the next window keep it.
		for k, s := range r.active {
			if j.noted[k.netns] {
				s.evidence = time.Time{}
				r.active[k] = s
			}
		}
	}
}

// run is the writer goroutine.
func (r *Recorder) run() {
	defer close(r.done)
	r.evict()
	for j := range r.jobs {
		r.write(j)
		if j.done != nil {
			close(j.done)
		}
	}
	r.closeSegment()
}

// write keeps one collection: its evidence first, so its entries can
// name the file, then its entries.
func (r *Recorder) write(j *job) {
	if j.trace != nil {
		if err := r.writeTrace(j.trace); err != nil {
			r.fail(err)
			r.traceNote = err.Error()
		}
		r.evict()
		return
	}
	if len(j.entries) == 0 {
		return // nothing to write proves nothing about the disk
	}
	ok := true
	if len(j.first) > 0 {
		name, err := r.writeEvidence(j.first, j.last)
		for i := range j.entries {
			e := &j.entries[i]
			if !j.noted[e.Netns] {
				continue
			}
			if err != nil {
				e.Note = "evidence not kept: " + err.Error()
			} else {
				e.Evidence = name
			}
		}
		if err != nil {
			r.fail(err)
			ok = false
		}
		r.evict()
	}
	if r.traceNote != "" {
		e := &j.entries[0]
		e.Note = strings.TrimPrefix(strings.Join([]string{e.Note, "not kept: " + r.traceNote}, "; "), "; ")
		r.traceNote = ""
	}
	if err := r.appendEntries(j.entries); err != nil {
		r.fail(err)
		ok = false
	}
	if ok && r.failing {
		r.failing = false
		r.o.Logf("history: writing to %s again (%d errors so far)", r.o.Dir, r.errs.Load())
	}
}

// fail counts a failed write and says the first of a run of them.
func (r *Recorder) fail(err error) {
	r.errs.Add(1)
	if !r.failing {
		r.failing = true
		r.o.Logf("%v (metrics go on; said once, tcpdoctor_history_errors_total counts the failures)", err)
	}
}

// writeEvidence writes the samples as a gzip snapshot file: to a
// temporary name, synced, then renamed, so a file of that name is whole.
func (r *Recorder) writeEvidence(first, last []*snapshot.Snapshot) (string, error) {
	if err := os.MkdirAll(r.o.Dir, 0o700); err != nil {
		return "", fmt.Errorf("history: %w", err)
	}
	from, to := first[0].Taken, last[0].Taken
	for i := range first {
		if first[i].Taken.Before(from) {
			from = first[i].Taken
		}
		if last[i].Taken.After(to) {
			to = last[i].Taken
		}
	}
	name := evidenceName(from, to)
	n, err := r.writeGzip("evidence", name, func(gz io.Writer) error {
		sw, err := snapshot.NewWriter(gz, r.o.Tool)
		if err != nil {
			return err
		}
		for _, s := range append(first[:len(first):len(first)], last...) {
			if err := sw.Write(s); err != nil {
				return err
			}
		}
		return nil
	})
	r.lastEvidence.Store(n)
	if err != nil {
		return "", err
	}
	return name, nil
}

// writeGzip writes a file of the store whole or not at all: what write
// puts out, gzip-compressed, to a temporary name, synced, then renamed
// to name. It returns the compressed bytes written (also counted in
// written); kind names the file in errors.
func (r *Recorder) writeGzip(kind, name string, write func(io.Writer) error) (int64, error) {
	tmp, err := os.CreateTemp(r.o.Dir, "."+kind+"-*.tmp")
	if err != nil {
		return 0, fmt.Errorf("history: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	cw := &countWriter{w: tmp}
	err = func() error {
		gz, err := gzip.NewWriterLevel(cw, gzip.BestCompression)
		if err != nil {
			return err
		}
		if err := write(gz); err != nil {
			return err
		}
		if err := gz.Close(); err != nil {
			return err
		}
		return tmp.Sync()
	}()
	r.written.Add(cw.n)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(r.o.Dir, name))
	}
	if err != nil {
		return cw.n, fmt.Errorf("history: write %s %s: %w", kind, name, err)
	}
	syncDir(r.o.Dir)
	return cw.n, nil
}

// appendEntries appends entries to the open timeline segment, starting
// one when none is open or the open one is full, and flushes them. A
// failed write cuts the segment back to its last complete flush and
// closes it: the next window starts a new one.
func (r *Recorder) appendEntries(es []Entry) error {
	if len(es) == 0 {
		return nil
	}
	// Segments are named and rotated by the windows' times, so that a
	// reader can tell from the names which segments hold which times.
	first := es[0].To
	if r.seg != nil && (first.Sub(r.segStart) >= r.o.SegmentSpan || first.Before(r.segStart) || r.segSize >= r.o.MaxBytes/16) {
		r.closeSegment()
		r.evict()
	}
	if r.seg == nil {
		if err := r.openSegment(first); err != nil {
			return err
		}
	}
	var err error
	for i := range es {
		if err = r.gz.Encode(&es[i]); err != nil {
			break
		}
	}
	if err == nil {
		err = r.gz.Flush()
	}
	if err != nil {
		_ = r.seg.Truncate(r.segSize)
		_ = r.seg.Close()
		r.seg, r.gz = nil, nil
		return fmt.Errorf("history: append to %s: %w", timelineName(r.segStart), err)
	}
	st, err := r.seg.Stat()
	if err == nil {
		r.written.Add(st.Size() - r.segSize)
		r.segSize = st.Size()
	}
	return nil
}

// openSegment starts a segment named by the end of its first window.
func (r *Recorder) openSegment(start time.Time) error {
	if err := os.MkdirAll(r.o.Dir, 0o700); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	name := filepath.Join(r.o.Dir, timelineName(start))
	// O_EXCL: a segment is only ever appended to by the writer that
	// started it; after a restart the next one begins.
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	gz, _ := jsonl.NewGzipWriter(f, gzip.BestCompression)
	err = gz.Encode(jsonl.Header{Format: FormatName, Version: FormatVersion, Tool: r.o.Tool})
	if err == nil {
		err = gz.Flush()
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(name)
		return fmt.Errorf("history: start %s: %w", filepath.Base(name), err)
	}
	syncDir(r.o.Dir)
	r.seg, r.gz, r.segStart = f, gz, start
	if st, err := f.Stat(); err == nil {
		r.segSize = st.Size()
		r.written.Add(st.Size())
	}
	return nil
}

// closeSegment ends the open segment with gzip's trailer and syncs it:
// from then on it is never written again.
func (r *Recorder) closeSegment() {
	if r.seg == nil {
		return
	}
	err := r.gz.Close()
	if err == nil {
		err = r.seg.Sync()
	}
	if cerr := r.seg.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.fail(fmt.Errorf("history: close %s: %w", timelineName(r.segStart), err))
	}
	r.seg, r.gz = nil, nil
}

// evict removes the oldest files until the store is within MaxBytes, and
// every file last written before MaxAge. The open segment stays.
func (r *Recorder) evict() {
	fs, err := listFiles(r.o.Dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.fail(err)
		}
		return
	}
	open := ""
	if r.seg != nil {
		open = timelineName(r.segStart)
	}
	now := r.o.Now()
	var total int64
	for i := range fs {
		f := &fs[i]
		total += f.size
		// A file dated in the future (a clock set back, or a file planted)
		// would outlive every real one: it is set aside, evicted first.
		if !f.aside && f.name != open && maxTime(f.from, f.to).After(now.Add(futureSlack)) {
			aside := asidePrefix + f.name
			if err := os.Rename(filepath.Join(r.o.Dir, f.name), filepath.Join(r.o.Dir, aside)); err != nil {
				r.fail(fmt.Errorf("history: set aside %s: %w", f.name, err))
				continue
			}
			r.o.Logf("history: %s is dated after now (%s): set aside as %s, never read and evicted first", f.name, now.UTC().Format(time.RFC3339), aside)
			// Its age counts from now: it goes after MaxAge at the latest.
			_ = os.Chtimes(filepath.Join(r.o.Dir, aside), now, now)
			f.name, f.aside, f.mod = aside, true, now
		}
	}
	slices.SortStableFunc(fs, func(a, b storeFile) int {
		if a.aside != b.aside {
			if a.aside {
				return -1
			}
			return 1
		}
		return 0
	})
	cutoff := now.Add(-r.o.MaxAge)
	for _, f := range fs { // set aside first, then oldest first
		if f.name == open {
			continue
		}
		if total <= r.o.MaxBytes && !f.mod.Before(cutoff) {
			continue
		}
		if err := os.Remove(filepath.Join(r.o.Dir, f.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.fail(fmt.Errorf("history: evict: %w", err))
			continue
		}
		total -= f.size
	}
}

// futureSlack is how far after now a file may be dated before it is set
// aside: a clock stepped back a little (NTP) keeps its files.
const futureSlack = 5 * time.Minute

// syncDir makes a new or renamed file's name durable; best effort.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

type countWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
