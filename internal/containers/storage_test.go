// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// idFromCgroup is the container id of a captured cgroup file.
func idFromCgroup(t testing.TB, file []byte) string {
	t.Helper()
	ref := parseCgroup(file)
	if ref.ID == "" {
		t.Fatalf("no container id in %q", file)
	}
	return ref.ID
}

// podmanTree lays out the captured Podman store: "web" (pid 30) and
// "api" (pid 31, CRI-O's annotations, the kubelet's cgroup parent) under
// <storage>/overlay-containers.
func podmanTree(t testing.TB) (tr *tree, webID, apiID string) {
	t.Helper()
	tr = newTree(t)
	tr.roots.Storage = filepath.Join(filepath.Dir(tr.roots.Proc), "var", "lib", "containers", "storage")
	dir := filepath.Join(tr.roots.Storage, "overlay-containers")
	tr.write(filepath.Join(dir, "containers.json"), readFixture(t, "podman", "containers.json"))
	ids := map[string]string{}
	for pid, role := range map[int]string{30: "web", 31: "api"} {
		cg := readFixture(t, "podman", role+".cgroup")
		ids[role] = idFromCgroup(t, cg)
		tr.proc(pid, 1, string(cg), uint64(pid))
		tr.write(filepath.Join(dir, ids[role], "userdata", "config.json"), readFixture(t, "podman", role+".config.json"))
	}
	return tr, ids["web"], ids["api"]
}

// TestForPidPodmanCaptured: Podman's name and image come from
// containers.json; the Kubernetes annotations CRI-O writes into the
// saved spec name the pod.
func TestForPidPodmanCaptured(t *testing.T) {
	tr, webID, apiID := podmanTree(t)
	r := NewResolver(Options{Roots: tr.roots})
	if got, err := r.ForPid(30); err != nil || got != (Info{Runtime: Podman, ID: webID, Container: "web", Image: "localhost/tcpdoctor-busybox:1"}) {
		t.Errorf("ForPid(web) = %#v, %v", got, err)
	}
	want := Info{Runtime: Podman, ID: apiID, Container: "api", Image: "registry.example/shop/api:1.4", Pod: "web-1", PodNamespace: "shop", PodUID: rtUID}
	if got, err := r.ForPid(31); err != nil || got != want {
		t.Errorf("ForPid(api) = %#v, %v; want %#v", got, err, want)
	}
	// Without a graph root nothing is read: the id, and why.
	tr.roots.Storage = ""
	if got, err := NewResolver(Options{Roots: tr.roots}).ForPid(30); got.ID != webID || got.Container != "" || !errors.Is(err, errNoState) {
		t.Errorf("ForPid(web) without storage = %#v, %v", got, err)
	}
}

// TestForPidDockerCaptured: the containers a real dockerd ran, one
// plain, one labelled as cri-dockerd labels a pod's container.
func TestForPidDockerCaptured(t *testing.T) {
	tr := newTree(t)
	for pid, role := range map[int]string{40: "web", 41: "api"} {
		cg := readFixture(t, "docker", "real-"+role+".cgroup")
		tr.proc(pid, 1, string(cg), uint64(pid))
		tr.write(filepath.Join(tr.roots.Docker, "containers", idFromCgroup(t, cg), "config.v2.json"), readFixture(t, "docker", "real-"+role+".config.v2.json"))
	}
	r := NewResolver(Options{Roots: tr.roots})
	if got, err := r.ForPid(40); err != nil || got.Runtime != Docker || got.Container != "web" || got.Image != "tcpdoctor-busybox:1" {
		t.Errorf("ForPid(web) = %#v, %v", got, err)
	}
	if got, err := r.ForPid(41); err != nil || String(got) != "shop/web-1 api" || got.PodUID != rtUID || got.Runtime != Docker {
		t.Errorf("ForPid(api) = %#v (%q), %v", got, String(got), err)
	}
}

// TestStorageFaults: a store cut short, gone or unreadable keeps the id
// from the cgroup path and says what is missing; what could be read
// still names the container.
func TestStorageFaults(t *testing.T) {
	for _, c := range []struct {
		name   string
		break_ func(tr *tree, dir, webID string)
		web    string // the container name still found
		errHas string // "" for no error
	}{
		{"containers.json truncated", func(tr *tree, dir, _ string) {
			b := readFixture(t, "podman", "containers.json")
			tr.write(filepath.Join(dir, "containers.json"), b[:len(b)/2])
		}, "", "containers.json: unexpected end of JSON input"},
		{"containers.json vanished", func(_ *tree, dir, _ string) {
			_ = os.Remove(filepath.Join(dir, "containers.json"))
		}, "", "containers.json"},
		{"config.json truncated (Podman's name stands)", func(tr *tree, dir, webID string) {
			tr.write(filepath.Join(dir, webID, "userdata", "config.json"), []byte(`{"annotations": {`))
		}, "web", ""},
		{"container dir vanished", func(_ *tree, dir, webID string) {
			_ = os.RemoveAll(filepath.Join(dir, webID))
		}, "", "no runtime state found"},
		{"container missing from containers.json", func(tr *tree, dir, _ string) {
			tr.write(filepath.Join(dir, "containers.json"), []byte("[]"))
		}, "", "not in"},
		{"graph root unreadable", func(tr *tree, _, _ string) {
			_ = os.RemoveAll(tr.roots.Storage)
			tr.write(tr.roots.Storage, []byte("x")) // a file where the directory is: root reads any mode
		}, "", "containers/storage:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, webID, _ := podmanTree(t)
			c.break_(tr, filepath.Join(tr.roots.Storage, "overlay-containers"), webID)
			got, err := NewResolver(Options{Roots: tr.roots}).ForPid(30)
			if got.ID != webID || got.Runtime != Podman || got.Container != c.web {
				t.Errorf("ForPid = %#v; want id %s, container %q", got, ShortID(webID), c.web)
			}
			switch {
			case c.errHas == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.errHas != "" && (err == nil || !strings.Contains(err.Error(), c.errHas) || !strings.HasPrefix(err.Error(), "containers: pid 30: ")):
				t.Errorf("error %v, want one containing %q", err, c.errHas)
			}
		})
	}
}

// TestStorageIndexCached: containers.json is parsed once while it does
// not change, and again when it does.
func TestStorageIndexCached(t *testing.T) {
	tr, _, _ := podmanTree(t)
	r := NewResolver(Options{Roots: tr.roots})
	path := filepath.Join(tr.roots.Storage, "overlay-containers", "containers.json")
	a, err := r.storageIndex(path)
	if err != nil || len(a) != 2 {
		t.Fatalf("index %v, %v", a, err)
	}
	a["x"] = storageEntry{name: "marker"}
	if b, _ := r.storageIndex(path); b["x"].name != "marker" {
		t.Error("unchanged containers.json parsed again")
	}
	tr.write(path, []byte(`[{"id":"`+hexA+`","names":["new"]}]`))
	if b, err := r.storageIndex(path); err != nil || b[hexA].name != "new" || len(b) != 1 {
		t.Errorf("changed containers.json: %v, %v", b, err)
	}
}

// CRI-O's containers.json metadata: the Kubernetes container name, and
// the sandbox without one.
func TestParseStorageContainersCRIO(t *testing.T) {
	b := []byte(`[{"id":"` + hexA + `","names":["k8s_api_web-1_shop_` + uidA + `_0"],"metadata":"{\"pod-name\":\"k8s_POD_web-1_shop_` + uidA + `_0\",\"pod-id\":\"` + hexA + `\",\"image-name\":\"registry.example/shop/api:1.4\",\"name\":\"k8s_api_web-1_shop_` + uidA + `_0\",\"metadata-name\":\"api\"}"},
	{"id":"` + strings.Repeat("b", 64) + `","names":["k8s_POD_web-1_shop_` + uidA + `_0"],"metadata":"{\"pod-name\":\"k8s_POD_web-1_shop_` + uidA + `_0\",\"name\":\"k8s_POD_web-1_shop_` + uidA + `_0\",\"metadata-name\":\"web-1\",\"pod\":true}"},
	{"id":"../../etc","names":["evil"]}]`)
	m, err := parseStorageContainers(b)
	if err != nil || len(m) != 2 {
		t.Fatalf("%v, %v", m, err)
	}
	if got := m[hexA].info(); got != (Info{Container: "api", Image: "registry.example/shop/api:1.4"}) {
		t.Errorf("container: %#v", got)
	}
	if got := m[strings.Repeat("b", 64)].info(); got != (Info{Sandbox: true}) {
		t.Errorf("sandbox: %#v", got)
	}
}

func FuzzParseStorageContainers(f *testing.F) {
	seedFiles(f, "podman/containers.json")
	f.Add([]byte(`[{"id":"` + hexA + `","names":[],"metadata":"{\"pod-name\":\"p\",\"pod\":true}"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseStorageContainers(b)
		if err != nil && m != nil {
			t.Fatalf("error %v with %v", err, m)
		}
		for id, e := range m {
			if !isHexID(id) {
				t.Fatalf("id %q kept", id)
			}
			_ = String(e.info())
		}
	})
}
