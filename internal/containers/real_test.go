package containers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "recapture testdata/containerd/ from a real containerd + runc pod (needs root, containerd, runc, busybox)")

// The pod the real test makes, as Kubernetes' CRI plugin would describe it.
const (
	podName      = "web-1"
	podNamespace = "shop"
	testPodUID   = "3b0a4b0e-5c3d-4f7e-9a1b-2c3d4e5f6a7b"
	appName      = "api"
	appImage     = "registry.example/shop/api:1.4"
	ctrNS        = "k8s.io"
	runcRoot     = "/run/containerd/runc"
)

// realPod is a private containerd daemon running a two-container pod:
// a sandbox holding a CNI-style netns file and an app container in it.
type realPod struct {
	dir, sock, state string
	netns            string
	sandboxID, appID string
	sandboxPid       int
	appPid           int
	// plain is a container outside the pod with ctr's own cgroup
	// layout, /<ns>/<id>.
	plainID  string
	plainPid int
	netnsIno uint64
}

// startPod starts the daemon and the pod; everything is undone by
// t.Cleanup, also when the test fails half-way.
func startPod(t *testing.T) *realPod {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run containers")
	}
	for _, b := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2", "busybox", "unshare"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s (Debian packages containerd, runc, busybox-static): %v", b, err)
		}
	}
	p := &realPod{dir: t.TempDir(), sandboxID: randomID(t), appID: randomID(t), plainID: "plain-" + randomID(t)[:12]}
	p.sock = filepath.Join(p.dir, "c.sock")
	p.state = filepath.Join(p.dir, "state")

	// Directories ctr and the shim make under /run/containerd even with a
	// private state directory: remove the ones this test made, last.
	removeNewDirs(t, "/run/containerd", "/run/containerd/fifo", "/run/containerd/s",
		runcRoot, filepath.Join(runcRoot, ctrNS))

	conf := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"+
		"[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
		filepath.Join(p.dir, "root"), p.state, p.sock, p.sock+".ttrpc")
	confPath := filepath.Join(p.dir, "config.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(p.dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command("containerd", "-c", confPath)
	daemon.Stdout, daemon.Stderr = logf, logf
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDaemon(t, daemon); _ = logf.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for p.ctr(t, 2*time.Second, "version") != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("containerd not ready in 10 s:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}

	rootfs := filepath.Join(p.dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	bb, _ := exec.LookPath("busybox")
	if out, err := exec.Command("cp", bb, filepath.Join(rootfs, "bin", "busybox")).CombinedOutput(); err != nil {
		t.Fatalf("cp busybox: %v: %s", err, out)
	}
	if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", "sleep")); err != nil {
		t.Fatal(err)
	}

	// The pod's network namespace as CNI makes it: a bind-mounted file.
	p.netns = filepath.Join(p.dir, "netns")
	if err := os.WriteFile(p.netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "unshare", "--net="+p.netns, "true").CombinedOutput(); err != nil {
		t.Fatalf("unshare: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(p.netns, unix.MNT_DETACH); err != nil {
			t.Errorf("umount %s: %v", p.netns, err)
		}
	})

	cgroupOf := func(id string) string { return "/kubepods/besteffort/pod" + testPodUID + "/" + id }
	removeCgroups(t, "kubepods", "kubepods/besteffort", "kubepods/besteffort/pod"+testPodUID,
		strings.TrimPrefix(cgroupOf(p.sandboxID), "/"), strings.TrimPrefix(cgroupOf(p.appID), "/"))
	removeCgroups(t, ctrNS, ctrNS+"/"+p.plainID)

	ann := func(kv ...string) []string {
		var a []string
		for _, s := range kv {
			a = append(a, "--annotation", s)
		}
		return a
	}
	common := []string{
		"io.kubernetes.cri.sandbox-name=" + podName,
		"io.kubernetes.cri.sandbox-namespace=" + podNamespace,
		"io.kubernetes.cri.sandbox-uid=" + testPodUID,
		"io.kubernetes.cri.sandbox-id=" + p.sandboxID,
	}
	p.run(t, p.sandboxID, cgroupOf(p.sandboxID), rootfs,
		ann(append(common, "io.kubernetes.cri.container-type=sandbox")...))
	p.run(t, p.appID, cgroupOf(p.appID), rootfs,
		ann(append(common, "io.kubernetes.cri.container-type=container",
			"io.kubernetes.cri.container-name="+appName,
			"io.kubernetes.cri.image-name="+appImage)...))
	p.run(t, p.plainID, "", rootfs, nil)
	p.sandboxPid = p.initPid(t, p.sandboxID)
	p.plainPid = p.initPid(t, p.plainID)
	p.appPid = p.initPid(t, p.appID)
	ino, err := netnsInode("/proc", p.appPid)
	if err != nil {
		t.Fatal(err)
	}
	p.netnsIno = ino
	return p
}

// ctr runs ctr against the private daemon, bounded by timeout.
func (p *realPod) ctr(t *testing.T, timeout time.Duration, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", p.sock, "-n", ctrNS}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// run starts a container from rootfs running sleep, in the pod's netns
// when it has a cgroup path (else in its own, with ctr's cgroup), and
// registers its removal.
func (p *realPod) run(t *testing.T, id, cgroup, rootfs string, annotations []string) {
	t.Helper()
	args := []string{"run", "-d", "--rootfs"}
	if cgroup != "" {
		args = append(args, "--with-ns", "network:"+p.netns, "--cgroup", cgroup)
	}
	args = append(args, annotations...)
	args = append(args, rootfs, id, "/bin/sleep", "600")
	t.Cleanup(func() { p.remove(t, id) })
	if err := p.ctr(t, 20*time.Second, args...); err != nil {
		t.Fatal(err)
	}
}

// remove kills the container's task and removes task and container,
// retrying while the task exits (about 0.5 s), for at most 10 s.
func (p *realPod) remove(t *testing.T, id string) {
	_ = p.ctr(t, 5*time.Second, "tasks", "kill", "-s", "SIGKILL", id)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.ctr(t, 5*time.Second, "tasks", "rm", id)
		if err == nil || strings.Contains(err.Error(), "not found") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("task %s not removed in 10 s: %v", ShortID(id), err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := p.ctr(t, 10*time.Second, "containers", "rm", id); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Errorf("container %s: %v", ShortID(id), err)
	}
}

func (p *realPod) initPid(t *testing.T, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.state, "io.containerd.runtime.v2.task", ctrNS, id, "init.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// stopDaemon stops containerd by its pid: SIGTERM, then SIGKILL after 10 s.
func stopDaemon(t *testing.T, cmd *exec.Cmd) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("containerd (pid %d) did not exit in 10 s of SIGTERM: killed", cmd.Process.Pid)
		_ = cmd.Process.Kill()
		<-done
	}
}

// removeCgroups registers the removal of the cgroup directories (given
// outermost first) in every controller, deepest first; runc removes only
// the leaf. Directories that existed before are kept.
func removeCgroups(t *testing.T, dirs ...string) {
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		ctrls = []string{"/sys/fs/cgroup"} // a v2-only host
	}
	var made []string
	for _, c := range ctrls {
		for _, d := range dirs {
			p := filepath.Join(c, d)
			if _, err := os.Stat(p); err != nil {
				made = append(made, p)
			}
		}
	}
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			if err := os.Remove(made[i]); err != nil && !os.IsNotExist(err) {
				t.Errorf("cgroup: %v", err)
			}
		}
	})
}

// removeNewDirs registers the removal (deepest first) of those of dirs
// (given outermost first) that do not exist now, if they are empty then.
func removeNewDirs(t *testing.T, dirs ...string) {
	var made []string
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			made = append(made, d)
		}
	}
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			if err := os.Remove(made[i]); err != nil && !os.IsNotExist(err) {
				t.Errorf("%v", err)
			}
		}
	})
}

func randomID(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestRealPod runs a pod in a private containerd and resolves its
// processes and its network namespace from the files the runtime wrote.
// With -update it recaptures testdata/containerd/ from the pod.
func TestRealPod(t *testing.T) {
	p := startPod(t)
	r := NewResolver(Options{Roots: Roots{Proc: "/proc", ContainerdState: p.state, Runc: runcRoot, Docker: filepath.Join(p.dir, "no-docker")}})

	app, err := r.ForPid(p.appPid)
	if err != nil {
		t.Fatalf("ForPid(app %d): %v", p.appPid, err)
	}
	want := Info{Runtime: Containerd, ID: p.appID, Container: appName, Image: appImage, Pod: podName, PodNamespace: podNamespace, PodUID: testPodUID}
	if app != want {
		t.Errorf("ForPid(app) = %#v, want %#v", app, want)
	}
	if got := String(app); got != "shop/web-1 api" {
		t.Errorf("String(app) = %q", got)
	}
	sb, err := r.ForPid(p.sandboxPid)
	if err != nil || !sb.Sandbox || sb.ID != p.sandboxID || sb.Pod != podName {
		t.Errorf("ForPid(sandbox) = %#v, %v; want the sandbox of %s", sb, err, podName)
	}
	ns, err := r.ForNetns(p.netnsIno, []int{p.sandboxPid, p.appPid})
	if err != nil {
		t.Fatalf("ForNetns: %v", err)
	}
	if ns.Pod != podName || ns.PodNamespace != podNamespace || ns.ID != p.sandboxID || String(ns) != "shop/web-1" {
		t.Errorf("ForNetns = %#v (%q), want pod shop/web-1 held by sandbox %s", ns, String(ns), ShortID(p.sandboxID))
	}
	plain, err := r.ForPid(p.plainPid)
	if want := (Info{Runtime: Containerd, ID: p.plainID}); err != nil || plain != want {
		t.Errorf("ForPid(plain) = %#v, %v; want %#v", plain, err, want)
	}
	// The second source alone: runc's state.json when config.json is gone.
	r2 := NewResolver(Options{Roots: Roots{Proc: "/proc", ContainerdState: filepath.Join(p.dir, "none"), Runc: runcRoot, Docker: filepath.Join(p.dir, "none")}})
	if got, err := r2.ForPid(p.appPid); err != nil || got.Pod != podName || got.Container != appName {
		t.Errorf("ForPid from state.json alone = %#v, %v", got, err)
	}

	if *update {
		capture(t, p)
	}
}

// capture writes the pod's real files into testdata/containerd/: the
// cgroup and stat of both processes, both bundles' config.json and
// runc's state.json (JSON re-indented to be reviewable).
func capture(t *testing.T, p *realPod) {
	dir := filepath.Join("testdata", "containerd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		role string
		id   string
		pid  int
	}{{"sandbox", p.sandboxID, p.sandboxPid}, {"app", p.appID, p.appPid}, {"plain", p.plainID, p.plainPid}} {
		files := map[string]string{
			c.role + ".cgroup":      filepath.Join("/proc", strconv.Itoa(c.pid), "cgroup"),
			c.role + ".stat":        filepath.Join("/proc", strconv.Itoa(c.pid), "stat"),
			c.role + ".config.json": filepath.Join(p.state, "io.containerd.runtime.v2.task", ctrNS, c.id, "config.json"),
			c.role + ".state.json":  filepath.Join(runcRoot, ctrNS, c.id, "state.json"),
		}
		for name, src := range files {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(name, ".json") {
				var out bytes.Buffer
				if err := json.Indent(&out, b, "", "  "); err != nil {
					t.Fatalf("%s: %v", src, err)
				}
				out.WriteByte('\n')
				b = out.Bytes()
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	meta := fmt.Sprintf("netns_inode %d\n", p.netnsIno)
	if err := os.WriteFile(filepath.Join(dir, "netns"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
}
