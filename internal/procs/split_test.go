// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"runtime"
	"slices"
	"strconv"
	"testing"
)

// A process with more than splitMin fds is read by several threads: every
// kept socket is found with its fd, the rejected one is the newest, fds
// count all, and the process is read once.
func TestScanSplitsBigProcess(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one thread: nothing is split")
	}
	root := t.TempDir()
	const n = 2*splitMin + 123
	fds := map[int]string{}
	for fd := range n {
		fds[fd] = "socket:[" + strconv.Itoa(100000+fd) + "]"
		if fd%7 == 0 {
			fds[fd] = "/dev/null"
		}
	}
	fakeProc(t, root, 42, "holder", limitsNginx, fds)
	fakeProc(t, root, 43, "small", "", map[int]string{3: "socket:[7]"})
	const rejected = 100000 + n - 1 // the highest socket inode
	o, err := Scanner{Root: root}.Scan(func(ino uint32) bool { return ino != rejected })
	if err != nil {
		t.Fatal(err)
	}
	var want []uint32
	for fd := range n {
		if fd%7 != 0 && 100000+fd != rejected {
			want = append(want, uint32(100000+fd))
		}
	}
	var got []uint32
	for ino, refs := range byInode(o) {
		if ino == 7 {
			continue
		}
		got = append(got, ino)
		if len(refs) != 1 || refs[0] != (FDRef{Pid: 42, FD: int(ino) - 100000}) {
			t.Fatalf("inode %d: refs %v", ino, refs)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%d inodes kept, want %d", len(got), len(want))
	}
	if p := o.Procs[42]; p == nil || p.FDs != n || p.Command != "holder" {
		t.Errorf("Procs[42] = %+v, want %d fds", p, n)
	}
	if o.Newest[42] != rejected {
		t.Errorf("Newest[42] = %d, want %d", o.Newest[42], rejected)
	}
	if refs := o.Refs(7); len(refs) != 1 || refs[0].Pid != 43 {
		t.Errorf("small process: %v", refs)
	}
}
