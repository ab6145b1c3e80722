// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"fmt"
	"path/filepath"
	"testing"
)

// benchTree lays out n pod containers like the captured app (each its
// own id under containerd's state, in the kubelet's cgroup layout) plus
// the captured pod's sandbox (pid 100) and app (pid 101).
func benchTree(b *testing.B, n int) (*tree, []int) {
	tr := newTree(b)
	tr.pod()
	cfg := readFixture(b, "containerd", "app.config.json")
	var pids []int
	for k := range n {
		pid := 1000 + k
		id := fmt.Sprintf("%064x", k+1)
		tr.proc(pid, 1, "0::/kubepods/besteffort/pod"+uidA+"/"+id+"\n", 1)
		tr.write(filepath.Join(tr.roots.ContainerdState, "io.containerd.runtime.v2.task", "k8s.io", id, "config.json"), cfg)
		pids = append(pids, pid)
	}
	return tr, pids
}

// BenchmarkForPid: one op is one look-up of every one of n containers'
// processes (a sample), from a fresh resolver (uncached) or a warm one.
func BenchmarkForPid(b *testing.B) {
	for _, n := range []int{1, 200} {
		tr, pids := benchTree(b, n)
		b.Run(fmt.Sprintf("uncached/%d", n), func(b *testing.B) {
			for b.Loop() {
				r := NewResolver(Options{Roots: tr.roots})
				for _, pid := range pids {
					if _, err := r.ForPid(pid); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("cached/%d", n), func(b *testing.B) {
			r := NewResolver(Options{Roots: tr.roots})
			for b.Loop() {
				for _, pid := range pids {
					if _, err := r.ForPid(pid); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkForNetns names the captured pod's namespace from its two
// processes.
func BenchmarkForNetns(b *testing.B) {
	tr, _ := benchTree(b, 0)
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			r := NewResolver(Options{Roots: tr.roots})
			if i, err := r.ForNetns(4026532177, []int{100, 101}); err != nil || i.Pod == "" {
				b.Fatal(i, err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		r := NewResolver(Options{Roots: tr.roots})
		for b.Loop() {
			if i, err := r.ForNetns(4026532177, []int{100, 101}); err != nil || i.Pod == "" {
				b.Fatal(i, err)
			}
		}
	})
}
