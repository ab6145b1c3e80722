// SPDX-License-Identifier: Apache-2.0

package history

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// One writer per directory: a second lock is refused, naming the holder,
// until the first is released.
func TestLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	l, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("made %v %v, want mode 0700", fi.Mode(), err)
	}
	_, err = LockDir(dir)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("second lock: %v", err)
	}
	l.Close()
	l2, err := LockDir(dir)
	if err != nil {
		t.Errorf("after release: %v", err)
	}
	l2.Close()
	// The lock file is no store file: never listed, never evicted.
	if fs, _ := listFiles(dir); len(fs) != 0 {
		t.Errorf("listed %v", fs)
	}
}

// A directory other users can write, or owned by another user, is
// refused as sshd refuses its files.
func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	if err := CheckDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o777, 0o1777, 0o770, 0o722} {
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := LockDir(dir); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "chmod go-w") {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(dir); err != nil {
		t.Errorf("mode 0755: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the owner check needs root to chown")
	}
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(dir); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "uid 4242") {
		t.Errorf("owned by uid 4242: %v", err)
	}
}

// A file dated in the future is set aside (said, read by no one, evicted
// first) instead of outliving the real history, and a huge sparse file
// counts for the blocks it has, not the size it claims.
func TestEvictionDistrustsFiles(t *testing.T) {
	dir := t.TempDir()
	now := at("a", 0).Taken.Add(time.Hour)
	write := func(n int) *Recorder {
		var l logs
		r := New(Options{Dir: dir, MaxBytes: 256 << 10, Now: func() time.Time { return now }, Logf: l.logf, EvidenceEvery: time.Nanosecond, MaxAge: time.Minute})
		for i := range n {
			r.Add([]*snapshot.Snapshot{at("a", 15*i)}, &report.Report{Findings: []diag.Finding{finding("a", diag.Warning, "w")}})
			r.Sync()
		}
		r.Close()
		return r
	}
	write(6)
	real, _ := listFiles(dir)
	if len(real) < 5 {
		t.Fatalf("%d files", len(real))
	}
	// A segment from next year, larger than the whole bound, written
	// whole (not sparse), and a 10 GiB sparse one dated now.
	future := filepath.Join(dir, timelineName(now.Add(365*24*time.Hour)))
	if err := os.WriteFile(future, make([]byte, 300<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, evidenceName(now.Add(-time.Minute), now))
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(10 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()

	var l logs
	r := New(Options{Dir: dir, MaxBytes: 256 << 10, Now: func() time.Time { return now }, Logf: l.logf})
	r.Add([]*snapshot.Snapshot{at("a", 1000)}, &report.Report{})
	r.Close()
	after, _ := listFiles(dir)
	names := map[string]bool{}
	for _, f := range after {
		names[f.name] = true
	}
	for _, f := range real {
		if !names[f.name] {
			t.Errorf("real history %s was evicted", f.name)
		}
	}
	if names[filepath.Base(future)] || !names[filepath.Base(sparse)] {
		t.Errorf("future file left as it was, or the sparse one removed: %v", names)
	}
	// Set aside, then evicted first: it was over the bound by itself.
	if _, err := os.Stat(filepath.Join(dir, asidePrefix+filepath.Base(future))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the future file set aside is still there: %v", err)
	}
	if l.n() != 1 || !strings.Contains(l.lines[0], "dated after now") {
		t.Errorf("log %q", l.lines)
	}

	// A small one set aside stays (within the bound), read by no one and
	// named in the store's notes.
	small := timelineName(now.Add(24 * time.Hour))
	if err := os.WriteFile(filepath.Join(dir, small), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	New(Options{Dir: dir, MaxBytes: 256 << 10, Now: func() time.Time { return now }}).Close()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Notes) != 1 || !strings.Contains(st.Notes[0], asidePrefix+small) {
		t.Errorf("notes %q", st.Notes)
	}
	if es, _ := st.Entries(time.Time{}, time.Time{}); len(es) != 5 {
		t.Errorf("%d entries, notes %q", len(es), st.Notes)
	}
}
