// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// procWithStats is a /proc holding kernel.bpf_stats_enabled = v ("" for a
// kernel without it).
func procWithStats(t *testing.T, v string) string {
	t.Helper()
	root := t.TempDir()
	if v == "" {
		return root
	}
	dir := filepath.Join(root, "sys", "kernel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bpf_stats_enabled"), []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestCost(t *testing.T) {
	progs := func() ([]ProgramStat, error) {
		return []ProgramStat{
			{Program: "inet_sock_set_state", Runs: 1200, Runtime: 600 * time.Microsecond, Skipped: 4},
			{Program: "kfree_skb", Runs: 30, Runtime: 15 * time.Microsecond},
		}, nil
	}
	events := []*snapshot.Snapshot{{Netns: snapshot.Netns{Name: "host"}, Events: &snapshot.Events{Lost: 3}}, {Netns: snapshot.Netns{Name: "blue"}, Events: &snapshot.Events{Lost: 3}}}
	for _, tc := range []struct {
		name    string
		stats   string
		progs   func() ([]ProgramStat, error)
		observe [][]*snapshot.Snapshot
		want    string
	}{
		{"stats on, programs, two collections", "1", progs, [][]*snapshot.Snapshot{events, events}, `
# HELP tcpdoctor_bpf_events_lost_total Events tcpdoctor's eBPF programs could not count because a kernel map was full (flows, connection lifetimes, drops, retransmits, resets): the tcpdoctor_bpf_ counters are lower bounds while it rises.
# TYPE tcpdoctor_bpf_events_lost_total counter
tcpdoctor_bpf_events_lost_total 6
# HELP tcpdoctor_bpf_program_run_seconds_total Time tcpdoctor's eBPF program at this attach point ran (in the kernel, on the host's CPUs), counted while the kernel's BPF statistics are on (kernel.bpf_stats_enabled, or a tool holding them on).
# TYPE tcpdoctor_bpf_program_run_seconds_total counter
tcpdoctor_bpf_program_run_seconds_total{program="inet_sock_set_state"} 0.0006
tcpdoctor_bpf_program_run_seconds_total{program="kfree_skb"} 1.5e-05
# HELP tcpdoctor_bpf_program_runs_total Runs of tcpdoctor's eBPF program at this attach point, counted by the kernel while its BPF statistics are on (kernel.bpf_stats_enabled, or a tool holding them on).
# TYPE tcpdoctor_bpf_program_runs_total counter
tcpdoctor_bpf_program_runs_total{program="inet_sock_set_state"} 1200
tcpdoctor_bpf_program_runs_total{program="kfree_skb"} 30
# HELP tcpdoctor_bpf_program_skipped_runs_total Runs of tcpdoctor's eBPF program at this attach point that the kernel skipped because it was already running on that CPU (an interrupt brought an event while it ran): what those runs would have counted is missing, so that program's tcpdoctor_bpf_ counters are lower bounds while it rises. Counted by the kernel always from Linux 6.7 (older kernels count none, though some skip).
# TYPE tcpdoctor_bpf_program_skipped_runs_total counter
tcpdoctor_bpf_program_skipped_runs_total{program="inet_sock_set_state"} 4
tcpdoctor_bpf_program_skipped_runs_total{program="kfree_skb"} 0
# HELP tcpdoctor_bpf_stats_enabled kernel.bpf_stats_enabled: 1 when the kernel counts eBPF programs' runs and run time (an operator's setting; tcpdoctor never changes it).
# TYPE tcpdoctor_bpf_stats_enabled gauge
tcpdoctor_bpf_stats_enabled 1
`},
		// Off and nothing ever counted: the runs are unknown, not zero;
		// the skipped runs are counted always.
		{"stats off", "0", func() ([]ProgramStat, error) {
			return []ProgramStat{{Program: "inet_sock_set_state"}, {Program: "kfree_skb"}}, nil
		}, [][]*snapshot.Snapshot{events}, `
# HELP tcpdoctor_bpf_events_lost_total Events tcpdoctor's eBPF programs could not count because a kernel map was full (flows, connection lifetimes, drops, retransmits, resets): the tcpdoctor_bpf_ counters are lower bounds while it rises.
# TYPE tcpdoctor_bpf_events_lost_total counter
tcpdoctor_bpf_events_lost_total 3
# HELP tcpdoctor_bpf_program_skipped_runs_total Runs of tcpdoctor's eBPF program at this attach point that the kernel skipped because it was already running on that CPU (an interrupt brought an event while it ran): what those runs would have counted is missing, so that program's tcpdoctor_bpf_ counters are lower bounds while it rises. Counted by the kernel always from Linux 6.7 (older kernels count none, though some skip).
# TYPE tcpdoctor_bpf_program_skipped_runs_total counter
tcpdoctor_bpf_program_skipped_runs_total{program="inet_sock_set_state"} 0
tcpdoctor_bpf_program_skipped_runs_total{program="kfree_skb"} 0
# HELP tcpdoctor_bpf_stats_enabled kernel.bpf_stats_enabled: 1 when the kernel counts eBPF programs' runs and run time (an operator's setting; tcpdoctor never changes it).
# TYPE tcpdoctor_bpf_stats_enabled gauge
tcpdoctor_bpf_stats_enabled 0
`},
		// No eBPF (serve --bpf off) and a kernel without the setting: nothing.
		{"no ebpf, no setting", "", nil, [][]*snapshot.Snapshot{{{Netns: snapshot.Netns{Name: "host"}}}}, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCost(tc.progs, procWithStats(t, tc.stats))
			for _, o := range tc.observe {
				c.Observe(o)
			}
			if err := testutil.CollectAndCompare(c, strings.NewReader(tc.want)); err != nil {
				t.Error(err)
			}
			if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
				t.Errorf("lint: %v %v", problems, err)
			}
		})
	}
	// A failing read is an error of the scrape, not zero runs.
	c := NewCost(func() ([]ProgramStat, error) { return nil, errors.New("bpf: bad fd") }, procWithStats(t, "1"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "bad fd") {
		t.Errorf("failing program stats: %v", err)
	}
}
