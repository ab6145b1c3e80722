// SPDX-License-Identifier: Apache-2.0

package exporter_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/cli"
	"github.com/tcpdoctor/tcpdoctor/internal/containers"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testpod"
)

// podListenerEnv, set in the environment, makes this test binary the
// pod's listener (podListener) instead of running the tests.
const podListenerEnv = "TCPDOCTOR_TEST_POD_LISTENER"

// podBacklog is the listener's backlog: small, so a few connects fill it.
const podBacklog = 4

func init() {
	if os.Getenv(podListenerEnv) == "" {
		return
	}
	os.Exit(podListener())
}

// podListener listens on 127.0.0.1 in the namespace it was started in
// (nsenter put it in the pod's), says its port, never accepts, and exits
// when its stdin closes.
func podListener() int {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	}
	if err == nil {
		err = unix.Listen(fd, podBacklog)
	}
	var sa unix.Sockaddr
	if err == nil {
		sa, err = unix.Getsockname(fd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pod listener:", err)
		return 1
	}
	fmt.Println(sa.(*unix.SockaddrInet4).Port)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// connectMany fires n non-blocking connects at 127.0.0.1:port from
// inside ns; the sockets are closed when the test ends.
func connectMany(t *testing.T, ns netns.NS, port, n int) {
	t.Helper()
	var fds []int
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	err := netns.Do(ns, func() error {
		for i := 0; i < n; i++ {
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				return err
			}
			mu.Lock()
			fds = append(fds, c)
			mu.Unlock()
			if err := unix.Connect(c, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}); err != nil && err != unix.EINPROGRESS {
				return fmt.Errorf("connect %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// parseScrape reads an exposition in the text format.
func parseScrape(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, b)
	}
	return mfs
}

// seriesWhere returns the label sets of family name's series that have
// every label in match.
func seriesWhere(mfs map[string]*dto.MetricFamily, name string, match map[string]string) []map[string]string {
	var out []map[string]string
	for _, m := range mfs[name].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		ok := true
		for k, v := range match {
			ok = ok && l[k] == v
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// TestServePodLabels is issue 24's exporter proof on a real pod: a
// private containerd + runc runs pod shop/web-1 (internal/testkit/testpod); a
// listener with backlog 4 that never accepts runs in the pod's network
// namespace, joined to its container "api"; `serve --netns shop/web-1`
// collects every second while connects from inside the pod overflow the
// listener. The listen-overflow finding and the listener's accept queue
// are labelled pod="web-1", namespace="shop", container="api",
// netns="shop/web-1"; the namespace's counters name the pod.
func TestServePodLabels(t *testing.T) {
	testns.NeedRoot(t)
	p := testpod.Start(t)
	cmd := exec.Command("nsenter", "--net="+p.Netns, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), podListenerEnv+"=1")
	cmd.Stderr = os.Stderr
	said, err := testns.Child(t, cmd)
	if err != nil {
		t.Fatalf("the pod's listener did not say its port: %v", err)
	}
	port, err := strconv.Atoi(said)
	if err != nil {
		t.Fatalf("the pod's listener said %q, not a port", said)
	}
	if ino, err := testpod.NetnsInode(cmd.Process.Pid); err != nil || ino != p.NetnsIno {
		t.Fatalf("the listener's namespace is %d (%v), want the pod's %d", ino, err, p.NetnsIno)
	}
	p.Join(t, cmd.Process.Pid)

	// The resolver reads this pod's containerd state only: runc's root
	// is shared by every test pod on the machine, and another engineer's
	// pod of the same name would be named shop/web-1 too.
	env := cli.DefaultEnv()
	none := filepath.Join(p.Dir, "none")
	env.Workloads = containers.NewResolver(containers.Options{Roots: containers.Roots{Proc: "/proc", ContainerdState: p.State, Runc: none, Docker: none}})
	addr := startServeEnv(t, env, "--netns", testpod.Namespace+"/"+testpod.Name, "--interval", "1s")
	metrics := "http://" + addr + "/metrics"

	// The first collection opens the window; the connects come inside
	// the next one.
	deadline := time.Now().Add(15 * time.Second)
	for {
		mfs := parseScrape(t, get(t, metrics))
		if c := mfs["tcpdoctor_collections_total"].GetMetric(); len(c) == 1 && c[0].GetCounter().GetValue() >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("serve made no collection in 15 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	connectMany(t, p.NS(), port, 50)

	local := fmt.Sprintf("127.0.0.1:%d", port)
	pod := map[string]string{"netns": "shop/web-1", "pod": testpod.Name, "namespace": testpod.Namespace}
	app := map[string]string{"netns": "shop/web-1", "pod": testpod.Name, "namespace": testpod.Namespace, "container": testpod.App, "local": local}
	var scrape []byte
	start := time.Now()
	for {
		scrape = get(t, metrics)
		mfs := parseScrape(t, scrape)
		finding := seriesWhere(mfs, "tcpdoctor_finding", map[string]string{"rule": "listen-overflow", "local": local})
		if len(finding) > 0 {
			t.Logf("finding %.1fs after the connects: %v", time.Since(start).Seconds(), finding[0])
			if got := seriesWhere(mfs, "tcpdoctor_finding", with(app, "rule", "listen-overflow", "pid", strconv.Itoa(cmd.Process.Pid))); len(got) != 1 {
				t.Errorf("listen-overflow finding labelled %v, want %v and the listener's pid", finding, app)
			}
			for _, fam := range []string{"tcpdoctor_accept_queue_length", "tcpdoctor_accept_queue_max_length"} {
				if got := seriesWhere(mfs, fam, app); len(got) != 1 {
					t.Errorf("%s: %d series labelled %v; have %v", fam, len(got), app, seriesWhere(mfs, fam, map[string]string{"local": local}))
				}
			}
			for _, fam := range []string{"tcpdoctor_tcpext_listen_overflows_total", "tcpdoctor_window_seconds", "tcpdoctor_collection_sockets"} {
				if got := seriesWhere(mfs, fam, pod); len(got) != 1 || got[0]["container"] != "" {
					t.Errorf("%s: %v, want one series labelled %v and no container (the sandbox has none)", fam, got, pod)
				}
			}
			if n := len(seriesWhere(mfs, "tcpdoctor_source_up", map[string]string{"netns": "shop/web-1"})); n == 0 || n != len(seriesWhere(mfs, "tcpdoctor_source_up", pod)) {
				t.Errorf("tcpdoctor_source_up: not every source's series names the pod:\n%s", grepLines(scrape, "tcpdoctor_source_up"))
			}
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("no listen-overflow finding for %s 30 s after the connects; scrape:\n%s", local, grepLines(scrape, "tcpdoctor_"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		c := exec.Command(promtool, "check", "metrics")
		c.Stdin = bytes.NewReader(scrape)
		if out, err := c.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
	t.Logf("%s", grepLines(scrape, `rule="listen-overflow"`))
}

// with returns m plus the pairs kv.
func with(m map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(m)+len(kv)/2)
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}
