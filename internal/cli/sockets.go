package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

type socketsOpts struct {
	src      sourceOpts
	bpf      bpfOpts
	interval time.Duration
	states   []string
	port     int
	lport    int
	rport    int
	pid      int
	json     bool
	noOwners bool
}

func newSocketsCmd(e *Env) *cobra.Command {
	o := &socketsOpts{}
	cmd := &cobra.Command{
		Use:   "sockets",
		Short: "List TCP sockets with the figures these diagnoses need (an ss for people)",
		Long: `List TCP sockets: state, queues, RTT, congestion window, delivery rate, buffers and
owning process. With --interval, take two samples and show the share of the window each connection
was busy and what limited it (send buffer, receiver's window, congestion), from the kernel's
tcp_info chronographs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSockets(cmd, e, o)
		},
	}
	fs := cmd.Flags()
	o.src.register(fs)
	o.bpf.register(fs)
	fs.DurationVar(&o.interval, "interval", 0, "take two samples this far apart and show limiter shares")
	fs.StringSliceVar(&o.states, "state", nil, "only these states (e.g. established,time-wait,listen)")
	fs.IntVar(&o.port, "port", 0, "only sockets with this local or remote port")
	fs.IntVar(&o.lport, "lport", 0, "only sockets with this local port")
	fs.IntVar(&o.rport, "rport", 0, "only sockets with this remote port")
	fs.IntVar(&o.pid, "pid", 0, "only sockets owned by this process")
	fs.BoolVar(&o.json, "json", false, "print a JSON array")
	fs.BoolVar(&o.noOwners, "no-owners", false, "do not map sockets to processes (faster)")
	return cmd
}

// socketView is one row of `sockets --json`; fields only ever get added.
type socketView struct {
	Netns string `json:"netns"`
	// Pid and Command are the first owner; null when unknown.
	Pid     *int    `json:"pid"`
	Command *string `json:"command"`
	snapshot.Socket
	Shares *sharesView `json:"limited,omitempty"`
}

type sharesView struct {
	WindowMS   float64 `json:"window_ms"`
	Busy       float64 `json:"busy"`
	Sndbuf     float64 `json:"sndbuf"`
	Rwnd       float64 `json:"rwnd"`
	Congestion float64 `json:"congestion"`
}

type socketFilter struct {
	states             map[snapshot.State]bool
	port, lport, rport int
	pid                int
}

func (f *socketFilter) match(sk *snapshot.Socket) bool {
	if f.states != nil && !f.states[sk.State] {
		return false
	}
	lp, rp := int(sk.Local.Port()), int(sk.Remote.Port())
	if f.port != 0 && lp != f.port && rp != f.port {
		return false
	}
	if f.lport != 0 && lp != f.lport {
		return false
	}
	if f.rport != 0 && rp != f.rport {
		return false
	}
	if f.pid != 0 {
		found := false
		for _, p := range sk.Pids {
			found = found || p == f.pid
		}
		return found
	}
	return true
}

func runSockets(cmd *cobra.Command, e *Env, o *socketsOpts) error {
	if err := o.src.validate(); err != nil {
		return err
	}
	if err := o.bpf.validate(&o.src); err != nil {
		return err
	}
	if o.interval < 0 {
		return usageErr("sockets: --interval must not be negative")
	}
	if o.pid != 0 && o.noOwners {
		return usageErr("sockets: --pid needs owners; drop --no-owners")
	}
	flt := &socketFilter{port: o.port, lport: o.lport, rport: o.rport, pid: o.pid}
	for _, p := range []int{o.port, o.lport, o.rport} {
		if p < 0 || p > 65535 {
			return usageErr("sockets: port %d out of range", p)
		}
	}
	if len(o.states) > 0 {
		flt.states = map[snapshot.State]bool{}
		for _, name := range o.states {
			st, ok := snapshot.ParseState(name)
			if !ok {
				return usageErr("sockets: unknown state %q", name)
			}
			flt.states[st] = true
		}
	}
	count := 1
	if o.interval > 0 {
		count = 2
	}
	bs, closeBPF, err := o.bpf.open(e, &o.src)
	if err != nil {
		return err
	}
	defer closeBPF()
	ss, err := o.src.sample(cmd.Context(), e, bs.options(collect.Options{Owners: !o.noOwners}), bs.events, count, o.interval)
	if err != nil {
		return err
	}
	warnErrors(e, ss)
	rows := socketRows(ss, flt)
	if o.json {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []socketView{}
		}
		return enc.Encode(rows)
	}
	printSockets(e.Stdout, rows, o.interval > 0 || hasShares(rows))
	if count == 2 {
		printEvents(e.Stdout, ss, flt)
	}
	return nil
}

func socketRows(ss []series, flt *socketFilter) []socketView {
	var rows []socketView
	for _, sr := range ss {
		prev, cur := sr.Window()
		var prevBy map[uint64]*snapshot.Socket
		if prev != nil {
			prevBy = make(map[uint64]*snapshot.Socket, len(prev.Sockets))
			for i := range prev.Sockets {
				prevBy[prev.Sockets[i].Cookie] = &prev.Sockets[i]
			}
		}
		for i := range cur.Sockets {
			sk := &cur.Sockets[i]
			if !flt.match(sk) {
				continue
			}
			v := socketView{Netns: cur.Netns.Name, Socket: *sk}
			if len(sk.Pids) > 0 {
				pid := sk.Pids[0]
				v.Pid = &pid
				if p := cur.Procs[pid]; p != nil {
					v.Command = &p.Command
				}
			}
			if p := prevBy[sk.Cookie]; p != nil {
				if sh, ok := snapshot.ChronoShares(p.Info, sk.Info, cur.Taken.Sub(prev.Taken)); ok {
					v.Shares = &sharesView{
						WindowMS:   float64(sh.Window) / float64(time.Millisecond),
						Busy:       snapshot.Frac(sh.Busy, sh.Window),
						Sndbuf:     snapshot.Frac(sh.Sndbuf, sh.Busy),
						Rwnd:       snapshot.Frac(sh.Rwnd, sh.Busy),
						Congestion: snapshot.Frac(sh.Cwnd, sh.Busy),
					}
				}
			}
			rows = append(rows, v)
		}
	}
	return rows
}

func hasShares(rows []socketView) bool {
	for _, r := range rows {
		if r.Shares != nil {
			return true
		}
	}
	return false
}

func printSockets(w io.Writer, rows []socketView, shares bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	multiNS := false
	for _, r := range rows {
		multiNS = multiNS || r.Netns != rows[0].Netns
	}
	hdr := "State\tRecv-Q\tSend-Q\tLocal\tRemote\tRTT\tCwnd\tRate\tSndbuf\tRcvbuf\tProcess"
	if shares {
		hdr += "\tBusy\tSndbuf-lim\tRwnd-lim\tCwnd-lim"
	}
	if multiNS {
		hdr = "Netns\t" + hdr
	}
	fmt.Fprintln(tw, hdr)
	for _, r := range rows {
		var b strings.Builder
		if multiNS {
			b.WriteString(r.Netns + "\t")
		}
		remote := r.Remote.String()
		if r.State == snapshot.Listen {
			remote = "*"
		}
		fmt.Fprintf(&b, "%s\t%d\t%d\t%s\t%s", r.State, r.RecvQ, r.SendQ, r.Local, remote)
		if in := r.Info; in != nil && r.State != snapshot.Listen {
			fmt.Fprintf(&b, "\t%s\t%d\t%s", fmtMS(in.RTT), in.SndCwnd, fmtBps(in.DeliveryRate))
		} else {
			b.WriteString("\t-\t-\t-")
		}
		if m := r.Mem; m != nil {
			fmt.Fprintf(&b, "\t%s\t%s", fmtSize(m.Sndbuf), fmtSize(m.Rcvbuf))
		} else {
			b.WriteString("\t-\t-")
		}
		proc := "-"
		if r.Pid != nil {
			cmd := "?"
			if r.Command != nil {
				cmd = *r.Command
			}
			proc = cmd + "/" + strconv.Itoa(*r.Pid)
		}
		b.WriteString("\t" + proc)
		if shares {
			if s := r.Shares; s != nil {
				fmt.Fprintf(&b, "\t%.0f%%\t%.0f%%\t%.0f%%\t%.0f%%", s.Busy*100, s.Sndbuf*100, s.Rwnd*100, s.Congestion*100)
			} else {
				b.WriteString("\t-\t-\t-\t-")
			}
		}
		fmt.Fprintln(tw, b.String())
	}
	tw.Flush()
}

func fmtMS(us uint32) string { return strconv.FormatFloat(float64(us)/1000, 'f', 1, 64) + "ms" }

func fmtBps(bytesPerSec uint64) string {
	bits := float64(bytesPerSec) * 8
	switch {
	case bits >= 1e9:
		return strconv.FormatFloat(bits/1e9, 'f', 2, 64) + "Gbps"
	case bits >= 1e6:
		return strconv.FormatFloat(bits/1e6, 'f', 1, 64) + "Mbps"
	case bits >= 1e3:
		return strconv.FormatFloat(bits/1e3, 'f', 0, 64) + "kbps"
	}
	return strconv.FormatFloat(bits, 'f', 0, 64) + "bps"
}

func fmtSize(b uint32) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return strconv.Itoa(int(b>>20)) + "M"
	case b >= 1<<10 && b%(1<<10) == 0:
		return strconv.Itoa(int(b>>10)) + "K"
	case b >= 1<<10:
		return strconv.FormatFloat(float64(b)/1024, 'f', 1, 64) + "K"
	}
	return strconv.Itoa(int(b))
}
