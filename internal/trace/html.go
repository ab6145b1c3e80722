// SPDX-License-Identifier: Apache-2.0

package trace

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"
)

// The report embeds uPlot (MIT, assets/uPlot.LICENSE; fetched by
// assets/fetch-uplot.sh) so the page opens without network access.
var (
	//go:embed assets/uPlot.iife.min.js
	uplotJS string
	//go:embed assets/uPlot.min.css
	uplotCSS string
	//go:embed assets/uPlot.LICENSE
	uplotLicense string
	//go:embed assets/report.html
	reportHTML string
)

// reportTmpl is parsed on first use: every command pays package init, and
// few write this page.
var reportTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Parse(reportHTML))
})

type holderColor struct {
	Name  string `json:"name"`
	Color string `json:"color"`
}

// holderColors: one colour per holder, shared by the shading and the strip.
func holderColors() []holderColor {
	return []holderColor{
		{string(HeldRwnd), "#e6194b"},
		{string(HeldSndbuf), "#f58231"},
		{string(HeldCongestion), "#4363d8"},
		{string(HeldRecovery), "#911eb4"},
		{string(HeldAppWrite), "#3cb44b"},
		{string(HeldAppRead), "#9a6324"},
		{string(HeldOther), "#808080"},
	}
}

// openRows: a connection's table of transfers is open on the page up to
// this many rows, folded (a details element) beyond.
const openRows = 20

// MaxPageConns bounds the connections plotted in one page: the ones with
// the most transfer time.
const MaxPageConns = 40

type pagePart struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"`
	// Time and Pct are for the table's "held by" cell.
	Time  string `json:"-"`
	Pct   int    `json:"-"`
	Color string `json:"-"`
}

type pageTransfer struct {
	Start float64    `json:"start"`
	End   float64    `json:"end"`
	Held  string     `json:"held"`
	Parts []pagePart `json:"parts"`
}

type pageEvent struct {
	T    float64 `json:"t"`
	Kind string  `json:"kind"`
	Text string  `json:"text"`
}

// eventColors: one colour per event kind, for the markers.
func eventColors() []holderColor {
	return []holderColor{
		{EvRetransmit, "#d62728"},
		{EvRcvSpace, "#2ca02c"},
		{EvResetSent, "#000000"},
		{EvResetReceived, "#7f7f7f"},
	}
}

// num is a sample's value on the page; NaN, a gap in the samples, is
// null (uPlot breaks the line there).
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(n), 'g', -1, 64), nil
}

type pageConn struct {
	ID     int         `json:"id"`
	Events []pageEvent `json:"events"`
	T      []float64   `json:"t"`
	// Gaps counts the places samples were missing (more than
	// gapIntervals sampling intervals apart): a null in every series.
	Gaps     int   `json:"gaps"`
	Inflight []num `json:"inflight"`
	// Limit is what in flight may reach: min(cwnd, the peer's window).
	Limit     []num          `json:"limit"`
	Cwnd      []num          `json:"cwnd"`
	SndWnd    []num          `json:"snd_wnd"`
	SendQ     []num          `json:"sendq"`
	RecvQ     []num          `json:"recvq"`
	Rate      []num          `json:"rate"`
	RTT       []num          `json:"rtt"`
	Transfers []pageTransfer `json:"transfers"`
}

// gapIntervals: samples further apart than this many sampling intervals
// are a gap (the sampler stalled or the connection was not seen), drawn
// as a break in the lines rather than a straight ramp across it.
const gapIntervals = 2

// add appends one sample to every series; NaN everywhere is a gap.
func (pc *pageConn) add(t float64, inflight, limit, cwnd, sndWnd, sendQ, recvQ, rate, rtt float64) {
	pc.T = append(pc.T, t)
	for _, s := range []struct {
		to *[]num
		v  float64
	}{{&pc.Inflight, inflight}, {&pc.Limit, limit}, {&pc.Cwnd, cwnd}, {&pc.SndWnd, sndWnd}, {&pc.SendQ, sendQ},
		{&pc.RecvQ, recvQ}, {&pc.Rate, rate}, {&pc.RTT, rtt}} {
		*s.to = append(*s.to, num(s.v))
	}
}

type pageData struct {
	Holders []holderColor `json:"holders"`
	Kinds   []holderColor `json:"kinds"`
	Conns   []pageConn    `json:"conns"`
}

// pageRow is a transfer's row: the table's cells and its time split for
// the "held by" cell.
type pageRow struct {
	Row
	Parts []pagePart
}

// rowsView is a table of transfers; Peer: with the sockets column (a
// connection's own table has them in its heading).
type rowsView struct {
	Rows []pageRow
	Peer bool
}

// pageVerdict is a connection's verdict in one direction, said once
// above its plots.
type pageVerdict struct {
	Dir, Line string
}

type connSection struct {
	ID                int
	Local, Remote, CC string
	Verdicts          []pageVerdict
	Rows              rowsView
	Gaps              int
}

// partsOf is a transfer's time split in order, each part with its share.
func partsOf(t *Transfer) []pagePart {
	colors := map[string]string{}
	for _, h := range holderColors() {
		colors[h.Name] = h.Color
	}
	var out []pagePart
	for _, p := range []struct {
		h Holder
		d time.Duration
	}{{HeldRwnd, t.Split.Rwnd}, {HeldSndbuf, t.Split.Sndbuf}, {HeldCongestion, t.Split.Congestion},
		{HeldRecovery, t.Split.Recovery}, {appHolder(t.Dir), t.Split.App}, {HeldOther, t.Split.Other}} {
		if p.d > 0 && t.Dur > 0 {
			sh := float64(p.d) / float64(t.Dur)
			out = append(out, pagePart{Name: string(p.h), Share: sh, Time: ms(p.d), Pct: int(math.Round(100 * sh)), Color: colors[string(p.h)]})
		}
	}
	return out
}

// verdictsOf is a connection's verdict once per direction: its
// ConnLine, which Judge sets on one of its slow transfers.
func verdictsOf(ts []*Transfer) []pageVerdict {
	var out []pageVerdict
	for _, d := range []Direction{Send, Recv} {
		for _, t := range ts {
			if t.Dir == d && t.Verdict != nil && t.Verdict.ConnLine != "" {
				out = append(out, pageVerdict{Dir: string(d), Line: t.Verdict.ConnLine})
				break
			}
		}
	}
	return out
}

// PageTitle is the page's title for a recording: its filter, and the
// namespace it was made in. The page escapes it (html/template).
func PageTitle(h *Header) string {
	t := h.Filter
	if h.Netns != "" {
		t += " in " + h.Netns
	}
	sub := h.Subject()
	if w := sub.WorkloadBesideNetns(); w != "" {
		t += " (" + w + ")"
	}
	return t
}

// WriteHTML writes the report: one self-contained page with, per
// connection, plots of in flight, cwnd, the peer's window, Send-Q and
// Recv-Q, delivery rate and RTT, transfers shaded by what held them, and
// their table; the slowest transfers first. ts must be judged.
func WriteHTML(w io.Writer, tr *Trace, ts []Transfer, title string) error {
	byConn := map[int][]*Transfer{}
	busy := map[int]time.Duration{}
	for i := range ts {
		t := &ts[i]
		byConn[t.Conn] = append(byConn[t.Conn], t)
		busy[t.Conn] += t.Dur
	}
	var conns []*Conn
	for _, c := range tr.Conns {
		if len(byConn[c.ID]) > 0 && len(c.Points) > 0 {
			conns = append(conns, c)
		}
	}
	sort.SliceStable(conns, func(i, j int) bool { return busy[conns[i].ID] > busy[conns[j].ID] })
	if len(conns) > MaxPageConns {
		conns = conns[:MaxPageConns]
	}
	sort.SliceStable(conns, func(i, j int) bool { return conns[i].ID < conns[j].ID })

	data := pageData{Holders: holderColors(), Kinds: eventColors()}
	var sections []connSection
	for _, c := range conns {
		pc := pageConn{ID: c.ID}
		gap := time.Duration(gapIntervals) * tr.Header.Interval
		for i := range c.Points {
			p := &c.Points[i]
			if i > 0 && tr.Header.Interval > 0 && p.T-c.Points[i-1].T > gap {
				nan := math.NaN()
				pc.add((p.T+c.Points[i-1].T).Seconds()/2, nan, nan, nan, nan, nan, nan, nan, nan)
				pc.Gaps++
			}
			cwnd := float64(p.Cwnd) * float64(p.MSS)
			pc.add(p.T.Seconds(), float64(p.Inflight()), min(cwnd, float64(p.SndWnd)), cwnd, float64(p.SndWnd),
				float64(p.SendQ), float64(p.RecvQ), float64(p.Rate)*8/1e6, float64(p.RTT)/1000)
		}
		for _, e := range c.Events {
			text := fmt.Sprintf("%s at %.4fs", e.Kind, e.T.Seconds())
			switch e.Kind {
			case EvRcvSpace:
				text += fmt.Sprintf(": rcvbuf %d, window clamp %d", e.Rcvbuf, e.Clamp)
			case EvResetSent:
				text += ": " + e.Reason
			}
			pc.Events = append(pc.Events, pageEvent{T: e.T.Seconds(), Kind: e.Kind, Text: text})
		}
		sec := connSection{ID: c.ID, Local: c.Local.String(), Remote: c.Remote.String(), CC: c.CC,
			Verdicts: verdictsOf(byConn[c.ID]), Gaps: pc.Gaps}
		for _, t := range byConn[c.ID] {
			pt := pageTransfer{Start: t.Start.Seconds(), End: (t.Start + t.Dur).Seconds(), Parts: partsOf(t)}
			if t.Verdict != nil {
				pt.Held = string(t.Verdict.Held)
			}
			pc.Transfers = append(pc.Transfers, pt)
			sec.Rows.Rows = append(sec.Rows.Rows, pageRow{Row: RowOf(t), Parts: pt.Parts})
		}
		data.Conns = append(data.Conns, pc)
		sections = append(sections, sec)
	}
	js, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("trace: html data: %w", err)
	}
	var slowest []pageRow
	sl := Slowest(ts)
	nSlow := 0
	for i := range sl {
		if sl[i].Verdict != nil && sl[i].Verdict.Slow {
			nSlow++
		}
		if i < 20 {
			slowest = append(slowest, pageRow{Row: RowOf(&sl[i]), Parts: partsOf(&sl[i])})
		}
	}
	var span time.Duration
	for _, c := range tr.Conns {
		if n := len(c.Points); n > 0 {
			span = max(span, c.Points[n-1].T)
		}
	}
	err = reportTmpl().Execute(w, map[string]any{
		"Title":      title,
		"Started":    tr.Header.Started.Format(time.RFC3339),
		"Span":       span.Round(time.Millisecond).String(),
		"Interval":   tr.Header.Interval.String(),
		"NConns":     len(tr.Conns),
		"NTransfers": len(ts),
		"NSlow":      nSlow,
		"Holders":    data.Holders,
		"Kinds":      data.Kinds,
		"Events":     tr.Header.Events,
		"NoEvents":   tr.Header.NoEvents,
		"Slowest":    rowsView{Rows: slowest, Peer: true},
		"Paths":      PathLines(ts),
		// One connection's page does not repeat its table as the slowest.
		"ShowSlowest": len(sections) > 1,
		"OpenRows":    openRows,
		"Conns":       sections,
		"Data":        template.JS(js),
		"JS":          template.JS(uplotJS + "\n/* uPlot licence:\n" + uplotLicense + "*/"),
		"CSS":         template.CSS(uplotCSS),
	})
	if err != nil {
		return fmt.Errorf("trace: html: %w", err)
	}
	return nil
}

func appHolder(d Direction) Holder {
	if d == Recv {
		return HeldAppRead
	}
	return HeldAppWrite
}
