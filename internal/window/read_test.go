// SPDX-License-Identifier: Apache-2.0

package window

import "testing"

func TestNothingCollected(t *testing.T) {
	if !NothingCollected([]Series{{Snaps: nil}}) {
		t.Error("empty series counted as collected")
	}
}
