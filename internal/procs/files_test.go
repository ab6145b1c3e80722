// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"errors"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
)

// fileRec is one record of a fake FileLister.
type fileRec struct{ tgid, pid, fd, ino uint32 }

type fakeFiles struct {
	recs []fileRec
	err  error
}

func (f fakeFiles) Files(fn func(tgid, pid, fd, ino uint32)) error {
	for _, r := range f.recs {
		fn(r.tgid, r.pid, r.fd, r.ino)
	}
	return f.err
}

// scanFiles walks l and builds its Owners, as collect does in two steps;
// nil on an error.
func scanFiles(s Scanner, l FileLister, want func(uint32) bool) (*Owners, error) {
	files, err := ReadFiles(l, 0)
	if err != nil {
		return nil, err
	}
	return s.OwnersOf(files, want), nil
}

// ScanFiles finds what Scan finds in the same processes: the fake tree of
// TestScanFakeTree as the kernel would list it.
func TestScanFilesMatchesScan(t *testing.T) {
	root := nginxTree(t)
	want := func(ino uint32) bool { return ino != 333 }
	fromProc, err := Scanner{Root: root}.Scan(want)
	if err != nil {
		t.Fatal(err)
	}
	recs := []fileRec{
		{100, 100, 0, 0}, {100, 100, 1, 0}, {100, 100, 3, 111}, {100, 100, 4, 222}, {100, 100, 5, 0},
		// A thread with a file table of its own: not in /proc/100/fd.
		{100, 101, 3, 555},
		{200, 200, 3, 111}, {200, 200, 7, 333},
		{300, 300, 0, 0}, {300, 300, 1, 0},
		{400, 400, 9, 444},
	}
	fromIter, err := scanFiles(Scanner{Root: root}, fakeFiles{recs: recs}, want)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(byInode(fromProc), byInode(fromIter), slices.Equal) {
		t.Errorf("ByInode: /proc %v, iterator %v", byInode(fromProc), byInode(fromIter))
	}
	if !maps.Equal(fromProc.Newest, fromIter.Newest) {
		t.Errorf("Newest: /proc %v, iterator %v", fromProc.Newest, fromIter.Newest)
	}
	if len(fromProc.Procs) != len(fromIter.Procs) {
		t.Fatalf("Procs: /proc %d, iterator %d", len(fromProc.Procs), len(fromIter.Procs))
	}
	for pid, p := range fromProc.Procs {
		q := fromIter.Procs[pid]
		if q == nil || q.Command != p.Command || q.FDs != p.FDs || (p.NofileSoft == nil) != (q.NofileSoft == nil) {
			t.Errorf("Procs[%d]: /proc %+v, iterator %+v", pid, p, q)
		}
	}
	// A failed walk is an error and no result.
	if o, err := scanFiles(Scanner{Root: root}, fakeFiles{recs: recs, err: errors.New("truncated")}, want); err == nil || o != nil {
		t.Errorf("failed walk = %v, %v", o, err)
	}
}

// fileOwners loads the kernel's file walk for tb, skipping where it
// cannot run; it is closed when tb ends.
func fileOwners(tb testing.TB) *bpfsource.FileOwners {
	tb.Helper()
	l, err := bpfsource.OpenFileOwners(nil)
	if errors.Is(err, bpfsource.ErrNotSupported) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// The kernel's walk finds this process's sockets as /proc does.
func TestScanFilesReal(t *testing.T) {
	l := fileOwners(t)
	fds, inos := openSockets(t, 5)
	keep := func(ino uint32) bool { return slices.Contains(inos, ino) }
	o, err := scanFiles(Scanner{Root: "/proc"}, l, keep)
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	for i, ino := range inos {
		if !slices.Equal(o.Refs(ino), []FDRef{{pid, fds[i]}}) {
			t.Errorf("inode %d: refs %v, want {%d %d}", ino, o.Refs(ino), pid, fds[i])
		}
	}
	p, q := o.Procs[pid], (*Owners)(nil)
	if q, err = (Scanner{Root: "/proc"}).Scan(keep); err != nil && !errors.Is(err, ErrPermission) {
		t.Fatal(err)
	}
	// Each walk holds one descriptor of its own while it reads.
	if p == nil || q.Procs[pid] == nil || p.Command != q.Procs[pid].Command || p.FDs < q.Procs[pid].FDs-2 || p.FDs > q.Procs[pid].FDs+2 {
		t.Errorf("Procs[self]: iterator %+v, /proc %+v", p, q.Procs[pid])
	}
}

// BenchmarkScanFiles is BenchmarkScan through the kernel's walk of every
// file table (root): it visits every process's files, not only this
// one's, so its ns/file is per file on the host.
func BenchmarkScanFiles(b *testing.B) {
	l := fileOwners(b)
	_, inos := openSockets(b, 10000)
	wanted := make(map[uint32]struct{}, len(inos))
	for _, ino := range inos {
		wanted[ino] = struct{}{}
	}
	files, err := ReadFiles(l, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		o, err := scanFiles(Scanner{Root: "/proc"}, l, func(ino uint32) bool { _, ok := wanted[ino]; return ok })
		if err != nil || len(o.Inodes()) != len(inos) {
			b.Fatalf("scan: %v, %d inodes", err, len(o.Inodes()))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(files.files()), "ns/file")
}

// The room ReadFiles makes for every open file is not kept for the few
// that were sockets.
func TestOwnersOfTrims(t *testing.T) {
	recs := []fileRec{{100, 100, 0, 0}, {100, 100, 1, 0}, {100, 100, 3, 111}, {200, 200, 4, 222}}
	files, err := ReadFiles(fakeFiles{recs: recs}, 100000)
	if err != nil {
		t.Fatal(err)
	}
	if n := files.files(); n != 4 {
		t.Errorf("Files() = %d, want 4", n)
	}
	o := Scanner{Root: t.TempDir()}.OwnersOf(files, nil)
	if len(o.refs) != 2 || cap(o.refs) > 4 {
		t.Errorf("owner records: %d, room for %d", len(o.refs), cap(o.refs))
	}
}
