// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/output"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// Row is one transfer as the table and the page print it.
type Row struct {
	Conn                                        int
	Dir, Peer, Bytes, Start, Dur, Goodput       string
	Ideal, Rwnd, Sndbuf, Cong, Recov, App, Held string
	Retrans, ZeroWin                            int
	RTT, Cwnd                                   string
	// Events counts the eBPF events ("-" when the trace has none).
	Events string
	Slow   bool
	// Verdict is the connection's verdict, on the row of its slow
	// transfer that lost the most; empty on its other rows.
	Verdict string
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// RowOf formats a judged transfer.
func RowOf(t *Transfer) Row {
	r := Row{Conn: t.Conn, Dir: string(t.Dir), Bytes: units.Bytes(float64(t.Bytes)),
		Start: fmt.Sprintf("%.3fs", t.Start.Seconds()), Dur: ms(t.Dur), Goodput: units.Rate(t.Goodput),
		Rwnd: ms(t.Split.Rwnd), Sndbuf: ms(t.Split.Sndbuf), Cong: ms(t.Split.Congestion), Recov: ms(t.Split.Recovery),
		App: ms(t.Split.App), Retrans: int(t.Retrans), ZeroWin: t.ZeroWindow,
		RTT:  units.RTT(t.RTTMin) + ".." + units.RTT(t.RTTMax),
		Cwnd: fmt.Sprintf("%d..%d", t.CwndMin, t.CwndMax)}
	r.Peer = t.Local.String() + " > " + t.Remote.String()
	if t.Dir == Recv {
		r.Peer = t.Local.String() + " < " + t.Remote.String()
		r.Sndbuf, r.Cong, r.Recov = "-", "-", "-"
		r.Rwnd = "-"
	}
	r.Events = eventsText(t.Events)
	if t.Clipped {
		r.Dur += "*" // part of it is outside the recording: ClippedNote
	}
	if t.Uncertain {
		r.Dur += "?" // a boundary no sample placed: UncertainNote
	}
	if v := t.Verdict; v != nil {
		r.Ideal = ms(v.Ideal)
		r.Held = string(v.Held)
		r.Slow = v.Slow
		r.Verdict = v.ConnLine // the connection's, on one of its rows
	}
	return r
}

// ClippedNote explains the "*" after a clipped transfer's duration.
const ClippedNote = "* clipped: under way at the connection's first sample or still at its last; bytes, duration and split count only what the samples saw"

// UncertainNote explains the "?" after an uncertain transfer's duration.
const UncertainNote = "? uncertain: its boundary with the transfer before or after fell inside one long sampling interval (a late sample); bytes and duration may be off by that interval's, so it is not judged and the verdict leaves it out"

// eventsText is an EventCounts as the table shows it: "-" without eBPF,
// "none", or e.g. "3 retx, 1 rst sent".
func eventsText(n *EventCounts) string {
	if n == nil {
		return "-"
	}
	var parts []string
	for _, p := range []struct {
		n    int
		name string
	}{{n.Retransmits, "retx"}, {n.WindowSteps, "rcvbuf steps"}, {n.ResetsSent, "rst sent"}, {n.ResetsReceived, "rst recv"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.name))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// WriteTable prints what each peer's path was judged by, the n slowest
// transfers (all when n <= 0), what "*" means when a row has it, and one
// verdict line per connection (and direction) with slow transfers. Text
// cells are escaped (textsafe): a recording's addresses can carry any
// zone.
func WriteTable(w io.Writer, ts []Transfer, n int) error {
	all := Slowest(ts)
	ts = all
	if n > 0 && len(ts) > n {
		ts = ts[:n]
	}
	if len(ts) == 0 {
		_, err := fmt.Fprintln(w, "no transfers seen on the matched connections")
		return err
	}
	for _, p := range PathLines(all) {
		fmt.Fprintln(w, textsafe.String(p))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONN\tDIR\tSOCKETS\tBYTES\tSTART\tDURATION\tIDEAL\tGOODPUT\tPEER WND\tSNDBUF\tCONGEST\tRECOVERY\tAPP\tZWIN\tRETX\tRTT\tCWND\tEVENTS")
	clipped, uncertain := false, false
	for i := range ts {
		r := RowOf(&ts[i])
		for _, c := range []*string{&r.Dir, &r.Peer, &r.Events} {
			*c = textsafe.String(*c)
		}
		clipped = clipped || ts[i].Clipped
		uncertain = uncertain || ts[i].Uncertain
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Conn, r.Dir, r.Peer, r.Bytes, r.Start, r.Dur, r.Ideal,
			r.Goodput, r.Rwnd, r.Sndbuf, r.Cong, r.Recov, r.App, r.ZeroWin, r.Retrans, r.RTT, r.Cwnd, r.Events)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if clipped {
		fmt.Fprintln(w, ClippedNote)
	}
	if uncertain {
		fmt.Fprintln(w, UncertainNote)
	}
	verdicts := ConnLines(all)
	if len(verdicts) > 0 {
		fmt.Fprintln(w)
	}
	for _, v := range verdicts {
		if _, err := fmt.Fprintln(w, textsafe.String(v)); err != nil {
			return err
		}
	}
	return nil
}

// PathLines says, once per peer address, the rate its transfers were
// judged by and where it came from.
func PathLines(ts []Transfer) []string {
	seen := map[string]bool{}
	var out []string
	for i := range ts {
		v := ts[i].Verdict
		if v == nil {
			continue
		}
		l := fmt.Sprintf("path to %s: %s", ts[i].Remote.Addr(), v.PathFrom)
		if v.PathKnown {
			l = fmt.Sprintf("path to %s: %s, %s", ts[i].Remote.Addr(), units.Rate(v.PathRate), v.PathFrom)
		}
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// ConnLines is one verdict line per connection and direction with slow
// transfers, in connection order.
func ConnLines(ts []Transfer) []string {
	var vs []*Transfer
	for i := range ts {
		if v := ts[i].Verdict; v != nil && v.ConnLine != "" {
			vs = append(vs, &ts[i])
		}
	}
	sort.SliceStable(vs, func(i, j int) bool {
		if vs[i].Conn != vs[j].Conn {
			return vs[i].Conn < vs[j].Conn
		}
		return vs[i].Dir < vs[j].Dir
	})
	out := make([]string, len(vs))
	for i, t := range vs {
		out[i] = fmt.Sprintf("conn %d %s: %s", t.Conn, t.Dir, t.Verdict.ConnLine)
	}
	return out
}

// WriteSubject prints, above the table, the pod, container or unit the
// recording is about ("pod shop/web-1 container api"), when h names
// one; nothing otherwise.
func WriteSubject(w io.Writer, h *Header) error {
	sub := h.Subject()
	if p := sub.WorkloadBesideNetns(); p != "" {
		_, err := fmt.Fprintf(w, "traced in netns %s: %s\n\n", sub.NetnsText(), p)
		return err
	}
	return nil
}

// WriteJSON writes one JSON line per transfer, in start order, each with
// the members "pod", "pod_namespace", "container" and "unit" of h's
// workload when it names one.
func WriteJSON(w io.Writer, ts []Transfer, h *Header) error {
	var sub output.Subject
	if h != nil {
		sub = h.Subject()
	}
	var b []byte
	for i := range ts {
		line, err := json.Marshal(&ts[i])
		if err != nil {
			return fmt.Errorf("trace: write json: %w", err)
		}
		b = sub.AppendWorkloadJSON(append(b[:0], line[:len(line)-1]...))
		if _, err := w.Write(append(b, '}', '\n')); err != nil {
			return fmt.Errorf("trace: write json: %w", err)
		}
	}
	return nil
}

// WriteText prints what tr recorded and its top slowest transfers ts (0:
// all), or that no connection matched its filter.
func WriteText(w io.Writer, tr *Trace, ts []Transfer, top int) error {
	if err := WriteSubject(w, &tr.Header); err != nil {
		return err
	}
	if len(tr.Conns) == 0 {
		_, err := fmt.Fprintln(w, tr.Header.NothingMatched())
		return err
	}
	return WriteTable(w, ts, top)
}

// allConnections is the filter of a trace without one.
const allConnections = "all connections"

// NothingMatched says that a recording traced no connection: none
// matched its filter, or, without one, none was seen established.
func (h *Header) NothingMatched() string {
	if h.Filter == allConnections {
		return "no established connection was seen"
	}
	return "no connection matched " + h.Matched()
}

// Matched names a recording's filter for a note ("the filters" when it
// recorded none), escaped.
func (h *Header) Matched() string {
	if h.Filter == "" {
		return "the filters"
	}
	return textsafe.String(h.Filter)
}
