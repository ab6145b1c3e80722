// SPDX-License-Identifier: Apache-2.0

package history

import (
	"bytes"
	"compress/gzip"
	"os"
	"testing"
	"time"
)

// FuzzReadSegment feeds ReadSegment arbitrary bytes: it returns entries
// and an error, never panics, and every entry it gives is a window that
// ends after it starts. Seeds: a segment as the Recorder writes it (open
// and closed), cut short, and hand-written lines.
func FuzzReadSegment(f *testing.F) {
	dir := f.TempDir()
	r := New(Options{Dir: dir, EvidenceEvery: time.Hour})
	for i := range 4 {
		r.Add(atSlice("a", 15*i), reportWith(i))
	}
	r.Close()
	m, _ := globSegments(dir)
	for _, p := range m {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	for _, text := range []string{
		`{"format":"tcpdoctor-history","version":1}` + "\n",
		`{"format":"tcpdoctor-history","version":1}` + "\n" + `{"netns":"a","from":"2026-01-01T00:00:00Z","to":"2026-01-01T00:00:15Z","findings":[{"rule":"x","severity":"warning","subject":{},"summary":"s"}]}` + "\n",
		`{"format":"tcpdoctor-history","version":2}` + "\n",
		`{"format":"tcpdoctor-history","version":1}` + "\n" + `{"netns":"a","from":"2026-01-01T00:00:15Z","to":"2026-01-01T00:00:00Z"}` + "\n",
		`{"format":"tcpdoctor-history","version":1}` + "\n" + `{"netns":"a","from":"2026-01-01T00:00:00Z","to":"2026-01-01T00:00:15Z","evidence":"../x"}` + "\n",
		`{"format":"tcpdoctor-history","version":1}` + "\n" + `{"netns":"a","from":"2026-01-01T00:00:00Z","to":"2026-01-01T00:00:15Z","findings":[{"rule":"slow-reader","severity":"warning","subject":{},"summary":"s","trace":"trace-20260101T000015.000000000Z.jsonl.gz"}]}` + "\n",
		`{"format":"tcpdoctor-history","version":1}` + "\n" + `{"netns":"a","from":"2026-01-01T00:00:00Z","to":"2026-01-01T00:00:15Z","findings":[{"rule":"slow-reader","severity":"warning","subject":{},"summary":"s","trace":"../../etc/x"}]}` + "\n",
		"not json\n",
	} {
		var b bytes.Buffer
		gz := gzip.NewWriter(&b)
		_, _ = gz.Write([]byte(text))
		_ = gz.Close()
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = ReadSegment(bytes.NewReader(b), func(e *Entry) error {
			if !e.To.After(e.From) {
				t.Fatalf("entry %+v: a window that does not end after it starts", e)
			}
			if e.Evidence != "" {
				if fi, ok := parseName(e.Evidence); !ok || !fi.evidence {
					t.Fatalf("evidence name %q", e.Evidence)
				}
			}
			for _, f := range e.Findings {
				if fi, ok := parseName(f.Trace); f.Trace != "" && (!ok || !fi.trace) {
					t.Fatalf("trace name %q", f.Trace)
				}
			}
			return nil
		})
	})
}

// FuzzParseName: names from a directory listing parse or not, never
// panic, and a parsed evidence window ends after it starts.
func FuzzParseName(f *testing.F) {
	f.Add(evidenceName(time.Unix(100, 0), time.Unix(115, 5)))
	f.Add(timelineName(time.Unix(100, 0)))
	f.Add("evidence-x_y.jsonl.gz")
	f.Add(traceName(time.Unix(100, 0)))
	f.Add("trace-x.jsonl.gz")
	f.Fuzz(func(t *testing.T, s string) {
		fi, ok := parseName(s)
		if ok && fi.evidence && fi.trace {
			t.Fatalf("%q: evidence and trace", s)
		}
		if ok && fi.evidence && !fi.to.After(fi.from) {
			t.Fatalf("%q: %+v", s, fi)
		}
	})
}
