package cli

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bench"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

type benchOpts struct {
	conns  int
	runs   int
	once   string // hidden: collect once in this netns and report peak RSS
	holdIn string // hidden: open --conns connections in this netns and hold them
}

// benchSelf is how the benches start their children from our executable.
func benchSelf(e *Env) bench.Self {
	return bench.Self{
		Hold:   []string{e.Args0, "bench", "--hold-in"},
		Once:   []string{e.Args0, "bench", "--once-in"},
		Stderr: e.Stderr,
	}
}

// newBenchCmd measures collection against ss (docs/performance.md).
func newBenchCmd(e *Env) *cobra.Command {
	o := &benchOpts{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure collection speed and memory against ss on N connections in a private namespace (root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.once != "":
				return bench.CollectOnce(o.once, e.ProcRoot, e.Stdout)
			case o.holdIn != "":
				return bench.Hold(cmd.Context(), o.holdIn, o.conns, e.Stdout)
			}
			if os.Geteuid() != 0 {
				return usageErr("bench: needs root (creates network namespaces)")
			}
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
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.conns, "conns", 40000, "established connections to create (two sockets each)")
	fs.IntVar(&o.runs, "runs", 5, "timed runs of each contender (the median is reported)")
	fs.StringVar(&o.once, "once-in", "", "internal: collect once in this namespace and print the socket count")
	fs.StringVar(&o.holdIn, "hold-in", "", "internal: open and hold connections in this namespace")
	_ = fs.MarkHidden("once-in")
	_ = fs.MarkHidden("hold-in")
	return cmd
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
