// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"errors"
	"io"
	"os"

	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/outfile"
)

// ReadFile reads a recording, gzip-compressed (as serve --history keeps
// triggered traces) or not. A torn last line gives the trace before it
// and a *jsonl.TornError.
func ReadFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f)
}

// AnalyzeFile reads a kept trace (a torn one up to its damage) and
// splits its transfers, as trace --from does.
func AnalyzeFile(src string) (*Trace, []Transfer, error) {
	tr, err := ReadFile(src)
	var torn *jsonl.TornError
	if err != nil && !errors.As(err, &torn) {
		return nil, nil, err
	}
	a := Analyze(tr, SegmentOptions{}, JudgeOptions{})
	return tr, a.Transfers, nil
}

// WritePage writes the report page of tr to page and renames it into
// place; on failure the old file stays.
func WritePage(page *outfile.Atomic, tr *Trace, ts []Transfer) error {
	return page.Fill(func(w io.Writer) error { return WriteHTML(w, tr, ts, PageTitle(&tr.Header)) })
}

// WritePageFile renders the recording src as the page dst, as trace
// --from src --html dst does.
func WritePageFile(src, dst string) error {
	tr, ts, err := AnalyzeFile(src)
	if err != nil {
		return err
	}
	out, err := outfile.CreateAtomic(dst)
	if err != nil {
		return err
	}
	defer out.Abort()
	return WritePage(out, tr, ts)
}

// FileSink is a recording's -o file f: when a write fails (a full disk)
// it calls failed once and takes nothing more, and the recording goes on
// for the table; f keeps its error for its Commit.
func FileSink(f io.Writer, failed func(error)) io.Writer { return &fileSink{f: f, failed: failed} }

type fileSink struct {
	f      io.Writer
	failed func(error)
	done   bool
}

func (s *fileSink) Write(p []byte) (int, error) {
	if !s.done {
		if _, err := s.f.Write(p); err != nil {
			s.done = true
			s.failed(err)
		}
	}
	return len(p), nil
}
