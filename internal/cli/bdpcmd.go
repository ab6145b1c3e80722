// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

type bdpOpts struct {
	src       sourceOpts
	rtt       time.Duration
	bandwidth string
	json      jsonOpt
}

func newBDPCmd(e *Env) *cobra.Command {
	o := &bdpOpts{}
	cmd := &cobra.Command{
		Use:   "bdp --rtt 20ms --bandwidth 100mbit",
		Short: "Bandwidth-delay product: the buffers a path needs, host limits",
		Long:  "Bandwidth-delay product: the buffers a path needs and whether this host allows them.",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runBDP(e, o)
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&o.rtt, "rtt", 0, "round-trip time of the path, e.g. 20ms")
	fs.StringVar(&o.bandwidth, "bandwidth", "", "path rate, e.g. 100mbit, 1gbit, 12.5MB/s")
	o.json.register(fs)
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
		return usageErr("--bandwidth: %v", err) // "bdp: rate ...: ..."
	}
	s, err := settings(e, &o.src)
	if err != nil {
		return err
	}
	plan := bdp.For(o.rtt, rate, s)
	if o.json.on {
		return o.json.write(e.Stdout, plan)
	}
	return plan.WriteText(e.Stdout, s)
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
