package cli

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// bpfOpts is --bpf, shared by the commands that collect live, and the
// opt-in --pidfd-buflock.
type bpfOpts struct {
	mode  string
	pidfd bool
}

func (o *bpfOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.mode, "bpf", "auto", "eBPF sources: connection events (connects, failed connects by cause, who closed first) and the buffer lock bits of every socket (iter/tcp): "+
		"auto (use what loads, else say once why not), on (fail with exit 3 if one cannot load), off")
	fs.BoolVar(&o.pidfd, "pidfd-buflock", false, "where the eBPF iterator cannot read the buffer lock bits, read SO_BUF_LOCK of owned sockets that look pinned "+
		"through a copy of the owner's fd (pidfd_getfd, needs CAP_SYS_PTRACE); not read-only: it re-stamps the socket's cgroup v1 net_cls/net_prio values, so it is refused where those are mounted")
}

func (o *bpfOpts) validate(src *sourceOpts) error {
	m, err := collect.ParseMode(o.mode)
	if err != nil {
		return usageErr("%v", err)
	}
	if m == collect.ModeOn && src.from != "" {
		return usageErr("--bpf on applies to live collection; --from replays the events recorded in the file")
	}
	if o.pidfd && src.from != "" {
		return usageErr("--pidfd-buflock applies to live collection; --from replays the lock bits recorded in the file")
	}
	return nil
}

// extras loads what --bpf chose of the extras a command needs: the one
// way every command that collects live gets its eBPF sources.
func (o *bpfOpts) extras(e *Env, src *sourceOpts, need collect.Need) (*collect.Extras, error) {
	x, err := collect.OpenExtras(collect.ExtrasConfig{Mode: collect.Mode(o.mode), Need: need, Replay: src.from != "",
		PidFD: o.pidfd, ProcRoot: e.ProcRoot, Loaders: e.BPF, Note: e.progress})
	if err != nil {
		return nil, collectErr(err)
	}
	return x, nil
}

// diagnoseNeed is what check, record and serve use: every extra.
var diagnoseNeed = collect.Need{Events: true, Locks: true, Files: true}

// printEvents lists, under the sockets table, the connections each process
// opened and closed between the two samples as the eBPF source counted
// them: most of them never show in a socket dump. Nothing is printed
// without the source. Names are escaped (textsafe).
func printEvents(w io.Writer, ss []series, flt *socketFilter) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, sr := range ss {
		_, cur := sr.Window()
		if cur.Events == nil {
			continue
		}
		secs := cur.Events.Interval().Seconds()
		for _, f := range cur.Events.Flows {
			rp, lp := int(f.Remote.Port()), int(f.LocalPort)
			if (flt.pid != 0 && f.Pid != flt.pid) || !flt.ports(lp, rp) {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\nconnection events between the samples (eBPF, over %s):\n", cur.Events.Interval().Round(time.Millisecond))
				fmt.Fprintln(tw, "NETNS\tPID\tCOMMAND\tREMOTE\tCONNECTS\tPER SEC\tFAILED\tCLOSED FIRST\tPEER CLOSED\tMEAN LIFE")
				header = true
			}
			life := "-"
			if f.Ended > 0 {
				life = (f.Lifetime / time.Duration(f.Ended)).Round(time.Microsecond).String()
			}
			rate := "-"
			if secs > 0 {
				rate = fmt.Sprintf("%.1f", float64(f.Opens)/secs)
			}
			remote := textsafe.String(f.Remote.String())
			if f.Accepted() {
				remote = fmt.Sprintf("accepted on :%d", f.LocalPort)
			}
			pid := "-" // ended by the network, the opener unknown
			if f.Pid != 0 {
				pid = strconv.Itoa(f.Pid)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", textsafe.String(sr.Netns), pid, textsafe.String(f.Command), textsafe.String(remote),
				f.Opens, rate, failedConnects(&f), f.ActiveCloses, f.PeerCloses, life)
		}
	}
	_ = tw.Flush()
	printKernelEvents(w, ss, flt)
}

// failedConnects says how f's failed connects ended ("412 no port, 3
// refused"), or "-" for none.
func failedConnects(f *snapshot.EventFlow) string {
	var parts []string
	for _, c := range []struct {
		n    uint64
		what string
	}{{f.FailedPorts, "no port"}, {f.Refused, "refused"}, {f.TimedOut, "timed out"}, {f.Unreachable, "unreachable"}, {f.Abandoned, "abandoned"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// printKernelEvents lists the drops, resets and retransmits the eBPF
// source counted between the samples (--pid does not apply: they happen
// in the kernel, not in a process's own context).
func printKernelEvents(w io.Writer, ss []series, flt *socketFilter) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	row := func(ns, what, reason, where string, n uint64, rport, lport int) {
		if !flt.ports(lport, rport) {
			return
		}
		if !header {
			fmt.Fprintln(w, "\ndrops, resets and retransmits between the samples (eBPF):")
			fmt.Fprintln(tw, "NETNS\tEVENT\tREASON\tPEER OR LISTENER\tCOUNT")
			header = true
		}
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", textsafe.String(ns), what, textsafe.String(reason), textsafe.String(where), n)
	}
	peer := func(remote netip.AddrPort, lport uint16) string {
		if lport != 0 && remote.Port() == 0 {
			return fmt.Sprintf("%v on :%d", remote.Addr(), lport)
		}
		return remote.String()
	}
	for _, sr := range ss {
		_, cur := sr.Window()
		ev := cur.Events
		if ev == nil || flt.pid != 0 {
			continue
		}
		for _, d := range ev.Drops {
			where, lport := "-", 0
			if d.Listener.IsValid() {
				where, lport = "listener "+d.Listener.String(), int(d.Listener.Port())
			}
			row(sr.Netns, "drop", d.Reason, where, d.Count, 0, lport)
		}
		for _, r := range ev.Resets {
			what := "reset received"
			if r.Sent {
				what = "reset sent"
			}
			row(sr.Netns, what, r.Reason, peer(r.Remote, r.LocalPort), r.Count, int(r.Remote.Port()), int(r.LocalPort))
		}
		for _, r := range ev.Retransmits {
			what := "retransmit"
			if r.SYN {
				what = "SYN retransmit"
			}
			row(sr.Netns, what, "", peer(r.Remote, r.LocalPort), r.Count, int(r.Remote.Port()), int(r.LocalPort))
		}
		for _, m := range ev.Missing {
			fmt.Fprintf(w, "(eBPF program on %s did not run: %s)\n", textsafe.String(m.Program), textsafe.String(m.Reason))
		}
	}
	_ = tw.Flush()
}
