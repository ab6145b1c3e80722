// SPDX-License-Identifier: Apache-2.0

package release

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testchart"
)

const chartDir = "../../deploy/helm/tcpdoctor"

// helm is the helm binary scripts/release-test.sh built, or skips.
func helm(t *testing.T) string {
	t.Helper()
	h := os.Getenv(envHelm)
	if h == "" {
		t.Skipf("%s unset: scripts/release-test.sh builds helm (by version, from the module proxy) and runs these checks", envHelm)
	}
	return h
}

// render renders chart as the chart checks do (namespace monitoring).
func render(t *testing.T, h, chart string, set ...string) map[string][]map[any]any {
	t.Helper()
	return testchart.Render(t, h, chart, "monitoring", set...)
}

// at is testchart.At.
func at(o any, path ...any) any { return testchart.At(o, path...) }

func readYAML(t *testing.T, path string) []map[any]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[any]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o map[any]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, o)
	}
	return docs
}

// plainDaemonSet is deploy/kubernetes/daemonset.yaml's DaemonSet.
func plainDaemonSet(t *testing.T) map[any]any {
	t.Helper()
	for _, o := range readYAML(t, "../../deploy/kubernetes/daemonset.yaml") {
		if o["kind"] == "DaemonSet" {
			return o
		}
	}
	t.Fatal("deploy/kubernetes/daemonset.yaml has no DaemonSet")
	return nil
}

// TestChart lints the chart (the repository's and the release's
// archive) and checks what it renders against the intent of
// deploy/kubernetes/daemonset.yaml: the host's network and PID
// namespaces, the same security context (capabilities added and
// dropped, root without privilege escalation, read-only root), the same
// probe, every mount of the plain file, and the container-runtime paths
// naming pods reads, each read-only at the path it has on the host; the
// optional ServiceMonitor and PrometheusRule (the alert file's groups,
// unchanged).
func TestChart(t *testing.T) {
	h := helm(t)
	charts := []string{chartDir}
	if dir := os.Getenv(envDir); dir != "" {
		charts = append(charts, one(t, filepath.Join(dir, "tcpdoctor-*.tgz")))
	}
	for _, c := range charts {
		if out, err := exec.Command(h, "lint", "--strict", c).CombinedOutput(); err != nil {
			t.Errorf("helm lint --strict %s: %v\n%s", c, err, out)
		}
	}
	plain := plainDaemonSet(t)
	objs := render(t, h, chartDir)
	if len(objs["DaemonSet"]) != 1 || len(objs["Service"]) != 1 || len(objs["ServiceMonitor"]) != 0 || len(objs["PrometheusRule"]) != 0 {
		t.Fatalf("default render: %d DaemonSet, %d Service, %d ServiceMonitor, %d PrometheusRule",
			len(objs["DaemonSet"]), len(objs["Service"]), len(objs["ServiceMonitor"]), len(objs["PrometheusRule"]))
	}
	ds := objs["DaemonSet"][0]
	spec, pspec := at(ds, "spec", "template", "spec"), at(plain, "spec", "template", "spec")
	for _, k := range []string{"hostNetwork", "hostPID", "dnsPolicy", "priorityClassName", "tolerations"} {
		if !reflect.DeepEqual(at(spec, k), at(pspec, k)) {
			t.Errorf("%s: chart %v, plain %v", k, at(spec, k), at(pspec, k))
		}
	}
	c, pc := at(spec, "containers", 0), at(pspec, "containers", 0)
	for _, k := range []string{"securityContext", "readinessProbe", "ports", "env"} {
		if !reflect.DeepEqual(at(c, k), at(pc, k)) {
			t.Errorf("container %s: chart %v, plain %v", k, at(c, k), at(pc, k))
		}
	}
	if got := at(c, "securityContext", "capabilities", "add"); !reflect.DeepEqual(got, []any{"SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"}) {
		t.Errorf("capabilities added: %v", got)
	}
	if at(c, "livenessProbe") == nil {
		t.Error("no livenessProbe")
	}
	args := fmt.Sprint(at(c, "args"))
	for _, a := range []string{"serve", "--web.listen-address=:9477", "--all-netns", "--interval=15s", "--top=20", "--max-connections=64",
		"--history=/var/lib/tcpdoctor", "--history-size=256MiB", "--history-age=7d"} {
		if !strings.Contains(args, a) {
			t.Errorf("args %s: no %s", args, a)
		}
	}
	if want := "tcpdoctor:dev"; at(c, "image") != want {
		t.Errorf("image %v, want %s (the chart's appVersion)", at(c, "image"), want)
	}
	// Mounts: every volume a hostPath mounted at its own path, as the
	// plain file mounts it (read-only but the history store, the same
	// propagation), and the runtimes' paths naming pods reads read-only.
	hostPath := map[string]string{}
	for _, v := range at(spec, "volumes").([]any) {
		hostPath[fmt.Sprint(at(v, "name"))] = fmt.Sprint(at(v, "hostPath", "path"))
	}
	type mount struct {
		readOnly    any
		propagation any
	}
	mounts := func(c any) map[string]mount {
		out := map[string]mount{}
		for _, m := range at(c, "volumeMounts").([]any) {
			out[fmt.Sprint(at(m, "mountPath"))] = mount{at(m, "readOnly"), at(m, "mountPropagation")}
		}
		return out
	}
	mounted, plainMounted := mounts(c), mounts(pc)
	for _, m := range at(c, "volumeMounts").([]any) {
		if name, path := fmt.Sprint(at(m, "name")), fmt.Sprint(at(m, "mountPath")); hostPath[name] != path {
			t.Errorf("mount %s at %s: hostPath %q", name, path, hostPath[name])
		}
	}
	for p, m := range plainMounted {
		if got, ok := mounted[p]; !ok || got != m {
			t.Errorf("the plain DaemonSet mounts %s %+v, the chart %+v (mounted %v)", p, m, got, ok)
		}
	}
	for p := range mounted {
		if _, ok := plainMounted[p]; !ok {
			t.Errorf("the chart mounts %s, the plain DaemonSet does not", p)
		}
	}
	for _, p := range []string{"/run/netns", "/run/containerd/io.containerd.runtime.v2.task", "/run/containerd/runc",
		"/var/lib/docker/containers", "/var/lib/containers/storage/overlay-containers"} {
		if mounted[p].readOnly != true {
			t.Errorf("%s not mounted read-only: %+v", p, mounted[p])
		}
	}
	if _, ok := mounted["/run/containerd"]; ok {
		t.Error("/run/containerd mounted whole: it holds containerd's API socket")
	}
	if got := at(c, "resources", "limits", "memory"); got != at(pc, "resources", "limits", "memory") {
		t.Errorf("memory limit %v", got)
	}

	// Values: one named namespace, another image, web config; the
	// operator's objects.
	objs = render(t, h, chartDir, "namespaces.all=false", "namespaces.netns=blue", "image.repository=registry.example/tcpdoctor",
		"image.tag=v9", "interval=30s", "webConfigSecret=tcpdoctor-web", "serviceMonitor.enabled=true", "prometheusRule.enabled=true",
		"resources.limits.memory=512Mi")
	c = at(objs["DaemonSet"][0], "spec", "template", "spec", "containers", 0)
	args = fmt.Sprint(at(c, "args"))
	for _, a := range []string{"--netns=blue", "--interval=30s", "--web.config.file=/etc/tcpdoctor/web.yml"} {
		if !strings.Contains(args, a) {
			t.Errorf("args %s: no %s", args, a)
		}
	}
	if strings.Contains(args, "--all-netns") || at(c, "image") != "registry.example/tcpdoctor:v9" || at(c, "resources", "limits", "memory") != "512Mi" {
		t.Errorf("values not applied: args %s image %v resources %v", args, at(c, "image"), at(c, "resources"))
	}
	if at(c, "readinessProbe", "tcpSocket") == nil {
		t.Errorf("with a web config the probe cannot GET /metrics without credentials: %v", at(c, "readinessProbe"))
	}
	if len(objs["ServiceMonitor"]) != 1 || len(objs["PrometheusRule"]) != 1 {
		t.Fatalf("%d ServiceMonitor, %d PrometheusRule", len(objs["ServiceMonitor"]), len(objs["PrometheusRule"]))
	}
	sm := objs["ServiceMonitor"][0]
	if !reflect.DeepEqual(at(sm, "spec", "selector", "matchLabels"), at(objs["Service"][0], "spec", "selector")) ||
		at(sm, "spec", "endpoints", 0, "port") != "metrics" {
		t.Errorf("ServiceMonitor does not select the Service's port: %v", at(sm, "spec"))
	}
	alerts := readYAML(t, "../../deploy/prometheus/tcpdoctor-alerts.yml")[0]
	rule := objs["PrometheusRule"][0]
	if !reflect.DeepEqual(at(rule, "spec", "groups"), alerts["groups"]) {
		t.Error("PrometheusRule groups differ from deploy/prometheus/tcpdoctor-alerts.yml")
	}
	var n int
	for _, g := range at(rule, "spec", "groups").([]any) {
		n += len(at(g, "rules").([]any))
	}
	t.Logf("chart renders the DaemonSet with %d mounts; PrometheusRule with %d alerts", len(mounted), n)
	if n == 0 || len(mounted) == 0 {
		t.Error("nothing rendered")
	}
	// The evidence pages: on by default with history, on the Service's
	// port; an external URL for their links; off on request.
	for _, tc := range []struct {
		set      []string
		want     []string
		wantNone []string
	}{
		{nil, []string{"--history=/var/lib/tcpdoctor"}, []string{"--history-pages", "--web.external-url"}},
		{[]string{"history.externalURL=https://proxy.example/tcpdoctor/node-1"}, []string{"--web.external-url=https://proxy.example/tcpdoctor/node-1"}, []string{"--history-pages"}},
		{[]string{"history.pages=false", "history.externalURL=https://x.example"}, []string{"--history-pages=false"}, []string{"--web.external-url"}},
		{[]string{"history.enabled=false"}, nil, []string{"--history", "--web.external-url"}},
	} {
		objs := render(t, h, chartDir, tc.set...)
		args := fmt.Sprint(at(objs["DaemonSet"][0], "spec", "template", "spec", "containers", 0, "args"))
		for _, a := range tc.want {
			if !strings.Contains(args, a) {
				t.Errorf("%v: args %s: no %s", tc.set, args, a)
			}
		}
		for _, a := range tc.wantNone {
			if strings.Contains(args, a) {
				t.Errorf("%v: args %s: %s", tc.set, args, a)
			}
		}
		if at(objs["Service"][0], "spec", "ports", 0, "targetPort") != "metrics" {
			t.Errorf("%v: the Service does not expose the metrics port that serves /history", tc.set)
		}
	}
	// Both ways of choosing namespaces at once is refused.
	if out, err := exec.Command(h, "template", "x", chartDir, "--set", "namespaces.netns=blue").CombinedOutput(); err == nil || !strings.Contains(string(out), "not both") {
		t.Errorf("namespaces.all and netns together: %v\n%s", err, out)
	}
}
