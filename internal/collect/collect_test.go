package collect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
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
