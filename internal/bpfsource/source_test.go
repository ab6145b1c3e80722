// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"errors"
	"maps"
	"os"
	"strings"
	"testing"
)

func TestNotSupportedError(t *testing.T) {
	err := notSupported("no kernel BTF")
	if !errors.Is(err, ErrNotSupported) || err.Error() != "bpfsource: not supported: no kernel BTF" {
		t.Errorf("err = %v", err)
	}
	if os.Geteuid() != 0 {
		_, err := Open(Options{})
		if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), needRoot) {
			t.Errorf("Open as non-root = %v, want not supported: %s", err, needRoot)
		}
	}
}

// The skipped runs of a reading are the growth of the kernel's totals
// since the previous one, from zero at the first; a program that skipped
// nothing is left out.
func TestSkippedSince(t *testing.T) {
	first := map[string]uint64{"inet_sock_set_state": 4, "kfree_skb": 0}
	if got := skippedSince(nil, first); !maps.Equal(got, map[string]uint64{"inet_sock_set_state": 4}) {
		t.Errorf("first reading: %v", got)
	}
	second := map[string]uint64{"inet_sock_set_state": 4, "kfree_skb": 3}
	if got := skippedSince(first, second); !maps.Equal(got, map[string]uint64{"kfree_skb": 3}) {
		t.Errorf("second reading: %v", got)
	}
	if got := skippedSince(second, second); got != nil {
		t.Errorf("nothing skipped: %v, want nil", got)
	}
	// Each reading keeps its totals for the next.
	var s Source
	for i, c := range []struct {
		totals map[string]uint64
		want   map[string]uint64
	}{{first, map[string]uint64{"inet_sock_set_state": 4}}, {second, map[string]uint64{"kfree_skb": 3}}, {second, nil}} {
		var r Reading
		s.noteSkipped(&r, c.totals)
		if !maps.Equal(r.Skipped, c.want) || (c.want == nil) != (r.Skipped == nil) {
			t.Errorf("reading %d: skipped %v, want %v", i+1, r.Skipped, c.want)
		}
	}
}
