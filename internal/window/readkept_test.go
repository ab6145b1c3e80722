// SPDX-License-Identifier: Apache-2.0

package window

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestReadKept: a file cut inside its second sample gives the first with
// where it was cut; one cut inside its only sample is an error.
func TestReadKept(t *testing.T) {
	var buf bytes.Buffer
	w, err := snapshot.NewWriter(&buf, "test")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := w.Write(&snapshot.Snapshot{Taken: time.Unix(int64(100+i), 0), Netns: snapshot.Netns{Name: "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	whole := buf.Bytes()
	lines := bytes.SplitAfter(whole, []byte("\n"))
	// header, sample 1, sample 2, "": cut sample 2 in half.
	cut := len(whole) - len(lines[2])/2 - 1
	ss, torn, err := ReadKept(bytes.NewReader(whole[:cut]))
	if err != nil || torn == nil || Samples(ss) != 1 {
		t.Fatalf("cut in the second sample: %d samples, torn %v, err %v; want 1, a torn line, no error", Samples(ss), torn, err)
	}
	cut = len(lines[0]) + len(lines[1])/2
	ss, torn, err = ReadKept(bytes.NewReader(whole[:cut]))
	var te *jsonl.TornError
	if torn != nil || !errors.As(err, &te) || Samples(ss) != 0 {
		t.Fatalf("cut in the only sample: %d samples, torn %v, err %v; want the torn error", Samples(ss), torn, err)
	}
	if _, torn, err = ReadKept(bytes.NewReader(whole)); err != nil || torn != nil {
		t.Fatalf("whole file: torn %v, err %v", torn, err)
	}
}
