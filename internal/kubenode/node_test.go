// SPDX-License-Identifier: Apache-2.0

package kubenode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// What the tests need from outside the module, found by these variables
// (scripts/k8s-node.sh sets them) or on PATH.
const (
	envKubelet = "TCPDOCTOR_KUBELET" // the kubelet binary (scripts/k8s-build.sh)
	envK8sDir  = "TCPDOCTOR_K8S_BIN" // the directory of all four programs, for the full form
	envHelm    = "TCPDOCTOR_HELM"    // helm, to render and install the chart
	cniBinDir  = "/usr/lib/cni"      // Debian's containernetworking-plugins
)

// Names in the node's container runtime; no registry is asked for any.
const (
	pauseRef     = "tcpdoctor.test/pause:1"
	podappRef    = "tcpdoctor.test/podapp:1"
	tcpdoctorRep = "tcpdoctor.test/tcpdoctor"
	appsNS       = "tdk8s-apps"
	listenPort   = 9000
	metricsPort  = 9477
)

// need skips without root and fails as root when a piece is missing: a
// broken piece is a failure, not a reason to skip.
func need(t *testing.T, env string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (containerd, the kubelet, cgroups, network namespaces)")
	}
	v := os.Getenv(env)
	if v == "" {
		t.Skipf("%s unset: scripts/k8s-node.sh builds Kubernetes from its Go module and runs this test", env)
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s: %v (Debian packages containerd, runc, util-linux, iproute2)", bin, err)
		}
	}
	for _, p := range []string{"bridge", "loopback", "host-local"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			t.Fatalf("CNI plugin %s: %v (Debian package containernetworking-plugins)", p, err)
		}
	}
	if os.Getenv(envHelm) == "" {
		t.Fatalf("%s unset: helm renders the chart (scripts/k8s-build.sh helm builds it)", envHelm)
	}
	return v
}

// interrupted cancels ctx on SIGINT or SIGTERM, and two minutes before
// go test's -timeout would kill the test, so that a test stopped fails
// where it waits and its cleanups stop everything it started.
func interrupted(t *testing.T) context.Context {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	t.Cleanup(stop)
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-2*time.Minute))
		t.Cleanup(cancel)
	}
	return ctx
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// node is containerd with its CRI plugin and a kubelet, both in a network
// namespace of the test's own (the CNI bridge, the pods' veths and the
// host-network pods live there), with their state in a work directory and
// their pods under a cgroup root of their own.
type node struct {
	t       *testing.T
	ctx     context.Context
	ns      netns.NS
	work    string
	name    string             // the node's name
	cgroup  string             // the kubelet's cgroup root, "/tdk8s-<hex>"
	sock    string             // containerd's socket
	state   string             // containerd's state directory
	port    int                // the kubelet's HTTPS port
	statics string             // the static pod directory
	nodeIP  string             // the kubelet's --node-ip, when set
	procs   map[string]*daemon // by name, as start was given it
	created []string           // host directories the pods' hostPaths created, deepest first
	fork    chan func()        // the forker thread's work (startOnForker)
	http    *http.Client
}

// newNode starts containerd in a new network namespace and imports the
// pause and application images; the kubelet is started by startKubelet.
// Everything is stopped and removed when the test ends, failed or not.
func newNode(t *testing.T, ctx context.Context) *node {
	ns := testns.New(t, "k8s")
	id := randHex(4)
	n := &node{t: t, ctx: ctx, ns: ns, work: t.TempDir(), name: "tdk8s-" + id, cgroup: "/tdk8s-" + id, port: 10250, procs: map[string]*daemon{}}
	n.sock = filepath.Join(n.work, "containerd", "containerd.sock")
	n.state = filepath.Join(n.work, "containerd", "state")
	n.statics = filepath.Join(n.work, "manifests")
	n.http = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // the kubelet's self-signed serving certificate
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.Do(ns, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	t.Cleanup(n.stop)
	for _, d := range []string{"containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "manifests", "kubelet", "logs", "images"} {
		if err := os.MkdirAll(filepath.Join(n.work, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.write("cni/net.d/10-tdk8s.conflist", fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "tdk8s",
  "plugins": [{
    "type": "bridge", "bridge": "tdk8s0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "198.19.250.0/24"}]]}
  }]
}
`, filepath.Join(n.work, "cni/ipam")))
	// CRI itself adds the loopback plugin for lo (cniBinDir/loopback).
	// restrict_oom_score_adj: CRI gives sandboxes -998 and the kubelet
	// critical pods -997, which only CAP_SYS_RESOURCE may set; without it
	// (as in this project's CI sessions) runc fails ("can't get final
	// child's PID from pipe"), so scores stay at or above our own.
	n.write("containerd/config.toml", fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  stream_server_address = "127.0.0.1"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(n.work, "containerd/root"), n.state, n.sock, n.sock+".ttrpc", filepath.Join(n.work, "containerd/opt"),
		pauseRef, cniBinDir, filepath.Join(n.work, "cni/net.d")))
	n.start("containerd", "containerd", "-c", filepath.Join(n.work, "containerd/config.toml"))
	n.waitFor("containerd's socket", 60*time.Second, func() error {
		return exec.CommandContext(ctx, "ctr", "--address", n.sock, "version").Run()
	})

	podapp := filepath.Join(n.work, "images", "podapp")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", podapp, "github.com/tcpdoctor/tcpdoctor/internal/kubenode/podapp")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build podapp: %v\n%s", err, out)
	}
	for ref, ep := range map[string][]string{pauseRef: {"/podapp", "pause"}, podappRef: {"/podapp"}} {
		tar := filepath.Join(n.work, "images", strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
		if err := WriteImage(tar, podapp, ref, ep); err != nil {
			t.Fatal(err)
		}
		n.ctr("images", "import", tar)
	}
	return n
}

// importTcpdoctor builds cmd/tcpdoctor static and writes its image with
// tools/ociimage, the release's own image writer (scripts/release.sh),
// then imports it as tcpdoctorRep:tag.
func (n *node) importTcpdoctor(tag string) {
	t := n.t
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(n.work, "images", "tcpdoctor")
	build := exec.CommandContext(n.ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/tcpdoctor")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tcpdoctor: %v\n%s", err, out)
	}
	tar := filepath.Join(n.work, "images", "tcpdoctor_oci.tar")
	oci := exec.CommandContext(n.ctx, "go", "run", "./ociimage", "-version", tag, "-revision", "test", "-out", tar, "-bin", "linux/amd64="+bin)
	oci.Dir = filepath.Join(root, "tools")
	oci.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=0")
	if out, err := oci.CombinedOutput(); err != nil {
		t.Fatalf("tools/ociimage: %v\n%s", err, out)
	}
	n.ctr("images", "import", "--base-name", tcpdoctorRep, tar)
}

func (n *node) write(rel, content string) {
	if err := os.WriteFile(filepath.Join(n.work, rel), []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// start runs a daemon in the node's network namespace (nsenter: only the
// network namespace changes, so it sees the host's mounts and cgroups),
// its output in logs/NAME.log; it is killed if the test process dies.
func (n *node) start(name, bin string, args ...string) *exec.Cmd {
	n.t.Helper()
	log, err := os.Create(filepath.Join(n.work, "logs", name+".log"))
	if err != nil {
		n.t.Fatal(err)
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + n.ns.Path, "--", bin}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.startOnForker(cmd); err != nil {
		n.t.Fatalf("start %s: %v", name, err)
	}
	log.Close()
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.done) }()
	n.procs[name] = d
	return cmd
}

// startOnForker starts cmd from the node's forker thread. PR_SET_PDEATHSIG
// fires when the thread that forked a child exits, and Go ends threads
// (netns.Do's, for one), so the daemons are forked from a thread locked
// to a goroutine that lives until the node has stopped.
func (n *node) startOnForker(cmd *exec.Cmd) error {
	if n.fork == nil {
		n.fork = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			for f := range n.fork {
				f()
			}
		}()
	}
	errc := make(chan error)
	n.fork <- func() { errc <- cmd.Start() }
	return <-errc
}

// ctr runs containerd's client on the node's containerd, k8s.io namespace.
func (n *node) ctr(args ...string) string {
	n.t.Helper()
	out, err := exec.CommandContext(n.ctx, "ctr", append([]string{"--address", n.sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitFor polls f until it succeeds, the time is up (fatal, with the last
// error and the daemons' logs' tails) or the test is interrupted.
func (n *node) waitFor(what string, limit time.Duration, f func() error) {
	n.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || n.ctx.Err() != nil {
			if n.ctx.Err() != nil {
				err = fmt.Errorf("interrupted (%w)", err)
			}
			n.t.Fatalf("waiting for %s (%v): %v\n%s", what, limit, err, n.logs())
		}
		select {
		case <-n.ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// logs is the tail of every daemon's log, for a failure message.
func (n *node) logs() string {
	var b strings.Builder
	for name, d := range n.procs {
		select {
		case <-d.done:
			fmt.Fprintf(&b, "%s (pid %d) ended: %v\n", name, d.cmd.Process.Pid, d.err)
		default:
			fmt.Fprintf(&b, "%s (pid %d) runs\n", name, d.cmd.Process.Pid)
		}
	}
	files, _ := filepath.Glob(filepath.Join(n.work, "logs", "*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", filepath.Base(f), len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// startKubelet starts the kubelet on the node: cgroupfs driver (cgroups
// v1 here), its pods under the node's cgroup root, static pods from
// n.statics; standalone unless kubeconfig is set. Its API answers
// anonymous requests on 127.0.0.1 in the node's namespace only.
func (n *node) startKubelet(bin, kubeconfig string) {
	register := kubeconfig != ""
	// The kubelet wants its cgroup root to exist in every hierarchy; a
	// new cpuset cgroup has no CPUs or memory nodes until given its
	// parent's.
	for _, d := range n.cgroupDirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			n.t.Fatalf("cgroup root: %v", err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					n.t.Fatalf("cgroup root: %v", err)
				}
			}
		}
	}
	n.write("kubelet/config.yaml", fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %q
fileCheckFrequency: 1s
syncFrequency: 5s
cgroupDriver: cgroupfs
cgroupRoot: %q
failCgroupV1: false
failSwapOn: false
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
podLogsDir: %q
resolvConf: ""
makeIPTablesUtilChains: false
registerNode: %v
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, n.statics, n.cgroup, n.port, n.sock, filepath.Join(n.work, "logs/pods"), register))
	args := []string{"--config", filepath.Join(n.work, "kubelet/config.yaml"), "--root-dir", filepath.Join(n.work, "kubelet"),
		"--cert-dir", filepath.Join(n.work, "kubelet/pki"), "--hostname-override", n.name, "--v=2"}
	if kubeconfig != "" {
		args = append(args, "--kubeconfig", kubeconfig)
	}
	if n.nodeIP != "" {
		args = append(args, "--node-ip", n.nodeIP)
	}
	n.start("kubelet", bin, args...)
	n.waitFor("the kubelet's /healthz", 120*time.Second, func() error {
		_, err := n.get(fmt.Sprintf("https://127.0.0.1:%d/healthz", n.port))
		return err
	})
}

// get fetches url in the node's network namespace.
func (n *node) get(url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(n.ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return body, nil
}

// pod is what the tests read of the kubelet's /pods.
type pod struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"metadata"`
	Status struct {
		Phase             string `json:"phase"`
		PodIP             string `json:"podIP"`
		ContainerStatuses []struct {
			Name         string          `json:"name"`
			ContainerID  string          `json:"containerID"`
			RestartCount int             `json:"restartCount"`
			State        json.RawMessage `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// running returns the static pod named name (the node's name appended)
// when its containers all run, with each one's containerd id.
func (n *node) running(namespace, name string) (pod, map[string]string, error) {
	return n.runningWhere(namespace, func(p pod) bool { return p.Metadata.Name == name+"-"+n.name })
}

// runningWhere returns the first pod in namespace that match accepts, as
// running does.
func (n *node) runningWhere(namespace string, match func(pod) bool) (pod, map[string]string, error) {
	body, err := n.get(fmt.Sprintf("https://127.0.0.1:%d/pods", n.port))
	if err != nil {
		return pod{}, nil, err
	}
	var list struct{ Items []pod }
	if err := json.Unmarshal(body, &list); err != nil {
		return pod{}, nil, fmt.Errorf("kubelet /pods: %w", err)
	}
	for _, p := range list.Items {
		if p.Metadata.Namespace != namespace || !match(p) {
			continue
		}
		if p.Status.Phase != "Running" {
			return p, nil, fmt.Errorf("pod %s/%s is %q", namespace, p.Metadata.Name, p.Status.Phase)
		}
		ids := map[string]string{}
		for _, c := range p.Status.ContainerStatuses {
			id, ok := strings.CutPrefix(c.ContainerID, "containerd://")
			if !ok || !bytes.Contains(c.State, []byte(`"running"`)) {
				return p, nil, fmt.Errorf("pod %s: container %s is not running: %s", p.Metadata.Name, c.Name, c.State)
			}
			ids[c.Name] = id
		}
		if len(ids) == 0 {
			return p, nil, fmt.Errorf("pod %s: no container status yet", p.Metadata.Name)
		}
		return p, ids, nil
	}
	return pod{}, nil, fmt.Errorf("no such pod in namespace %s on the node", namespace)
}

// waitRunning waits for a static pod to run and returns it.
func (n *node) waitRunning(namespace, name string, limit time.Duration) (pod, map[string]string) {
	n.t.Helper()
	var p pod
	var ids map[string]string
	n.waitFor("pod "+namespace+"/"+name, limit, func() error {
		var err error
		p, ids, err = n.running(namespace, name)
		return err
	})
	return p, ids
}

// spec is the OCI runtime spec containerd gave container id.
type spec struct {
	Process struct {
		User            struct{ UID, GID uint32 }
		Capabilities    map[string][]string `json:"capabilities"`
		NoNewPrivileges bool                `json:"noNewPrivileges"`
	} `json:"process"`
	Root struct {
		Readonly bool `json:"readonly"`
	} `json:"root"`
	Mounts []struct {
		Destination string   `json:"destination"`
		Source      string   `json:"source"`
		Type        string   `json:"type"`
		Options     []string `json:"options"`
	} `json:"mounts"`
	Linux struct {
		Namespaces []struct {
			Type string `json:"type"`
			Path string `json:"path"`
		} `json:"namespaces"`
		CgroupsPath string `json:"cgroupsPath"`
	} `json:"linux"`
}

// bundle reads container id's OCI spec and its process id from
// containerd's state directory.
func (n *node) bundle(id string) (spec, int) {
	n.t.Helper()
	dir := filepath.Join(n.state, "io.containerd.runtime.v2.task", "k8s.io", id)
	var s spec
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err == nil {
		err = json.Unmarshal(data, &s)
	}
	if err != nil {
		n.t.Fatalf("container %s: config.json: %v", id, err)
	}
	pidText, err := os.ReadFile(filepath.Join(dir, "init.pid"))
	if err != nil {
		n.t.Fatalf("container %s: init.pid: %v", id, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		n.t.Fatalf("container %s: init.pid: %v", id, err)
	}
	return s, pid
}

// writeStatic writes a static pod manifest; removeStatic takes it away
// (the kubelet then stops the pod).
func (n *node) writeStatic(name string, manifest []byte) {
	n.t.Helper()
	tmp := filepath.Join(n.work, "."+name+".tmp")
	if err := os.WriteFile(tmp, manifest, 0o644); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.statics, name+".yaml")); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) removeStatic(name string) {
	n.t.Helper()
	if err := os.Remove(filepath.Join(n.statics, name+".yaml")); err != nil {
		n.t.Fatal(err)
	}
}

// appPods starts the two application pods as static pods: a listener
// that never accepts (backlog 2) and a client holding 8 connections to
// it with SO_RCVBUF pinned at 4 KiB, so the listener's accept queue is
// full and the client's connects beyond it wait.
func (n *node) appPods() (listener, client pod) {
	n.writeStatic("listener", []byte(appPod("listener", "listen", strconv.Itoa(listenPort), "2")))
	listener, _ = n.waitRunning(appsNS, "listener", 120*time.Second)
	if listener.Status.PodIP == "" {
		n.t.Fatalf("listener pod has no IP: %+v", listener.Status)
	}
	n.writeStatic("client", []byte(appPod("client", "client", net.JoinHostPort(listener.Status.PodIP, strconv.Itoa(listenPort)), "8", "4096")))
	client, _ = n.waitRunning(appsNS, "client", 120*time.Second)
	return listener, client
}

func appPod(name string, args ...string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: %s
      image: %s
      imagePullPolicy: Never
      args: [%s]
`, name, appsNS, name, podappRef, strings.Join(quoted, ", "))
}

// stop ends everything the node started, in order, also after a failure
// or an interrupt: the static pods through the kubelet (CNI teardown),
// the kubelet, every task and then containerd, the shims and processes
// left in the node's cgroups (each by pid), the mounts under the work
// directory, the pods' network namespace files, the cgroups. The test's
// namespace (the bridge, the veths) goes with testns's cleanup.
func (n *node) stop() {
	t := n.t
	if dir := os.Getenv("TCPDOCTOR_K8S_LOGS"); dir != "" && t.Failed() {
		// Keep the daemons' logs of a failed run: the work directory goes.
		_ = exec.Command("cp", "-r", filepath.Join(n.work, "logs"), filepath.Join(dir, t.Name()+"-"+n.name)).Run()
	}
	if n.alive("kubelet") {
		// Let the kubelet stop its pods (CRI StopPodSandbox runs CNI DEL).
		files, _ := filepath.Glob(filepath.Join(n.statics, "*.yaml"))
		for _, f := range files {
			_ = os.Remove(f)
		}
		if len(files) > 0 {
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) && n.sandboxes() > 0 {
				time.Sleep(500 * time.Millisecond)
			}
		}
	}
	netnsFiles := n.podNetns()
	n.kill("kubelet")
	if n.alive("containerd") {
		out, _ := exec.Command("ctr", "--address", n.sock, "-n", "k8s.io", "tasks", "ls", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command("ctr", "--address", n.sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).Run()
		}
		for _, id := range strings.Fields(string(out)) {
			for i := 0; i < 10; i++ {
				if exec.Command("ctr", "--address", n.sock, "-n", "k8s.io", "tasks", "rm", "-f", id).Run() == nil {
					break
				}
				time.Sleep(300 * time.Millisecond)
			}
		}
	}
	n.kill("containerd")
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		n.kill(name)
	}
	// Shims outlive containerd; they name its socket on their command line.
	for _, pid := range pidsWhere(func(cmdline string) bool {
		return strings.Contains(cmdline, "containerd-shim") && strings.Contains(cmdline, n.sock)
	}) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	n.killCgroup()
	n.unmountUnder(n.work)
	for _, f := range netnsFiles {
		_ = syscall.Unmount(f, syscall.MNT_DETACH)
		_ = os.Remove(f)
	}
	if err := n.removeCgroups(); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	for _, d := range n.created {
		_ = os.Remove(d) // only if still empty
	}
	if n.fork != nil {
		close(n.fork)
	}
}

// hostPaths notes which of a pod's hostPath directories (DirectoryOrCreate)
// do not exist yet, with their missing parents, so that stop removes
// those the pod created, if empty.
func (n *node) hostPaths(paths []string) {
	for _, p := range paths {
		var missing []string
		for d := filepath.Clean(p); d != "/" && d != n.work && !strings.HasPrefix(d, n.work+"/"); d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil {
				break
			}
			missing = append(missing, d)
		}
		n.created = append(n.created, missing...)
	}
	sort.Slice(n.created, func(i, j int) bool { return len(n.created[i]) > len(n.created[j]) })
}

// daemon is a process start began; done closes when it has exited.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // how it ended, once done is closed
}

// alive reports whether daemon name runs.
func (n *node) alive(name string) bool {
	d := n.procs[name]
	if d == nil {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// kill stops daemon name: SIGTERM, then SIGKILL after 10 s. os.Process
// signals its own process only (a pidfd), never a reused pid.
func (n *node) kill(name string) {
	d := n.procs[name]
	if d == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// sandboxes counts the pod sandboxes containerd still runs.
func (n *node) sandboxes() int {
	out, err := exec.Command("ctr", "--address", n.sock, "-n", "k8s.io", "containers", "ls", "-q", "labels.io.cri-containerd.kind==sandbox").Output()
	if err != nil {
		return 0
	}
	return len(strings.Fields(string(out)))
}

// podNetns lists the network namespace files of the node's pod sandboxes
// (CRI makes them under /run/netns, named cni-<uuid>).
func (n *node) podNetns() []string {
	var files []string
	cfgs, _ := filepath.Glob(filepath.Join(n.state, "io.containerd.runtime.v2.task", "k8s.io", "*", "config.json"))
	for _, c := range cfgs {
		data, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		var s spec
		if json.Unmarshal(data, &s) != nil {
			continue
		}
		for _, ns := range s.Linux.Namespaces {
			if ns.Type == "network" && (strings.HasPrefix(ns.Path, "/var/run/netns/cni-") || strings.HasPrefix(ns.Path, "/run/netns/cni-")) {
				files = append(files, ns.Path)
			}
		}
	}
	sort.Strings(files)
	return slicesCompact(files)
}

func slicesCompact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// cgroupDirs are the node's cgroup root in every mounted hierarchy.
func (n *node) cgroupDirs() []string {
	var dirs []string
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		i := 0
		for i < len(fields) && fields[i] != "-" {
			i++
		}
		if i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") {
			dirs = append(dirs, filepath.Join(fields[4], n.cgroup))
		}
	}
	return dirs
}

// killCgroup kills, by pid, every process left in the node's cgroups:
// all of them were started by its containerd for its pods.
func (n *node) killCgroup() {
	for _, d := range n.cgroupDirs() {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

// removeCgroups removes the node's cgroup directories, deepest first,
// retrying while killed processes exit.
func (n *node) removeCgroups() error {
	var left []string
	for try := 0; try < 20; try++ {
		left = left[:0]
		for _, d := range n.cgroupDirs() {
			var all []string
			_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					all = append(all, p)
				}
				return nil
			})
			for i := len(all) - 1; i >= 0; i-- {
				if err := os.Remove(all[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
					left = append(left, all[i])
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("cgroups left: %v", left)
}

// unmountUnder detaches every mount below dir, deepest first.
func (n *node) unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, unescapeMount(fields[4]))
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// pidsWhere lists the processes whose command line (NUL as space)
// satisfies f.
func pidsWhere(f func(cmdline string) bool) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if f(string(bytes.ReplaceAll(data, []byte{0}, []byte{' '}))) {
			pids = append(pids, pid)
		}
	}
	return pids
}
