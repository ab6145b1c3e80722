// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// resident is the share of s's capacity (whole pages) in memory.
func resident(t *testing.T, s []snapshot.Socket) float64 {
	t.Helper()
	p := unsafe.Pointer(unsafe.SliceData(s))
	size := uintptr(cap(s)) * unsafe.Sizeof(snapshot.Socket{})
	start, page := uintptr(p), uintptr(unix.Getpagesize())
	lo, hi := (start+page-1)&^(page-1), (start+size)&^(page-1)
	vec := make([]byte, (hi-lo)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Add(p, lo-start)), hi-lo, uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Skipf("mincore: %v", errno)
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return float64(in) / float64(len(vec))
}

// A large slice for a one-shot command is in memory before the dump
// writes to it; a small one, or one for serve, is left to fault. It
// runs in a process of its own: memory an earlier test's heap held (an
// eBPF load parses the kernel's BTF) may be reused by the new slices
// and found in memory.
func TestNewSocketsFaultsIn(t *testing.T) {
	if os.Getenv("TCPDOCTOR_FAULTS_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNewSocketsFaultsIn$", "-test.v")
		cmd.Env = append(os.Environ(), "TCPDOCTOR_FAULTS_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("in a process of its own: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "--- SKIP") {
			t.Skipf("in a process of its own:\n%s", out)
		}
		return
	}
	page, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	if err := unix.Madvise(page, unix.MADV_POPULATE_WRITE); err != nil {
		t.Skipf("MADV_POPULATE_WRITE: %v (Linux < 5.14)", err)
	}
	// Freed memory back to the system, so a new slice is not one an
	// earlier run wrote; then no collection meanwhile: its scan would
	// map the zero page, which mincore counts as in memory.
	debug.FreeOSMemory()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// Twice the threshold: slices larger than any an earlier test freed
	// come from memory the heap never used, which it need not clear.
	n := int(2 * prefaultMin / unsafe.Sizeof(snapshot.Socket{}))
	if got := resident(t, newSockets(2*n, n, true)); got < 0.45 || got > 0.55 {
		t.Errorf("room for twice the sockets used: %.0f%% resident, want the half they fill", got*100)
	}
	if got := resident(t, newSockets(n, n, true)); got < 0.99 {
		t.Errorf("faulted in: %.0f%% resident, want all of it", got*100)
	}
	if got := resident(t, newSockets(n, n, false)); got > 0.5 {
		t.Errorf("left to fault: %.0f%% resident before any write", got*100)
	}
	if s := newSockets(10, 10, true); cap(s) != 10 || len(s) != 0 {
		t.Errorf("newSockets(10) = len %d cap %d", len(s), cap(s))
	}
}
