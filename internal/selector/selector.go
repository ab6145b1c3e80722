// SPDX-License-Identifier: Apache-2.0

// Package selector is --pod and --container, shared by check, sockets,
// trace and watch: which pod or container a command keeps, matched
// against the snapshot.Workload internal/containers named
// (docs/containers.md). The commands only parse the flags into it.
package selector

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Selector is a pod ("NAME" or "NAMESPACE/NAME") and a container (its
// name, or an id of 12 or more hex digits); empty ones select anything.
type Selector struct {
	Pod, Container string
}

// Set reports whether either is given.
func (s *Selector) Set() bool { return s.Pod != "" || s.Container != "" }

// pod is Pod split at its '/': ns "" for any namespace.
func (s *Selector) pod() (ns, name string) {
	if i := strings.IndexByte(s.Pod, '/'); i >= 0 {
		return s.Pod[:i], s.Pod[i+1:]
	}
	return "", s.Pod
}

// Check checks the shape of what was given; its errors name the flag.
func (s *Selector) Check() error {
	if ns, name := s.pod(); strings.ContainsRune(s.Pod, '/') && (ns == "" || name == "" || strings.ContainsRune(name, '/')) {
		return fmt.Errorf("--pod %q: want NAME or NAMESPACE/NAME", s.Pod)
	}
	if strings.ContainsRune(s.Container, '/') {
		return fmt.Errorf("--container %q: a container's name has no '/' (its pod goes in --pod)", s.Container)
	}
	return nil
}

// Match reports whether w is the pod and container asked for. A pod's
// sandbox matches a pod but no container; nil matches nothing when s is
// set.
func (s *Selector) Match(w *snapshot.Workload) bool {
	if !s.Set() {
		return true
	}
	if w == nil {
		return false
	}
	if ns, name := s.pod(); name != "" && (w.Pod != name || ns != "" && w.PodNamespace != ns) {
		return false
	}
	if s.Container != "" {
		c := w.ContainerName()
		byID := len(s.Container) >= 12 && !w.Sandbox && strings.HasPrefix(w.ID, s.Container)
		if c != s.Container && !byID {
			return false
		}
	}
	return true
}

// Holds reports whether snap is about what s asks for: its namespace's
// workload, or the owner of one of its sockets, matches.
func (s *Selector) Holds(snap *snapshot.Snapshot) bool {
	if s.Match(snap.Netns.Workload) {
		return true
	}
	for i := range snap.Sockets {
		for _, pid := range snap.Sockets[i].Pids.List() {
			if p := snap.Procs[pid]; p != nil && s.Match(p.Workload) {
				return true
			}
		}
	}
	return false
}

// MayHold reports whether a namespace held by w may hold what s asks
// for: not a namespace another pod holds (a pod's processes live in its
// own namespace or the host's).
func (s *Selector) MayHold(w *snapshot.Workload) bool {
	ns, name := s.pod()
	if name == "" || w == nil || w.Pod == "" {
		return true
	}
	return w.Pod == name && (ns == "" || w.PodNamespace == ns)
}

// What is s as a phrase: `pod "shop/web-1" container "api"`.
func (s *Selector) What() string {
	var parts []string
	if s.Pod != "" {
		parts = append(parts, fmt.Sprintf("pod %q", s.Pod))
	}
	if s.Container != "" {
		parts = append(parts, fmt.Sprintf("container %q", s.Container))
	}
	return strings.Join(parts, " ")
}

// Find checks that what s asks for is among known (every workload
// seen), unambiguously: otherwise an error that lists the pods and
// containers there are. where says what was looked at ("on this host").
func (s *Selector) Find(where string, known []snapshot.Workload) error {
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
		if s.Match(w) {
			found = true
			if w.Pod != "" {
				podsOfName[w.PodName()] = true
			}
		}
	}
	if ns, name := s.pod(); found && name != "" && ns == "" && len(podsOfName) > 1 {
		names := make([]string, 0, len(podsOfName))
		for n := range podsOfName {
			names = append(names, n)
		}
		slices.Sort(names)
		return fmt.Errorf("--pod %q names %d pods (%s): give NAMESPACE/NAME", s.Pod, len(names), strings.Join(names, ", "))
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
	return fmt.Errorf("no %s %s (%s)", s.What(), where, have)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Known appends to known every workload snap names: its namespace's and
// its processes'.
func Known(known []snapshot.Workload, snap *snapshot.Snapshot) []snapshot.Workload {
	if snap.Netns.Workload != nil {
		known = append(known, *snap.Netns.Workload)
	}
	for _, p := range snap.Procs {
		if p.Workload != nil {
			known = append(known, *p.Workload)
		}
	}
	return known
}
