// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// ProgramStat is one eBPF program's runs and run time as the kernel
// counts them (bpfsource.Source.ProgramStats).
type ProgramStat struct {
	Program string
	Runs    uint64
	Runtime time.Duration
	// Skipped is the runs the kernel skipped (counted always).
	Skipped uint64
}

// Cost exports what tcpdoctor itself costs the host beyond what each
// collection reports (tcpdoctor_source_duration_seconds and the rest,
// docs/exporter.md "What tcpdoctor costs"): the kernel's run counts and
// run time of the eBPF programs, where the operator turned the kernel's
// BPF statistics on, and the events those programs could not count.
type Cost struct {
	// Programs returns the attached programs' statistics; nil when no
	// program is loaded.
	Programs func() ([]ProgramStat, error)
	// ProcRoot is "/proc": kernel.bpf_stats_enabled is read below it.
	ProcRoot string

	mu   sync.Mutex
	lost float64
	seen bool // a collection carried the eBPF counters

	descEnabled, descRuns, descRuntime, descSkipped, descLost *prometheus.Desc
}

// NewCost returns the cost collector.
func NewCost(programs func() ([]ProgramStat, error), procRoot string) *Cost {
	return &Cost{
		Programs: programs, ProcRoot: procRoot,
		descEnabled: prometheus.NewDesc("tcpdoctor_bpf_stats_enabled",
			"kernel.bpf_stats_enabled: 1 when the kernel counts eBPF programs' runs and run time (an operator's setting; tcpdoctor never changes it).", nil, nil),
		descRuns: prometheus.NewDesc("tcpdoctor_bpf_program_runs_total",
			"Runs of tcpdoctor's eBPF program at this attach point, counted by the kernel while its BPF statistics are on (kernel.bpf_stats_enabled, or a tool holding them on).", []string{"program"}, nil),
		descRuntime: prometheus.NewDesc("tcpdoctor_bpf_program_run_seconds_total",
			"Time tcpdoctor's eBPF program at this attach point ran (in the kernel, on the host's CPUs), counted while the kernel's BPF statistics are on (kernel.bpf_stats_enabled, or a tool holding them on).", []string{"program"}, nil),
		descSkipped: prometheus.NewDesc("tcpdoctor_bpf_program_skipped_runs_total",
			"Runs of tcpdoctor's eBPF program at this attach point that the kernel skipped because it was already running on that CPU (an interrupt brought an event while it ran): what those runs would have counted is missing, so that program's tcpdoctor_bpf_ counters are lower bounds while it rises. Counted by the kernel always from Linux 6.7 (older kernels count none, though some skip).", []string{"program"}, nil),
		descLost: prometheus.NewDesc("tcpdoctor_bpf_events_lost_total",
			"Events tcpdoctor's eBPF programs could not count because a kernel map was full (flows, connection lifetimes, drops, retransmits, resets): the tcpdoctor_bpf_ counters are lower bounds while it rises.", nil, nil),
	}
}

// Observe adds one collection's lost events (the same count rides in each
// namespace's snapshot: it is read once for all).
func (c *Cost) Observe(snaps []*snapshot.Snapshot) {
	for _, s := range snaps {
		if s.Events != nil {
			c.mu.Lock()
			c.lost += float64(s.Events.Lost)
			c.seen = true
			c.mu.Unlock()
			return
		}
	}
}

// statsEnabled reads kernel.bpf_stats_enabled; ok is false when it
// cannot be read (a kernel without it, or no /proc).
func (c *Cost) statsEnabled() (enabled, ok bool) {
	b, err := os.ReadFile(filepath.Join(c.ProcRoot, "sys", "kernel", "bpf_stats_enabled"))
	if err != nil {
		return false, false
	}
	v := strings.TrimSpace(string(b))
	return v != "0", v != ""
}

// Describe sends the cost families' descriptions.
func (c *Cost) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.descEnabled
	ch <- c.descRuns
	ch <- c.descRuntime
	ch <- c.descSkipped
	ch <- c.descLost
}

// Collect sends kernel.bpf_stats_enabled, the programs' runs and run
// time, and the events lost since start where the eBPF counters run. The
// kernel counts runs only while its statistics are on: by that setting, or
// for as long as a tool holds them on (BPF_ENABLE_STATS, which the setting
// does not show). So the programs' families are sent when the setting is 1
// or a program has a run counted, and are absent (unknown, not zero) when
// nothing was ever counted. The runs the kernel skipped it counts always:
// they are sent whenever the programs' statistics could be read.
func (c *Cost) Collect(ch chan<- prometheus.Metric) {
	enabled, ok := c.statsEnabled()
	if ok {
		ch <- prometheus.MustNewConstMetric(c.descEnabled, prometheus.GaugeValue, b2f(enabled))
	}
	if c.Programs != nil {
		ps, err := c.Programs()
		counted := enabled
		for _, p := range ps {
			counted = counted || p.Runs > 0
		}
		switch {
		case err != nil:
			ch <- prometheus.NewInvalidMetric(c.descRuns, err)
		case counted:
			for _, p := range ps {
				ch <- prometheus.MustNewConstMetric(c.descRuns, prometheus.CounterValue, float64(p.Runs), p.Program)
				ch <- prometheus.MustNewConstMetric(c.descRuntime, prometheus.CounterValue, p.Runtime.Seconds(), p.Program)
			}
		}
		if err == nil {
			for _, p := range ps {
				ch <- prometheus.MustNewConstMetric(c.descSkipped, prometheus.CounterValue, float64(p.Skipped), p.Program)
			}
		}
	}
	c.mu.Lock()
	lost, seen := c.lost, c.seen
	c.mu.Unlock()
	if seen {
		ch <- prometheus.MustNewConstMetric(c.descLost, prometheus.CounterValue, lost)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
