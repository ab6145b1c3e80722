// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// The sysctls fixes set, and the node-wide ones PerNetns names.
var podTestSysctls = []string{
	"net.ipv4.ip_local_port_range", "net.ipv4.ip_local_reserved_ports", "net.core.somaxconn",
	"net.ipv4.tcp_tw_reuse", "net.ipv4.tcp_timestamps", "net.ipv4.tcp_max_tw_buckets", "net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_max_syn_backlog", "net.ipv4.tcp_syncookies", "net.ipv4.tcp_rmem",
	"net.ipv4.tcp_wmem", "net.ipv4.tcp_moderate_rcvbuf", "net.ipv4.tcp_window_scaling", "net.ipv4.tcp_sack",
	"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_mtu_probing", "net.ipv4.tcp_abort_on_overflow",
	"net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default", "net.core.wmem_default",
	"net.core.netdev_max_backlog", "net.ipv4.tcp_mem", "net.ipv4.udp_mem",
}

// PerNetns agrees with the running kernel: in a new network namespace a
// per-namespace sysctl is there and writable, a node-wide one absent or
// read-only (Linux 6.x shows rmem_max and the like read-only there).
func TestPerNetnsKernel(t *testing.T) {
	ns := testns.New(t, "sysctl")
	err := netns.Do(ns, func() error {
		for _, name := range podTestSysctls {
			path := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
			st, err := os.Stat(path)
			writable := err == nil && st.Mode().Perm()&0o200 != 0
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if errors.Is(err, fs.ErrNotExist) && PerNetns(name) {
				t.Logf("%s: not on this kernel", name) // tcp_tw_recycle and the like
				continue
			}
			if writable != PerNetns(name) {
				t.Errorf("%s: writable in a new namespace %v, PerNetns %v", name, writable, PerNetns(name))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A pod's sysctls leave the host's alone: somaxconn set in a new
// namespace is that namespace's.
func TestPodSysctlStaysInNamespace(t *testing.T) {
	ns := testns.New(t, "sysctl")
	const path = "/proc/sys/net/core/somaxconn"
	host, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "1234"
	if strings.TrimSpace(string(host)) == want {
		want = "1235"
	}
	err = netns.Do(ns, func() error {
		if err := os.WriteFile(path, []byte(want), 0); err != nil {
			return err
		}
		got, err := os.ReadFile(path)
		if err == nil && strings.TrimSpace(string(got)) != want {
			t.Errorf("namespace's somaxconn %q after writing %s", got, want)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(host) {
		_ = os.WriteFile(path, host, 0)
		t.Errorf("the host's somaxconn changed from %q to %q", host, after)
	}
}
