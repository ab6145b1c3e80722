// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// debianRoot is a copy of testdata/debian-nginx in a temp dir, with the
// modules-enabled symlink Debian makes (absolute, so it resolves only
// inside the root).
func debianRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/debian-nginx")); err != nil {
		t.Fatal(err)
	}
	// Empty directories as Debian ships them (git keeps none).
	for _, d := range []string{"etc/nginx/modules-enabled", "etc/nginx/conf.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "etc/nginx/modules-enabled/50-mod-http-echo.conf")
	if err := os.Symlink("/usr/share/nginx/modules-available/mod-http-echo.conf", link); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestNginxDebian reads Debian's own configuration as shipped: the
// worker_connections line, worker_processes auto, and every include
// (the modules-enabled symlink resolved inside the root).
func TestNginxDebian(t *testing.T) {
	nc, err := parseNginx(rootFS{dir: debianRoot(t)}, "/etc/nginx/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	if nc.workerConnections == nil || nc.workerConnections.value != "768" || nc.workerConnections.source != "/etc/nginx/nginx.conf:8" {
		t.Errorf("worker_connections = %+v, want 768 at /etc/nginx/nginx.conf:8", nc.workerConnections)
	}
	if nc.workerProcesses == nil || nc.workerProcesses.value != "auto" {
		t.Errorf("worker_processes = %+v, want auto", nc.workerProcesses)
	}
	want := []string{"/etc/nginx/nginx.conf", "/etc/nginx/modules-enabled/50-mod-http-echo.conf", "/etc/nginx/mime.types", "/etc/nginx/sites-enabled/default"}
	if strings.Join(nc.files, " ") != strings.Join(want, " ") {
		t.Errorf("files read %q, want %q", nc.files, want)
	}
}

// TestRootFSStaysInRoot: an absolute symlink inside the root resolves in
// the root, and one pointing out of it ("..") cannot leave it.
func TestRootFSStaysInRoot(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.conf"), []byte("events { worker_connections 9; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "etc/nginx"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc/nginx/nginx.conf"), []byte("include escape.conf;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(filepath.Join(dir, "etc/nginx"), filepath.Join(outside, "secret.conf"))
	if err := os.Symlink(rel, filepath.Join(dir, "etc/nginx/escape.conf")); err != nil {
		t.Fatal(err)
	}
	_, err := parseNginx(rootFS{dir: dir}, "/etc/nginx/nginx.conf")
	if err == nil {
		t.Fatalf("a symlink out of the root (%s) was followed", rel)
	}
	t.Logf("refused as wanted: %v", err)

	// An absolute symlink resolves in the root: the file exists only
	// there, not on the host.
	abs := "/tcpdoctor-appcaps-test-" + filepath.Base(dir) + ".conf"
	must(t, os.WriteFile(filepath.Join(dir, abs), []byte("events { worker_connections 77; }\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "etc/nginx/nginx.conf"), []byte("include inroot.conf;\n"), 0o644))
	must(t, os.Symlink(abs, filepath.Join(dir, "etc/nginx/inroot.conf")))
	nc, err := parseNginx(rootFS{dir: dir}, "/etc/nginx/nginx.conf")
	if err != nil || nc.workerConnections == nil || nc.workerConnections.value != "77" {
		t.Fatalf("absolute symlink %s inside the root: %+v, %v", abs, nc, err)
	}
}

func TestNginxParse(t *testing.T) {
	fsys := fstest.MapFS{
		"srv/ngx/main.conf": {Data: []byte(`# a comment; with { braces }
worker_processes  4 ;
worker_rlimit_nofile 8192;
include conf.d/*.conf;
http {
    upstream backend { server 127.0.0.1:8081; keepalive 16; }
    upstream other { server 127.0.0.1:8082; keepalive 64; }
    server { listen 80; location / { return 200 "a;b{c}\"d"; } }
}
`)},
		"srv/ngx/conf.d/a-events.conf": {Data: []byte("events {\n\n  worker_connections '20480';\n}\n")},
		"srv/ngx/conf.d/b.txt":         {Data: []byte("not included")},
	}
	nc, err := parseNginx(fsys, "/srv/ngx/main.conf")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*setting{"worker_connections": nc.workerConnections, "worker_processes": nc.workerProcesses,
		"worker_rlimit_nofile": nc.workerRlimitNofile, "keepalive": nc.upstreamKeepalive}
	want := map[string]setting{
		"worker_connections":   {"20480", "/srv/ngx/conf.d/a-events.conf:3"},
		"worker_processes":     {"4", "/srv/ngx/main.conf:2"},
		"worker_rlimit_nofile": {"8192", "/srv/ngx/main.conf:3"},
		"keepalive":            {"64", "/srv/ngx/main.conf:7"},
	}
	for k, w := range want {
		if g := got[k]; g == nil || *g != w {
			t.Errorf("%s = %+v, want %+v", k, g, w)
		}
	}
}

// TestNginxErrors: what nginx itself refuses is an error, never a
// silent default.
func TestNginxErrors(t *testing.T) {
	for name, src := range map[string]string{
		"unclosed block":  "events { worker_connections 10;\n",
		"stray brace":     "}\n",
		"unclosed quote":  "worker_processes \"4;\n",
		"no semicolon":    "worker_processes 4\n",
		"missing include": "include /nope.conf;\n",
		"self include":    "include /c.conf;\n",
	} {
		_, err := parseNginx(fstest.MapFS{"c.conf": {Data: []byte(src)}}, "/c.conf")
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestNginxArgs(t *testing.T) {
	for title, want := range map[string]nginxArgs{
		"nginx: master process /usr/sbin/nginx -g daemon on; master_process on;": {globals: "daemon on; master_process on;"},
		"nginx: master process nginx -c /tmp/x/nginx.conf -e /tmp/x/error.log":   {conf: "/tmp/x/nginx.conf"},
		"nginx: master process nginx -p /srv -cconf/n.conf":                      {conf: "conf/n.conf", prefix: "/srv"},
	} {
		if got := parseNginxArgs(splitCmdline([]byte(title + "\x00\x00"))); got != want {
			t.Errorf("%q: %+v, want %+v", title, got, want)
		}
	}
}

func TestParsePPid(t *testing.T) {
	n, err := parsePPid([]byte("4242 (nginx: (odd) x) S 4200 4242 4242 0 -1 4194624\n"))
	if err != nil || n != 4200 {
		t.Fatalf("ppid %d, %v", n, err)
	}
	if _, err := parsePPid([]byte("4242 (nginx")); err == nil {
		t.Fatal("no error for a cut stat")
	}
}

// FuzzNginxTokens: any bytes give tokens or an error, never a panic, and
// the parser over them never panics either.
func FuzzNginxTokens(f *testing.F) {
	for _, s := range []string{"events { worker_connections 256; }", "a \"b\\\"c\" 'd' ${x}y;", "#c\n}", "include *.conf;", "x \\"} {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("testdata/debian-nginx/etc/nginx/nginx.conf"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzBounded(t, func() {
			if _, err := nginxTokens(b); err != nil {
				return
			}
			_, _ = parseNginx(fstest.MapFS{"c.conf": {Data: b}, "d.conf": {Data: []byte("worker_processes 2;")}}, "/c.conf")
		})
	})
}
