// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

const limitsNginx = `Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max open files            1024                 524288               files     
Max nice priority         0                    0                    
`

const limitsUnlimited = `Limit                     Soft Limit           Hard Limit           Units     
Max open files            unlimited            unlimited            files     
`

// fakeProc builds root/PID with fd symlinks, comm and limits (empty strings
// leave a file out).
func fakeProc(t *testing.T, root string, pid int, comm, limits string, fds map[int]string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	for fd, target := range fds {
		if err := os.Symlink(target, filepath.Join(dir, "fd", strconv.Itoa(fd))); err != nil {
			t.Fatal(err)
		}
	}
	if comm != "" {
		if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if limits != "" {
		if err := os.WriteFile(filepath.Join(dir, "limits"), []byte(limits), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func i64(v int64) *int64 { return &v }

// nginxTree makes processes 100 to 400 below a new fake /proc root.
func nginxTree(t *testing.T) string {
	root := t.TempDir()
	fakeProc(t, root, 100, "nginx", limitsNginx, map[int]string{
		0: "/dev/null", 1: "pipe:[99]", 3: "socket:[111]", 4: "socket:[222]", 5: "anon_inode:[eventpoll]",
	})
	// 200 shares socket 111 (forked worker) and holds one unwanted socket.
	fakeProc(t, root, 200, "nginx", limitsUnlimited, map[int]string{3: "socket:[111]", 7: "socket:[333]"})
	// 300 holds no socket: it must not appear in Procs.
	fakeProc(t, root, 300, "bash", limitsNginx, map[int]string{0: "/dev/pts/0", 1: "/dev/pts/0"})
	// 400 holds a socket but has no comm or limits.
	fakeProc(t, root, 400, "", "", map[int]string{9: "socket:[444]"})
	return root
}

func TestScanFakeTree(t *testing.T) {
	root := nginxTree(t)
	// Malformed targets are not sockets.
	fakeProc(t, root, 500, "odd", "", map[int]string{
		1: "socket:[]", 2: "socket:[12a]", 3: "socket:[99999999999]", 4: "socket:[5", 5: "xsocket:[5]",
	})
	// Non-pid entries are ignored.
	if err := os.MkdirAll(filepath.Join(root, "self", "fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("socket:[111]", filepath.Join(root, "self", "fd", "3")); err != nil {
		t.Fatal(err)
	}

	want := func(ino uint32) bool { return ino != 333 }
	o, err := Scanner{Root: root}.Scan(want)
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	gotInodes := make([]uint32, 0, len(o.Inodes()))
	for ino := range byInode(o) {
		gotInodes = append(gotInodes, ino)
	}
	slices.Sort(gotInodes)
	if !slices.Equal(gotInodes, []uint32{111, 222, 444}) {
		t.Errorf("inodes = %v, want [111 222 444]", gotInodes)
	}
	// Shared sockets list their holders sorted, whatever worker found them.
	if refs := o.Refs(111); !slices.Equal(refs, []FDRef{{100, 3}, {200, 3}}) {
		t.Errorf("ByInode[111] = %v", o.Refs(111))
	}
	if got := o.Refs(444); !slices.Equal(got, []FDRef{{400, 9}}) {
		t.Errorf("ByInode[444] = %v", got)
	}

	p := o.Procs[100]
	if p == nil || p.Command != "nginx" || p.FDs != 5 || p.NofileSoft == nil || *p.NofileSoft != 1024 || *p.NofileHard != 524288 {
		t.Errorf("Procs[100] = %+v", p)
	}
	p = o.Procs[200]
	if p == nil || p.FDs != 2 || p.NofileSoft == nil || *p.NofileSoft != -1 || *p.NofileHard != -1 {
		t.Errorf("Procs[200] = %+v (fds count unwanted sockets too; unlimited is -1)", p)
	}
	if p := o.Procs[400]; p == nil || p.Command != "" || p.FDs != 1 || p.NofileSoft != nil || p.NofileHard != nil {
		t.Errorf("Procs[400] = %+v, want absent comm and limits", p)
	}
	for _, pid := range []int{300, 500} {
		if _, ok := o.Procs[pid]; ok {
			t.Errorf("Procs[%d] present, holds no kept socket", pid)
		}
	}
}

func TestScanBadRoot(t *testing.T) {
	_, err := Scanner{Root: filepath.Join(t.TempDir(), "nope")}.Scan(nil)
	if err == nil || !strings.HasPrefix(err.Error(), "procs: ") {
		t.Fatalf("err = %v, want procs: ...", err)
	}
}

func TestScanOtherErrorsSummarised(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 10, "ok", "", map[int]string{1: "socket:[7]"})
	// fd is a file, not a directory.
	if err := os.MkdirAll(filepath.Join(root, "11"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "11", "fd"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// 12 has vanished: no fd directory at all. Skipped silently.
	if err := os.MkdirAll(filepath.Join(root, "12"), 0o755); err != nil {
		t.Fatal(err)
	}
	o, err := Scanner{Root: root}.Scan(nil)
	if err == nil || err.Error() != "procs: pid 11: fds unreadable: not a directory" {
		t.Fatalf("err = %v", err)
	}
	if o == nil || len(o.Refs(7)) != 1 {
		t.Fatalf("partial result lost: %+v", o)
	}
}

// TestScanPermissionDenied runs the scan in a child without
// CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH when root, so mode 000 bites.
func TestScanPermissionDenied(t *testing.T) {
	if root := os.Getenv("PROCS_TEST_DENIED_ROOT"); root != "" {
		o, err := Scanner{Root: root}.Scan(nil)
		if err == nil {
			t.Fatal("no error")
		}
		os.Stdout.WriteString("RESULT " + err.Error() + " | " + strconv.Itoa(len(o.Refs(7))) + "\n")
		return
	}
	root := t.TempDir()
	fakeProc(t, root, 10, "ok", "", map[int]string{1: "socket:[7]"})
	fakeProc(t, root, 11, "secret", "", map[int]string{1: "socket:[8]"})
	fakeProc(t, root, 12, "secret", "", map[int]string{1: "socket:[9]"})
	for _, pid := range []string{"11", "12"} {
		fd := filepath.Join(root, pid, "fd")
		if err := os.Chmod(fd, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(fd, 0o755) }) // so TempDir can remove it

	}
	want := "procs: 2 processes: pid 11 (secret), pid 12 (secret): fds unreadable: permission denied (needs ptrace access) | 1"
	if os.Geteuid() != 0 {
		o, err := Scanner{Root: root}.Scan(nil)
		if got := errString(err) + " | " + strconv.Itoa(len(o.Refs(7))); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("root and no setpriv to drop CAP_DAC_OVERRIDE")
	}
	cmd := exec.Command(setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search",
		os.Args[0], "-test.run=^TestScanPermissionDenied$", "-test.v")
	cmd.Env = append(os.Environ(), "PROCS_TEST_DENIED_ROOT="+root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var got string
	for _, l := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(l, "RESULT "); ok {
			got = s
		}
	}
	if got != want {
		t.Fatalf("got %q, want %q\n%s", got, want, out)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestParseSocketLink(t *testing.T) {
	for in, want := range map[string]int64{
		"socket:[0]": 0, "socket:[12345]": 12345, "socket:[4294967295]": 4294967295,
		"socket:[4294967296]": -1, "socket:[]": -1, "socket:[1": -1, "socket:1]": -1,
		"pipe:[12]": -1, "socket:[-1]": -1, "socket:[ 1]": -1, "": -1,
	} {
		v, ok := parseSocketLink([]byte(in))
		if (want < 0) == ok || (ok && int64(v) != want) {
			t.Errorf("parseSocketLink(%q) = %d, %v; want %d", in, v, ok, want)
		}
	}
}

func TestParseLimits(t *testing.T) {
	f, err := os.Open("/proc/self/limits")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	lim, err := parseLimits(f)
	if err != nil {
		t.Fatalf("parseLimits(/proc/self/limits): %v", err)
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	l, ok := lim["Max open files"]
	if !ok || uint64(l.Soft) != rl.Cur || uint64(l.Hard) != rl.Max {
		t.Errorf("Max open files = %+v, %v; getrlimit %d/%d", l, ok, rl.Cur, rl.Max)
	}
	if l := lim["Max nice priority"]; l != (Limit{0, 0}) {
		t.Errorf("Max nice priority (no units) = %+v", l)
	}
	if len(lim) < 10 {
		t.Errorf("only %d limits parsed", len(lim))
	}

	lim, err = parseLimits(strings.NewReader("Max open files  1024\nMax bogus x y\nMax open files2 5 unlimited\n"))
	if err == nil || err.Error() != "procs: limits: malformed line 1, 2" {
		t.Errorf("err = %v", err)
	}
	if l := lim["Max open files2"]; l != (Limit{5, -1}) {
		t.Errorf("good line after bad ones = %+v", l)
	}
}

func FuzzParseLimits(f *testing.F) {
	f.Add(limitsNginx)
	f.Add(limitsUnlimited)
	f.Add("Max open files 99999999999999999999 1\n")
	f.Add("\x00 1 2\n")
	f.Fuzz(func(t *testing.T, s string) {
		lim, _ := parseLimits(strings.NewReader(s))
		for name, l := range lim {
			if name == "" || l.Soft < -1 || l.Hard < -1 {
				t.Fatalf("bad limit %q = %+v", name, l)
			}
		}
	})
}

func FuzzParseSocketLink(f *testing.F) {
	f.Add([]byte("socket:[12345]"))
	f.Add([]byte("socket:[4294967296]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, ok := parseSocketLink(b)
		digits, isSock := strings.CutPrefix(string(b), "socket:[")
		digits, closed := strings.CutSuffix(digits, "]")
		ref, err := strconv.ParseUint(digits, 10, 32)
		wantOK := isSock && closed && err == nil && !strings.HasPrefix(digits, "+") && len(digits) <= 10
		if ok != wantOK || (ok && uint64(v) != ref) {
			t.Fatalf("parseSocketLink(%q) = %d, %v; strconv says %d, %v", b, v, ok, ref, wantOK)
		}
	})
}

// openSockets opens n unconnected TCP sockets and returns their fds and
// inodes; they are closed at cleanup.
func openSockets(tb testing.TB, n int) ([]int, []uint32) {
	tb.Helper()
	fds := make([]int, 0, n)
	inos := make([]uint32, 0, n)
	tb.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	for i := 0; i < n; i++ {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			tb.Fatalf("socket %d: %v", i, err)
		}
		fds = append(fds, fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			tb.Fatal(err)
		}
		inos = append(inos, uint32(st.Ino))
	}
	return fds, inos
}

func TestScanReal(t *testing.T) {
	fds, inos := openSockets(t, 5)
	wanted := make(map[uint32]bool)
	for _, ino := range inos {
		wanted[ino] = true
	}
	o, err := Scanner{Root: "/proc"}.Scan(func(ino uint32) bool { return wanted[ino] })
	// Even root may be refused some processes (e.g. by an LSM or a
	// foreign user namespace); anything else is a failure.
	if err != nil && !errors.Is(err, ErrPermission) {
		t.Fatalf("Scan: %v", err)
	}
	pid := os.Getpid()
	for i, ino := range inos {
		if !slices.Contains(o.Refs(ino), (FDRef{pid, fds[i]})) {
			t.Errorf("inode %d: refs %v lack {%d %d}", ino, o.Refs(ino), pid, fds[i])
		}
	}
	if len(o.Inodes()) != len(inos) {
		t.Errorf("kept %d inodes, want %d", len(o.Inodes()), len(inos))
	}
	comm, _ := os.ReadFile("/proc/self/comm")
	p := o.Procs[pid]
	if p == nil {
		t.Fatal("own process missing from Procs")
	}
	if p.Command != strings.TrimSpace(string(comm)) || p.FDs < len(fds) || p.NofileSoft == nil {
		t.Errorf("Procs[self] = %+v", p)
	}
	if len(o.Procs) != 1 {
		t.Errorf("Procs has %d entries, want only self", len(o.Procs))
	}
}

// byInode lists an Owners' refs by inode.
func byInode(o *Owners) map[uint32][]FDRef {
	m := map[uint32][]FDRef{}
	for _, ino := range o.Inodes() {
		m[ino] = o.Refs(ino)
	}
	return m
}

func TestAttach(t *testing.T) {
	o := &Owners{
		Newest: map[int]uint32{},
		Procs: map[int]*snapshot.Proc{
			100: {Pid: 100, Command: "a", FDs: 5, NofileSoft: i64(1024)},
			200: {Pid: 200, Command: "b", FDs: 3},
			300: {Pid: 300, Command: "c", FDs: 1},
		},
	}
	o.setRefs([]inodeRef{{111, 200, 3}, {222, 100, 4}, {111, 100, 3}, {333, 300, 1}, {111, 200, 9}})
	snap := &snapshot.Snapshot{Sockets: []snapshot.Socket{{Inode: 111}, {Inode: 0}, {Inode: 999}, {Inode: 222}}}
	o.Attach(snap)
	if !slices.Equal(o.Refs(111), []FDRef{{100, 3}, {200, 3}, {200, 9}}) || o.Refs(999) != nil && len(o.Refs(999)) != 0 {
		t.Errorf("Refs(111) = %v, Refs(999) = %v", o.Refs(111), o.Refs(999))
	}
	if got := o.AppendPids([]int{7}, 111); !slices.Equal(got, []int{7, 100, 200}) {
		t.Errorf("AppendPids(111) = %v, want [7 100 200]: appended, each pid once", got)
	}
	if got := o.AppendPids(nil, 999); len(got) != 0 || !slices.Equal(o.Inodes(), []uint32{111, 222, 333}) {
		t.Errorf("AppendPids(999) = %v, Inodes = %v", got, o.Inodes())
	}
	// 333 is in no snapshot: its holder is opening sockets.
	o.NoteNewest()
	if len(o.Newest) != 1 || o.Newest[300] != 333 {
		t.Errorf("Newest = %v, want 300: 333", o.Newest)
	}
	if got := snap.Sockets[0].Pids.List(); !slices.Equal(got, []int{100, 200}) {
		t.Errorf("Pids = %v, want [100 200]", got)
	}
	if !snap.Sockets[1].Pids.IsZero() || !snap.Sockets[2].Pids.IsZero() {
		t.Error("unknown sockets got pids")
	}
	if got := snap.Sockets[3].Pids.List(); !slices.Equal(got, []int{100}) {
		t.Errorf("Pids = %v", got)
	}
	if len(snap.Procs) != 2 || snap.Procs[100].Command != "a" || snap.Procs[200] == nil {
		t.Errorf("Procs = %v, want 100 and 200 only", snap.Procs)
	}
	var nilOwners *Owners
	nilOwners.Attach(snap) // must not panic
}

// TestAttachShares: sockets held by the same processes share one list of
// pids (consecutive in inode order), and a list stays its own when the
// owners differ.
func TestAttachShares(t *testing.T) {
	o := &Owners{Procs: map[int]*snapshot.Proc{1: {Pid: 1}, 2: {Pid: 2}}}
	o.setRefs([]inodeRef{{10, 1, 3}, {11, 1, 4}, {12, 1, 5}, {12, 2, 5}, {13, 1, 6}, {14, 1, 7}})
	snap := &snapshot.Snapshot{Sockets: []snapshot.Socket{{Inode: 14}, {Inode: 10}, {Inode: 12}, {Inode: 11}, {Inode: 13}}}
	o.Attach(snap)
	want := [][]int{{1}, {1}, {1, 2}, {1}, {1}}
	for i, w := range want {
		if got := snap.Sockets[i].Pids.List(); !slices.Equal(got, w) || cap(got) != len(got) {
			t.Errorf("socket %d: pids %v (cap %d), want %v, full", i, got, cap(got), w)
		}
	}
	same := func(a, b int) bool { return snap.Sockets[a].Pids.Same(snap.Sockets[b].Pids) }
	if !same(1, 3) || same(2, 1) || same(3, 4) || !same(4, 0) {
		t.Error("inodes 10 and 11 must share a list, 12 its own, and 13 and 14 one after it")
	}
	if len(snap.Procs) != 2 {
		t.Errorf("Procs = %v, want 1 and 2", snap.Procs)
	}
}

func TestBufLock(t *testing.T) {
	fds, _ := openSockets(t, 4)
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 16384); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_RCVBUF, 16384); err != nil {
		t.Fatal(err)
	}
	for _, o := range []int{unix.SO_SNDBUF, unix.SO_RCVBUF} {
		if err := unix.SetsockoptInt(fds[2], unix.SOL_SOCKET, o, 65536); err != nil {
			t.Fatal(err)
		}
	}
	pid := os.Getpid()
	for i, want := range []uint8{BufLockSnd, BufLockRcv, BufLockSnd | BufLockRcv, 0} {
		got, err := BufLock(FDRef{pid, fds[i]}, 0)
		if err != nil {
			t.Fatalf("BufLock(self, %d): %v", fds[i], err)
		}
		if got != want {
			t.Errorf("socket %d: BufLock = %b, want %b", i, got, want)
		}
	}

	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := BufLock(FDRef{pid, int(f.Fd())}, 0); err == nil || !strings.HasSuffix(err.Error(), "not a socket") {
		t.Errorf("non-socket: err = %v", err)
	}
	if _, err := BufLock(FDRef{pid, 1 << 20}, 0); err == nil || !strings.HasSuffix(err.Error(), "no such open fd") {
		t.Errorf("bad fd: err = %v", err)
	}
	if _, err := BufLock(FDRef{0, 1}, 0); err == nil {
		t.Error("pid 0 accepted")
	}
	// The fd now holds another file than the socket asked for.
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		t.Fatal(err)
	}
	if _, err := BufLock(FDRef{pid, fds[0]}, uint32(st.Ino)+1); !errors.Is(err, ErrFDReused) {
		t.Errorf("wrong inode: err = %v, want ErrFDReused", err)
	}
	if _, err := BufLock(FDRef{pid, fds[0]}, uint32(st.Ino)); err != nil {
		t.Errorf("right inode: %v", err)
	}
}

// TestBufLockOtherProcess needs CAP_SYS_PTRACE over a child: root only.
func TestBufLockOtherProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to pidfd_getfd from another process")
	}
	fds, _ := openSockets(t, 1)
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 16384); err != nil {
		t.Fatal(err)
	}
	// The File gets a dup of its own: its finalizer would otherwise close
	// fds[0] a second time, at some GC, after cleanup closed it and another
	// test reused the number.
	dup, err := unix.Dup(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "sock")
	t.Cleanup(func() { f.Close() })
	cmd := exec.Command("sleep", "30")
	cmd.ExtraFiles = []*os.File{f} // fd 3 in the child
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	got, err := BufLock(FDRef{cmd.Process.Pid, 3}, 0)
	if err != nil || got != BufLockSnd {
		t.Fatalf("BufLock(child, 3) = %b, %v; want %b", got, err, BufLockSnd)
	}
}

func benchScan(b *testing.B, n int) {
	if n > 10000 {
		var rl unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur < uint64(n+100) {
			rl.Cur = uint64(n + 1000)
			if rl.Max < rl.Cur {
				rl.Max = rl.Cur
			}
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
				b.Skipf("cannot raise RLIMIT_NOFILE for %d sockets: %v", n, err)
			}
		}
	}
	_, inos := openSockets(b, n)
	// A root holding only this process, so ns/fd is about our walk.
	root := b.TempDir()
	pid := strconv.Itoa(os.Getpid())
	if err := os.Symlink("/proc/"+pid, filepath.Join(root, pid)); err != nil {
		b.Fatal(err)
	}
	wanted := make(map[uint32]struct{}, n)
	for _, ino := range inos {
		wanted[ino] = struct{}{}
	}
	want := func(ino uint32) bool { _, ok := wanted[ino]; return ok }
	var fds int
	b.ResetTimer()
	for b.Loop() {
		o, err := Scanner{Root: root}.Scan(want)
		if err != nil || len(o.Inodes()) != n {
			b.Fatalf("scan: %v, %d inodes", err, len(o.Inodes()))
		}
		fds = o.Procs[os.Getpid()].FDs
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(fds), "ns/fd")
}

func BenchmarkScan(b *testing.B) {
	b.Run("10k", func(b *testing.B) { benchScan(b, 10000) })
	b.Run("40k", func(b *testing.B) { benchScan(b, 40000) })
}

// TestBufLockNotPermitted re-runs itself without CAP_SYS_PTRACE against
// this (fully capable) process and checks the message.
func TestBufLockNotPermitted(t *testing.T) {
	if ref := os.Getenv("PROCS_TEST_BUFLOCK_REF"); ref != "" {
		pid, fd, _ := strings.Cut(ref, ":")
		p, _ := strconv.Atoi(pid)
		f, _ := strconv.Atoi(fd)
		_, err := BufLock(FDRef{p, f}, 0)
		os.Stdout.WriteString("RESULT " + errString(err) + "\n")
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to hold capabilities the child lacks")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv to drop CAP_SYS_PTRACE")
	}
	fds, _ := openSockets(t, 1)
	ref := strconv.Itoa(os.Getpid()) + ":" + strconv.Itoa(fds[0])
	cmd := exec.Command(setpriv, "--inh-caps=-all", "--bounding-set=-sys_ptrace",
		os.Args[0], "-test.run=^TestBufLockNotPermitted$", "-test.v")
	cmd.Env = append(os.Environ(), "PROCS_TEST_BUFLOCK_REF="+ref)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "RESULT procs: buflock pid " + strconv.Itoa(os.Getpid()) + " fd " + strconv.Itoa(fds[0]) +
		": pidfd_getfd: operation not permitted (needs ptrace access: CAP_SYS_PTRACE over the process)\n"
	if !strings.Contains(string(out), want) {
		t.Errorf("child output lacks %q:\n%s", want, out)
	}
}
