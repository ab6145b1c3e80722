// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// A limit never goes below the host's value, value by value; a range
// only widens; a switch is set as asked; a host without the value leaves
// the limit guarded.
func TestSysctlNeverLowers(t *testing.T) {
	host := &snapshot.Snapshot{Sysctls: map[string]string{
		"net.core.rmem_max":            "4194304",
		"net.ipv4.tcp_rmem":            "4096 131072 33554432",
		"net.ipv4.ip_local_port_range": "32768 60999",
		"net.ipv4.tcp_moderate_rcvbuf": "1",
	}}
	for _, c := range []struct {
		name string
		vals []int64
		want diag.Sysctl
	}{
		{"net.core.rmem_max", []int64{8192}, diag.Sysctl{Name: "net.core.rmem_max", Value: "4194304", Limit: "raise", Host: "4194304"}},
		{"net.core.rmem_max", []int64{8 << 20}, diag.Sysctl{Name: "net.core.rmem_max", Value: "8388608", Limit: "raise", Host: "4194304"}},
		{"net.ipv4.tcp_rmem", []int64{8192, 131072, 6291456}, diag.Sysctl{Name: "net.ipv4.tcp_rmem", Value: "8192 131072 33554432", Limit: "raise", Host: "4096 131072 33554432"}},
		{"net.ipv4.ip_local_port_range", []int64{40000, 65535}, diag.Sysctl{Name: "net.ipv4.ip_local_port_range", Value: "32768 65535", Limit: "widen", Host: "32768 60999"}},
		{"net.ipv4.tcp_moderate_rcvbuf", []int64{0}, diag.Sysctl{Name: "net.ipv4.tcp_moderate_rcvbuf", Value: "0"}},
		{"net.core.wmem_max", []int64{8192}, diag.Sysctl{Name: "net.core.wmem_max", Value: "8192", Limit: "raise"}},
	} {
		if got := Sysctl(host, c.name, c.vals...); got != c.want {
			t.Errorf("Sysctl(%s, %v) = %+v, want %+v", c.name, c.vals, got, c.want)
		}
	}
	if s := Sysctl(nil, "net.core.rmem_max", 8192); !s.Guarded() || s.Host != "" {
		t.Errorf("a peer's limit: %+v, want guarded", s)
	}
}

func TestRender(t *testing.T) {
	host := &snapshot.Snapshot{Sysctls: map[string]string{"net.core.somaxconn": "128"}}
	for _, c := range []struct {
		f    diag.Fix
		want string
	}{
		{SetSysctls(diag.Fix{}, "60-somaxconn.conf", Sysctl(host, "net.core.somaxconn", 4096)),
			`sysctl -w net.core.somaxconn=4096 && echo 'net.core.somaxconn = 4096' > /etc/sysctl.d/60-somaxconn.conf`},
		{SetSysctls(diag.Fix{Command: "ping -M do -s 1472 <peer>"}, "", Sysctl(host, "net.ipv4.tcp_mtu_probing", 1)),
			`ping -M do -s 1472 <peer>; sysctl -w net.ipv4.tcp_mtu_probing=1`},
		{SetSysctls(diag.Fix{}, "", Sysctl(host, "net.ipv4.tcp_timestamps", 1), Sysctl(host, "net.ipv4.tcp_tw_reuse", 1)),
			`sysctl -w net.ipv4.tcp_timestamps=1 net.ipv4.tcp_tw_reuse=1`},
		{SetSysctls(diag.Fix{}, "", Sysctl(nil, "net.core.rmem_max", 8192), Sysctl(nil, "net.ipv4.tcp_rmem", 4096, 131072, 6291456)),
			`if [ "$(sysctl -n net.core.rmem_max)" -lt 8192 ]; then sysctl -w net.core.rmem_max=8192; fi; set -- $(sysctl -n net.ipv4.tcp_rmem) && sysctl -w net.ipv4.tcp_rmem="$((${1}>4096?${1}:4096)) $((${2}>131072?${2}:131072)) $((${3}>6291456?${3}:6291456))"`},
	} {
		if c.f.Command != c.want {
			t.Errorf("command\n %s\nwant\n %s", c.f.Command, c.want)
		}
	}
}

// The guarded commands, run by a real shell against a stand-in sysctl
// holding a host's values, raise what is lower and leave what is higher.
func TestRenderGuardsInAShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh: ", err)
	}
	dir := t.TempDir()
	// sysctl -n NAME prints the file NAME; sysctl -w NAME=VALUE writes it.
	fake := `#!/bin/sh
d=` + dir + `/vals
case "$1" in
-n) cat "$d/$2" ;;
-w) shift; for a in "$@"; do printf '%s\n' "${a#*=}" > "$d/${a%%=*}"; done ;;
*) exit 2 ;;
esac
`
	if err := os.MkdirAll(filepath.Join(dir, "vals"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sysctl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	set := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, "vals", name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, "vals", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	cmd := Render("", []diag.Sysctl{
		Sysctl(nil, "net.core.rmem_max", 8192),
		Sysctl(nil, "net.core.wmem_max", 8192),
		Sysctl(nil, "net.ipv4.tcp_rmem", 4096, 131072, 6291456),
		Sysctl(nil, "net.ipv4.ip_local_port_range", 20000, 65000),
	}, "")
	set("net.core.rmem_max", "4194304")
	set("net.core.wmem_max", "4096")
	set("net.ipv4.tcp_rmem", "4096\t87380\t33554432")
	set("net.ipv4.ip_local_port_range", "10000\t60999")
	run := exec.Command(sh, "-c", cmd)
	run.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	if out, err := run.CombinedOutput(); len(out) > 0 || err != nil {
		t.Errorf("%s: %v %s", cmd, err, out)
	}
	for name, want := range map[string]string{
		"net.core.rmem_max":            "4194304",
		"net.core.wmem_max":            "8192",
		"net.ipv4.tcp_rmem":            "4096 131072 33554432",
		"net.ipv4.ip_local_port_range": "10000 65000",
	} {
		if got := get(name); got != want {
			t.Errorf("%s = %q after %s, want %q", name, got, cmd, want)
		}
	}
}

// TestGuardKeepsThePersistChain: a guard whose host value is already
// higher ends with status 0, so the persist lines after it still run.
func TestGuardKeepsThePersistChain(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh: ", err)
	}
	dir := t.TempDir()
	fake := "#!/bin/sh\ncase \"$1\" in -n) echo 4194304 ;; -w) echo \"$2\" >> " + dir + "/written ;; esac\n"
	if err := os.WriteFile(filepath.Join(dir, "sysctl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := Render("", []diag.Sysctl{Sysctl(nil, "net.core.rmem_max", 8192)}, "60-test.conf")
	cmd = strings.ReplaceAll(cmd, "/etc/sysctl.d/", dir+"/")
	run := exec.Command(sh, "-c", cmd)
	run.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v %s", cmd, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "written")); err == nil {
		t.Errorf("%s lowered the host's 4194304", cmd)
	}
	b, err := os.ReadFile(filepath.Join(dir, "60-test.conf"))
	if err != nil || !strings.Contains(string(b), "net.core.rmem_max = 4194304") {
		t.Errorf("%s: persist file %q, %v; want the host's value kept", cmd, b, err)
	}
}
