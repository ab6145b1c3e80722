// SPDX-License-Identifier: Apache-2.0

package livetest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// helperEnv selects a helper mode when the test binary re-executes itself.
const helperEnv = "LIVETEST_HELPER"

// TestHelperFDHolder is not a test: re-executed with LIVETEST_HELPER=fd
// inside the namespace, it lowers RLIMIT_NOFILE to 64, opens TCP sockets
// (one listening, so the collector finds the process) until 58 fds are
// open (90 %), says "ready" and waits for stdin to close.
func TestHelperFDHolder(t *testing.T) {
	if os.Getenv(helperEnv) != "fd" {
		t.Skip("helper process only")
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 64, Max: 64}); err != nil {
		fmt.Println("setrlimit:", err)
		os.Exit(1)
	}
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err == nil {
		err = unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	}
	if err == nil {
		err = unix.Listen(lfd, 16)
	}
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	for {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		if len(ents)-1 >= 58 { // ReadDir's own fd is gone when it returns; -1 for safety
			break
		}
		if _, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0); err != nil {
			fmt.Println("socket:", err)
			os.Exit(1)
		}
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}

// TestFDExhaustion: a child process at 90 % of RLIMIT_NOFILE 64.
func TestFDExhaustion(t *testing.T) {
	ns := testns.New(t, "fd")
	cmd := exec.Command("ip", "netns", "exec", ns.Name, os.Args[0], "-test.run=^TestHelperFDHolder$")
	cmd.Env = append(os.Environ(), helperEnv+"=fd")
	line, err := testns.Child(t, cmd)
	if line != "ready" {
		t.Fatalf("helper: %q %v", line, err)
	}
	// ip netns exec execs the test binary in place: same pid.
	child := cmd.Process.Pid
	r, b, _ := Sample(t, ns, time.Second, nil)
	fs := r.Find("fd-exhaustion", diag.Warning)
	var f *diag.Finding
	for i := range fs {
		if fs[i].Subject.Pid == child {
			f = &fs[i]
		}
	}
	if f == nil {
		t.Fatalf("no fd-exhaustion finding for child pid %d:\n%s", child, b)
	}
	logFinding(t, *f)
	if f.Subject.Command != "livetest.test" {
		t.Errorf("command %q, want livetest.test", f.Subject.Command)
	}
}
