// SPDX-License-Identifier: Apache-2.0

package labcli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/lab"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

type labRunOpts struct {
	quick, json, keep bool
	html              string
}

func newListCmd(e *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the scenarios",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SCENARIO\tCASE\tEXPECTS\tTITLE")
			for _, s := range lab.Scenarios() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Case, strings.Join(s.Expect, ","), s.Title)
			}
			return tw.Flush()
		},
	}
}

func newRunCmd(e *Env) *cobra.Command {
	o := &labRunOpts{}
	cmd := &cobra.Command{
		Use:   "run NAME|all",
		Short: "Run a scenario (or all): findings before and after, verdict",
		Long:  "Run a scenario (or all): its table, tcpdoctor's findings before and after the fix, and the verdict; exit 1 if not reproduced.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("run: name one scenario, or all (tcpdoctor-lab list lists them)")
			}
			return nil
		},
		Annotations: map[string]string{cleansUp: "true"},
		ValidArgsFunction: func(_ *cobra.Command, args []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var out []cobra.Completion
			for _, n := range append(scenarioNames(), "all") {
				if len(args) == 0 && strings.HasPrefix(n, typed) {
					out = append(out, n)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var todo []lab.Scenario
			if args[0] == "all" {
				todo = lab.Scenarios()
			} else {
				s, ok := lab.ByName(args[0])
				if !ok {
					return usageErr("lab: unknown scenario %q (%s)", args[0], scenarioHint(args[0]))
				}
				todo = []lab.Scenario{s}
			}
			if os.Geteuid() != 0 {
				return usageErr("lab: needs root (creates network namespaces, veths and a TUN device)")
			}
			tcpdoctor, err := e.tcpdoctor()
			if err != nil {
				return err
			}
			opts := lab.Options{Self: e.Self, Tcpdoctor: tcpdoctor, DelayLine: delayLineExec(e), Quick: o.quick, Keep: o.keep, Log: e.Stderr, HTMLDir: o.html}
			var results []*lab.Result
			failed := 0
			out := &stickyWriter{w: e.Stdout}
			for _, s := range todo {
				if cmd.Context().Err() != nil {
					break
				}
				fmt.Fprintf(e.Stderr, "lab: running %s...\n", s.Name)
				res, err := lab.Execute(cmd.Context(), s, opts)
				if err != nil {
					fmt.Fprintf(e.Stderr, "lab: %s: %s\n", s.Name, textsafe.String(err.Error()))
				}
				if !res.Reproduced {
					failed++
				}
				results = append(results, res)
				if !o.json {
					// Each scenario has removed what it built by now; a
					// closed stdout runs no more of them.
					if lab.WriteText(out, res); out.err != nil {
						return failedErr(fmt.Errorf("lab: writing results: %w", out.err))
					}
				}
			}
			if o.json {
				enc := json.NewEncoder(e.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(results); err != nil {
					return failedErr(fmt.Errorf("lab: writing results: %w", err))
				}
			}
			if cmd.Context().Err() != nil {
				return fmt.Errorf("lab: interrupted; everything the runs created was removed")
			}
			if failed > 0 {
				return &exitError{code: ExitFailed, err: fmt.Errorf("lab: %d of %d scenarios not reproduced", failed, len(results))}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&o.quick, "quick", false, "reduced matrix and shorter loads (CI)")
	fs.BoolVar(&o.json, "json", false, "print results as JSON")
	fs.BoolVar(&o.keep, "keep", false, "leave namespaces and processes for inspection (tcpdoctor-lab clean removes them)")
	fs.StringVar(&o.html, "html", "", "write the trace reports of the scenarios that record one (c5-small-rcvbuf, c3-pinned-sndbuf) to this directory")
	return cmd
}

func scenarioNames() []string {
	var names []string
	for _, s := range lab.Scenarios() {
		names = append(names, s.Name)
	}
	return names
}

// scenarioHint names the scenarios a mistyped name begins, case
// insensitively ("c1" is case C1's), else points at the list.
func scenarioHint(typed string) string {
	var near []string
	for _, n := range scenarioNames() {
		if typed != "" && strings.HasPrefix(n, strings.ToLower(typed)) {
			near = append(near, n)
		}
	}
	if len(near) == 0 {
		return "see tcpdoctor-lab list"
	}
	return "did you mean " + strings.Join(near, ", ") + "?"
}

func newCleanCmd(e *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "clean",
		Short: "Remove what killed lab runs left (namespaces, processes)",
		Long:  "Remove what killed lab runs left behind: tdlab-* network namespaces and the traffic processes they recorded.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.Clean(cmd.Context(), e.Self, e.Stderr)
		},
	}
}
