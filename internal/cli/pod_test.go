// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testpod"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// podListener, set in the environment to a network namespace file, makes
// this test binary the pod's server: named api-server, it listens in that
// namespace on podPort with a backlog of 2 (or podBacklog) and never accepts, until its
// stdin closes.
const podListener = "TCPDOCTOR_TEST_POD_LISTENER"

// podBacklog, set in the environment, is the listener's backlog (2 if
// unset).
const podBacklog = "TCPDOCTOR_TEST_POD_BACKLOG"

const podPort = 8080

// init plays the pod's server on the main thread, whose comm is the
// process's.
func init() {
	path := os.Getenv(podListener)
	if path == "" {
		return
	}
	runtime.LockOSThread()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "pod listener:", err)
		os.Exit(1)
	}
	name, _ := unix.BytePtrFromString("api-server")
	if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0); err != nil {
		fail(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		fail(err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		fail(err)
	}
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		err = unix.Bind(s, &unix.SockaddrInet4{Port: podPort})
	}
	if err == nil {
		backlog := 2
		if b, err := strconv.Atoi(os.Getenv(podBacklog)); err == nil {
			backlog = b
		}
		err = unix.Listen(s, backlog)
	}
	if err != nil {
		fail(err)
	}
	fmt.Println(podPort)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// podRun runs tcpdoctor in-process with a resolver of the pod's runtime;
// during its first wait between samples it calls during.
func podRun(t *testing.T, p *testpod.Pod, during func(), args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := podEnv(p, &out, &errb)
	e.Sleep = func(ctx context.Context, d time.Duration) error {
		if during != nil {
			during()
			during = nil
		}
		return window.Sleep(ctx, d)
	}
	code := Main(args, e)
	return code, out.String(), errb.String()
}

// flood opens n connections to the pod's server from inside the pod,
// more than its accept queue holds; they are closed when the test ends.
func flood(t *testing.T, ns netns.NS, n int) {
	t.Helper()
	var fds []int
	t.Cleanup(func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	})
	err := netns.Do(ns, func() error {
		for range n {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			err = unix.Connect(fd, &unix.SockaddrInet4{Port: podPort, Addr: [4]byte{127, 0, 0, 1}})
			if err != nil && err != unix.EINPROGRESS {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("flood: %v", err)
	}
}

// podServer starts the pod's server (podListener) with backlog, joined to
// the pod's container api, and returns its pid.
func podServer(t *testing.T, p *testpod.Pod, backlog int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), podListener+"="+p.Netns, podBacklog+"="+strconv.Itoa(backlog))
	cmd.Stderr = os.Stderr
	if line, err := testns.Child(t, cmd); err != nil || line != strconv.Itoa(podPort) {
		t.Fatalf("the pod's server said %q, %v", line, err)
	}
	p.Join(t, cmd.Process.Pid)
	return cmd.Process.Pid
}

// TestPodNamedEverywhere runs a real pod (private containerd + runc) whose
// container api holds a listener that never accepts, overflows it from
// inside the pod, and checks that check (text and JSON), sockets (table
// and JSON), --netns by the pod's name and a recording replayed without
// the runtime all name pod shop/web-1 and container api.
func TestPodNamedEverywhere(t *testing.T) {
	p := testpod.Start(t)
	pid := podServer(t, p, 2)
	rec := filepath.Join(t.TempDir(), "pod.jsonl")
	overflow := func() {
		flood(t, p.NS(), 40)
		time.Sleep(300 * time.Millisecond) // the SYNs retried into the full queue
	}

	// check --json over every namespace: the overflow's subject.
	code, out, stderr := podRun(t, p, overflow, "check", "--all-netns", "--bpf", "off", "--interval", "1s", "--json")
	if code != ExitFindings {
		t.Fatalf("check: exit %d, want %d\n%s\n%s", code, ExitFindings, out, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Findings {
		if f.Rule != "listen-overflow" || f.Subject.Pid != pid && f.Subject.Netns != "shop/web-1" {
			continue // another namespace's (a busy host)
		}
		found = true
		s := f.Subject
		if s.Netns != "shop/web-1" || s.Workload.PodName() != testpod.Namespace+"/"+testpod.Name || s.Workload.ContainerName() != testpod.App ||
			s.Pid != pid || s.Command != "api-server" {
			t.Errorf("listen-overflow subject %+v; want netns shop/web-1, pod web-1 in shop, container api, api-server pid %d", s, pid)
		}
	}
	if !found {
		t.Fatalf("no listen-overflow finding:\n%s", out)
	}
	for _, key := range []string{`"pod": "web-1"`, `"pod_namespace": "shop"`, `"container": "api"`} {
		if !strings.Contains(out, key) {
			t.Errorf("check --json lacks %s", key)
		}
	}

	// check's text, in the pod's namespace by its name; and a recording.
	code, out, stderr = podRun(t, p, overflow, "check", "--netns", "shop/web-1", "--bpf", "off", "--interval", "1s")
	t.Logf("check --netns shop/web-1:\n%s", out)
	if code != ExitFindings || !strings.Contains(out, " listen-overflow  0.0.0.0:8080 (api-server pid "+strconv.Itoa(pid)+") pod shop/web-1 container api\n") {
		t.Errorf("check --netns shop/web-1: exit %d\n%s\n%s", code, out, stderr)
	}
	if code, _, stderr := podRun(t, p, nil, "record", "--netns", "shop/web-1", "--bpf", "off", "--interval", "1s", "--count", "2", "-o", rec); code != ExitOK {
		t.Fatalf("record: exit %d: %s", code, stderr)
	}

	// sockets: the Workload column and the JSON members.
	code, out, stderr = podRun(t, p, nil, "sockets", "--netns", "shop/web-1", "--state", "listen", "--bpf", "off")
	t.Logf("sockets --netns shop/web-1:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != ExitOK || len(lines) != 2 || !strings.HasSuffix(lines[0], " Workload") ||
		!strings.HasSuffix(lines[1], "api-server/"+strconv.Itoa(pid)+" shop/web-1 api") {
		t.Errorf("sockets: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = podRun(t, p, nil, "sockets", "--netns", "shop/web-1", "--state", "listen", "--bpf", "off", "--json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); code != ExitOK || err != nil || len(rows) != 1 ||
		rows[0]["pod"] != "web-1" || rows[0]["pod_namespace"] != "shop" || rows[0]["container"] != "api" || rows[0]["netns"] != "shop/web-1" {
		t.Errorf("sockets --json: exit %d, %v\n%s", code, err, out)
	}

	// The recording names them with no runtime to ask.
	code, out, stderr = run(t, "sockets", "--from", rec, "--state", "listen")
	if code != ExitOK || !strings.Contains(out, "shop/web-1 api") {
		t.Errorf("sockets --from: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = run(t, "check", "--from", rec, "--json")
	if !strings.Contains(out, `"container": "api"`) || !strings.Contains(out, `"netns": "shop/web-1"`) {
		t.Errorf("check --from: exit %d\n%s", code, out)
	}
}

// TestPodFixInPodSpec: a listener in a real pod held back by the pod's
// own net.core.somaxconn (set low in the pod's namespace, which the test
// made) gets the fix as the pod spec's securityContext.sysctls, marked
// unsafe with the kubelet flag it needs, not as a host sysctl -w.
func TestPodFixInPodSpec(t *testing.T) {
	p := testpod.Start(t)
	testns.Run(t, "nsenter", "--net="+p.Netns, "sysctl", "-qw", "net.core.somaxconn=2")
	podServer(t, p, 128)
	code, out, stderr := podRun(t, p, func() {
		flood(t, p.NS(), 40)
		time.Sleep(300 * time.Millisecond)
	}, "check", "--netns", "shop/web-1", "--bpf", "off", "--interval", "1s", "--json")
	if code != ExitFindings {
		t.Fatalf("check: exit %d\n%s\n%s", code, out, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	var yaml []string
	for _, f := range rep.Findings {
		for _, fx := range f.Fixes {
			if f.Rule == "listen-overflow" && fx.Pod != nil {
				yaml = append(yaml, fx.Pod.YAML+" "+fx.Pod.Kubelet)
				if strings.Contains(fx.Command, "sysctl -w") {
					t.Errorf("a fix in the pod still says %q", fx.Command)
				}
			}
		}
	}
	all := strings.Join(yaml, "\n")
	code, text, _ := podRun(t, p, func() {
		flood(t, p.NS(), 40)
		time.Sleep(300 * time.Millisecond)
	}, "check", "--netns", "shop/web-1", "--bpf", "off", "--interval", "1s")
	t.Logf("check --netns shop/web-1 (exit %d):\n%s", code, text)
	if !strings.Contains(text, "securityContext:") {
		t.Errorf("check's text lacks the pod spec")
	}
	for _, want := range []string{"securityContext:", "net.core.somaxconn", "--allowed-unsafe-sysctls=net.core.somaxconn"} {
		if !strings.Contains(all, want) {
			t.Errorf("the pod's fixes lack %q:\n%s\n(report:\n%s)", want, all, out)
		}
	}
}
