// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/phases"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// RunPhases is where one run spent its time: its spans between the
// start and the end the bench saw, all on the system's monotonic clock.
// A run of the library in the bench's process (InProcess) has no
// process start and exit of its own.
type RunPhases struct {
	Fork, Reap int64
	File       phases.File
	InProcess  bool
}

// library times o.Runs collections of ns (sockets with owners, as
// `sockets` collects them) by the collection library in this process,
// each in its parts (collect.Options.Phases).
func (o *E2EOptions) library(ns netns.NS) ([]Run, error) {
	f, err := os.CreateTemp("", "tcpdoctor-bench-phases-*.json")
	if err != nil {
		return nil, fmt.Errorf("bench: phases: %w", err)
	}
	f.Close()
	defer os.Remove(f.Name())
	var runs []Run
	for range o.Runs {
		runtime.GC()
		start := phases.Now()
		rec := phases.New(start, f.Name())
		c := &collect.Collector{Opts: collect.Options{Owners: true, ProcRoot: o.ProcRoot, Phases: rec}, Now: time.Now}
		snaps := c.Collect([]netns.NS{ns})
		end := phases.Now()
		// An owner walk that could not read a process is partial, as
		// for sockets; a dump or a namespace that failed is no figure.
		for _, se := range snaps[0].Errors {
			if se.Source == snapshot.SourceSockdiag || se.Source == snapshot.SourceNetns {
				return nil, fmt.Errorf("bench: phases: the library's collection: %s: %s", se.Source, se.Err)
			}
		}
		if err := rec.Write(); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		file, err := phases.Read(f.Name())
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		runs = append(runs, Run{Wall: time.Duration(end - start), Phases: &RunPhases{Fork: start, Reap: end, File: file, InProcess: true}})
	}
	return runs, nil
}

// Part names the bench adds around a run's own spans.
const (
	partStart = "start: fork to main (exec, Go runtime, init)"
	partExit  = "exit: last part to reaped"
)

// part is one named part of a run: when it began after the fork, how
// long it took, and for a part done in pieces how many.
type part struct {
	from, took time.Duration
	pieces     int
}

// parts lists a run's parts in the order they began, the start and exit
// the bench saw included. A part done again (each sample of check) is
// numbered: "dump", "dump #2".
func (p *RunPhases) parts() (names []string, by map[string]part) {
	by = map[string]part{}
	seen := map[string]int{}
	add := func(name string, pt part) {
		seen[name]++
		if n := seen[name]; n > 1 {
			name = fmt.Sprintf("%s #%d", name, n)
		}
		names = append(names, name)
		by[name] = pt
	}
	if !p.InProcess {
		add(partStart, part{took: time.Duration(p.File.Main - p.Fork)})
	}
	spans := slices.Clone(p.File.Spans)
	slices.SortStableFunc(spans, func(a, b phases.Span) int { return int(a.Start - b.Start) })
	last := p.File.Main
	for _, s := range spans {
		add(s.Name, part{from: time.Duration(s.Start - p.Fork), took: s.Took(), pieces: s.Count})
		last = max(last, s.End)
	}
	if !p.InProcess {
		add(partExit, part{from: time.Duration(last - p.Fork), took: time.Duration(p.Reap - last)})
	}
	return names, by
}

// WritePhases prints, for each of size i's rows run with phases and for
// its library runs (SizeResult.Library), the median of each part over
// the runs: when it began after the start and how long it took. Parts
// beside each other (the owner walk beside the dump) overlap, so the
// times do not add up to the wall time.
func (r *E2EResult) WritePhases(w io.Writer, i int) error {
	var sockets *Row
	for j, row := range r.Sizes[i].Rows {
		if row.Name == "sockets" {
			sockets = &r.Sizes[i].Rows[j]
		}
		runs := phased(row.Ours)
		if len(runs) == 0 {
			continue
		}
		user, sys := cpuOf(row.Ours)
		fmt.Fprintf(w, "\nwhere `%s` spent its %s, with %s ms of user and %s ms of system CPU (median of %d runs, ms after the fork; parts beside each other overlap):\n",
			strings.Join(row.Args, " "), ms(Summarize(walls(row.Ours)).Median), msf(user), msf(sys), len(runs))
		if err := writeParts(w, runs, row); err != nil {
			return err
		}
	}
	if runs := phased(r.Sizes[i].Library); len(runs) > 0 {
		fmt.Fprintf(w, "\nwhere the collection library spent its %s collecting these sockets with owners in the bench's process (median of %d runs, ms after its start; parts beside each other overlap):\n",
			ms(Summarize(walls(r.Sizes[i].Library)).Median), len(runs))
		against := Row{}
		if sockets != nil {
			against = *sockets
		}
		return writeParts(w, runs, against)
	}
	return nil
}

// phased is the phases of the runs timed in parts.
func phased(runs []Run) []*RunPhases {
	var out []*RunPhases
	for _, run := range runs {
		if run.Phases != nil {
			out = append(out, run.Phases)
		}
	}
	return out
}

// writeParts prints the parts table of runs, then the wall and CPU time
// of row's ss (when it has one) to hold them against.
func writeParts(w io.Writer, runs []*RunPhases, row Row) error {
	var order []string
	from, took := map[string][]time.Duration{}, map[string][]time.Duration{}
	pieces := map[string]int{}
	for _, p := range runs {
		names, by := p.parts()
		for _, n := range names {
			if _, ok := took[n]; !ok {
				order = append(order, n)
			}
			from[n] = append(from[n], by[n].from)
			took[n] = append(took[n], by[n].took)
			pieces[n] = max(pieces[n], by[n].pieces)
		}
	}
	// The exit comes last, whatever order the runs gave.
	if _, ok := took[partExit]; ok {
		order = append(slices.DeleteFunc(order, func(n string) bool { return n == partExit }), partExit)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "part\tfrom\ttook\t(min-max)\t")
	for _, n := range order {
		t := Summarize(took[n])
		label := n
		if pieces[n] > 0 {
			label = fmt.Sprintf("%s, %d pieces", n, pieces[n])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t(%s-%s)\t\n", label, msf(Summarize(from[n]).Median), msf(t.Median), msf(t.Min), msf(t.Max))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(row.Theirs) > 0 {
		// ss's system CPU is the kernel's work for it, its sock_diag
		// dump above all: what any reader of these sockets pays.
		user, sys := cpuOf(row.Theirs)
		fmt.Fprintf(w, "against `%s`: %s, with %s ms of user and %s ms of system CPU (median of %d runs)\n",
			strings.Join(row.SS, " "), ms(Summarize(walls(row.Theirs)).Median), msf(user), msf(sys), len(row.Theirs))
	}
	return nil
}

// cpuOf is the median user and system CPU time of runs.
func cpuOf(runs []Run) (user, sys time.Duration) {
	var us, ss []time.Duration
	for _, run := range runs {
		us, ss = append(us, run.User), append(ss, run.System)
	}
	return Summarize(us).Median, Summarize(ss).Median
}

// msf is a duration in ms with a tenth.
func msf(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }
