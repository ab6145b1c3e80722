// SPDX-License-Identifier: Apache-2.0

package collect

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

type fakeWorkloads map[int]struct {
	w   snapshot.Workload
	err error
}

func (f fakeWorkloads) ForPid(pid int) (snapshot.Workload, error) { return f[pid].w, f[pid].err }

// Processes are named by their workload; a process gone since the scan
// is passed over without a word; a runtime file that could not be read
// is said once, with the count, and the names found are kept.
func TestNameProcs(t *testing.T) {
	api := snapshot.Workload{Runtime: "containerd", ID: "aa", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	fw := fakeWorkloads{
		1: {w: api},
		2: {w: snapshot.Workload{Runtime: "systemd", Unit: "nginx.service"}},
		3: {},
		4: {err: fmt.Errorf("containers: pid 4: %w", fs.ErrNotExist)},
		5: {w: snapshot.Workload{Runtime: "containerd", ID: "bb"}, err: errors.New("containers: pid 5: config.json: unexpected end of JSON input")},
		6: {w: snapshot.Workload{Runtime: "containerd", ID: "cc"}, err: errors.New("containers: pid 6: permission denied")},
	}
	s := &snapshot.Snapshot{Procs: map[int]*snapshot.Proc{}}
	for pid := range fw {
		s.Procs[pid] = &snapshot.Proc{Pid: pid}
	}
	nameProcs(s, fw)
	if w := s.Procs[1].Workload; w == nil || *w != api {
		t.Errorf("pid 1: %+v", w)
	}
	if w := s.Procs[2].Workload; w == nil || w.Unit != "nginx.service" {
		t.Errorf("pid 2: %+v", w)
	}
	if s.Procs[3].Workload != nil || s.Procs[4].Workload != nil {
		t.Errorf("pids 3, 4: %+v %+v, want none", s.Procs[3].Workload, s.Procs[4].Workload)
	}
	if w := s.Procs[5].Workload; w == nil || w.ID != "bb" {
		t.Errorf("pid 5: the id found is kept: %+v", w)
	}
	if len(s.Errors) != 1 || s.Errors[0].Source != snapshot.SourceContainers || !strings.HasPrefix(s.Errors[0].Err, "2 process(es) not fully named: containers: pid ") {
		t.Errorf("errors %+v", s.Errors)
	}
	nameProcs(s, nil) // resolution off: nothing happens
}

// A namespace's header carries its workload, and what could not be
// resolved of it as a source error.
func TestHeaderWorkload(t *testing.T) {
	w := &snapshot.Workload{Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	s := header(netns.NS{Name: "shop/web-1", Inode: 7, Workload: w, WorkloadErr: errors.New("containers: pid 9: gone")})
	if s.Netns.Name != "shop/web-1" || s.Netns.Inode != 7 || s.Netns.Workload != w {
		t.Errorf("netns %+v", s.Netns)
	}
	if len(s.Errors) != 1 || s.Errors[0].Source != snapshot.SourceContainers {
		t.Errorf("errors %+v", s.Errors)
	}
}

// TestEventWorkload: an event is named by its process's workload; with
// none, and a namespace no one holds, by nothing; with no resolver
// there is no function at all.
func TestEventWorkload(t *testing.T) {
	api := snapshot.Workload{Runtime: "containerd", ID: "aa", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	names := &netns.Names{Find: netns.Finder{ProcRoot: t.TempDir(), RunDir: t.TempDir()}, Now: time.Now}
	of := EventWorkload(fakeWorkloads{7: {w: api}}, names)
	if w := of(7, 1); w == nil || *w != api {
		t.Errorf("pid 7: %+v, want its container", w)
	}
	if w := of(8, 1); w != nil {
		t.Errorf("pid 8 in an unknown namespace: %+v, want nil", w)
	}
	if EventWorkload(nil, names) != nil {
		t.Error("no resolver: want no function")
	}
}
