// SPDX-License-Identifier: Apache-2.0

package source

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/phases"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// spans runs fn with a recorder and returns the spans it marked.
func spans(fn func(*phases.Recorder)) []phases.Span {
	r := phases.New(phases.Now(), "")
	fn(r)
	return r.Spans()
}

// TestRun: a step that works is timed, its phase marked, and recorded OK
// in every snapshot it ran for; one that fails is recorded failed, its
// error under its name.
func TestRun(t *testing.T) {
	a, b := &snapshot.Snapshot{}, &snapshot.Snapshot{}
	var got error
	marked := spans(func(ph *phases.Recorder) {
		_ = Run(ph, Step{Name: "sockdiag", Phase: "dump", Run: func() error {
			time.Sleep(2 * time.Millisecond)
			return nil
		}}, a, b)
		got = Run(ph, Step{Name: "procnet.netstat", Run: func() error { return errors.New("procnet: open netstat: gone") }}, a)
	})
	for _, s := range []*snapshot.Snapshot{a, b} {
		if len(s.Sources) == 0 || s.Sources[0].Source != "sockdiag" || !s.Sources[0].OK || s.Sources[0].Duration < 2*time.Millisecond {
			t.Errorf("sources %+v: want sockdiag OK, timed at 2 ms or more", s.Sources)
		}
	}
	if len(a.Sources) != 2 || a.Sources[1].Source != "procnet.netstat" || a.Sources[1].OK {
		t.Errorf("sources %+v: want procnet.netstat failed after sockdiag", a.Sources)
	}
	if len(a.Errors) != 1 || a.Errors[0] != (snapshot.SourceError{Source: "procnet.netstat", Err: "procnet: open netstat: gone"}) {
		t.Errorf("errors %+v: want the failure under its source's name", a.Errors)
	}
	if got == nil || len(b.Errors) != 0 {
		t.Errorf("Run returned %v, the other snapshot's errors %+v", got, b.Errors)
	}
	if len(marked) != 1 || marked[0].Name != "dump" || marked[0].Took() < 2*time.Millisecond {
		t.Errorf("phases %+v: want the one step with a phase, dump, marked for its time", marked)
	}
}

// TestRecordKinds: a step without a name is a phase only, an absent
// source records nothing, one that recorded its own errors only its
// failure; a step without a run, or without a recorder or a snapshot,
// fails without a panic.
func TestRecordKinds(t *testing.T) {
	s := &snapshot.Snapshot{}
	marked := spans(func(ph *phases.Recorder) {
		_ = Run(ph, Step{Phase: "counters and sysctls", Run: func() error { return errors.New("a group's error") }}, s)
	})
	if len(s.Sources) != 0 || len(s.Errors) != 0 || len(marked) != 1 || marked[0].Name != "counters and sysctls" {
		t.Errorf("a phase only: sources %+v, errors %+v, phases %+v", s.Sources, s.Errors, marked)
	}
	Exec(nil, Step{Name: "bpf", Run: func() error { return fmt.Errorf("eBPF events not loaded: %w", ErrAbsent) }}).Record(s)
	if len(s.Sources) != 0 || len(s.Errors) != 0 {
		t.Errorf("an absent source recorded: sources %+v, errors %+v", s.Sources, s.Errors)
	}
	_ = Run(nil, Step{Name: "appcaps", Run: func() error {
		s.AddError("appcaps", errors.New("nginx: budget spent"))
		return ErrRecorded
	}}, s)
	if len(s.Sources) != 1 || s.Sources[0].OK || len(s.Errors) != 1 {
		t.Errorf("recorded by the source: sources %+v, errors %+v; want it failed, its one error", s.Sources, s.Errors)
	}
	s = &snapshot.Snapshot{}
	if err := Run(nil, Step{Name: "procs.owners"}, s); err == nil || !strings.Contains(err.Error(), "procs.owners") {
		t.Errorf("no run: %v, want an error naming the source", err)
	}
	if len(s.Errors) != 1 || s.Errors[0].Source != "procs.owners" {
		t.Errorf("no run: errors %+v", s.Errors)
	}
	if err := Run(nil, Step{Name: "sysctl", Run: func() error { return nil }}); err != nil {
		t.Errorf("no snapshot: %v", err)
	}
}

// TestOneExecutor: no product code outside this package builds a
// snapshot.SourceStat: a source that timed and recorded itself, beside
// the executor, fails here.
func TestOneExecutor(t *testing.T) {
	root := filepath.Join("..")
	var sites []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" || filepath.Base(path) == "source" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.CompositeLit); ok && isSourceStat(lit.Type) {
				sites = append(sites, fset.Position(lit.Pos()).String())
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sites) > 0 {
		t.Errorf("SourceStat built outside the executor (use source.Exec and Result.Record): %s", strings.Join(sites, ", "))
	}
}

// isSourceStat reports whether a composite literal's type is
// snapshot.SourceStat, or SourceStat in package snapshot.
func isSourceStat(e ast.Expr) bool {
	switch t := e.(type) {
	case *ast.SelectorExpr:
		x, ok := t.X.(*ast.Ident)
		return ok && x.Name == "snapshot" && t.Sel.Name == "SourceStat"
	case *ast.Ident:
		return t.Name == "SourceStat"
	}
	return false
}
