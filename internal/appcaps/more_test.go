// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// haproxyCaps runs Fill on a haproxy pid 300 started with argv (NUL
// separated) whose root is a copy of testdata/debian-haproxy.
func haproxyCaps(t *testing.T, argv string) *snapshot.Snapshot {
	t.Helper()
	root := t.TempDir()
	must(t, os.CopyFS(root, os.DirFS("testdata/debian-haproxy")))
	proc := t.TempDir()
	d := filepath.Join(proc, "300")
	must(t, os.MkdirAll(d, 0o755))
	must(t, os.WriteFile(filepath.Join(d, "cmdline"), []byte(argv), 0o644))
	must(t, os.WriteFile(filepath.Join(d, "stat"), []byte("300 (haproxy) S 1 1 1 0 -1\n"), 0o644))
	must(t, os.Symlink(root, filepath.Join(d, "root")))
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(300)}},
		Procs: map[int]*snapshot.Proc{300: {Pid: 300, Command: "haproxy"}}}
	Reader{ProcRoot: proc}.Fill(s)
	return s
}

// TestHAProxyDebian: Debian's haproxy.cfg sets no maxconn: no cap (haproxy
// derives it), no error; the examples' global and per-frontend maxconn
// are read with the ports their frontends bind, and a directory given to
// -f is read file by file.
func TestHAProxyDebian(t *testing.T) {
	s := haproxyCaps(t, "/usr/sbin/haproxy\x00-Ws\x00-f\x00/etc/haproxy/haproxy.cfg\x00-p\x00/run/haproxy.pid\x00-S\x00/run/haproxy-master.sock\x00")
	if len(s.AppCaps) != 0 || len(s.Errors) != 0 {
		t.Errorf("Debian's haproxy.cfg: caps %+v errors %+v, want none", s.AppCaps, s.Errors)
	}
	s = haproxyCaps(t, "/usr/sbin/haproxy\x00-f\x00/usr/share/doc/haproxy/examples\x00")
	var got []string
	for _, c := range s.AppCaps {
		got = append(got, fmt.Sprintf("%s %s %d %s", strings.TrimPrefix(c.Source, "/usr/share/doc/haproxy/examples/"), c.Setting, c.Value, fmtPorts(c.Ports)))
	}
	want := []string{
		"content-sw-sample.cfg:11 maxconn 10000 ",
		"content-sw-sample.cfg:28 maxconn (frontend public) 8000 80",
		"socks4.cfg:19 maxconn (frontend SMTP-20025) 2000 20025",
		"socks4.cfg:31 maxconn (frontend SSL-20080) 2000 20080",
		"socks4.cfg:45 maxconn (frontend stats) 10 20936",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(s.Errors) > 0 {
		t.Errorf("caps:\n%s\nwant:\n%s\nerrors %+v", strings.Join(got, "\n"), strings.Join(want, "\n"), s.Errors)
	}
}

func fmtPorts(ps []uint16) string {
	var b []string
	for _, p := range ps {
		b = append(b, itoa(int(p)))
	}
	return strings.Join(b, ",")
}

func TestBindPorts(t *testing.T) {
	for in, want := range map[string]string{
		":80": "80", "*:443": "443", "[::]:8080": "8080", "ipv4@127.0.0.1:8000-8002": "8000,8001,8002",
		"/run/haproxy.sock": "", "fd@3": "", "10.0.0.1:80,10.0.0.2:81": "80,81",
	} {
		if got := fmtPorts(bindPorts(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// TestMemcachedDebian: the options Debian's start-memcached makes of
// memcached.conf (each line not a comment, but logfile) leave -c at its
// default; a -c line in any of its forms sets it.
func TestMemcachedDebian(t *testing.T) {
	b, err := os.ReadFile("testdata/debian-memcached/usr/share/memcached/memcached.conf.default")
	must(t, err)
	argv := []string{"/usr/bin/memcached"}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || strings.HasPrefix(l, "logfile") || l == "-d" {
			continue
		}
		argv = append(argv, strings.Fields(l)...)
	}
	n, src, err := memcachedConns(argv)
	if err != nil || n != 1024 || !strings.HasPrefix(src, "default") {
		t.Errorf("Debian's memcached.conf: %d from %q, %v", n, src, err)
	}
	for _, extra := range [][]string{{"-c", "4096"}, {"-c4096"}, {"--conn-limit=4096"}, {"--conn-limit", "4096"}} {
		n, _, err := memcachedConns(append(append([]string(nil), argv...), extra...))
		if err != nil || n != 4096 {
			t.Errorf("%v: %d, %v", extra, n, err)
		}
	}
	if _, _, err := memcachedConns([]string{"memcached", "-c", "many"}); err == nil {
		t.Error("-c many: no error")
	}
}

// FuzzHAProxy: haproxy's line reader and bind parser never panic.
func FuzzHAProxy(f *testing.F) {
	for _, s := range []string{"maxconn 10", "bind \"a b\":80 # c", "x 'y\\'", "bind [::]:1-65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fuzzBounded(t, func() {
			if w, err := haproxyWords(s); err == nil && len(w) > 1 {
				_ = bindPorts(w[1])
			}
			_, _ = parseHAProxy(fstest.MapFS{"h.cfg": {Data: []byte(s)}}, []string{"/h.cfg"})
		})
	})
}
