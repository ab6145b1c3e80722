// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// maxStateFile caps what is read of one runtime state file (runc's
// state.json of a pod container is about 9 KiB).
const maxStateFile = 1 << 20

// readCapped reads a whole file of at most maxStateFile bytes.
func readCapped(path string) ([]byte, error) { return readLimited(path, maxStateFile) }

// readLimited reads a whole file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}

// ContainerdSpec reads the OCI bundle's config.json that containerd's
// runc shim keeps at <state>/io.containerd.runtime.v2.task/<ns>/<id>/
// (state is containerd's state directory, /run/containerd by default).
func ContainerdSpec(state, ns, id string) (Info, error) {
	b, err := readCapped(filepath.Join(state, "io.containerd.runtime.v2.task", ns, id, "config.json"))
	if err != nil {
		return Info{}, fmt.Errorf("containers: containerd config.json: %w", err)
	}
	return parseSpec(b)
}

// parseSpec reads an OCI runtime spec's annotations: the ones CRI writes
// (io.kubernetes.cri.*) and the Kubernetes labels other runtimes use.
func parseSpec(b []byte) (Info, error) {
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return Info{}, fmt.Errorf("containers: config.json: %w", err)
	}
	return fromLabels(spec.Annotations), nil
}

// RuncState reads runc's state.json at <root>/<ns>/<id>/ (root is the
// runc root containerd's shim uses, /run/containerd/runc by default).
func RuncState(root, ns, id string) (Info, error) {
	b, err := readCapped(filepath.Join(root, ns, id, "state.json"))
	if err != nil {
		return Info{}, fmt.Errorf("containers: runc state.json: %w", err)
	}
	return parseRuncState(b)
}

// parseRuncState reads runc's state.json: the container id and the
// spec's annotations, which runc keeps in config.labels as "k=v".
func parseRuncState(b []byte) (Info, error) {
	var st struct {
		ID     string `json:"id"`
		Config struct {
			Labels []string `json:"labels"`
		} `json:"config"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return Info{}, fmt.Errorf("containers: state.json: %w", err)
	}
	m := make(map[string]string, len(st.Config.Labels))
	for _, kv := range st.Config.Labels {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	i := fromLabels(m)
	i.ID = st.ID
	return i, nil
}

// DockerConfig reads Docker's <root>/containers/<id>/config.v2.json
// (root is /var/lib/docker by default).
func DockerConfig(root, id string) (Info, error) {
	b, err := readCapped(filepath.Join(root, "containers", id, "config.v2.json"))
	if err != nil {
		return Info{}, fmt.Errorf("containers: docker config.v2.json: %w", err)
	}
	return parseDockerConfig(b)
}

// parseDockerConfig reads Docker's config.v2.json: ID, Name ("/web"),
// Config.Image and Config.Labels, which hold the Kubernetes labels when
// the container was made by cri-dockerd.
func parseDockerConfig(b []byte) (Info, error) {
	var c struct {
		ID     string
		Name   string
		Config struct {
			Image  string
			Labels map[string]string
		}
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return Info{}, fmt.Errorf("containers: config.v2.json: %w", err)
	}
	i := fromLabels(c.Config.Labels)
	i.Runtime, i.ID = Docker, c.ID
	if i.Container == "" && !i.Sandbox {
		i.Container = strings.TrimPrefix(c.Name, "/")
	}
	if i.Image == "" {
		i.Image = c.Config.Image
	}
	return i, nil
}

// Label and annotation keys read. CRI (containerd) writes the
// io.kubernetes.cri.* annotations into the OCI spec; CRI-O writes the
// io.kubernetes.pod.*, io.kubernetes.container.name and
// io.kubernetes.cri-o.* annotations into its own; cri-dockerd writes
// the io.kubernetes.pod.* and io.kubernetes.container.name labels, and
// io.kubernetes.docker.type "podsandbox" on the sandbox.
const (
	criType         = "io.kubernetes.cri.container-type"
	criSandboxName  = "io.kubernetes.cri.sandbox-name"
	criSandboxNS    = "io.kubernetes.cri.sandbox-namespace"
	criSandboxUID   = "io.kubernetes.cri.sandbox-uid"
	criContainer    = "io.kubernetes.cri.container-name"
	criImage        = "io.kubernetes.cri.image-name"
	kubePodName     = "io.kubernetes.pod.name"
	kubePodNS       = "io.kubernetes.pod.namespace"
	kubePodUID      = "io.kubernetes.pod.uid"
	kubeContainer   = "io.kubernetes.container.name"
	dockershimType  = "io.kubernetes.docker.type"
	crioType        = "io.kubernetes.cri-o.ContainerType"
	crioImage       = "io.kubernetes.cri-o.ImageName"
	dockerSandboxNm = "POD" // cri-dockerd's and CRI-O's container name for the sandbox
)

// fromLabels reads the Kubernetes names from annotations or labels.
func fromLabels(m map[string]string) Info {
	first := func(keys ...string) string {
		for _, k := range keys {
			if v := m[k]; v != "" {
				return v
			}
		}
		return ""
	}
	i := Info{
		Pod:          first(criSandboxName, kubePodName),
		PodNamespace: first(criSandboxNS, kubePodNS),
		PodUID:       first(criSandboxUID, kubePodUID),
		Container:    first(criContainer, kubeContainer),
		Image:        first(criImage, crioImage),
	}
	if m[criType] == "sandbox" || m[crioType] == "sandbox" || m[dockershimType] == "podsandbox" {
		i.Sandbox = true
		if i.Container == dockerSandboxNm {
			i.Container = ""
		}
	}
	return i
}

// errNoState says no runtime state was found for a container id.
var errNoState = errors.New("no runtime state found")
