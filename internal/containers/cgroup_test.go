// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Container ids for the hand-written cases.
const (
	hexA = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"
	uidA = "3b0a4b0e-5c3d-4f7e-9a1b-2c3d4e5f6a7b"
	uidU = "3b0a4b0e_5c3d_4f7e_9a1b_2c3d4e5f6a7b" // systemd's escaping of uidA
)

// v1 writes a cgroup v1 file with every controller at path, the way a
// host without the unified hierarchy shows a containerised process.
func v1(path string) string {
	var b strings.Builder
	for i, c := range []string{"cpu,cpuacct", "memory", "pids", "devices", "freezer", "blkio", "net_cls,net_prio", "name=systemd"} {
		b.WriteString(string(rune('1'+i)) + ":" + c + ":" + path + "\n")
	}
	return b.String()
}

// cgroupCases are /proc/PID/cgroup files. The containerd ones are the
// captured files in testdata/containerd/; the others are hand-written
// from the runtimes' documented cgroup layouts (Docker's cgroupfs and
// systemd drivers, CRI-O's and the kubelet's systemd driver, Podman
// rootful, rootless and cgroupfs, systemd's system.slice), since those
// runtimes do not run on the machines this was written on.
var cgroupCases = []struct {
	name string
	file string
	want CgroupRef
}{
	{"docker cgroupfs v1", v1("/docker/" + hexA), CgroupRef{Runtime: Docker, ID: hexA}},
	{"docker systemd v2", "0::/system.slice/docker-" + hexA + ".scope\n", CgroupRef{Runtime: Docker, ID: hexA}},
	{"docker systemd hybrid", "4:memory:/system.slice/docker-" + hexA + ".scope\n1:name=systemd:/system.slice/docker-" + hexA + ".scope\n0::/system.slice/docker-" + hexA + ".scope\n", CgroupRef{Runtime: Docker, ID: hexA}},
	{"cri-dockerd kubelet cgroupfs", v1("/kubepods/burstable/pod" + uidA + "/" + hexA), CgroupRef{ID: hexA, PodUID: uidA}},
	{"containerd kubelet systemd v2", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + hexA + ".scope\n", CgroupRef{Runtime: Containerd, ID: hexA, PodUID: uidA}},
	{"containerd kubelet guaranteed cgroupfs", "0::/kubepods/pod" + uidA + "/" + hexA + "\n", CgroupRef{ID: hexA, PodUID: uidA}},
	{"cri-o kubelet systemd v2", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + hexA + ".scope\n", CgroupRef{Runtime: CRIO, ID: hexA, PodUID: uidA}},
	{"cri-o kubelet cgroupfs v1", v1("/kubepods/besteffort/pod" + uidA + "/crio-" + hexA), CgroupRef{Runtime: CRIO, ID: hexA, PodUID: uidA}},
	{"cri-o conmon is a unit, not the container", "0::/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-conmon-" + hexA + ".scope\n", CgroupRef{Runtime: Systemd, Unit: "crio-conmon-" + hexA + ".scope"}},
	{"podman rootful v2", "0::/machine.slice/libpod-" + hexA + ".scope\n", CgroupRef{Runtime: Podman, ID: hexA}},
	{"podman in a pod v2", "0::/machine.slice/machine-libpod_pod_0a1b2c3d4e5f.slice/libpod-" + hexA + ".scope/container\n", CgroupRef{Runtime: Podman, ID: hexA}},
	{"podman rootless v2", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + hexA + ".scope\n", CgroupRef{Runtime: Podman, ID: hexA}},
	{"podman cgroupfs v1", v1("/libpod_parent/libpod-" + hexA), CgroupRef{Runtime: Podman, ID: hexA}},
	{"systemd unit v1", v1("/system.slice/nginx.service"), CgroupRef{Runtime: Systemd, Unit: "nginx.service"}},
	{"systemd unit hybrid", "5:memory:/system.slice/nginx.service\n1:name=systemd:/system.slice/nginx.service\n0::/system.slice/nginx.service\n", CgroupRef{Runtime: Systemd, Unit: "nginx.service"}},
	{"systemd unit v2", "0::/system.slice/nginx.service\n", CgroupRef{Runtime: Systemd, Unit: "nginx.service"}},
	{"user session", "0::/user.slice/user-1000.slice/session-3.scope\n", CgroupRef{Runtime: Systemd, Unit: "session-3.scope"}},
	{"read from a pod's cgroup namespace, cgroupfs (kubepods cut off)", "0::/../../../burstable/pod" + uidA + "/" + hexA + "\n", CgroupRef{ID: hexA, PodUID: uidA}},
	{"read from a pod's cgroup namespace, systemd driver", "0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + hexA + ".scope\n", CgroupRef{Runtime: Containerd, ID: hexA, PodUID: uidA}},
	{"read from a cgroup namespace, a unit", "0::/../../system.slice/nginx.service\n", CgroupRef{Runtime: Systemd, Unit: "nginx.service"}},
	{"root cgroup", "0::/\n", CgroupRef{}},
	{"v1 root", v1("/"), CgroupRef{}},
	{"unknown shape", "0::/foo/bar/baz\n", CgroupRef{}},
	{"a slice only", "0::/system.slice\n", CgroupRef{}},
	{"uppercase is no runtime id", "0::/nested/docker/" + strings.ToUpper(hexA) + "\n", CgroupRef{}},
	{"garbage", "not a cgroup file\n::\n:\n\x00\xff", CgroupRef{}},
	{"empty", "", CgroupRef{}},
}

func TestParseCgroup(t *testing.T) {
	for _, c := range cgroupCases {
		if got := parseCgroup([]byte(c.file)); got != c.want {
			t.Errorf("%s: parseCgroup = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestParseCgroupCaptured reads the files captured from the real pod:
// the app and sandbox in the kubelet's cgroupfs layout (hybrid host),
// and ctr's plain /<ns>/<id>.
func TestParseCgroupCaptured(t *testing.T) {
	for _, role := range []string{"app", "sandbox"} {
		b := readFixture(t, "containerd", role+".cgroup")
		id := capturedID(t, role)
		want := CgroupRef{ID: id, PodUID: uidA}
		if got := parseCgroup(b); got != want {
			t.Errorf("%s: parseCgroup = %+v, want %+v", role, got, want)
		}
	}
	want := CgroupRef{Runtime: Containerd, Namespace: "k8s.io", ID: capturedID(t, "plain"), Plain: true}
	if got := parseCgroup(readFixture(t, "containerd", "plain.cgroup")); got != want {
		t.Errorf("plain: parseCgroup = %+v, want %+v", got, want)
	}
}

// TestParseCgroupPrefersUnified: on a hybrid host the v1 controllers may
// sit elsewhere (this machine's memory controller does); the unified
// line, then name=systemd, decide.
func TestParseCgroupPrefersUnified(t *testing.T) {
	hexB := strings.Repeat("b", 64)
	for _, c := range []struct {
		file string
		want CgroupRef
	}{
		// The unified line before the v1 controllers and name=systemd.
		{"4:memory:/docker/" + hexB + "\n1:name=systemd:/docker/" + hexB + "\n0::/system.slice/docker-" + hexA + ".scope\n",
			CgroupRef{Runtime: Docker, ID: hexA}},
		// name=systemd before the other v1 controllers.
		{"9:name=systemd:/system.slice/cron.service\n4:memory:/system.slice/other.service\n0::/\n",
			CgroupRef{Runtime: Systemd, Unit: "cron.service"}},
		// A container shape anywhere before a plain two-level path, which
		// is only a candidate: the resolver checks containerd's state.
		{"9:name=systemd:/system.slice/cron.service\n4:memory:/process_api/4cf1985369c0f3f685f995e62b8c9143\n3:pids:/docker/" + hexA + "\n0::/\n",
			CgroupRef{Runtime: Docker, ID: hexA}},
		// This machine's own process: the candidate keeps the unit found.
		{"9:name=systemd:/system.slice/cron.service\n4:memory:/process_api/4cf1985369c0f3f685f995e62b8c9143\n0::/\n",
			CgroupRef{Runtime: Containerd, Namespace: "process_api", ID: "4cf1985369c0f3f685f995e62b8c9143", Plain: true, Unit: "cron.service"}},
	} {
		if got := parseCgroup([]byte(c.file)); got != c.want {
			t.Errorf("parseCgroup(%q) = %+v, want %+v", c.file, got, c.want)
		}
	}
}

func readFixture(t testing.TB, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"testdata"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// capturedID is the container id in the captured runc state.json of role.
func capturedID(t testing.TB, role string) string {
	t.Helper()
	i, err := parseRuncState(readFixture(t, "containerd", role+".state.json"))
	if err != nil || i.ID == "" {
		t.Fatalf("%s.state.json: %+v, %v", role, i, err)
	}
	return i.ID
}
