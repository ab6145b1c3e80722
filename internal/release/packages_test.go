// SPDX-License-Identifier: Apache-2.0

package release

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// installed are the files the packages must install (beyond the docs).
var installed = []string{
	"/usr/bin/tcpdoctor",
	"/usr/bin/tcpdoctor-lab",
	"/usr/share/man/man1/tcpdoctor.1.gz",
	"/usr/share/man/man1/tcpdoctor-serve.1.gz",
	"/usr/share/bash-completion/completions/tcpdoctor",
	"/usr/share/zsh/vendor-completions/_tcpdoctor",
	"/usr/share/fish/vendor_completions.d/tcpdoctor.fish",
	"/usr/share/man/man1/tcpdoctor-lab.1.gz",
	"/usr/share/man/man1/tcpdoctor-lab-run.1.gz",
	"/usr/share/bash-completion/completions/tcpdoctor-lab",
	"/usr/share/zsh/vendor-completions/_tcpdoctor-lab",
	"/usr/share/fish/vendor_completions.d/tcpdoctor-lab.fish",
	"/usr/lib/systemd/system/tcpdoctor.service",
	"/usr/share/doc/tcpdoctor/README.md",
	"/usr/share/doc/tcpdoctor/exporter.md",
	"/usr/share/doc/tcpdoctor/copyright",
	"/usr/share/doc/tcpdoctor/LICENSE",
	"/usr/share/doc/tcpdoctor/NOTICE",
}

func one(t *testing.T, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) != 1 {
		t.Fatalf("%s: %v %v", pattern, m, err)
	}
	return m[0]
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestDeb installs the amd64 .deb with dpkg, runs the installed
// tcpdoctor version and check, checks the files and that the unit is
// neither enabled nor started, then removes and purges it: nothing of it
// is left.
func TestDeb(t *testing.T) {
	dir, ver, _ := artifacts(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to install a package")
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg")
	}
	if out, _ := exec.Command("dpkg-query", "-W", "-f=${Status}", "tcpdoctor").Output(); strings.Contains(string(out), "installed") {
		t.Skipf("a tcpdoctor package is already installed here (%s): not touching it", out)
	}
	deb := one(t, filepath.Join(dir, "tcpdoctor_*_amd64.deb"))
	purged := false
	t.Cleanup(func() {
		if !purged {
			_ = exec.Command("dpkg", "--purge", "tcpdoctor").Run()
		}
	})
	run(t, "dpkg", "-i", deb)
	b := buildOf(t, nil, "/usr/bin/tcpdoctor")
	if b.Version != ver || b.Commit != head(t) {
		t.Errorf("installed tcpdoctor version: %+v, want %s at HEAD", b, ver)
	}
	cmd := exec.Command("/usr/bin/tcpdoctor", "check", "--interval", "0", "--bpf", "off")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if (err != nil && !errors.As(err, &ee)) || (ee != nil && ee.ExitCode() != 1) || !strings.Contains(string(out), "checked ") {
		t.Errorf("installed tcpdoctor check: %v\n%s", err, out)
	}
	// The lab beside it lists its scenarios (it runs this tcpdoctor).
	if out, err := exec.Command("/usr/bin/tcpdoctor-lab", "list").Output(); err != nil || !strings.Contains(string(out), "c2-accept-backlog") {
		t.Errorf("installed tcpdoctor-lab list: %v\n%s", err, out)
	}
	for _, p := range append(installed, "/etc/default/tcpdoctor") {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("installed: %v", err)
		}
	}
	unit, err := os.ReadFile("/usr/lib/systemd/system/tcpdoctor.service")
	if err != nil || !strings.Contains(string(unit), "ExecStart=/usr/bin/tcpdoctor serve $TCPDOCTOR_ARGS") ||
		!strings.Contains(string(unit), "ProtectSystem=strict") || !strings.Contains(string(unit), "EnvironmentFile=-/etc/default/tcpdoctor") {
		t.Errorf("installed unit: %v\n%s", err, unit)
	}
	if m, _ := filepath.Glob("/etc/systemd/system/*.wants/tcpdoctor.service"); len(m) > 0 {
		t.Errorf("the unit was enabled on install: %v", m)
	}
	if out, err := exec.Command("pgrep", "-x", "tcpdoctor").Output(); err == nil {
		t.Errorf("a tcpdoctor runs after install: pids %s", out)
	}
	conf := run(t, "dpkg-query", "-W", "-f=${Conffiles}", "tcpdoctor")
	if !strings.Contains(conf, "/etc/default/tcpdoctor") {
		t.Errorf("/etc/default/tcpdoctor is not a conffile: %q", conf)
	}
	run(t, "dpkg", "-r", "tcpdoctor")
	if _, err := os.Stat("/usr/bin/tcpdoctor"); err == nil {
		t.Error("/usr/bin/tcpdoctor left after dpkg -r")
	}
	run(t, "dpkg", "--purge", "tcpdoctor")
	purged = true
	for _, p := range append(installed, "/etc/default/tcpdoctor") {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left after purge", p)
		}
	}
	if out, _ := exec.Command("dpkg-query", "-W", "-f=${Status}", "tcpdoctor").Output(); strings.Contains(string(out), "installed") {
		t.Errorf("dpkg still knows tcpdoctor: %s", out)
	}
}

// TestRPM lists the .rpm packages' files and metadata with rpm.
func TestRPM(t *testing.T) {
	dir, ver, semver := artifacts(t)
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Skip("rpm not installed (Debian package rpm)")
	}
	for arch, rarch := range map[string]string{"amd64": "x86_64", "arm64": "aarch64"} {
		p := one(t, filepath.Join(dir, "tcpdoctor-*."+rarch+".rpm"))
		files := strings.Fields(run(t, "rpm", "-qlp", p))
		for _, want := range append(installed, "/etc/sysconfig/tcpdoctor") {
			if !slices.Contains(files, want) {
				t.Errorf("%s: no %s in rpm -qlp", arch, want)
			}
		}
		if slices.Contains(files, "/etc/default/tcpdoctor") {
			t.Errorf("%s: the rpm carries /etc/default (its defaults live in /etc/sysconfig)", arch)
		}
		meta := run(t, "rpm", "-qp", "--queryformat", "%{NAME} %{VERSION} %{ARCH}", p)
		// rpm versions cannot hold '-': nfpm writes a pre-release as ~.
		if want := "tcpdoctor " + strings.ReplaceAll(semver, "-", "~") + " " + rarch; meta != want {
			t.Errorf("%s: rpm -qp: %q, want %q", arch, meta, want)
		}
		cfg := run(t, "rpm", "-qcp", p)
		if strings.TrimSpace(cfg) != "/etc/sysconfig/tcpdoctor" {
			t.Errorf("%s: config files %q", arch, cfg)
		}
		t.Logf("%s (%s): %d files", filepath.Base(p), ver, len(files))
	}
}
