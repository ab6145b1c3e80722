// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

var testBuild = version.Info{Version: "v1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567",
	Date: "2026-11-27T01:00:00Z", GoVersion: "go1.26.8", Platform: "linux/amd64"}

// runBuild is run with Env.Build set, as DefaultEnv sets it.
func runBuild(t *testing.T, b version.Info, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &Env{
		Stdout: &out, Stderr: &errb,
		Getenv:   func(string) string { return "" },
		Now:      time.Now,
		Sleep:    func(ctx context.Context, d time.Duration) error { return window.Sleep(ctx, d) },
		ProcRoot: "/proc",
		Build:    b,
	}
	code := Main(args, e)
	return code, out.String(), errb.String()
}

func TestVersionCommand(t *testing.T) {
	code, out, _ := runBuild(t, testBuild, "version")
	want := "tcpdoctor  v1.2.3\ncommit     0123456789abcdef0123456789abcdef01234567\nbuilt      2026-11-27T01:00:00Z  (the commit's time)\ngo         go1.26.8 linux/amd64\n"
	if code != ExitOK || out != want {
		t.Errorf("version: code %d\n%q\nwant\n%q", code, out, want)
	}
	code, out, _ = runBuild(t, testBuild, "--version")
	if want := "tcpdoctor v1.2.3 (commit 0123456789ab, 2026-11-27T01:00:00Z, go1.26.8 linux/amd64)\n"; code != ExitOK || out != want {
		t.Errorf("--version: code %d %q, want %q", code, out, want)
	}
	code, out, _ = runBuild(t, testBuild, "version", "--json")
	var got version.Info
	if err := json.Unmarshal([]byte(out), &got); code != ExitOK || err != nil || got != testBuild {
		t.Errorf("version --json: code %d %v %+v", code, err, got)
	}
	// A build not known says dev, and the Go running this test.
	if code, out, _ = runBuild(t, version.Info{}, "version"); code != ExitOK || !strings.HasPrefix(out, "tcpdoctor  dev\n") {
		t.Errorf("unknown build: code %d %q", code, out)
	}
	if code, _, _ = runBuild(t, testBuild, "version", "extra"); code != ExitUsage {
		t.Errorf("version extra: code %d, want %d", code, ExitUsage)
	}
}

// TestBuildInJSON: check --json and a recording's header carry the build.
func TestBuildInJSON(t *testing.T) {
	_, out, _ := runBuild(t, testBuild, "check", "--json", "--from", overflowFixture)
	var rep struct {
		Version int           `json:"version"`
		Build   *version.Info `json:"build"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("check --json: %v\n%s", err, out)
	}
	if rep.Version != 1 || rep.Build == nil || *rep.Build != testBuild {
		t.Errorf("check --json: version %d build %+v, want %+v", rep.Version, rep.Build, testBuild)
	}
	file := filepath.Join(t.TempDir(), "rec.jsonl")
	if code, _, errOut := runBuild(t, testBuild, "record", "--bpf", "off", "--no-owners", "--count", "1", "-o", file); code != ExitOK {
		t.Fatalf("record: code %d: %s", code, errOut)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := snapshot.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if h := rd.Header; h.Tool != "tcpdoctor v1.2.3" || h.Build == nil || *h.Build != testBuild {
		t.Errorf("record header: %+v build %+v", h, h.Build)
	}
}
