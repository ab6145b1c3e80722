// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Roots are the directories a Resolver reads; tests point them at
// fixtures.
type Roots struct {
	// Proc is procfs, /proc.
	Proc string
	// ContainerdState is containerd's state directory, /run/containerd;
	// bundles are under io.containerd.runtime.v2.task/<ns>/<id>/.
	ContainerdState string
	// Runc is the runc root containerd's shim uses, /run/containerd/runc
	// (also when containerd's state directory is elsewhere).
	Runc string
	// Docker is Docker's data root, /var/lib/docker.
	Docker string
	// Storage is containers/storage's graph root, which Podman and CRI-O
	// share: /var/lib/containers/storage. Empty: not read.
	Storage string
}

// DefaultRoots are the runtimes' default locations.
func DefaultRoots() Roots {
	return Roots{
		Proc:            "/proc",
		ContainerdState: "/run/containerd",
		Runc:            "/run/containerd/runc",
		Docker:          "/var/lib/docker",
		Storage:         "/var/lib/containers/storage",
	}
}

// Options configure a Resolver; zero fields take the defaults.
type Options struct {
	Roots Roots
	// Now is the clock that spaces retries of failed look-ups.
	Now func() time.Time
	// MaxPids and MaxContainers cap the two caches (least recently used
	// entries are dropped): 4096 and 1024 by default.
	MaxPids, MaxContainers int
	// Retry is how long a look-up that failed is kept before it is tried
	// again: 10 s by default. Complete answers are kept until dropped.
	Retry time.Duration
}

// Resolver names the container, pod or unit of processes and network
// namespaces, caching by pid (with the process's start time, so a reused
// pid is looked up afresh) and by container id. It is safe for
// concurrent use.
type Resolver struct {
	roots Roots
	now   func() time.Time
	retry time.Duration

	mu   sync.Mutex
	pids *lru[int, pidEntry]
	ids  *lru[CgroupRef, idEntry]
	// stores holds containers/storage's parsed containers.json by path.
	stores map[string]storageIndex
}

type pidEntry struct {
	start uint64
	info  Info
	err   error
	at    time.Time
}

type idEntry struct {
	info Info
	err  error
	at   time.Time
}

// NewResolver returns a Resolver reading o.Roots.
func NewResolver(o Options) *Resolver {
	if o.Roots == (Roots{}) {
		o.Roots = DefaultRoots()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxPids == 0 {
		o.MaxPids = 4096
	}
	if o.MaxContainers == 0 {
		o.MaxContainers = 1024
	}
	if o.Retry == 0 {
		o.Retry = 10 * time.Second
	}
	return &Resolver{
		roots:  o.Roots,
		now:    o.Now,
		retry:  o.Retry,
		pids:   newLRU[int, pidEntry](o.MaxPids),
		ids:    newLRU[CgroupRef, idEntry](o.MaxContainers),
		stores: map[string]storageIndex{},
	}
}

// fresh reports whether a cached answer stands: complete ones always,
// failed ones for r.retry.
func (r *Resolver) fresh(err error, at time.Time) bool {
	return err == nil || r.now().Sub(at) < r.retry
}

// ForPid returns the container, pod or unit of process pid. With an
// error the Info holds what could be found (the container id from the
// cgroup path when the runtime's state could not be read); a process
// that is gone gives an empty Info and an error matching fs.ErrNotExist.
// A process in no container and no unit gives an empty Info and no error.
func (r *Resolver) ForPid(pid int) (Info, error) {
	start, err := startTime(r.roots.Proc, pid)
	if err != nil {
		return Info{}, fmt.Errorf("containers: pid %d: %w", pid, err)
	}
	r.mu.Lock()
	e, ok := r.pids.get(pid)
	r.mu.Unlock()
	if ok && e.start == start && r.fresh(e.err, e.at) {
		return e.info, e.err
	}
	ref, err := Cgroup(r.roots.Proc, pid)
	if err != nil {
		return Info{}, fmt.Errorf("containers: pid %d: %w", pid, err)
	}
	// The pid may have been reused while its cgroup was read.
	if again, err := startTime(r.roots.Proc, pid); err != nil || again != start {
		return Info{}, fmt.Errorf("containers: pid %d: exited while read: %w", pid, fs.ErrNotExist)
	}
	info, err := r.container(ref)
	if err != nil {
		err = fmt.Errorf("containers: pid %d: %w", pid, err)
	}
	r.mu.Lock()
	r.pids.put(pid, pidEntry{start: start, info: info, err: err, at: r.now()})
	r.mu.Unlock()
	return info, err
}

// container resolves what a cgroup path names, through the cache by id.
func (r *Resolver) container(ref CgroupRef) (Info, error) {
	if ref.ID == "" {
		if ref.Unit != "" {
			return Info{Runtime: Systemd, Unit: ref.Unit}, nil
		}
		return Info{}, nil
	}
	r.mu.Lock()
	e, ok := r.ids.get(ref)
	r.mu.Unlock()
	if ok && r.fresh(e.err, e.at) {
		return e.info, e.err
	}
	info, err := r.lookup(ref)
	r.mu.Lock()
	r.ids.put(ref, idEntry{info: info, err: err, at: r.now()})
	r.mu.Unlock()
	return info, err
}

// lookup reads the runtime state of the container ref names: containerd's
// bundle config.json, then runc's state.json, then Docker's
// config.v2.json; CRI-O's and Podman's from containers/storage.
func (r *Resolver) lookup(ref CgroupRef) (Info, error) {
	base := Info{Runtime: ref.Runtime, ID: ref.ID, PodUID: ref.PodUID}
	switch ref.Runtime {
	case CRIO, Podman:
		found, ok, err := r.storage(ref)
		if !ok && err == nil {
			err = fmt.Errorf("container %s: %w", ShortID(ref.ID), errNoState)
		}
		return merge(base, found), err
	case Docker:
		found, err := DockerConfig(r.roots.Docker, ref.ID)
		return merge(base, found), err
	}
	// Containerd, or the kubelet's cgroupfs layout shared with Docker.
	found, ok, err := r.containerd(ref)
	if ok {
		base.Runtime = Containerd
		return merge(base, found), err
	}
	if ref.Runtime == "" {
		if _, serr := os.Stat(filepath.Join(r.roots.Docker, "containers", ref.ID)); serr == nil {
			found, derr := DockerConfig(r.roots.Docker, ref.ID)
			return merge(base, found), derr
		}
	}
	if ref.Plain && err == nil {
		// A two-level cgroup with no containerd state is no container.
		if ref.Unit != "" {
			return Info{Runtime: Systemd, Unit: ref.Unit}, nil
		}
		return Info{}, nil
	}
	return base, errors.Join(fmt.Errorf("container %s: %w", ShortID(ref.ID), errNoState), err)
}

// containerd finds ref's container in containerd's state (the bundle's
// config.json, else runc's state.json), in ref's namespace or, when the
// path does not say, in each namespace there. ok says a state directory
// exists for it; err says what could not be read.
func (r *Resolver) containerd(ref CgroupRef) (Info, bool, error) {
	var errs []error
	bundles := filepath.Join(r.roots.ContainerdState, "io.containerd.runtime.v2.task")
	nss := []string{ref.Namespace}
	if ref.Namespace == "" {
		nss = nil
		for _, dir := range []string{bundles, r.roots.Runc} {
			ents, err := os.ReadDir(dir)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("containerd namespaces: %w", err))
			}
			for _, e := range ents {
				if e.IsDir() && validID(e.Name()) && !slices.Contains(nss, e.Name()) {
					nss = append(nss, e.Name())
				}
			}
		}
	}
	for _, ns := range nss {
		_, berr := os.Stat(filepath.Join(bundles, ns, ref.ID))
		_, rerr := os.Stat(filepath.Join(r.roots.Runc, ns, ref.ID))
		if berr != nil && rerr != nil {
			continue
		}
		info, err := ContainerdSpec(r.roots.ContainerdState, ns, ref.ID)
		if err == nil {
			return info, true, nil
		}
		info, rerr = RuncState(r.roots.Runc, ns, ref.ID)
		if rerr == nil {
			return info, true, nil
		}
		return Info{}, true, errors.Join(append(errs, err, rerr)...)
	}
	return Info{}, false, errors.Join(errs...)
}

// merge fills base's empty fields from found.
func merge(base, found Info) Info {
	fill := func(dst *string, src string) {
		if *dst == "" {
			*dst = src
		}
	}
	fill(&base.Runtime, found.Runtime)
	fill(&base.ID, found.ID)
	fill(&base.Container, found.Container)
	fill(&base.Image, found.Image)
	fill(&base.Pod, found.Pod)
	fill(&base.PodNamespace, found.PodNamespace)
	if found.PodUID != "" {
		base.PodUID = found.PodUID
	}
	base.Sandbox = base.Sandbox || found.Sandbox
	return base
}

// ForNetns names the network namespace with inode ino from the processes
// in it (pids; those no longer in it are skipped). A pod's namespace is
// named by the pod, as its sandbox container holds it ("shop/web-1"),
// never by the sandbox's pause process; otherwise by the one container
// or the one unit its processes belong to. Processes of several
// containers (not of one pod) or several units give an empty Info; the
// error says which processes could not be resolved.
func (r *Resolver) ForNetns(ino uint64, pids []int) (Info, error) {
	var errs []error
	var infos []Info
	for _, pid := range pids {
		if got, err := netnsInode(r.roots.Proc, pid); err != nil {
			errs = append(errs, fmt.Errorf("containers: pid %d: %w", pid, err))
			continue
		} else if got != ino {
			continue
		}
		info, err := r.ForPid(pid)
		if err != nil {
			errs = append(errs, err)
		}
		infos = append(infos, info)
	}
	return nameNetns(infos), errors.Join(errs...)
}

// nameNetns picks the name of a namespace from what its processes are.
func nameNetns(infos []Info) Info {
	var pod, sandbox, ctr, unit *Info
	podCount, ctrs, units := 0, map[string]bool{}, map[string]bool{}
	pods := map[[3]string]bool{}
	for k := range infos {
		i := &infos[k]
		switch {
		case i.Pod != "":
			key := [3]string{i.PodNamespace, i.Pod, i.PodUID}
			if !pods[key] {
				pods[key] = true
				podCount++
			}
			if pod == nil {
				pod = i
			}
			if i.Sandbox && sandbox == nil {
				sandbox = i
			}
		case i.ID != "":
			if !ctrs[i.ID] {
				ctrs[i.ID] = true
				ctr = i
			}
		case i.Unit != "":
			if !units[i.Unit] {
				units[i.Unit] = true
				unit = i
			}
		}
	}
	switch {
	case podCount == 1 && sandbox != nil:
		return *sandbox
	case podCount == 1:
		return Info{Runtime: pod.Runtime, Pod: pod.Pod, PodNamespace: pod.PodNamespace, PodUID: pod.PodUID}
	case podCount > 1:
		return Info{}
	case len(ctrs) == 1:
		return *ctr
	case len(ctrs) == 0 && len(units) == 1:
		return *unit
	}
	return Info{}
}
