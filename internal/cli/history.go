// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/outfile"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
)

type historyOpts struct {
	dir     string
	since   string
	until   string
	rules   []string
	netns   string
	json    jsonOpt
	verbose bool
	picture bool
	html    string
}

// newHistoryCmd lists the incidents serve --history kept (docs/history.md).
func newHistoryCmd(e *Env) *cobra.Command {
	o := &historyOpts{}
	cmd := &cobra.Command{
		Use:   "history [DIR]",
		Short: "List the incidents serve --history kept, each with its replay",
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
	o.json.register(fs)
	fs.BoolVar(&o.picture, "picture", false, "print the findings over time per subject even for one incident (printed by default for two or more)")
	fs.StringVar(&o.html, "html", "", "also write a page with the timeline chart per subject and the incidents with their replay commands")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "also list info findings")
	return cmd
}

func runHistory(e *Env, o *historyOpts) error {
	if o.dir == "" {
		return usageErr("history: the directory is required: history DIR (or --history DIR)")
	}
	if _, err := rules.Select(o.rules); err != nil {
		return usageErr("history: %v", err)
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
	l, pic, hp, err := history.List(st, since, until, f, !o.json.on, page != nil)
	if err != nil {
		return usageErr("history: %v", err)
	}
	history.TraceLinks(l, st.Traces(), o.html)
	if page != nil {
		history.WriteTracePages(l, o.html, func(name string, err error) { e.progress("history: --html: trace %s: %v", name, err) })
		if err := history.WritePage(page, l, &hp, now.Location()); err != nil {
			return fmt.Errorf("history: --html: %w", err)
		}
	}
	if o.json.on {
		return history.WriteJSON(e.Stdout, l)
	}
	if o.picture || len(l.Incidents) > 1 {
		l.Picture = &pic
	}
	history.WriteText(e.Stdout, l, now.Location(), e.columns())
	return nil
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
	r, err := st.ReplayAt(t, now.Location())
	if err != nil {
		return fmt.Errorf("%s: --history: %w", name, err)
	}
	for _, line := range r.Said {
		e.progress("%s", line)
	}
	if r.Path != "" {
		src.from = r.Path
		return nil
	}
	_, _ = e.Stderr.Write(r.Missing)
	return usageErr("%s: %w", name, errNoEvidence)
}

var errNoEvidence = errors.New("no evidence kept for that time (see above)")
