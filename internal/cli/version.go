// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newVersionCmd prints which build this is: the release version, commit,
// commit time (the build date of a release) and Go version (README,
// Install).
func newVersionCmd(e *Env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := e.build()
			if asJSON {
				enc := json.NewEncoder(e.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(b)
			}
			tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "tcpdoctor\t%s\n", b.Version)
			commit := b.Commit
			if commit == "" {
				commit = "unknown (not recorded by this build)"
			} else if b.Modified {
				commit += " (with changes not committed)"
			}
			fmt.Fprintf(tw, "commit\t%s\n", commit)
			date := b.Date
			if date == "" {
				date = "unknown"
			}
			fmt.Fprintf(tw, "built\t%s\t(the commit's time)\n", date)
			fmt.Fprintf(tw, "go\t%s %s\n", b.GoVersion, b.Platform)
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build as a JSON object (docs/json.md)")
	return cmd
}
