// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"errors"
	"testing"
)

// failAfter takes n writes, then fails every one.
type failAfter struct{ n, got int }

func (f *failAfter) Write(p []byte) (int, error) {
	if f.got >= f.n {
		return 0, errors.New("no space left on device")
	}
	f.got++
	return len(p), nil
}

// TestFileSink: a failed write is said once, nothing more reaches the
// file, and the recording's writes all succeed.
func TestFileSink(t *testing.T) {
	f := &failAfter{n: 2}
	var said []error
	s := FileSink(f, func(err error) { said = append(said, err) })
	for i := range 5 {
		if n, err := s.Write([]byte("line\n")); n != 5 || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if len(said) != 1 || f.got != 2 {
		t.Errorf("said %v, file took %d writes; want one error and 2", said, f.got)
	}
}
