// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"io"
	"slices"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestNoHiddenKnobs: no product command or flag is hidden; the lab and
// the benches are tcpdoctor-lab's and need no door into tcpdoctor. (The
// two serve --history knobs listed are serve's, on their way to library
// options.)
func TestNoHiddenKnobs(t *testing.T) {
	allowed := []string{"tcpdoctor serve --history-segment", "tcpdoctor serve --history-evidence-every"}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			t.Errorf("hidden command %q", c.CommandPath())
		}
		check := func(f *pflag.Flag) {
			if name := c.CommandPath() + " --" + f.Name; f.Hidden && !slices.Contains(allowed, name) {
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
