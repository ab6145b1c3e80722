// SPDX-License-Identifier: Apache-2.0

package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/tcpdoctor/tcpdoctor", Version: "v0.0.0-20261127010000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-27T01:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	here := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name   string
		linked string
		bi     *debug.BuildInfo
		want   Info
		str    string
	}{
		{"release build", "v1.2.3", stamped,
			Info{Version: "v1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true, Date: "2026-11-27T01:00:00Z", GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"v1.2.3 (commit 0123456789ab+modified, 2026-11-27T01:00:00Z, go1.26.8 linux/arm64)"},
		{"go build in the repository", "", stamped,
			Info{Version: "v0.0.0-20261127010000-0123456789ab+dirty", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true, Date: "2026-11-27T01:00:00Z", GoVersion: "go1.26.8", Platform: "linux/arm64"},
			""},
		{"go install module@version", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}},
			Info{Version: "v1.2.3", GoVersion: "go1.26.8", Platform: here}, "v1.2.3 (go1.26.8 " + here + ")"},
		{"no vcs, devel", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			Info{Version: "dev", GoVersion: "go1.26.8", Platform: here}, ""},
		{"no build information", "", nil,
			Info{Version: "dev", GoVersion: runtime.Version(), Platform: here}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromBuildInfo(tc.linked, tc.bi)
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if tc.str != "" && got.String() != tc.str {
				t.Errorf("String() = %q, want %q", got.String(), tc.str)
			}
		})
	}
}

// TestGetInTest: a test binary records no commit, and no -ldflags set
// the version, so the version is the module's or "dev", never empty.
func TestGetInTest(t *testing.T) {
	in := Get()
	if in.Version == "" || in.GoVersion != runtime.Version() {
		t.Errorf("Get() = %+v", in)
	}
}
