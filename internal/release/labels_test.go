// SPDX-License-Identifier: Apache-2.0

package release

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImageLabels: every platform's image config in the OCI archive says
// its licence (org.opencontainers.image.licenses) and version.
func TestImageLabels(t *testing.T) {
	dir, ver, semver := artifacts(t)
	blobs := ociBlobs(t, filepath.Join(dir, "tcpdoctor_"+semver+"_oci.tar"))
	type desc struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
	}
	type node struct {
		MediaType string `json:"mediaType"`
		Manifests []desc `json:"manifests"`
		Config    *desc  `json:"config"`
	}
	configs := 0
	var walk func(raw []byte, depth int)
	walk = func(raw []byte, depth int) {
		var n node
		if err := json.Unmarshal(raw, &n); err != nil || depth > 4 {
			t.Fatalf("OCI archive: %v (depth %d)", err, depth)
		}
		for _, m := range n.Manifests {
			walk(blobs[m.Digest], depth+1)
		}
		if n.Config == nil {
			return
		}
		var cf struct {
			Config struct{ Labels map[string]string } `json:"config"`
		}
		if err := json.Unmarshal(blobs[n.Config.Digest], &cf); err != nil {
			t.Fatalf("config %s: %v", n.Config.Digest, err)
		}
		configs++
		if got := cf.Config.Labels["org.opencontainers.image.licenses"]; got != "Apache-2.0" {
			t.Errorf("config %s: licenses label %q, want Apache-2.0", n.Config.Digest, got)
		}
		if got := cf.Config.Labels["org.opencontainers.image.version"]; got != ver {
			t.Errorf("config %s: version label %q, want %s", n.Config.Digest, got, ver)
		}
	}
	walk(blobs["index.json"], 0)
	if configs != 2 {
		t.Errorf("%d image configs, want 2 (amd64, arm64)", configs)
	}
}

// ociBlobs reads an OCI layout tar: index.json and every blob by digest
// (layers skipped: only JSON is asked for).
func ociBlobs(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg || h.Size > 1<<20 {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case name == "index.json":
			out[name] = b
		case strings.HasPrefix(name, "blobs/sha256/"):
			out["sha256:"+strings.TrimPrefix(name, "blobs/sha256/")] = b
		}
	}
}
