// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"

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
			return rules.WriteList(e.Stdout)
		},
	}
}

func newExplainCmd(e *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "explain RULE",
		Short: "Print a rule's page: meaning, evidence, thresholds and fixes",
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("explain: name one rule (tcpdoctor rules lists them)")
			}
			if _, err := rules.Select(args); err != nil {
				return usageErr("explain: %v", err)
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
