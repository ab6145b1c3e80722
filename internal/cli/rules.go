// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/docs"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
)

func newRulesCmd(e *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "rules",
		Short: "List the diagnosis rules",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "RULE\tNEEDS WINDOW\tTITLE")
			for _, r := range rules.All() {
				win := "no"
				if r.NeedsDelta {
					win = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, win, r.Title)
			}
			return tw.Flush()
		},
	}
}

func newExplainCmd(e *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "explain RULE",
		Short: "Print a rule's page: what it means, its evidence, thresholds and fixes",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if _, ok := rules.ByID(args[0]); !ok {
				return usageErr("explain: unknown rule %q (see tcpdoctor rules)", args[0])
			}
			page, err := docs.Rule(args[0])
			if err != nil {
				return fmt.Errorf("explain: %s has no page: %w", args[0], err)
			}
			_, err = e.Stdout.Write(page)
			return err
		},
	}
}
