// SPDX-License-Identifier: Apache-2.0

package procs

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// SO_BUF_LOCK bits.
const (
	BufLockSnd uint8 = 1 << 0 // SO_SNDBUF set by the application
	BufLockRcv uint8 = 1 << 1 // SO_RCVBUF set by the application
)

// ErrFDReused says the fd no longer holds the socket that was asked for:
// it was closed and its number reused since the owner scan.
var ErrFDReused = errors.New("procs: buflock: fd now holds another file")

// BufLock reads SO_BUF_LOCK of the socket behind (pid, fd) by duplicating the
// fd with pidfd_getfd (Linux >= 5.6, CAP_SYS_PTRACE over the target) and
// calling getsockopt(SOL_SOCKET, SO_BUF_LOCK) (Linux >= 5.14) on the copy.
// inode, if not 0, must be the socket's: a reused fd gives ErrFDReused.
//
// Caveat: pidfd_getfd (like SCM_RIGHTS) re-stamps the socket's cgroup v1
// net_cls class id and net_prio index with the caller's; callers must not
// probe where those controllers are in use (collect checks the mounts).
// So collect calls it only when asked (--pidfd-buflock); by default the
// bits come read-only from bpfsource.SockLocks (eBPF iter/tcp).
func BufLock(ref FDRef, inode uint32) (uint8, error) {
	where := "procs: buflock pid " + strconv.Itoa(ref.Pid) + " fd " + strconv.Itoa(ref.FD) + ": "
	if ref.Pid <= 0 || ref.FD < 0 {
		return 0, errors.New(where + "invalid pid or fd")
	}
	pidfd, err := unix.PidfdOpen(ref.Pid, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOSYS):
			return 0, errors.New(where + "pidfd_open not supported by this kernel (needs Linux >= 5.3)")
		case errors.Is(err, unix.ESRCH):
			return 0, errors.New(where + "no such process")
		}
		return 0, fmt.Errorf("%spidfd_open: %w", where, err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, ref.FD, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOSYS):
			return 0, errors.New(where + "pidfd_getfd not supported by this kernel (needs Linux >= 5.6)")
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			return 0, fmt.Errorf("%spidfd_getfd: %w (%w: CAP_SYS_PTRACE over the process)", where, err, ErrPermission)
		case errors.Is(err, unix.EBADF):
			return 0, errors.New(where + "no such open fd")
		case errors.Is(err, unix.ESRCH):
			return 0, errors.New(where + "process exited")
		}
		return 0, fmt.Errorf("%spidfd_getfd: %w", where, err)
	}
	defer unix.Close(fd)
	if inode != 0 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Ino != uint64(inode) {
			return 0, ErrFDReused
		}
	}
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BUF_LOCK)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOPROTOOPT):
			return 0, errors.New(where + "SO_BUF_LOCK not supported by this kernel (needs Linux >= 5.14)")
		case errors.Is(err, unix.ENOTSOCK):
			return 0, errors.New(where + "not a socket")
		}
		return 0, fmt.Errorf("%sgetsockopt SO_BUF_LOCK: %w", where, err)
	}
	return uint8(v & int(BufLockSnd|BufLockRcv)), nil
}
