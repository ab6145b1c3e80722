// SPDX-License-Identifier: Apache-2.0

// Command ociimage writes tcpdoctor's container image without a container
// daemon: one image per platform, FROM scratch with the static binary as
// /tcpdoctor, and a multi-arch OCI index over them, as an OCI image
// layout tarred reproducibly (scripts/release.sh runs it; docs/release.md).
//
//	go run ./ociimage -version v1.2.3 -revision COMMIT -out image.tar \
//	    -bin linux/amd64=PATH -bin linux/arm64=PATH
//
// Every time in it (layer files, image configs, history) is
// SOURCE_DATE_EPOCH's, which it requires, so two runs give the same bytes.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type bins map[string]string // "linux/amd64" -> path

func (b bins) String() string { return fmt.Sprint(map[string]string(b)) }

func (b bins) Set(s string) error {
	plat, path, ok := strings.Cut(s, "=")
	if !ok || !strings.HasPrefix(plat, "linux/") {
		return fmt.Errorf("want linux/ARCH=PATH, got %q", s)
	}
	b[plat] = path
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	ver := fs.String("version", "", "the release's version (the image's tag)")
	rev := fs.String("revision", "", "the git commit (org.opencontainers.image.revision)")
	out := fs.String("out", "", "the OCI layout tarball to write")
	b := bins{}
	fs.Var(b, "bin", "linux/ARCH=PATH of a static binary (repeat per platform)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ver == "" || *out == "" || len(b) == 0 {
		return errors.New("-version, -out and at least one -bin are required")
	}
	epoch, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return fmt.Errorf("SOURCE_DATE_EPOCH: %w (the commit's time, for every date in the image)", err)
	}
	when := time.Unix(epoch, 0).UTC()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	plats := make([]string, 0, len(b))
	for p := range b {
		plats = append(plats, p)
	}
	sort.Strings(plats)
	for _, p := range plats {
		img, err := image(b[p], strings.TrimPrefix(p, "linux/"), *ver, *rev, when)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: strings.TrimPrefix(p, "linux/")},
				Annotations: map[string]string{"org.opencontainers.image.version": *ver}},
		})
	}
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	// The tag alone as the ref name (the OCI image layout's convention);
	// an importer adds the repository (ctr images import --base-name).
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": *ver})); err != nil {
		return err
	}
	return tarDir(dir, *out, when)
}

// image is one platform's image: the binary at /tcpdoctor in one layer.
func image(bin, arch, ver, rev string, when time.Time) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var lt bytes.Buffer
	tw := tar.NewWriter(&lt)
	if err := tw.WriteHeader(&tar.Header{Name: "tcpdoctor", Mode: 0o755, Size: int64(len(data)), ModTime: when, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := lt.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: when}, CreatedBy: "scripts/release.sh: the static binary as /tcpdoctor, FROM scratch",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: when}
	cf.Config.Entrypoint = []string{"/tcpdoctor"}
	cf.Config.Cmd = []string{"serve", "--web.listen-address=:9477", "--all-netns"}
	cf.Config.ExposedPorts = map[string]struct{}{"9477/tcp": {}}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "tcpdoctor",
		"org.opencontainers.image.description": "Why TCP services are slow or fail to connect, with kernel evidence and the fix",
		"org.opencontainers.image.version":     ver,
		"org.opencontainers.image.revision":    rev,
		"org.opencontainers.image.created":     when.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	return mutate.ConfigFile(img, cf)
}

// tarDir writes dir's files as a tar with sorted names, root ownership
// and when as every time.
func tarDir(dir, out string, when time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, p := range names {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: when, Format: tar.FormatPAX, Mode: 0o644, Typeflag: tar.TypeReg}
		if fi.IsDir() {
			h.Name += "/"
			h.Mode, h.Typeflag = 0o755, tar.TypeDir
		} else {
			h.Size = fi.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
