// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"slices"
	"strconv"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// FileLister lists every open file of every process, one process's files
// together, with the socket inode of each socket (0 for other files):
// *bpfsource.FileOwners, an eBPF iter/task_file walk. Pids are the host's.
type FileLister interface {
	Files(fn func(tgid, pid, fd, ino uint32)) error
}

// FileTable is a FileLister's walk as OwnersOf reads it, held so that
// the walk can run beside other work and be joined later: the socket
// files of each process's own file table (12 bytes each, where a record
// of every file would be 16 bytes each and a second copy for the join),
// and each process's count of open files. Only a process's own file table
// counts, as in /proc/PID/fd: a thread with a table of its own (pid !=
// tgid) is skipped.
type FileTable struct {
	refs []inodeRef
	fds  map[int]int
}

// ReadFiles lists every open file with l.
//
// hint is how many files to expect (fs/file-nr), an upper bound of the
// sockets among them, so that a million are not copied over and over
// while the list grows (OwnersOf trims what is left over); 0 when
// unknown.
func ReadFiles(l FileLister, hint int) (*FileTable, error) {
	t := &FileTable{refs: make([]inodeRef, 0, max(hint+hint/16, 0)), fds: map[int]int{}}
	// The kernel lists one process's files together: counted in cur and
	// n, and added to fds when the next process starts.
	cur, n := -1, 0
	err := l.Files(func(tgid, pid, fd, ino uint32) {
		if pid != tgid {
			return
		}
		if p := int(tgid); p != cur {
			if cur >= 0 {
				t.fds[cur] += n
			}
			cur, n = p, 0
		}
		n++
		if ino != 0 {
			t.refs = append(t.refs, inodeRef{ino, int32(tgid), int32(fd)})
		}
	})
	if cur >= 0 {
		t.fds[cur] += n
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// files is how many files the processes' own tables held.
func (t *FileTable) files() int {
	n := 0
	for _, k := range t.fds {
		n += k
	}
	return n
}

// OwnersOf is Scan from a FileTable instead of /proc/PID/fd: the same
// Owners, with each owner's command and limits still read below Root.
// The Owners take t's records: t is not to be used again.
func (s Scanner) OwnersOf(t *FileTable, want func(inode uint32) bool) *Owners {
	root := s.Root
	if root == "" {
		root = "/proc"
	}
	out := &Owners{Procs: make(map[int]*snapshot.Proc), Newest: make(map[int]uint32)}
	refs := t.refs[:0]
	kept, last := map[int]bool{}, int32(-1)
	for _, r := range t.refs {
		if want != nil && !want(r.ino) {
			out.Newest[int(r.pid)] = max(out.Newest[int(r.pid)], r.ino)
			continue
		}
		if r.pid != last { // one process's files come together
			kept[int(r.pid)], last = true, r.pid
		}
		refs = append(refs, r)
	}
	t.refs = nil
	if cap(refs) > 2*len(refs) {
		refs = slices.Clone(refs) // room made for files that were not sockets
	}
	for pid := range kept {
		out.Procs[pid] = readProc(root+"/"+strconv.Itoa(pid), pid, t.fds[pid])
	}
	out.setRefs(refs)
	return out
}
