// SPDX-License-Identifier: Apache-2.0

// Package testpod gives root tests a real Kubernetes-style pod: a private
// containerd (its own root, state directory and sockets, the CRI plugin
// off) running, with runc, a sandbox container holding a CNI-style
// network namespace file and an application container joined to it,
// with the annotations Kubernetes' CRI plugin writes and the kubelet's
// cgroup layout; and a plain ctr container beside them. Everything it
// makes is removed when the test ends, also on failure.
package testpod

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"golang.org/x/sys/unix"
)

// The pod the real test makes, as Kubernetes' CRI plugin would describe it.
const (
	Name      = "web-1"
	Namespace = "shop"
	UID       = "3b0a4b0e-5c3d-4f7e-9a1b-2c3d4e5f6a7b"
	App       = "api"
	Image     = "registry.example/shop/api:1.4"
	// CtrNS is containerd's namespace the containers are made in, as
	// the CRI plugin's.
	CtrNS = "k8s.io"
	// RuncRoot is where containerd's shim has runc keep its state, also
	// with a private state directory.
	RuncRoot = "/run/containerd/runc"
)

// Pod is a private containerd daemon running a two-container pod: a
// sandbox holding a CNI-style netns file and an app container in it.
type Pod struct {
	// Dir holds everything the daemon made; Sock is its socket, State
	// its state directory (containerd's bundles are under it).
	Dir, Sock, State string
	// Netns is the pod's network namespace file, NetnsIno its inode.
	Netns            string
	NetnsIno         uint64
	SandboxID, AppID string
	SandboxPid       int
	AppPid           int
	// Plain is a container outside the pod with ctr's own cgroup layout,
	// /<ns>/<id>, in a namespace of its own.
	PlainID  string
	PlainPid int
}

// Start starts the daemon and the pod, or skips the test without root,
// containerd, runc or busybox; everything is undone by t.Cleanup, also
// when the test fails half-way.
func Start(t testing.TB) *Pod {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run containers")
	}
	for _, b := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2", "busybox", "unshare", "nsenter", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s (Debian packages containerd, runc, busybox-static): %v", b, err)
		}
	}
	lockPods(t)
	p := &Pod{Dir: t.TempDir(), SandboxID: randomID(t), AppID: randomID(t), PlainID: "plain-" + randomID(t)[:12]}
	p.Sock = filepath.Join(p.Dir, "c.sock")
	p.State = filepath.Join(p.Dir, "state")

	// Directories ctr and the shim make under /run/containerd even with a
	// private state directory: remove the ones this test made, last.
	removeNewDirs(t, "/run/containerd", "/run/containerd/fifo", "/run/containerd/s",
		RuncRoot, filepath.Join(RuncRoot, CtrNS))

	conf := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"+
		"[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
		filepath.Join(p.Dir, "root"), p.State, p.Sock, p.Sock+".ttrpc")
	confPath := filepath.Join(p.Dir, "config.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(p.Dir, "containerd.log"))
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

	rootfs := filepath.Join(p.Dir, "rootfs")
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
	p.Netns = filepath.Join(p.Dir, "netns")
	if err := os.WriteFile(p.Netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "unshare", "--net="+p.Netns, "true").CombinedOutput(); err != nil {
		t.Fatalf("unshare: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(p.Netns, unix.MNT_DETACH); err != nil {
			t.Errorf("umount %s: %v", p.Netns, err)
		}
	})
	// Loopback up, as CNI's loopback plugin leaves it.
	if out, err := exec.CommandContext(ctx, "nsenter", "--net="+p.Netns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up in the pod: %v: %s", err, out)
	}

	cgroupOf := func(id string) string { return "/kubepods/besteffort/pod" + UID + "/" + id }
	removeCgroups(t, "kubepods", "kubepods/besteffort", "kubepods/besteffort/pod"+UID,
		strings.TrimPrefix(cgroupOf(p.SandboxID), "/"), strings.TrimPrefix(cgroupOf(p.AppID), "/"))
	removeCgroups(t, CtrNS, CtrNS+"/"+p.PlainID)

	ann := func(kv ...string) []string {
		var a []string
		for _, s := range kv {
			a = append(a, "--annotation", s)
		}
		return a
	}
	common := []string{
		"io.kubernetes.cri.sandbox-name=" + Name,
		"io.kubernetes.cri.sandbox-namespace=" + Namespace,
		"io.kubernetes.cri.sandbox-uid=" + UID,
		"io.kubernetes.cri.sandbox-id=" + p.SandboxID,
	}
	p.run(t, p.SandboxID, cgroupOf(p.SandboxID), rootfs,
		ann(append(common, "io.kubernetes.cri.container-type=sandbox")...))
	p.run(t, p.AppID, cgroupOf(p.AppID), rootfs,
		ann(append(common, "io.kubernetes.cri.container-type=container",
			"io.kubernetes.cri.container-name="+App,
			"io.kubernetes.cri.image-name="+Image)...))
	p.run(t, p.PlainID, "", rootfs, nil)
	p.SandboxPid = p.initPid(t, p.SandboxID)
	p.PlainPid = p.initPid(t, p.PlainID)
	p.AppPid = p.initPid(t, p.AppID)
	ino, err := NetnsInode(p.AppPid)
	if err != nil {
		t.Fatal(err)
	}
	p.NetnsIno = ino
	return p
}

// ctr runs ctr against the private daemon, bounded by timeout.
func (p *Pod) ctr(t testing.TB, timeout time.Duration, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", p.Sock, "-n", CtrNS}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// run starts a container from rootfs running sleep, in the pod's netns
// when it has a cgroup path (else in its own, with ctr's cgroup), and
// registers its removal.
func (p *Pod) run(t testing.TB, id, cgroup, rootfs string, annotations []string) {
	t.Helper()
	args := []string{"run", "-d", "--rootfs"}
	if cgroup != "" {
		args = append(args, "--with-ns", "network:"+p.Netns, "--cgroup", cgroup)
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
func (p *Pod) remove(t testing.TB, id string) {
	_ = p.ctr(t, 5*time.Second, "tasks", "kill", "-s", "SIGKILL", id)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.ctr(t, 5*time.Second, "tasks", "rm", id)
		if err == nil || strings.Contains(err.Error(), "not found") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("task %s not removed in 10 s: %v", shortID(id), err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := p.ctr(t, 10*time.Second, "containers", "rm", id); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Errorf("container %s: %v", shortID(id), err)
	}
}

func (p *Pod) initPid(t testing.TB, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.State, "io.containerd.runtime.v2.task", CtrNS, id, "init.pid"))
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
func stopDaemon(t testing.TB, cmd *exec.Cmd) {
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
func removeCgroups(t testing.TB, dirs ...string) {
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
func removeNewDirs(t testing.TB, dirs ...string) {
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

func randomID(t testing.TB) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func shortID(id string) string { return id[:min(12, len(id))] }

// NetnsInode is the inode of process pid's network namespace.
func NetnsInode(pid int) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/net", &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// NS is the pod's network namespace, to enter with netns.Do.
func (p *Pod) NS() netns.NS {
	return netns.NS{Name: Namespace + "/" + Name, Inode: p.NetnsIno, Path: p.Netns}
}

// Roots are the directories a containers.Resolver reads for this pod
// (containers.Roots' fields, in order: Proc, ContainerdState, Runc,
// Docker); Docker's is a directory that does not exist.
func (p *Pod) Roots() (proc, containerdState, runc, docker string) {
	return "/proc", p.State, RuncRoot, filepath.Join(p.Dir, "no-docker")
}

// Join moves process pid into the application container's cgroups, in
// every hierarchy the container's own process is in, so that pid's
// /proc/PID/cgroup is the container's: a process of the container, to
// the resolver, though started outside it. pid must be in the pod's
// network namespace already to count as the container's there. The
// process must exit before the test ends (the pod's cleanup removes the
// cgroups).
func (p *Pod) Join(t testing.TB, pid int) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.AppPid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		mount := "/sys/fs/cgroup/unified"
		switch {
		case f[1] == "" && f[0] == "0":
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				mount = "/sys/fs/cgroup" // a v2-only host
			}
		case strings.HasPrefix(f[1], "name="):
			mount = "/sys/fs/cgroup/" + strings.TrimPrefix(f[1], "name=")
		default:
			mount = "/sys/fs/cgroup/" + f[1]
		}
		procs := filepath.Join(mount, f[2], "cgroup.procs")
		if _, err := os.Stat(procs); err != nil {
			continue // a hierarchy mounted elsewhere, or not at all
		}
		if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatalf("join %s: %v", procs, err)
		}
		moved++
	}
	if moved == 0 {
		t.Fatalf("pid %d joined no cgroup of the app container (%q)", pid, b)
	}
}

// lockPath serialises the pods of test binaries run side by side (go
// test runs packages in parallel): they share the pod's name, uid and
// cgroup paths, and a namespace is named by the one pod holding that name.
const lockPath = "/run/tcpdoctor-testpod.lock"

// lockPods waits, at most 5 minutes, for the pods of other test
// processes to end; the lock is held until t ends (the kernel drops it if
// the process dies).
func lockPods(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("testpod: %v", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) {
			_ = f.Close()
			t.Fatalf("testpod: lock %s: %v", lockPath, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { _ = f.Close() }) // closing drops the lock
}
