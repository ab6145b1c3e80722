// SPDX-License-Identifier: Apache-2.0

// Package procs maps socket inodes to the processes holding them, with each
// owner's command, open fd count and RLIMIT_NOFILE, by walking /proc/PID/fd.
package procs

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/capability"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// ErrPermission is wrapped, next to the system's error, by errors about
// processes this one may not inspect: their /proc/PID/fd and pidfd_getfd
// need ptrace access (CAP_SYS_PTRACE, unless an LSM or a user namespace
// refuses it anyway).
var ErrPermission error = &capability.Missing{Cap: unix.CAP_SYS_PTRACE, Name: "CAP_SYS_PTRACE", Text: "needs ptrace access"}

// Scanner reads process information below Root ("/proc" in production).
type Scanner struct{ Root string }

// FDRef is one file descriptor that refers to a socket.
type FDRef struct{ Pid, FD int }

// Owners is the result of one Scan.
type Owners struct {
	// refs are every kept (pid, fd) holding a socket, sorted by inode,
	// pid and fd. A million sockets are joined to them by sorting, not
	// through a map of every inode.
	refs []inodeRef
	// matched marks the refs Attach found in a snapshot (NoteNewest).
	matched []bool
	// Procs holds every pid seen holding a kept socket.
	Procs map[int]*snapshot.Proc
	// Newest maps each pid holding sockets that are in none of the
	// snapshots looked at to the highest such socket inode: sockets
	// created after the dump have inodes above the dump's, so it tells
	// which processes are opening sockets right now. The walk fills it
	// from the sockets want rejected, NoteNewest from those Attach did
	// not find.
	Newest map[int]uint32
}

// Refs returns every (pid, fd) holding the socket with inode ino, sorted
// by pid and fd, in a new slice.
func (o *Owners) Refs(ino uint32) []FDRef {
	lo, hi := o.span(ino)
	if lo == hi {
		return nil
	}
	out := make([]FDRef, 0, hi-lo)
	for _, r := range o.refs[lo:hi] {
		out = append(out, r.ref())
	}
	return out
}

// AppendPids appends the pids holding the socket with inode ino to buf,
// sorted and each once, without allocating beyond buf.
func (o *Owners) AppendPids(buf []int, ino uint32) []int {
	lo, hi := o.span(ino)
	return appendPids(buf, o.refs[lo:hi])
}

// appendPids appends the pids of one inode's refs, each once.
func appendPids(buf []int, refs []inodeRef) []int {
	at := len(buf)
	for _, r := range refs {
		if len(buf) == at || buf[len(buf)-1] != int(r.pid) { // sorted by pid
			buf = append(buf, int(r.pid))
		}
	}
	return buf
}

// span is where ino's refs are.
func (o *Owners) span(ino uint32) (lo, hi int) {
	lo, _ = slices.BinarySearchFunc(o.refs, ino, func(r inodeRef, ino uint32) int { return cmp.Compare(r.ino, ino) })
	hi = lo
	for hi < len(o.refs) && o.refs[hi].ino == ino {
		hi++
	}
	return lo, hi
}

// Inodes lists the distinct socket inodes held, ascending.
func (o *Owners) Inodes() []uint32 {
	out := make([]uint32, 0, len(o.refs))
	for _, r := range o.refs {
		if len(out) == 0 || out[len(out)-1] != r.ino {
			out = append(out, r.ino)
		}
	}
	return out
}

// NoteNewest adds to Newest, per pid, the highest socket inode that no
// Attach call found in its snapshot: call it after attaching every
// snapshot of one collection.
func (o *Owners) NoteNewest() {
	for i, ok := range o.matched {
		if !ok {
			pid := int(o.refs[i].pid)
			o.Newest[pid] = max(o.Newest[pid], o.refs[i].ino)
		}
	}
}

// Scan walks Root/[0-9]*/fd once. Processes that vanish mid-scan are skipped;
// unreadable ones are counted and reported as one error next to the partial
// result. want, if non-nil, limits which inodes are kept (it may be called
// from several goroutines at once); fd counts always count every fd.
func (s Scanner) Scan(want func(inode uint32) bool) (*Owners, error) {
	root := s.Root
	if root == "" {
		root = "/proc"
	}
	pids, err := listPids(root)
	if err != nil {
		return nil, err
	}
	// Processes are walked in parallel: readlink in /proc/PID/fd costs a few
	// microseconds per fd, and different processes scale (two of 19.5k fds:
	// ~80-120 ms against ~135-155 ms serially, loaded 2-core VM). Splitting
	// one process's fds across threads gained nothing there.
	workers := min(runtime.GOMAXPROCS(0), maxWorkers, len(pids))
	ws := make([]walker, max(workers, 1))
	var next atomic.Int64
	var wg sync.WaitGroup
	for i := range ws {
		w := &ws[i]
		w.dents, w.link, w.want, w.newest = make([]byte, 32<<10), make([]byte, 64), want, map[int]uint32{}
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= len(pids) {
					return
				}
				w.note(pids[k], w.proc(root, pids[k]))
			}
		})
	}
	wg.Wait()

	out := &Owners{Procs: make(map[int]*snapshot.Proc), Newest: make(map[int]uint32)}
	var denied, failed []int
	var total int
	var firstFail error
	for i := range ws {
		w := &ws[i]
		denied = append(denied, w.denied...)
		failed = append(failed, w.failed...)
		if firstFail == nil {
			firstFail = w.firstFail
		}
		total += len(w.refs)
		for _, p := range w.procs {
			out.Procs[p.Pid] = p
		}
		for pid, ino := range w.newest {
			out.Newest[pid] = ino
		}
	}
	all := make([]inodeRef, 0, total)
	for i := range ws {
		all = append(all, ws[i].refs...)
	}
	out.setRefs(all)
	var errs []error
	if len(denied) > 0 {
		slices.Sort(denied)
		errs = append(errs, fmt.Errorf("procs: %s: fds unreadable: %w (%w)", Names(root, denied), os.ErrPermission, ErrPermission))
	}
	if len(failed) > 0 {
		slices.Sort(failed)
		errs = append(errs, fmt.Errorf("procs: %s: fds unreadable: %w", Names(root, failed), firstFail))
	}
	return out, errors.Join(errs...)
}

// setRefs sorts refs by inode, pid and fd and keeps them (not a copy).
func (o *Owners) setRefs(refs []inodeRef) {
	sortRefs(refs)
	o.refs, o.matched = refs, make([]bool, len(refs))
}

// listPids returns the numeric entries of root.
func listPids(root string) ([]int, error) {
	d, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("procs: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("procs: list %s: %w", root, err)
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, ok := atoi(n); ok {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// Names names up to three processes by pid and command (read below
// root), and counts the rest: "pid 1 (init)",
// "4 processes: pid 1 (init), pid 7 (a), pid 9 (b), ...".
func Names(root string, pids []int) string {
	var b strings.Builder
	for i, pid := range pids[:min(len(pids), 3)] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("pid " + strconv.Itoa(pid))
		if comm, err := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/comm"); err == nil {
			b.WriteString(" (" + strings.TrimSpace(string(comm)) + ")")
		}
	}
	if len(pids) > 3 {
		b.WriteString(", ...")
	}
	if len(pids) == 1 {
		return b.String()
	}
	return strconv.Itoa(len(pids)) + " processes: " + b.String()
}

// maxWorkers bounds the parallel walk; more threads only contend.
const maxWorkers = 4

// walker is one worker's buffers, reused across processes, and its results.
type walker struct {
	dents []byte
	link  []byte
	want  func(uint32) bool
	// The fd names of the process being walked, NUL-terminated, and
	// where each ends.
	names    []byte
	nameEnds []int

	refs   []inodeRef
	procs  []*snapshot.Proc
	newest map[int]uint32

	denied, failed []int
	firstFail      error
}

// inodeRef is one (pid, fd) holding socket ino, in 12 bytes: a million
// of them are sorted before Owners keeps them.
type inodeRef struct {
	ino     uint32
	pid, fd int32
}

func (r inodeRef) ref() FDRef { return FDRef{Pid: int(r.pid), FD: int(r.fd)} }

// note classifies one process's walk error.
func (w *walker) note(pid int, err error) {
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESRCH):
		// vanished mid-scan
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		w.denied = append(w.denied, pid)
	default:
		w.failed = append(w.failed, pid)
		if w.firstFail == nil {
			w.firstFail = err
		}
	}
}

// proc walks one process; on error none of its sockets are kept.
func (w *walker) proc(root string, pid int) error {
	mark := len(w.refs)
	err := w.walk(root, pid)
	if err != nil {
		w.refs = w.refs[:mark] // all of a process or nothing
	}
	return err
}

// walk lists one process's fd directory, then reads comm and limits if it
// holds a kept socket.
func (w *walker) walk(root string, pid int) error {
	dir := root + "/" + strconv.Itoa(pid)
	dfd, err := unix.Open(dir+"/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	// The names first, NUL-terminated, then one readlinkat each: a process
	// with many fds has them read by several threads (splitReadlinks).
	w.names, w.nameEnds = w.names[:0], w.nameEnds[:0]
	for {
		n, err := unix.Getdents(dfd, w.dents)
		if err != nil {
			return err
		}
		if n <= 0 {
			break
		}
		for off := 0; off < n; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			if off+19 > n {
				break
			}
			reclen := int(binary.NativeEndian.Uint16(w.dents[off+16:]))
			if reclen <= 19 || off+reclen > n {
				break
			}
			name := w.dents[off+19 : off+reclen] // NUL-terminated, padded
			off += reclen
			if _, ok := atoiNul(name); !ok {
				continue // "." and ".."
			}
			i := 0
			for i < len(name) && name[i] != 0 {
				i++
			}
			w.names = append(w.names, name[:i]...)
			w.names = append(w.names, 0)
			w.nameEnds = append(w.nameEnds, len(w.names))
		}
	}
	fds := len(w.nameEnds)
	mark := len(w.refs)
	parts := 1
	if fds >= splitMin {
		parts = min(runtime.GOMAXPROCS(0), maxWorkers, fds/(splitMin/2))
	}
	if parts <= 1 {
		var newest uint32
		if w.refs, newest, err = readlinks(dfd, pid, w.names, w.nameEnds, 0, w.link, w.want, w.refs); err != nil {
			return err
		}
		w.noteNewest(pid, newest)
	} else if err := w.splitReadlinks(dfd, pid, parts); err != nil {
		return err
	}
	if len(w.refs) == mark {
		return nil
	}
	w.procs = append(w.procs, readProc(dir, pid, fds))
	return nil
}

// readProc reads the command and RLIMIT_NOFILE of an owner from dir
// (root/PID); what cannot be read stays unset.
func readProc(dir string, pid, fds int) *snapshot.Proc {
	p := &snapshot.Proc{Pid: pid, FDs: fds}
	if b, err := os.ReadFile(dir + "/comm"); err == nil {
		if len(b) > 0 && b[len(b)-1] == '\n' {
			b = b[:len(b)-1]
		}
		p.Command = string(b)
	}
	if f, err := os.Open(dir + "/limits"); err == nil {
		lim, _ := parseLimits(f) // a malformed other line does not spoil nofile
		f.Close()
		if l, ok := lim["Max open files"]; ok {
			p.NofileSoft, p.NofileHard = &l.Soft, &l.Hard
		}
	}
	return p
}

// splitMin is the fd count from which one process's readlinks are split
// between threads: a holder of 18,000 sockets beside small processes
// would otherwise keep one core busy while the other idles. The kernel
// scales: two threads reading one process's fds spent about 10 % more CPU
// in all than one (10,000 fds, Linux 6.18).
const splitMin = 4096

// splitReadlinks reads the listed fds of one process in parts, one
// thread each, appending the kept ones to w.refs.
func (w *walker) splitReadlinks(dfd, pid, parts int) error {
	type part struct {
		refs   []inodeRef
		newest uint32
		err    error
	}
	res := make([]part, parts)
	per := (len(w.nameEnds) + parts - 1) / parts
	var wg sync.WaitGroup
	for k := range res {
		lo, hi := k*per, min((k+1)*per, len(w.nameEnds))
		wg.Go(func() {
			start := 0
			if lo > 0 {
				start = w.nameEnds[lo-1]
			}
			res[k].refs, res[k].newest, res[k].err = readlinks(dfd, pid, w.names, w.nameEnds[lo:hi], start, make([]byte, len(w.link)), w.want, nil)
		})
	}
	wg.Wait()
	for _, r := range res {
		if r.err != nil {
			return r.err
		}
	}
	for _, r := range res {
		w.refs = append(w.refs, r.refs...)
		w.noteNewest(pid, r.newest)
	}
	return nil
}

func (w *walker) noteNewest(pid int, ino uint32) {
	if ino > w.newest[pid] {
		w.newest[pid] = ino
	}
}

// readlinks reads the fd links named in names (NUL-terminated, ending at
// ends, the first starting at start) relative to dfd, and appends the
// socket inodes want keeps to refs. newest is the highest socket inode
// want rejected. An fd closed since the listing is skipped; any other
// error ends the walk of the process.
func readlinks(dfd, pid int, names []byte, ends []int, start int, link []byte, want func(uint32) bool, refs []inodeRef) (_ []inodeRef, newest uint32, _ error) {
	for _, end := range ends {
		name := names[start:end]
		start = end
		fd, _ := atoiNul(name)
		// The name is NUL-terminated in the buffer: passed straight to
		// readlinkat, no string per fd.
		r, _, errno := unix.Syscall6(unix.SYS_READLINKAT, uintptr(dfd),
			uintptr(unsafe.Pointer(&name[0])),
			uintptr(unsafe.Pointer(&link[0])), uintptr(len(link)), 0, 0)
		if errno != 0 {
			if errno == unix.ENOENT {
				continue // closed since listing
			}
			return refs, 0, errno
		}
		ino, ok := parseSocketLink(link[:r])
		if !ok {
			continue
		}
		if want != nil && !want(ino) {
			newest = max(newest, ino)
			continue
		}
		refs = append(refs, inodeRef{ino, int32(pid), int32(fd)})
	}
	return refs, newest, nil
}

// parseSocketLink decodes a "socket:[12345]" fd link target.
func parseSocketLink(b []byte) (uint32, bool) {
	const prefix = "socket:["
	if len(b) < len(prefix)+2 || string(b[:len(prefix)]) != prefix || b[len(b)-1] != ']' {
		return 0, false
	}
	var v uint64
	digits := b[len(prefix) : len(b)-1]
	if len(digits) > 10 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if v > 1<<32-1 {
		return 0, false
	}
	return uint32(v), true
}

// atoiNul parses a NUL-terminated decimal name; false for anything else.
func atoiNul(b []byte) (int, bool) {
	v, n := 0, 0
	for _, c := range b {
		if c == 0 {
			break
		}
		if c < '0' || c > '9' || n >= 10 {
			return 0, false
		}
		v = v*10 + int(c-'0')
		n++
	}
	return v, n > 0
}

func atoi(s string) (int, bool) {
	if len(s) == 0 || len(s) > 10 {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// pidSlab is how many pids one allocation of Attach holds.
const pidSlab = 4096

// Attach sets sk.Pids for every socket in snap (sorted, unique) and adds
// those owners, and only those, to snap.Procs. The sockets are visited
// in inode order, walking the sorted refs alongside.
func (o *Owners) Attach(snap *snapshot.Snapshot) {
	if o == nil || snap == nil {
		return
	}
	// inode<<32 | index: sorting the numbers sorts the sockets by inode.
	keys := make([]uint64, 0, len(snap.Sockets))
	for i := range snap.Sockets {
		if ino := snap.Sockets[i].Inode; ino != 0 {
			keys = append(keys, uint64(ino)<<32|uint64(i))
		}
	}
	sortKeys(keys)
	// Pids are cut from slabs: one allocation per 4,096 owners, not one
	// per socket (a million sockets were a million small objects for the
	// garbage collector to track). A socket held by the same processes as
	// the one before it in inode order, as most of a process's sockets
	// are, shares that one's list.
	var slab []int
	var prev snapshot.PidList
	var heads snapshot.PidSlab
	j, last := 0, -1
	for _, k := range keys {
		ino, sk := uint32(k>>32), &snap.Sockets[uint32(k)]
		for j < len(o.refs) && o.refs[j].ino < ino {
			j++
		}
		hi := j
		for hi < len(o.refs) && o.refs[hi].ino == ino {
			o.matched[hi] = true
			hi++
		}
		if hi == j {
			continue
		}
		if cap(slab)-len(slab) < hi-j {
			slab = make([]int, 0, max(pidSlab, hi-j))
		}
		at := len(slab)
		slab = appendPids(slab, o.refs[j:hi])
		if slices.Equal(slab[at:], prev.List()) {
			slab = slab[:at]
			sk.Pids = prev
			continue // its owners are added already
		}
		sk.Pids = heads.Of(slab[at:len(slab):len(slab)])
		prev = sk.Pids
		for _, pid := range sk.Pids.List() {
			if pid == last {
				continue // the previous socket's owner, already added
			}
			last = pid
			p, ok := o.Procs[pid]
			if !ok {
				continue
			}
			if snap.Procs == nil {
				snap.Procs = make(map[int]*snapshot.Proc)
			}
			if _, done := snap.Procs[pid]; !done {
				c := *p
				snap.Procs[pid] = &c
			}
		}
	}
}
