// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Stats summarises durations: median, min, max.
type Stats struct {
	Median, Min, Max time.Duration
	N                int
}

// Summarize is the median (the upper middle for an even count), min and
// max of ds.
func Summarize(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Stats{Median: s[len(s)/2], Min: s[0], Max: s[len(s)-1], N: len(s)}
}

func walls(rs []Run) []time.Duration {
	out := make([]time.Duration, len(rs))
	for i, r := range rs {
		out[i] = r.Wall
	}
	return out
}

// peak is the largest peak RSS of rs, an upper bound of every run's
// peak; exact is false when that run's figure is only our floor.
func peak(rs []Run) (b int64, exact bool) {
	for _, r := range rs {
		// On a tie the exact figure wins: the bound is no higher.
		if r.PeakRSS > b || (r.PeakRSS == b && !exact) {
			b, exact = r.PeakRSS, r.PeakRSS > r.Floor
		}
	}
	return b, exact
}

// peakText prints peak, "<=" marking a bound.
func peakText(rs []Run) string {
	b, exact := peak(rs)
	if !exact {
		return "<=" + mb(b)
	}
	return mb(b)
}

// Ratio is how many times faster ours is than ss, by medians; 0 when
// either is missing.
func (r Row) Ratio() float64 {
	o, s := Summarize(walls(r.Ours)), Summarize(walls(r.Theirs))
	if o.Median <= 0 || s.Median <= 0 {
		return 0
	}
	return float64(s.Median) / float64(o.Median)
}

// Above is the median time beyond the command's own waiting.
func (r Row) Above() time.Duration {
	return Summarize(walls(r.Ours)).Median - r.Waits
}

// Target is one goal for one row at one size (issues 11 and 28).
type Target struct {
	Size int    // sockets
	Row  string // Command.Name
	Kind string // "ratio" (at least), "rss", "above", "scrape" (under)
	// Limit: a ratio, bytes (rss), or a duration in nanoseconds.
	Limit float64
	Text  string
}

// MB is how targets count megabytes (decimal, as the issue prints them).
const MB = 1e6

// Targets are the issues' goals (docs/performance.md).
func Targets() []Target {
	return []Target{
		{20000, "sockets", "ratio", 6, "sockets >= 6x faster than ss -tinmp"},
		{20000, "no-owners", "ratio", 6, "sockets --no-owners >= 6x faster than ss -tinm"},
		{20000, "json", "ratio", 6, "sockets --json >= 6x faster than ss -tinmp"},
		{100000, "sockets", "rss", 150 * MB, "sockets peak RSS < 150 MB"},
		{100000, "json", "rss", 150 * MB, "sockets --json peak RSS < 150 MB"},
		{100000, "check", "rss", 250 * MB, "check peak RSS < 250 MB"},
		{100000, "record", "rss", 250 * MB, "record peak RSS < 250 MB"},
		{1000000, "check", "above", float64(3 * time.Second), "check < 3s above its interval"},
		{1000000, "check", "rss", 300 * MB, "check peak RSS < 300 MB"},
		{1000000, "serve", "scrape", float64(150 * time.Millisecond), "serve slowest scrape < 150ms"},
	}
}

// Verdict is a target judged against a row: the figure and whether it
// was met; Missing when the row did not run or did not finish.
type Verdict struct {
	Target
	Figure  string
	Met     bool
	Missing bool
}

// Judge judges every target whose size was measured.
func Judge(sizes []SizeResult, targets []Target) []Verdict {
	var out []Verdict
	for _, t := range targets {
		for _, sz := range sizes {
			if sz.Want != t.Size {
				continue
			}
			v := Verdict{Target: t, Missing: true, Figure: "not measured"}
			i := slices.IndexFunc(sz.Rows, func(r Row) bool { return r.Name == t.Row })
			if i >= 0 && sz.Rows[i].Err == "" && len(sz.Rows[i].Ours) > 0 {
				v = judge(t, sz.Rows[i])
			} else if i >= 0 && sz.Rows[i].Err != "" {
				v.Figure, v.Missing = "failed (see its row)", false
			}
			out = append(out, v)
		}
	}
	return out
}

func judge(t Target, r Row) Verdict {
	v := Verdict{Target: t}
	switch t.Kind {
	case "ratio":
		x := r.Ratio()
		v.Figure, v.Met, v.Missing = fmt.Sprintf("%.2fx", x), x >= t.Limit, x == 0
	case "rss":
		p, _ := peak(r.Ours)
		v.Figure, v.Met = peakText(r.Ours), float64(p) < t.Limit
	case "above":
		a := r.Above()
		v.Figure, v.Met = ms(a), float64(a) < t.Limit
	case "scrape":
		s := Summarize(r.Scrapes)
		v.Figure, v.Met, v.Missing = ms(s.Max), float64(s.Max) < t.Limit, s.N == 0
	}
	if v.Missing {
		v.Figure = "not measured"
	}
	return v
}

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return fmt.Sprintf("%.0fms", float64(d)/1e6)
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/MB) }

func spread(s Stats) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 {
		return ms(s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", ms(s.Median), ms(s.Min), ms(s.Max))
}

// Write prints the header and one table per size, each followed by the
// targets at that size with their verdicts.
func (r *E2EResult) Write(w io.Writer) error {
	if err := r.WriteHeader(w); err != nil {
		return err
	}
	for i := range r.Sizes {
		if err := r.WriteSize(w, i); err != nil {
			return err
		}
	}
	return nil
}

// WriteHeader says how every figure was taken.
func (r *E2EResult) WriteHeader(w io.Writer) error {
	_, err := fmt.Fprintf(w, "kernel %s; every command a separate process in netns %s (setns before exec), stdout to /dev/null; wall time fork to exit, median (min-max) of %d runs, ours and ss alternating; peak RSS = ru_maxrss of the largest run (\"<=\": at most our own size when it started); MB = 10^6 bytes\n",
		r.Kernel, r.Netns, r.Runs)
	return err
}

// WriteSize prints size i's table and its targets.
func (r *E2EResult) WriteSize(w io.Writer, i int) error {
	sz := r.Sizes[i]
	verdicts := Judge(r.Sizes[i:i+1], Targets())
	fmt.Fprintf(w, "\n== %d sockets asked (TCP sockets in use in the namespace: %d = %d connections x 2 + %d holder listeners)\n",
		sz.Want, sz.Sockets, sz.Conns, sz.Holders)
	fmt.Fprintf(w, "setup %s (%d holder processes); kernel memory since the bench began: Slab %+.1f MB, SUnreclaim %+.1f MB (host-wide), sockstat TCP mem %s\n",
		sz.Setup.Round(10*time.Millisecond), sz.Holders, float64(sz.Kernel.Slab-sz.Base.Slab)/MB, float64(sz.Kernel.SUnreclaim-sz.Base.SUnreclaim)/MB, mb(sz.Kernel.TCPMem))
	idle := ""
	if sz.IdleProcs > 0 {
		idle = fmt.Sprintf(", %d of them the bench's idle ones (--procs)", sz.IdleProcs)
	}
	fmt.Fprintf(w, "loadavg %s before, %s after; %d open files and %d processes on the host%s (fs/file-nr, /proc; owner walks visit them all)\n",
		sz.LoadFrom, sz.LoadTo, sz.Files, sz.Procs, idle)
	var failures []string
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "tcpdoctor command\ttime\tpeak RSS\tagainst\ttime\tpeak RSS\tratio\t")
	for _, row := range sz.Rows {
		name := strings.Join(row.Args, " ")
		switch {
		case row.Err != "":
			fmt.Fprintf(tw, "%s\tFAILED (below)\t\t\t\t\t\t\n", name)
			failures = append(failures, row.Err)
		case row.Serve:
			s := Summarize(row.Scrapes)
			fmt.Fprintf(tw, "%s\tfirst window after %s\t%s\tscrapes\tmedian %s, max %s (%d)\t\t\t\n",
				name, ms(row.Ours[0].Wall), peakText(row.Ours), ms(s.Median), ms(s.Max), s.N)
		case row.SS == nil:
			fmt.Fprintf(tw, "%s\t%s\t%s\tabove interval\t%s\t\t\t\n", name, spread(Summarize(walls(row.Ours))), peakText(row.Ours), ms(row.Above()))
		default:
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.2fx\t\n", name, spread(Summarize(walls(row.Ours))), peakText(row.Ours),
				strings.Join(row.SS, " "), spread(Summarize(walls(row.Theirs))), peakText(row.Theirs), row.Ratio())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range failures {
		fmt.Fprintf(w, "FAILED: %s\n", f)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, v := range verdicts {
		verdict := "MISSED"
		switch {
		case v.Missing:
			verdict = "-"
		case v.Met:
			verdict = "met"
		}
		fmt.Fprintf(tw, "target at %d: %s\t%s\t%s\n", v.Size, v.Text, v.Figure, verdict)
	}
	return tw.Flush()
}
