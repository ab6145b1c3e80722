// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/serve"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

func pageGet(t *testing.T, u string) (int, string, http.Header) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestEvidencePages: the pages of a store answer what the commands
// print: /history?format=json is history --json with each incident's
// url, the url's ?format=json page is check --json --from of the kept
// samples byte for byte, its HTML page check's text; a time with no
// incident goes to the timeline around it; bad parameters, writes and
// trace names outside the store are refused.
func TestEvidencePages(t *testing.T) {
	dir, rec, snaps := storeFrom(t, overflowFixture)
	from, to := snaps[0].Taken, snaps[len(snaps)-1].Taken
	since, until := from.Add(-time.Minute).UTC().Format(time.RFC3339), to.Add(time.Minute).UTC().Format(time.RFC3339)
	srv := httptest.NewServer(serve.NewPages(serve.Options{History: history.Options{Dir: dir}, Now: time.Now, Logf: func(string, ...any) {}}))
	defer srv.Close()

	code, body, _ := pageGet(t, srv.URL+"/history?format=json&since="+since+"&until="+until)
	want := mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until, "--json")
	var l, wl history.Listing
	if err := json.Unmarshal([]byte(body), &l); code != 200 || err != nil {
		t.Fatalf("%d %v:\n%s", code, err, body)
	}
	if err := json.Unmarshal([]byte(want), &wl); err != nil {
		t.Fatal(err)
	}
	if len(l.Incidents) != 1 || l.Incidents[0].URL == "" {
		t.Fatalf("incidents: %s", body)
	}
	u := l.Incidents[0].URL
	l.Incidents[0].URL = ""
	a, _ := json.Marshal(l)
	b, _ := json.Marshal(wl)
	if !bytes.Equal(a, b) {
		t.Errorf("/history?format=json differs from history --json but for url:\n%s\nwant\n%s", a, b)
	}
	_, wantJSON, _ := run(t, "check", "--json", "--from", rec)
	if code, got, _ := pageGet(t, u+"&format=json"); code != 200 || got != wantJSON {
		t.Errorf("incident JSON page: %d, differs from check --json --from:\n%s\nwant\n%s", code, got, wantJSON)
	}
	_, wantText, _ := run(t, "check", "--from", rec)
	code, page, hdr := pageGet(t, u)
	if code != 200 || !strings.Contains(html.UnescapeString(page), wantText) || hdr.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("incident page: %d %s lacks check's text:\n%s\nwant\n%s", code, hdr.Get("Content-Type"), page, wantText)
	}
	// The timeline page links the incident's page.
	if code, page, _ := pageGet(t, srv.URL+"/history?since="+since+"&until="+until); code != 200 ||
		!strings.Contains(page, html.EscapeString(u)) {
		t.Errorf("timeline page %d lacks %s:\n%.3000s", code, u, page)
	}
	// No incident then: the timeline around that time.
	q := url.Values{"rule": {"listen-overflow"}, "netns": {"host"}, "at": {from.Add(-time.Hour).UTC().Format(time.RFC3339)}}
	if code, _, hdr := pageGet(t, srv.URL+"/history/incident?"+q.Encode()); code != http.StatusSeeOther || !strings.Contains(hdr.Get("Location"), "/history?") {
		t.Errorf("no incident: %d to %q, want 303 to the timeline", code, hdr.Get("Location"))
	}
	if code, _, _ := pageGet(t, srv.URL+"/history/incident?"+q.Encode()+"&format=json"); code != http.StatusNotFound {
		t.Errorf("no incident as JSON: %d, want 404", code)
	}
	// Grafana's ${__value.time}: Unix milliseconds.
	q.Set("at", strconv.FormatInt(l.Incidents[0].At.UnixMilli(), 10))
	q.Set("format", "json")
	if code, got, _ := pageGet(t, srv.URL+"/history/incident?"+q.Encode()); code != 200 || got != wantJSON {
		t.Errorf("at in Unix milliseconds: %d\n%s", code, got)
	}
	for _, bad := range []string{"/history?since=yesterday", "/history?since=" + since + "&until=" + since,
		"/history?since=30d", "/history/incident?rule=listen-overflow", "/history/incident?rule=x&at=never"} {
		if code, _, _ := pageGet(t, srv.URL+bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
	for _, bad := range []string{"../" + rec, rec, "timeline-x.jsonl.gz", ""} {
		if code, _, _ := pageGet(t, srv.URL+"/history/trace?name="+url.QueryEscape(bad)); code != http.StatusNotFound {
			t.Errorf("trace %q: %d, want 404", bad, code)
		}
	}
	resp, err := http.Post(srv.URL+"/history", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

// TestEvidencePagesEscape: a namespace named like markup reaches the
// pages escaped, its links encoded, and its incident is still found by
// its url.
func TestEvidencePagesEscape(t *testing.T) {
	const evil = `<script>alert("x")</script>'&`
	f, err := os.Open(overflowFixture)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "history")
	x := report.NewWindows(window.NewChain(rules.All()), rules.All(), diag.Options{})
	r := history.New(history.Options{Dir: dir, Tool: "tcpdoctor test"})
	for _, s := range snaps {
		s.Netns.Name = evil
		col := []*snapshot.Snapshot{s}
		rep := x.Report(col)
		r.Add(col, rep)
	}
	r.Close()
	srv := httptest.NewServer(serve.NewPages(serve.Options{History: history.Options{Dir: dir}, Now: time.Now, Logf: func(string, ...any) {}}))
	defer srv.Close()
	since := url.QueryEscape(snaps[0].Taken.Add(-time.Minute).UTC().Format(time.RFC3339))
	until := url.QueryEscape(snaps[len(snaps)-1].Taken.Add(time.Minute).UTC().Format(time.RFC3339))
	_, body, _ := pageGet(t, srv.URL+"/history?format=json&since="+since+"&until="+until)
	var l history.Listing
	if err := json.Unmarshal([]byte(body), &l); err != nil || len(l.Incidents) != 1 || l.Incidents[0].Subject.Netns != evil {
		t.Fatalf("%v: %s", err, body)
	}
	for _, u := range []string{srv.URL + "/history?since=" + since + "&until=" + until, l.Incidents[0].URL} {
		code, page, _ := pageGet(t, u)
		if code != 200 || strings.Contains(page, "<script>alert") || !strings.Contains(page, "&lt;script&gt;alert") {
			t.Errorf("%s: %d, markup not escaped:\n%.3000s", u, code, page)
		}
	}
	if code, got, _ := pageGet(t, l.Incidents[0].URL+"&format=json"); code != 200 || !strings.Contains(got, "listen-overflow") {
		t.Errorf("the incident of a namespace named %q by its url: %d %s", evil, code, got)
	}
}
