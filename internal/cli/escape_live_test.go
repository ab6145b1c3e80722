// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// hostileChild, set in the environment, makes this test binary the
// process TestSocketsEscapesRealComm lists.
const hostileChild = "TCPDOCTOR_TEST_HOSTILE_COMM"

// init plays the child: package init runs on the main thread, whose comm
// (set by prctl PR_SET_NAME, as any user can) is the process's. It
// listens on loopback, prints the port and holds the socket until its
// stdin closes.
func init() {
	if os.Getenv(hostileChild) == "" {
		return
	}
	name, err := unix.BytePtrFromString(hostile)
	if err == nil {
		err = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prctl:", err)
		os.Exit(1)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// TestSocketsEscapesRealComm names a real process hostile with prctl
// PR_SET_NAME, lets it listen on loopback, and runs `sockets` in-process:
// its Process cell is escaped.
func TestSocketsEscapesRealComm(t *testing.T) {
	testns.NeedRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hostileChild+"=1")
	cmd.Stderr = os.Stderr
	port, err := testns.Child(t, cmd)
	if err != nil {
		t.Fatalf("the child did not say its port: %v", err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatalf("the child said %q, not a port", port)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	comm, err := os.ReadFile("/proc/" + pid + "/comm")
	if err != nil || string(comm) != hostile+"\n" {
		t.Fatalf("the child's comm is %q (%v), want %q", comm, err, hostile)
	}

	code, out, stderr := run(t, "sockets", "--port", port, "--state", "listen", "--bpf", "off")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[1], " "+hostileEscaped+"/"+pid) {
		t.Errorf("want the header and one row ending %q, got:\n%q", hostileEscaped+"/"+pid, out)
	}
	assertEscaped(t, "sockets", out, 1)
}
