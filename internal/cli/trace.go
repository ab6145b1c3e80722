// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/bpfload"
	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/outfile"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
)

// traceDefaultRate is trace's --rate by default, and the rate of serve
// --history's triggered traces.
const traceDefaultRate = 100

type traceOpts struct {
	sel             trace.Select
	pid             int
	netns           string
	duration        time.Duration
	rate            int
	out, from, html string
	json            jsonOpt
	bandwidth       string
	top             int
	gap, discover   time.Duration
	idleEvery       int
	bpf             string
	wl              workloadOpts
}

func newTraceCmd(e *Env) *cobra.Command {
	o := &traceOpts{}
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Sample chosen connections often and explain each transfer",
		Long: `Sample the matching connections --rate times a second (sock_diag, filtered in the kernel),
cut each connection's life into transfers (runs of data one way, ended by idle gaps and
request/response turns), split each transfer's time by what held it (the peer's receive window,
the send buffer, congestion, retransmission recovery, the application), and print the slowest
with a one-line verdict naming the side and the value to change (docs/trace.md).

Records until --duration or Ctrl-C (a normal end). -o and --html are created before recording
and written whole or not at all. Exit codes: 0 no slow transfer, 1 slow transfers, 2 usage error
(an output that cannot be created), 3 recording failed or an output not written (after the table).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTrace(cmd, e, o)
		},
	}
	fs := cmd.Flags()
	fs.UintSliceVar(&o.sel.Ports, "port", nil, "connections with this port at either end (repeatable)")
	fs.UintSliceVar(&o.sel.LPorts, "lport", nil, "connections with this local port")
	fs.UintSliceVar(&o.sel.RPorts, "rport", nil, "connections with this remote port")
	fs.StringSliceVar(&o.sel.Peers, "peer", nil, "connections to this address or prefix (198.18.0.2, 2001:db8::/32)")
	fs.IntVar(&o.pid, "pid", 0, "connections of this process (its network namespace unless --netns)")
	fs.StringVar(&o.netns, "netns", "", "trace in the named network namespace (ip netns)")
	o.wl.register(fs, "trace")
	fs.DurationVar(&o.duration, "duration", 0, "how long to record (default: until Ctrl-C)")
	fs.IntVar(&o.rate, "rate", traceDefaultRate, fmt.Sprintf("samples per second (1..%d)", trace.MaxRate))
	fs.StringVarP(&o.out, "output", "o", "", "also write the recording to this file (JSON lines; read back with --from)")
	fs.StringVar(&o.from, "from", "", "analyse a recording instead of the live system (- for standard input)")
	fs.StringVar(&o.html, "html", "", "write the report page to this file")
	o.json.register(fs)
	fs.StringVar(&o.bandwidth, "bandwidth", "", "the path's rate, e.g. 100mbit (default: the path's rate measured to the peer, bytes_acked per busy_time, as check)")
	fs.IntVar(&o.top, "top", 20, "rows in the table of slowest transfers (0: all)")
	fs.DurationVar(&o.gap, "gap", 0, "idle time that ends a transfer (default: max(50ms, 3 samples))")
	fs.IntVar(&o.idleEvery, "idle-every", 1, "read connections with nothing queued, in flight or moving only every Nth sample until they move (cheaper; short transfers on them are seen coarsely)")
	fs.StringVar(&o.bpf, "bpf", "auto", "eBPF events of the traced sockets with the kernel's timestamps (retransmits, receive buffer steps, resets), and no discovery dump while no connection is established: auto (if they load), on (fail without them), off")
	fs.DurationVar(&o.discover, "discover", 0, "time between the dumps that find new connections (default: as often as 1% of one core allows)")
	return cmd
}

func runTrace(cmd *cobra.Command, e *Env, o *traceOpts) error {
	jo, err := o.validate()
	if err != nil {
		return err
	}
	// The files are created before anything is recorded: a path that
	// cannot be written is the user's argument, said at once.
	var rec, page *outfile.Atomic
	if o.out != "" {
		var err error
		if rec, err = outfile.CreateAtomic(o.out); err != nil {
			return usageErr("trace: -o: %v", err)
		}
		defer rec.Abort() // unless committed: the old file stays
	}
	if o.html != "" {
		var err error
		if page, err = outfile.CreateAtomic(o.html); err != nil {
			return usageErr("trace: --html: %v", err)
		}
		defer page.Abort()
	}
	tr, err := readOrRecord(cmd, e, o, rec)
	if err != nil {
		return err
	}
	// An output that fails is named after the table, which is printed
	// whatever happens to the files.
	var failed []error
	if rec != nil {
		if err := rec.Commit(); err != nil {
			failed = append(failed, fmt.Errorf("trace: -o: %w", err))
		}
	}
	a := trace.Analyze(tr, trace.SegmentOptions{Gap: o.gap}, jo)
	if page != nil {
		if err := trace.WritePage(page, tr, a.Transfers); err != nil {
			failed = append(failed, fmt.Errorf("trace: --html: %w", err))
		}
	}
	if o.json.on {
		err = trace.WriteJSON(e.Stdout, a.Transfers, &tr.Header)
	} else {
		err = trace.WriteText(e.Stdout, tr, a.Transfers, o.top)
	}
	if err != nil {
		return err
	}
	if len(tr.Conns) == 0 {
		e.progress("note: %s: nothing was traced", tr.Header.NothingMatched())
	}
	if len(failed) > 0 {
		for _, err := range failed[:len(failed)-1] {
			e.progress("%v", err)
		}
		return collectErr(failed[len(failed)-1])
	}
	if a.Slow > 0 {
		return errFindings
	}
	return nil
}

// validate checks the flags; it returns how transfers are judged.
func (o *traceOpts) validate() (jo trace.JudgeOptions, err error) {
	if o.rate < 1 || o.rate > trace.MaxRate {
		return jo, usageErr("trace: --rate must be between 1 and %d", trace.MaxRate)
	}
	if o.duration < 0 || o.gap < 0 || o.top < 0 || o.discover < 0 || o.idleEvery < 0 {
		return jo, usageErr("trace: --duration, --gap, --discover, --idle-every and --top must not be negative")
	}
	if _, err := bpfload.ParseMode(o.bpf); err != nil {
		return jo, usageErr("trace: %v", err)
	}
	live := len(o.sel.Ports)+len(o.sel.LPorts)+len(o.sel.RPorts)+len(o.sel.Peers) > 0 || o.pid != 0 || o.netns != "" || o.duration > 0 || o.out != "" || o.discover > 0 || o.bpf != "auto" || o.wl.Set()
	if o.from != "" && live {
		return jo, usageErr("trace: --from reads a recording; filters, --pid, --netns, --pod, --container, --duration, -o and --bpf apply to live tracing")
	}
	if err := o.wl.validate(); err != nil {
		return jo, err
	}
	if o.wl.Set() && (o.pid != 0 || o.netns != "") {
		return jo, usageErr("trace: --pod and --container choose the namespace and processes; leave out --pid and --netns")
	}
	if o.bandwidth != "" {
		bw, err := bdp.ParseRate(o.bandwidth)
		if err != nil {
			return jo, usageErr("trace: --bandwidth: %v", err)
		}
		jo.Bandwidth = bw
	}
	return jo, nil
}

// readOrRecord reads --from, or records live (into rec, -o, when given).
func readOrRecord(cmd *cobra.Command, e *Env, o *traceOpts, rec *outfile.Atomic) (*trace.Trace, error) {
	if o.from == "" {
		var sink io.Writer
		if rec != nil {
			sink = trace.FileSink(rec, func(err error) { e.progress("trace: -o: %v; recording on, for the table", err) })
		}
		return traceLive(cmd, e, o, sink)
	}
	tr, err := readTraceInput(e, o.from)
	var torn *jsonl.TornError
	if errors.As(err, &torn) {
		e.progress("note: %s: line %d is incomplete (a recorder stopped mid-write): used the lines before it", o.from, torn.Line)
		err = nil
	}
	if err != nil {
		return nil, usageErr("--from %s: %v", o.from, err)
	}
	return tr, nil
}

func traceLive(cmd *cobra.Command, e *Env, o *traceOpts, sink io.Writer) (*trace.Trace, error) {
	flt, err := o.sel.Filter()
	if err != nil {
		return nil, usageErr("trace: %v", err)
	}
	lo := trace.LiveOptions{Filter: flt, Pid: o.pid, ProcRoot: e.ProcRoot, Interval: time.Second / time.Duration(o.rate),
		Duration: o.duration, Discover: o.discover, IdleEvery: o.idleEvery, Now: e.Now, Sleep: trace.PreciseSleep}
	// The programs load once trace knows the namespace and ports.
	x, err := bpfload.Open(bpfload.Config{Mode: bpfload.Mode(o.bpf), ProcRoot: e.ProcRoot, Loaders: e.BPF, Note: e.progress})
	if err != nil {
		return nil, collectErr(err)
	}
	defer x.Close()
	if o.bpf == string(bpfload.ModeOff) {
		lo.NoEvents = "eBPF off (--bpf off)"
	} else {
		lo.OpenEvents = func(ns uint64, ports []uint16) (trace.EventSource, func() error, string, error) {
			tr, why, err := x.OpenTrace(ns, ports)
			if tr == nil {
				return nil, nil, why, err
			}
			return tr, tr.Close, "", nil
		}
	}
	switch {
	case o.netns != "":
		ns, err := e.finder().Named(o.netns)
		if err != nil {
			return nil, usageErr("trace: %v", err)
		}
		lo.NS = ns
	case o.pid > 0:
		ns, err := e.finder().OfPid(o.pid)
		if err != nil {
			return nil, usageErr("trace: --pid %d: %v", o.pid, err)
		}
		lo.NS = ns
	case o.wl.Set():
		f := e.finder()
		nss, _ := f.All() // a partial list still names what it can
		known, byPid, err := knownLive(e, "trace", nss)
		if err != nil {
			return nil, err
		}
		if err := o.wl.find("on this host", known); err != nil {
			return nil, err
		}
		if err := lo.Target(&o.wl.Selector, nss, byPid, f.OfPid); err != nil {
			return nil, usageErr("trace: %v", err)
		}
	}
	if sink != nil {
		lo.Sink = trace.NewWriter(sink)
	}
	if o.duration == 0 {
		e.progress("trace: recording %s until Ctrl-C", trace.Describe(&flt, o.pid))
	}
	tr, st, err := trace.Live(cmd.Context(), lo)
	if err != nil {
		return nil, collectErr(err)
	}
	for _, line := range st.Summary(len(tr.Conns), tr.Header.Events) {
		e.progress("trace: %s", line)
	}
	return tr, nil
}

// readTraceInput is trace.ReadFile for --from: "-" reads standard input.
func readTraceInput(e *Env, path string) (*trace.Trace, error) {
	f, err := e.openInput(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return trace.Read(f)
}
