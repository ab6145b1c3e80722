// SPDX-License-Identifier: Apache-2.0

package report

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Diagnose gathers every window in one report, each namespace's source
// failures once (a first sample's own marked as such), and runs each
// window's rules before it asks for the next window.
func TestDiagnose(t *testing.T) {
	at := func(s int64, errs ...string) *snapshot.Snapshot {
		sn := &snapshot.Snapshot{Taken: time.Unix(s, 0), Host: "h"}
		for _, e := range errs {
			sn.Errors = append(sn.Errors, snapshot.SourceError{Source: "netstat", Err: e})
		}
		return sn
	}
	a0, a1, b := at(10, "gone", "busy"), at(12, "busy"), at(11)
	a0.Netns.Name, a1.Netns.Name, b.Netns.Name = "a", "a", "b"
	ran := 0
	rs := []diag.Rule{{ID: "count", Check: func(*diag.Input) ([]diag.Finding, error) { ran++; return nil, nil }}}
	ins := func(yield func(*diag.Input) bool) {
		if !yield(diag.NewInput(a0, a1, diag.Options{})) {
			return
		}
		if ran != 1 {
			t.Errorf("the second window asked for before the first one's rules ran (%d runs)", ran)
		}
		yield(diag.NewInput(nil, b, diag.Options{}))
	}
	rep := Diagnose(ins, rs)
	if strings.Join(rep.Netns, ",") != "a,b" || rep.Host != "h" || !rep.Taken.Equal(time.Unix(12, 0)) {
		t.Errorf("netns %v, host %q, taken %v", rep.Netns, rep.Host, rep.Taken)
	}
	var errs []string
	for _, e := range rep.Sources {
		errs = append(errs, e.Netns+": "+e.Error)
	}
	if got := strings.Join(errs, "; "); got != "a: first sample: gone; a: busy" {
		t.Errorf("source errors %q", got)
	}
	if ran != 2 || len(rep.RulesRun) != 1 {
		t.Errorf("%d runs, rules run %v", ran, rep.RulesRun)
	}
}

// The eBPF counters are read once for the host: what they missed (a full
// map, runs the kernel skipped) is one host-wide note however many
// namespaces carry the section, and none when nothing was missed.
func TestDiagnoseEventsIncomplete(t *testing.T) {
	snap := func(ns string, ev *snapshot.Events) *snapshot.Snapshot {
		return &snapshot.Snapshot{Taken: time.Unix(10, 0), Netns: snapshot.Netns{Name: ns}, Events: ev}
	}
	run := func(snaps ...*snapshot.Snapshot) []string {
		ins := func(yield func(*diag.Input) bool) {
			for _, s := range snaps {
				if !yield(diag.NewInput(nil, s, diag.Options{})) {
					return
				}
			}
		}
		var out []string
		for _, e := range Diagnose(ins, nil).Sources {
			out = append(out, e.Netns+"|"+e.Source+"|"+e.Error)
		}
		return out
	}
	ev := &snapshot.Events{Lost: 3, Skipped: []snapshot.EventProgramSkipped{{Program: "inet_sock_set_state", Runs: 1}}}
	// A window without the section first; a namespace's own error
	// after the first window with it: the host's note comes last.
	c := snap("c", ev)
	c.Errors = []snapshot.SourceError{{Source: "netstat", Err: "gone"}}
	got := run(snap("a", nil), snap("b", ev), c)
	want := []string{"c|netstat|gone", "|bpf|3 events found a kernel map full; the kernel skipped 1 run of the program on inet_sock_set_state (it was running on that CPU when an interrupt brought another event): the event counts (connects, failures, drops, resets, retransmits) are lower bounds"}
	if !slices.Equal(got, want) {
		t.Errorf("notes %q, want %q", got, want)
	}
	if got := run(snap("a", &snapshot.Events{}), snap("b", nil)); len(got) != 0 {
		t.Errorf("nothing missed: notes %q", got)
	}
}
