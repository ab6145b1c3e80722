// SPDX-License-Identifier: Apache-2.0

package bdp

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// WriteText prints the plan for people: the path, its BDP and the
// buffers each side needs, then, when s (the host's settings) is given,
// each setting against what the plan needs and the command that fixes it.
func (p *Plan) WriteText(w io.Writer, s *snapshot.Snapshot) error {
	fmt.Fprintf(w, "path: %s at %s\n", p.RTT, units.Rate(p.Rate/8))
	fmt.Fprintf(w, "BDP: %.0f bytes (%s): the data that must be in flight to fill the path\n", p.BDP, units.Bytes(p.BDP))
	fmt.Fprintf(w, "sender needs a send buffer of %s (setsockopt SO_SNDBUF %s, which the kernel doubles; or leave it autotuned)\n",
		units.Bytes(float64(p.SndBuf)), units.Bytes(float64(p.AskSndBuf)))
	fmt.Fprintf(w, "receiver needs a receive buffer of %s (setsockopt SO_RCVBUF %s; about half of it becomes window)\n",
		units.Bytes(float64(p.RcvBuf)), units.Bytes(float64(p.AskRcvBuf)))
	if s == nil {
		return nil
	}
	fmt.Fprintf(w, "\nthis host (netns %s):\n", textsafe.String(s.Netns.Name))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tCURRENT\tNEEDED\tOK\tCHANGE")
	for _, c := range p.Checks {
		ok := "yes"
		switch {
		case c.Current == "unknown":
			ok = "unknown"
		case !c.OK:
			ok = "NO"
		}
		need := "-"
		if c.Needed > 0 {
			need = fmt.Sprint(c.Needed)
		}
		// Current is read from the host or a file: escaped (textsafe).
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Setting, textsafe.String(c.Current), need, ok, textsafe.String(c.Command))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range p.Checks {
		if c.Note != "" {
			fmt.Fprintf(w, "note: %s: %s\n", c.Setting, textsafe.String(c.Note))
		}
	}
	return nil
}
