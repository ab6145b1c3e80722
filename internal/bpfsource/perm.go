// SPDX-License-Identifier: Apache-2.0

package bpfsource

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/capability"
)

// needRoot says what loading the programs takes.
const needRoot = "eBPF needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN)"

// memlockGuess is what cilium/ebpf appends to every EPERM from creating
// a map or loading a program, whatever its cause: permissionCause says
// the cause instead.
const memlockGuess = " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)"

// privileged reports whether this thread may load tracing programs:
// CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON, in its effective set (uid
// 0 alone is not enough: its capabilities may have been dropped).
func privileged() bool { return canLoad(capability.Have) }

func canLoad(have func(uint) bool) bool {
	return have(unix.CAP_SYS_ADMIN) || have(unix.CAP_BPF) && have(unix.CAP_PERFMON)
}

// permissionCause says why the kernel refused a load with EPERM. have
// reports whether this process holds a capability; memlock returns
// RLIMIT_MEMLOCK when it can be the cause (see memlockLimit).
func permissionCause(have func(uint) bool, memlock func() (uint64, bool)) string {
	if !canLoad(have) {
		return needRoot
	}
	if lim, ok := memlock(); ok {
		return fmt.Sprintf("RLIMIT_MEMLOCK is %d bytes and this kernel (before 5.11) charges BPF maps and programs to it: raise it", lim)
	}
	return "the platform refused it though this process holds the capabilities: a security module (LSM), kernel lockdown, " +
		"or capabilities held only in a user namespace, where kernel.unprivileged_bpf_disabled applies"
}

// refused is loadError's message for an EPERM: the cause, then the
// error without cilium/ebpf's memlock guess.
func refused(err error) error {
	return notSupported("the kernel refused the program: %s: %s", permissionCause(capability.Have, memlockLimit), strings.ReplaceAll(err.Error(), memlockGuess, ""))
}

// memlockLimit returns RLIMIT_MEMLOCK when it can be why a load was
// refused: kernels before 5.11 charge BPF memory to it, later ones to the
// memory cgroup. ok is false on those, or when it is unlimited.
func memlockLimit() (limit uint64, ok bool) {
	var u unix.Utsname
	if unix.Uname(&u) != nil || !releaseBefore(unix.ByteSliceToString(u.Release[:]), 5, 11) {
		return 0, false
	}
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) != nil || lim.Cur == unix.RLIM_INFINITY {
		return 0, false
	}
	return lim.Cur, true
}

// releaseBefore reports whether kernel release r ("6.18.0-foo") is older
// than major.minor; false when r does not parse.
func releaseBefore(r string, major, minor int) bool {
	parts := strings.SplitN(r, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(c rune) bool { return c < '0' || c > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma < major || ma == major && mi < minor
}
