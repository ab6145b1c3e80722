// SPDX-License-Identifier: Apache-2.0

package sockets

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// EventFilter is the listing's filter as the event tables apply it.
type EventFilter struct {
	// Pid keeps the flows of this process (0: all); the kernel's drops,
	// resets and retransmits have none, so a Pid hides them.
	Pid int
	// Ports tests a local and a remote port (--port, --lport, --rport).
	Ports func(lport, rport int) bool
}

// WriteEvents lists, under the sockets table, the connections each process
// opened and closed between the two samples as the eBPF source counted
// them (most of them never show in a socket dump), then the drops, resets
// and retransmits. Nothing is printed without the source.
func WriteEvents(w io.Writer, ws []Window, f EventFilter) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, win := range ws {
		cur := win.Cur
		if cur.Events == nil {
			continue
		}
		secs := cur.Events.Interval().Seconds()
		for _, fl := range cur.Events.Flows {
			rp, lp := int(fl.Remote.Port()), int(fl.LocalPort)
			if (f.Pid != 0 && fl.Pid != f.Pid) || !f.Ports(lp, rp) {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\nconnection events between the samples (eBPF, over %s):\n", cur.Events.Interval().Round(time.Millisecond))
				fmt.Fprintln(tw, "NETNS\tPID\tCOMMAND\tREMOTE\tCONNECTS\tPER SEC\tFAILED\tCLOSED FIRST\tPEER CLOSED\tMEAN LIFE")
				header = true
			}
			life := "-"
			if fl.Ended > 0 {
				life = (fl.Lifetime / time.Duration(fl.Ended)).Round(time.Microsecond).String()
			}
			rate := "-"
			if secs > 0 {
				rate = fmt.Sprintf("%.1f", float64(fl.Opens)/secs)
			}
			remote := textsafe.String(fl.Remote.String())
			if fl.Accepted() {
				remote = fmt.Sprintf("accepted on :%d", fl.LocalPort)
			}
			// A flow the network ended has no opener.
			sub := output.ProcessSubject(win.Netns, fl.Pid, fl.Command)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", sub.NetnsText(), sub.PidText(), sub.CommandText(), textsafe.String(remote),
				fl.Opens, rate, failedConnects(&fl), fl.ActiveCloses, fl.PeerCloses, life)
		}
	}
	_ = tw.Flush()
	writeKernelEvents(w, ws, f)
}

// failedConnects says how f's failed connects ended ("412 no port, 3
// refused"), or "-" for none.
func failedConnects(f *snapshot.EventFlow) string {
	var parts []string
	for _, c := range f.Failures() {
		if c.N > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.N, c.Word))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// writeKernelEvents lists the drops, resets and retransmits the eBPF
// source counted between the samples (a Pid hides them: they happen in
// the kernel, not in a process's own context).
func writeKernelEvents(w io.Writer, ws []Window, f EventFilter) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	row := func(ns, what, reason, where string, n uint64, rport, lport int) {
		if !f.Ports(lport, rport) {
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
		sub := output.Subject{Netns: ns}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", sub.NetnsText(), what, textsafe.String(reason), textsafe.String(where), n)
	}
	peer := func(remote netip.AddrPort, lport uint16) string {
		if lport != 0 && remote.Port() == 0 {
			return fmt.Sprintf("%v on :%d", remote.Addr(), lport)
		}
		return remote.String()
	}
	for _, win := range ws {
		ev := win.Cur.Events
		if ev == nil || f.Pid != 0 {
			continue
		}
		for _, d := range ev.Drops {
			where, lport := "-", 0
			if d.Listener.IsValid() {
				where, lport = "listener "+d.Listener.String(), int(d.Listener.Port())
			}
			row(win.Netns, "drop", d.Reason, where, d.Count, 0, lport)
		}
		for _, r := range ev.Resets {
			what := "reset received"
			if r.Sent {
				what = "reset sent"
			}
			row(win.Netns, what, r.Reason, peer(r.Remote, r.LocalPort), r.Count, int(r.Remote.Port()), int(r.LocalPort))
		}
		for _, r := range ev.Retransmits {
			what := "retransmit"
			if r.SYN {
				what = "SYN retransmit"
			}
			row(win.Netns, what, "", peer(r.Remote, r.LocalPort), r.Count, int(r.Remote.Port()), int(r.LocalPort))
		}
	}
	_ = tw.Flush()
	// The programs and their losses are the host's: said once, under
	// the tables.
	for _, win := range ws {
		ev := win.Cur.Events
		if ev == nil {
			continue
		}
		if f.Pid == 0 {
			for _, m := range ev.Missing {
				fmt.Fprintf(w, "(eBPF program on %s did not run: %s)\n", textsafe.String(m.Program), textsafe.String(m.Reason))
			}
		}
		if msg := ev.Incomplete(); msg != "" {
			fmt.Fprintf(w, "(%s)\n", textsafe.String(msg))
		}
		break
	}
}
