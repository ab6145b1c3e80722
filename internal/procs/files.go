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

// FileRec is one open file as a FileLister gives it: Ino is the socket
// inode, 0 for other files.
type FileRec struct{ Tgid, Pid, FD, Ino uint32 }

// ReadFiles lists every open file with l, holding the records (16 bytes
// each) so that the walk can run beside other work and be joined later.
//
// hint is how many files to expect (fs/file-nr), so that a million are
// not copied over and over while the slice grows; 0 when unknown.
func ReadFiles(l FileLister, hint int) ([]FileRec, error) {
	recs := make([]FileRec, 0, max(hint+hint/16, 0))
	err := l.Files(func(tgid, pid, fd, ino uint32) {
		recs = append(recs, FileRec{tgid, pid, fd, ino})
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// OwnersOf is Scan from a FileLister's records instead of /proc/PID/fd:
// the same Owners, with each owner's command and limits still read below
// Root. Only a process's
// own file table counts, as in /proc/PID/fd: a thread with a table of
// its own (Pid != Tgid) is skipped.
func (s Scanner) OwnersOf(recs []FileRec, want func(inode uint32) bool) *Owners {
	root := s.Root
	if root == "" {
		root = "/proc"
	}
	out := &Owners{Procs: make(map[int]*snapshot.Proc), Newest: make(map[int]uint32)}
	socks := 0
	for _, r := range recs {
		if r.Ino != 0 {
			socks++
		}
	}
	refs := make([]inodeRef, 0, socks)
	// The kernel lists one process's files together: counted in cur and
	// n, and added to fds when the next process starts.
	fds, kept := map[int]int{}, map[int]bool{}
	cur, n := -1, 0
	for _, r := range recs {
		if r.Pid != r.Tgid {
			continue
		}
		if p := int(r.Tgid); p != cur {
			if cur >= 0 {
				fds[cur] += n
			}
			cur, n = p, 0
		}
		n++
		if r.Ino == 0 {
			continue
		}
		if want != nil && !want(r.Ino) {
			out.Newest[cur] = max(out.Newest[cur], r.Ino)
			continue
		}
		kept[cur] = true
		refs = append(refs, inodeRef{r.Ino, int32(cur), int32(r.FD)})
	}
	if cur >= 0 {
		fds[cur] += n
	}
	for pid := range kept {
		out.Procs[pid] = readProc(root+"/"+strconv.Itoa(pid), pid, fds[pid])
	}
	out.setRefs(refs)
	return out
}
