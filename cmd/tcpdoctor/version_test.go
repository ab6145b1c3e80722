// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

// TestVersionOfBuiltBinary builds tcpdoctor as scripts/release.sh does
// (-trimpath, -buildid=, the version through -ldflags) and checks that
// `version --json` and `--version` say that version, and the commit and
// commit time git has for HEAD.
func TestVersionOfBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout (git rev-parse HEAD: %v): the commit cannot be checked", err)
	}
	when, err := exec.Command("git", "log", "-1", "--format=%ct").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "tcpdoctor")
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-o", bin,
		"-ldflags", "-buildid= -X github.com/tcpdoctor/tcpdoctor/internal/version.version=v9.8.7-test", ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("tcpdoctor version --json: %v", err)
	}
	var got version.Info
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("version --json: %v\n%s", err, out)
	}
	if got.Version != "v9.8.7-test" {
		t.Errorf("version = %q, want the -ldflags one v9.8.7-test", got.Version)
	}
	// What the toolchain stamped (go version -m) is what tcpdoctor must
	// say; in a plain checkout that is HEAD. (A git worktree, whose .git
	// is a file, gets no stamp from this Go: there only the agreement
	// with go version -m is checked.)
	stamp := map[string]string{}
	mv, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	for _, line := range strings.Split(string(mv), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "build")), "="); ok {
			stamp[k] = v
		}
	}
	if got.Commit != stamp["vcs.revision"] || got.Date != stamp["vcs.time"] {
		t.Errorf("commit %q date %q, the toolchain stamped %q %q", got.Commit, got.Date, stamp["vcs.revision"], stamp["vcs.time"])
	}
	if fi, err := os.Stat("../../.git"); err == nil && fi.IsDir() {
		if want := strings.TrimSpace(string(head)); got.Commit != want {
			t.Errorf("commit = %q, want HEAD %q", got.Commit, want)
		}
		secs, err := strconv.ParseInt(strings.TrimSpace(string(when)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Unix(secs, 0).UTC().Format(time.RFC3339); got.Date != want {
			t.Errorf("date = %q, want HEAD's commit time %q", got.Date, want)
		}
	} else {
		t.Logf("../../.git is not a directory (a worktree?): commit %q checked against go version -m only", got.Commit)
	}
	out, err = exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("tcpdoctor --version: %v", err)
	}
	if want := "tcpdoctor " + got.String() + "\n"; string(out) != want {
		t.Errorf("--version printed %q, want %q", out, want)
	}
}
