package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bench"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// The cadence the per-day figures assume: serve's default --interval and
// history's default evidence interval for a persisting finding.
const (
	benchServeInterval = 15 * time.Second
	benchEvidenceEvery = 5 * time.Minute
)

// runHistoryBench is `serve bench --history` (docs/performance.md,
// "History").
func runHistoryBench(ctx context.Context, e *Env, o *serveBenchOpts) error {
	dir, err := os.MkdirTemp("", "tcpdoctor-history-bench-")
	if err != nil {
		return collectErr(err)
	}
	defer os.RemoveAll(dir)
	res, err := bench.History(ctx, bench.HistoryOptions{Conns: o.conns, Windows: o.cycles, Dir: dir, Self: benchSelf(e), Progress: e.Stderr})
	if err != nil {
		return collectErr(err)
	}
	e.progress("bench: history: writing a week of timeline at %s...", benchServeInterval)
	week := filepath.Join(dir, "week")
	n, err := bench.HistoryWeek(week, benchServeInterval)
	if err != nil {
		return collectErr(err)
	}
	files, _ := os.ReadDir(week)
	var weekBytes int64
	for _, f := range files {
		if fi, err := f.Info(); err == nil {
			weekBytes += fi.Size()
		}
	}
	// `history` over the whole week, as a person runs it.
	end := time.Date(2026, 1, 12, 0, 0, 30, 0, time.UTC)
	he := *e
	he.Stdout, he.Now = io.Discard, func() time.Time { return end }
	start := time.Now()
	if err := runHistory(&he, &historyOpts{dir: week, since: "8d"}); err != nil {
		return err
	}
	took := time.Since(start)

	perDay := float64(24*time.Hour) / float64(benchServeInterval)
	evPerDay := float64(24*time.Hour) / float64(benchEvidenceEvery)
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "kernel %s; per day at serve's --interval %s, a persisting finding's evidence every %s\n", res.Kernel, benchServeInterval, benchEvidenceEvery)
	fmt.Fprintf(tw, "case\tsockets\twindows\twarnings\ttimeline/window\tevidence/file\tCPU/window\tdisk/day\tCPU above serve\n")
	var quietCPU float64
	for _, c := range res.Cases {
		w := float64(c.Windows)
		tl := float64(c.TimelineBytes) / w
		cpu := c.CPU.Seconds() / w
		evFile, day, cpuDay := 0.0, tl*perDay, cpu*perDay
		if c.Name == "quiet" {
			quietCPU = cpu
		}
		if c.Evidence > 0 {
			evFile = float64(c.Bytes-c.TimelineBytes) / float64(c.Evidence)
			day = tl*perDay + evFile*evPerDay
			// Windows without evidence cost what a quiet one does; those
			// with it what this case's did.
			cpuDay = quietCPU*(perDay-evPerDay) + cpu*evPerDay
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.3f%% of a core\n", c.Name, c.Sockets, c.Windows, c.Findings,
			units.Bytes(tl), units.Bytes(evFile), (time.Duration(cpu * 1e9)).Round(10*time.Microsecond),
			units.Bytes(day), 100*cpuDay/float64(24*time.Hour/time.Second))
	}
	fmt.Fprintf(tw, "history over a week\t%d windows, %d files, %s\t%s\n", n, len(files), units.Bytes(float64(weekBytes)), took.Round(time.Millisecond))
	return tw.Flush()
}
