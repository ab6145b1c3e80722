// SPDX-License-Identifier: Apache-2.0

package phases

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRecorder: a nil recorder records nothing and writes nothing; a
// real one keeps begun spans, marks one after another from main, and
// totals pieces, and Read gives back what Write wrote.
func TestRecorder(t *testing.T) {
	var none *Recorder
	none.Begin("x")()
	none.Mark("x")
	none.Add("x", none.Stamp())
	none.Span("x", none.Stamp())
	if err := none.Write(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.json")
	main := Now()
	r := New(main, path)
	r.Mark("setup")
	end := r.Begin("dump")
	for range 3 {
		r.Add("rows", r.Stamp())
	}
	end()
	began := r.Stamp()
	r.Span("named after", began)
	r.Mark("write")
	if err := r.Write(); err != nil {
		t.Fatal(err)
	}
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Main != main || len(f.Spans) != 5 {
		t.Fatalf("got %+v", f)
	}
	byName := map[string]Span{}
	for _, s := range f.Spans {
		byName[s.Name] = s
	}
	if s := byName["setup"]; s.Start != main || s.End < s.Start {
		t.Errorf("setup %+v does not start at main %d", s, main)
	}
	if s := byName["write"]; s.Start != byName["setup"].End {
		t.Errorf("write %+v does not follow setup %+v", s, byName["setup"])
	}
	if s := byName["rows"]; s.Count != 3 || s.Total <= 0 || s.Total > s.End-s.Start {
		t.Errorf("rows %+v: want 3 pieces totalling at most their extent", s)
	}
	if s := byName["named after"]; s.Start != began || s.End < s.Start || s.End > byName["write"].End {
		t.Errorf("span %+v: want from %d, before write ends", s, began)
	}
	if s := byName["dump"]; s.Start > byName["rows"].Start || s.End < byName["rows"].End {
		t.Errorf("dump %+v does not hold the rows %+v", s, byName["rows"])
	}
}

// TestReadRefuses: a file that is not a phases file is an error.
func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"empty": "", "garbage": "{\"spans\":", "nomain": "{\"spans\":[]}"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(p); err == nil {
			t.Errorf("%s: read without an error", name)
		}
	}
	if _, err := Read(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file read without an error")
	}
}

// BenchmarkNow is the system call Now makes (a Recorder makes it once).
func BenchmarkNow(b *testing.B) {
	for b.Loop() {
		Now()
	}
}

// BenchmarkPiece is what timing one row costs: a Stamp and an Add.
func BenchmarkPiece(b *testing.B) {
	r := New(Now(), "")
	for b.Loop() {
		r.Add("rows", r.Stamp())
	}
}
