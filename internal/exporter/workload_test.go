// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"encoding/json"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// The pod of the workload tests, as internal/containers resolves a
// Kubernetes pod's sandbox and its application container.
func sandboxOf() *snapshot.Workload {
	return &snapshot.Workload{Runtime: "containerd", ID: "5b1f0c2d9e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c", Pod: "web-1", PodNamespace: "shop", PodUID: "3b0a4b0e", Sandbox: true}
}

func appOf() *snapshot.Workload {
	return &snapshot.Workload{Runtime: "containerd", ID: "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0", Container: "api", Image: "registry.example/shop/api:1.4", Pod: "web-1", PodNamespace: "shop", PodUID: "3b0a4b0e"}
}

// inPod is the recorded pair as if its namespace were pod shop/web-1's
// (named by the pod, as the Finder names it) and, when app, its one
// process were the pod's container "api".
func inPod(t *testing.T, app bool) []*snapshot.Snapshot {
	t.Helper()
	snaps := readPair(t)
	for _, s := range snaps {
		s.Netns.Name, s.Netns.Workload = "shop/web-1", sandboxOf()
		if len(s.Procs) == 0 {
			t.Fatal("the recorded pair has no process")
		}
		for _, p := range s.Procs {
			if app {
				p.Workload = appOf()
			}
		}
	}
	return snaps
}

// gatherSeries returns every series of x after the pair: family name
// and label pairs.
func gatherSeries(t *testing.T, snaps []*snapshot.Snapshot, rs []diag.Rule) []*dto.MetricFamily {
	t.Helper()
	x := NewTested(rs, Options{Clock: fixedClock})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(x)
	x.Update(snaps[:1], 0)
	x.Update(snaps[1:], 0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return mfs
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestWorkloadLabels: in a pod's namespace every series with a netns
// label names the pod and its Kubernetes namespace; the findings and the
// listeners, keyed by a process, name its container too; the series are
// the same ones as without workloads, only labelled more.
func TestWorkloadLabels(t *testing.T) {
	boom := diag.Rule{ID: "boom", Check: func(in *diag.Input) ([]diag.Finding, error) { panic("bad rule") }}
	rs := append(goldenRules(t), boom)
	mfs := gatherSeries(t, inPod(t, true), rs)
	byProcess := map[string]bool{"tcpdoctor_finding": true, "tcpdoctor_accept_queue_length": true, "tcpdoctor_accept_queue_max_length": true,
		"tcpdoctor_listener_connections": true, "tcpdoctor_app_connection_limit": true, "tcpdoctor_app_connections": true}
	seen := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := labelMap(m)
			if _, ok := l["netns"]; !ok {
				if _, ok := l["pod"]; ok {
					t.Errorf("%s has a pod label but no netns", mf.GetName())
				}
				continue
			}
			seen[mf.GetName()]++
			if l["netns"] != "shop/web-1" || l["pod"] != "web-1" || l["namespace"] != "shop" {
				t.Errorf("%s%v: want netns shop/web-1, pod web-1, namespace shop", mf.GetName(), l)
			}
			want := ""
			if byProcess[mf.GetName()] {
				want = "api"
			}
			if l["container"] != want {
				t.Errorf("%s%v: container %q, want %q (a process's series name its container, a namespace's the sandbox's none)", mf.GetName(), l, l["container"], want)
			}
		}
	}
	for _, name := range []string{"tcpdoctor_finding", "tcpdoctor_accept_queue_length", "tcpdoctor_rule_unknown",
		"tcpdoctor_tcpext_listen_overflows_total", "tcpdoctor_sockets", "tcpdoctor_source_up", "tcpdoctor_ephemeral_ports_in_use",
		"tcpdoctor_connections_by_limiter", "tcpdoctor_window_seconds"} {
		if seen[name] == 0 {
			t.Errorf("no %s series in the pod's namespace", name)
		}
	}

	// The same pair without workloads has exactly the same series, by
	// every label but the new ones: the labels add no series.
	plain := gatherSeries(t, readPair(t), rs)
	key := func(mfs []*dto.MetricFamily, named bool) map[string]bool {
		out := map[string]bool{}
		for _, mf := range mfs {
			if strings.HasPrefix(mf.GetName(), "tcpdoctor_") && strings.Contains(mf.GetName(), "duration") {
				continue // timings differ from run to run
			}
			for _, m := range mf.GetMetric() {
				l := labelMap(m)
				if named && l["netns"] != "" {
					l["netns"] = "golden"
				}
				delete(l, "pod")
				delete(l, "namespace")
				delete(l, "container")
				k := mf.GetName()
				for _, n := range []string{"rule", "severity", "local", "remote", "pid", "command", "netns", "state", "source", "src", "dst", "limiter", "port"} {
					k += "," + n + "=" + l[n]
				}
				out[k] = true
			}
		}
		return out
	}
	a, b := key(plain, false), key(mfs, true)
	if len(a) != len(b) {
		t.Errorf("%d series without workloads, %d with", len(a), len(b))
	}
	for k := range a {
		if !b[k] {
			t.Errorf("series %s lost with workloads", k)
		}
	}
}

// TestWorkloadLabelsNamespaceOnly: a process the resolver could not name
// (its container exited mid-read, say) leaves its findings with the
// namespace's pod and no container, not without a pod.
func TestWorkloadLabelsNamespaceOnly(t *testing.T) {
	mfs := gatherSeries(t, inPod(t, false), goldenRules(t))
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != "tcpdoctor_finding" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n++
			if l := labelMap(m); l["pod"] != "web-1" || l["namespace"] != "shop" || l["container"] != "" {
				t.Errorf("finding %v: want pod web-1, namespace shop, no container", l)
			}
		}
	}
	if n == 0 {
		t.Fatal("no findings")
	}
}

// TestWorkloadLabelsContainer: a plain container's own namespace (Docker,
// no pod) names the container on every series and no pod.
func TestWorkloadLabelsContainer(t *testing.T) {
	snaps := readPair(t)
	for _, s := range snaps {
		s.Netns.Name = "web"
		s.Netns.Workload = &snapshot.Workload{Runtime: "docker", ID: "0123456789abcdef0123456789abcdef", Container: "web"}
	}
	for _, mf := range gatherSeries(t, snaps, goldenRules(t)) {
		for _, m := range mf.GetMetric() {
			l := labelMap(m)
			if _, ok := l["netns"]; ok && (l["container"] != "web" || l["pod"] != "" || l["namespace"] != "") {
				t.Errorf("%s%v: want container web and no pod", mf.GetName(), l)
			}
		}
	}
}

// TestFindingLabels: a finding's labels come from its typed subject,
// named as descs.go declares them, with the values check --json writes
// of the same subject (the pod's namespace is the label "namespace",
// JSON's "pod_namespace").
func TestFindingLabels(t *testing.T) {
	names := subjectLabels("rule", "severity", "local", "remote", "pid", "command", "peer_pod", "peer_namespace")
	f := diag.Finding{Rule: "rwnd-limited", Severity: diag.Warning, Subject: diag.Subject{Netns: "shop/web-1", Workload: appOf(),
		Local: diag.At(netip.MustParseAddrPort("[2001:db8::1]:8080")), Remote: diag.Host(netip.MustParseAddr("2001:db8::50")), Pid: 7, Command: "api-server",
		Peer: &diag.Peer{Netns: "cni-9", Workload: &snapshot.Workload{Runtime: "containerd", ID: "c0ffee", Container: "db", Pod: "db-0", PodNamespace: "data"}}}}
	got := findingLabels(&f)
	if len(got) != len(names) {
		t.Fatalf("%d values for %d labels: %q", len(got), len(names), got)
	}
	labels := map[string]string{}
	for i, n := range names {
		labels[n] = got[i]
	}
	want := map[string]string{"netns": "shop/web-1", "pod": "web-1", "namespace": "shop", "container": "api", "rule": "rwnd-limited", "severity": "warning",
		"local": "[2001:db8::1]:8080", "remote": "2001:db8::50", "pid": "7", "command": "api-server", "peer_pod": "db-0", "peer_namespace": "data"}
	if !maps.Equal(labels, want) {
		t.Errorf("labels %v\nwant %v", labels, want)
	}
	b, err := json.Marshal(f.Subject)
	if err != nil {
		t.Fatal(err)
	}
	var js map[string]any
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	peer := js["peer"].(map[string]any)
	for label, member := range map[string]any{"netns": js["netns"], "pod": js["pod"], "namespace": js["pod_namespace"], "container": js["container"],
		"local": js["local"], "remote": js["remote"], "command": js["command"], "peer_pod": peer["pod"], "peer_namespace": peer["pod_namespace"]} {
		if labels[label] != member {
			t.Errorf("label %s %q, JSON %v", label, labels[label], member)
		}
	}
	// Outside anything known: empty, which Prometheus stores as absent.
	plain := findingLabels(&diag.Finding{Rule: "r", Severity: diag.Info, Subject: diag.Subject{Netns: "host"}})
	if plain[1] != "" || plain[2] != "" || plain[3] != "" || plain[len(plain)-2] != "" || plain[len(plain)-1] != "" {
		t.Errorf("plain host: %q", plain)
	}
}
