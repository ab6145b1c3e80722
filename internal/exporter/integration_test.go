// SPDX-License-Identifier: Apache-2.0

package exporter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/cli"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// startServe runs `tcpdoctor serve` in-process until the test ends and
// returns its address.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	return startServeEnv(t, cli.DefaultEnv(), args...)
}

// startServeEnv is startServe with env (its Stdout and Stderr replaced):
// the address it serves on, over HTTP or, with --web.config.file, HTTPS.
func startServeEnv(t *testing.T, env *cli.Env, args ...string) string {
	t.Helper()
	stderr := &testns.Buffer{}
	env.Stdout, env.Stderr = io.Discard, stderr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	root := cli.NewRoot(env)
	root.SetArgs(append([]string{"serve", "--web.listen-address", "127.0.0.1:0"}, args...))
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("serve did not stop")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, rest, ok := strings.Cut(stderr.String(), "serving http"); ok { // http:// or https://
			_, rest, _ = strings.Cut(rest, "://")
			addr, _, _ := strings.Cut(rest, "/")
			return addr
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("serve did not start:\n%s", stderr.String())
	return ""
}

func get(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v: %s", u, resp.Status, err, b)
	}
	return b
}

// overflowListener opens, inside ns, a listener with backlog 8 that never
// accepts and fires n non-blocking connects at it. close ends both.
func overflowListener(t *testing.T, ns netns.NS, n int) (port int, closeAll func()) {
	t.Helper()
	var fds []int
	var once sync.Once
	closeAll = func() {
		once.Do(func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
		})
	}
	t.Cleanup(closeAll)
	err := netns.Do(ns, func() error {
		l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, l)
		if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(l, 8); err != nil {
			return err
		}
		sa, err := unix.Getsockname(l)
		if err != nil {
			return err
		}
		port = sa.(*unix.SockaddrInet4).Port
		for i := 0; i < n; i++ {
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				return err
			}
			fds = append(fds, c)
			if err := unix.Connect(c, sa); err != nil && err != unix.EINPROGRESS {
				return fmt.Errorf("connect %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return port, closeAll
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startPrometheus runs the Debian package's server scraping target every
// second with the alert rules loaded; it is killed by its PID at cleanup.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	return startPrometheusJobs(t, fmt.Sprintf(`  - job_name: tcpdoctor
    static_configs:
      - targets: [%q]
`, target))
}

// startPrometheusJobs is startPrometheus with jobs as its scrape_configs.
func startPrometheusJobs(t *testing.T, jobs string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (Debian package prometheus)")
	}
	rulesFile, err := filepath.Abs("../../deploy/prometheus/tcpdoctor-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
%s`, rulesFile, jobs)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	web := freePort(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	base := "http://" + web
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("prometheus did not become ready in 20 s")
	return ""
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func alerts(t *testing.T, base string) []promAlert {
	t.Helper()
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(get(t, base+"/api/v1/alerts"), &r); err != nil {
		t.Fatal(err)
	}
	return r.Data.Alerts
}

func querySeries(t *testing.T, base, q string) int {
	t.Helper()
	var r struct {
		Data struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(get(t, base+"/api/v1/query?query="+url.QueryEscape(q)), &r); err != nil {
		t.Fatal(err)
	}
	return len(r.Data.Result)
}

// TestPrometheusAlert is the end-to-end check of issue 5: a real
// Prometheus scrapes `tcpdoctor serve`, an accept queue overflows in a
// namespace of the test's own, the TCPListenOverflow alert fires; the
// listener closes, and finding and alert go away.
func TestPrometheusAlert(t *testing.T) {
	testns.NeedRoot(t)
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Skip("prometheus not installed (Debian package prometheus)")
	}
	ns := testns.New(t, "prom")
	port, closeListener := overflowListener(t, ns, 200)
	addr := startServe(t, "--netns", ns.Name, "--interval", "1s")
	base := startPrometheus(t, addr)
	portLabel := fmt.Sprintf("127.0.0.1:%d", port)

	// promtool check metrics on a real scrape, once findings are in it.
	findingQ := fmt.Sprintf(`tcpdoctor_finding{rule="listen-overflow",netns=%q,local=%q}`, ns.Name, portLabel)
	firing := func() bool {
		for _, a := range alerts(t, base) {
			if a.Labels["alertname"] == "TCPListenOverflow" && a.Labels["netns"] == ns.Name && a.Labels["local"] == portLabel && a.State == "firing" {
				return true
			}
		}
		return false
	}
	start := time.Now()
	for !firing() {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("TCPListenOverflow not firing after 60 s; scrape:\n%s", grepLines(get(t, "http://"+addr+"/metrics"), "tcpdoctor_"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("alert firing %.1fs after start", time.Since(start).Seconds())

	scrape := get(t, "http://"+addr+"/metrics")
	if !bytes.Contains(scrape, []byte("tcpdoctor_finding{")) {
		t.Fatalf("scrape has no finding:\n%s", scrape)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(scrape)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}

	// End the condition: the finding leaves the scrape, the alert resolves.
	closeListener()
	ended := time.Now()
	for firing() || querySeries(t, base, findingQ) > 0 {
		if time.Since(ended) > 30*time.Second {
			t.Fatalf("finding or alert still there 30 s after the listener closed; scrape:\n%s", grepLines(get(t, "http://"+addr+"/metrics"), "tcpdoctor_finding"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("finding and alert gone %.1fs after the listener closed", time.Since(ended).Seconds())
	// Families keyed by listener drop it; the eBPF destination counters
	// (SYN retransmits, failed connects to that address) are about the
	// clients, which may still be trying, and expire once idle.
	var still []string
	for _, l := range strings.Split(grepLines(get(t, "http://"+addr+"/metrics"), portLabel), "\n") {
		if l != "" && !strings.HasPrefix(l, "tcpdoctor_bpf_syn_retransmits_total") && !strings.HasPrefix(l, "tcpdoctor_bpf_failed_connects_total") {
			still = append(still, l)
		}
	}
	if len(still) > 0 {
		t.Errorf("closed listener still exported:\n%s", strings.Join(still, "\n"))
	}
}

func grepLines(b []byte, sub string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServeRefusedConnects: `serve` exports a health checker's refused
// connects as ECONNREFUSED, never as EADDRNOTAVAIL (which would page
// someone about port exhaustion through TCPConnectNoFreePort).
func TestServeRefusedConnects(t *testing.T) {
	testns.NeedRoot(t)
	ns := testns.New(t, "serveref")
	stop := testns.Refusals(t, ns)
	defer stop()
	addr := startServe(t, "--netns", ns.Name, "--interval", "1s", "--bpf", "on")
	// The test's namespace holds no pod or container: those labels are empty.
	refused := fmt.Sprintf(`tcpdoctor_bpf_failed_connects_total{container="",dst=%q,errno="ECONNREFUSED",namespace="",netns=%q,pod=""}`, testns.RefusedDst, ns.Name)
	start := time.Now()
	var scrape []byte
	for {
		scrape = get(t, "http://"+addr+"/metrics")
		if bytes.Contains(scrape, []byte(refused+" ")) {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("no %s after 15 s:\n%s", refused, grepLines(scrape, "tcpdoctor_bpf_"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("%s", grepLines(scrape, "tcpdoctor_bpf_failed_connects_total"))
	if bytes.Contains(scrape, []byte(`errno="EADDRNOTAVAIL"`)) {
		t.Errorf("refused connects exported as EADDRNOTAVAIL:\n%s", grepLines(scrape, "tcpdoctor_bpf_failed_connects_total"))
	}
}
