// SPDX-License-Identifier: Apache-2.0

package exporter_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tcpdoctor/tcpdoctor/internal/exporter"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

type promTarget struct {
	Labels    map[string]string `json:"labels"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
}

// TestPrometheusTLSBasicAuth: a real Prometheus (the Debian package)
// scrapes `tcpdoctor serve --web.config.file` over TLS with basic auth:
// the job with the right password is up and has tcpdoctor_build_info,
// the job with a wrong one is down with the server's 401.
func TestPrometheusTLSBasicAuth(t *testing.T) {
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Skip("prometheus not installed (Debian package prometheus)")
	}
	cfg, _ := exporter.TestWebConfig(t, "prom", "s3cret")
	certFile := filepath.Join(filepath.Dir(cfg), "cert.pem")
	addr := startServe(t, "--web.config.file", cfg, "--interval", "1s", "--bpf", "off", "--no-owners")
	job := func(name, password string) string {
		return fmt.Sprintf(`  - job_name: %s
    scheme: https
    tls_config:
      ca_file: %q
    basic_auth:
      username: prom
      password: %q
    static_configs:
      - targets: [%q]
`, name, certFile, password, addr)
	}
	base := startPrometheusJobs(t, job("right", "s3cret")+job("wrong", "not-it"))
	start := time.Now()
	for {
		var r struct {
			Data struct {
				ActiveTargets []promTarget `json:"activeTargets"`
			} `json:"data"`
		}
		if err := json.Unmarshal(get(t, base+"/api/v1/targets"), &r); err != nil {
			t.Fatal(err)
		}
		health := map[string]promTarget{}
		for _, tg := range r.Data.ActiveTargets {
			health[tg.Labels["job"]] = tg
		}
		right, wrong := health["right"], health["wrong"]
		if right.Health == "up" && wrong.Health == "down" && querySeries(t, base, `tcpdoctor_build_info{job="right"}`) == 1 {
			if !strings.Contains(wrong.LastError, "401") {
				t.Errorf("wrong password: down with %q, want the server's 401", wrong.LastError)
			}
			t.Logf("right: up; wrong: %s (%.1fs after start)", wrong.LastError, time.Since(start).Seconds())
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("after 30 s: right %+v, wrong %+v", right, wrong)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if n := querySeries(t, base, `tcpdoctor_build_info{job="wrong"}`); n != 0 {
		t.Errorf("the wrong password's job has %d build_info series", n)
	}
}

// TestServeCost: with the kernel's BPF statistics on (the test holds
// them on the way an operator's tool does, through BPF_ENABLE_STATS, for
// its own duration), serve --bpf on exports its programs' runs and run
// time, and the collection's cost families are there.
func TestServeCost(t *testing.T) {
	testns.NeedRoot(t)
	stats, err := ebpf.EnableStats(0) // BPF_STATS_RUN_TIME
	if err != nil {
		t.Skipf("the kernel's BPF run-time statistics: %v", err)
	}
	defer stats.Close()
	ns := testns.New(t, "cost")
	addr := startServe(t, "--netns", ns.Name, "--interval", "1s", "--bpf", "on")
	_, closeAll := overflowListener(t, ns, 20)
	defer closeAll()
	runs := `tcpdoctor_bpf_program_runs_total{program="inet_sock_set_state"} `
	start := time.Now()
	var scrape []byte
	for {
		scrape = get(t, "http://"+addr+"/metrics")
		if v, ok := sampleValue(scrape, runs); ok && v > 0 && hasSeries(scrape, "tcpdoctor_collection_sockets{", `netns="`+ns.Name+`"`) {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("no runs of inet_sock_set_state after 15 s:\n%s", grepLines(scrape, "tcpdoctor_bpf_"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	// The setting shows only its own state, not a holder's: 0 here unless
	// the host's operator turned it on.
	if !bytes.Contains(scrape, []byte("tcpdoctor_bpf_stats_enabled ")) {
		t.Error("scrape has no tcpdoctor_bpf_stats_enabled")
	}
	if v, ok := sampleValue(scrape, `tcpdoctor_bpf_program_run_seconds_total{program="inet_sock_set_state"} `); !ok || v <= 0 {
		t.Errorf("inet_sock_set_state run time %v (%v), want > 0", v, ok)
	}
	for _, want := range [][]string{{"tcpdoctor_bpf_events_lost_total "}, {"tcpdoctor_source_duration_seconds{", `netns="` + ns.Name + `"`, `source="sockdiag"`},
		{"tcpdoctor_collection_sockets{", `netns="` + ns.Name + `"`}, {"tcpdoctor_build_info{"}} {
		if !hasSeries(scrape, want[0], want[1:]...) {
			t.Errorf("scrape has no %v", want)
		}
	}
	n, _ := sampleValue(scrape, runs)
	secs, _ := sampleValue(scrape, `tcpdoctor_bpf_program_run_seconds_total{program="inet_sock_set_state"} `)
	t.Logf("inet_sock_set_state: %.0f runs in %.1f µs, %.0f ns a run", n, secs*1e6, secs*1e9/n)
}

// hasSeries says whether a sample line starts with prefix and holds every
// label pair in labels.
func hasSeries(scrape []byte, prefix string, labels ...string) bool {
	for _, l := range strings.Split(string(scrape), "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		all := true
		for _, lb := range labels {
			all = all && strings.Contains(l, lb)
		}
		if all {
			return true
		}
	}
	return false
}

// sampleValue is the value of the first sample line starting with prefix.
func sampleValue(scrape []byte, prefix string) (float64, bool) {
	for _, l := range strings.Split(string(scrape), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}
