// SPDX-License-Identifier: Apache-2.0

package history

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testbrowser"
)

// pageListing is pictureTimeline's listing, with a store name and a
// summary that try to inject markup.
func pageListing() (*Listing, *Picture) {
	es := pictureTimeline()
	es[3].Findings[0].Summary = `<script>alert("s")</script>`
	f := Filter{Min: diag.Warning}
	from, to := at("a", 0).Taken, at("a", 180).Taken
	dir := `/var/lib/<b>td</b>`
	l := &Listing{Dir: dir, Since: from, Until: to, Windows: len(es), First: from, Last: to,
		Incidents: Incidents(es, f, to), Notes: []string{"segment x: torn & skipped"}}
	for _, in := range l.Incidents {
		cmd := ""
		if in.Evidence != "" {
			cmd = ReplayCommand(dir, in.At)
		}
		l.Replay = append(l.Replay, cmd)
	}
	p := MakePicture(es, f, from, to, 12)
	return l, &p
}

func TestHTMLContent(t *testing.T) {
	l, p := pageListing()
	var b bytes.Buffer
	if err := WriteHTML(&b, l, p, time.UTC); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script>alert", "<b>td", "\x1b", "<script src", "<link ", "http://", "https://"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	for _, want := range []string{
		"&lt;script&gt;alert(&#34;s&#34;)&lt;/script&gt;", // the summary, escaped
		"tcpdoctor check --history &#39;/var/lib/&lt;b&gt;td&lt;/b&gt;&#39; --at " + at("a", 60).Taken.UTC().Format(time.RFC3339Nano),
		"torn &amp; skipped", "no evidence kept", `class="sev-critical"`, `data-cells=".WWC....  W."`,
		`data-cells="..WW        "`, "one column per 15s",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Runs of equal cells are one rect each: ".WWC....  W." is 7 runs,
	// "..WW        " 3.
	if n := strings.Count(page, "<rect "); n != 10 {
		t.Errorf("%d rects, want 10", n)
	}
	// a's warning that turned critical, a's later warning, b's.
	if n := strings.Count(page, `<tr class="inc"><td class="t">2023-`); n != 3 {
		t.Errorf("%d incident rows, want 3", n)
	}
}

// TestHTMLInChromium renders the page in headless chromium (as trace's
// page test does: no sandbox as root, /tmp for shared memory): no script
// errors, every strip laid out with coloured runs, a screenshot that is
// not blank.
func TestHTMLInChromium(t *testing.T) {
	l, p := pageListing()
	dir := t.TempDir()
	page := filepath.Join(dir, "history.html")
	var b bytes.Buffer
	if err := WriteHTML(&b, l, p, time.UTC); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, img := testbrowser.Render(t, page, 1400, 900, 3000)
	if m := regexp.MustCompile(`(?s)<pre id="errors">(.*?)</pre>`).FindStringSubmatch(dom); m == nil || strings.TrimSpace(m[1]) != "" {
		t.Errorf("script errors: %q", m)
	}
	if m := regexp.MustCompile(`data-rendered="(\d+)"`).FindStringSubmatch(dom); m == nil || m[1] != "2" {
		t.Errorf("strips laid out: %v, want 2", m)
	}
	// The chart's colours are on screen: critical red and warning orange.
	var red, orange int
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			switch [3]uint32{r >> 8, g >> 8, b >> 8} {
			case [3]uint32{0xd6, 0x27, 0x28}:
				red++
			case [3]uint32{0xff, 0x9f, 0x1c}:
				orange++
			}
		}
	}
	if red < 40 || orange < 100 {
		t.Errorf("screenshot lacks the chart: %d critical and %d warning pixels", red, orange)
	}
	testbrowser.Save(t, "HISTORY_SCREENSHOT", img)
}

// busyListing is 30 seconds of one-second windows in a store under a
// long path: three subjects named by long pod and container names, with
// warnings and a critical, each incident with its replay and trace
// commands, as history --html draws 240 buckets.
func busyListing() (*Listing, *Picture) {
	base := time.Date(2026, 12, 6, 23, 29, 0, 0, time.UTC)
	subj := func(i int) diag.Subject {
		return diag.Subject{Netns: "cni-4f1c2a9e-7b3d-4c55-9a1e-0d2f6b8c9e01", Local: diag.MustParseAddress("10.244.1.17:8080"), Remote: diag.MustParseAddress(fmt.Sprintf("10.244.2.31:%d", 51000+i)),
			Workload: &snapshot.Workload{Pod: "checkout-service-7d9f8b6c5d-x2k4q", PodNamespace: "shop-production", Container: "checkout-api-server"}}
	}
	rules := []string{"rwnd-limited", "retransmissions", "sndbuf-limited"}
	var es []Entry
	for s := 0; s < 30; s++ {
		e := Entry{Netns: "cni-4f1c2a9e-7b3d-4c55-9a1e-0d2f6b8c9e01", From: base.Add(time.Duration(s) * time.Second), To: base.Add(time.Duration(s+1) * time.Second)}
		for i, r := range rules {
			if (s+3*i)%11 < 6 {
				sev := diag.Warning
				if i == 1 && s > 20 {
					sev = diag.Critical
				}
				e.Findings = append(e.Findings, Finding{Rule: r, Severity: sev, Subject: subj(i),
					Summary: "the peer's receive window held 3.2M transfers for 549ms (90%) of 610ms: the receiver 10.244.2.31 reads slowly or pins its buffer"})
			}
		}
		if len(e.Findings) > 0 {
			e.Evidence = fmt.Sprintf("evidence-%d.json.gz", s)
		}
		es = append(es, e)
	}
	dir := "/var/lib/tcpdoctor/history-of-the-checkout-service"
	from, to := es[0].From, es[len(es)-1].To
	l := &Listing{Dir: dir, Since: from, Until: to, Windows: len(es), First: from, Last: to,
		Incidents: Incidents(es, Filter{Min: diag.Warning}, to)}
	for i, in := range l.Incidents {
		l.Replay = append(l.Replay, ReplayCommand(dir, in.At))
		name := fmt.Sprintf("trace-20261206T2329%02d-%d.jsonl.gz", i, i)
		l.TraceReplay = append(l.TraceReplay, TraceCommand(dir, name, TracePage(name)))
		l.TraceNote = append(l.TraceNote, "")
		l.TracePages = append(l.TracePages, "history-"+TracePage(name))
	}
	p := MakePicture(es, Filter{Min: diag.Warning}, from, to, 240)
	return l, &p
}

// TestHTMLFits: the page of a busy 30-second store is no wider than a
// 1280x900 window; its time ticks say seconds, each a different one.
func TestHTMLFits(t *testing.T) {
	l, p := busyListing()
	if len(l.Incidents) < 3 {
		t.Fatalf("%d incidents, want several", len(l.Incidents))
	}
	page := filepath.Join(t.TempDir(), "history.html")
	var b bytes.Buffer
	if err := WriteHTML(&b, l, p, time.UTC); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ticks := regexp.MustCompile(`<span class="tick">([^<]*)</span>`).FindAllStringSubmatch(b.String(), -1)
	seen := map[string]bool{}
	for _, tk := range ticks {
		seen[tk[1]] = true
		if !regexp.MustCompile(`^23:29:\d\d$`).MatchString(tk[1]) {
			t.Errorf("tick %q, want hh:mm:ss for a 30 s span", tk[1])
		}
	}
	if len(ticks) < 3 || len(seen) != len(ticks) {
		t.Errorf("ticks %q: want several, all different", ticks)
	}
	scroll, client := testbrowser.Width(t, page, 1280, 900, 3000)
	if scroll > client || client < 1200 {
		t.Errorf("the document is %d px wide in a %d px viewport", scroll, client)
	}
	// A phone: nothing to scroll sideways either.
	if scroll, client := testbrowser.Width(t, page, 390, 844, 3000); scroll > client || client < 350 {
		t.Errorf("on a phone the document is %d px wide in a %d px viewport", scroll, client)
	}
	if os.Getenv("HISTORY_FIT_SCREENSHOT") != "" {
		_, img := testbrowser.Render(t, page, 1280, 900, 3000)
		testbrowser.Save(t, "HISTORY_FIT_SCREENSHOT", img)
	}
}

func TestTickLayout(t *testing.T) {
	base := time.Date(2026, 12, 6, 23, 29, 0, 0, time.UTC)
	for _, c := range []struct {
		span time.Duration
		want string
	}{
		{2 * time.Second, "15:04:05.000"}, {30 * time.Second, "15:04:05"}, {10 * time.Minute, "15:04:05"},
		{20 * time.Minute, "15:04"}, {40 * time.Minute, "01-02 15:04"}, // crosses midnight
		{3 * time.Hour, "01-02 15:04"},
	} {
		if got := tickLayout(base, base.Add(c.span)); got != c.want {
			t.Errorf("span %v: %q, want %q", c.span, got, c.want)
		}
	}
	if got := tickLayout(base.Add(-time.Hour), base); got != "15:04" {
		t.Errorf("an hour within a day: %q", got)
	}
}

// TestIncidentPageFits: serve's page of one incident, with check's text of
// a critical finding whose evidence lines run long, fits 1280 px.
func TestIncidentPageFits(t *testing.T) {
	l, _ := busyListing()
	report, err := os.ReadFile("../cli/testdata/check-listen-overflow.txt")
	if err != nil {
		t.Fatal(err)
	}
	p := &IncidentPage{Incident: l.Incidents[0], From: l.Incidents[0].Start, To: l.Incidents[0].End,
		Report: string(report) + strings.Repeat("x", 400), TraceHref: "trace?name=a", JSONHref: "?format=json", TimelineHref: "../history"}
	var b bytes.Buffer
	if err := WriteIncidentHTML(&b, p, time.UTC); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(t.TempDir(), "incident.html")
	if err := os.WriteFile(page, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	scroll, client := testbrowser.Width(t, page, 1280, 900, 3000)
	if scroll > client || client < 1200 {
		t.Errorf("the incident page is %d px wide in a %d px viewport", scroll, client)
	}
	// The report itself wraps: its box scrolls no line sideways.
	if !strings.Contains(incidentHTML, "white-space: pre-wrap") {
		t.Errorf("the report's box does not wrap its lines")
	}
	if os.Getenv("INCIDENT_SCREENSHOT") != "" {
		_, img := testbrowser.Render(t, page, 1280, 900, 3000)
		testbrowser.Save(t, "INCIDENT_SCREENSHOT", img)
	}
}
