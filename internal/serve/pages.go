// SPDX-License-Identifier: Apache-2.0

package serve

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
	"github.com/tcpdoctor/tcpdoctor/internal/version"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// Paths of serve --history's evidence pages (docs/history.md, "Evidence
// pages").
const (
	pathHistory  = PathHistory
	pathIncident = pathHistory + "/incident"
	pathTrace    = pathHistory + "/trace"
)

// Bounds of one evidence page: pages are built one at a time (a request
// waits pageWait for its turn, else 503), each within pageTimeout (503
// after it), over at most maxPageSpan of the timeline.
const (
	pageWait    = 5 * time.Second
	pageTimeout = 20 * time.Second
	maxPageSpan = 7 * 24 * time.Hour
	// incidentSlack: an alert's time a little after its incident's last
	// window (scrape and evaluation delays) still finds it.
	incidentSlack = 5 * time.Minute
)

// evidencePages serves the store serve --history writes, read-only:
// the timeline (/history, as history --html and --json print it), each
// incident's diagnosis (as check --history --at prints it) and its
// trace's page. Every page is made by the printers the commands use.
type evidencePages struct {
	dir   string
	diag  diag.Options
	now   func() time.Time
	logf  func(format string, a ...any)
	build *version.Info
	// base is --web.external-url: the URL links start with; empty, the
	// scheme and Host the request came with.
	base string
	turn chan struct{}
}

// NewPages is the handler of the evidence pages of o.History.Dir, for
// Options.Pages: their links start with o.External, their reports are
// made with o.Diag and say o.PagesBuild, their times are o.Now's.
func NewPages(o Options) http.Handler {
	p := &evidencePages{dir: o.History.Dir, diag: o.Diag, now: o.Now, logf: o.Logf, build: o.PagesBuild,
		base: strings.TrimSuffix(o.External, "/"), turn: make(chan struct{}, 1)}
	return p.handler()
}

// handler is the pages' handler, bounded in time and taken one at a
// time; only GET and HEAD.
func (p *evidencePages) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(pathHistory, p.timeline)
	mux.HandleFunc(pathIncident, p.incident)
	mux.HandleFunc(pathTrace, p.trace)
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "evidence pages are read-only: GET", http.StatusMethodNotAllowed)
			return
		}
		t := time.NewTimer(pageWait)
		defer t.Stop()
		select {
		case p.turn <- struct{}{}:
		case <-t.C:
			http.Error(w, "busy with another evidence page; try again", http.StatusServiceUnavailable)
			return
		case <-r.Context().Done():
			return
		}
		defer func() { <-p.turn }()
		mux.ServeHTTP(w, r)
	})
	// TimeoutHandler answers 503 at the bound; the page's work ends
	// before the next one starts (the turn is held until then).
	return http.TimeoutHandler(limited, pageTimeout, "the evidence page took longer than "+pageTimeout.String())
}

// CheckExternal checks --web.external-url (Options.External): "" or an
// http or https URL with a host and an optional path, where the pages'
// links start.
func CheckExternal(external string) error {
	if external == "" {
		return nil
	}
	u, err := url.Parse(external)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--web.external-url %q: want http:// or https://, a host, and an optional path", external)
	}
	return nil
}

// baseURL is what links start with.
func (p *evidencePages) baseURL(r *http.Request) string {
	if p.base != "" {
		return p.base
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// pageTime reads a time parameter as history's flags do, or as Unix
// milliseconds (Grafana's ${__value.time}).
func pageTime(s string, now time.Time) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms > 0 {
		return time.UnixMilli(ms), nil
	}
	return history.ParseTime(s, now)
}

func badRequest(w http.ResponseWriter, format string, a ...any) {
	http.Error(w, fmt.Sprintf(format, a...), http.StatusBadRequest)
}

func wantJSON(r *http.Request) bool { return r.URL.Query().Get("format") == "json" }

// timeline serves /history: the listing `history --html` draws, or with
// format=json what `history --json` prints, each incident with the URL
// of its page. Parameters: since, until, rule (repeated), netns, verbose.
func (p *evidencePages) timeline(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != pathHistory {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	now := p.now()
	since, until := now.Add(-24*time.Hour), now
	var err error
	if s := q.Get("since"); s != "" {
		if since, err = pageTime(s, now); err != nil {
			badRequest(w, "since: %v", err)
			return
		}
	}
	if s := q.Get("until"); s != "" {
		if until, err = pageTime(s, now); err != nil {
			badRequest(w, "until: %v", err)
			return
		}
	}
	if !until.After(since) || until.Sub(since) > maxPageSpan {
		badRequest(w, "until must be after since, by at most %s", maxPageSpan)
		return
	}
	f := history.Filter{Min: diag.Warning, Rules: q["rule"], Netns: q.Get("netns")}
	if q.Get("verbose") != "" {
		f.Min = diag.Info
	}
	st, err := history.Open(p.dir)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	l, _, pic, err := history.List(st, since, until, f, false, !wantJSON(r))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	history.TraceLinks(l, st.Traces(), "")
	base := p.baseURL(r)
	l.Pages = make([]string, len(l.Incidents))
	l.TracePages = make([]string, len(l.Incidents))
	for i := range l.Incidents {
		in := &l.Incidents[i]
		in.URL = base + incidentPath(in)
		l.Pages[i] = in.URL
		if l.TraceReplay[i] != "" {
			l.TracePages[i] = base + pathTrace + "?" + url.Values{"name": {in.Trace}}.Encode()
		}
	}
	var b bytes.Buffer
	if wantJSON(r) {
		err = history.WriteJSON(&b, l)
		w.Header().Set("Content-Type", "application/json")
	} else {
		err = history.WriteHTML(&b, l, &pic, now.Location())
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(b.Bytes())
}

// incidentPath is the path and query of an incident's page: its rule,
// namespace and endpoints, and a time inside it (inside its evidence's
// window when one was kept).
func incidentPath(in *history.Incident) string {
	at := in.End
	if in.Evidence != "" {
		at = in.At
	}
	q := url.Values{"rule": {in.Rule}, "netns": {in.Subject.Netns}, "at": {at.UTC().Format(time.RFC3339Nano)}}
	if in.Subject.Local.IsValid() {
		q.Set("local", in.Subject.Local.String())
	}
	if in.Subject.Remote.IsValid() {
		q.Set("remote", in.Subject.Remote.String())
	}
	return pathIncident + "?" + q.Encode()
}

// errNoIncident: no incident of the rule in the namespace covers the
// time.
var errNoIncident = errors.New("no incident")

// findIncident is the incident of rule in netns covering at, with its
// evidence kept nearest at (history's IncidentsAt, as check --history
// --at finds it), preferring one whose endpoints match local and remote
// when given; else the one that ended last at most incidentSlack before
// at, with its peak's evidence. Both read the timeline as a stream.
func findIncident(st *history.Store, rule, ns, local, remote string, at time.Time) (history.Incident, *history.Window, error) {
	f := history.Filter{Min: diag.Info, Rules: []string{rule}, Netns: ns}
	ms, err := st.IncidentsAt(at, f)
	if err != nil {
		return history.Incident{}, nil, err
	}
	best, bestScore := -1, -1
	for i := range ms {
		if s := endpointScore(&ms[i].Incident, local, remote); s > bestScore {
			best, bestScore = i, s
		}
	}
	if best >= 0 {
		return ms[best].Incident, ms[best].Nearest, nil
	}
	// Not covering it: an alert evaluated after the incident's last
	// window.
	g := history.NewGrouper(f)
	g.Max = history.MaxListed
	if err := st.Walk(at.Add(-history.AtLookback), at, func(e *history.Entry) error { g.Add(e); return nil }); err != nil {
		return history.Incident{}, nil, err
	}
	var found *history.Incident
	ins := g.Incidents(at)
	for i := range ins {
		in := &ins[i]
		if in.End.Before(at) && !in.End.Add(incidentSlack).Before(at) &&
			(found == nil || endpointScore(in, local, remote) > endpointScore(found, local, remote) ||
				endpointScore(in, local, remote) == endpointScore(found, local, remote) && in.End.After(found.End)) {
			found = in
		}
	}
	if found == nil {
		return history.Incident{}, nil, errNoIncident
	}
	var w *history.Window
	if ev, ok := evidenceWindow(st, found.Evidence); ok {
		w = &ev
	}
	return *found, w, nil
}

// endpointScore: how well an incident's endpoints match the ones asked
// for.
func endpointScore(in *history.Incident, local, remote string) int {
	s := 0
	if local != "" && in.Subject.Local.String() == local {
		s += 2
	}
	if remote != "" && in.Subject.Remote.String() == remote {
		s++
	}
	return s
}

// incident serves an incident's page: the diagnosis of its evidence's
// window as check prints it (format=json: check --json), with its trace
// linked. Parameters: rule, netns, at (required), local, remote,
// verbose. With no incident there, it sends the timeline around at.
func (p *evidencePages) incident(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rule, ns := q.Get("rule"), q.Get("netns")
	if rule == "" || q.Get("at") == "" {
		badRequest(w, "rule and at are required (and netns: its name, host for the host's)")
		return
	}
	now := p.now()
	at, err := pageTime(q.Get("at"), now)
	if err != nil {
		badRequest(w, "at: %v", err)
		return
	}
	st, err := history.Open(p.dir)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	base := p.baseURL(r)
	around := base + pathHistory + "?" + url.Values{
		"since": {at.Add(-time.Hour).UTC().Format(time.RFC3339Nano)},
		"until": {at.Add(time.Hour).UTC().Format(time.RFC3339Nano)}}.Encode()
	in, ev, err := findIncident(st, rule, ns, q.Get("local"), q.Get("remote"), at)
	if errors.Is(err, errNoIncident) {
		if wantJSON(r) {
			http.Error(w, fmt.Sprintf("no %s incident in netns %q covers %s", rule, ns, at.UTC().Format(time.RFC3339)), http.StatusNotFound)
			return
		}
		// The timeline at that time says what was seen instead.
		http.Redirect(w, r, around, http.StatusSeeOther)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	page := &history.IncidentPage{Incident: in, TimelineHref: around,
		JSONHref: base + incidentPath(&in) + "&format=json"}
	var rep *report.Report
	switch {
	case ev == nil && in.Evidence != "":
		page.Note = in.Evidence + " is no longer kept (evicted by the store's size or age bound)."
	case ev != nil:
		if rep, err = p.diagnose(st.Path(ev.Name)); err != nil {
			page.Note = err.Error()
		} else {
			page.From, page.To = ev.From, ev.To
		}
	}
	if wantJSON(r) {
		if rep == nil {
			http.Error(w, "no evidence kept for this incident: "+page.Note, http.StatusNotFound)
			return
		}
		var b bytes.Buffer
		if err := report.WriteJSON(&b, rep); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b.Bytes())
		return
	}
	if rep != nil {
		var t bytes.Buffer
		min := diag.Warning
		if q.Get("verbose") != "" {
			min = diag.Info
		}
		report.WriteText(&t, rep, report.Style{MinSeverity: min})
		page.Report = t.String()
	}
	if in.Trace != "" {
		if st.Traces()[in.Trace] {
			page.TraceHref = base + pathTrace + "?" + url.Values{"name": {in.Trace}}.Encode()
		} else {
			page.TraceNote = in.Trace + " is not in the store: still being recorded, evicted, or not kept"
		}
	}
	var b bytes.Buffer
	if err := history.WriteIncidentHTML(&b, page, now.Location()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

func evidenceWindow(st *history.Store, name string) (history.Window, bool) {
	for _, ev := range st.Evidence() {
		if ev.Name == name {
			return ev, true
		}
	}
	return history.Window{}, false
}

// diagnose runs check's rules over a kept window, as check --from does.
func (p *evidencePages) diagnose(path string) (*report.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	defer f.Close()
	ss, te, err := window.ReadKept(f)
	if te != nil {
		p.logf("note: %s: line %d is incomplete (a recorder stopped mid-write): used the %d complete samples before it", path, te.Line, window.Samples(ss))
	}
	if err != nil {
		return nil, fmt.Errorf("--from %s: %w", path, err)
	}
	rep := report.Diagnose(window.Inputs(ss, p.diag), rules.All())
	rep.Build = p.build
	return rep, nil
}

// trace serves the page trace --from FILE --html draws of a trace the
// store keeps (by its name only).
func (p *evidencePages) trace(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	st, err := history.Open(p.dir)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !st.Traces()[name] {
		http.Error(w, "no such trace in the store", http.StatusNotFound)
		return
	}
	var b bytes.Buffer
	if err := renderTrace(st.Path(name), &b); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// renderTrace renders the trace file src as trace --from src --html does.
func renderTrace(src string, b *bytes.Buffer) error {
	tr, ts, err := trace.AnalyzeFile(src)
	if err != nil {
		return err
	}
	return trace.WriteHTML(b, tr, ts, trace.PageTitle(&tr.Header))
}
