// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/capability"
)

func TestPermissionCause(t *testing.T) {
	only := func(caps ...uint) func(uint) bool {
		return func(c uint) bool {
			for _, h := range caps {
				if h == c {
					return true
				}
			}
			return false
		}
	}
	noLimit := func() (uint64, bool) { return 0, false }
	limit := func() (uint64, bool) { return 8 << 20, true }
	for _, c := range []struct {
		have    func(uint) bool
		memlock func() (uint64, bool)
		want    string
	}{
		{only(), noLimit, needRoot},
		{only(), limit, needRoot}, // lacking the capabilities is the cause, whatever the limit
		{only(unix.CAP_BPF), noLimit, needRoot},
		{only(unix.CAP_PERFMON), noLimit, needRoot},
		{only(unix.CAP_BPF, unix.CAP_PERFMON), noLimit, "the platform refused it"},
		{only(unix.CAP_SYS_ADMIN), noLimit, "the platform refused it"},
		{only(unix.CAP_SYS_ADMIN), limit, "RLIMIT_MEMLOCK is 8388608 bytes"},
	} {
		got := permissionCause(c.have, c.memlock)
		if !strings.HasPrefix(got, c.want) || strings.Contains(got, "rlimit.RemoveMemlock") {
			t.Errorf("permissionCause = %q, want %q...", got, c.want)
		}
	}
}

func TestReleaseBefore(t *testing.T) {
	for _, c := range []struct {
		r    string
		want bool
	}{
		{"5.10.0-28-amd64", true}, {"4.19.0", true}, {"5.11.0", false}, {"5.11", false},
		{"6.18.0-rc1", false}, {"5.4-custom", true}, {"", false}, {"x.y", false},
	} {
		if got := releaseBefore(c.r, 5, 11); got != c.want {
			t.Errorf("releaseBefore(%q, 5, 11) = %v", c.r, got)
		}
	}
}

// noCapsEnv runs TestRefusedWithoutCapabilities as the child that drops
// its capabilities.
const noCapsEnv = "BPFSOURCE_TEST_NO_CAPS"

// TestRefusedWithoutCapabilities: a process without CAP_BPF and
// CAP_SYS_ADMIN (root whose capabilities were dropped, too) is told that
// eBPF needs them, never cilium/ebpf's memlock guess. The child drops
// every capability of the thread it then loads from.
func TestRefusedWithoutCapabilities(t *testing.T) {
	if os.Getenv(noCapsEnv) != "" {
		refusedChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRefusedWithoutCapabilities$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), noCapsEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("refused: ok")) {
		t.Fatalf("child did not run its checks:\n%s", out)
	}
}

func refusedChild(t *testing.T) {
	runtime.LockOSThread() // never unlocked: the thread ends with the test
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		t.Fatalf("dropping capabilities: %v", err)
	}
	if capability.Have(unix.CAP_BPF) || capability.Have(unix.CAP_SYS_ADMIN) {
		t.Fatal("capabilities still held")
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), needRoot) || strings.Contains(err.Error(), "MEMLOCK") {
			t.Errorf("%s without capabilities: %v; want %q and no memlock guess", what, err, needRoot)
		}
	}
	_, err := Open(Options{})
	check("Open", err)
	_, err = OpenTrace(TraceOptions{})
	check("OpenTrace", err)
	_, err = OpenSockLocks(nil)
	check("OpenSockLocks", err)
	_, err = OpenFileOwners(nil)
	check("OpenFileOwners", err)
	// The kernel's own refusal, as cilium/ebpf words it, past the check
	// above.
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err == nil {
		m.Close()
		t.Log("kernel allows unprivileged maps (kernel.unprivileged_bpf_disabled=0): no EPERM to word")
	} else {
		if !errors.Is(err, unix.EPERM) {
			t.Fatalf("map create without capabilities: %v, want EPERM", err)
		}
		check("a map create's EPERM", loadError(fmt.Errorf("create map x: %w", err)))
	}
	if !t.Failed() {
		t.Log("refused: ok")
	}
}
