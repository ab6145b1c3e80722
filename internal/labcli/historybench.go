// SPDX-License-Identifier: Apache-2.0

package labcli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bench"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// The cadence the per-day figures assume: serve's default --interval,
// and history's defaults for a finding that goes on: its evidence every
// 5 minutes, or every file size / (256 MiB / 7 days) when that is longer
// (history.Recorder's pace).
const benchServeInterval = 15 * time.Second

// runHistoryBench is `serve-bench --history` (docs/performance.md;
// docs/performance-history.md, "History"): the Recorder's own cost in
// this process, then `tcpdoctor history` over a week as a person runs it.
func runHistoryBench(ctx context.Context, e *Env, o *serveBenchOpts, tcpdoctor string) error {
	dir, err := os.MkdirTemp("", "tcpdoctor-history-bench-")
	if err != nil {
		return failedErr(err)
	}
	defer os.RemoveAll(dir)
	res, err := bench.History(ctx, bench.HistoryOptions{Conns: o.conns, Windows: o.cycles, Dir: dir, Self: benchSelf(e), Progress: e.Stderr})
	if err != nil {
		return failedErr(err)
	}
	fmt.Fprintf(e.Stderr, "tcpdoctor-lab: bench: history: writing a week of timeline at %s...\n", benchServeInterval)
	week := filepath.Join(dir, "week")
	n, err := bench.HistoryWeek(week, benchServeInterval)
	if err != nil {
		return failedErr(err)
	}
	files, _ := os.ReadDir(week)
	var weekBytes int64
	for _, f := range files {
		if fi, err := f.Info(); err == nil {
			weekBytes += fi.Size()
		}
	}
	// `tcpdoctor history` over the whole week, as a person runs it (the
	// week ends where HistoryWeek ends it).
	end := time.Date(2026, 1, 12, 0, 0, 30, 0, time.UTC)
	hist := exec.CommandContext(ctx, tcpdoctor, "history", "--history", week,
		"--since", end.Add(-8*24*time.Hour).Format(time.RFC3339), "--until", end.Format(time.RFC3339))
	var stderr bytes.Buffer
	hist.Stderr = &stderr
	start := time.Now()
	if err := hist.Run(); err != nil {
		return failedErr(fmt.Errorf("bench: %s: %w: %s", strings.Join(hist.Args, " "), err, bytes.TrimSpace(stderr.Bytes())))
	}
	took := time.Since(start)

	perDay := float64(24*time.Hour) / float64(benchServeInterval)
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "kernel %s; per day at serve's --interval %s with the --history defaults (%s, %s), the warnings going on all day\n",
		res.Kernel, benchServeInterval, units.Bytes(history.DefaultMaxBytes), history.DefaultMaxAge)
	fmt.Fprintf(tw, "case\tsockets\twindows\twarnings\ttimeline/window\tevidence/file\tevidence every\tCPU/window\tCPU/evidence\tdisk/day\tCPU above serve\n")
	plain := 0.0 // the last case's with windows without evidence ("quiet" first)
	for _, c := range res.Cases {
		w := float64(c.Windows)
		tl := float64(c.TimelineBytes) / w
		if c.PlainWindows > 0 {
			plain = c.PlainCPU.Seconds() / float64(c.PlainWindows)
		}
		evFile, evCPU, day, cpuDay := 0.0, 0.0, tl*perDay, plain*perDay
		every := "-"
		if c.Evidence > 0 {
			evFile = float64(c.Bytes-c.TimelineBytes) / float64(c.Evidence)
			evCPU = c.EvidenceCPU.Seconds() / float64(c.Evidence)
			pace := max(history.DefaultEvidenceEvery, time.Duration(evFile/float64(history.DefaultMaxBytes)*float64(history.DefaultMaxAge)))
			every = pace.Round(time.Second).String()
			evPerDay := float64(24*time.Hour) / float64(pace)
			day = tl*perDay + evFile*evPerDay
			cpuDay = plain*(perDay-evPerDay) + evCPU*evPerDay
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f%% of a core\n", c.Name, c.Sockets, c.Windows, c.Findings,
			units.Bytes(tl), units.Bytes(evFile), every, dur(plain), dur(evCPU),
			units.Bytes(day), 100*cpuDay/float64(24*time.Hour/time.Second))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.Stdout, "history over a week (%d windows, %d files, %s): %s\n", n, len(files), units.Bytes(float64(weekBytes)), took.Round(time.Millisecond))
	return err
}

func dur(s float64) string { return time.Duration(s * 1e9).Round(10 * time.Microsecond).String() }
