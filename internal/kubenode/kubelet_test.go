// SPDX-License-Identifier: Apache-2.0

package kubenode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v2"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testchart"
)

const chartDir = "../../deploy/helm/tcpdoctor"

// The chart's values the tests set: the image imported on the node, a
// short interval (the rules' window) so the test waits seconds, not
// minutes, and the history store in the test's own directory instead of
// the node's /var/lib/tcpdoctor. Everything else is the chart's default.
func chartValues(historyDir string) []string {
	return []string{
		"image.repository=" + tcpdoctorRep, "image.tag=k8s-test", "image.pullPolicy=Never",
		"interval=2s", "history.path=" + historyDir,
	}
}

// renderDaemonSet runs helm template on the chart and returns its DaemonSet.
func renderDaemonSet(t *testing.T, namespace string, set []string) map[any]any {
	t.Helper()
	ds := testchart.Render(t, os.Getenv(envHelm), chartDir, namespace, set...)["DaemonSet"]
	if len(ds) == 0 {
		t.Fatal("helm template rendered no DaemonSet")
	}
	return ds[0]
}

// at is testchart.At.
func at(o any, path ...any) any { return testchart.At(o, path...) }

// chartHostPaths are the DaemonSet's hostPath directories.
func chartHostPaths(ds map[any]any) []string {
	var out []string
	vols, _ := at(ds, "spec", "template", "spec", "volumes").([]any)
	for _, v := range vols {
		if p := at(v, "hostPath", "path"); p != nil {
			out = append(out, fmt.Sprint(p))
		}
	}
	return out
}

// staticPod is the DaemonSet's pod template as a pod of its own, for the
// kubelet's static pod directory: the same labels, annotations and spec.
func staticPod(t *testing.T, ds map[any]any) []byte {
	t.Helper()
	tmpl := at(ds, "spec", "template").(map[any]any)
	meta := map[any]any{"name": at(ds, "metadata", "name"), "namespace": at(ds, "metadata", "namespace")}
	for _, k := range []string{"labels", "annotations"} {
		if v := at(tmpl, "metadata", k); v != nil {
			meta[k] = v
		}
	}
	out, err := yaml.Marshal(map[any]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKubeletChartPod runs a real kubelet (Kubernetes' own, built by
// scripts/k8s-build.sh) on containerd's CRI with the bridge and loopback
// CNI plugins, and the Helm chart's DaemonSet pod as a static pod beside
// two application pods; it checks that the pod runs with exactly the
// chart's security context and mounts, that /metrics names both
// application pods by pod, namespace and container, and that the history
// on the hostPath survives a restart of the pod.
func TestKubeletChartPod(t *testing.T) {
	kubelet := need(t, envKubelet)
	ctx := interrupted(t)
	start := time.Now()
	n := newNode(t, ctx)
	n.importTcpdoctor("k8s-test")
	historyDir := filepath.Join(n.work, "history")
	ds := renderDaemonSet(t, "tcpdoctor", chartValues(historyDir))
	n.hostPaths(chartHostPaths(ds))
	n.startKubelet(kubelet, "")
	t.Logf("node ready in %v", time.Since(start).Round(time.Millisecond))

	n.writeStatic("tcpdoctor", staticPod(t, ds))
	_, ids := n.waitRunning("tcpdoctor", "tcpdoctor", 180*time.Second)
	first := ids["tcpdoctor"]
	pid := checkChartContainer(t, n, ds, first)
	listener, client := n.appPods()
	t.Logf("pods running in %v: listener %s (%s), client %s", time.Since(start).Round(time.Millisecond),
		listener.Metadata.Name, listener.Status.PodIP, client.Metadata.Name)

	names := func() {
		n.waitFor("/metrics naming both application pods", 120*time.Second, func() error {
			body, err := n.get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
			if err != nil {
				return err
			}
			for _, p := range []pod{listener, client} {
				c := p.Status.ContainerStatuses[0].Name
				if line := seriesWith(body, `pod="`+p.Metadata.Name+`"`, `namespace="`+appsNS+`"`, `container="`+c+`"`); line == "" {
					return fmt.Errorf("no series with pod %q, namespace %q, container %q", p.Metadata.Name, appsNS, c)
				}
			}
			return nil
		})
	}
	names()
	body, _ := n.get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	for _, p := range []pod{listener, client} {
		t.Logf("%s", seriesWith(body, `pod="`+p.Metadata.Name+`"`, `container="`+p.Status.ContainerStatuses[0].Name+`"`))
	}

	// The listener's full accept queue is an incident in the history.
	var before incident
	n.waitFor("an incident of the listener's pod in the history", 120*time.Second, func() error {
		l, err := historyList(n, historyDir)
		if err != nil {
			return err
		}
		for _, in := range l.Incidents {
			if in.Subject.Pod == listener.Metadata.Name && in.Subject.PodNamespace == appsNS && in.Subject.Container == "listener" {
				before = in
				return nil
			}
		}
		return fmt.Errorf("%d incidents, none of pod %s container listener", len(l.Incidents), listener.Metadata.Name)
	})
	t.Logf("incident: %s %s from %s", before.Rule, before.Severity, before.Start.Format(time.RFC3339Nano))

	// Restart the pod: the kubelet stops it (sandbox and container) when
	// its manifest goes, and starts a new one when it comes back.
	n.removeStatic("tcpdoctor")
	n.waitFor("the tcpdoctor pod to stop", 120*time.Second, func() error {
		if syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("tcpdoctor (pid %d) still runs", pid)
		}
		if _, _, err := n.running("tcpdoctor", "tcpdoctor"); err == nil {
			return errors.New("the pod still runs")
		}
		return nil
	})
	restarted := time.Now()
	n.writeStatic("tcpdoctor", staticPod(t, ds))
	// The same manifest gives the same static pod UID, and the kubelet's
	// /pods can show the old status (the old container "running") until
	// its pod worker syncs the new one: wait for a new container.
	n.waitFor("a new tcpdoctor container", 180*time.Second, func() error {
		var err error
		if _, ids, err = n.running("tcpdoctor", "tcpdoctor"); err != nil {
			return err
		}
		if ids["tcpdoctor"] == first {
			return fmt.Errorf("container %s was not replaced yet", first)
		}
		return nil
	})
	checkChartContainer(t, n, ds, ids["tcpdoctor"])
	names()
	n.waitFor("the restarted pod's windows in the history, beside the first pod's incident", 120*time.Second, func() error {
		l, err := historyList(n, historyDir)
		if err != nil {
			return err
		}
		if !l.Last.After(restarted) {
			return fmt.Errorf("last window ends %s, before the restart (%s)", l.Last.Format(time.RFC3339), restarted.Format(time.RFC3339))
		}
		for _, in := range l.Incidents {
			if in.Rule == before.Rule && in.Subject.Pod == before.Subject.Pod && in.Start.Equal(before.Start) {
				return nil
			}
		}
		return fmt.Errorf("the incident %s of %s from %s is gone: %+v", before.Rule, before.Subject.Pod, before.Start, l.Incidents)
	})
	t.Logf("test wall time %v", time.Since(start).Round(time.Millisecond))
}

// seriesWith returns the first sample line of a metrics page holding
// every one of labels, or "".
func seriesWith(page []byte, labels ...string) string {
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		return line
	}
	return ""
}

// incident and listing are what the test reads of `history --json`
// (docs/history.md).
type incident struct {
	Rule     string `json:"rule"`
	Severity string `json:"severity"`
	Subject  struct {
		Pod          string `json:"pod"`
		PodNamespace string `json:"pod_namespace"`
		Container    string `json:"container"`
	} `json:"subject"`
	Start time.Time `json:"start"`
}

type listing struct {
	Last      time.Time  `json:"last"`
	Incidents []incident `json:"incidents"`
}

// historyList runs this tree's tcpdoctor history on the store the pod
// writes on its hostPath.
func historyList(n *node, dir string) (listing, error) {
	out, err := exec.CommandContext(n.ctx, filepath.Join(n.work, "images", "tcpdoctor"), "history", "--history", dir, "--since", "1h", "--json").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return listing{}, fmt.Errorf("tcpdoctor history: %w: %s", err, ee.Stderr)
		}
		return listing{}, err
	}
	var l listing
	if err := json.Unmarshal(out, &l); err != nil {
		return listing{}, fmt.Errorf("tcpdoctor history --json: %w", err)
	}
	return l, nil
}

// checkChartContainer compares what the runtime gave container id (its
// OCI spec, and its process as the kernel shows it) with the chart's
// container: the security context and the mounts, exactly. It returns
// the container's pid.
func checkChartContainer(t *testing.T, n *node, ds map[any]any, id string) int {
	t.Helper()
	c := at(ds, "spec", "template", "spec", "containers", 0)
	sc := at(c, "securityContext")
	s, pid := n.bundle(id)

	var want []string
	for _, a := range at(sc, "capabilities", "add").([]any) {
		want = append(want, "CAP_"+fmt.Sprint(a))
	}
	sort.Strings(want)
	if fmt.Sprint(at(sc, "capabilities", "drop")) != "[ALL]" {
		t.Fatalf("the chart no longer drops ALL capabilities: %v", at(sc, "capabilities", "drop"))
	}
	for _, set := range []string{"bounding", "effective", "permitted"} {
		got := append([]string(nil), s.Process.Capabilities[set]...)
		sort.Strings(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s capabilities %v, the chart's are %v", set, got, want)
		}
	}
	for set, got := range s.Process.Capabilities {
		for _, c := range got {
			if i := sort.SearchStrings(want, c); i == len(want) || want[i] != c {
				t.Errorf("%s capability %s is not the chart's", set, c)
			}
		}
	}
	if s.Process.NoNewPrivileges != !at(sc, "allowPrivilegeEscalation").(bool) {
		t.Errorf("noNewPrivileges %v, the chart's allowPrivilegeEscalation %v", s.Process.NoNewPrivileges, at(sc, "allowPrivilegeEscalation"))
	}
	if s.Process.User.UID != uint32(at(sc, "runAsUser").(int)) {
		t.Errorf("uid %d, the chart's runAsUser %v", s.Process.User.UID, at(sc, "runAsUser"))
	}
	if s.Root.Readonly != at(sc, "readOnlyRootFilesystem").(bool) {
		t.Errorf("read-only root %v, the chart's readOnlyRootFilesystem %v", s.Root.Readonly, at(sc, "readOnlyRootFilesystem"))
	}
	if at(sc, "privileged").(bool) {
		t.Errorf("the chart asks for a privileged container")
	}
	// Host network and PID: the process shares the node's network
	// namespace (the one its kubelet and containerd run in) and the
	// test's PID namespace (through the sandbox, whose namespaces the
	// spec names as /proc/PID/ns/...).
	for _, c := range []struct{ ns, want string }{{"net", n.ns.Path}, {"pid", "/proc/self/ns/pid"}} {
		got, err1 := inode(fmt.Sprintf("/proc/%d/ns/%s", pid, c.ns))
		want, err2 := inode(c.want)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("namespaces: %v", err)
		}
		if got != want {
			t.Errorf("the container's %s namespace is its own (inode %d), not the node's (%d): the chart asks for the host's", c.ns, got, want)
		}
	}
	if !strings.Contains(s.Linux.CgroupsPath, n.cgroup+"/kubepods/") {
		t.Errorf("cgroup %s is not under the kubelet's %s/kubepods", s.Linux.CgroupsPath, n.cgroup)
	}

	// The mounts: each of the chart's at its path, from its hostPath,
	// read-only as the chart says, with its propagation; and no other
	// bind mount from the host (the kubelet's and containerd's own files,
	// /etc/hosts and the like, come from under the node's work directory).
	hostPaths := map[string]string{}
	for _, v := range at(ds, "spec", "template", "spec", "volumes").([]any) {
		if p := at(v, "hostPath", "path"); p != nil {
			hostPaths[fmt.Sprint(at(v, "name"))] = fmt.Sprint(p)
		}
	}
	chartMounts := map[string]bool{}
	for _, vm := range at(c, "volumeMounts").([]any) {
		dest := fmt.Sprint(at(vm, "mountPath"))
		src, ok := hostPaths[fmt.Sprint(at(vm, "name"))]
		if !ok {
			t.Errorf("mount %s: volume %v is not a hostPath", dest, at(vm, "name"))
			continue
		}
		chartMounts[dest] = true
		ro, _ := at(vm, "readOnly").(bool)
		prop := "rprivate"
		if at(vm, "mountPropagation") == "HostToContainer" {
			prop = "rslave"
		}
		found := false
		for _, m := range s.Mounts {
			if m.Destination != dest {
				continue
			}
			found = true
			if m.Source != src {
				t.Errorf("mount %s: source %s, the chart's hostPath %s", dest, m.Source, src)
			}
			if has(m.Options, "ro") != ro {
				t.Errorf("mount %s: options %v, the chart's readOnly %v", dest, m.Options, ro)
			}
			if !has(m.Options, prop) {
				t.Errorf("mount %s: options %v, want propagation %s (the chart's %v)", dest, m.Options, prop, at(vm, "mountPropagation"))
			}
		}
		if !found {
			t.Errorf("the chart's mount %s is not in the container", dest)
		}
	}
	for _, m := range s.Mounts {
		if m.Type == "bind" && !chartMounts[m.Destination] && !strings.HasPrefix(m.Source, n.work+"/") {
			t.Errorf("mount %s from %s is not the chart's", m.Destination, m.Source)
		}
	}

	// The process as the kernel has it.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("tcpdoctor's process: %v", err)
	}
	var mask uint64
	for _, c := range want {
		bit, ok := capBits[c]
		if !ok {
			t.Fatalf("capability %s: bit unknown to the test", c)
		}
		mask |= 1 << bit
	}
	for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if v := statusField(status, f); v != fmt.Sprintf("%016x", mask) {
			t.Errorf("process %d %s %s, want %016x (the chart's %v)", pid, f, v, mask, want)
		}
	}
	if v := statusField(status, "NoNewPrivs"); v != "1" {
		t.Errorf("process %d NoNewPrivs %s, want 1", pid, v)
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatalf("tcpdoctor's mounts: %v", err)
	}
	ro := map[string]bool{}
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 {
			ro[unescapeMount(f[4])] = has(strings.Split(f[5], ","), "ro")
		}
	}
	if !ro["/"] {
		t.Errorf("process %d: / is not read-only", pid)
	}
	for _, vm := range at(c, "volumeMounts").([]any) {
		dest := fmt.Sprint(at(vm, "mountPath"))
		want, _ := at(vm, "readOnly").(bool)
		got, ok := ro[dest]
		if !ok {
			t.Errorf("process %d: %s is not a mount point", pid, dest)
		} else if got != want {
			t.Errorf("process %d: %s read-only %v, the chart's %v", pid, dest, got, want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return pid
}

func inode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// capBits are the capabilities' bit numbers (linux/capability.h).
var capBits = map[string]int{"CAP_DAC_READ_SEARCH": 2, "CAP_NET_ADMIN": 12, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21, "CAP_BPF": 39, "CAP_PERFMON": 38}

func has(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

func statusField(status []byte, name string) string {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
