// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"golang.org/x/sys/unix"
)

func TestNetCgroupV1(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "self"), 0o755)
	write := func(s string) { os.WriteFile(filepath.Join(root, "self", "mounts"), []byte(s), 0o644) }
	write("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\nproc /proc proc rw 0 0\n")
	if why := netCgroupV1(root); why != "" {
		t.Errorf("cgroup v2 only: %q", why)
	}
	write("cgroup /sys/fs/cgroup/net_cls,net_prio cgroup rw,nosuid,net_cls,net_prio 0 0\n")
	if why := netCgroupV1(root); !strings.Contains(why, "net_cls") {
		t.Errorf("net_cls mounted: %q", why)
	}
	if why := netCgroupV1(filepath.Join(root, "missing")); why == "" {
		t.Error("unreadable mounts taken as safe")
	}
}

// A namespace that cannot be entered fails every source, so rules say
// unknown instead of judging an empty namespace.
func TestUnenterableNamespace(t *testing.T) {
	c := &Collector{Now: time.Now}
	s := c.Collect([]netns.NS{{Name: "gone", Path: filepath.Join(t.TempDir(), "nope")}})[0]
	for _, src := range []string{snapshot.SourceNetns, snapshot.SourceSockdiag, snapshot.SourceNetstat, snapshot.SourceSysctl} {
		if _, failed := s.Failed(src); !failed {
			t.Errorf("source %s not marked failed: %+v", src, s.Errors)
		}
	}
	if s.Taken.IsZero() || s.Netns.Name != "gone" {
		t.Errorf("snapshot %+v", s)
	}
}

// A walk beside the dump runs 10 nice steps lower (19 at most) on a
// thread of its own; the caller's thread keeps its priority.
func TestBesideYields(t *testing.T) {
	nice := func() int {
		// getpriority returns 20 - nice for a thread (Linux).
		p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
		if err != nil {
			t.Fatal(err)
		}
		return 20 - p
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := nice()
	if got, want := beside(nice)(), min(before+10, 19); got != want {
		t.Errorf("the walk ran at nice %d, want %d (the caller's %d, 10 lower)", got, want, before)
	}
	if after := nice(); after != before {
		t.Errorf("the caller's thread went from nice %d to %d", before, after)
	}
}
