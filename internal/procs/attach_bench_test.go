// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"math/rand/v2"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// BenchmarkAttach joins a million sockets, in a dump's (random) inode
// order, to the file walk's refs of 56 holder processes, as `check` does
// at a million sockets (`go test -run XXX -bench Attach -benchtime 5x
// ./internal/procs`).
func BenchmarkAttach(b *testing.B) {
	const n, holders = 1_000_000, 56
	r := rand.New(rand.NewPCG(1, 2))
	base := uint32(5_000_000)
	snap := &snapshot.Snapshot{Sockets: make([]snapshot.Socket, n)}
	for i, p := range r.Perm(n) {
		snap.Sockets[i].Inode = base + uint32(p)
	}
	refs := make([]inodeRef, n)
	for i := range refs {
		// A holder's sockets are a run of inodes, as it opens them in turn.
		refs[i] = inodeRef{ino: base + uint32(i), pid: int32(1000 + i*holders/n), fd: int32(3 + i%(n/holders))}
	}
	o := &Owners{Procs: map[int]*snapshot.Proc{}}
	for p := range holders {
		o.Procs[1000+p] = &snapshot.Proc{Pid: 1000 + p}
	}
	o.setRefs(refs)
	for b.Loop() {
		snap.Procs = nil
		o.Attach(snap)
	}
	if snap.Sockets[0].Pids.Len() != 1 || len(snap.Procs) != holders {
		b.Fatalf("joined %d owners of socket 0, %d processes", snap.Sockets[0].Pids.Len(), len(snap.Procs))
	}
}
