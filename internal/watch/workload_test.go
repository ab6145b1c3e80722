// SPDX-License-Identifier: Apache-2.0

package watch

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfsource"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// podNS is a pod's namespace in these tests, named by the pod.
const podNS = 4026532177

// fakeWorkloads is a resolver: pid 812 is container api of pod
// shop/web-1 (in the pod's namespace), pid 77 is nginx.service on the
// host; the pod's namespace is held by its sandbox. It counts calls.
type fakeWorkloads struct{ calls int }

func (f *fakeWorkloads) of(pid int, ino uint64) *snapshot.Workload {
	f.calls++
	switch {
	case pid == 812:
		return &snapshot.Workload{ID: "0123456789abcdef", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	case pid == 77:
		return &snapshot.Workload{Unit: "nginx.service"}
	case ino == podNS:
		return &snapshot.Workload{ID: "fedcba9876543210", Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	}
	return nil
}

func podEvents() []bpfsource.Event {
	inPod := func(e bpfsource.Event) bpfsource.Event { e.Netns = podNS; return e }
	return []bpfsource.Event{
		inPod(ev(bpfsource.FailedConnect, "0.0.0.0:0", "198.18.0.2:8080", 812, "ECONNREFUSED")),
		inPod(ev(bpfsource.ListenOverflow, "198.18.0.2:8080", "198.18.0.1:40001", 0, "TCP_LISTEN_OVERFLOW")),
		ev(bpfsource.ResetSent, "198.18.0.1:0", "198.18.0.2:80", 77, "TCP_ABORT_ON_LINGER"),
		ev(bpfsource.ResetReceived, "198.18.0.2:80", "198.18.0.1:5000", 0, ""),
	}
}

func podNames(ino uint64) (string, bool) {
	switch ino {
	case 4026531840:
		return "host", true
	case podNS:
		return "shop/web-1", true
	}
	return "", false
}

// TestWorkloadNamed: each line names its process's workload, else its
// namespace's, in text (not repeating the pod the namespace's name says)
// and in JSON (the members check's subject has).
func TestWorkloadNamed(t *testing.T) {
	f := &fakeWorkloads{}
	out, _ := run(t, &fakeSource{events: podEvents(), end: true}, Options{Tick: time.Hour, WorkloadOf: f.of, NameOf: podNames})
	want := []string{
		"09:31:02.123 failed-connect   shop/web-1 nginx/812         *:* > 198.18.0.2:8080                         ECONNREFUSED  container api",
		"09:31:02.123 listen-overflow  shop/web-1 -                 198.18.0.2:8080 > 198.18.0.1:40001            TCP_LISTEN_OVERFLOW",
		"09:31:02.123 reset-sent       host      nginx/77          198.18.0.1:* > 198.18.0.2:80                  TCP_ABORT_ON_LINGER  unit nginx.service",
		"09:31:02.123 reset-received   host      -                 198.18.0.2:80 > 198.18.0.1:5000               ",
	}
	if got := strings.TrimRight(out, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	if f.calls != 4 {
		t.Errorf("%d look-ups for 4 events", f.calls)
	}
	out, _ = run(t, &fakeSource{events: podEvents(), end: true}, Options{JSON: true, WorkloadOf: f.of, NameOf: podNames})
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var got []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		got = append(got, m)
	}
	if len(got) != 4 || got[0]["pod"] != "web-1" || got[0]["pod_namespace"] != "shop" || got[0]["container"] != "api" ||
		got[1]["pod"] != "web-1" || got[1]["container"] != nil || got[2]["unit"] != "nginx.service" || got[2]["pod"] != nil || got[3]["pod"] != nil {
		t.Errorf("JSON lines:\n%s", out)
	}
}

// TestWorkloadFilter: Filter.Workload keeps a pod's events, those of its
// process and those in its namespace with no process; a container's only
// its processes'.
func TestWorkloadFilter(t *testing.T) {
	f := &fakeWorkloads{}
	pod := func(w *snapshot.Workload) bool { return w != nil && w.Pod == "web-1" }
	ctr := func(w *snapshot.Workload) bool { return w != nil && w.ContainerName() == "api" }
	for name, c := range map[string]struct {
		keep  func(*snapshot.Workload) bool
		kinds []string
	}{
		"pod":       {pod, []string{"failed-connect", "listen-overflow"}},
		"container": {ctr, []string{"failed-connect"}},
	} {
		out, _ := run(t, &fakeSource{events: podEvents(), end: true}, Options{JSON: true, WorkloadOf: f.of, NameOf: podNames, Filter: Filter{Workload: c.keep}})
		var kinds []string
		for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err == nil {
				kinds = append(kinds, m["kind"].(string))
			}
		}
		if strings.Join(kinds, ",") != strings.Join(c.kinds, ",") {
			t.Errorf("%s: kept %v, want %v", name, kinds, c.kinds)
		}
	}
}
