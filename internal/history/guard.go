// SPDX-License-Identifier: Apache-2.0

package history

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrInUse is wrapped by LockDir's error when another writer holds the
// directory; ErrUnsafe when the directory is one tcpdoctor will not trust.
var (
	ErrInUse  = errors.New("in use by another writer")
	ErrUnsafe = errors.New("unsafe directory")
)

// MinMaxBytes is the smallest bound of a store: a few evidence files of a
// busy namespace and the timeline segment being written.
const MinMaxBytes = 1 << 20

// lockName is the lock file of a store: not a store file (parseName
// refuses it), never evicted.
const lockName = ".lock"

// Lock is a store held by one writer (LockDir).
type Lock struct{ f *os.File }

// LockDir makes dir (mode 0700) when missing, checks that it is safe
// (CheckDir) and takes its lock: one writer per directory, so two serves
// do not write every window twice. It fails with ErrInUse while another
// process holds it (naming it), and with ErrUnsafe for a directory it
// refuses. The lock holds until Close or the process ends.
func LockDir(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("history: lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf(" (pid %d)", pid)
			}
		}
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("history: %s is held by another tcpdoctor serve --history%s: one writer per directory: %w", dir, holder, ErrInUse)
		}
		return nil, fmt.Errorf("history: lock %s: %w", path, err)
	}
	// Who holds it, for the next one's error; best effort.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Close releases the lock.
func (l *Lock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// CheckDir refuses, as sshd refuses its files, a store directory another
// user could write into (group or others may write it) or that is owned
// by a user other than root and this process's: files planted there
// would be read as evidence and could make the writer evict the real
// history.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("history: %s is not a directory", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if me := uint32(os.Geteuid()); st.Uid != 0 && st.Uid != me {
		return fmt.Errorf("history: %s is owned by uid %d, neither root nor this process's user (uid %d): refused, as its owner could plant or remove files in it: %w", dir, st.Uid, me, ErrUnsafe)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("history: %s may be written by other users (mode %04o): refused, as they could plant or remove files in it (chmod go-w %s): %w", dir, perm, dir, ErrUnsafe)
	}
	return nil
}
