// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/containers"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testpod"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// podReceiver, set in the environment to an address, makes this test
// binary (started inside the pod's namespace) a receiver pinned at
// SO_RCVBUF 2048: it listens on the address, says its port, accepts one
// connection and reads it as fast as data comes until its stdin closes.
const podReceiver = "TCPDOCTOR_TEST_POD_RECEIVER"

func init() {
	addr := os.Getenv(podReceiver)
	if addr == "" {
		return
	}
	runtime.LockOSThread()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "pod receiver:", err)
		os.Exit(1)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		fail(err)
	}
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, 2048)
	}
	if err == nil {
		err = unix.Bind(s, &unix.SockaddrInet4{Addr: a.As4()})
	}
	if err == nil {
		err = unix.Listen(s, 4)
	}
	var sa unix.Sockaddr
	if err == nil {
		sa, err = unix.Getsockname(s)
	}
	if err != nil {
		fail(err)
	}
	fmt.Println(sa.(*unix.SockaddrInet4).Port)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	c, _, err := unix.Accept(s)
	if err != nil {
		fail(err)
	}
	buf := make([]byte, 256<<10)
	for {
		if n, err := unix.Read(c, buf); err != nil || n == 0 {
			os.Exit(0)
		}
	}
}

// TestBothEndsPod: the receiver is a process of a real pod's container
// (testpod: private containerd and runc, pod shop/web-1, container api),
// pinned at SO_RCVBUF 2K, reached over a veth pair from a sender in a
// namespace of internal/testkit/testns. Diagnosed together, the sender's
// rwnd-limited finding names the receiver's pod, container, process and
// pinned buffer.
func TestBothEndsPod(t *testing.T) {
	p := testpod.Start(t)
	a := testns.New(t, "podpeer")
	testns.Run(t, "ip", "-n", a.Name, "link", "add", "va", "type", "veth", "peer", "name", "vb")
	testns.Run(t, "ip", "-n", a.Name, "link", "set", "vb", "netns", strconv.Itoa(p.SandboxPid))
	testns.Run(t, "ip", "-n", a.Name, "addr", "add", "198.18.8.1/24", "dev", "va")
	testns.Run(t, "ip", "-n", a.Name, "link", "set", "va", "up")
	testns.Run(t, "nsenter", "--net="+p.Netns, "ip", "addr", "add", "198.18.8.2/24", "dev", "vb")
	testns.Run(t, "nsenter", "--net="+p.Netns, "ip", "link", "set", "vb", "up")

	cmd := exec.Command("nsenter", "--net="+p.Netns, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), podReceiver+"=198.18.8.2")
	cmd.Stderr = os.Stderr
	port, _, err := testns.ChildIn(t, cmd)
	if err != nil {
		t.Fatalf("the pod's receiver did not say its port: %v", err)
	}
	// nsenter execs the test binary: the pid is the receiver's.
	p.Join(t, cmd.Process.Pid)
	pn, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("port %q", port)
	}
	srv := netip.AddrPortFrom(netip.MustParseAddr("198.18.8.2"), uint16(pn))
	var c int
	In(t, a, func() error {
		var err error
		c, err = Dial(srv, nil)
		return err
	})
	Close(t, c)
	loop(t, []int{c}, writer(c))
	time.Sleep(time.Second)

	proc, state, runc, docker := p.Roots()
	col := &collect.Collector{Opts: collect.Options{Owners: true, BufLock: true,
		Workloads: containers.NewResolver(containers.Options{Roots: containers.Roots{Proc: proc, ContainerdState: state, Runc: runc, Docker: docker}})}, Now: time.Now}
	rs := rules.All()
	sleep := func(ctx context.Context, d time.Duration) error { time.Sleep(d); return nil }
	var f *diag.Finding
	for try := 1; try <= 3 && f == nil; try++ {
		ss, err := window.Sample(context.Background(), col, []netns.NS{a, p.NS()}, 2, 1500*time.Millisecond, sleep, rs)
		if err != nil {
			t.Fatal(err)
		}
		rep := report.Diagnose(window.Inputs(ss, diag.Options{}), rs)
		for i := range rep.Findings {
			x := &rep.Findings[i]
			logFinding(t, *x)
			if x.Rule == "rwnd-limited" && strings.HasPrefix(x.Subject.Local.String(), "198.18.8.1:") {
				f = x
			}
		}
	}
	if f == nil {
		t.Fatal("no rwnd-limited finding for the sender")
	}
	pe := f.Subject.Peer
	if pe == nil || pe.Workload.PodName() != testpod.Namespace+"/"+testpod.Name || pe.Workload.ContainerName() != testpod.App || pe.Pid != cmd.Process.Pid || pe.Local.String() != srv.String() {
		t.Fatalf("peer %+v, want pod %s/%s container %s pid %d at %s", pe, testpod.Namespace, testpod.Name, testpod.App, cmd.Process.Pid, srv)
	}
	if !strings.Contains(f.Summary, "in pod shop/web-1 container api") || !strings.Contains(f.Summary, "(SO_RCVBUF 2K)") {
		t.Errorf("summary does not name the pod and its pinned buffer: %s", f.Summary)
	}
}
