// SPDX-License-Identifier: Apache-2.0

package containers

import (
	"path/filepath"
	"testing"
)

// TestProcesses: every process in a container, pod or unit is listed by
// pid; a process in neither, a non-pid entry and a pid that vanished are
// not.
func TestProcesses(t *testing.T) {
	tr := newTree(t)
	_, appID := tr.pod()
	tr.proc(10, 1, v1("/system.slice/nginx.service"), 1)
	tr.proc(11, 1, "0::/\n", 1)
	tr.write(filepath.Join(tr.roots.Proc, "self", "stat"), []byte("x"))
	tr.write(filepath.Join(tr.roots.Proc, "12", "cgroup"), []byte("0::/\n")) // no stat: gone
	got, err := NewResolver(Options{Roots: tr.roots}).Processes()
	if err != nil {
		t.Fatalf("Processes: %v", err)
	}
	if len(got) != 3 || got[101].ID != appID || got[101].Container != "api" || !got[100].Sandbox || got[10].Unit != "nginx.service" {
		t.Errorf("Processes = %#v; want the sandbox (100), api (101) and nginx.service (10)", got)
	}
}

func TestProcessesNoProc(t *testing.T) {
	tr := newTree(t)
	if _, err := NewResolver(Options{Roots: tr.roots}).Processes(); err == nil {
		t.Error("Processes with no proc root: no error")
	}
}
