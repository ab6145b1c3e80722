// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// workloadOpts are --pod and --container, shared by check, sockets,
// trace and watch: which pod or container to keep (docs/containers.md).
type workloadOpts struct {
	// cmd names the command in usage errors.
	cmd            string
	pod, container string
	// podNS and podName are pod split at its '/' (podNS "" for any).
	podNS, podName string
	// names are the container names --container matched by id (find), as
	// a finding's subject keeps them.
	names []string
}

func (o *workloadOpts) register(fs *pflag.FlagSet, cmd string) {
	o.cmd = cmd
	fs.StringVar(&o.pod, "pod", "", "only this Kubernetes pod: `[NAMESPACE/]NAME` (names from the container runtime's files, docs/containers.md)")
	fs.StringVar(&o.container, "container", "", "only this container: its name (Kubernetes or Docker) or its id of 12 or more hex digits")
}

// set reports whether either flag was given.
func (o *workloadOpts) set() bool { return o.pod != "" || o.container != "" }

// validate checks the flags' shape.
func (o *workloadOpts) validate() error {
	cmd := o.cmd
	o.podNS, o.podName = "", o.pod
	if i := strings.IndexByte(o.pod, '/'); i >= 0 {
		o.podNS, o.podName = o.pod[:i], o.pod[i+1:]
		if o.podNS == "" || o.podName == "" || strings.ContainsRune(o.podName, '/') {
			return usageErr("%s: --pod %q: want NAME or NAMESPACE/NAME", cmd, o.pod)
		}
	}
	if strings.ContainsRune(o.container, '/') {
		return usageErr("%s: --container %q: a container's name has no '/' (its pod goes in --pod)", cmd, o.container)
	}
	return nil
}

// match reports whether w is the pod and container asked for. A pod's
// sandbox matches --pod but no --container; nil matches nothing when a
// flag is set.
func (o *workloadOpts) match(w *snapshot.Workload) bool {
	if !o.set() {
		return true
	}
	if w == nil {
		return false
	}
	if o.podName != "" && (w.Pod != o.podName || o.podNS != "" && w.PodNamespace != o.podNS) {
		return false
	}
	if o.container != "" {
		c := w.ContainerName()
		byID := len(o.container) >= 12 && !w.Sandbox && strings.HasPrefix(w.ID, o.container)
		if c != o.container && !byID {
			return false
		}
	}
	return true
}

// matchFields is match for the fields a finding's subject keeps (the
// container's name, not its id: an id given is matched by the names find
// saw it have).
func (o *workloadOpts) matchFields(pod, podNS, container string) bool {
	w := &snapshot.Workload{Pod: pod, PodNamespace: podNS, Container: container}
	if container == "" {
		w.Sandbox = true // a pod's namespace: no container of its own
	}
	if o.match(w) {
		return true
	}
	if container == "" || !slices.Contains(o.names, container) {
		return false
	}
	p := *o
	p.container = ""
	return p.match(w)
}

// holds reports whether the last sample of sr is about what o asks for:
// its namespace's workload, or the owner of one of its sockets, matches.
func (o *workloadOpts) holds(sr series) bool {
	if len(sr.Snaps) == 0 {
		return false
	}
	s := sr.Snaps[len(sr.Snaps)-1]
	if o.match(s.Netns.Workload) {
		return true
	}
	for i := range s.Sockets {
		for _, pid := range s.Sockets[i].Pids.List() {
			if p := s.Procs[pid]; p != nil && o.match(p.Workload) {
				return true
			}
		}
	}
	return false
}

// mayHold reports whether a namespace held by w may hold what o asks
// for: not a namespace another pod holds (a pod's processes live in its
// own namespace or the host's).
func (o *workloadOpts) mayHold(w *snapshot.Workload) bool {
	if o.podName == "" || w == nil || w.Pod == "" {
		return true
	}
	return w.Pod == o.podName && (o.podNS == "" || w.PodNamespace == o.podNS)
}

// what is the filter as a phrase: `pod "shop/web-1" container "api"`.
func (o *workloadOpts) what() string {
	var parts []string
	if o.pod != "" {
		parts = append(parts, fmt.Sprintf("pod %q", o.pod))
	}
	if o.container != "" {
		parts = append(parts, fmt.Sprintf("container %q", o.container))
	}
	return strings.Join(parts, " ")
}

// find checks that what o asks for is among known (every workload seen),
// unambiguously: otherwise a usage error that lists the pods and
// containers there are. where says what was looked at.
func (o *workloadOpts) find(where string, known []snapshot.Workload) error {
	cmd := o.cmd
	var pods, ctrs []string
	found, podsOfName := false, map[string]bool{}
	for i := range known {
		w := &known[i]
		if p := w.PodName(); p != "" && !slices.Contains(pods, p) {
			pods = append(pods, p)
		}
		if c := w.Label(); w.ContainerName() != "" && !slices.Contains(ctrs, c) {
			ctrs = append(ctrs, c)
		}
		if o.match(w) {
			found = true
			if w.Pod != "" {
				podsOfName[w.PodName()] = true
			}
			if c := w.ContainerName(); o.container != "" && c != o.container && !slices.Contains(o.names, c) {
				o.names = append(o.names, c)
			}
		}
	}
	if found && o.podName != "" && o.podNS == "" && len(podsOfName) > 1 {
		names := keysSorted(podsOfName)
		return usageErr("%s: --pod %q names %d pods (%s): give NAMESPACE/NAME", cmd, o.pod, len(names), strings.Join(names, ", "))
	}
	if found {
		return nil
	}
	slices.Sort(pods)
	slices.Sort(ctrs)
	have := "no pod or container found"
	if len(pods)+len(ctrs) > 0 {
		have = "pods: " + orNone(pods) + "; containers: " + orNone(ctrs)
	}
	return usageErr("%s: no %s %s (%s)", cmd, o.what(), where, have)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func keysSorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// knownLive is every workload of the host: each process's (by the Env's
// resolver) and each namespace's. A partial look is used, with a note.
func knownLive(e *Env, cmd string, nss []netns.NS) ([]snapshot.Workload, map[int]snapshot.Workload, error) {
	if e.Workloads == nil {
		return nil, nil, usageErr("%s: --pod and --container need container names, and this run resolves none", cmd)
	}
	byPid, err := e.Workloads.Processes()
	if byPid == nil && err != nil {
		return nil, nil, collectErr(err)
	}
	if err != nil {
		e.progress("note: %v; some processes may be unnamed", err)
	}
	var known []snapshot.Workload
	for _, w := range byPid {
		known = append(known, w)
	}
	for _, ns := range nss {
		if ns.Workload != nil {
			known = append(known, *ns.Workload)
		}
	}
	return known, byPid, nil
}

// knownIn is every workload a snapshot file names: its namespaces' and
// its processes'.
func knownIn(ss []series) []snapshot.Workload {
	var known []snapshot.Workload
	for _, sr := range ss {
		for _, s := range sr.Snaps {
			if s.Netns.Workload != nil {
				known = append(known, *s.Netns.Workload)
			}
			for _, p := range s.Procs {
				if p.Workload != nil {
					known = append(known, *p.Workload)
				}
			}
		}
	}
	return known
}
