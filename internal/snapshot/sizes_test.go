// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"testing"
	"unsafe"
)

// TestSampleSizes pins the bytes a sample keeps of each established
// connection on a 64-bit machine, which docs/performance.md adds up for
// a million sockets: a change to these structs must change the figures
// there. `go test -v -run TestSampleSizes ./internal/snapshot` prints them.
func TestSampleSizes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the figures are a 64-bit machine's")
	}
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Socket", unsafe.Sizeof(Socket{}), 120},
		{"TCPInfo", unsafe.Sizeof(TCPInfo{}), 256},
		{"MemInfo", unsafe.Sizeof(MemInfo{}), 36},
		{"Was", unsafe.Sizeof(Was{}), 40},
	} {
		t.Logf("%s: %d bytes", c.name, c.got)
		if c.got != c.want {
			t.Errorf("%s is %d bytes, docs/performance.md says %d", c.name, c.got, c.want)
		}
	}
}
