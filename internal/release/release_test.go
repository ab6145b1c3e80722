// SPDX-License-Identifier: Apache-2.0

package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/version"
)

// Set by scripts/release-test.sh.
const (
	envDir     = "TCPDOCTOR_RELEASE_DIR"  // scripts/release.sh's OUTDIR
	envDir2    = "TCPDOCTOR_RELEASE_DIR2" // a second run's, for reproducibility
	envVersion = "TCPDOCTOR_RELEASE_VERSION"
	envHelm    = "TCPDOCTOR_HELM" // a helm binary
)

const fixture = "../rules/testdata/listen-overflow/fires.jsonl"

// artifacts is the release directory and version, or skips.
func artifacts(t *testing.T) (dir, ver, semver string) {
	t.Helper()
	dir, ver = os.Getenv(envDir), os.Getenv(envVersion)
	if dir == "" || ver == "" {
		t.Skipf("%s and %s unset: scripts/release-test.sh builds the release and runs these checks", envDir, envVersion)
	}
	return dir, ver, strings.TrimPrefix(ver, "v")
}

func head(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// sums reads a SHA256SUMS file: name -> hex digest.
func sums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		m[name] = sum
	}
	return m
}

// TestChecksums: SHA256SUMS names every artifact with its true digest,
// and a second run of scripts/release.sh gave the same bytes.
func TestChecksums(t *testing.T) {
	dir, _, semver := artifacts(t)
	want := []string{
		"tcpdoctor_" + semver + "_linux_amd64.tar.gz", "tcpdoctor_" + semver + "_linux_arm64.tar.gz",
		"tcpdoctor_" + semver + "_oci.tar", "tcpdoctor-" + semver + ".tgz",
	}
	got := sums(t, filepath.Join(dir, "SHA256SUMS"))
	for _, name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("SHA256SUMS has no %s", name)
		}
	}
	var debs, rpms int
	for name, sum := range got {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s: digest differs from SHA256SUMS", name)
		}
		if strings.HasSuffix(name, ".deb") {
			debs++
		}
		if strings.HasSuffix(name, ".rpm") {
			rpms++
		}
	}
	if debs != 2 || rpms != 2 {
		t.Errorf("%d .deb and %d .rpm, want 2 of each", debs, rpms)
	}
	dir2 := os.Getenv(envDir2)
	if dir2 == "" {
		t.Logf("%s unset: reproducibility not checked", envDir2)
		return
	}
	a, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	b, _ := os.ReadFile(filepath.Join(dir2, "SHA256SUMS"))
	if !bytes.Equal(a, b) {
		t.Errorf("two runs of scripts/release.sh differ:\n%s\n---\n%s", a, b)
	}
}

// TestArchive: each archive holds the binary, README, docs, man pages,
// completions and licences under one directory, owned by root, dated
// the commit's time.
func TestArchive(t *testing.T) {
	dir, ver, semver := artifacts(t)
	for _, arch := range []string{"amd64", "arm64"} {
		top := "tcpdoctor_" + semver + "_linux_" + arch + "/"
		f, err := os.Open(filepath.Join(dir, top[:len(top)-1]+".tar.gz"))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		seen := map[string]bool{}
		var mtime time.Time
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(h.Name, top) || h.Uid != 0 || h.Gid != 0 {
				t.Errorf("%s: entry %s uid %d gid %d", arch, h.Name, h.Uid, h.Gid)
			}
			if mtime.IsZero() {
				mtime = h.ModTime
			} else if !h.ModTime.Equal(mtime) {
				t.Errorf("%s: %s dated %s, the others %s", arch, h.Name, h.ModTime, mtime)
			}
			seen[strings.TrimPrefix(h.Name, top)] = true
		}
		f.Close()
		for _, p := range []string{"tcpdoctor", "tcpdoctor-lab", "README.md", "LICENSE", "NOTICE", "docs/exporter.md", "docs/rules/listen-overflow.md",
			"man/man1/tcpdoctor.1.gz", "man/man1/tcpdoctor-check.1.gz", "man/man1/tcpdoctor-serve.1.gz",
			"completions/tcpdoctor.bash", "completions/_tcpdoctor", "completions/tcpdoctor.fish",
			"man/man1/tcpdoctor-lab.1.gz", "man/man1/tcpdoctor-lab-run.1.gz",
			"completions/tcpdoctor-lab.bash", "completions/_tcpdoctor-lab", "completions/tcpdoctor-lab.fish",
			"licenses/github.com/cilium/ebpf/LICENSE"} {
			if !seen[p] {
				t.Errorf("%s archive has no %s", arch, p)
			}
		}
		for p := range seen {
			if strings.Contains(p, "powershell") {
				t.Errorf("%s archive has %s: Linux shells only", arch, p)
			}
		}
		t.Logf("%s: %d entries, dated %s (%s)", arch, len(seen), mtime.UTC().Format(time.RFC3339), ver)
	}
}

// buildOf runs bin (through runner, if any) version --json.
func buildOf(t *testing.T, runner []string, bin string) version.Info {
	t.Helper()
	args := append(append([]string{}, runner...), bin, "version", "--json")
	out, err := exec.Command(args[0], args[1:]...).Output()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	var b version.Info
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return b
}

// checkFrom runs bin check --from the listen-overflow fixture.
func checkFrom(t *testing.T, runner []string, bin string) (int, string) {
	t.Helper()
	args := append(append([]string{}, runner...), bin, "check", "--from", fixture)
	out, err := exec.Command(args[0], args[1:]...).Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%v: %v", args, err)
	}
	code := 0
	if ee != nil {
		code = ee.ExitCode()
	}
	return code, string(out)
}

// TestArm64UnderQemu: the arm64 binary, run by qemu-user, says its
// version and platform, and its check --from a recording prints what the
// amd64 binary prints, byte for byte, with the same exit code.
func TestArm64UnderQemu(t *testing.T) {
	dir, ver, _ := artifacts(t)
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		if qemu, err = exec.LookPath("qemu-aarch64"); err != nil {
			t.Skip("qemu-aarch64-static not installed (Debian package qemu-user-static)")
		}
	}
	arm := filepath.Join(dir, "bin/linux_arm64/tcpdoctor")
	amd := filepath.Join(dir, "bin/linux_amd64/tcpdoctor")
	b := buildOf(t, []string{qemu}, arm)
	if b.Version != ver || b.Platform != "linux/arm64" || b.Commit != head(t) {
		t.Errorf("arm64 version --json: %+v, want %s linux/arm64 at HEAD", b, ver)
	}
	start := time.Now()
	codeArm, outArm := checkFrom(t, []string{qemu}, arm)
	took := time.Since(start)
	codeAmd, outAmd := checkFrom(t, nil, amd)
	if codeArm != 1 || !strings.Contains(outArm, "listen-overflow") {
		t.Errorf("arm64 check --from %s: exit %d\n%s", fixture, codeArm, outArm)
	}
	if codeArm != codeAmd || outArm != outAmd {
		t.Errorf("arm64 and amd64 differ: exit %d and %d\n%s\n---\n%s", codeArm, codeAmd, outArm, outAmd)
	}
	t.Logf("arm64 under %s: %s, check --from took %s", filepath.Base(qemu), b, took.Round(time.Millisecond))
}
