// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// rootFS reads files as a process sees them: every name is resolved
// inside the directory dir (a process's /proc/PID/root), its symbolic
// links included (openat2 RESOLVE_IN_ROOT), so a container's
// /etc/nginx/conf.d -> /etc/nginx/sites symlink stays in the container.
// A name is first opened O_PATH, which runs no driver's or FIFO's open,
// and fstat'ed: only a regular file or a directory whose owner and mode
// say the process itself may read it is then opened for reading, through
// /proc/self/fd (the same inode). It opens read-only and never writes.
type rootFS struct {
	dir string
	// who is the process whose files these are; nil: this process.
	who *cred
}

// cred is what decides whether a process may read a file: the users a
// file may belong to (its own, root, and its user namespace's root) and
// the ids its access is checked with.
type cred struct {
	owners []uint32
	fsuid  uint32
	groups []uint32
	// privileged: root (of the host or of its user namespace) reads
	// every file it may own.
	privileged bool
}

// errNotOurs is why a file is not read although it exists.
var errNotOurs = errors.New("not read")

// Open implements fs.FS.
func (r rootFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	root, err := unix.Open(r.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: r.dir, Err: err}
	}
	defer unix.Close(root)
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	pfd, err := unix.Openat2(root, name, &how)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/" + name, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: "/" + name, Err: err}
	}
	// A FIFO or device would block or have side effects: regular files
	// and directories only, decided before any open that runs them.
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		flags |= unix.O_DIRECTORY
	default:
		return nil, &fs.PathError{Op: "open", Path: "/" + name, Err: errors.New("not a regular file")}
	}
	if err := r.who.mayRead(&st); err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/" + name, Err: err}
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flags, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/" + name, Err: err}
	}
	f := os.NewFile(uintptr(fd), "/"+name)
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Dev != st.Dev || st2.Ino != st.Ino {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: "/" + name, Err: errors.New("changed while opened")}
	}
	return f, nil
}

// mayRead says why the process c may not read the file st, nil when it
// may: a file owned by another user than its own or root's is not read,
// nor one its mode keeps from it (so a host process's "-c /etc/shadow"
// is never read on its behalf). c nil is this process: its own files and
// root's.
func (c *cred) mayRead(st *unix.Stat_t) error {
	if c == nil {
		if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
			return fmt.Errorf("%w: owned by uid %d, neither this process's user nor root", errNotOurs, st.Uid)
		}
		return nil
	}
	if !slices.Contains(c.owners, st.Uid) {
		return fmt.Errorf("%w: owned by uid %d, neither the process's user nor root", errNotOurs, st.Uid)
	}
	if c.privileged {
		return nil
	}
	var bit uint32 = unix.S_IROTH
	switch {
	case st.Uid == c.fsuid:
		bit = unix.S_IRUSR
	case slices.Contains(c.groups, st.Gid):
		bit = unix.S_IRGRP
	}
	if st.Mode&bit == 0 {
		return fmt.Errorf("%w: its mode %04o keeps it from the process (uid %d)", errNotOurs, st.Mode&0o7777, c.fsuid)
	}
	return nil
}

// credOf reads process pid's users and groups from /proc/PID/status
// (and its user namespace's root from uid_map). A tree without status
// (a test's) gives the owner of /proc/PID, which is the process's user.
func credOf(procRoot string, pid int) (*cred, error) {
	dir := fmt.Sprintf("%s/%d", procRoot, pid)
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return nil, err
		}
		return &cred{owners: []uint32{0, st.Uid}, fsuid: st.Uid, groups: []uint32{st.Gid}, privileged: st.Uid == 0}, nil
	}
	c := &cred{owners: []uint32{0}}
	var uids, gids []uint32
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		ids := func() []uint32 {
			var out []uint32
			for _, f := range strings.Fields(v) {
				if n, err := strconv.ParseUint(f, 10, 32); err == nil {
					out = append(out, uint32(n))
				}
			}
			return out
		}
		switch k {
		case "Uid":
			uids = ids()
		case "Gid":
			gids = ids()
		case "Groups":
			c.groups = append(c.groups, ids()...)
		}
	}
	if len(uids) != 4 || len(gids) != 4 {
		return nil, fmt.Errorf("%s/status: no Uid or Gid line", dir)
	}
	// Real, effective, saved and filesystem ids.
	c.owners = append(c.owners, uids...)
	c.fsuid = uids[3]
	c.groups = append(c.groups, gids...)
	c.privileged = c.fsuid == 0
	if m, err := os.ReadFile(dir + "/uid_map"); err == nil {
		if r, ok := mappedRoot(m); ok {
			c.owners = append(c.owners, r)
			c.privileged = c.privileged || c.fsuid == r
		}
	}
	slices.Sort(c.owners)
	c.owners = slices.Compact(c.owners)
	return c, nil
}

// mappedRoot is the host uid a user namespace's uid_map gives its root.
func mappedRoot(m []byte) (uint32, bool) {
	for _, l := range strings.Split(string(m), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		in, e1 := strconv.ParseUint(f[0], 10, 32)
		out, e2 := strconv.ParseUint(f[1], 10, 32)
		n, e3 := strconv.ParseUint(f[2], 10, 32)
		if e1 == nil && e2 == nil && e3 == nil && in == 0 && n > 0 {
			return uint32(out), true
		}
	}
	return 0, false
}

// rel turns an absolute path as the process sees it into an fs.FS name.
func rel(abs string) (string, error) {
	if !strings.HasPrefix(abs, "/") {
		return "", fmt.Errorf("not an absolute path: %q", frag(abs))
	}
	n := strings.TrimLeft(cleanAbs(abs), "/")
	if n == "" {
		n = "."
	}
	return n, nil
}

// isNotExist says whether err is a missing file.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
