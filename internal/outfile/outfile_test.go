// SPDX-License-Identifier: Apache-2.0

package outfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// victim makes a file that must not change, and returns its path.
func victim(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "victim")
	if err := os.WriteFile(p, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func unchanged(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "keep me\n" {
		t.Fatalf("%s changed: %.40q (%d bytes), %v", path, b, len(b), err)
	}
}

// noTemps fails when a temporary file is left in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file %s left behind", e.Name())
		}
	}
}

// withUmask runs fn with the process umask set to m: 0 shows the mode
// asked for, not the one a umask happens to leave.
func withUmask(t *testing.T, m int, fn func()) {
	t.Helper()
	old := syscall.Umask(m)
	defer syscall.Umask(old)
	fn()
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

func TestCreateRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	v := victim(t, dir)
	for _, target := range []string{v, filepath.Join(dir, "dangling")} {
		link := filepath.Join(dir, "out")
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		f, err := Create(link)
		if err == nil {
			f.Close()
			t.Fatalf("Create wrote through a symlink to %s", target)
		}
		if !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), link) {
			t.Fatalf("error %q: want ErrSymlink naming %s", err, link)
		}
		if _, err := os.Stat(filepath.Join(dir, "dangling")); err == nil {
			t.Fatal("Create made the dangling link's target")
		}
	}
	unchanged(t, v)
}

func TestCreateRefusesHardLink(t *testing.T) {
	dir := t.TempDir()
	v := victim(t, dir)
	link := filepath.Join(dir, "out")
	if err := os.Link(v, link); err != nil {
		t.Fatal(err)
	}
	if f, err := Create(link); !errors.Is(err, ErrHardLink) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("error %v, want ErrHardLink", err)
	}
	unchanged(t, v)
}

func TestCreateModeAndTruncate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out")
	withUmask(t, 0, func() {
		f, err := Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("a longer first content\n"); err != nil {
			t.Fatal(err)
		}
		f.Close()
	})
	if m := mode(t, p).Perm(); m != Mode {
		t.Fatalf("new file mode %v, want %v", m, os.FileMode(Mode))
	}
	// An existing file is truncated and keeps its mode.
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("short\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(p); string(b) != "short\n" {
		t.Fatalf("content %q: not truncated", b)
	}
	if m := mode(t, p).Perm(); m != 0o640 {
		t.Fatalf("existing file's mode became %v", m)
	}
	// A device is written as it is.
	f, err = Create(os.DevNull)
	if err != nil {
		t.Fatalf("Create(%s): %v", os.DevNull, err)
	}
	f.Close()
}

func TestAtomicCommitAndAbort(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "report.html")
	if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := CreateAtomic(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old\n" {
		t.Fatalf("path changed before Commit: %q", b)
	}
	a.Abort()
	a.Abort() // twice is harmless
	if b, _ := os.ReadFile(p); string(b) != "old\n" {
		t.Fatalf("Abort changed the path: %q", b)
	}
	noTemps(t, dir)

	withUmask(t, 0, func() { a, err = CreateAtomic(p) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("new\n")); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new\n" {
		t.Fatalf("after Commit: %q", b)
	}
	if m := mode(t, p).Perm(); m != Mode {
		t.Fatalf("committed file mode %v, want %v", m, os.FileMode(Mode))
	}
	if a.Commit() == nil {
		t.Fatal("a second Commit succeeded")
	}
	noTemps(t, dir)
}

func TestAtomicRefusals(t *testing.T) {
	dir := t.TempDir()
	v := victim(t, dir)
	link := filepath.Join(dir, "out.html")
	if err := os.Symlink(v, link); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateAtomic(link); !errors.Is(err, ErrSymlink) {
		t.Fatalf("symlink: error %v, want ErrSymlink", err)
	}
	if _, err := CreateAtomic(dir); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("directory: error %v, want EISDIR", err)
	}
	bad := filepath.Join(dir, "nonexistent", "x.html")
	_, err := CreateAtomic(bad)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("missing directory: error %q, want ENOENT naming %s", err, bad)
	}
	unchanged(t, v)
	noTemps(t, dir)
}

// TestAtomicDevice: a device cannot be replaced; it is written directly
// and its write error comes back from Write and Commit.
func TestAtomicDevice(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	a, err := CreateAtomic("/dev/full")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write to /dev/full: %v, want ENOSPC", err)
	}
	if err := a.Commit(); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "/dev/full") {
		t.Fatalf("Commit: %v, want ENOSPC naming /dev/full", err)
	}
}

// fullDiskEnv runs the test binary as a child whose writes past a few KiB
// fail (RLIMIT_FSIZE with SIGXFSZ ignored: EFBIG), as on a full disk.
const fullDiskEnv = "OUTFILE_TEST_FULL_DISK"

// TestAtomicFullDisk: a write that fails part way leaves the old file,
// and no temporary file.
func TestAtomicFullDisk(t *testing.T) {
	if dir := os.Getenv(fullDiskEnv); dir != "" {
		fullDiskChild(t, dir)
		return
	}
	dir := t.TempDir()
	v := victim(t, dir)
	cmd := exec.Command(os.Args[0], "-test.run=^TestAtomicFullDisk$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fullDiskEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("full disk: ok")) {
		t.Fatalf("child did not run its check:\n%s", out)
	}
	unchanged(t, v)
	noTemps(t, dir)
}

func fullDiskChild(t *testing.T, dir string) {
	signal.Ignore(syscall.SIGXFSZ)
	lim := syscall.Rlimit{Cur: 4096, Max: 4096}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	a, err := CreateAtomic(filepath.Join(dir, "victim"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 1024)
	var werr error
	for i := 0; i < 16 && werr == nil; i++ {
		_, werr = a.Write(chunk)
	}
	if !errors.Is(werr, syscall.EFBIG) {
		t.Fatalf("writes past RLIMIT_FSIZE: %v, want EFBIG", werr)
	}
	if err := a.Commit(); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("Commit after a failed write: %v", err)
	}
	t.Log("full disk: ok")
}

// TestCreateSharedDirectory: in a sticky world-writable directory (/tmp)
// a file or named pipe another user made is refused, whatever
// fs.protected_regular says; the same file elsewhere, or our own, is
// written. A named pipe without a reader fails at once.
func TestCreateSharedDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (files of another user)")
	}
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(shared, "rec.jsonl")
	if err := os.WriteFile(planted, []byte("theirs"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(planted); !errors.Is(err, ErrNotOurs) {
		t.Errorf("another user's file in a sticky shared directory: %v, want ErrNotOurs", err)
	}
	if b, _ := os.ReadFile(planted); string(b) != "theirs" {
		t.Errorf("planted file changed: %q", b)
	}
	fifo := filepath.Join(shared, "rec.fifo")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(fifo, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(fifo); !errors.Is(err, ErrNotOurs) && !errors.Is(err, syscall.ENXIO) {
		t.Errorf("another user's named pipe: %v, want refused", err)
	}
	own := filepath.Join(t.TempDir(), "own.fifo")
	if err := syscall.Mkfifo(own, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(own); !errors.Is(err, syscall.ENXIO) {
		t.Errorf("a named pipe without a reader: %v, want ENXIO at once", err)
	}
	// Not shared: a file another user owns in a private directory is
	// written (sudo into one's own home).
	private := filepath.Join(t.TempDir(), "rec.jsonl")
	if err := os.WriteFile(private, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(private, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	f, err := Create(private)
	if err != nil {
		t.Fatalf("another user's file in a private directory: %v", err)
	}
	f.Close()
}

// TestCreateDeviceLink: a link root owns to a device (/dev/stdout is one)
// is written through; the same link owned by another user is refused.
func TestCreateDeviceLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (links of another user)")
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "out")
	if err := os.Symlink("/dev/null", link); err != nil {
		t.Fatal(err)
	}
	f, err := Create(link)
	if err != nil {
		t.Fatalf("root's link to /dev/null: %v", err)
	}
	if _, err := f.WriteString("x"); err != nil {
		t.Error(err)
	}
	f.Close()
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(link); !errors.Is(err, ErrSymlink) {
		t.Errorf("another user's link to a device: %v, want ErrSymlink", err)
	}
	if _, err := Create("/dev/stdout"); err != nil {
		t.Errorf("/dev/stdout: %v", err)
	}
}

// TestAtomicFill: a write that fails leaves the path as it was and
// returns the writer's error; one that succeeds is renamed into place.
func TestAtomicFill(t *testing.T) {
	dir := t.TempDir()
	path := victim(t, dir)
	old, _ := os.ReadFile(path)
	a, err := CreateAtomic(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := errors.New("printer failed")
	if err := a.Fill(func(w io.Writer) error { _, _ = w.Write([]byte("half")); return bad }); !errors.Is(err, bad) {
		t.Errorf("Fill: %v, want the writer's error", err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, old) {
		t.Errorf("a failed Fill changed the file: %q", now)
	}
	if a, err = CreateAtomic(path); err != nil {
		t.Fatal(err)
	}
	if err := a.Fill(func(w io.Writer) error { _, err := w.Write([]byte("whole")); return err }); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(path); string(now) != "whole" {
		t.Errorf("after Fill: %q", now)
	}
}
