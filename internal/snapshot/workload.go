// SPDX-License-Identifier: Apache-2.0

package snapshot

// Workload is the container, Kubernetes pod or systemd unit a process or
// a network namespace belongs to, as internal/containers found it from
// the process's cgroup path and the runtime's state files. Empty fields
// are unknown.
type Workload struct {
	// Runtime is "containerd", "cri-o", "docker", "podman", "systemd" (a
	// unit outside containers) or "" (nothing recognised).
	Runtime string `json:"runtime,omitempty"`
	// ID is the full container id.
	ID string `json:"id,omitempty"`
	// Container is the container's name: the Kubernetes container name,
	// or Docker's name without its leading slash.
	Container string `json:"container,omitempty"`
	Image     string `json:"image,omitempty"`
	// Pod, PodNamespace and PodUID name the Kubernetes pod.
	Pod          string `json:"pod,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
	PodUID       string `json:"pod_uid,omitempty"`
	// Unit is the systemd unit (nginx.service) of a process outside
	// containers.
	Unit string `json:"unit,omitempty"`
	// Sandbox is set for a pod's sandbox (pause) container, the holder of
	// the pod's network namespace.
	Sandbox bool `json:"sandbox,omitempty"`
}

// PodName is "namespace/name" of the pod, or "" outside a pod.
func (w *Workload) PodName() string {
	if w == nil || w.Pod == "" {
		return ""
	}
	if w.PodNamespace == "" {
		return w.Pod
	}
	return w.PodNamespace + "/" + w.Pod
}

// ContainerName is the container's name, else its 12-character short id,
// else "" (a pod's sandbox has no container name of its own).
func (w *Workload) ContainerName() string {
	switch {
	case w == nil || w.Sandbox:
		return ""
	case w.Container != "":
		return w.Container
	}
	return ShortID(w.ID)
}

// Names is what every output says of a workload: its pod, the pod's
// namespace, its container (ContainerName) and its unit, empty when
// unknown. check's and sockets' JSON write them under these names; the
// metrics name PodNamespace "namespace" (docs/exporter.md).
type Names struct {
	Pod          string `json:"pod,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
	Container    string `json:"container,omitempty"`
	Unit         string `json:"unit,omitempty"`
}

// Names is w's Names; none for nil.
func (w *Workload) Names() Names {
	if w == nil {
		return Names{}
	}
	return Names{Pod: w.Pod, PodNamespace: w.PodNamespace, Container: w.ContainerName(), Unit: w.Unit}
}

// Workload is the workload n names (without its runtime's id): nil for
// none. A subject read back from JSON has its workload so.
func (n Names) Workload() *Workload {
	if n == (Names{}) {
		return nil
	}
	return &Workload{Pod: n.Pod, PodNamespace: n.PodNamespace, Container: n.Container, Unit: n.Unit}
}

// Label is w for people, unescaped: "shop/web-1 api" for a pod's
// container, "shop/web-1" for its sandbox, the container's name or short
// id, "nginx.service" for a unit, "" for nothing.
func (w *Workload) Label() string {
	if w == nil {
		return ""
	}
	if p := w.PodName(); p != "" {
		if c := w.ContainerName(); c != "" && w.Container != "" {
			return p + " " + c
		}
		return p
	}
	if c := w.ContainerName(); c != "" {
		return c
	}
	return w.Unit
}

// IsContainer reports whether w names a container (not only a unit).
func (w *Workload) IsContainer() bool { return w != nil && w.ID != "" }

// ShortID is the first 12 characters of a container id, as runtimes'
// listings show it.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Owner is the one rule for whose a socket is: its first (lowest) pid,
// 0 when the owner scan found none, and that process as s has it (nil
// when unknown). Outputs, rules and metrics all name this one.
func (s *Snapshot) Owner(sk *Socket) (int, *Proc) {
	pid := sk.Pids.First()
	if pid == 0 {
		return 0, nil
	}
	return pid, s.Procs[pid]
}

// WorkloadOf is the workload a socket is named by: its owner's (Owner),
// else its namespace's; nil when neither is known.
func (s *Snapshot) WorkloadOf(sk *Socket) *Workload {
	return WorkloadIn(&s.Netns, s.Procs, sk.Pids.First())
}

// WorkloadIn is the workload of process pid as procs has it, else ns's
// (pid 0: no process): WorkloadOf's rule, for a subject known by its pid
// (a finding's) or a socket streamed apart from its snapshot.
func WorkloadIn(ns *Netns, procs map[int]*Proc, pid int) *Workload {
	if p := procs[pid]; pid != 0 && p != nil && p.Workload != nil {
		return p.Workload
	}
	return ns.Workload
}
