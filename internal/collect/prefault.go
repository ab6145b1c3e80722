// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"unsafe"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"golang.org/x/sys/unix"
)

// prefaultMin is the size of a socket slice worth faulting in at once
// (about 280,000 sockets of 120 bytes; it was about 350,000 when a
// socket took 192).
const prefaultMin = 32 << 20

// newSockets makes an empty slice with room for n sockets. With faultIn
// a large one is faulted in writable at once (MADV_POPULATE_WRITE, Linux
// >= 5.14; ignored where refused) as far as the sockets the namespace
// counts (used; the room past them is left to fault if it is ever
// written): else the collector's scan of the fresh slice maps the
// kernel's zero page under it, and each first write to a page then
// replaces it and interrupts the other CPUs to flush their TLBs, in the
// middle of the dump.
func newSockets(n, used int, faultIn bool) []snapshot.Socket {
	s := make([]snapshot.Socket, 0, n)
	size := uintptr(min(used, n)) * unsafe.Sizeof(snapshot.Socket{})
	if !faultIn || size < prefaultMin {
		return s
	}
	p := unsafe.Pointer(unsafe.SliceData(s))
	start, page := uintptr(p), uintptr(unix.Getpagesize())
	lo, hi := (start+page-1)&^(page-1), (start+size)&^(page-1)
	if hi > lo {
		_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, lo-start)), hi-lo), unix.MADV_POPULATE_WRITE)
	}
	return s
}
