// SPDX-License-Identifier: Apache-2.0

// Package containers names the container, Kubernetes pod or systemd unit
// a process or a network namespace belongs to, from files only: the
// process's cgroup path and the runtime's own state files (containerd's
// OCI bundle config.json, runc's state.json, Docker's config.v2.json,
// containers/storage's containers.json and saved spec for Podman and CRI-O).
// It makes no call to a runtime socket or an API server. docs/containers.md
// says which sources are read, in which order, and on which runtimes this
// was tested for real.
package containers

import (
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// Runtimes, as Info.Runtime names them.
const (
	Containerd = "containerd"
	CRIO       = "cri-o"
	Docker     = "docker"
	Podman     = "podman"
	Systemd    = "systemd"
)

// Info is what is known of the container, pod or unit a process runs in:
// the snapshot's Workload, which stores it.
type Info = snapshot.Workload

// String formats i for people as Workload.Label does, escaped for a
// terminal (text from files).
func String(i Info) string { return textsafe.String(i.Label()) }

// ShortID is the first 12 characters of a container id, as runtimes'
// listings show it.
func ShortID(id string) string { return snapshot.ShortID(id) }
