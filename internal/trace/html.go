package trace

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"sort"
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

// MaxPageConns bounds the connections plotted in one page: the ones with
// the most transfer time.
const MaxPageConns = 40

type pagePart struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"`
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

type pageConn struct {
	ID        int            `json:"id"`
	Events    []pageEvent    `json:"events"`
	T         []float64      `json:"t"`
	Inflight  []float64      `json:"inflight"`
	Cwnd      []float64      `json:"cwnd"`
	SndWnd    []float64      `json:"snd_wnd"`
	SendQ     []float64      `json:"sendq"`
	RecvQ     []float64      `json:"recvq"`
	Rate      []float64      `json:"rate"`
	RTT       []float64      `json:"rtt"`
	Transfers []pageTransfer `json:"transfers"`
}

type pageData struct {
	Holders []holderColor `json:"holders"`
	Kinds   []holderColor `json:"kinds"`
	Conns   []pageConn    `json:"conns"`
}

type connSection struct {
	ID                int
	Local, Remote, CC string
	Rows              []Row
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
		for i := range c.Points {
			p := &c.Points[i]
			pc.T = append(pc.T, p.T.Seconds())
			pc.Inflight = append(pc.Inflight, float64(p.Inflight()))
			pc.Cwnd = append(pc.Cwnd, float64(p.Cwnd)*float64(p.MSS))
			pc.SndWnd = append(pc.SndWnd, float64(p.SndWnd))
			pc.SendQ = append(pc.SendQ, float64(p.SendQ))
			pc.RecvQ = append(pc.RecvQ, float64(p.RecvQ))
			pc.Rate = append(pc.Rate, float64(p.Rate)*8/1e6)
			pc.RTT = append(pc.RTT, float64(p.RTT)/1000)
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
		sec := connSection{ID: c.ID, Local: c.Local.String(), Remote: c.Remote.String(), CC: c.CC}
		for _, t := range byConn[c.ID] {
			pt := pageTransfer{Start: t.Start.Seconds(), End: (t.Start + t.Dur).Seconds()}
			if t.Verdict != nil {
				pt.Held = string(t.Verdict.Held)
			}
			for _, p := range []struct {
				h Holder
				d time.Duration
			}{{HeldRwnd, t.Split.Rwnd}, {HeldSndbuf, t.Split.Sndbuf}, {HeldCongestion, t.Split.Congestion},
				{HeldRecovery, t.Split.Recovery}, {appHolder(t.Dir), t.Split.App}, {HeldOther, t.Split.Other}} {
				if p.d > 0 && t.Dur > 0 {
					pt.Parts = append(pt.Parts, pagePart{Name: string(p.h), Share: float64(p.d) / float64(t.Dur)})
				}
			}
			pc.Transfers = append(pc.Transfers, pt)
			sec.Rows = append(sec.Rows, RowOf(t))
		}
		data.Conns = append(data.Conns, pc)
		sections = append(sections, sec)
	}
	js, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("trace: html data: %w", err)
	}
	var slowest []Row
	sl := Slowest(ts)
	nSlow := 0
	for i := range sl {
		if sl[i].Verdict != nil && sl[i].Verdict.Slow {
			nSlow++
		}
		if i < 20 {
			slowest = append(slowest, RowOf(&sl[i]))
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
		"Slowest":    slowest,
		"Paths":      PathLines(ts),
		"Conns":      sections,
		"Data":       template.JS(js),
		"JS":         template.JS(uplotJS + "\n/* uPlot licence:\n" + uplotLicense + "*/"),
		"CSS":        template.CSS(uplotCSS),
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
