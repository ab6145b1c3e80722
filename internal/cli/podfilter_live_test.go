// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/containers"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testpod"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// podChild, set in the environment, makes this test binary a process of
// the test pod's app container: started in the pod's namespace (by
// nsenter), it listens on loopback and prints the port, then, once a
// line comes on stdin (it has been joined to the container), narrows
// the pod's ephemeral ports to two, holds them towards 127.0.0.2:9090
// and connects again every 100 ms (each fails with EADDRNOTAVAIL: an
// event of this process for watch), at most 300 times, until stdin
// closes.
const podChild = "TCPDOCTOR_TEST_POD_CHILD"

func init() {
	if os.Getenv(podChild) == "" {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "pod child:", err)
		os.Exit(1)
	}
	if os.Getenv(podChild) == "backlog" {
		// A listener with a backlog of 2 that never accepts.
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
		if err == nil {
			err = syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
		}
		if err == nil {
			err = syscall.Listen(fd, 2)
		}
		var sa syscall.Sockaddr
		if err == nil {
			sa, err = syscall.Getsockname(fd)
		}
		if err != nil {
			fail(err)
		}
		fmt.Println(sa.(*syscall.SockaddrInet4).Port)
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(0)
	}
	go func() {
		_, _ = in.ReadString('\n') // EOF: the test is done
		os.Exit(0)
	}()
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("40000 40001"), 0o644); err != nil {
		fail(err)
	}
	dst, err := net.Listen("tcp4", "127.0.0.2:9090")
	if err != nil {
		fail(err)
	}
	defer dst.Close()
	for i := 0; i < 300; i++ {
		if c, err := net.DialTimeout("tcp4", "127.0.0.2:9090", time.Second); err == nil {
			defer c.Close() // held open: the ports stay taken
			continue
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.Exit(0)
}

// podEnv is an Env whose resolver reads the test pod's runtime state.
func podEnv(p *testpod.Pod, out, errb *bytes.Buffer) *Env {
	proc, state, runc, docker := p.Roots()
	return &Env{Stdout: out, Stderr: errb, Getenv: func(string) string { return "" }, Now: time.Now,
		Sleep: window.Sleep, ProcRoot: "/proc", BPF: bpfload.Programs(),
		Workloads: containers.NewResolver(containers.Options{Roots: containers.Roots{Proc: proc, ContainerdState: state, Runc: runc, Docker: docker}})}
}

// startPodChild starts podChild in the pod's namespace, joins it to the
// app container and returns it with its port and a function that starts
// its refused connects.
func startPodChild(t *testing.T, p *testpod.Pod, mode string) (pid int, port string, provoke func()) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+p.Netns, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), podChild+"="+mode)
	cmd.Stderr = os.Stderr
	port, stdin, err := testns.ChildIn(t, cmd)
	if err != nil {
		t.Fatalf("the pod's child did not say its port: %v", err)
	}
	p.Join(t, cmd.Process.Pid)
	return cmd.Process.Pid, port, func() { _, _ = stdin.Write([]byte("go\n")) }
}

// TestPodFiltersReal: on a real containerd + runc pod, `sockets --pod
// shop/web-1 --container api` lists the listener of the container's
// process (and nothing else), and `watch --pod shop/web-1 --container
// api` shows its failed connects named by pod and container.
func TestPodFiltersReal(t *testing.T) {
	p := testpod.Start(t)
	pid, port, provoke := startPodChild(t, p, "connect")

	var out, errb bytes.Buffer
	code := Main([]string{"sockets", "--pod", "shop/web-1", "--container", "api", "--json", "--bpf", "off"}, podEnv(p, &out, &errb))
	if code != ExitOK {
		t.Fatalf("sockets: exit %d: %s", code, errb.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("sockets: %v: %s", err, out.String())
	}
	found := false
	for _, r := range rows {
		if r["pod"] != "web-1" || r["pod_namespace"] != "shop" || r["container"] != "api" || r["netns"] != "shop/web-1" {
			t.Errorf("sockets kept a row not of shop/web-1 api: %v", r)
		}
		found = found || r["local"] == "127.0.0.1:"+port && r["pid"] == float64(pid) && r["state"] == "LISTEN"
	}
	if !found {
		t.Errorf("sockets --pod shop/web-1 --container api: no listener 127.0.0.1:%s of pid %d in:\n%s", port, pid, out.String())
	}
	// The table names the pod's namespace and the container.
	out.Reset()
	errb.Reset()
	if code := Main([]string{"sockets", "--pod", "web-1", "--bpf", "off", "--state", "listen"}, podEnv(p, &out, &errb)); code != ExitOK ||
		!strings.Contains(out.String(), "shop/web-1 api") || !strings.Contains(out.String(), "127.0.0.1:"+port) {
		t.Errorf("sockets --pod web-1: exit %d, stderr %q, out:\n%s", code, errb.String(), out.String())
	}
	// Completion names the pod, its container and its namespace.
	for flag, want := range map[string]string{"--pod": "shop/web-1", "--container": "api", "--netns": "shop/web-1"} {
		if got := completed(t, podEnv(p, &out, &errb), "sockets", flag, ""); !slices.Contains(got, want) {
			t.Errorf("__complete sockets %s: %q not in %q", flag, want, got)
		}
	}
	// A pod not there: exit 2, naming the one that is.
	out.Reset()
	errb.Reset()
	if code := Main([]string{"sockets", "--pod", "shop/web-2", "--bpf", "off"}, podEnv(p, &out, &errb)); code != ExitUsage || !strings.Contains(errb.String(), "shop/web-1 api") {
		t.Errorf("sockets --pod shop/web-2: exit %d, stderr %q", code, errb.String())
	}

	// trace records in the pod's namespace, the container's sockets.
	out.Reset()
	errb.Reset()
	if code := Main([]string{"trace", "--pod", "shop/web-1", "--container", "api", "--duration", "1s", "--rate", "10", "--bpf", "off"}, podEnv(p, &out, &errb)); code != ExitOK ||
		!strings.HasPrefix(out.String(), "traced in netns shop/web-1: container api\n") {
		t.Errorf("trace --pod shop/web-1 --container api: exit %d, stderr %q, out:\n%s", code, errb.String(), out.String())
	}

	src, err := bpfload.Programs().Events(nil)
	if err != nil {
		t.Skipf("eBPF events cannot load here: %v", err)
	}
	_ = src.Close()
	out.Reset()
	errb.Reset()
	done := make(chan int)
	e := podEnv(p, &out, &errb)
	watchArgs := []string{"--pod", "shop/web-1", "--container", "api", "--kind", "failed-connect"}
	go func() {
		done <- Main(append([]string{"watch", "--json", "--count", "2", "--duration", "20s"}, watchArgs...), e)
	}()
	time.Sleep(500 * time.Millisecond) // watch loads its program; earlier connects are missed, later ones seen
	provoke()
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not end")
	}
	if code != ExitOK {
		t.Fatalf("watch: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("watch: %d lines, want 2:\n%s\n%s", len(lines), out.String(), errb.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["pod"] != "web-1" || m["pod_namespace"] != "shop" || m["container"] != "api" || m["netns"] != "shop/web-1" ||
			m["pid"] != float64(pid) || m["remote"] != "127.0.0.2:9090" || m["reason"] != "EADDRNOTAVAIL" {
			t.Errorf("watch line %s: want a failed connect of pid %d in pod shop/web-1 container api", l, pid)
		}
	}
}

// TestRecordKeepsPodNames: `record` on a real pod whose listener
// overflows, then `check --from` on a copy of the file, by an Env with no
// resolver (no runtime to read): the finding names pod and container,
// from the names the file stored.
func TestRecordKeepsPodNames(t *testing.T) {
	p := testpod.Start(t)
	_, port, _ := startPodChild(t, p, "backlog")
	dir := t.TempDir()
	rec := filepath.Join(dir, "pod.jsonl")
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() {
		done <- Main([]string{"record", "-o", rec, "--all-netns", "--count", "2", "--interval", "2s", "--bpf", "off"}, podEnv(p, &out, &errb))
	}()
	time.Sleep(500 * time.Millisecond) // the first sample is taken
	err := netns.Do(p.NS(), func() error {
		for i := 0; i < 20; i++ { // beyond the backlog: handshakes dropped
			if c, err := net.DialTimeout("tcp4", "127.0.0.1:"+port, 50*time.Millisecond); err == nil {
				defer c.Close()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != ExitOK {
		t.Fatalf("record: exit %d: %s", code, errb.String())
	}
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	cp := writeTemp(t, "copy.jsonl", b)
	code, text, stderr := run(t, "check", "--from", cp, "--pod", "shop/web-1", "--container", "api")
	if code != ExitFindings || !strings.Contains(text, "listen-overflow  127.0.0.1:"+port) || !strings.Contains(text, "pod shop/web-1") || !strings.Contains(text, "container api") {
		t.Errorf("check --from the copy: exit %d, stderr %q, out:\n%s\nwant the overflow of 127.0.0.1:%s named by pod shop/web-1 and container api", code, stderr, text, port)
	}
}
