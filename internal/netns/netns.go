// Package netns finds network namespaces (named by `ip netns` or held only by
// processes) and runs code inside one on a dedicated OS thread.
package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/procs"
)

// ErrNotFound is wrapped by Named's error when no namespace has the name.
var ErrNotFound = errors.New("no such namespace")

// ErrPermission is wrapped, next to the system's error, by errors from
// entering or inspecting a namespace this process may not: setns needs
// CAP_SYS_ADMIN, and other processes' /proc/PID/ns need ptrace access.
var ErrPermission = errors.New("needs CAP_SYS_ADMIN")

// permission adds ErrPermission to a permission error, leaves others.
func permission(err error) error {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w (%w)", err, ErrPermission)
	}
	return err
}

// NS is one network namespace.
type NS struct {
	// Name is the `ip netns` name; "host" for pid 1's namespace when
	// unnamed (the collector's own if pid 1's cannot be read); "pid:N" when
	// found only via a process (N = lowest pid in it).
	Name  string
	Inode uint64
	// Path is what to open for setns: RunDir/NAME or ProcRoot/PID/ns/net.
	Path string
}

// Finder looks for namespaces below ProcRoot ("/proc") and RunDir
// ("/run/netns").
type Finder struct{ ProcRoot, RunDir string }

// Default returns the production Finder.
func Default() Finder { return Finder{ProcRoot: "/proc", RunDir: "/run/netns"} }

// nsInode returns the inode of the namespace behind path.
func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// named lists the namespaces bind-mounted under RunDir, sorted by name.
// Entries that are not nsfs mounts (stale files) are left out.
func (f Finder) named() ([]NS, error) {
	ents, err := os.ReadDir(f.RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	var out []NS
	for _, e := range ents {
		ns, err := f.namedEntry(e.Name())
		if err == nil {
			out = append(out, ns)
		}
	}
	return out, nil
}

// namedEntry stats RunDir/name and checks it is a namespace.
func (f Finder) namedEntry(name string) (NS, error) {
	path := f.RunDir + "/" + name
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		return NS{}, err
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return NS{}, fmt.Errorf("netns: %s %w", path, errStale)
	}
	ino, err := nsInode(path)
	if err != nil {
		return NS{}, err
	}
	return NS{Name: name, Inode: ino, Path: path}, nil
}

// errStale marks a RunDir entry that is no namespace mount.
var errStale = errors.New("is not a namespace (stale entry?)")

// Named returns the namespace `ip netns` knows as name.
func (f Finder) Named(name string) (NS, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return NS{}, errors.New("netns: invalid name " + strconv.Quote(name))
	}
	ns, err := f.namedEntry(name)
	if err == nil {
		return ns, nil
	}
	if !errors.Is(err, unix.ENOENT) {
		if errors.Is(err, errStale) {
			return NS{}, err
		}
		return NS{}, fmt.Errorf("netns: %s: %w", name, permission(err))
	}
	all, _ := f.named()
	if len(all) == 0 {
		return NS{}, fmt.Errorf("netns: %q: %w (none under %s)", name, ErrNotFound, f.RunDir)
	}
	names := make([]string, len(all))
	for i, ns := range all {
		names[i] = ns.Name
	}
	return NS{}, fmt.Errorf("netns: %q: %w (have: %s)", name, ErrNotFound, strings.Join(names, ", "))
}

// Current returns the calling thread's namespace, named as name says.
func (f Finder) Current() (NS, error) {
	ino, err := nsInode(f.ProcRoot + "/thread-self/ns/net")
	if err != nil {
		return NS{}, fmt.Errorf("netns: current: %w", err)
	}
	ns, err := f.name(ino)
	if err != nil || ns.Path != "" {
		return ns, err
	}
	// No process found in it (unreadable /proc?): name it after ourselves.
	return NS{
		Name:  "pid:" + strconv.Itoa(os.Getpid()),
		Inode: ino,
		Path:  f.ProcRoot + "/" + strconv.Itoa(os.Getpid()) + "/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net",
	}, nil
}

// OfPid returns the namespace process pid lives in, named as name says
// (so `trace --pid` names it as `check` does).
func (f Finder) OfPid(pid int) (NS, error) {
	path := f.ProcRoot + "/" + strconv.Itoa(pid) + "/ns/net"
	ino, err := nsInode(path)
	if err != nil {
		return NS{}, fmt.Errorf("netns: of pid %d: %w", pid, permission(err))
	}
	ns, err := f.name(ino)
	if err != nil || ns.Path != "" {
		return ns, err
	}
	return pidNS(f.ProcRoot, pid, ino), nil
}

// name names the namespace with inode ino: after a /run/netns entry with
// the same inode, else "host" if it is pid 1's (or pid 1's is
// unreadable and it is ours), else "pid:N" after the lowest pid in it.
// With none of these, Path is empty and the caller names it.
func (f Finder) name(ino uint64) (NS, error) {
	named, err := f.named()
	if err != nil {
		return NS{}, err
	}
	for _, ns := range named {
		if ns.Inode == ino {
			return ns, nil
		}
	}
	if host, path := f.host(ino); host == ino {
		return NS{Name: "host", Inode: ino, Path: path}, nil
	}
	if byPid, _, err := f.byProcess(); err == nil {
		if pid, ok := byPid[ino]; ok {
			return pidNS(f.ProcRoot, pid, ino), nil
		}
	}
	return NS{Inode: ino}, nil
}

// host returns the inode of the namespace called "host" and a path to it:
// pid 1's, or, when pid 1 may not be inspected (some sandboxes refuse even
// root), the collector's own (cur, reached via our own pid).
func (f Finder) host(cur uint64) (uint64, string) {
	path := f.ProcRoot + "/1/ns/net"
	if ino, err := nsInode(path); err == nil {
		return ino, path
	}
	path = f.ProcRoot + "/" + strconv.Itoa(os.Getpid()) + "/ns/net"
	if ino, err := nsInode(path); err == nil && ino == cur {
		return ino, path
	}
	return 0, ""
}

func pidNS(procRoot string, pid int, ino uint64) NS {
	return NS{Name: "pid:" + strconv.Itoa(pid), Inode: ino, Path: procRoot + "/" + strconv.Itoa(pid) + "/ns/net"}
}

// byProcess maps each namespace inode to the lowest pid in it. Processes
// that vanish are skipped; unreadable ones are returned.
func (f Finder) byProcess() (map[uint64]int, []int, error) {
	d, err := os.Open(f.ProcRoot)
	if err != nil {
		return nil, nil, fmt.Errorf("netns: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("netns: list %s: %w", f.ProcRoot, err)
	}
	var pids []int
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 && n[0] != '+' {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	out := make(map[uint64]int)
	var denied []int
	for _, pid := range pids {
		ino, err := nsInode(f.ProcRoot + "/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil {
			if errors.Is(err, os.ErrPermission) {
				denied = append(denied, pid)
			}
			continue
		}
		if _, ok := out[ino]; !ok {
			out[ino] = pid
		}
	}
	return out, denied, nil
}

// All returns every distinct network namespace: the named ones and those of
// any process, one per inode, the current one first and the rest sorted by
// name. Processes it may not inspect are reported in the error alongside
// the partial list.
func (f Finder) All() ([]NS, error) {
	cur, err := nsInode(f.ProcRoot + "/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("netns: current: %w", err)
	}
	named, err := f.named()
	if err != nil {
		return nil, err
	}
	byPid, denied, err := f.byProcess()
	if err != nil {
		return nil, err
	}
	seen := make(map[uint64]NS)
	for _, ns := range named { // sorted: the first name of an inode wins
		if _, ok := seen[ns.Inode]; !ok {
			seen[ns.Inode] = ns
		}
	}
	if host, path := f.host(cur); host != 0 {
		if _, ok := seen[host]; !ok {
			seen[host] = NS{Name: "host", Inode: host, Path: path}
		}
	}
	for ino, pid := range byPid {
		if _, ok := seen[ino]; !ok {
			seen[ino] = pidNS(f.ProcRoot, pid, ino)
		}
	}
	if _, ok := seen[cur]; !ok {
		// Our own namespace, with pid 1 and our pid unreadable: unusual.
		c, err := f.Current()
		if err != nil {
			return nil, err
		}
		seen[cur] = c
	}
	out := make([]NS, 0, len(seen))
	for _, ns := range seen {
		out = append(out, ns)
	}
	slices.SortFunc(out, func(a, b NS) int {
		if (a.Inode == cur) != (b.Inode == cur) {
			if a.Inode == cur {
				return -1
			}
			return 1
		}
		return compareNames(a.Name, b.Name)
	})
	if len(denied) > 0 {
		return out, fmt.Errorf("netns: %s: /proc/PID/ns/net unreadable: %w (needs ptrace access to the process)", procs.Names(f.ProcRoot, denied), os.ErrPermission)
	}
	return out, nil
}

// compareNames orders names, "pid:N" ones by number.
func compareNames(a, b string) int {
	pa, okA := strings.CutPrefix(a, "pid:")
	pb, okB := strings.CutPrefix(b, "pid:")
	if okA && okB {
		na, errA := strconv.Atoi(pa)
		nb, errB := strconv.Atoi(pb)
		if errA == nil && errB == nil {
			return na - nb
		}
	}
	return strings.Compare(a, b)
}

// Do runs fn on a locked OS thread that has entered ns. The thread is
// discarded afterwards (its goroutine exits still locked), so no other
// goroutine ever runs in the wrong namespace. Sockets fn creates stay in ns
// and may be used from any goroutine afterwards. A panic in fn is re-raised
// in the caller.
func Do(ns NS, fn func() error) error {
	label := ns.Name
	if label == "" {
		label = ns.Path
	}
	fd, err := unix.Open(ns.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns: enter %s: open %s: %w", label, ns.Path, permission(err))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("netns: enter %s: %w", label, err)
	}
	if ns.Inode != 0 {
		if st.Ino != ns.Inode {
			return fmt.Errorf("netns: enter %s: %s is now namespace %d, not %d", label, ns.Path, st.Ino, ns.Inode)
		}
	}
	type result struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread exits with this goroutine.
		runtime.LockOSThread()
		// Already there (our own namespace): no setns, so no
		// CAP_SYS_ADMIN needed to look at the namespace we run in.
		var here unix.Stat_t
		already := unix.Stat("/proc/thread-self/ns/net", &here) == nil && here.Ino == st.Ino && here.Dev == st.Dev
		if !already {
			if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
				done <- result{err: fmt.Errorf("netns: enter %s: %w", label, permission(err))}
				return
			}
		}
		sent := false
		defer func() {
			if sent {
				return
			}
			if p := recover(); p != nil {
				done <- result{panicked: true, value: p}
				return
			}
			done <- result{err: errors.New("netns: " + label + ": fn exited its goroutine (runtime.Goexit)")}
		}()
		err := fn()
		sent = true
		done <- result{err: err}
	}()
	r := <-done
	if r.panicked {
		panic(r.value)
	}
	return r.err
}
