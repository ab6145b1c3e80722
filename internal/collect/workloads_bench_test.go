// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/containers"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// benchHost lays out n containers of one runtime, each with one process
// (pids 1000...), from the captured files: containerd pod containers in
// the kubelet's layout (each its own bundle config.json), or Podman
// containers (one containers.json listing all n, each its own
// userdata/config.json).
func benchHost(b *testing.B, runtime string, n int) (*fakeHost, []int) {
	h := newFakeHost(b)
	read := func(parts ...string) []byte { return captured(b, parts...) }
	var pids []int
	var list []map[string]any
	for k := range n {
		pid := 1000 + k
		id := fmt.Sprintf("%064x", k+1)
		switch runtime {
		case "containerd":
			h.proc(pid, []byte("0::/kubepods/besteffort/pod3b0a4b0e-5c3d-4f7e-9a1b-2c3d4e5f6a7b/"+id+"\n"))
			h.write(filepath.Join(h.roots.ContainerdState, "io.containerd.runtime.v2.task", "k8s.io", id, "config.json"), read("containerd", "app.config.json"))
		case "podman":
			h.proc(pid, []byte("0::/libpod_parent/libpod-"+id+"\n"))
			store := filepath.Join(h.roots.Storage, "overlay-containers")
			h.write(filepath.Join(store, id, "userdata", "config.json"), read("podman", "web.config.json"))
			list = append(list, map[string]any{"id": id, "names": []string{fmt.Sprintf("web-%d", k)},
				"metadata": `{"image-name":"localhost/tcpdoctor-busybox:1","name":"` + fmt.Sprintf("web-%d", k) + `"}`})
		}
		pids = append(pids, pid)
	}
	if runtime == "podman" {
		js, err := json.Marshal(list)
		if err != nil {
			b.Fatal(err)
		}
		h.write(filepath.Join(h.roots.Storage, "overlay-containers", "containers.json"), js)
	}
	return h, pids
}

// BenchmarkNameProcs is resolution's cost in one sample: naming every
// process of a snapshot (nameProcs, as Collect does) with n containers
// of one process each. "first" is the first sample (a fresh resolver
// reads every runtime file); "later" is every sample after (the cache
// holds the answers: one read of /proc/PID/stat each).
func BenchmarkNameProcs(b *testing.B) {
	for _, runtime := range []string{"containerd", "podman"} {
		for _, n := range []int{1, 200} {
			h, pids := benchHost(b, runtime, n)
			snap := func() *snapshot.Snapshot {
				s := &snapshot.Snapshot{Procs: make(map[int]*snapshot.Proc, len(pids))}
				for _, pid := range pids {
					s.Procs[pid] = &snapshot.Proc{Pid: pid}
				}
				return s
			}
			check := func(b *testing.B, s *snapshot.Snapshot) {
				if len(s.Errors) > 0 || s.Procs[pids[0]].Workload == nil {
					b.Fatalf("not named: %+v", s.Errors)
				}
			}
			b.Run(fmt.Sprintf("%s/%d/first", runtime, n), func(b *testing.B) {
				for b.Loop() {
					s := snap()
					nameProcs(s, containers.NewResolver(containers.Options{Roots: h.roots}))
					check(b, s)
				}
			})
			b.Run(fmt.Sprintf("%s/%d/later", runtime, n), func(b *testing.B) {
				r := containers.NewResolver(containers.Options{Roots: h.roots})
				nameProcs(snap(), r)
				for b.Loop() {
					s := snap()
					nameProcs(s, r)
					check(b, s)
				}
			})
		}
	}
}
