// SPDX-License-Identifier: Apache-2.0

// Package version says which build of tcpdoctor this is: the release's
// version (set by scripts/release.sh through -ldflags), and the commit,
// commit time and Go version the Go toolchain stamps into every binary
// (runtime/debug.ReadBuildInfo).
package version

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"
)

// version is the release's version, set at link time by
// scripts/release.sh:
//
//	-ldflags "-X github.com/tcpdoctor/tcpdoctor/internal/version.version=v1.2.3"
//
// Empty in any other build; Get then takes the module's version.
var version string

// Info is one build of tcpdoctor. Its JSON form is the `build` object of
// `check --json`, `version --json` and a snapshot file's header
// (docs/json.md, docs/snapshot-format.md).
type Info struct {
	// Version is the release version (v1.2.3), the module's version
	// when installed with `go install ...@v1.2.3` or stamped by the Go
	// toolchain from the repository, or "dev".
	Version string `json:"version"`
	// Commit is the git revision built from, empty when the build did
	// not record it (go test, a build outside a git checkout).
	Commit string `json:"commit,omitempty"`
	// Modified says the working tree had changes not committed.
	Modified bool `json:"modified,omitempty"`
	// Date is the commit's time (RFC 3339, UTC): a release's build date
	// is its commit's, so two builds of one commit are the same bytes.
	Date string `json:"date,omitempty"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"go"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns this binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(version, bi)
}

// FromBuildInfo makes an Info from a link-time version (empty if none)
// and the toolchain's build information (nil if the binary has none).
func FromBuildInfo(linked string, bi *debug.BuildInfo) Info {
	in := Info{Version: linked, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		if in.Version == "" {
			in.Version = "dev"
		}
		return in
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	goos, goarch := runtime.GOOS, runtime.GOARCH
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.time":
			in.Date = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	in.Platform = goos + "/" + goarch
	if in.Version == "" {
		in.Version = bi.Main.Version
	}
	if in.Version == "" || in.Version == "(devel)" {
		in.Version = "dev"
	}
	return in
}

// Short is the commit's first 12 characters, with "+modified" for a
// changed tree; empty when unknown.
func (i Info) Short() string {
	c := i.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if c != "" && i.Modified {
		c += "+modified"
	}
	return c
}

// String is the one-line form `tcpdoctor --version` prints:
// "v1.2.3 (commit 0123456789ab, 2026-11-27T01:00:00Z, go1.26.8 linux/amd64)".
func (i Info) String() string {
	parts := []string{}
	if c := i.Short(); c != "" {
		parts = append(parts, "commit "+c)
	}
	if i.Date != "" {
		parts = append(parts, i.Date)
	}
	parts = append(parts, strings.TrimSpace(i.GoVersion+" "+i.Platform))
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(parts, ", "))
}

// WriteText prints the build for people, one field a line: version,
// commit (and whether it had changes), the commit's time, Go and platform.
func (i Info) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "tcpdoctor\t%s\n", i.Version)
	commit := i.Commit
	if commit == "" {
		commit = "unknown (not recorded by this build)"
	} else if i.Modified {
		commit += " (with changes not committed)"
	}
	fmt.Fprintf(tw, "commit\t%s\n", commit)
	date := i.Date
	if date == "" {
		date = "unknown"
	}
	fmt.Fprintf(tw, "built\t%s\t(the commit's time)\n", date)
	fmt.Fprintf(tw, "go\t%s %s\n", i.GoVersion, i.Platform)
	return tw.Flush()
}
