// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/outfile"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
)

// These run trace and record live with --bpf off on port 1, where nothing
// listens: sock_diag answers without root, and no traffic is made.

// noTemps fails when an output's temporary file is left in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left in %s", e.Name(), dir)
		}
	}
}

func perm(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// victimFile is a file an output must not change.
func victimFile(t *testing.T, dir string) (path string, unchanged func()) {
	t.Helper()
	path = filepath.Join(dir, "victim")
	if err := os.WriteFile(path, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		t.Helper()
		if b, err := os.ReadFile(path); err != nil || string(b) != "keep me\n" {
			t.Errorf("victim changed: %.60q, %v", b, err)
		}
	}
}

// TestTraceOutputPathFailsAtOnce: an output file that cannot be created
// is the user's argument: exit 2 before recording, naming it.
func TestTraceOutputPathFailsAtOnce(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "nonexistent", "x")
	for _, flag := range []string{"--html", "-o"} {
		start := time.Now()
		code, _, errOut := run(t, "trace", "--duration", "2s", "--bpf", "off", "--port", "1", flag, bad)
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s %s: failed after %v: it recorded first", flag, bad, took.Round(time.Millisecond))
		}
		if code != ExitUsage || !strings.Contains(errOut, bad) || !strings.Contains(errOut, "no such file or directory") {
			t.Errorf("%s %s: exit %d, stderr %q; want %d naming the file and why", flag, bad, code, errOut, ExitUsage)
		}
	}
}

// TestTraceHTMLWriteFailsAfterTable: a page that cannot be written (a full
// disk: /dev/full) still leaves the table on stdout, then exit 3 naming it.
func TestTraceHTMLWriteFailsAfterTable(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	code, out, errOut := run(t, "trace", "--from", traceFile(t), "--bandwidth", "100mbit", "--html", "/dev/full")
	if !strings.Contains(out, "PEER WND") || !strings.Contains(out, "waiting for the peer's receive window") {
		t.Errorf("no table on stdout:\n%s", out)
	}
	if code != ExitCollect || !strings.Contains(errOut, "--html: write /dev/full") || !strings.Contains(errOut, "no space left on device") {
		t.Errorf("exit %d, stderr %q; want %d naming --html /dev/full and why", code, errOut, ExitCollect)
	}
}

// TestTraceRecordingWriteFails: when -o fails mid-recording (/dev/full
// refuses its first line) the recording goes on and its table is printed.
func TestTraceRecordingWriteFails(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	code, out, errOut := run(t, "trace", "--duration", "300ms", "--rate", "20", "--bpf", "off", "--port", "1", "-o", "/dev/full")
	if !strings.Contains(out, "no connection matched port 1") || !strings.Contains(errOut, "note: no connection matched port 1: nothing was traced") {
		t.Errorf("no table on stdout: %q (stderr %q)", out, errOut)
	}
	if !strings.Contains(errOut, "samples") {
		t.Errorf("recording stopped at the failed write: %q", errOut)
	}
	if code != ExitCollect || !strings.Contains(errOut, "-o: write /dev/full") || !strings.Contains(errOut, "no space left on device") {
		t.Errorf("exit %d, stderr %q; want %d naming -o /dev/full and why", code, errOut, ExitCollect)
	}
}

// TestTraceOutputsWhole: -o and --html replace an old file whole, mode
// 0600, leave no temporary file, and refuse a symlink (exit 2) leaving
// its target as it was.
func TestTraceOutputsWhole(t *testing.T) {
	dir := t.TempDir()
	rec, html := filepath.Join(dir, "rec.jsonl"), filepath.Join(dir, "r.html")
	for _, p := range []string{rec, html} {
		if err := os.WriteFile(p, []byte("an old file, longer than nothing\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, _, errOut := run(t, "trace", "--duration", "300ms", "--rate", "20", "--bpf", "off", "--port", "1", "-o", rec)
	if code != ExitOK {
		t.Fatalf("trace -o: exit %d: %s", code, errOut)
	}
	f, err := os.Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Read(f)
	f.Close()
	if err != nil || tr.Header.Filter != "port 1" {
		t.Errorf("-o file does not read back: %v", err)
	}
	if code, _, errOut := run(t, "trace", "--from", traceFile(t), "--html", html); code != ExitFindings {
		t.Fatalf("trace --html: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(html); !strings.HasPrefix(strings.ToLower(string(b)), "<!doctype html") {
		t.Errorf("page not replaced: %.60q", b)
	}
	for _, p := range []string{rec, html} {
		if m := perm(t, p); m != outfile.Mode {
			t.Errorf("%s: mode %v, want %v", p, m, os.FileMode(outfile.Mode))
		}
	}
	noTemps(t, dir)

	victim, unchanged := victimFile(t, dir)
	link := filepath.Join(dir, "link.html")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "trace", "--from", traceFile(t), "--html", link)
	if code != ExitUsage || out != "" || !strings.Contains(errOut, "symbolic link") {
		t.Errorf("--html through a symlink: exit %d, stdout %q, stderr %q; want %d and why", code, out, errOut, ExitUsage)
	}
	unchanged()
}

// TestRecordOutputFile: record -o refuses a symlink at the path (exit 2,
// before collecting), leaving its target as it was, and creates its file
// mode 0600. The directory is not sticky, so fs.protected_symlinks does
// not apply: only tcpdoctor's refusal protects the victim.
func TestRecordOutputFile(t *testing.T) {
	dir := t.TempDir()
	victim, unchanged := victimFile(t, dir)
	link := filepath.Join(dir, "x")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "record", "--count", "1", "--bpf", "off", "--no-owners", "-o", link)
	if code != ExitUsage || !strings.Contains(errOut, link) || !strings.Contains(errOut, "symbolic link") {
		t.Errorf("record -o symlink: exit %d, stderr %q; want %d naming it", code, errOut, ExitUsage)
	}
	unchanged()

	out := filepath.Join(dir, "new.jsonl")
	if code, _, errOut := run(t, "record", "--count", "1", "--bpf", "off", "--no-owners", "-o", out); code != ExitOK {
		t.Fatalf("record: exit %d: %s", code, errOut)
	}
	if m := perm(t, out); m != outfile.Mode {
		t.Errorf("record -o created mode %v, want %v", m, os.FileMode(outfile.Mode))
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if snaps, err := snapshot.ReadAll(f); err != nil || len(snaps) != 1 {
		t.Errorf("recorded %d snapshots, %v", len(snaps), err)
	}
}
