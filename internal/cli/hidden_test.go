// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"io"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestNoHiddenKnobs: no product command or flag is hidden; the lab and
// the benches are tcpdoctor-lab's and need no door into tcpdoctor; what
// no flag sets is an option of the library (serve.Options).
func TestNoHiddenKnobs(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			t.Errorf("hidden command %q", c.CommandPath())
		}
		check := func(f *pflag.Flag) {
			if name := c.CommandPath() + " --" + f.Name; f.Hidden {
				t.Errorf("hidden flag %s", name)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.PersistentFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRoot(&Env{Stdout: io.Discard, Stderr: io.Discard}))
}
