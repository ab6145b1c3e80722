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
