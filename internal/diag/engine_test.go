// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"errors"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

func TestRunUnknownAndPanics(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	prev := &snapshot.Snapshot{Taken: t0, Netns: snapshot.Netns{Name: "n1"}, Counters: map[string]int64{"A.b": 1}}
	cur := &snapshot.Snapshot{Taken: t0.Add(5 * time.Second), Netns: snapshot.Netns{Name: "n1"}, Counters: map[string]int64{"A.b": 4}}
	rules := []Rule{
		{ID: "delta", NeedsDelta: true, Check: func(in *Input) ([]Finding, error) {
			d, ok := in.CounterDelta("A.b")
			if !ok {
				return nil, errors.New("no counter")
			}
			if d != 3 || in.Window() != 5*time.Second {
				t.Errorf("delta %d window %v", d, in.Window())
			}
			return []Finding{{Severity: Warning, Summary: "moved"}}, nil
		}},
		{ID: "boom", Check: func(*Input) ([]Finding, error) { panic("bad rule") }},
		{ID: "missing", Check: func(*Input) ([]Finding, error) { return nil, Unknownf("counter %s absent", "X.y") }},
		{ID: "crit", Check: func(*Input) ([]Finding, error) { return []Finding{{Severity: Critical}}, nil }},
	}
	var res Result
	Run(rules, NewInput(prev, cur, Options{}), &res)
	res.Sort()
	if len(res.Findings) != 2 || res.Findings[0].Rule != "crit" || res.Findings[1].Rule != "delta" || res.Findings[1].Subject.Netns != "n1" {
		t.Errorf("findings %+v", res.Findings)
	}
	if res.Worst() != Critical {
		t.Errorf("worst %v", res.Worst())
	}
	if len(res.Unknown) != 2 || res.Unknown[0].Rule != "boom" || res.Unknown[1].Reason != "counter X.y absent" {
		t.Errorf("unknown %+v", res.Unknown)
	}

	var one Result
	Run(rules[:1], NewInput(nil, cur, Options{}), &one)
	if len(one.Unknown) != 1 || len(one.Findings) != 0 {
		t.Errorf("delta rule without a previous sample: %+v", one)
	}
}

func TestSeverityText(t *testing.T) {
	for _, s := range []Severity{Info, Warning, Critical} {
		b, _ := s.MarshalText()
		var back Severity
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("%v round trip: %v %v", s, back, err)
		}
	}
	if _, err := ParseSeverity("loud"); err == nil {
		t.Error("unknown severity accepted")
	}
}

// Run names every finding's pod, container or unit once, whichever rule
// made it: from its process's workload, else from its namespace's.
func TestRunNamesWorkloads(t *testing.T) {
	api := &snapshot.Workload{Runtime: "containerd", ID: "4f1e2d3c4b5a69788796", Container: "api", Pod: "web-1", PodNamespace: "shop"}
	sandbox := &snapshot.Workload{Runtime: "containerd", ID: "99aa", Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	unit := &snapshot.Workload{Runtime: "systemd", Unit: "nginx.service"}
	cur := &snapshot.Snapshot{Netns: snapshot.Netns{Name: "shop/web-1", Workload: sandbox}, Procs: map[int]*snapshot.Proc{
		10: {Pid: 10, Command: "api-server", Workload: api}, 11: {Pid: 11, Command: "nginx", Workload: unit}, 12: {Pid: 12, Command: "sh"}}}
	rules := []Rule{{ID: "r", Check: func(*Input) ([]Finding, error) {
		return []Finding{{Subject: Subject{Pid: 10}}, {Subject: Subject{Pid: 11}}, {Subject: Subject{Pid: 12}},
			{Subject: Subject{Command: "curl"}}, {Subject: Subject{Pid: 99}}}, nil
	}}}
	var res Result
	Run(rules, NewInput(nil, cur, Options{}), &res)
	want := []snapshot.Names{
		{Pod: "web-1", PodNamespace: "shop", Container: "api"},
		{Unit: "nginx.service"},
		{Pod: "web-1", PodNamespace: "shop"},
		{Pod: "web-1", PodNamespace: "shop"},
		{Pod: "web-1", PodNamespace: "shop"},
	}
	for i, f := range res.Findings {
		if got := f.Subject.Workload.Names(); got != want[i] {
			t.Errorf("finding %d: subject %+v (%+v), want %+v", i, f.Subject, got, want[i])
		}
	}
	// A namespace and processes in nothing known: no names.
	var plain Result
	Run(rules, NewInput(nil, &snapshot.Snapshot{Netns: snapshot.Netns{Name: "host"}}, Options{}), &plain)
	for _, f := range plain.Findings {
		if f.Subject.Workload.Names() != (snapshot.Names{}) {
			t.Errorf("plain host: subject %+v", f.Subject)
		}
	}
}
