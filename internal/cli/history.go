// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/outfile"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
)

type historyOpts struct {
	dir     string
	since   string
	until   string
	rules   []string
	netns   string
	json    bool
	verbose bool
	picture bool
	html    string
}

// newHistoryCmd lists the incidents serve --history kept (docs/history.md).
func newHistoryCmd(e *Env) *cobra.Command {
	o := &historyOpts{}
	cmd := &cobra.Command{
		Use:   "history [DIR]",
		Short: "List the incidents `serve --history` kept: when, how bad, what, and the command that replays each",
		Long: `Read the store serve --history DIR keeps and print its incidents, oldest first: a finding seen in
consecutive windows of its namespace is one incident, with its start, its end or "ongoing", its
peak severity, subject and summary, and the check --history DIR --at TIME command that prints
the full diagnosis of its window (evidence and fixes) where the samples were kept.
With two or more incidents (or --picture) a strip per subject shows its findings over time,
one character per bucket (C critical, W warning, i info, . quiet, blank no window); --html FILE
writes a page with that chart and the incidents.
Times: RFC 3339, a clock time today (03:12), or a duration before now (2h, -30m, 7d).`,
		Args: cobra.MaximumNArgs(1),
		// DIR completes as a directory.
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return nil, cobra.ShellCompDirectiveFilterDirs
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if o.dir != "" && o.dir != args[0] {
					return usageErr("history: the directory is given twice (%q and --history %q)", args[0], o.dir)
				}
				o.dir = args[0]
			}
			return runHistory(e, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.dir, "history", "", "the directory serve --history writes (or as the argument DIR)")
	fs.StringVar(&o.since, "since", "24h", "list windows ending after this time")
	fs.StringVar(&o.until, "until", "", "list windows ending at or before this time (default: now)")
	fs.StringSliceVar(&o.rules, "rule", nil, "only these rules")
	fs.StringVar(&o.netns, "netns", "", "only this network namespace (its name as check prints it)")
	fs.BoolVar(&o.json, "json", false, "print the versioned JSON listing (docs/history.md)")
	fs.BoolVar(&o.picture, "picture", false, "print the findings over time per subject even for one incident (printed by default for two or more)")
	fs.StringVar(&o.html, "html", "", "also write a page with the timeline chart per subject and the incidents with their replay commands")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "also list info findings")
	return cmd
}

func runHistory(e *Env, o *historyOpts) error {
	if o.dir == "" {
		return usageErr("history: the directory is required: history DIR (or --history DIR)")
	}
	for _, id := range o.rules {
		if _, ok := rules.ByID(id); !ok {
			return usageErr("history: unknown rule %q (see tcpdoctor rules)", id)
		}
	}
	now := e.Now()
	since, err := history.ParseTime(o.since, now)
	if err != nil {
		return usageErr("history: --since: %v", err)
	}
	until := now
	if o.until != "" {
		if until, err = history.ParseTime(o.until, now); err != nil {
			return usageErr("history: --until: %v", err)
		}
	}
	if !until.After(since) {
		return usageErr("history: --until must be after --since")
	}
	// The page is created before the store is read: a path that cannot
	// be written is the user's argument, said at once.
	var page *outfile.Atomic
	if o.html != "" {
		if page, err = outfile.CreateAtomic(o.html); err != nil {
			return usageErr("history: --html: %v", err)
		}
		defer page.Abort() // unless committed: the old file stays
	}
	st, err := openStore(o.dir)
	if err != nil {
		return err
	}
	f := history.Filter{Min: diag.Warning, Rules: o.rules, Netns: o.netns}
	if o.verbose {
		f.Min = diag.Info
	}
	l, pic, hp, err := historyListing(st, since, until, f, !o.json, page != nil)
	if err != nil {
		return usageErr("history: %v", err)
	}
	traceLinks(l, st.Traces(), o.html)
	if page != nil {
		writeTracePages(e, l, o.html)
		if err := writeHistoryHTML(page, l, &hp, now.Location()); err != nil {
			return fmt.Errorf("history: --html: %w", err)
		}
	}
	if o.json {
		return history.WriteJSON(e.Stdout, l)
	}
	if o.picture || len(l.Incidents) > 1 {
		l.Picture = &pic
	}
	history.WriteText(e.Stdout, l, now.Location())
	return nil
}

// maxListed bounds the incidents history holds and lists (the newest):
// its memory stays bounded whatever the store holds.
const maxListed = 10000

// historyListing reads the store's windows ending in (since, until] as a
// stream, one entry at a time, once (history's, and serve's /history):
// the incidents f selects (at most maxListed held) with their replay
// commands, and the pictures' cells, the terminal's when text, the
// page's when html (the span of the pictures from the store's first and
// last segments).
func historyListing(st *history.Store, since, until time.Time, f history.Filter, text, html bool) (l *history.Listing, pic, hp history.Picture, err error) {
	g := history.NewGrouper(f)
	g.Max = maxListed
	l = &history.Listing{Dir: st.Dir, Since: since, Until: until}
	first, last, found := st.Bounds(since, until)
	var tb, hb *history.PictureBuilder
	if found {
		if text {
			tb = history.NewPictureBuilder(f, first, last, textPictureWidth)
		}
		if html {
			hb = history.NewPictureBuilder(f, first, last, htmlPictureWidth)
		}
	}
	err = st.Walk(since, until, func(en *history.Entry) error {
		if l.Windows == 0 || en.From.Before(l.First) {
			l.First = en.From
		}
		if en.To.After(l.Last) {
			l.Last = en.To
		}
		l.Windows++
		g.Add(en)
		if tb != nil {
			tb.Add(en)
		}
		if hb != nil {
			hb.Add(en)
		}
		return nil
	})
	if err != nil {
		return nil, pic, hp, err
	}
	l.Incidents = g.Incidents(until)
	l.Notes = st.Notes
	if g.Dropped > 0 {
		l.Notes = append(l.Notes, fmt.Sprintf("%d older incidents not listed: at most %d are (narrow with --since, --rule or --netns)", g.Dropped, maxListed))
	}
	kept := map[string]bool{}
	for _, w := range st.Evidence() {
		kept[w.Name] = true
	}
	for _, in := range l.Incidents {
		cmd := ""
		if in.Evidence != "" && kept[in.Evidence] {
			cmd = history.ReplayCommand(st.Dir, in.At)
		}
		l.Replay = append(l.Replay, cmd)
	}
	if tb != nil {
		pic = tb.Picture()
	}
	if hb != nil {
		hp = hb.Picture()
	}
	return l, pic, hp, nil
}

// Buckets of the picture: a strip fits an 80-column terminal; the page's
// chart is finer.
const (
	textPictureWidth = 60
	htmlPictureWidth = 240
)

// traceLinks fills each incident's trace command (the trace's page named
// after it in the working directory, or beside the --html page), or says
// why the trace it names is not in the store.
func traceLinks(l *history.Listing, kept map[string]bool, page string) {
	for _, in := range l.Incidents {
		cmd, note := "", ""
		switch {
		case in.Trace == "":
		case kept[in.Trace]:
			html := history.TracePage(in.Trace)
			if page != "" {
				html = tracePagePath(page, in.Trace)
			}
			cmd = history.TraceCommand(l.Dir, in.Trace, html)
		default:
			note = in.Trace + " is not in the store: still being recorded, evicted, or not kept (the timeline's notes say why)"
		}
		l.TraceReplay = append(l.TraceReplay, cmd)
		l.TraceNote = append(l.TraceNote, note)
	}
}

// tracePagePath is where history --html PAGE renders the page of the
// trace name: beside PAGE, named after both.
func tracePagePath(page, name string) string {
	base := strings.TrimSuffix(filepath.Base(page), ".html")
	return filepath.Join(filepath.Dir(page), base+"-"+history.TracePage(name))
}

// writeTracePages renders each incident's trace beside the history page
// and links it (by its name: the two pages sit in one directory). A trace
// that cannot be read or written is said on stderr and not linked.
func writeTracePages(e *Env, l *history.Listing, page string) {
	l.TracePages = make([]string, len(l.Incidents))
	for i, in := range l.Incidents {
		if l.TraceReplay[i] == "" {
			continue
		}
		path := tracePagePath(page, in.Trace)
		if err := writeTracePage(filepath.Join(l.Dir, in.Trace), path); err != nil {
			e.progress("history: --html: trace %s: %v", in.Trace, err)
			l.TraceNote[i] = "its page could not be written: " + err.Error()
			l.TraceReplay[i] = ""
			continue
		}
		l.TracePages[i] = filepath.Base(path)
	}
}

// writeTracePage renders the trace file src as trace --from src --html
// dst does.
func writeTracePage(src, dst string) error {
	tr, ts, err := analyzeTraceFile(src)
	if err != nil {
		return err
	}
	out, err := outfile.CreateAtomic(dst)
	if err != nil {
		return err
	}
	defer out.Abort()
	return writeTraceHTML(out, tr, ts)
}

// analyzeTraceFile reads a kept trace (a torn one up to its damage) and
// splits its transfers, as trace --from does.
func analyzeTraceFile(src string) (*trace.Trace, []trace.Transfer, error) {
	tr, err := readTraceFile(src)
	var torn *jsonl.TornError
	if err != nil && !errors.As(err, &torn) {
		return nil, nil, err
	}
	a := trace.Analyze(tr, trace.SegmentOptions{}, trace.JudgeOptions{})
	return tr, a.Transfers, nil
}

// writeHistoryHTML writes the page and renames it into place.
func writeHistoryHTML(page *outfile.Atomic, l *history.Listing, p *history.Picture, loc *time.Location) error {
	if err := history.WriteHTML(page, l, p, loc); err != nil {
		page.Abort()
		if werr := page.Err(); werr != nil {
			return werr // the file's, not the template's wrapping of it
		}
		return err
	}
	return page.Commit()
}

// openStore opens a history directory; one that cannot be read is a
// usage error (the caller named it).
func openStore(dir string) (*history.Store, error) {
	st, err := history.Open(dir)
	if err != nil {
		return nil, usageErr("--history: %v", err)
	}
	return st, nil
}

// atOpts are check's and sockets' --history DIR --at TIME: a window
// serve --history kept, read as --from reads a file.
type atOpts struct {
	dir string
	at  string
}

func (a *atOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&a.dir, "history", "", "read the window serve --history kept in this directory (with --at)")
	fs.StringVar(&a.at, "at", "", "with --history: the time to replay (RFC 3339, a clock time today like 03:12, or -30m)")
}

// resolve points src at the evidence file whose window covers --at. With
// none, it says on stderr what the timeline holds for that time and the
// nearest windows with evidence, and fails with a usage error.
func (a *atOpts) resolve(e *Env, src *sourceOpts, name string) error {
	if a.dir == "" && a.at == "" {
		return nil
	}
	if a.dir == "" || a.at == "" {
		return usageErr("%s: --history and --at go together", name)
	}
	if src.from != "" || src.netns != "" || src.allNetns {
		return usageErr("%s: --history --at reads a kept window; --from, --netns and --all-netns do not apply", name)
	}
	now := e.Now()
	t, err := history.ParseTime(a.at, now)
	if err != nil {
		return usageErr("%s: --at: %v", name, err)
	}
	st, err := openStore(a.dir)
	if err != nil {
		return err
	}
	cover, before, after := st.At(t)
	loc := now.Location()
	clock := func(t time.Time) string { return t.In(loc).Format("2006-01-02 15:04:05.000") }
	// The incidents covering t: their spans, and their evidence nearest t
	// when no window kept covers t itself.
	moments, err := st.IncidentsAt(t, history.Filter{Min: diag.Warning})
	if err != nil {
		return fmt.Errorf("%s: --history: %w", name, err)
	}
	spans := func() {
		for _, m := range moments {
			e.progress("the incident covering it: %s %s %s, %s .. %s (%d windows)", m.Severity.Label(), textsafe.String(m.Rule),
				report.SubjectText(m.Subject), clock(m.Start), clock(m.End), m.Windows)
		}
	}
	if cover != nil {
		if _, err := os.Stat(st.Path(cover.Name)); err == nil {
			e.progress("replaying the window %s .. %s kept in %s (%s)", clock(cover.From), clock(cover.To), a.dir, cover.Name)
			spans()
			src.from = st.Path(cover.Name)
			return nil
		}
	}
	for _, m := range moments {
		if m.Nearest == nil {
			continue
		}
		if _, err := os.Stat(st.Path(m.Nearest.Name)); err != nil {
			continue
		}
		e.progress("replaying the window %s .. %s kept in %s (%s): no window kept covers %s; this is the nearest kept of the incident covering it",
			clock(m.Nearest.From), clock(m.Nearest.To), a.dir, m.Nearest.Name, clock(t))
		spans()
		src.from = st.Path(m.Nearest.Name)
		return nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "no evidence kept in %s for %s\n", textsafe.String(a.dir), clock(t))
	es, _ := st.Entries(t.Add(-time.Hour), t.Add(time.Hour))
	if cv := history.Covering(es, t); len(cv) > 0 {
		fmt.Fprintf(&b, "the timeline has:\n")
		history.WriteEntries(&b, cv, loc)
	} else {
		fmt.Fprintf(&b, "the timeline has no window covering it\n")
	}
	for _, w := range []struct {
		what string
		win  *history.Window
	}{{"before", before}, {"after", after}} {
		if w.win != nil {
			fmt.Fprintf(&b, "nearest window with evidence %s: %s .. %s: %s\n", w.what, clock(w.win.From), clock(w.win.To),
				textsafe.String(history.ReplayCommand(a.dir, w.win.To)))
		}
	}
	if before == nil && after == nil {
		fmt.Fprintf(&b, "no window with evidence is kept\n")
	}
	for _, n := range st.Notes {
		fmt.Fprintf(&b, "note: %s\n", textsafe.String(n))
	}
	_, _ = e.Stderr.Write(b.Bytes())
	return usageErr("%s: %w", name, errNoEvidence)
}

var errNoEvidence = errors.New("no evidence kept for that time (see above)")
