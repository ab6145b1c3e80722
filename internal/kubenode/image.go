// SPDX-License-Identifier: Apache-2.0

package kubenode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// WriteImage writes an OCI image layout, tarred, to out: one image, FROM
// scratch, whose one layer holds the file at bin as /NAME (NAME being
// path.Base of entrypoint[0]), with entrypoint as its entrypoint, under
// the reference name ref (ctr images import names it so). No registry
// is involved: containerd imports the tar as it is.
func WriteImage(out, bin, ref string, entrypoint []string) error {
	if len(entrypoint) == 0 || len(entrypoint[0]) < 2 || entrypoint[0][0] != '/' {
		return fmt.Errorf("kubenode: image %s: entrypoint must start with an absolute path", ref)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("kubenode: image %s: %w", ref, err)
	}
	epoch := time.Unix(0, 0).UTC()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: entrypoint[0][1:], Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerDesc := descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       map[string]any{"Entrypoint": entrypoint},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	configDesc := descriptor("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []desc{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Annotations = map[string]string{"org.opencontainers.image.ref.name": ref}
	manifestDesc.Platform = map[string]string{"architecture": "amd64", "os": "linux"}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []desc{manifestDesc}})
	if err != nil {
		return err
	}

	var buf bytes.Buffer
	ow := tar.NewWriter(&buf)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layerDesc), layer.Bytes()},
		{blobPath(configDesc), config},
		{blobPath(manifestDesc), manifest},
	}
	for _, f := range files {
		if err := ow.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := ow.Write(f.data); err != nil {
			return err
		}
	}
	if err := ow.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("kubenode: image %s: %w", ref, err)
	}
	return nil
}

type desc struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func descriptor(mediaType string, data []byte) desc {
	sum := sha256.Sum256(data)
	return desc{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(data)}
}

func blobPath(d desc) string { return "blobs/sha256/" + d.Digest[len("sha256:"):] }
