// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// redisProc makes a /proc holding redis-server pid 200 with the raw
// cmdline and cgroup given, its root a copy of testdata/debian-redis.
func redisProc(t *testing.T, cmdline, cgroup string) string {
	t.Helper()
	root := t.TempDir()
	must(t, os.CopyFS(root, os.DirFS("testdata/debian-redis")))
	proc := t.TempDir()
	d := filepath.Join(proc, "200")
	must(t, os.MkdirAll(d, 0o755))
	must(t, os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmdline), 0o644))
	must(t, os.WriteFile(filepath.Join(d, "cgroup"), []byte(cgroup), 0o644))
	must(t, os.Symlink(root, filepath.Join(d, "root")))
	return proc
}

func redisSnap(soft int64) *snapshot.Snapshot {
	return &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(200)}},
		Procs: map[int]*snapshot.Proc{200: {Pid: 200, Command: "redis-server", NofileSoft: &soft}}}
}

// TestRedisDebianUnit: Debian's redis-server rewrites its command line
// into a title; the file comes from its unit's ExecStart, Debian's
// redis.conf leaves maxclients at the default, and the open-file limit
// lowers it as Redis itself does.
func TestRedisDebianUnit(t *testing.T) {
	title := "redis-server 127.0.0.1:6379" + strings.Repeat("\x00", 40)
	for _, c := range []struct {
		soft int64
		want int64
		src  string
	}{
		{10032, 10000, "default (no maxclients in /etc/redis/redis.conf)"},
		{1024, 992, "lowered to the open files limit 1024 less 32"},
	} {
		s := redisSnap(c.soft)
		Reader{ProcRoot: redisProc(t, title, "0::/system.slice/redis-server.service\n")}.Fill(s)
		if len(s.Errors) > 0 || len(s.AppCaps) != 1 {
			t.Fatalf("caps %+v errors %+v", s.AppCaps, s.Errors)
		}
		got := s.AppCaps[0]
		if got.Value != c.want || !strings.Contains(got.Source, c.src) || got.Per != snapshot.CapPerListener {
			t.Errorf("soft %d: %d from %q, want %d from %q", c.soft, got.Value, got.Source, c.want, c.src)
		}
		if r, _ := got.RelatedValue("config"); r.Value != "/etc/redis/redis.conf" || !strings.Contains(r.Source, "ExecStart of redis-server.service (/lib/systemd/system/redis-server.service)") {
			t.Errorf("config %+v", r)
		}
	}
	// Without a unit the file is unknown: an error, not a default.
	s := redisSnap(1024)
	Reader{ProcRoot: redisProc(t, title, "0::/\n")}.Fill(s)
	if len(s.AppCaps) != 0 || len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Err, "configuration file is unknown") {
		t.Errorf("no unit: caps %+v errors %+v", s.AppCaps, s.Errors)
	}
}

// TestRedisCommandLine: a command line kept whole (set-proc-title no):
// the file's setting, overridden by --maxclients.
func TestRedisCommandLine(t *testing.T) {
	s := redisSnap(20000)
	Reader{ProcRoot: redisProc(t, "redis-server\x00/etc/redis/redis.conf\x00--maxclients\x0050\x00--set-proc-title\x00no\x00", "0::/\n")}.Fill(s)
	if len(s.AppCaps) != 1 || s.AppCaps[0].Value != 50 || s.AppCaps[0].Source != "command line --maxclients" {
		t.Fatalf("caps %+v errors %+v", s.AppCaps, s.Errors)
	}
	rc, err := parseRedis(fstest.MapFS{
		"r.conf":         {Data: []byte("# c\nmaxclients 10\ninclude \"/inc dir/x.conf\"\n")},
		"inc dir/x.conf": {Data: []byte("  MAXCLIENTS   77  \n")},
	}, "/r.conf")
	if err != nil || rc.maxclients == nil || rc.maxclients.value != "77" || rc.maxclients.source != "/inc dir/x.conf:1" {
		t.Fatalf("include: %+v %v", rc, err)
	}
}

// pgRoot is a copy of testdata/debian-postgresql with extra files.
func pgRoot(t *testing.T, extra map[string]string) string {
	t.Helper()
	root := t.TempDir()
	must(t, os.CopyFS(root, os.DirFS("testdata/debian-postgresql")))
	for name, body := range extra {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, name), []byte(body), 0o644))
	}
	return root
}

// TestPostgresDebian: Debian's cluster as pg_ctlcluster starts it, then
// each later source overriding the one before: conf.d, ALTER SYSTEM's
// postgresql.auto.conf, the command line.
func TestPostgresDebian(t *testing.T) {
	argv := strings.Fields("/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/15/main -c config_file=/etc/postgresql/15/main/postgresql.conf")
	for _, c := range []struct {
		name  string
		extra map[string]string
		argv  []string
		max   int64
		src   string
	}{
		{"as installed", nil, argv, 100, "/etc/postgresql/15/main/postgresql.conf:65"},
		{"conf.d", map[string]string{"etc/postgresql/15/main/conf.d/50-caps.conf": "max_connections = 20 # x\n"}, argv, 20, "/etc/postgresql/15/main/conf.d/50-caps.conf:1"},
		{"auto.conf", map[string]string{
			"etc/postgresql/15/main/conf.d/50-caps.conf":      "max_connections = 20\n",
			"var/lib/postgresql/15/main/postgresql.auto.conf": "# Do not edit\nmax_connections = '30'\n"}, argv, 30, "/var/lib/postgresql/15/main/postgresql.auto.conf:2"},
		{"command line", nil, append(argv, "-N", "40"), 40, "command line"},
	} {
		pc, err := readPostgres(rootFS{dir: pgRoot(t, c.extra)}, c.argv)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if pc.maxN != c.max || pc.max.source != c.src || pc.resN != 3 {
			t.Errorf("%s: max_connections %d from %q, reserved %d; want %d from %q, 3", c.name, pc.maxN, pc.max.source, pc.resN, c.max, c.src)
		}
	}
	if _, err := readPostgres(rootFS{dir: pgRoot(t, nil)}, []string{"postgres"}); err == nil {
		t.Error("no -D: want an error")
	}
}

func TestPGLine(t *testing.T) {
	for line, want := range map[string][2]string{
		"max_connections = 100\t\t\t# (change requires restart)": {"max_connections", "100"},
		"  Listen_Addresses='*'":                                 {"listen_addresses", "*"},
		"x 'it''s \\'ok'":                                        {"x", "it's 'ok"},
	} {
		n, v, ok, err := pgLine(line)
		if err != nil || !ok || n != want[0] || v != want[1] {
			t.Errorf("%q: %q %q %v %v", line, n, v, ok, err)
		}
	}
	for _, bad := range []string{"x = 'open", "x = ", "= 3", "x = 1 2"} {
		if _, _, _, err := pgLine(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzConfigLines: the Redis and PostgreSQL line readers and the unit
// reader never panic, and what they accept parses again whole.
func FuzzConfigLines(f *testing.F) {
	for _, s := range []string{"maxclients 10", "include \"a b\"", "x 'y' \"z\\\"\"", "max_connections = 100 # c", "a = 'b''c'", "ExecStart=-/usr/bin/redis-server %i", "\"\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzBounded(t, func() {
			_, _ = redisWords(string(b))
			_, _, _, _ = pgLine(string(b))
			_ = unitOf(b)
			fsys := fstest.MapFS{"c.conf": {Data: b}, "lib/systemd/system/u.service": {Data: b}}
			_, _ = parseRedis(fsys, "/c.conf")
			_ = parsePG(fsys, "/c.conf", &pgConf{settings: map[string]setting{}}, 0)
			_, _, _ = execStart(fsys, "u.service")
		})
	})
}
