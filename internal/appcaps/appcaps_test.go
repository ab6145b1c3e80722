// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// fakeProc makes a /proc with the processes given (pid -> title, ppid),
// each with root pointing at root.
func fakeProc(t *testing.T, root string, procs map[int][2]string) string {
	t.Helper()
	dir := t.TempDir()
	for pid, p := range procs {
		d := filepath.Join(dir, itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		must(t, os.WriteFile(filepath.Join(d, "cmdline"), []byte(p[0]+"\x00"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "stat"), []byte(itoa(pid)+" (nginx) S "+p[1]+" 1 1 0 -1\n"), 0o644))
		must(t, os.Symlink(root, filepath.Join(d, "root")))
	}
	return dir
}

func itoa(n int) string { return strconv.Itoa(n) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFillNginx: Debian's nginx started without -c: its master and two
// workers own the listener; the cap is read from the default path inside
// the process's root, with the workers named.
func TestFillNginx(t *testing.T) {
	proc := fakeProc(t, debianRoot(t), map[int][2]string{
		100: {"nginx: master process /usr/sbin/nginx -g daemon on; master_process on;", "1"},
		101: {"nginx: worker process", "100"},
		102: {"nginx: worker process", "100"},
		300: {"/usr/bin/python3 x.py", "1"},
	})
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{
		{State: snapshot.Listen, Pids: snapshot.PidsOf(100, 101, 102)},
		{State: snapshot.Listen, Pids: snapshot.PidsOf(300)},
	}, Procs: map[int]*snapshot.Proc{
		100: {Pid: 100, Command: "nginx"}, 101: {Pid: 101, Command: "nginx"}, 102: {Pid: 102, Command: "nginx"}, 300: {Pid: 300, Command: "python3"},
	}}
	Reader{ProcRoot: proc}.Fill(s)
	if len(s.Errors) > 0 {
		t.Fatalf("errors: %+v", s.Errors)
	}
	if len(s.AppCaps) != 1 {
		t.Fatalf("caps %+v, want one (nginx)", s.AppCaps)
	}
	c := s.AppCaps[0]
	if c.Pid != 100 || c.Value != 768 || c.Source != "/etc/nginx/nginx.conf:8" || c.Per != snapshot.CapPerProcess ||
		len(c.Pids) != 2 || c.Pids[0] != 101 || c.Pids[1] != 102 {
		t.Errorf("cap %+v", c)
	}
	if r, ok := c.RelatedValue("config"); !ok || r.Value != "/etc/nginx/nginx.conf" || !strings.Contains(r.Source, "default path") {
		t.Errorf("config %+v", r)
	}
}

// TestFillNginxBroken: a configuration nginx would refuse is an error in
// the snapshot, and no cap.
func TestFillNginxBroken(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "srv"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "srv/n.conf"), []byte("events { worker_connections 10;\n"), 0o644))
	proc := fakeProc(t, root, map[int][2]string{100: {"nginx: master process nginx -c /srv/n.conf", "1"}})
	s := &snapshot.Snapshot{Sockets: []snapshot.Socket{{State: snapshot.Listen, Pids: snapshot.PidsOf(100)}},
		Procs: map[int]*snapshot.Proc{100: {Pid: 100, Command: "nginx"}}}
	Reader{ProcRoot: proc}.Fill(s)
	if len(s.AppCaps) != 0 || len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Err, "/srv/n.conf") {
		t.Fatalf("caps %+v errors %+v", s.AppCaps, s.Errors)
	}
	t.Logf("recorded: %s: %s", s.Errors[0].Source, s.Errors[0].Err)
}
