// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// containers/storage is where Podman and CRI-O keep their containers:
// under the graph root (/var/lib/containers/storage by default), one
// directory per storage driver, "<driver>-containers" (overlay-containers,
// vfs-containers...), holds containers.json (every container's names,
// image and the runtime's metadata) and <id>/userdata/config.json (the OCI
// spec the runtime saved, with CRI-O's Kubernetes annotations).

// maxStorageIndex caps what is read of containers.json (about 600 bytes
// a container).
const maxStorageIndex = 32 << 20

// storageEntry is what containers.json says of one container.
type storageEntry struct {
	name, image string
	// pod and container are CRI-O's metadata: the Kubernetes container
	// name ("metadata-name"), and whether it is a pod's sandbox.
	crio, sandbox bool
	container     string
}

// info is the entry as an Info: Podman's name, or CRI-O's Kubernetes
// container name (the storage name, "k8s_api_web-1_shop_...", is
// CRI-O's own).
func (e storageEntry) info() Info {
	i := Info{Image: e.image, Container: e.name}
	if e.crio {
		i.Container, i.Sandbox = e.container, e.sandbox
		if e.sandbox {
			i.Container = ""
		}
	}
	return i
}

// parseStorageContainers reads containers/storage's containers.json: a
// JSON array of {id, names, image, metadata}, where metadata is a JSON
// string the runtime wrote ({"image-name", "name"} from Podman, with
// "pod-name", "metadata-name" and "pod" from CRI-O).
func parseStorageContainers(b []byte) (map[string]storageEntry, error) {
	var list []struct {
		ID       string   `json:"id"`
		Names    []string `json:"names"`
		Metadata string   `json:"metadata"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("containers: containers.json: %w", err)
	}
	out := make(map[string]storageEntry, len(list))
	for _, c := range list {
		if !isHexID(c.ID) {
			continue
		}
		var e storageEntry
		if len(c.Names) > 0 {
			e.name = c.Names[0]
		}
		var md struct {
			ImageName    string `json:"image-name"`
			PodName      string `json:"pod-name"`
			MetadataName string `json:"metadata-name"`
			Pod          bool   `json:"pod"`
		}
		// Metadata is the runtime's own; a container without it keeps
		// its name.
		if c.Metadata != "" && json.Unmarshal([]byte(c.Metadata), &md) == nil {
			e.image = md.ImageName
			if md.PodName != "" {
				e.crio, e.sandbox, e.container = true, md.Pod, md.MetadataName
			}
		}
		out[c.ID] = e
	}
	return out, nil
}

// storageIndex is a parsed containers.json, kept while the file's size
// and modification time stay the same, so a sample naming 200
// containers reads it once.
type storageIndex struct {
	size    int64
	mod     time.Time
	entries map[string]storageEntry
}

// storageIndex returns the parsed containers.json at path, from the
// cache when the file did not change.
func (r *Resolver) storageIndex(path string) (map[string]storageEntry, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("containers: containers.json: %w", err)
	}
	r.mu.Lock()
	c, ok := r.stores[path]
	r.mu.Unlock()
	if ok && c.size == st.Size() && c.mod.Equal(st.ModTime()) {
		return c.entries, nil
	}
	if st.Size() > maxStorageIndex {
		return nil, fmt.Errorf("containers: %s: larger than %d bytes", path, maxStorageIndex)
	}
	b, err := readLimited(path, maxStorageIndex)
	if err != nil {
		return nil, fmt.Errorf("containers: containers.json: %w", err)
	}
	entries, err := parseStorageContainers(b)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	// One index per storage driver directory: a handful at most.
	r.stores[path] = storageIndex{size: st.Size(), mod: st.ModTime(), entries: entries}
	r.mu.Unlock()
	return entries, nil
}

// storage finds ref's container in containers/storage (Podman, CRI-O):
// the spec's annotations from userdata/config.json, the name and image
// from containers.json. ok says a directory exists for it.
func (r *Resolver) storage(ref CgroupRef) (Info, bool, error) {
	if r.roots.Storage == "" {
		return Info{}, false, nil
	}
	ents, err := os.ReadDir(r.roots.Storage)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Info{}, false, nil
		}
		return Info{}, false, fmt.Errorf("containers/storage: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), "-containers") {
			continue
		}
		dir := filepath.Join(r.roots.Storage, e.Name())
		if _, err := os.Stat(filepath.Join(dir, ref.ID)); err != nil {
			continue
		}
		var errs []error
		var info Info
		b, err := readCapped(filepath.Join(dir, ref.ID, "userdata", "config.json"))
		if err == nil {
			info, err = parseSpec(b)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("userdata/config.json: %w", err))
		}
		idx, err := r.storageIndex(filepath.Join(dir, "containers.json"))
		if err != nil {
			errs = append(errs, err)
		} else if se, ok := idx[ref.ID]; ok {
			info = merge(info, se.info())
		} else {
			errs = append(errs, fmt.Errorf("container %s: not in %s", ShortID(ref.ID), filepath.Join(dir, "containers.json")))
		}
		if named(ref.Runtime, info) {
			// What is missing would add nothing people read: CRI-O's
			// annotations name its pod, Podman's containers.json its
			// container.
			errs = nil
		}
		return info, true, errors.Join(errs...)
	}
	return Info{}, false, nil
}

// named reports that a container of containers/storage is named as
// people know it: a CRI-O container by its pod (and container, or as the
// sandbox), a Podman one by its name.
func named(runtime string, i Info) bool {
	if i.Pod != "" && i.PodNamespace != "" && (i.Container != "" || i.Sandbox) {
		return true
	}
	return runtime == Podman && i.Container != ""
}
