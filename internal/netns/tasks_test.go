// SPDX-License-Identifier: Apache-2.0

package netns

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
)

// TestByProcessTasks: with Tasks set and enough processes, byProcess
// takes the walk's list (the lowest pids of each namespace whose link
// reads as the walk said) instead of reading every link; when the walk
// fails, or with fewer tasks, it lists /proc and reads them all.
func TestByProcessTasks(t *testing.T) {
	root := t.TempDir()
	// Namespaces are files; a pid's ns/net is a hard link to its one.
	ino := map[string]uint64{}
	for _, name := range []string{"a", "b", "c"} {
		p := filepath.Join(root, "ns-"+name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		ino[name], _ = nsInode(p)
	}
	in := map[int]string{1: "a", 2: "b", 3: "a", 4: "c", 6: "a", 7: "b", 8: "a", 9: "a"}
	for pid, name := range in {
		dir := filepath.Join(root, strconv.Itoa(pid), "ns")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(root, "ns-"+name), filepath.Join(dir, "net")); err != nil {
			t.Fatal(err)
		}
	}
	// The walk also lists pid 5 (gone since), and pid 4 in namespace a:
	// the pid was taken by a process in c since.
	walk := []Task{{1, ino["a"]}, {2, ino["b"]}, {3, ino["a"]}, {4, ino["a"]}, {5, ino["a"]}, {6, ino["a"]}, {7, ino["b"]}, {8, ino["a"]}, {9, ino["a"]}}
	f := Finder{ProcRoot: root, tasksMin: 1, Tasks: func() ([]Task, error) { return walk, nil }}
	got, denied, err := f.byProcess()
	want := map[uint64][]int{ino["a"]: {1, 3, 6, 8}, ino["b"]: {2, 7}}
	if err != nil || len(denied) != 0 || !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("byProcess with a walk = %v, %v, %v; want %v", got, denied, err, want)
	}
	links := map[uint64][]int{ino["a"]: {1, 3, 6, 8}, ino["b"]: {2, 7}, ino["c"]: {4}}
	for name, f := range map[string]Finder{
		"a failed walk": {ProcRoot: root, tasksMin: 1, Tasks: func() ([]Task, error) { return nil, errors.New("no") }},
		"few tasks":     {ProcRoot: root, tasksMin: 1 << 30, Tasks: func() ([]Task, error) { return walk, nil }},
	} {
		got, _, err := f.byProcess()
		if err != nil || !maps.EqualFunc(got, links, slices.Equal) {
			t.Errorf("%s: byProcess = %v, %v; want the links read: %v", name, got, err, links)
		}
	}
}

// TestByProcessKernelWalk (root): byProcess from the kernel's walk of
// every process gives what the links give.
func TestByProcessKernelWalk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load eBPF")
	}
	tasks := func() ([]Task, error) {
		ps, err := bpfsource.ProcessNetns()
		out := make([]Task, len(ps))
		for i, p := range ps {
			out[i] = Task{Pid: int(p.Pid), Netns: uint64(p.Netns)}
		}
		return out, err
	}
	if _, err := tasks(); errors.Is(err, bpfsource.ErrNotSupported) {
		t.Skip(err)
	}
	walked := Finder{ProcRoot: "/proc", tasksMin: 1, Tasks: func() ([]Task, error) {
		ts, err := tasks()
		if err != nil {
			t.Fatalf("walk: %v", err)
		}
		return ts, err
	}}
	want, _, err := Default().byProcess()
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := walked.byProcess()
	if err != nil {
		t.Fatal(err)
	}
	// Other tests start and end processes and namespaces meanwhile: the
	// lowest pids of this process's namespace (the host's) hold still, and each pid listed must be in the
	// namespace it is listed under, if it is still there.
	host, err := nsInode("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[host], want[host]) {
		t.Errorf("host namespace: from the walk %v, from the links %v", got[host], want[host])
	}
	for ino, pids := range got {
		for _, pid := range pids {
			if now, err := linkInode("/proc/" + strconv.Itoa(pid) + "/ns/net"); err == nil && now != ino {
				t.Errorf("pid %d listed under namespace %d, its link says %d", pid, ino, now)
			}
		}
	}
}

// BenchmarkByProcess reads every process's link, as byProcess does
// below TasksMin processes; bpfsource's BenchmarkProcessNetns is the
// walk that stands in above it. Start idle processes to compare them on
// a busy host.
func BenchmarkByProcess(b *testing.B) {
	for b.Loop() {
		if _, _, err := Default().byProcess(); err != nil {
			b.Fatal(err)
		}
	}
}
