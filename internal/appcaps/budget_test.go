// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// costOf runs f and returns how long it took and what it allocated.
func costOf(f func()) (time.Duration, uint64) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&m1)
	return took, m1.TotalAlloc - m0.TotalAlloc
}

// bounded fails t when f takes longer than took or allocates more than
// alloc bytes: what a workload's file may make a reader spend.
func bounded(t *testing.T, what string, took time.Duration, alloc uint64, f func()) {
	t.Helper()
	d, a := costOf(f)
	if d > took || a > alloc {
		t.Errorf("%s: took %v and allocated %d MiB, want at most %v and %d MiB", what, d, a>>20, took, alloc>>20)
	}
	t.Logf("%s: %v, %d MiB allocated", what, d, a>>20)
}

// fuzzBounded holds one fuzz input's reading to a deadline and a memory
// bound: whatever the bytes, a reader ends within a second (ten under
// the race detector) and
// allocates at most 64 MiB (inputs are far smaller than a file may be).
func fuzzBounded(t *testing.T, f func()) {
	t.Helper()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(time.Second * slowdown):
		t.Fatalf("the input was not read within %v", time.Second*slowdown)
	}
	runtime.ReadMemStats(&m1)
	if a := m1.TotalAlloc - m0.TotalAlloc; a > 64<<20 {
		t.Fatalf("the input made the reader allocate %d MiB in %v", a>>20, time.Since(start))
	}
}

// The bounds the tests hold readers to: well above what the budget
// allows (16 MiB of files per server), far below what the files could
// make an unbounded reader spend.
const (
	testTime  = 5 * time.Second * slowdown
	testAlloc = 256 << 20
)

// TestNginxSelfInclude is issue 42's repro: a 1 MiB nginx.conf that
// includes itself allocated 5.6 GiB in 32 s. It ends at the server's
// byte budget, fast and small, with an error saying so.
func TestNginxSelfInclude(t *testing.T) {
	fsys := fstest.MapFS{"c.conf": {Data: []byte("include /c.conf;\n" + strings.Repeat(";", 1<<20))}}
	var err error
	bounded(t, "1 MiB self-including nginx.conf", testTime, testAlloc, func() { _, err = parseNginx(fsys, "/c.conf") })
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("error %v, want the budget's", err)
	}
	t.Logf("error: %v", err)
}

// TestRedisPostgresSelfInclude: redis.conf and postgresql.conf of 4 MiB
// including themselves reached 2.5 GB; they end at the budget too.
func TestRedisPostgresSelfInclude(t *testing.T) {
	body := strings.Repeat("#\n", 2<<20-16)
	redis := fstest.MapFS{"c.conf": {Data: []byte("include /c.conf\n" + body)}}
	pg := fstest.MapFS{"c.conf": {Data: []byte("include = '/c.conf'\n" + body)}}
	var rerr, perr error
	bounded(t, "4 MiB self-including redis.conf", testTime, testAlloc, func() { _, rerr = parseRedis(redis, "/c.conf") })
	bounded(t, "4 MiB self-including postgresql.conf", testTime, testAlloc, func() {
		_, perr = readPostgres(pg, []string{"postgres", "-c", "config_file=/c.conf"})
	})
	if !errors.Is(rerr, ErrBudget) || !errors.Is(perr, ErrBudget) {
		t.Fatalf("errors %v and %v, want the budget's", rerr, perr)
	}
}

// TestHardLinks: 64 names of one 4 MiB file (hard links) took 86 s and
// 875 MB; the byte budget ends the reading at the fourth.
func TestHardLinks(t *testing.T) {
	big := []byte(strings.Repeat("worker_processes 1;\n", 4<<20/20))
	fsys := fstest.MapFS{}
	var main strings.Builder
	for i := range 64 {
		name := fmt.Sprintf("l%02d.conf", i)
		fsys[name] = &fstest.MapFile{Data: big}
		fmt.Fprintf(&main, "include /%s;\n", name)
	}
	fsys["c.conf"] = &fstest.MapFile{Data: []byte(main.String())}
	var err error
	bounded(t, "64 links to a 4 MiB file", testTime, testAlloc, func() { _, err = parseNginx(fsys, "/c.conf") })
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("error %v, want the budget's", err)
	}
}

// globBomb makes root/etc/d with 16 links to "." and an nginx.conf
// including d/*/*/*/*/*/x.conf: 16^5 paths that fs.Glob walked for 66 s.
func globBomb(t *testing.T, root string) {
	t.Helper()
	d := filepath.Join(root, "etc/d")
	must(t, os.MkdirAll(d, 0o755))
	for i := range 16 {
		must(t, os.Symlink(".", filepath.Join(d, fmt.Sprintf("l%02d", i))))
	}
	must(t, os.WriteFile(filepath.Join(root, "etc/nginx.conf"), []byte("events { worker_connections 10; }\ninclude d/*/*/*/*/*/x.conf;\n"), 0o644))
}

// TestGlobBomb: the glob is bounded while it walks, not after.
func TestGlobBomb(t *testing.T) {
	root := t.TempDir()
	globBomb(t, root)
	var err error
	bounded(t, "include d/*/*/*/*/*/x.conf over 16 links to .", testTime, testAlloc, func() { _, err = parseNginx(rootFS{dir: root}, "/etc/nginx.conf") })
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("error %v, want the budget's", err)
	}
	t.Logf("error: %v", err)
}

// TestIncludeDirBomb: PostgreSQL's include_dir and haproxy's -f DIR read
// a directory's entries under the same budget.
func TestIncludeDirBomb(t *testing.T) {
	fsys := fstest.MapFS{"pg.conf": {Data: []byte("include_dir = 'conf.d'\n")}}
	for i := range 5000 {
		fsys[fmt.Sprintf("conf.d/%05d.txt", i)] = &fstest.MapFile{}
	}
	_, err := readPostgres(fsys, []string{"postgres", "-c", "config_file=/pg.conf"})
	if !errors.Is(err, ErrBudget) {
		t.Errorf("include_dir of 5000 entries: error %v, want the budget's", err)
	}
	_, err = parseHAProxy(fsys, []string{"/conf.d"})
	if !errors.Is(err, ErrBudget) {
		t.Errorf("-f of a directory of 5000 entries: error %v, want the budget's", err)
	}
}

// TestGlobOrder: the bounded glob finds what fs.Glob finds, in its order.
func TestGlobOrder(t *testing.T) {
	fsys := fstest.MapFS{"a/x.conf": {}, "a/b.conf": {}, "a/c/d.conf": {}, "b/x.conf": {}, "a-b/x.conf": {}, "e/y.txt": {}}
	for _, p := range []string{"*/x.conf", "a/*.conf", "*/*", "a/c/d.conf", "a/none.conf", "*/c/*.conf", "[ab]/x.conf"} {
		want, _ := fs.Glob(fsys, p)
		got, err := glob(withBudget(fsys), p)
		if err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %v (%v), want %v", p, got, err, want)
		}
	}
	if _, err := glob(withBudget(fsys), "[x"); err == nil {
		t.Error("a bad pattern: no error")
	}
}

// TestTomcatLinear: Tomcat's line numbers were counted from the file's
// start for every element (1 MiB of <a/>: 3 to 9 s, 4 MiB: 120 s).
func TestTomcatLinear(t *testing.T) {
	xml := []byte("<Server>\n" + strings.Repeat("<a/>\n", 3<<20/5) + `<Connector port="8080" maxConnections="10"/></Server>`)
	var cs []tomcatConnector
	var err error
	bounded(t, "3 MiB server.xml of <a/>", testTime, 1<<30, func() { cs, err = parseTomcat(xml, "/server.xml") })
	if err != nil || len(cs) != 1 || cs[0].maxConnections.source != fmt.Sprintf("/server.xml:%d", 3<<20/5+2) {
		t.Fatalf("connectors %+v, %v", cs, err)
	}
}

// TestFillDeadline: a server whose reading outlasts the collection's
// deadline is recorded unknown with the reason, at the deadline, and so
// is every server after it; Fill does not wait for the reading.
func TestFillDeadline(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "srv/conf"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "srv/conf/server.xml"), []byte("<Server>"+strings.Repeat("<a/>", 4<<20/4-20)+"</Server>"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "n.conf"), []byte("events { worker_connections 10; }\n"), 0o644))
	proc := fakeProc(t, root, map[int][2]string{
		400: {"java\x00-Dcatalina.base=/srv", "1"},
		500: {"nginx: master process nginx -c /n.conf", "1"},
	})
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(400, 500)}},
		Procs: map[int]*snapshot.Proc{400: {Pid: 400, Command: "java"}, 500: {Pid: 500, Command: "nginx"}}}
	lim := CollectionLimits()
	lim.Time = 20 * time.Millisecond
	start := time.Now()
	Reader{ProcRoot: proc, Budget: NewBudget(lim, start)}.Fill(s)
	took := time.Since(start)
	if took > lim.Time+time.Second*slowdown {
		t.Errorf("Fill took %v past a deadline of %v", took, lim.Time)
	}
	if len(s.AppCaps) != 0 || len(s.Errors) != 2 {
		t.Fatalf("caps %+v, errors %+v: want both servers unknown", s.AppCaps, s.Errors)
	}
	for _, e := range s.Errors {
		if !strings.Contains(e.Err, "deadline") && !strings.Contains(e.Err, "not read within") {
			t.Errorf("error %q does not say the deadline passed", e.Err)
		}
	}
	t.Logf("Fill returned after %v: %v", took, s.Errors)
}

// TestOpenFIFO: a FIFO is refused before anything opens it for reading,
// so a writer blocked on it stays blocked (an open for reading would
// release it), and a device's open never runs.
func TestOpenFIFO(t *testing.T) {
	root := t.TempDir()
	fifo := filepath.Join(root, "f.conf")
	must(t, unix.Mkfifo(fifo, 0o644))
	opened := make(chan int, 1)
	go func() {
		fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
		}
		opened <- fd
	}()
	time.Sleep(50 * time.Millisecond) // the writer is in open()
	if _, err := readFile(rootFS{dir: root}, "/f.conf"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO: error %v, want not a regular file", err)
	}
	select {
	case fd := <-opened:
		t.Errorf("the FIFO's writer was released (fd %d): something opened it for reading", fd)
		if fd >= 0 {
			unix.Close(fd)
		}
		return
	case <-time.After(200 * time.Millisecond):
	}
	// Release the writer ourselves.
	r, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(r)
	if fd := <-opened; fd >= 0 {
		unix.Close(fd)
	}
	if _, err := readFile(rootFS{dir: root}, "/dev/null"); err == nil {
		t.Error("no error for a missing /dev/null in the root")
	}
}

// TestOpenNotOurs: a file owned by a user that is neither the process's
// nor root is not read, nor one its mode keeps from the process.
func TestOpenNotOurs(t *testing.T) {
	root := t.TempDir()
	must(t, os.WriteFile(filepath.Join(root, "c.conf"), []byte("worker_processes 1;\n"), 0o600))
	me := uint32(os.Geteuid())
	own := &cred{owners: []uint32{0, me}, fsuid: me, groups: []uint32{uint32(os.Getegid())}, privileged: me == 0}
	// Another user's file: as root, one chowned away; else ours, read
	// for a process of another user.
	must(t, os.WriteFile(filepath.Join(root, "x.conf"), []byte("worker_processes 1;\n"), 0o644))
	who := &cred{owners: []uint32{0, 999999}, fsuid: 999999, groups: []uint32{999999}}
	if me == 0 {
		must(t, os.Chown(filepath.Join(root, "x.conf"), 54321, 54321))
		who = own
	}
	if _, err := readFile(rootFS{dir: root, who: who}, "/x.conf"); !errors.Is(err, errNotOurs) || !strings.Contains(err.Error(), "owned by uid") {
		t.Errorf("another user's file: error %v, want not read", err)
	}
	if me == 0 {
		if _, err := readFile(rootFS{dir: root}, "/x.conf"); !errors.Is(err, errNotOurs) {
			t.Errorf("another user's file read for this process: error %v, want not read", err)
		}
	}
	unprivileged := &cred{owners: []uint32{0, me, 999999}, fsuid: 999999, groups: []uint32{999999}}
	if me == 0 {
		// Owned by root, mode 0600: not the process's to read.
		if _, err := readFile(rootFS{dir: root, who: unprivileged}, "/c.conf"); !errors.Is(err, errNotOurs) || !strings.Contains(err.Error(), "mode") {
			t.Errorf("root's 0600 file for uid 999999: error %v, want not read", err)
		}
	}
	if b, err := readFile(rootFS{dir: root, who: own}, "/c.conf"); err != nil || len(b) == 0 {
		t.Errorf("the process's own file: %q, %v", b, err)
	}
}

// TestHostShadow (issue 42's defect 9): a plain process naming
// /etc/shadow as its configuration does not make tcpdoctor read it, and
// no error quotes it.
func TestHostShadow(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	secret := "root:$6$SECRETSALT$SECRETHASH:19000:0:99999:7:::\n"
	must(t, os.WriteFile(filepath.Join(root, "etc/shadow"), []byte(secret), 0o640))
	proc := fakeProc(t, root, map[int][2]string{600: {"postgres\x00-c\x00config_file=/etc/shadow", "1"}})
	must(t, os.WriteFile(filepath.Join(proc, "600/status"), []byte("Name:\tpostgres\nUid:\t33\t33\t33\t33\nGid:\t33\t33\t33\t33\nGroups:\t33\n"), 0o644))
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(600)}},
		Procs: map[int]*snapshot.Proc{600: {Pid: 600, Command: "postgres"}}}
	Reader{ProcRoot: proc}.Fill(s)
	if len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Err, "not read") || strings.Contains(s.Errors[0].Err, "SECRET") {
		t.Fatalf("errors %+v: want one saying the file is not read, quoting none of it", s.Errors)
	}
	t.Logf("recorded: %s", s.Errors[0].Err)
}

// TestFrontendNames (issue 42's defect 5): a 1 MiB frontend name is cut,
// and frontends beyond the first 64 with a maxconn are counted, not kept.
func TestFrontendNames(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "frontend %s\n  bind :80\n  maxconn 10\n", strings.Repeat("n", 1<<20))
	for i := range 100 {
		fmt.Fprintf(&b, "frontend f%d\n  bind :%d\n  maxconn 10\n", i, 1000+i)
	}
	root := t.TempDir()
	must(t, os.WriteFile(filepath.Join(root, "h.cfg"), []byte(b.String()), 0o644))
	proc := fakeProc(t, root, map[int][2]string{300: {"haproxy\x00-f\x00/h.cfg", "1"}})
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(300)}},
		Procs: map[int]*snapshot.Proc{300: {Pid: 300, Command: "haproxy"}}}
	Reader{ProcRoot: proc}.Fill(s)
	if len(s.AppCaps) != maxNamed {
		t.Errorf("%d caps, want %d", len(s.AppCaps), maxNamed)
	}
	for _, c := range s.AppCaps {
		if len(c.Setting) > 2*maxNameLen {
			t.Errorf("setting of %d bytes", len(c.Setting))
		}
	}
	if len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Err, "101 frontends") || !strings.Contains(s.Errors[0].Err, "37 left out") {
		t.Errorf("errors %+v: want the 37 frontends left out counted", s.Errors)
	}
}

// TestCollectionBudget: the namespaces of one collection share its
// budget: what one server read is not there for the next.
func TestCollectionBudget(t *testing.T) {
	root := t.TempDir()
	must(t, os.WriteFile(filepath.Join(root, "n.conf"), []byte("events { worker_connections 10; }\n"+strings.Repeat("#\n", 5000)), 0o644))
	proc := fakeProc(t, root, map[int][2]string{500: {"nginx: master process nginx -c /n.conf", "1"}})
	lim := CollectionLimits()
	lim.Bytes = 15000
	b := NewBudget(lim, time.Now())
	var got [2]*snapshot.Snapshot
	for i := range got {
		got[i] = &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(500)}},
			Procs: map[int]*snapshot.Proc{500: {Pid: 500, Command: "nginx"}}}
		Reader{ProcRoot: proc, Budget: b}.Fill(got[i])
	}
	if len(got[0].AppCaps) != 1 || len(got[0].Errors) != 0 {
		t.Errorf("first namespace: caps %+v, errors %+v", got[0].AppCaps, got[0].Errors)
	}
	if len(got[1].AppCaps) != 0 || len(got[1].Errors) != 1 || !strings.Contains(got[1].Errors[0].Err, "more than the collection's 15000 bytes") {
		t.Errorf("second namespace: caps %+v, errors %+v: want the collection's budget spent", got[1].AppCaps, got[1].Errors)
	}
}

// TestEnvoyNames: an Envoy listener's 1 MiB name is cut, and listener
// limits beyond the first 64 are counted, not kept.
func TestEnvoyNames(t *testing.T) {
	var ls []string
	for i := range 100 {
		name := fmt.Sprintf("l%d", i)
		if i == 0 {
			name = strings.Repeat("n", 1<<20)
		}
		ls = append(ls, fmt.Sprintf(`{"name":%q,"address":{"socket_address":{"port_value":%d}},"filter_chains":[{"filters":[{"name":"envoy.filters.network.connection_limit","typed_config":{"max_connections":10}}]}]}`, name, 1000+i))
	}
	caps, err := parseEnvoy([]byte(`{"static_resources":{"listeners":[`+strings.Join(ls, ",")+`]}}`), "/e.json")
	var p *partial
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "100 listener filters") || !strings.Contains(err.Error(), "36 left out") {
		t.Errorf("error %v: want the 36 left out counted", err)
	}
	if len(caps) != maxNamed {
		t.Errorf("%d caps, want %d", len(caps), maxNamed)
	}
	for _, c := range caps {
		if len(c.Setting) > 2*maxNameLen || len(c.Source) > 4*maxNameLen {
			t.Errorf("setting of %d bytes, source of %d", len(c.Setting), len(c.Source))
		}
	}
}
