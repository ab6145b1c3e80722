// SPDX-License-Identifier: Apache-2.0

// Package outfile creates the files tcpdoctor writes where its user says
// (record -o, trace -o, trace --html, lab run --html). They hold process
// names and addresses, and tcpdoctor often runs as root in directories
// others can write (/tmp): a file is never written through a symbolic
// link (but root's to a device), over one with other hard links, or into
// another user's file in a shared directory; a new one is mode 0600.
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Mode is the permission of a file created here (less the umask).
const Mode = 0o600

// Refusals, wrapped in an *fs.PathError naming the file.
var (
	ErrSymlink  = errors.New("is a symbolic link: tcpdoctor does not write through one")
	ErrHardLink = errors.New("has other hard links: tcpdoctor does not write through one")
	ErrNotOurs  = errors.New("belongs to another user in a shared directory (sticky and world-writable): tcpdoctor does not write into it")
)

// Create opens path to be written from its start, as a stream: a new file
// is made with Mode; an existing regular file keeps its mode and is
// truncated; a device or pipe is written as it is. Refused: a symbolic
// link as the last component (O_NOFOLLOW), except a link root owns to a
// device or pipe (/dev/stdout, /dev/fd/N); a regular file with other
// hard links; a regular file or named pipe another user owns in a sticky
// world-writable directory (what fs.protected_regular and
// protected_fifos refuse, whatever they are set to). A named pipe without
// a reader fails at once (ENXIO) rather than blocking.
func Create(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, Mode)
	if err != nil && errors.Is(err, syscall.ELOOP) && isSymlink(path) {
		if !deviceLink(path) {
			return nil, &fs.PathError{Op: "create", Path: path, Err: ErrSymlink}
		}
		// No O_CREAT: a device or pipe is there, or nothing is written.
		f, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	if m := st.Mode(); (m.IsRegular() || m&fs.ModeNamedPipe != 0) && sys != nil && othersInShared(path, sys.Uid) {
		f.Close()
		return nil, &fs.PathError{Op: "create", Path: path, Err: ErrNotOurs}
	}
	if st.Mode().IsRegular() {
		// Checked before truncating: the other name's content is kept.
		if sys != nil && sys.Nlink > 1 {
			f.Close()
			return nil, &fs.PathError{Op: "create", Path: path, Err: ErrHardLink}
		}
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// deviceLink reports whether path is a symbolic link root owns whose
// target is a device, pipe or socket (/dev/stdout -> /proc/self/fd/1):
// no one but root could have placed it, and it names no file to
// overwrite.
func deviceLink(path string) bool {
	lst, err := os.Lstat(path)
	if err != nil {
		return false
	}
	if sys, ok := lst.Sys().(*syscall.Stat_t); !ok || sys.Uid != 0 {
		return false
	}
	st, err := os.Stat(path)
	return err == nil && !st.Mode().IsRegular() && !st.IsDir()
}

// othersInShared reports whether a file owned by uid in path's directory
// is one the kernel's protected_regular rule guards: the directory is
// sticky and world-writable, and uid is neither ours nor the directory's
// owner.
func othersInShared(path string, uid uint32) bool {
	if int(uid) == os.Geteuid() {
		return false
	}
	dst, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return true
	}
	dsys, ok := dst.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	m := dst.Mode()
	return m&fs.ModeSticky != 0 && m.Perm()&0o002 != 0 && dsys.Uid != uid
}

func isSymlink(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode()&fs.ModeSymlink != 0
}

// Atomic is a file written whole or not at all: the bytes go to a fresh
// temporary file beside it (O_EXCL, Mode), which Commit renames over the
// path. rename(2) replaces the name; it follows no link. A failed write
// (a full disk) leaves the old file, or none, never part of a new one.
type Atomic struct {
	f    *os.File
	path string
	// tmp is the temporary file's path; "" when writing straight to a
	// device or pipe, which cannot be replaced.
	tmp string
	err error
}

// CreateAtomic starts an Atomic for path, so that a path that cannot be
// written fails now, not after the work that fills it. A symbolic link at
// path is refused, as by Create; a device or pipe is written directly.
func CreateAtomic(path string) (*Atomic, error) {
	if st, err := os.Lstat(path); err == nil {
		switch m := st.Mode(); {
		case m&fs.ModeSymlink != 0:
			return nil, &fs.PathError{Op: "create", Path: path, Err: ErrSymlink}
		case m.IsDir():
			return nil, &fs.PathError{Op: "create", Path: path, Err: syscall.EISDIR}
		case !m.IsRegular():
			f, err := Create(path)
			if err != nil {
				return nil, err
			}
			return &Atomic{f: f, path: path}, nil
		}
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &fs.PathError{Op: "create", Path: path, Err: err}
	}
	return &Atomic{f: f, path: path, tmp: f.Name()}, nil
}

// Write writes to the temporary file. After an error it writes nothing
// more and returns that error again.
func (a *Atomic) Write(p []byte) (int, error) {
	if a.err != nil {
		return 0, a.err
	}
	n, err := a.f.Write(p)
	if err != nil {
		a.err = fmt.Errorf("write %s: %w", a.path, unwrapPath(err))
	}
	return n, a.err
}

// Err is the first write error, or nil.
func (a *Atomic) Err() error { return a.err }

// Commit syncs the temporary file and renames it to the path. After a
// write error, or when one of these fails, it removes the temporary file
// and returns the error: the path is as it was.
func (a *Atomic) Commit() error {
	if a.f == nil {
		return errors.New("outfile: " + a.path + ": already committed or aborted")
	}
	if a.tmp == "" {
		err := a.f.Close()
		a.f = nil
		if a.err != nil {
			return a.err
		}
		if err != nil {
			return fmt.Errorf("close %s: %w", a.path, unwrapPath(err))
		}
		return nil
	}
	err := a.err
	if err == nil {
		if serr := a.f.Sync(); serr != nil {
			err = fmt.Errorf("write %s: %w", a.path, unwrapPath(serr))
		}
	}
	if cerr := a.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write %s: %w", a.path, unwrapPath(cerr))
	}
	a.f = nil
	if err == nil {
		if rerr := os.Rename(a.tmp, a.path); rerr != nil {
			err = fmt.Errorf("rename to %s: %w", a.path, unwrapPath(rerr))
		}
	}
	if err != nil {
		_ = os.Remove(a.tmp)
		return err
	}
	return nil
}

// Fill writes the file whole with write and commits it. When write
// fails the path is as it was, and the error is the file's own write
// error where there was one (not a printer's wrapping of it).
func (a *Atomic) Fill(write func(io.Writer) error) error {
	if err := write(a); err != nil {
		a.Abort()
		if a.err != nil {
			return a.err
		}
		return err
	}
	return a.Commit()
}

// Abort drops what was written: the path is as it was. It does nothing
// after Commit or Abort.
func (a *Atomic) Abort() {
	if a.f == nil {
		return
	}
	_ = a.f.Close()
	a.f = nil
	if a.tmp != "" {
		_ = os.Remove(a.tmp)
	}
}

// unwrapPath drops the *fs.PathError or *os.LinkError naming the
// temporary file: the messages name the user's path.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
