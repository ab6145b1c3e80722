// SPDX-License-Identifier: Apache-2.0

// Package netns finds network namespaces (named by `ip netns` or held only by
// processes) and runs code inside one on a dedicated OS thread.
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/capability"
	"github.com/tcpdoctor/tcpdoctor/internal/procs"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// ErrNotFound is wrapped by Named's error when no namespace has the name.
var ErrNotFound = errors.New("no such namespace")

// ErrPermission is wrapped, next to the system's error, by errors from
// entering or inspecting a namespace this process may not: setns needs
// CAP_SYS_ADMIN, and other processes' /proc/PID/ns need ptrace access.
var ErrPermission error = &capability.Missing{Cap: unix.CAP_SYS_ADMIN, Name: "CAP_SYS_ADMIN", Text: "needs CAP_SYS_ADMIN"}

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
	// unnamed (the collector's own if pid 1's cannot be read); the pod
	// ("shop/web-1") or container holding it, when found only via a
	// process or only by a CNI plugin's name ("cni-…"); else "pid:N" when
	// found only via a process (N = lowest pid in it).
	Name  string
	Inode uint64
	// Path is what to open for setns: RunDir/NAME or ProcRoot/PID/ns/net.
	Path string
	// Workload is the pod, container or unit holding the namespace (by
	// Finder.Workloads); WorkloadErr says what could not be resolved.
	Workload    *snapshot.Workload
	WorkloadErr error
}

// Snapshot is ns as a snapshot records it.
func (ns NS) Snapshot() snapshot.Netns {
	return snapshot.Netns{Name: ns.Name, Inode: ns.Inode, Workload: ns.Workload}
}

// Namer names a namespace from the processes in it:
// internal/containers' Resolver.ForNetns.
type Namer interface {
	ForNetns(ino uint64, pids []int) (snapshot.Workload, error)
}

// Finder looks for namespaces below ProcRoot ("/proc") and RunDir
// ("/run/netns").
type Finder struct {
	ProcRoot, RunDir string
	// Workloads, when set, names namespaces held by pods and containers
	// (NS.Workload, and NS.Name as NS says).
	Workloads Namer
	// Tasks, when set, lists every process with its namespace's inode,
	// sorted by pid, in one walk (bpfsource.ProcessNetns); on a host
	// running TasksMin tasks or more it stands in for the /proc listing
	// and a readlink of each /proc/PID/ns/net but a few per namespace. If
	// it fails, the links are read.
	Tasks func() ([]Task, error)
	// tasksMin is TasksMin when 0 (tests lower it).
	tasksMin int
}

// Task is a process and the inode of its network namespace.
type Task struct {
	Pid   int
	Netns uint64
}

// TasksMin is how many tasks make Finder.Tasks pay: with 2,000
// processes listing /proc and a readlink of each (BenchmarkByProcess)
// takes about what loading and running the walk does (bpfsource's
// BenchmarkProcessNetns). Tasks count threads too, as sysinfo is the
// count that costs nothing to read: a host with few processes of
// thousands of threads (JVMs) pays the walk's 3 ms where the links took
// 0.23 ms for 70 processes.
const TasksMin = 2000

// pidsPerNS is how many of a namespace's processes (the lowest pids) are
// given to Workloads: enough to tell one pod or container from several.
const pidsPerNS = 4

// withWorkload names ns by the pod or container holding it, from pids
// (processes in it). Only names tcpdoctor made up ("pid:N") or a CNI
// plugin did ("cni-…", for a pod) give way, and not to a name taken.
func (f Finder) withWorkload(ns NS, pids []int, taken func(string) bool) NS {
	if f.Workloads == nil || ns.Name == "host" || len(pids) == 0 {
		return ns
	}
	w, err := f.Workloads.ForNetns(ns.Inode, pids)
	ns.WorkloadErr = err
	if !w.IsContainer() && w.Pod == "" && !strings.HasSuffix(w.Unit, ".service") {
		// Nothing, or a login session's or other transient scope: the
		// namespace of a shell's `unshare` or `ip netns exec` is not
		// that session's.
		return ns
	}
	ns.Workload = &w
	made := strings.HasPrefix(ns.Name, "pid:") || strings.HasPrefix(ns.Name, "cni-") && w.Pod != ""
	if label := w.Label(); made && label != "" && (w.IsContainer() || w.Pod != "") && !taken(label) {
		ns.Name = label
	}
	return ns
}

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

// linkInode is nsInode of a /proc/PID/ns/net link, read from the link's
// text ("net:[4026531840]"): cheaper than stat, which makes the kernel
// find the namespace's file. Anything else is stat'ed.
func linkInode(path string) (uint64, error) {
	var b [64]byte
	n, err := unix.Readlink(path, b[:])
	if err == nil {
		if ino, ok := parseNSLink(b[:n]); ok {
			return ino, nil
		}
	} else if errors.Is(err, os.ErrPermission) || errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	return nsInode(path)
}

// parseNSLink reads the inode out of "net:[4026531840]".
func parseNSLink(b []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(b, []byte("net:["))
	if !ok || len(rest) < 2 || rest[len(rest)-1] != ']' {
		return 0, false
	}
	ino, err := strconv.ParseUint(string(rest[:len(rest)-1]), 10, 64)
	return ino, err == nil
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

// Named returns the namespace `ip netns` knows as name. With Workloads
// set, name may also be what All names a namespace (a pod's
// "shop/web-1", a container's name) or a pod's name alone when one pod
// has it.
func (f Finder) Named(name string) (NS, error) {
	pod := strings.ContainsRune(name, '/')
	if name == "" || name == "." || name == ".." || pod && (f.Workloads == nil || strings.Count(name, "/") > 1) {
		return NS{}, errors.New("netns: invalid name " + strconv.Quote(name))
	}
	if !pod {
		ns, err := f.namedEntry(name)
		if err == nil {
			return f.namedWorkload(ns), nil
		}
		if !errors.Is(err, unix.ENOENT) {
			if errors.Is(err, errStale) {
				return NS{}, err
			}
			return NS{}, fmt.Errorf("netns: %s: %w", name, permission(err))
		}
	}
	var all []NS
	if f.Workloads != nil {
		all, _ = f.All() // a partial list still names what it can
		if ns, ok := byWorkload(all, name); ok {
			return ns, nil
		}
	} else {
		all, _ = f.named()
	}
	var names []string
	for _, ns := range all {
		if ns.Path != "" && !strings.HasPrefix(ns.Name, "pid:") && ns.Name != "host" {
			names = append(names, ns.Name)
		}
	}
	if len(names) == 0 {
		return NS{}, fmt.Errorf("netns: %q: %w (none under %s)", name, ErrNotFound, f.RunDir)
	}
	return NS{}, fmt.Errorf("netns: %q: %w (have: %s)", name, ErrNotFound, strings.Join(names, ", "))
}

// byWorkload finds the namespace named name in all, or the one pod's
// namespace whose pod is called name.
func byWorkload(all []NS, name string) (NS, bool) {
	var found []NS
	for _, ns := range all {
		if ns.Name == name {
			return ns, true
		}
		if ns.Workload != nil && ns.Workload.Pod == name {
			found = append(found, ns)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return NS{}, false
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
	return f.withWorkload(pidNS(f.ProcRoot, pid, ino), []int{pid}, f.isNamed), nil
}

// namedWorkload is withWorkload for one `ip netns` entry: its processes
// are looked for only when there is a Namer to give them to.
func (f Finder) namedWorkload(ns NS) NS {
	if f.Workloads == nil {
		return ns
	}
	byPid, _, _ := f.byProcess()
	return f.withWorkload(ns, byPid[ns.Inode], f.isNamed)
}

// isNamed reports whether name is taken by a RunDir entry or is "host".
func (f Finder) isNamed(name string) bool {
	if name == "host" {
		return true
	}
	_, err := os.Lstat(f.RunDir + "/" + name)
	return err == nil
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
			return f.namedWorkload(ns), nil
		}
	}
	if host, path := f.host(ino); host == ino {
		return NS{Name: "host", Inode: ino, Path: path}, nil
	}
	if byPid, _, err := f.byProcess(); err == nil {
		if pids, ok := byPid[ino]; ok {
			return f.withWorkload(pidNS(f.ProcRoot, pids[0], ino), pids, f.isNamed), nil
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

// byProcess maps each namespace inode to the lowest pids in it (at most
// pidsPerNS, lowest first). Processes that vanish are skipped;
// unreadable ones are returned.
func (f Finder) byProcess() (map[uint64][]int, []int, error) {
	if f.Tasks != nil && f.manyTasks() {
		if ts, err := f.Tasks(); err == nil {
			return f.fromTasks(ts)
		}
	}
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
	inos, errs := f.pidInodes(pids)
	out := make(map[uint64][]int)
	var denied []int
	for i, pid := range pids {
		if errs[i] != nil {
			if errors.Is(errs[i], os.ErrPermission) {
				denied = append(denied, pid)
			}
			continue
		}
		if len(out[inos[i]]) < pidsPerNS {
			out[inos[i]] = append(out[inos[i]], pid)
		}
	}
	return out, denied, nil
}

// manyTasks reports whether the kernel runs TasksMin tasks or more
// (sysinfo's count, threads included; counting processes would take the
// /proc listing the walk saves).
func (f Finder) manyTasks() bool {
	least := f.tasksMin
	if least == 0 {
		least = TasksMin
	}
	var si unix.Sysinfo_t
	return unix.Sysinfo(&si) == nil && int(si.Procs) >= least
}

// fromTasks is byProcess from the kernel's list of every process (sorted
// by pid). The walk also lists processes whose link this process may not
// read, and whose namespace it then cannot enter by them: each pid is
// taken only once its link reads as the walk said, so a few links are
// read per namespace, and a namespace none of whose processes can be read
// has them returned as unreadable.
func (f Finder) fromTasks(ts []Task) (map[uint64][]int, []int, error) {
	all := make(map[uint64][]int)
	for _, t := range ts {
		all[t.Netns] = append(all[t.Netns], t.Pid)
	}
	out := make(map[uint64][]int, len(all))
	var denied []int
	for ino, pids := range all {
		var unread []int
		for _, pid := range pids {
			got, err := linkInode(f.ProcRoot + "/" + strconv.Itoa(pid) + "/ns/net")
			switch {
			case errors.Is(err, os.ErrPermission):
				unread = append(unread, pid)
			case err != nil || got != ino:
				// gone, or a new process with its pid
			default:
				out[ino] = append(out[ino], pid)
			}
			if len(out[ino]) == pidsPerNS {
				break
			}
		}
		if len(out[ino]) == 0 {
			denied = append(denied, unread...)
		}
	}
	slices.Sort(denied)
	return out, denied, nil
}

// pidInodes reads each pid's namespace link, on every CPU when there are
// many: with thousands of processes this is most of naming an `ip netns`
// namespace, which every command does first.
func (f Finder) pidInodes(pids []int) ([]uint64, []error) {
	inos := make([]uint64, len(pids))
	errs := make([]error, len(pids))
	read := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			inos[i], errs[i] = linkInode(f.ProcRoot + "/" + strconv.Itoa(pids[i]) + "/ns/net")
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(pids)/256+1)
	var wg sync.WaitGroup
	for w := range workers - 1 {
		wg.Go(func() { read(w*len(pids)/workers, (w+1)*len(pids)/workers) })
	}
	read((workers-1)*len(pids)/workers, len(pids))
	wg.Wait()
	return inos, errs
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
	for ino, pids := range byPid {
		if _, ok := seen[ino]; !ok {
			seen[ino] = pidNS(f.ProcRoot, pids[0], ino)
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
	taken := make(map[string]bool, len(seen))
	for _, ns := range seen {
		taken[ns.Name] = true
	}
	// By inode, so a clash of labels resolves the same way every time.
	inos := make([]uint64, 0, len(seen))
	for ino := range seen {
		inos = append(inos, ino)
	}
	slices.Sort(inos)
	for _, ino := range inos {
		ns := seen[ino]
		if pids := byPid[ino]; len(pids) > 0 {
			old := ns.Name
			ns = f.withWorkload(ns, pids, func(n string) bool { return taken[n] })
			if ns.Name != old {
				taken[ns.Name] = true
			}
		}
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
