// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testpod"
)

// The real Docker and Podman tests: each runs a private daemon or store
// (its own directories under the test's temporary directory, no network,
// no registry: the image is a busybox-static tarball the test builds) and
// resolves the containers' processes from the files the runtime wrote.
// With -update they recapture testdata/docker/real-* and testdata/podman/.

// Kubernetes names the tests give containers by hand, as cri-dockerd
// (Docker's labels) and CRI-O (the spec's annotations) write them.
const (
	rtPod       = "web-1"
	rtNamespace = "shop"
	rtApp       = "api"
	rtUID       = "6f1d2c3b-4a5e-4d6f-8a7b-9c0d1e2f3a4b"
)

// needRuntime skips without root or without the binaries.
func needRuntime(t *testing.T, bins ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs real containers")
	}
	for _, b := range append(bins, "runc", "busybox") {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed (Debian: docker.io, podman, runc, busybox-static): %v", b, err)
		}
	}
}

// rootfsTar writes a tarball of a root filesystem holding busybox (a
// static binary) as /bin/busybox, /bin/sh and /bin/sleep.
func rootfsTar(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"sh", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", l)); err != nil {
			t.Fatal(err)
		}
	}
	tarball := filepath.Join(dir, "rootfs.tar")
	if out, err := exec.Command("tar", "-C", root, "-cf", tarball, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	return tarball
}

// run runs a runtime's client with a time limit and returns its output,
// trimmed.
func run(t *testing.T, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return "", &cmdError{name: name, args: args, err: err, stderr: strings.TrimSpace(errb.String())}
	}
	return strings.TrimSpace(out.String()), nil
}

type cmdError struct {
	name   string
	args   []string
	err    error
	stderr string
}

func (e *cmdError) Error() string {
	return e.name + " " + strings.Join(e.args, " ") + ": " + e.err.Error() + ": " + e.stderr
}

// cleanCgroups registers the removal of the cgroup directories (given
// outermost first) that do not exist now, in every controller, deepest
// first, if they are empty then (the runtimes remove only the leaf).
func cleanCgroups(t *testing.T, dirs ...string) {
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		ctrls = []string{"/sys/fs/cgroup"}
	}
	var made []string
	for _, c := range ctrls {
		for _, d := range dirs {
			if p := filepath.Join(c, d); !exists(p) {
				made = append(made, p)
			}
		}
	}
	t.Cleanup(func() {
		// A monitor may still be exiting: try for 5 s. A directory left
		// not empty holds another's container.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			left := 0
			for i := len(made) - 1; i >= 0; i-- {
				if err := os.Remove(made[i]); err != nil && !os.IsNotExist(err) {
					left++
				}
			}
			if left == 0 || time.Now().After(deadline) {
				return
			}
		}
	})
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// unmountUnder lazily unmounts every mount point under dir, deepest
// first (what a runtime left mounted in its private directories).
func unmountUnder(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("mountinfo: %v", err)
		return
	}
	var points []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
			t.Errorf("umount %s: %v", points[i], err)
		}
	}
}

// waitNoProcess waits until no process has s in its command line.
func waitNoProcess(t *testing.T, s string, limit time.Duration) {
	for deadline := time.Now().Add(limit); ; time.Sleep(100 * time.Millisecond) {
		pids := []string{}
		cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, c := range cmdlines {
			if b, err := os.ReadFile(c); err == nil && bytes.Contains(b, []byte(s)) {
				pids = append(pids, filepath.Base(filepath.Dir(c)))
			}
		}
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes %v still use %s after %v", pids, s, limit)
			return
		}
	}
}

// inspectPid is the container's init pid as its runtime's client says.
func inspectPid(t *testing.T, client []string, name string) int {
	t.Helper()
	out, err := run(t, 20*time.Second, client[0], append(client[1:], "inspect", "-f", "{{.State.Pid}}", name)...)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(out)
	if err != nil || pid <= 0 {
		t.Fatalf("%s: pid %q", name, out)
	}
	return pid
}

// TestRealPodman runs two containers with Podman in a private store
// (its own graph root, run root and temporary directory; cgroupfs; no
// network): "web", and "api" with the Kubernetes annotations CRI-O
// writes into the spec and the kubelet's cgroup parent. It resolves
// both from containers/storage as Podman left it.
func TestRealPodman(t *testing.T) {
	needRuntime(t, "podman")
	dir := t.TempDir()
	store := filepath.Join(dir, "storage")
	client := []string{"podman", "--root", store, "--runroot", filepath.Join(dir, "run"),
		"--tmpdir", filepath.Join(dir, "tmp"), "--cgroup-manager", "cgroupfs",
		"--events-backend", "file", "--storage-driver", "overlay"}
	pm := func(timeout time.Duration, args ...string) (string, error) {
		return run(t, timeout, client[0], append(client[1:], args...)...)
	}
	// conmon, Podman's monitor, gets a cgroup beside the containers.
	cleanCgroups(t, "libpod_parent", "libpod_parent/conmon", "kubepods", "kubepods/besteffort",
		"kubepods/besteffort/pod"+rtUID, "kubepods/besteffort/pod"+rtUID+"/conmon")
	t.Cleanup(func() {
		if _, err := pm(60*time.Second, "rm", "-af", "-t", "0"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		// conmon runs "podman container cleanup" when a container
		// exits, which mounts the store again: wait for those.
		waitNoProcess(t, store, 20*time.Second)
		unmountUnder(t, dir)
	})
	const image = "localhost/tcpdoctor-busybox:1"
	if _, err := pm(60*time.Second, "import", rootfsTar(t, dir), image); err != nil {
		t.Fatal(err)
	}
	// Podman raises RLIMIT_NOFILE and RLIMIT_NPROC by default, which
	// needs CAP_SYS_RESOURCE; lower limits need nothing.
	common := []string{"run", "-d", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
	if _, err := pm(60*time.Second, append(common, "--name", "web", image, "sleep", "600")...); err != nil {
		t.Skipf("podman cannot run a container here: %v", err)
	}
	api := append(common, "--name", "k8s_api_web-1_shop_"+rtUID+"_0", "--cgroup-parent", "/kubepods/besteffort/pod"+rtUID,
		"--annotation", "io.kubernetes.pod.name="+rtPod, "--annotation", "io.kubernetes.pod.namespace="+rtNamespace,
		"--annotation", "io.kubernetes.pod.uid="+rtUID, "--annotation", "io.kubernetes.container.name="+rtApp,
		"--annotation", "io.kubernetes.cri-o.ContainerType=container", "--annotation", "io.kubernetes.cri-o.ImageName="+testpod.Image,
		image, "sleep", "600")
	if _, err := pm(60*time.Second, api...); err != nil {
		t.Fatal(err)
	}
	webID, _ := pm(20*time.Second, "inspect", "-f", "{{.Id}}", "web")
	apiID, _ := pm(20*time.Second, "inspect", "-f", "{{.Id}}", api[len(common)+1])
	webPid, apiPid := inspectPid(t, client, "web"), inspectPid(t, client, api[len(common)+1])

	r := NewResolver(Options{Roots: Roots{Proc: "/proc", ContainerdState: filepath.Join(dir, "none"), Runc: filepath.Join(dir, "none"), Docker: filepath.Join(dir, "none"), Storage: store}})
	if got, err := r.ForPid(webPid); err != nil || got != (Info{Runtime: Podman, ID: webID, Container: "web", Image: image}) {
		t.Errorf("ForPid(web) = %#v, %v; want podman container web %s", got, err, ShortID(webID))
	}
	want := Info{Runtime: Podman, ID: apiID, Container: rtApp, Image: testpod.Image, Pod: rtPod, PodNamespace: rtNamespace, PodUID: rtUID}
	if got, err := r.ForPid(apiPid); err != nil || got != want {
		t.Errorf("ForPid(api) = %#v, %v; want %#v", got, err, want)
	}
	ino, err := testpod.NetnsInode(webPid)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.ForNetns(ino, []int{webPid, apiPid}); err != nil || String(got) != "web" {
		t.Errorf("ForNetns(web's namespace) = %#v (%q), %v; want web", got, String(got), err)
	}
	if *update {
		captureStorage(t, store, map[string]struct {
			id  string
			pid int
		}{"web": {webID, webPid}, "api": {apiID, apiPid}})
	}
}

// captureStorage writes testdata/podman/: containers.json and, per
// container, its cgroup file and userdata/config.json (re-indented).
func captureStorage(t *testing.T, store string, ctrs map[string]struct {
	id  string
	pid int
}) {
	out := filepath.Join("testdata", "podman")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"containers.json": filepath.Join(store, "overlay-containers", "containers.json")}
	for role, c := range ctrs {
		files[role+".cgroup"] = filepath.Join("/proc", strconv.Itoa(c.pid), "cgroup")
		files[role+".config.json"] = filepath.Join(store, "overlay-containers", c.id, "userdata", "config.json")
	}
	copyFiles(t, out, files)
}

// copyFiles copies src files to dir/name, JSON re-indented.
func copyFiles(t *testing.T, dir string, files map[string]string) {
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

// TestRealDocker runs a private dockerd (its own data root, exec root,
// socket and containerd namespace; no bridge, no iptables) with two
// containers: "web", and a pod's container labelled as cri-dockerd
// labels it, in the kubelet's cgroupfs layout. It resolves both from
// Docker's config.v2.json as dockerd wrote it.
func TestRealDocker(t *testing.T) {
	needRuntime(t, "dockerd", "docker")
	dir, err := os.MkdirTemp("", "tcpd-docker-") // short: the socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountUnder(t, dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "docker.sock")
	cleanCgroups(t, "docker", "kubepods", "kubepods/besteffort", "kubepods/besteffort/pod"+rtUID)
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	d := exec.Command("dockerd", "--data-root", data, "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"), "-H", "unix://"+sock,
		"--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
		"--containerd-namespace", "tcpdoctor-test", "--containerd-plugins-namespace", "tcpdoctor-test-plugins")
	d.Stdout, d.Stderr = logf, logf
	d.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	client := []string{"docker", "-H", "unix://" + sock}
	dk := func(timeout time.Duration, args ...string) (string, error) {
		return run(t, timeout, client[0], append(client[1:], args...)...)
	}
	t.Cleanup(func() {
		if _, err := dk(60*time.Second, "rm", "-f", "web", "api"); err != nil {
			t.Logf("cleanup: %v", err)
		}
		stopDockerd(t, d)
	})
	var ready error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, ready = dk(5*time.Second, "version"); ready == nil {
			break
		}
	}
	if ready != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "dockerd.log"))
		t.Skipf("dockerd did not start here: %v\n%s", ready, log)
	}
	const image = "tcpdoctor-busybox:1"
	if _, err := dk(60*time.Second, "import", rootfsTar(t, dir), image); err != nil {
		t.Fatal(err)
	}
	if _, err := dk(60*time.Second, "run", "-d", "--name", "web", "--network", "none", image, "sleep", "600"); err != nil {
		t.Skipf("docker cannot run a container here: %v", err)
	}
	if _, err := dk(60*time.Second, "run", "-d", "--name", "api", "--network", "none",
		"--cgroup-parent", "/kubepods/besteffort/pod"+rtUID,
		"--label", "io.kubernetes.pod.name="+rtPod, "--label", "io.kubernetes.pod.namespace="+rtNamespace,
		"--label", "io.kubernetes.pod.uid="+rtUID, "--label", "io.kubernetes.container.name="+rtApp,
		"--label", "io.kubernetes.docker.type=container", image, "sleep", "600"); err != nil {
		t.Fatal(err)
	}
	webID, _ := dk(20*time.Second, "inspect", "-f", "{{.Id}}", "web")
	apiID, _ := dk(20*time.Second, "inspect", "-f", "{{.Id}}", "api")
	webPid, apiPid := inspectPid(t, client, "web"), inspectPid(t, client, "api")

	r := NewResolver(Options{Roots: Roots{Proc: "/proc", ContainerdState: filepath.Join(dir, "none"), Runc: filepath.Join(dir, "none"), Docker: data}})
	if got, err := r.ForPid(webPid); err != nil || got != (Info{Runtime: Docker, ID: webID, Container: "web", Image: image}) {
		t.Errorf("ForPid(web) = %#v, %v; want docker container web %s", got, err, ShortID(webID))
	}
	want := Info{Runtime: Docker, ID: apiID, Container: rtApp, Image: image, Pod: rtPod, PodNamespace: rtNamespace, PodUID: rtUID}
	if got, err := r.ForPid(apiPid); err != nil || got != want {
		t.Errorf("ForPid(api) = %#v, %v; want %#v", got, err, want)
	}
	ino, err := testpod.NetnsInode(apiPid)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.ForNetns(ino, []int{apiPid}); err != nil || String(got) != "shop/web-1" {
		t.Errorf("ForNetns(api's namespace) = %#v (%q), %v; want shop/web-1", got, String(got), err)
	}
	if *update {
		out := filepath.Join("testdata", "docker")
		copyFiles(t, out, map[string]string{
			"real-web.cgroup":         filepath.Join("/proc", strconv.Itoa(webPid), "cgroup"),
			"real-web.config.v2.json": filepath.Join(data, "containers", webID, "config.v2.json"),
			"real-api.cgroup":         filepath.Join("/proc", strconv.Itoa(apiPid), "cgroup"),
			"real-api.config.v2.json": filepath.Join(data, "containers", apiID, "config.v2.json"),
		})
	}
}

// stopDockerd stops dockerd by its pid (it stops the containerd it
// started): SIGTERM, then SIGKILL to its process group after 20 s.
func stopDockerd(t *testing.T, d *exec.Cmd) {
	done := make(chan error, 1)
	go func() { done <- d.Wait() }()
	_ = d.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Errorf("dockerd (pid %d) did not exit in 20 s of SIGTERM: killed", d.Process.Pid)
		_ = syscall.Kill(-d.Process.Pid, syscall.SIGKILL)
		<-done
	}
}
