// Package containers names the container, Kubernetes pod or systemd unit
// a process or a network namespace belongs to, from files only: the
// process's cgroup path and the runtime's own state files (containerd's
// OCI bundle config.json, runc's state.json, Docker's config.v2.json).
// It makes no call to a runtime socket or an API server. docs/containers.md
// says which sources are read, in which order, and on which runtimes this
// was tested for real.
package containers

import "github.com/tcpdoctor/tcpdoctor/internal/textsafe"

// Runtimes, as Info.Runtime names them.
const (
	Containerd = "containerd"
	CRIO       = "cri-o"
	Docker     = "docker"
	Podman     = "podman"
	Systemd    = "systemd"
)

// Info is what is known of the container, pod or unit a process runs in.
// Empty fields are unknown.
type Info struct {
	// Runtime is Containerd, CRIO, Docker, Podman, Systemd (a unit outside
	// containers) or "" (nothing recognised).
	Runtime string
	// ID is the full container id.
	ID string
	// Name is the container's name: the Kubernetes container name, or
	// Docker's Name without its leading slash.
	Name  string
	Image string
	// Pod, PodNamespace and PodUID name the Kubernetes pod.
	Pod          string
	PodNamespace string
	PodUID       string
	// Unit is the systemd unit (nginx.service) of a process outside
	// containers.
	Unit string
	// Sandbox is set for a pod's sandbox (pause) container, the holder of
	// the pod's network namespace.
	Sandbox bool
}

// String formats i for people: "shop/web-1 api" for a pod's container,
// "shop/web-1" for its sandbox, the container's name, "nginx.service" for
// a unit, the 12-character short id when nothing else is known, "" for
// nothing. Text from files is escaped for a terminal.
func (i Info) String() string {
	var s string
	switch {
	case i.Pod != "":
		s = i.Pod
		if i.PodNamespace != "" {
			s = i.PodNamespace + "/" + s
		}
		if i.Name != "" && !i.Sandbox {
			s += " " + i.Name
		}
	case i.Name != "":
		s = i.Name
	case i.ID != "":
		s = ShortID(i.ID)
	case i.Unit != "":
		s = i.Unit
	}
	return textsafe.String(s)
}

// ShortID is the first 12 characters of a container id, as runtimes'
// listings show it.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// IsContainer reports whether i names a container (not only a unit).
func (i Info) IsContainer() bool { return i.ID != "" }
