// SPDX-License-Identifier: Apache-2.0

package window

import (
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestNothingCollected(t *testing.T) {
	if !NothingCollected([]Series{{Snaps: nil}}) {
		t.Error("empty series counted as collected")
	}
}

// TestFailureNotes: a failure's note names up to three namespaces,
// escaped, then counts them; the first failure's text names its source
// once.
func TestFailureNotes(t *testing.T) {
	snap := func(ns, src, err string) *snapshot.Snapshot {
		s := &snapshot.Snapshot{Netns: snapshot.Netns{Name: ns}}
		s.Errors = append(s.Errors, snapshot.SourceError{Source: src, Err: err})
		return s
	}
	var ss []Series
	for _, ns := range []string{"a", "b\x1b[31m", "c", "d"} {
		ss = append(ss, Series{Netns: ns, Snaps: []*snapshot.Snapshot{snap(ns, "sockdiag", "denied")}})
	}
	fs := Failures(ss)
	if len(fs) != 1 {
		t.Fatalf("failures %+v, want one", fs)
	}
	if got, want := fs[0].Note(), `4 network namespaces (a, b\x1b[31m, c, ...): source sockdiag incomplete: denied`; got != want {
		t.Errorf("note %q, want %q", got, want)
	}
	if got, want := Failures(ss[:2])[0].Note(), `netns a, b\x1b[31m: source sockdiag incomplete: denied`; got != want {
		t.Errorf("note %q, want %q", got, want)
	}
	if got := FirstErrorText(ss); got != "sockdiag: denied" {
		t.Errorf("first error %q", got)
	}
	if got := FirstErrorText([]Series{{Snaps: []*snapshot.Snapshot{snap("h", "netns", "netns: enter host: gone")}}}); got != "netns: enter host: gone" {
		t.Errorf("first error %q: the source said twice", got)
	}
	if got := FirstErrorText(nil); got != "no source answered" {
		t.Errorf("no failure: %q", got)
	}
}
