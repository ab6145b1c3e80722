// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"github.com/spf13/cobra"
)

// newVersionCmd prints which build this is: the release version, commit,
// commit time (the build date of a release) and Go version (README,
// Install).
func newVersionCmd(e *Env) *cobra.Command {
	var asJSON jsonOpt
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version, commit, build date and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := e.build()
			if asJSON.on {
				return asJSON.write(e.Stdout, b)
			}
			return b.WriteText(e.Stdout)
		},
	}
	asJSON.register(cmd.Flags())
	return cmd
}
