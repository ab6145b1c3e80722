package procs

import (
	"strconv"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// FileLister lists every open file of every process, one process's files
// together, with the socket inode of each socket (0 for other files):
// *bpfsource.FileOwners, an eBPF iter/task_file walk. Pids are the host's.
type FileLister interface {
	Files(fn func(tgid, pid, fd, ino uint32)) error
}

// ScanFiles is Scan from a FileLister instead of /proc/PID/fd: the same
// Owners, with each owner's command and limits still read below Root.
// Only a process's own file table counts, as in /proc/PID/fd: a thread
// with a table of its own (pid != tgid) is skipped. On an error the
// result is nil.
func (s Scanner) ScanFiles(l FileLister, want func(inode uint32) bool) (*Owners, error) {
	root := s.Root
	if root == "" {
		root = "/proc"
	}
	out := &Owners{Procs: make(map[int]*snapshot.Proc), Newest: make(map[int]uint32)}
	var refs []inodeRef
	// The kernel lists one process's files together: counted in cur and
	// n, and added to fds when the next process starts.
	fds, kept := map[int]int{}, map[int]bool{}
	cur, n := -1, 0
	err := l.Files(func(tgid, pid, fd, ino uint32) {
		if pid != tgid {
			return
		}
		if p := int(tgid); p != cur {
			if cur >= 0 {
				fds[cur] += n
			}
			cur, n = p, 0
		}
		n++
		if ino == 0 {
			return
		}
		if want != nil && !want(ino) {
			out.Newest[cur] = max(out.Newest[cur], ino)
			return
		}
		kept[cur] = true
		refs = append(refs, inodeRef{ino, FDRef{Pid: cur, FD: int(fd)}})
	})
	if err != nil {
		return nil, err
	}
	if cur >= 0 {
		fds[cur] += n
	}
	for pid := range kept {
		out.Procs[pid] = readProc(root+"/"+strconv.Itoa(pid), pid, fds[pid])
	}
	out.ByInode = byInode(len(refs), [][]inodeRef{refs})
	return out, nil
}
