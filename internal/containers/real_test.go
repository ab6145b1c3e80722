// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testpod"
)

var update = flag.Bool("update", false, "recapture testdata/containerd/ from a real containerd + runc pod (needs root, containerd, runc, busybox)")

// TestRealPod runs a pod in a private containerd and resolves its
// processes and its network namespace from the files the runtime wrote.
// With -update it recaptures testdata/containerd/ from the pod.
func TestRealPod(t *testing.T) {
	p := testpod.Start(t)
	r := NewResolver(Options{Roots: Roots{Proc: "/proc", ContainerdState: p.State, Runc: testpod.RuncRoot, Docker: filepath.Join(p.Dir, "no-docker")}})

	app, err := r.ForPid(p.AppPid)
	if err != nil {
		t.Fatalf("ForPid(app %d): %v", p.AppPid, err)
	}
	want := Info{Runtime: Containerd, ID: p.AppID, Container: testpod.App, Image: testpod.Image, Pod: testpod.Name, PodNamespace: testpod.Namespace, PodUID: testpod.UID}
	if app != want {
		t.Errorf("ForPid(app) = %#v, want %#v", app, want)
	}
	if got := String(app); got != "shop/web-1 api" {
		t.Errorf("String(app) = %q", got)
	}
	sb, err := r.ForPid(p.SandboxPid)
	if err != nil || !sb.Sandbox || sb.ID != p.SandboxID || sb.Pod != testpod.Name {
		t.Errorf("ForPid(sandbox) = %#v, %v; want the sandbox of %s", sb, err, testpod.Name)
	}
	ns, err := r.ForNetns(p.NetnsIno, []int{p.SandboxPid, p.AppPid})
	if err != nil {
		t.Fatalf("ForNetns: %v", err)
	}
	if ns.Pod != testpod.Name || ns.PodNamespace != testpod.Namespace || ns.ID != p.SandboxID || String(ns) != "shop/web-1" {
		t.Errorf("ForNetns = %#v (%q), want pod shop/web-1 held by sandbox %s", ns, String(ns), ShortID(p.SandboxID))
	}
	plain, err := r.ForPid(p.PlainPid)
	if want := (Info{Runtime: Containerd, ID: p.PlainID}); err != nil || plain != want {
		t.Errorf("ForPid(plain) = %#v, %v; want %#v", plain, err, want)
	}
	// The second source alone: runc's state.json when config.json is gone.
	r2 := NewResolver(Options{Roots: Roots{Proc: "/proc", ContainerdState: filepath.Join(p.Dir, "none"), Runc: testpod.RuncRoot, Docker: filepath.Join(p.Dir, "none")}})
	if got, err := r2.ForPid(p.AppPid); err != nil || got.Pod != testpod.Name || got.Container != testpod.App {
		t.Errorf("ForPid from state.json alone = %#v, %v", got, err)
	}

	if *update {
		capture(t, p)
	}
}

// capture writes the pod's real files into testdata/containerd/: the
// cgroup and stat of both processes, both bundles' config.json and
// runc's state.json (JSON re-indented to be reviewable).
func capture(t *testing.T, p *testpod.Pod) {
	dir := filepath.Join("testdata", "containerd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		role string
		id   string
		pid  int
	}{{"sandbox", p.SandboxID, p.SandboxPid}, {"app", p.AppID, p.AppPid}, {"plain", p.PlainID, p.PlainPid}} {
		files := map[string]string{
			c.role + ".cgroup":      filepath.Join("/proc", strconv.Itoa(c.pid), "cgroup"),
			c.role + ".stat":        filepath.Join("/proc", strconv.Itoa(c.pid), "stat"),
			c.role + ".config.json": filepath.Join(p.State, "io.containerd.runtime.v2.task", testpod.CtrNS, c.id, "config.json"),
			c.role + ".state.json":  filepath.Join(testpod.RuncRoot, testpod.CtrNS, c.id, "state.json"),
		}
		copyFiles(t, dir, files)
	}
	meta := fmt.Sprintf("netns_inode %d\n", p.NetnsIno)
	if err := os.WriteFile(filepath.Join(dir, "netns"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
}
