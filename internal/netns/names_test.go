// SPDX-License-Identifier: Apache-2.0

package netns

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeNS makes root/pid/ns/net a file of its own, whose inode stands for
// a namespace's, and returns that inode.
func fakeNS(t *testing.T, root, pid string) uint64 {
	t.Helper()
	dir := filepath.Join(root, pid, "ns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "net")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestNames: names by inode from a /proc of files, a namespace created
// since found on a second look, and not looked for again within a
// second.
func TestNames(t *testing.T) {
	root := t.TempDir()
	host := fakeNS(t, root, "1")
	if err := os.Symlink("1", filepath.Join(root, "thread-self")); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := &Names{Find: Finder{ProcRoot: root, RunDir: filepath.Join(root, "none")}, Now: func() time.Time { return now }}
	if err := n.Refresh(); err != nil {
		t.Fatal(err)
	}
	if name, ok := n.Of(host); !ok || name != "host" {
		t.Fatalf("Of(host) = %q, %v", name, ok)
	}
	if ino, ok := n.Inode("host"); !ok || ino != host {
		t.Errorf("Inode(host) = %d, %v; want %d", ino, ok, host)
	}
	later := fakeNS(t, root, "42")
	if name, ok := n.Of(later); ok {
		t.Errorf("looked again within a second: %q", name)
	}
	now = now.Add(time.Second)
	if name, ok := n.Of(later); !ok || name != "pid:42" {
		t.Errorf("Of(new namespace) = %q, %v; want pid:42", name, ok)
	}
	if _, ok := n.Of(0); ok {
		t.Error("inode 0 named")
	}
	if _, ok := n.Inode("nope"); ok {
		t.Error("an unknown name has an inode")
	}
}
