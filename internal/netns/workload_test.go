// SPDX-License-Identifier: Apache-2.0

package netns

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// fakeNamer names namespaces by inode, whatever the pids, and records
// that it was asked.
type fakeNamer struct {
	by    map[uint64]snapshot.Workload
	asked map[uint64][]int
}

func (f *fakeNamer) ForNetns(ino uint64, pids []int) (snapshot.Workload, error) {
	f.asked[ino] = pids
	w, ok := f.by[ino]
	if !ok {
		return snapshot.Workload{}, errors.New("fake: unknown")
	}
	return w, nil
}

// namedChild starts `ip netns exec NAME sleep 30` and waits until it is
// in that namespace; it is killed at cleanup.
func namedChild(t *testing.T, name string) int {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", name, "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	want, err := nsInode("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ino, err := nsInode("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"); err == nil && ino == want {
			return cmd.Process.Pid
		}
	}
	t.Fatalf("ip netns exec %s: the child did not enter it within 5 s", name)
	return 0
}

// A namespace held by a pod is named by the pod when tcpdoctor or a CNI
// plugin made its name up; a user's `ip netns` name, a unit's namespace
// and a label already taken keep theirs; Named finds the pod's by its
// name.
func TestFinderNamesWorkloads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces")
	}
	prefix := "tdwl-" + strconv.Itoa(os.Getpid())
	cni, mine := "cni-"+prefix, prefix+"-mine"
	addNamed(t, cni, mine)
	cniPid, minePid := namedChild(t, cni), namedChild(t, mine)
	podPid, podIno := unnamedChild(t)
	unitPid, unitIno := unnamedChild(t)
	clashPid, clashIno := unnamedChild(t)
	scopePid, scopeIno := unnamedChild(t)
	cniIno, _ := nsInode("/run/netns/" + cni)
	mineIno, _ := nsInode("/run/netns/" + mine)
	fake := &fakeNamer{asked: map[uint64][]int{}, by: map[uint64]snapshot.Workload{
		podIno:   {Runtime: "containerd", ID: "aa11", Pod: "web-1", PodNamespace: "shop", Sandbox: true},
		cniIno:   {Runtime: "containerd", ID: "bb22", Pod: "db-0", PodNamespace: "shop", Sandbox: true},
		mineIno:  {Runtime: "docker", ID: "cc33", Container: "web"},
		unitIno:  {Runtime: "systemd", Unit: "isolated.service"},
		clashIno: {Runtime: "docker", ID: "dd44", Container: mine},
		scopeIno: {Runtime: "systemd", Unit: "session-3.scope"},
	}}
	f := Default()
	f.Workloads = fake
	all, err := f.All()
	if err != nil && !errors.Is(err, os.ErrPermission) {
		t.Fatalf("All: %v", err)
	}
	byIno := map[uint64]NS{}
	for _, ns := range all {
		byIno[ns.Inode] = ns
	}
	for _, c := range []struct {
		ino  uint64
		pid  int
		want string
	}{
		{podIno, podPid, "shop/web-1"},
		{cniIno, cniPid, "shop/db-0"},
		{mineIno, minePid, mine},
		{unitIno, unitPid, "pid:" + strconv.Itoa(unitPid)},
		{clashIno, clashPid, "pid:" + strconv.Itoa(clashPid)},
		{scopeIno, scopePid, "pid:" + strconv.Itoa(scopePid)},
	} {
		ns := byIno[c.ino]
		if c.ino == scopeIno {
			if ns.Name != c.want || ns.Workload != nil {
				t.Errorf("a namespace of a login session = %q %+v, want %q and no workload", ns.Name, ns.Workload, c.want)
			}
			continue
		}
		if ns.Name != c.want || ns.Workload == nil || *ns.Workload != fake.by[c.ino] {
			t.Errorf("namespace %d = %q %+v, want %q with %+v", c.ino, ns.Name, ns.Workload, c.want, fake.by[c.ino])
		}
		if pids := fake.asked[c.ino]; len(pids) == 0 || pids[0] != c.pid {
			t.Errorf("namespace %d: the namer was given pids %v, want %d first", c.ino, pids, c.pid)
		}
		if s := ns.Snapshot(); s.Name != ns.Name || s.Workload != ns.Workload {
			t.Errorf("Snapshot() = %+v, want the name and workload of %+v", s, ns)
		}
	}
	for _, name := range []string{"shop/web-1", "web-1", cni, "shop/db-0"} {
		ns, err := f.Named(name)
		want := podIno
		if name == cni || name == "shop/db-0" {
			want = cniIno
		}
		if err != nil || ns.Inode != want || ns.Workload == nil {
			t.Errorf("Named(%q) = %+v, %v; want namespace %d with its pod", name, ns, err, want)
		}
	}
	if _, err := f.Named("shop/none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Named(shop/none): %v, want not found", err)
	}
	if ns, err := f.OfPid(podPid); err != nil || ns.Name != "shop/web-1" {
		t.Errorf("OfPid(pod's process) = %+v, %v; want shop/web-1", ns, err)
	}
	// Without a namer nothing changes.
	if ns, err := Default().OfPid(podPid); err != nil || ns.Name != "pid:"+strconv.Itoa(podPid) || ns.Workload != nil {
		t.Errorf("OfPid without a namer = %+v, %v", ns, err)
	}
}
