// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bench"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

type benchOpts struct {
	sizes         string
	runs          int
	only          []string
	phases        bool
	procs         int
	scrapes       int
	serveInterval time.Duration
	timeout       time.Duration
	maxRSSMB      int
	parallel      int
	inner         bool // the collection library alone against ss (--conns)
	conns         int
	once          string // hidden: collect once in this netns and report peak RSS
	holdIn        string // hidden: open --conns connections in this netns and hold them
}

// benchSelf is how the benches start their children from our executable.
func benchSelf(e *Env) bench.Self {
	return bench.Self{
		Hold:   []string{e.Args0, "bench", "--hold-in"},
		Once:   []string{e.Args0, "bench", "--once-in"},
		Stderr: e.Stderr,
	}
}

// newBenchCmd measures the commands end to end against ss
// (docs/performance.md).
func newBenchCmd(e *Env) *cobra.Command {
	o := &benchOpts{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Time each command end to end against the matching ss, with peak memory, at N sockets in a private namespace (root)",
		Long: `Fill a lab namespace with loopback connections held by child processes, and at each size
in --sizes (TCP sockets: two per connection, plus one listener per holder) run every command as a
separate process in that namespace, output to /dev/null: sockets, sockets --no-owners and
sockets --json alternating with ss -tinmp, ss -tinm and ss -tinmp; check --interval 1s --json,
record --count 2 and serve (scraped --scrapes times) alone. Prints wall time (median, min, max of
--runs), peak RSS, the ratio to ss, kernel memory taken by the sockets, the load average, and the
targets of docs/performance.md met or missed. --inner times the collection library alone instead.`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{cleansUp: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.once != "":
				return bench.CollectOnce(o.once, e.ProcRoot, e.Stdout)
			case o.holdIn != "":
				return bench.Hold(cmd.Context(), o.holdIn, o.conns, os.Stdin, e.Stdout)
			}
			if os.Geteuid() != 0 {
				return usageErr("bench: needs root (creates network namespaces)")
			}
			if o.inner {
				return runInnerBench(cmd, e, o)
			}
			if cmd.Flags().Changed("conns") {
				return usageErr("bench: --conns goes with --inner; the end-to-end bench takes --sizes (sockets)")
			}
			sizes, err := parseSizes(o.sizes)
			if err != nil {
				return usageErr("bench: --sizes: %v", err)
			}
			// A size whose table cannot be written (stdout closed: bench |
			// head) stops the bench: no further size is measured, and
			// EndToEnd removes its namespace and holders as it returns.
			ctx, stop := context.WithCancelCause(cmd.Context())
			defer stop(nil)
			var werr error
			_, err = bench.EndToEnd(ctx, bench.E2EOptions{
				Sizes: sizes, Runs: o.runs, Only: o.only, Scrapes: o.scrapes, ScrapeEvery: 200 * time.Millisecond,
				ServeInterval: o.serveInterval, Timeout: o.timeout, MaxRSS: int64(o.maxRSSMB) << 20,
				Exe: e.Args0, Parallel: o.parallel, ProcRoot: e.ProcRoot, Self: benchSelf(e), Progress: e.Stderr,
				Phases: o.phases, Procs: o.procs,
				OnSize: func(r *bench.E2EResult, i int) {
					if werr != nil {
						return
					}
					if i == 0 {
						werr = r.WriteHeader(e.Stdout)
					}
					if werr == nil {
						werr = errors.Join(r.WriteSize(e.Stdout, i), r.WritePhases(e.Stdout, i))
					}
					if werr != nil {
						werr = fmt.Errorf("bench: writing results: %w", werr)
						stop(werr)
					}
				},
			})
			if werr != nil {
				return collectErr(werr)
			}
			if err != nil {
				return collectErr(err)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.sizes, "sizes", "20000,100000", "TCP sockets to measure at, comma-separated (two per connection; 1000000 takes about 4 GB of kernel memory)")
	fs.BoolVar(&o.phases, "phases", false, "after each size's table, where each of our commands spent its time: process start, eBPF loads, dump, owner walk, rows, writing, exit (medians of --runs)")
	fs.IntVar(&o.procs, "procs", 0, "start this many idle processes (sleep) on the host first, to measure a host with many processes (the owner walks of sockets and ss -p visit each); killed at the end")
	fs.IntVar(&o.runs, "runs", 3, "timed runs of each command and of its ss (median, min and max are reported)")
	fs.StringSliceVar(&o.only, "only", nil, "run only these rows: sockets, no-owners, json, proc-owners (sockets --bpf off), check, record, serve; and, only when named, kernel-owners (sockets --bpf on: the kernel's file walk however few files the host has open)")
	fs.IntVar(&o.scrapes, "scrapes", 20, "scrapes of serve's /metrics, 200ms apart, after its first window")
	fs.DurationVar(&o.serveInterval, "serve-interval", 5*time.Second, "serve's --interval")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "kill a command run that takes longer")
	fs.IntVar(&o.maxRSSMB, "max-rss", 6144, "kill a command whose resident memory passes this many MiB")
	fs.IntVar(&o.parallel, "parallel", 2, "holder processes connecting at a time while filling the namespace")
	fs.BoolVar(&o.inner, "inner", false, "time the collection library in this process against ss instead (--conns)")
	fs.IntVar(&o.conns, "conns", 20000, "with --inner: established connections to create (two sockets each)")
	fs.StringVar(&o.once, "once-in", "", "internal: collect once in this namespace and print the socket count")
	fs.StringVar(&o.holdIn, "hold-in", "", "internal: open and hold connections in this namespace")
	_ = fs.MarkHidden("once-in")
	_ = fs.MarkHidden("hold-in")
	return cmd
}

// parseSizes reads "20000,100000,1000000"; underscores may group digits.
func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(f), "_", ""))
		if err != nil || n < 2 || n/2 > bench.MaxConns {
			return nil, fmt.Errorf("%q: want sockets 2..%d", f, 2*bench.MaxConns)
		}
		out = append(out, n)
	}
	return out, nil
}

// runInnerBench is the former bench: our collection in this process
// against ss, which leaves out process start and output.
func runInnerBench(cmd *cobra.Command, e *Env, o *benchOpts) error {
	if o.conns < 1 || o.conns > bench.MaxConns || o.runs < 1 || o.runs > 50 {
		return usageErr("bench: --conns 1..%d, --runs 1..50", bench.MaxConns)
	}
	res, err := bench.Collection(cmd.Context(), bench.CollectionOptions{
		Conns: o.conns, Runs: o.runs, ProcRoot: e.ProcRoot, Self: benchSelf(e), Progress: e.Stderr,
	})
	if err != nil {
		return collectErr(err)
	}
	return writeCollectionBench(e, res)
}

func writeCollectionBench(e *Env, r *bench.CollectionResult) error {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "sockets\t%d\t(%d established connections + listeners, kernel %s)\n", r.Sockets, r.Conns, r.Kernel)
	fmt.Fprintf(tw, "collection (sockets + tcp_info + meminfo)\t%s\tss -tinm\t%s\tratio %.1fx\n", ms(r.Ours), ms(r.SS), float64(r.SS)/float64(r.Ours))
	fmt.Fprintf(tw, "collection with owners\t%s\tss -tinmp\t%s\tratio %.1fx\n", ms(r.OursOwners), ms(r.SSOwners), float64(r.SSOwners)/float64(r.OursOwners))
	fmt.Fprintf(tw, "peak RSS of a collecting process (with owners)\t%s\n", units.Bytes(float64(r.PeakRSS)))
	fmt.Fprintf(tw, "median of %d runs each\n", r.Runs)
	return tw.Flush()
}
