// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tree is a fake host under a temp dir: procfs entries and runtime state
// made from the captured and hand-written files.
type tree struct {
	t     testing.TB
	roots Roots
}

func newTree(t testing.TB) *tree {
	dir := t.TempDir()
	return &tree{t: t, roots: Roots{
		Proc:            filepath.Join(dir, "proc"),
		ContainerdState: filepath.Join(dir, "run", "containerd"),
		Runc:            filepath.Join(dir, "run", "containerd", "runc"),
		Docker:          filepath.Join(dir, "var", "lib", "docker"),
	}}
}

func (tr *tree) write(path string, b []byte) {
	tr.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

// proc makes <proc>/<pid>/{cgroup,stat,ns/net}, with start as field 22.
func (tr *tree) proc(pid int, start uint64, cgroup string, netns uint64) {
	tr.t.Helper()
	dir := filepath.Join(tr.roots.Proc, strconv.Itoa(pid))
	tr.write(filepath.Join(dir, "cgroup"), []byte(cgroup))
	tr.setStart(pid, start)
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	link := filepath.Join(dir, "ns", "net")
	_ = os.Remove(link)
	if err := os.Symlink("net:["+strconv.FormatUint(netns, 10)+"]", link); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) setStart(pid int, start uint64) {
	tr.t.Helper()
	// A stat line shaped like the captured one, with a ')' in the command.
	line := strconv.Itoa(pid) + " (a b) c) S 1 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 " +
		strconv.FormatUint(start, 10) + " 1552384 1 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	tr.write(filepath.Join(tr.roots.Proc, strconv.Itoa(pid), "stat"), []byte(line))
}

// pod lays out the captured pod: the sandbox (pid 100) and app (pid 101)
// in netns 4026532177, their bundles' config.json and runc's state.json.
func (tr *tree) pod() (sandboxID, appID string) {
	tr.t.Helper()
	for pid, role := range map[int]string{100: "sandbox", 101: "app"} {
		id := capturedID(tr.t, role)
		tr.proc(pid, 5000+uint64(pid), string(readFixture(tr.t, "containerd", role+".cgroup")), 4026532177)
		tr.write(filepath.Join(tr.roots.ContainerdState, "io.containerd.runtime.v2.task", "k8s.io", id, "config.json"),
			readFixture(tr.t, "containerd", role+".config.json"))
		tr.write(filepath.Join(tr.roots.Runc, "k8s.io", id, "state.json"), readFixture(tr.t, "containerd", role+".state.json"))
		if role == "app" {
			appID = id
		} else {
			sandboxID = id
		}
	}
	return sandboxID, appID
}

func (tr *tree) bundle(id, file string) string {
	return filepath.Join(tr.roots.ContainerdState, "io.containerd.runtime.v2.task", "k8s.io", id, file)
}

func (tr *tree) runcState(id string) string {
	return filepath.Join(tr.roots.Runc, "k8s.io", id, "state.json")
}

func TestForPidCapturedPod(t *testing.T) {
	tr := newTree(t)
	sandboxID, appID := tr.pod()
	r := NewResolver(Options{Roots: tr.roots})
	got, err := r.ForPid(101)
	want := Info{Runtime: Containerd, ID: appID, Container: "api", Image: "registry.example/shop/api:1.4", Pod: "web-1", PodNamespace: "shop", PodUID: uidA}
	if err != nil || got != want {
		t.Errorf("ForPid(app) = %#v, %v; want %#v", got, err, want)
	}
	got, err = r.ForPid(100)
	want = Info{Runtime: Containerd, ID: sandboxID, Pod: "web-1", PodNamespace: "shop", PodUID: uidA, Sandbox: true}
	if err != nil || got != want {
		t.Errorf("ForPid(sandbox) = %#v, %v; want %#v", got, err, want)
	}
}

// TestForPidFallsBackToRuncState: without the bundle's config.json the
// same names come from runc's state.json.
func TestForPidFallsBackToRuncState(t *testing.T) {
	tr := newTree(t)
	_, appID := tr.pod()
	if err := os.Remove(tr.bundle(appID, "config.json")); err != nil {
		t.Fatal(err)
	}
	got, err := NewResolver(Options{Roots: tr.roots}).ForPid(101)
	if err != nil || got.Pod != "web-1" || got.PodNamespace != "shop" || got.Container != "api" || got.ID != appID {
		t.Errorf("ForPid = %#v, %v; want pod shop/web-1 container api", got, err)
	}
}

// TestForPidTruncatedState: both state files cut short give the id and
// pod uid from the cgroup path, and an error naming both files.
func TestForPidTruncatedState(t *testing.T) {
	tr := newTree(t)
	_, appID := tr.pod()
	for _, p := range []string{tr.bundle(appID, "config.json"), tr.runcState(appID)} {
		b, _ := os.ReadFile(p)
		tr.write(p, b[:len(b)/2])
	}
	got, err := NewResolver(Options{Roots: tr.roots}).ForPid(101)
	if want := (Info{Runtime: Containerd, ID: appID, PodUID: uidA}); got != want {
		t.Errorf("ForPid = %#v, want %#v", got, want)
	}
	if err == nil || !strings.Contains(err.Error(), "config.json") || !strings.Contains(err.Error(), "state.json") || !strings.HasPrefix(err.Error(), "containers: pid 101") {
		t.Errorf("error = %v, want one naming config.json and state.json", err)
	}
	if String(got) != ShortID(appID) {
		t.Errorf("String() = %q, want the short id", String(got))
	}
}

// TestForPidMissingState: a container in the kubelet's layout whose
// runtime state is nowhere keeps its id, with an error.
func TestForPidMissingState(t *testing.T) {
	tr := newTree(t)
	tr.proc(7, 1, "0::/kubepods/besteffort/pod"+uidA+"/"+hexA+"\n", 1)
	got, err := NewResolver(Options{Roots: tr.roots}).ForPid(7)
	if want := (Info{ID: hexA, PodUID: uidA}); got != want {
		t.Errorf("ForPid = %#v, want %#v", got, want)
	}
	if !errors.Is(err, errNoState) {
		t.Errorf("error = %v, want no runtime state", err)
	}
}

// TestForPidUnreadableDir: containerd's bundle directory unreadable (a
// file where the directory should be: root reads any mode) is reported,
// the id kept.
func TestForPidUnreadableDir(t *testing.T) {
	tr := newTree(t)
	tr.proc(7, 1, "0::/kubepods/besteffort/pod"+uidA+"/"+hexA+"\n", 1)
	tr.write(filepath.Join(tr.roots.ContainerdState, "io.containerd.runtime.v2.task"), []byte("x"))
	got, err := NewResolver(Options{Roots: tr.roots}).ForPid(7)
	if got.ID != hexA || err == nil || !strings.Contains(err.Error(), "containerd namespaces") {
		t.Errorf("ForPid = %#v, %v; want the id and an error about containerd's namespaces", got, err)
	}
}

func TestForPidVanished(t *testing.T) {
	tr := newTree(t)
	got, err := NewResolver(Options{Roots: tr.roots}).ForPid(4242)
	if got != (Info{}) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ForPid(gone) = %#v, %v; want nothing and not-exist", got, err)
	}
	// Gone between the stat and the cgroup read.
	tr.setStart(4243, 9)
	if _, err := NewResolver(Options{Roots: tr.roots}).ForPid(4243); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ForPid(no cgroup file) error = %v, want not-exist", err)
	}
}

// TestForPidPlainNotContainer: a two-level cgroup with no containerd
// state (this machine's own memory cgroup is one) is no container.
func TestForPidPlainNotContainer(t *testing.T) {
	tr := newTree(t)
	tr.proc(8, 1, "4:memory:/process_api/4cf1985369c0f3f685f995e62b8c9143\n0::/\n", 1)
	got, err := NewResolver(Options{Roots: tr.roots}).ForPid(8)
	if got != (Info{}) || err != nil {
		t.Errorf("ForPid = %#v, %v; want nothing, no error", got, err)
	}
	// With a unit on the name=systemd line, the unit.
	tr.proc(8, 2, "9:name=systemd:/system.slice/cron.service\n4:memory:/process_api/4cf1985369c0f3f685f995e62b8c9143\n0::/\n", 1)
	if got, err := NewResolver(Options{Roots: tr.roots}).ForPid(8); got != (Info{Runtime: Systemd, Unit: "cron.service"}) || err != nil {
		t.Errorf("ForPid = %#v, %v; want cron.service", got, err)
	}
}

// TestForPidPlainCaptured: ctr's /<ns>/<id> with a bundle is a container.
func TestForPidPlainCaptured(t *testing.T) {
	tr := newTree(t)
	id := capturedID(t, "plain")
	tr.proc(9, 1, string(readFixture(t, "containerd", "plain.cgroup")), 1)
	tr.write(tr.bundle(id, "config.json"), readFixture(t, "containerd", "plain.config.json"))
	got, err := NewResolver(Options{Roots: tr.roots}).ForPid(9)
	if want := (Info{Runtime: Containerd, ID: id}); got != want || err != nil {
		t.Errorf("ForPid = %#v, %v; want %#v", got, err, want)
	}
}

func TestForPidUnit(t *testing.T) {
	tr := newTree(t)
	tr.proc(10, 1, v1("/system.slice/nginx.service"), 1)
	got, err := NewResolver(Options{Roots: tr.roots}).ForPid(10)
	if got != (Info{Runtime: Systemd, Unit: "nginx.service"}) || err != nil || String(got) != "nginx.service" {
		t.Errorf("ForPid = %#v (%q), %v", got, String(got), err)
	}
}

func TestForPidDocker(t *testing.T) {
	tr := newTree(t)
	web, k8s, sandbox := "8c1f0a5e7d2b4c6a9e3f1d0b2a4c6e8f0a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d",
		"2d4f6a8c0e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f",
		"7e9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f2d4f6a8c0e1b3d5f7a9c1e3b5d"
	for id, f := range map[string]string{web: "web", k8s: "k8s", sandbox: "k8s-sandbox"} {
		tr.write(filepath.Join(tr.roots.Docker, "containers", id, "config.v2.json"), readFixture(t, "docker", f+".config.v2.json"))
	}
	tr.proc(20, 1, "0::/system.slice/docker-"+web+".scope\n", 1)
	tr.proc(21, 1, v1("/kubepods/burstable/pod"+uidA+"/"+k8s), 2)
	tr.proc(22, 1, v1("/kubepods/burstable/pod"+uidA+"/"+sandbox), 2)
	r := NewResolver(Options{Roots: tr.roots})
	for pid, want := range map[int]Info{
		20: {Runtime: Docker, ID: web, Container: "web", Image: "nginx:1.25"},
		21: {Runtime: Docker, ID: k8s, Container: "api", Image: "registry.example/shop/api@sha256:9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b", Pod: "web-1", PodNamespace: "shop", PodUID: uidA},
		22: {Runtime: Docker, ID: sandbox, Image: "registry.k8s.io/pause:3.9", Pod: "web-1", PodNamespace: "shop", PodUID: uidA, Sandbox: true},
	} {
		if got, err := r.ForPid(pid); got != want || err != nil {
			t.Errorf("ForPid(%d) = %#v, %v; want %#v", pid, got, err, want)
		}
	}
	if got, _ := r.ForNetns(2, []int{21, 22}); String(got) != "shop/web-1" || got.ID != sandbox {
		t.Errorf("ForNetns(cri-dockerd pod) = %#v", got)
	}
}

// TestForPidCaches: a second look at the same process reads no runtime
// state (it is gone, the answer stands); a new process with the same
// pid (another start time) is looked up afresh.
func TestForPidCaches(t *testing.T) {
	tr := newTree(t)
	_, appID := tr.pod()
	r := NewResolver(Options{Roots: tr.roots})
	first, err := r.ForPid(101)
	if err != nil || first.Container != "api" {
		t.Fatalf("ForPid = %#v, %v", first, err)
	}
	if err := os.RemoveAll(filepath.Join(tr.roots.ContainerdState)); err != nil {
		t.Fatal(err)
	}
	if again, err := r.ForPid(101); again != first || err != nil {
		t.Errorf("cached ForPid = %#v, %v; want %#v", again, err, first)
	}
	// pid 101 reused by a unit's process.
	tr.proc(101, 999999, "0::/system.slice/cron.service\n", 1)
	if got, err := r.ForPid(101); got != (Info{Runtime: Systemd, Unit: "cron.service"}) || err != nil {
		t.Errorf("ForPid(reused pid) = %#v, %v; want cron.service", got, err)
	}
	_ = appID
}

// TestForPidRetriesFailures: a failed look-up is kept for Retry, then
// tried again.
func TestForPidRetriesFailures(t *testing.T) {
	tr := newTree(t)
	_, appID := tr.pod()
	cfg, _ := os.ReadFile(tr.bundle(appID, "config.json"))
	st, _ := os.ReadFile(tr.runcState(appID))
	tr.write(tr.bundle(appID, "config.json"), []byte("{"))
	tr.write(tr.runcState(appID), []byte("{"))
	now := time.Unix(1000, 0)
	r := NewResolver(Options{Roots: tr.roots, Now: func() time.Time { return now }, Retry: 5 * time.Second})
	if _, err := r.ForPid(101); err == nil {
		t.Fatal("ForPid with broken state: no error")
	}
	tr.write(tr.bundle(appID, "config.json"), cfg)
	tr.write(tr.runcState(appID), st)
	now = now.Add(4 * time.Second)
	if _, err := r.ForPid(101); err == nil {
		t.Error("ForPid within Retry: tried again (want the cached failure)")
	}
	now = now.Add(2 * time.Second)
	if got, err := r.ForPid(101); err != nil || got.Container != "api" {
		t.Errorf("ForPid after Retry = %#v, %v; want api", got, err)
	}
}

// TestResolverBounded: the caches hold at most their caps.
func TestResolverBounded(t *testing.T) {
	tr := newTree(t)
	for pid := 1; pid <= 10; pid++ {
		tr.proc(pid, 1, "0::/system.slice/docker-"+strings.Repeat(strconv.Itoa(pid%10), 64)+".scope\n", 1)
	}
	r := NewResolver(Options{Roots: tr.roots, MaxPids: 3, MaxContainers: 2})
	for pid := 1; pid <= 10; pid++ {
		_, _ = r.ForPid(pid)
	}
	if r.pids.len() != 3 || r.ids.len() != 2 {
		t.Errorf("cache sizes %d pids, %d containers; want 3 and 2", r.pids.len(), r.ids.len())
	}
}

// TestForNetnsNamesPod: the pod's namespace is named by the pod, from
// any of its processes, never by the pause process; a process no longer
// in the namespace is skipped.
func TestForNetnsNamesPod(t *testing.T) {
	tr := newTree(t)
	sandboxID, _ := tr.pod()
	tr.proc(102, 1, "0::/system.slice/sshd.service\n", 4026532177) // nsenter'd from the host
	tr.proc(103, 1, "0::/system.slice/cron.service\n", 1)          // elsewhere
	r := NewResolver(Options{Roots: tr.roots})
	for _, pids := range [][]int{{100, 101}, {100}, {101, 102, 103}, {103, 101}} {
		got, err := r.ForNetns(4026532177, pids)
		if err != nil || got.Pod != "web-1" || got.PodNamespace != "shop" || got.Container != "" || String(got) != "shop/web-1" {
			t.Errorf("ForNetns(%v) = %#v (%q), %v; want the pod shop/web-1", pids, got, String(got), err)
		}
		if (len(pids) == 1 || pids[0] == 100) && (got.ID != sandboxID || !got.Sandbox) {
			t.Errorf("ForNetns(%v) = %#v, want the sandbox's id", pids, got)
		}
	}
	if got, err := r.ForNetns(4026532177, []int{555}); got != (Info{}) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ForNetns(gone pid) = %#v, %v", got, err)
	}
}

func TestNameNetns(t *testing.T) {
	a := Info{Runtime: Docker, ID: hexA, Container: "a"}
	b := Info{Runtime: Docker, ID: strings.Repeat("b", 64), Container: "b"}
	u := Info{Runtime: Systemd, Unit: "nginx.service"}
	p1 := Info{Runtime: Containerd, ID: "1", Pod: "p", PodNamespace: "n", Container: "x"}
	p2 := Info{Runtime: Containerd, ID: "2", Pod: "q", PodNamespace: "n", Container: "y"}
	for _, c := range []struct {
		in   []Info
		want Info
	}{
		{[]Info{a, a}, a},
		{[]Info{a, u}, a},
		{[]Info{a, b}, Info{}},
		{[]Info{u}, u},
		{[]Info{u, {Runtime: Systemd, Unit: "cron.service"}}, Info{}},
		{[]Info{p1, a}, Info{Runtime: Containerd, Pod: "p", PodNamespace: "n"}},
		{[]Info{p1, p2}, Info{}},
		{nil, Info{}},
	} {
		if got := nameNetns(c.in); got != c.want {
			t.Errorf("nameNetns(%#v) = %#v, want %#v", c.in, got, c.want)
		}
	}
}

func TestInfoString(t *testing.T) {
	for _, c := range []struct {
		in   Info
		want string
	}{
		{Info{Pod: "web-1", PodNamespace: "shop", Container: "api", ID: hexA}, "shop/web-1 api"},
		{Info{Pod: "web-1", PodNamespace: "shop", Sandbox: true, ID: hexA}, "shop/web-1"},
		{Info{Pod: "web-1"}, "web-1"},
		{Info{Container: "web", ID: hexA}, "web"},
		{Info{Unit: "nginx.service"}, "nginx.service"},
		{Info{ID: hexA}, hexA[:12]},
		{Info{ID: "abc"}, "abc"},
		{Info{}, ""},
		{Info{Container: "evil\x1b[2J"}, `evil\x1b[2J`},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%#v) = %q, want %q", c.in, got, c.want)
		}
	}
}
