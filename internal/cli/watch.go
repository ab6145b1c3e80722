// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/watch"
)

type watchOpts struct {
	port, pid int
	netns     []string
	kinds     []string
	json      jsonOpt
	duration  time.Duration
	count     int
	tick      time.Duration
	burst     uint64
	wl        workloadOpts
}

func newWatchCmd(e *Env) *cobra.Command {
	o := &watchOpts{}
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Stream failed connects, resets, overflows, retransmits (eBPF)",
		Long: `Stream, as the kernel sees them, the events two snapshots cannot: connect() calls that
fail, by cause (no free port, refused, timed out, unreachable, abandoned), resets sent and
received with the kernel's reason, handshakes dropped by a full accept queue, SYN
retransmits, and bursts of retransmits towards one peer; with the
process, network namespace, peer, and the pod, container or unit of the process (else of the
namespace), named at the event's time. Text folds repeats of one event into a count per --tick;
--json prints every event, one object per line (docs/watch.md).

Needs eBPF (root, kernel BTF); without it watch exits 3 and says why. Runs until Ctrl-C,
--duration or --count.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWatch(cmd.Context(), e, o)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.port, "port", 0, "only events with this local or remote port")
	fs.IntVar(&o.pid, "pid", 0, "only events caused by this process (events with no process, e.g. received resets, need --port)")
	fs.StringSliceVar(&o.netns, "netns", nil, "only these network namespaces: a `NAME` that ip netns lists, or host (repeatable, or comma-separated)")
	o.wl.register(fs, "watch")
	fs.StringSliceVar(&o.kinds, "kind", nil, "only these kinds (repeatable, or comma-separated): "+strings.Join(watch.Kinds(), ", "))
	o.json.register(fs)
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	fs.IntVar(&o.count, "count", 0, "stop after this many lines (0: no limit)")
	fs.DurationVar(&o.tick, "tick", time.Second, "how often retransmit counts are read and text repeats summed")
	fs.Uint64Var(&o.burst, "burst", 10, "retransmits towards one peer within one --tick that make a retransmit-burst line (0: none)")
	return cmd
}

func runWatch(ctx context.Context, e *Env, o *watchOpts) error {
	if o.port < 0 || o.port > 65535 {
		return usageErr("watch: port %d out of range", o.port)
	}
	if o.duration < 0 || o.count < 0 || o.tick <= 0 {
		return usageErr("watch: --duration and --count must not be negative, --tick must be positive")
	}
	if err := o.wl.validate(); err != nil {
		return err
	}
	f := watch.Filter{Port: o.port, Pid: o.pid}
	if len(o.kinds) > 0 {
		f.Kinds = map[string]bool{}
		for _, k := range o.kinds {
			if !slices.Contains(watch.Kinds(), k) {
				return usageErr("watch: unknown kind %q (kinds: %s)", k, strings.Join(watch.Kinds(), ", "))
			}
			f.Kinds[k] = true
		}
	}
	// Namespaces a process of which we may not read have no name: their
	// events show the inode.
	names := &netns.Names{Find: e.finder(), Now: e.Now}
	nsErr := names.Refresh()
	if len(o.netns) > 0 {
		f.Netns = map[uint64]bool{}
		for _, n := range o.netns {
			ino, ok := names.Inode(n)
			if !ok {
				if nsErr != nil {
					return usageErr("watch: no network namespace named %q (%v)", n, nsErr)
				}
				return usageErr("watch: no network namespace named %q", n)
			}
			f.Netns[ino] = true
		}
	}
	if o.wl.Set() {
		nss, _ := names.Find.All() // a partial list still names what it can
		known, _, err := knownLive(e, "watch", nss)
		if err != nil {
			return err
		}
		if err := o.wl.find("on this host", known); err != nil {
			return err
		}
		f.Workload = o.wl.Match
	}
	// watch is the event stream: eBPF or nothing.
	x, err := bpfload.Open(bpfload.Config{Mode: bpfload.ModeOn, Need: bpfload.Need{Events: true},
		Command: "watch", ProcRoot: e.ProcRoot, Loaders: e.BPF, Note: e.progress})
	if err != nil {
		return collectErr(err)
	}
	defer x.Close()
	src := x.Source
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	wo := watch.Options{Filter: f, JSON: o.json.on, Tick: o.tick, Burst: o.burst, Count: o.count,
		NameOf: names.Of, WorkloadOf: collect.EventWorkload(e.workloads(), names), Now: e.Now, Notes: e.Stderr}
	if err := watch.Run(ctx, src, wo, e.Stdout); err != nil {
		return collectErr(err)
	}
	return nil
}
