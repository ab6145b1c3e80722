// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

type bdpOpts struct {
	src       sourceOpts
	rtt       time.Duration
	bandwidth string
	json      bool
}

func newBDPCmd(e *Env) *cobra.Command {
	o := &bdpOpts{}
	cmd := &cobra.Command{
		Use:   "bdp --rtt 20ms --bandwidth 100mbit",
		Short: "Bandwidth-delay product: the buffers a path needs and whether this host allows them",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runBDP(e, o)
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&o.rtt, "rtt", 0, "round-trip time of the path, e.g. 20ms")
	fs.StringVar(&o.bandwidth, "bandwidth", "", "path rate, e.g. 100mbit, 1gbit, 12.5MB/s")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	o.src.register(fs)
	return cmd
}

func runBDP(e *Env, o *bdpOpts) error {
	if o.rtt <= 0 || o.bandwidth == "" {
		return usageErr("bdp: --rtt and --bandwidth are required")
	}
	if o.src.allNetns {
		return usageErr("bdp: checks one namespace; use --netns NAME")
	}
	if err := o.src.validate(); err != nil {
		return err
	}
	rate, err := bdp.ParseRate(o.bandwidth)
	if err != nil {
		return usageErr("bdp: --bandwidth: %v", err)
	}
	s, err := settings(e, &o.src)
	if err != nil {
		return err
	}
	plan := bdp.For(o.rtt, rate, s)
	if o.json {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(plan)
	}
	w := e.Stdout
	fmt.Fprintf(w, "path: %s at %s\n", o.rtt, units.Rate(rate/8))
	fmt.Fprintf(w, "BDP: %.0f bytes (%s): the data that must be in flight to fill the path\n", plan.BDP, units.Bytes(plan.BDP))
	fmt.Fprintf(w, "sender needs a send buffer of %s (setsockopt SO_SNDBUF %s, which the kernel doubles; or leave it autotuned)\n",
		units.Bytes(float64(plan.SndBuf)), units.Bytes(float64(plan.AskSndBuf)))
	fmt.Fprintf(w, "receiver needs a receive buffer of %s (setsockopt SO_RCVBUF %s; about half of it becomes window)\n",
		units.Bytes(float64(plan.RcvBuf)), units.Bytes(float64(plan.AskRcvBuf)))
	if s == nil {
		return nil
	}
	fmt.Fprintf(w, "\nthis host (netns %s):\n", textsafe.String(s.Netns.Name))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tCURRENT\tNEEDED\tOK\tCHANGE")
	for _, c := range plan.Checks {
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
	for _, c := range plan.Checks {
		if c.Note != "" {
			fmt.Fprintf(w, "note: %s: %s\n", c.Setting, textsafe.String(c.Note))
		}
	}
	return nil
}

// settings reads the sysctls of the chosen namespace (or the last
// snapshot of --from); it dumps no sockets.
func settings(e *Env, o *sourceOpts) (*snapshot.Snapshot, error) {
	if o.from != "" {
		ss, _, err := readSeries(e, o.from)
		if err != nil {
			return nil, err
		}
		_, cur := ss[0].Window()
		return cur, nil
	}
	nss, err := o.namespaces(e)
	if err != nil {
		return nil, usageErr("bdp: %v", err)
	}
	s, err := collect.Settings(nss[0], e.Now)
	if err != nil {
		return nil, collectErr(err)
	}
	if len(s.Sysctls) == 0 {
		warnErrors(e, []series{{Snaps: []*snapshot.Snapshot{s}}})
		return nil, nil
	}
	return s, nil
}
