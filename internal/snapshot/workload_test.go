// SPDX-License-Identifier: Apache-2.0

package snapshot

import "testing"

// TestOwner: a socket's owner is its lowest pid, with the process when
// the snapshot has it; its workload is that process's, else the
// namespace's, else none.
func TestOwner(t *testing.T) {
	api := &Workload{Runtime: "containerd", ID: "0123456789abcdef", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	sandbox := &Workload{Runtime: "containerd", ID: "fedcba9876543210", Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	s := &Snapshot{Netns: Netns{Name: "shop/web-1", Workload: sandbox}, Procs: map[int]*Proc{
		10: {Pid: 10, Command: "api-server", Workload: api},
		12: {Pid: 12, Command: "sh"},
	}}
	for _, c := range []struct {
		name    string
		pids    PidList
		pid     int
		command string
		w       *Workload
	}{
		{"owned by a process in a container", PidsOf(10, 12), 10, "api-server", api},
		{"the lowest pid is the owner", PidsOf(12, 99), 12, "sh", sandbox},
		{"an owner the snapshot lacks", PidsOf(99), 99, "", sandbox},
		{"no owner found", PidList{}, 0, "", sandbox},
	} {
		sk := &Socket{Pids: c.pids}
		pid, p := s.Owner(sk)
		command := ""
		if p != nil {
			command = p.Command
		}
		if pid != c.pid || command != c.command {
			t.Errorf("%s: owner %d %q, want %d %q", c.name, pid, command, c.pid, c.command)
		}
		if w := s.WorkloadOf(sk); w != c.w {
			t.Errorf("%s: workload %+v, want %+v", c.name, w, c.w)
		}
	}
	plain := &Snapshot{Netns: Netns{Name: "host"}, Procs: map[int]*Proc{12: {Pid: 12, Command: "sh"}}}
	if w := plain.WorkloadOf(&Socket{Pids: PidsOf(12)}); w != nil {
		t.Errorf("a process and namespace in nothing: workload %+v", w)
	}
	if w := WorkloadIn(&s.Netns, s.Procs, 0); w != sandbox {
		t.Errorf("pid 0 (no process): workload %+v, want the namespace's", w)
	}
}
