// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/outfile"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

type recordOpts struct {
	src      sourceOpts
	bpf      bpfOpts
	interval time.Duration
	count    int
	out      string
	noOwners bool
}

func newRecordCmd(e *Env) *cobra.Command {
	o := &recordOpts{}
	cmd := &cobra.Command{
		Use:   "record -o FILE",
		Short: "Write timestamped snapshots to a file (replay them with --from)",
		Long:  "Write timestamped snapshots to a file, for bug reports; check --from and sockets --from replay them.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRecord(cmd, e, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.src.netns, "netns", "", "collect in the named network namespace (ip netns)")
	fs.BoolVar(&o.src.allNetns, "all-netns", false, "collect in every network namespace on the host")
	fs.DurationVar(&o.interval, "interval", 5*time.Second, "time from one sample's start to the next's (back to back when collecting takes longer)")
	fs.IntVar(&o.count, "count", 2, "number of samples")
	fs.StringVarP(&o.out, "output", "o", "", "file to write (- for stdout)")
	fs.BoolVar(&o.noOwners, "no-owners", false, "do not map sockets to processes")
	o.bpf.register(fs)
	return cmd
}

func runRecord(cmd *cobra.Command, e *Env, o *recordOpts) error {
	if o.out == "" {
		return usageErr("record: -o FILE is required")
	}
	if o.count < 1 || o.count > 100000 {
		return usageErr("record: --count must be between 1 and 100000")
	}
	if o.count > 1 && o.interval <= 0 {
		return usageErr("record: --interval must be positive")
	}
	if err := o.src.validate(); err != nil {
		return err
	}
	if err := o.bpf.validate(&o.src); err != nil {
		return err
	}
	nss, err := o.src.namespaces(e)
	if err != nil {
		return usageErr("record: %v", err)
	}
	w := e.Stdout
	if o.out != "-" {
		// Streamed, not renamed at the end: a killed recorder leaves
		// every complete sample readable.
		f, err := outfile.Create(o.out)
		if err != nil {
			return usageErr("record: %v", err)
		}
		defer f.Close()
		w = f
	}
	sw, err := snapshot.NewWriterHeader(w, jsonl.Header{Tool: "tcpdoctor " + e.build().Version, Build: e.knownBuild()})
	if err != nil {
		return collectErr(err)
	}
	x, err := o.bpf.allExtras(e, &o.src)
	if err != nil {
		return err
	}
	defer x.Close()
	c := x.Collector(collect.Options{Owners: !o.noOwners, Workloads: e.workloads(), FaultIn: true}, e.Now)
	taken, err := window.Record(cmd.Context(), c, nss, o.count, o.interval, e.Sleep, func(i int, snaps []*snapshot.Snapshot) error {
		ss := []series{{Snaps: snaps}}
		warnErrors(e, ss)
		got := 0
		for _, s := range snaps {
			if err := sw.Write(s); err != nil {
				return collectErr(fmt.Errorf("record: %w", err))
			}
			got += len(s.Sockets)
		}
		fmt.Fprintf(e.Stderr, "tcpdoctor: sample %d/%d: %s, %s\n", i+1, o.count, units.N(len(snaps), "namespace"), units.N(got, "socket"))
		if window.NothingCollected(ss) {
			return collectErr(fmt.Errorf("record: nothing could be collected: %s", window.FirstErrorText(ss)))
		}
		return nil
	})
	var xe *exitError
	if err != nil && !errors.As(err, &xe) {
		// Ctrl-C: what was written stays, each sample whole.
		e.progress("record: stopped after %d of %d samples, all in %s", taken, o.count, outName(o.out))
	}
	return err
}

// outName names -o FILE in messages.
func outName(path string) string {
	if path == "-" {
		return "stdout"
	}
	return path
}
