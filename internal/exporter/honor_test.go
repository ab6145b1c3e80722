// SPDX-License-Identifier: Apache-2.0

package exporter_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// queryLabels returns the label sets of instant query q's result.
func queryLabels(t *testing.T, base, q string) []map[string]string {
	t.Helper()
	var r struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(get(t, base+"/api/v1/query?query="+url.QueryEscape(q)), &r); err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, m := range r.Data.Result {
		out = append(out, m.Metric)
	}
	return out
}

// recordedPair reads testdata/pair.jsonl (a listener overflowing, among
// others) as namespace name, its process in container w when not nil.
func recordedPair(t *testing.T, name string, ns, proc *snapshot.Workload) []*snapshot.Snapshot {
	t.Helper()
	f, err := os.Open("testdata/pair.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snaps, err := snapshot.ReadAll(f)
	if err != nil || len(snaps) != 2 {
		t.Fatalf("pair.jsonl: %d snapshots, %v", len(snaps), err)
	}
	for _, s := range snaps {
		s.Netns.Name, s.Netns.Workload = name, ns
		for _, p := range s.Procs {
			p.Workload = proc
		}
	}
	return snaps
}

// TestHonorLabels is what deploy/kubernetes/README.md says of scraping:
// a real Prometheus scrapes the exporter (the recorded pair in pod
// shop/web-1 and in the node's own namespace) as Kubernetes discovery
// would, with the target labelled by tcpdoctor's own pod. With
// honor_labels the exporter's pod, namespace and container are kept and
// the node's series get none; without, they become exported_* and every
// series is labelled with tcpdoctor's pod.
func TestHonorLabels(t *testing.T) {
	sandbox := &snapshot.Workload{Runtime: "containerd", ID: "5b1f0c2d9e8a", Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	app := &snapshot.Workload{Runtime: "containerd", ID: "9f8e7d6c5b4a", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	pod := recordedPair(t, "shop/web-1", sandbox, app)
	host := recordedPair(t, "host", nil, nil)
	x := exporter.NewTested(rules.All(), exporter.Options{})
	x.Update([]*snapshot.Snapshot{host[0], pod[0]}, time.Millisecond)
	x.Update([]*snapshot.Snapshot{host[1], pod[1]}, time.Millisecond)
	reg := prometheus.NewRegistry()
	reg.MustRegister(x)
	srv := httptest.NewServer(exporter.Handler(reg))
	t.Cleanup(srv.Close)
	target := strings.TrimPrefix(srv.URL, "http://")
	own := `{pod: tcpdoctor-x7k2p, namespace: tcpdoctor, container: tcpdoctor}`
	base := startPrometheusJobs(t, fmt.Sprintf(`  - job_name: honor
    honor_labels: true
    static_configs:
      - targets: [%q]
        labels: %s
  - job_name: plain
    static_configs:
      - targets: [%q]
        labels: %s
`, target, own, target, own))
	deadline := time.Now().Add(30 * time.Second)
	for len(queryLabels(t, base, `tcpdoctor_finding{rule="listen-overflow"}`)) < 4 {
		if time.Now().After(deadline) {
			t.Fatal("Prometheus has not scraped both jobs' findings in 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, c := range []struct {
		q    string
		want map[string]string
	}{
		{`tcpdoctor_finding{job="honor",netns="shop/web-1",rule="listen-overflow"}`, map[string]string{"pod": "web-1", "namespace": "shop", "container": "api"}},
		{`tcpdoctor_tcpext_listen_overflows_total{job="honor",netns="shop/web-1"}`, map[string]string{"pod": "web-1", "namespace": "shop", "container": ""}},
		{`tcpdoctor_finding{job="honor",netns="host",rule="listen-overflow"}`, map[string]string{"pod": "", "namespace": "", "container": ""}},
		{`tcpdoctor_finding{job="plain",netns="shop/web-1",rule="listen-overflow"}`, map[string]string{"pod": "tcpdoctor-x7k2p", "namespace": "tcpdoctor", "exported_pod": "web-1", "exported_namespace": "shop", "exported_container": "api"}},
		{`tcpdoctor_finding{job="plain",netns="host",rule="listen-overflow"}`, map[string]string{"pod": "tcpdoctor-x7k2p", "namespace": "tcpdoctor", "exported_pod": ""}},
	} {
		got := queryLabels(t, base, c.q)
		if len(got) == 0 {
			t.Errorf("%s: no series", c.q)
		}
		for _, l := range got {
			for k, v := range c.want {
				if l[k] != v {
					t.Errorf("%s: %s=%q, want %q (%v)", c.q, k, l[k], v, l)
				}
			}
		}
	}
}
