package appcaps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// rootFS reads files as a process sees them: every name is resolved
// inside the directory dir (a process's /proc/PID/root), its symbolic
// links included (openat2 RESOLVE_IN_ROOT), so a container's
// /etc/nginx/conf.d -> /etc/nginx/sites symlink stays in the container.
// It opens read-only and never writes.
type rootFS struct{ dir string }

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
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(root, name, &how)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/" + name, Err: err}
	}
	f := os.NewFile(uintptr(fd), "/"+name)
	// A FIFO or device would block or have side effects: regular files
	// and directories only.
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() && !st.IsDir() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: "/" + name, Err: errors.New("not a regular file")}
	}
	return f, nil
}

// rel turns an absolute path as the process sees it into an fs.FS name.
func rel(abs string) (string, error) {
	if !strings.HasPrefix(abs, "/") {
		return "", fmt.Errorf("not an absolute path: %q", abs)
	}
	n := strings.TrimLeft(cleanAbs(abs), "/")
	if n == "" {
		n = "."
	}
	return n, nil
}

// isNotExist says whether err is a missing file.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
