// SPDX-License-Identifier: Apache-2.0

package release

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testpod"
)

// TestImage imports the OCI image into the private containerd the pod
// tests start (internal/testkit/testpod), with every platform of its index, and
// runs the image's tcpdoctor version and check in a container with the
// host's network namespace: the image runs FROM scratch on its own.
func TestImage(t *testing.T) {
	dir, ver, semver := artifacts(t)
	p := testpod.Start(t)
	ctr := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", p.Sock, "-n", testpod.CtrNS}, args...)...).CombinedOutput()
		return string(out), err
	}
	image := "docker.io/library/tcpdoctor:" + ver
	tarball := filepath.Join(dir, "tcpdoctor_"+semver+"_oci.tar")
	if out, err := ctr(2*time.Minute, "images", "import", "--all-platforms", "--snapshotter", "native",
		"--base-name", "docker.io/library/tcpdoctor", tarball); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctr(time.Minute, "images", "ls")
	if err != nil || !strings.Contains(out, image) || !strings.Contains(out, "linux/amd64,linux/arm64") {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	t.Logf("imported:\n%s", out)
	t.Cleanup(func() {
		if out, err := ctr(time.Minute, "images", "rm", image); err != nil {
			t.Errorf("ctr images rm: %v\n%s", err, out)
		}
	})
	runIn := func(id string, args ...string) (string, int) {
		t.Helper()
		t.Cleanup(func() { _, _ = ctr(30*time.Second, "containers", "rm", id) })
		out, err := ctr(2*time.Minute, append([]string{"run", "--rm", "--snapshotter", "native", "--net-host", image, id}, args...)...)
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("ctr run %v: %v\n%s", args, err, out)
		}
		if ee != nil {
			return out, ee.ExitCode()
		}
		return out, 0
	}
	id := "tcpdoctor-release-" + strings.ReplaceAll(semver, ".", "-")
	out, code := runIn(id+"-version", "/tcpdoctor", "version")
	if code != 0 || !strings.Contains(out, ver) || !strings.Contains(out, "linux/amd64") {
		t.Errorf("tcpdoctor version in the image: exit %d\n%s", code, out)
	}
	// The host's network namespace: the host's sockets, this test's
	// containerd listening among them.
	out, code = runIn(id+"-check", "/tcpdoctor", "check", "--interval", "0", "--bpf", "off")
	if (code != 0 && code != 1) || !strings.Contains(out, "checked ") {
		t.Errorf("tcpdoctor check in the image: exit %d\n%s", code, out)
	}
	hostIno, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("check in the image (host netns %s): exit %d, %s", hostIno, code, lastLine(out))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
