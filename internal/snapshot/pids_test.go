// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestPidList: a list reads back as it was made, none is left out of JSON,
// a slab's lists stay apart, and PidsAt follows its slice.
func TestPidList(t *testing.T) {
	var none PidList
	if !none.IsZero() || none.List() != nil || none.Len() != 0 || !PidsOf().IsZero() {
		t.Error("the zero PidList holds pids")
	}
	sk := Socket{State: Established, Pids: PidsOf(7, 9)}
	b, err := json.Marshal(&sk)
	var back Socket
	if err != nil || json.Unmarshal(b, &back) != nil || !slices.Equal(back.Pids.List(), []int{7, 9}) || string(b) != string(sk.AppendJSON(nil)) {
		t.Errorf("%s read back as %v (%v); AppendJSON %s", b, back.Pids.List(), err, sk.AppendJSON(nil))
	}
	if err := json.Unmarshal([]byte(`{"pids":null}`), &back); err != nil || !back.Pids.IsZero() {
		t.Errorf("null pids: %v (%v)", back.Pids.List(), err)
	}
	if json.Unmarshal([]byte(`{"pids":["x"]}`), &back) == nil {
		t.Error("a pid that is no number was read")
	}
	sk.Pids = PidList{}
	if b, _ := json.Marshal(&sk); string(b) != string(sk.AppendJSON(nil)) || slices.Contains(b, '[') {
		t.Errorf("no pids written as %s", b)
	}
	var slab PidSlab
	lists := make([]PidList, 3*pidSlabHeads)
	for i := range lists {
		lists[i] = slab.Of([]int{i, i + 1})
	}
	for i, l := range lists {
		if !slices.Equal(l.List(), []int{i, i + 1}) || (i > 0 && l.Same(lists[i-1])) {
			t.Fatalf("slab list %d: %v", i, l.List())
		}
	}
	if !slab.Of(nil).IsZero() {
		t.Error("an empty list from the slab is not none")
	}
	buf := []int{1}
	at := PidsAt(&buf)
	buf = append(buf[:0], 4, 5)
	if !slices.Equal(at.List(), []int{4, 5}) {
		t.Errorf("PidsAt: %v, want what the slice holds now", at.List())
	}
}
