// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

// authGet GETs url with basic auth user:pass (none when user is "") and
// returns the status and body.
func authGet(t *testing.T, url, user, pass string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// TestServeEvidencePages: serve --history behind a web configuration
// with basic auth watches a namespace where a stock server
// (python3 -m http.server, backlog 5) is frozen for an 8 s burst of
// connects. Afterwards /history?format=json lists the listen-overflow
// incident with a url whose ?format=json page is check --json of its
// window holding that finding, as check --from prints it of the kept
// file; the HTML pages show it with names escaped; without the password
// every page answers 401.
func TestServeEvidencePages(t *testing.T) {
	testns.NeedRoot(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed (Debian package python3)")
	}
	ns := testns.New(t, "evid")
	const port = 8000
	srv := exec.Command("ip", "netns", "exec", ns.Name, py, "-u", "-c",
		"import http.server as h,sys\ns=h.HTTPServer(('127.0.0.1',8000),h.SimpleHTTPRequestHandler)\nprint('ready',flush=True)\nsys.stdin.close()\ns.serve_forever()")
	srv.Dir = t.TempDir()
	if line, err := testns.Child(t, srv); err != nil || line != "ready" {
		t.Fatalf("python3 http.server: %q %v", line, err)
	}
	const user, pass = "prom", "s3cret-Evidence"
	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("basic_auth_users:\n  %s: %s\n", user, hash)), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "history")
	const interval = time.Second
	_, metrics, stderr := serveChild(t, "--netns", ns.Name, "--interval", interval.String(), "--history", dir, "--web.config.file", cfg)
	base := strings.TrimSuffix(metrics, "/metrics")
	time.Sleep(3 * interval)

	t0 := time.Now()
	_ = srv.Process.Signal(syscall.SIGSTOP)
	closeAll := connectBurst(t, ns, port, 8*time.Second)
	t1 := time.Now()
	closeAll()
	_ = srv.Process.Signal(syscall.SIGCONT)
	time.Sleep(4 * interval)

	list := base + "/history?format=json&since=" + t0.Add(-time.Minute).UTC().Format(time.RFC3339)
	code, body := authGet(t, list, user, pass)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s\nserve:\n%s", list, code, body, stderr.String())
	}
	var l history.Listing
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("%v:\n%s", err, body)
	}
	var in *history.Incident
	for i := range l.Incidents {
		if l.Incidents[i].Rule == "listen-overflow" {
			if in != nil {
				t.Fatalf("two listen-overflow incidents:\n%s", body)
			}
			in = &l.Incidents[i]
		}
	}
	t.Logf("burst %s .. %s; /history: %s", t0.Format("15:04:05.000"), t1.Format("15:04:05.000"), body)
	if in == nil || in.URL == "" || in.Evidence == "" {
		t.Fatalf("no listen-overflow incident with a url and evidence:\n%s\nserve:\n%s", body, stderr.String())
	}
	if in.Severity != diag.Critical || in.Subject.Local.String() != "127.0.0.1:8000" {
		t.Errorf("incident %s %+v, want critical on 127.0.0.1:8000", in.Severity, in.Subject)
	}
	if !strings.HasPrefix(in.URL, base+"/history/incident?") {
		t.Errorf("url %s, want it on %s", in.URL, base)
	}
	code, page := authGet(t, in.URL+"&format=json", user, pass)
	if code != http.StatusOK {
		t.Fatalf("GET %s&format=json: %d %s", in.URL, code, page)
	}
	var rep struct {
		Findings []diag.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(page), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, page)
	}
	found := false
	for _, f := range rep.Findings {
		if f.Rule == "listen-overflow" && f.Severity == diag.Critical && f.Subject.Local.String() == "127.0.0.1:8000" {
			found = true
		}
	}
	if !found {
		t.Errorf("the incident's JSON page lacks the critical listen-overflow finding:\n%s", page)
	}
	// The same report check --json --from prints of the kept window
	// (the build line aside: the test binary's).
	_, want, _ := run(t, "check", "--json", "--from", filepath.Join(dir, in.Evidence))
	var wantRep struct {
		Findings []diag.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(want), &wantRep); err != nil {
		t.Fatal(err)
	}
	gotF, _ := json.Marshal(rep.Findings)
	wantF, _ := json.Marshal(wantRep.Findings)
	if string(gotF) != string(wantF) {
		t.Errorf("page findings differ from check --from's:\n%s\nwant\n%s", gotF, wantF)
	}
	// The HTML pages: the timeline links the incident's page, which
	// prints check's text.
	code, html := authGet(t, base+"/history?since="+t0.Add(-time.Minute).UTC().Format(time.RFC3339), user, pass)
	if code != http.StatusOK || !strings.Contains(html, "/history/incident?") {
		t.Errorf("timeline page: %d, no incident link:\n%s", code, html)
	}
	code, html = authGet(t, in.URL, user, pass)
	if code != http.StatusOK || !strings.Contains(html, "listen-overflow") || !strings.Contains(html, "127.0.0.1:8000") {
		t.Errorf("incident page: %d:\n%s", code, html)
	}
	// An alert's time in the burst's middle finds the same incident.
	mid := t0.Add(t1.Sub(t0) / 2).UTC().Format(time.RFC3339Nano)
	code, page = authGet(t, base+"/history/incident?rule=listen-overflow&format=json&netns="+ns.Name+"&at="+mid, user, pass)
	if code != http.StatusOK || !strings.Contains(page, "listen-overflow") {
		t.Errorf("incident at the burst's middle: %d %s", code, page)
	}
	// ... and holds what check --history --at the middle prints.
	atCode, atOut, _ := run(t, "check", "--json", "--history", dir, "--at", mid)
	var atRep struct {
		Findings []diag.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(atOut), &atRep); err != nil || atCode != ExitFindings {
		t.Fatalf("check --history --at %s: exit %d %v", mid, atCode, err)
	}
	var midRep struct {
		Findings []diag.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(page), &midRep); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(midRep.Findings)
	b, _ := json.Marshal(atRep.Findings)
	if string(a) != string(b) {
		t.Errorf("the page at the burst's middle differs from check --history --at it:\n%s\nwant\n%s", a, b)
	}
	for _, u := range []string{list, in.URL, in.URL + "&format=json", base + "/history", metrics} {
		if code, _ := authGet(t, u, "", ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the password: %d, want 401", u, code)
		}
		if code, _ := authGet(t, u, user, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong password: %d, want 401", u, code)
		}
	}
}
