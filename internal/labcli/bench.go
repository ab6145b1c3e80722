// SPDX-License-Identifier: Apache-2.0

package labcli

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
	split         bool // with inner: the listing's dump whole and split
}

// benchSelf is how the benches start their children from tcpdoctor-lab:
// its hold and collect-once commands.
func benchSelf(e *Env) bench.Self {
	return bench.Self{
		Hold:   []string{e.Self, "hold"},
		Once:   []string{e.Self, "collect-once"},
		Stderr: e.Stderr,
	}
}

// newHoldCmd is a bench's holder child: it opens --conns connections in
// namespace NS, prints "ready" and holds them until killed (bench.Hold).
func newHoldCmd(e *Env) *cobra.Command {
	conns := 0
	cmd := &cobra.Command{
		Use:    "hold NS",
		Short:  "Open and hold connections in a bench's namespace (internal)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return bench.Hold(cmd.Context(), args[0], conns, e.Stdin, e.Stdout)
		},
	}
	cmd.Flags().IntVar(&conns, "conns", 0, "connections to open")
	return cmd
}

// newCollectOnceCmd collects namespace NS once with owners, for the peak
// RSS of a collecting process (bench.CollectOnce).
func newCollectOnceCmd(e *Env) *cobra.Command {
	return &cobra.Command{
		Use:    "collect-once NS",
		Short:  "Collect a bench's namespace once and print the socket count (internal)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return bench.CollectOnce(args[0], e.ProcRoot, e.Stdout)
		},
	}
}

// newBenchCmd measures tcpdoctor's commands end to end against ss
// (docs/performance.md).
func newBenchCmd(e *Env) *cobra.Command {
	o := &benchOpts{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Time each tcpdoctor command against ss at N sockets (root)",
		Long: `Fill a lab namespace with loopback connections held by child processes, and
at each size in --sizes (TCP sockets: two per connection, plus one listener
per holder) run every tcpdoctor command as a separate process in that
namespace, output to /dev/null: sockets, sockets --no-owners and sockets
--json alternating with ss -tinmp, ss -tinm and ss -tinmp; check --interval
1s --json, record --count 2 and serve (scraped --scrapes times) alone.
Prints wall time (median, min, max of --runs), peak RSS, the ratio to ss,
kernel memory taken by the sockets, the load average, and the targets of
docs/performance.md met or missed. --inner times the collection library
alone instead.`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{cleansUp: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return usageErr("bench: needs root (creates network namespaces)")
			}
			if o.inner {
				return runInnerBench(cmd, e, o)
			}
			if o.split {
				return usageErr("bench: --split goes with --inner")
			}
			if cmd.Flags().Changed("conns") {
				return usageErr("bench: --conns goes with --inner; the end-to-end bench takes --sizes (sockets)")
			}
			sizes, err := parseSizes(o.sizes)
			if err != nil {
				return usageErr("bench: --sizes: %v", err)
			}
			tcpdoctor, err := e.tcpdoctor()
			if err != nil {
				return err
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
				Exe: tcpdoctor, Parallel: o.parallel, ProcRoot: e.ProcRoot, Self: benchSelf(e), Progress: e.Stderr,
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
				return failedErr(werr)
			}
			if err != nil {
				return failedErr(err)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.sizes, "sizes", "20000,100000", "TCP sockets to measure at, comma-separated (two per connection; 1000000 takes about 4 GB of kernel memory)")
	fs.BoolVar(&o.phases, "phases", false, "after each size's table, where the collection library spends its time on these sockets (dump, owner walk...), timed in this process (medians of --runs)")
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
	fs.BoolVar(&o.split, "split", false, "with --inner: also time the listing's dump (sockets --no-owners' collection) whole and in two halves at once, which sockets does from 200000 sockets")
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
		Conns: o.conns, Runs: o.runs, ProcRoot: e.ProcRoot, Self: benchSelf(e), Progress: e.Stderr, Split: o.split,
	})
	if err != nil {
		return failedErr(err)
	}
	return writeCollectionBench(e, res)
}

func writeCollectionBench(e *Env, r *bench.CollectionResult) error {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "sockets\t%d\t(%d established connections + listeners, kernel %s)\n", r.Sockets, r.Conns, r.Kernel)
	fmt.Fprintf(tw, "collection (sockets + tcp_info + meminfo)\t%s\tss -tinm\t%s\tratio %.1fx\n", ms(r.Ours), ms(r.SS), float64(r.SS)/float64(r.Ours))
	fmt.Fprintf(tw, "collection with owners\t%s\tss -tinmp\t%s\tratio %.1fx\n", ms(r.OursOwners), ms(r.SSOwners), float64(r.SSOwners)/float64(r.OursOwners))
	if r.Whole > 0 {
		fmt.Fprintf(tw, "listing dump (no owners), whole\t%s\tin two halves at once\t%s\tratio %.2fx\n", ms(r.Whole), ms(r.Split), float64(r.Whole)/float64(r.Split))
	}
	fmt.Fprintf(tw, "peak RSS of a collecting process (with owners)\t%s\n", units.Bytes(float64(r.PeakRSS)))
	fmt.Fprintf(tw, "median of %d runs each\n", r.Runs)
	return tw.Flush()
}
