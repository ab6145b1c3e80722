// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/jsonl"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// storeFrom runs a recording's samples through the exporter and a
// history Recorder as serve's loop does, one collection per sample of
// each namespace, into a new store; it also writes them as `record`
// would, to the returned file.
func storeFrom(t *testing.T, fixture string) (dir, recorded string, snaps []*snapshot.Snapshot) {
	t.Helper()
	f, err := os.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err = snapshot.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "history")
	recorded = filepath.Join(t.TempDir(), "rec.jsonl")
	out, err := os.Create(recorded)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w, err := snapshot.NewWriter(out, "tcpdoctor test")
	if err != nil {
		t.Fatal(err)
	}
	x := report.NewWindows(window.NewChain(rules.All()), rules.All(), diag.Options{})
	r := history.New(history.Options{Dir: dir, Tool: "tcpdoctor test"})
	for _, s := range snaps {
		col := []*snapshot.Snapshot{s}
		rep := x.Report(col)
		r.Add(col, rep)
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	if r.Errors() != 0 {
		t.Fatalf("%d write errors", r.Errors())
	}
	return dir, recorded, snaps
}

// check --history DIR --at TIME prints byte for byte what check --from
// prints for the same samples recorded as `record` writes them, in
// every output form, and sockets --history --at what sockets --from
// prints; history lists the incident with the command that replays it.
func TestHistoryReplaysAsFrom(t *testing.T) {
	dir, rec, snaps := storeFrom(t, overflowFixture)
	from, to := snaps[0].Taken, snaps[len(snaps)-1].Taken
	mid := from.Add(to.Sub(from) / 2).Format(time.RFC3339Nano)
	for _, args := range [][]string{{"check"}, {"check", "--json"}, {"check", "-v"}, {"check", "--rule", "listen-overflow"},
		{"sockets"}, {"sockets", "--json"}} {
		wantCode, want, _ := run(t, append(args, "--from", rec)...)
		code, got, stderr := run(t, append(args, "--history", dir, "--at", mid)...)
		if code != wantCode || got != want {
			t.Errorf("%v: exit %d (want %d), stdout differs from --from's: %v\n%s\nwant\n%s\nstderr %s", args, code, wantCode, got != want, got, want, stderr)
		}
		if !strings.Contains(stderr, "replaying the window") {
			t.Errorf("%v: stderr %q does not say which window", args, stderr)
		}
	}
	if !strings.Contains(mustRun(t, 1, "check", "--from", rec), "listen-overflow") {
		t.Fatal("the fixture's finding is not in check's output")
	}

	since, until := from.Add(-time.Minute).Format(time.RFC3339), to.Add(time.Minute).Format(time.RFC3339)
	out := mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until, "--json")
	var l history.Listing
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Incidents) != 1 || l.Windows != 1 {
		t.Fatalf("%d incidents in %d windows: %s", len(l.Incidents), l.Windows, out)
	}
	in := l.Incidents[0]
	if in.Rule != "listen-overflow" || in.Subject.Local.String() != "0.0.0.0:8080" || in.Subject.Netns != "host" ||
		!in.Start.Equal(from) || !in.End.Equal(to) || in.Ongoing || l.Replay[0] == "" {
		t.Errorf("incident %+v, replay %q", in, l.Replay[0])
	}
	// The replay command it prints is the diagnosis.
	argv := strings.Fields(strings.TrimPrefix(l.Replay[0], "tcpdoctor "))
	_, want, _ := run(t, "check", "--from", rec)
	if code, got, _ := run(t, argv...); code != ExitFindings || got != want {
		t.Errorf("%q: exit %d, output differs from check --from's", l.Replay[0], code)
	}
	text := mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until)
	for _, s := range []string{"1 incident", "CRIT listen-overflow", "0.0.0.0:8080", "replay: " + l.Replay[0]} {
		if !strings.Contains(text, s) {
			t.Errorf("history's text lacks %q:\n%s", s, text)
		}
	}
	// One incident: no picture unless asked for.
	if strings.Contains(text, "findings over time") {
		t.Errorf("a picture for one incident without --picture:\n%s", text)
	}
	pic := mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until, "--picture")
	if !strings.Contains(pic, "findings over time") || !strings.Contains(pic, "|  listen-overflow 0.0.0.0:8080") ||
		!strings.Contains(pic, "C") {
		t.Errorf("history --picture:\n%s", pic)
	}
	page := filepath.Join(t.TempDir(), "history.html")
	mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until, "--html", page)
	if b, err := os.ReadFile(page); err != nil || !strings.Contains(string(b), `class="timeline"`) ||
		!strings.Contains(string(b), "--at "+in.At.UTC().Format(time.RFC3339Nano)) {
		t.Errorf("history --html: %v\n%.2000s", err, b)
	}
	if code, _, _ := run(t, "history", "--history", dir, "--html", filepath.Join(dir, "no", "such", "dir", "p.html")); code != ExitUsage {
		t.Errorf("--html into a missing directory: exit %d, want 2", code)
	}
	if out := mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until, "--rule", "port-exhaustion"); !strings.Contains(out, "0 incident") {
		t.Errorf("--rule port-exhaustion:\n%s", out)
	}
	if out := mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until, "--netns", "other"); !strings.Contains(out, "0 incident") {
		t.Errorf("--netns other:\n%s", out)
	}
}

// Without evidence for the time asked, check --at says what the store
// has: the nearest windows with evidence and their commands; exit 2.
func TestHistoryAtWithoutEvidence(t *testing.T) {
	dir, _, snaps := storeFrom(t, overflowFixture)
	to := snaps[len(snaps)-1].Taken
	code, out, stderr := run(t, "check", "--history", dir, "--at", to.Add(time.Hour).Format(time.RFC3339))
	if code != ExitUsage || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	for _, s := range []string{"no evidence kept", "the timeline has no window covering it", "nearest window with evidence before", "--at " + to.UTC().Format(time.RFC3339Nano)} {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr)
		}
	}
	for _, args := range [][]string{
		{"check", "--history", dir},
		{"check", "--at", "-30m"},
		{"check", "--history", dir, "--at", "yesterday"},
		{"check", "--history", dir, "--at", "-1m", "--from", "x"},
		{"check", "--history", filepath.Join(dir, "missing"), "--at", "-1m"},
		{"history"},
		{"history", "--history", dir, "--since", "soon"},
		{"history", "--history", dir, "--since", "1h", "--until", "2h"},
		{"serve", "--history", dir, "--history-size", "lots"},
		{"serve", "--history", dir, "--history-age", "-1h"},
		{"serve", "--history", dir, "--history-trace-duration", "0s"},
		{"serve", "--history", dir, "--history-trace-duration", "2m"},
		{"serve", "--history", dir, "--history-traces-per-hour", "-1"},
		{"serve", "--history", dir, "--history-trace-cooldown", "-1m"},
	} {
		if code, _, _ := run(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func mustRun(t *testing.T, wantCode int, args ...string) string {
	t.Helper()
	code, out, stderr := run(t, args...)
	if code != wantCode {
		t.Fatalf("%v: exit %d (want %d): %s", args, code, wantCode, stderr)
	}
	return out
}

// A trace serve started for a slow-reader warning (here a recording of
// one connection, as trace.Live would return it) is named by the
// incident in history's text and JSON with the command that shows it;
// that command renders it; history --html renders its page beside its
// own and links it. Without the file, history says it is not there.
func TestHistoryTriggeredTrace(t *testing.T) {
	f, err := os.Open("../rules/testdata/slow-reader/fires.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	recorded := traceFile(t)
	var asked []history.TraceRequest
	run1 := func(_ context.Context, req history.TraceRequest) (*trace.Trace, error) {
		asked = append(asked, req)
		return trace.ReadFile(recorded)
	}
	dir := filepath.Join(t.TempDir(), "history")
	x := report.NewWindows(window.NewChain(rules.All()), rules.All(), diag.Options{})
	r := history.New(history.Options{Dir: dir, Tool: "tcpdoctor test",
		Trace: &history.TraceOptions{Duration: time.Second, PerHour: 6, Cooldown: time.Hour, Rules: rules.All(), Run: run1}})
	for _, s := range snaps {
		col := []*snapshot.Snapshot{s}
		rep := x.Report(col)
		r.Add(col, rep)
	}
	r.Close()
	// The fixture's window also has an rwnd-limited warning (the
	// reader's peer), reported first: it gets the one trace.
	if r.Errors() != 0 || r.Traces() != 1 || len(asked) != 1 || asked[0].Rule != "rwnd-limited" {
		t.Fatalf("%d errors, %d traces, asked %+v", r.Errors(), r.Traces(), asked)
	}
	from, to := snaps[0].Taken, snaps[len(snaps)-1].Taken
	since, until := from.Add(-time.Minute).Format(time.RFC3339), to.Add(time.Minute).Format(time.RFC3339)
	var l history.Listing
	if err := json.Unmarshal([]byte(mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until, "--json")), &l); err != nil {
		t.Fatal(err)
	}
	k := slices.IndexFunc(l.Incidents, func(in history.Incident) bool { return in.Trace != "" })
	if k < 0 || l.Incidents[k].Rule != "rwnd-limited" || len(l.TraceReplay) != len(l.Incidents) ||
		!strings.HasPrefix(l.TraceReplay[k], "tcpdoctor trace --from "+filepath.Join(dir, l.Incidents[k].Trace)+" --html ") {
		t.Fatalf("listing %+v", l)
	}
	for i := range l.Incidents {
		if i != k && (l.TraceReplay[i] != "" || l.Incidents[i].Trace != "") {
			t.Errorf("incident %d has a trace: %+v %q", i, l.Incidents[i], l.TraceReplay[i])
		}
	}
	name := l.Incidents[k].Trace
	text := mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until)
	if !strings.Contains(text, "  trace: "+l.TraceReplay[k]+"\n") {
		t.Errorf("history's text lacks the trace command:\n%s", text)
	}
	// The command it prints works, and prints what trace --from prints
	// for the recording.
	work := t.TempDir()
	argv := strings.Fields(strings.TrimPrefix(l.TraceReplay[k], "tcpdoctor "))
	argv[len(argv)-1] = filepath.Join(work, argv[len(argv)-1])
	wantCode, want, _ := run(t, "trace", "--from", recorded)
	if code, got, stderr := run(t, argv...); code != wantCode || got != want || !strings.Contains(got, "198.18.1.2:40000") {
		t.Errorf("%v: exit %d (want %d), output differs from trace --from's: %s\n%s", argv, code, wantCode, stderr, got)
	}
	if st, err := os.Stat(argv[len(argv)-1]); err != nil || st.Size() < 50000 {
		t.Errorf("the trace's page: %v", err)
	}
	page := filepath.Join(work, "night.html")
	mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until, "--html", page)
	tracePage := "night-" + strings.TrimSuffix(name, ".jsonl.gz") + ".html"
	b, err := os.ReadFile(page)
	if err != nil || !strings.Contains(string(b), `<a class="trace" href="`+tracePage+`">`) {
		t.Errorf("history --html does not link %s: %v\n%.3000s", tracePage, err, b)
	}
	if tb, err := os.ReadFile(filepath.Join(work, tracePage)); err != nil || !strings.Contains(string(tb), "198.18.1.2:40000") {
		t.Errorf("the trace page beside it: %v", err)
	}
	// Evicted: history says so instead of a command.
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	text = mustRun(t, 0, "history", "--history", dir, "--since", since, "--until", until)
	if !strings.Contains(text, "  trace: "+name+" is not in the store") {
		t.Errorf("history without the trace file:\n%s", text)
	}
}

// storeWithLongIncident builds a store whose one incident runs for five
// windows of the fixture's length after the fixture's own window, with
// evidence kept only for the first (as serve keeps it at a start): the
// fixture's samples as the evidence file, the timeline written as serve
// writes it. It returns the store, the recording and the windows' ends.
func storeWithLongIncident(t *testing.T) (dir, rec string, ends []time.Time) {
	t.Helper()
	dir, rec, snaps := storeFrom(t, overflowFixture)
	st, err := history.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	es, err := st.Entries(time.Time{}, time.Time{})
	if err != nil || len(es) != 1 || es[0].Evidence == "" || len(es[0].Findings) == 0 {
		t.Fatalf("fixture store: %+v %v", es, err)
	}
	from, to := snaps[0].Taken, snaps[len(snaps)-1].Taken
	w := to.Sub(from)
	out := []history.Entry{es[0]}
	ends = []time.Time{to}
	for i := 1; i < 5; i++ {
		e := es[0]
		e.From, e.To, e.Evidence = to.Add(time.Duration(i-1)*w), to.Add(time.Duration(i)*w), ""
		out = append(out, e)
		ends = append(ends, e.To)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "timeline-*"))
	for _, s := range segs {
		os.Remove(s)
	}
	f, err := os.Create(filepath.Join(dir, "timeline-"+to.UTC().Format("20060102T150405.000000000Z")+".jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	enc := json.NewEncoder(gz)
	_ = enc.Encode(jsonl.Header{Format: history.FormatName, Version: history.FormatVersion})
	for i := range out {
		_ = enc.Encode(&out[i])
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return dir, rec, ends
}

// check --history --at a time inside an incident but outside the window
// kept for it replays the incident's nearest kept window, says which
// window it shows and the incident's span, and exits as check would.
func TestHistoryAtInsideIncident(t *testing.T) {
	dir, rec, ends := storeWithLongIncident(t)
	mid := ends[2].Add(-ends[1].Sub(ends[0]) / 2)
	wantCode, want, _ := run(t, "check", "--from", rec)
	code, got, stderr := run(t, "check", "--history", dir, "--at", mid.Format(time.RFC3339Nano))
	t.Logf("stderr:\n%s", stderr)
	if code != ExitFindings || code != wantCode || got != want {
		t.Errorf("exit %d (want %d), stdout as check --from's: %v\n%s\nstderr %s", code, wantCode, got == want, got, stderr)
	}
	for _, s := range []string{"replaying the window", "the nearest kept of the incident covering it", "the incident covering it: CRIT listen-overflow", "(5 windows)"} {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr)
		}
	}
	// --fail-on critical: the same exit code a live check gives.
	if code, _, _ := run(t, "check", "--history", dir, "--at", mid.Format(time.RFC3339Nano), "--fail-on", "critical"); code != ExitFindings {
		t.Errorf("--fail-on critical: exit %d", code)
	}
	// After the incident: no evidence, exit 2.
	if code, _, _ := run(t, "check", "--history", dir, "--at", ends[4].Add(time.Minute).Format(time.RFC3339Nano)); code != ExitUsage {
		t.Errorf("after the incident: exit %d, want 2", code)
	}
}

// history takes its directory as an argument too, and refuses a rule
// that does not exist as check does.
func TestHistoryDirArgAndRule(t *testing.T) {
	dir, _, _ := storeWithLongIncident(t)
	want := mustRun(t, 0, "history", "--history", dir, "--since", "7000d")
	if got := mustRun(t, 0, "history", dir, "--since", "7000d"); got != want || !strings.Contains(got, "1 incident") {
		t.Errorf("history DIR:\n%s\nwant\n%s", got, want)
	}
	code, out, stderr := run(t, "history", dir, "--rule", "no-such-rule")
	_, _, checkErr := run(t, "check", "--rule", "no-such-rule", "--from", "x")
	if code != ExitUsage || out != "" || !strings.Contains(stderr, `unknown rule "no-such-rule" (see tcpdoctor rules)`) || !strings.Contains(checkErr, `unknown rule "no-such-rule" (see tcpdoctor rules)`) {
		t.Errorf("--rule no-such-rule: exit %d, stdout %q, stderr %q (check: %q)", code, out, stderr, checkErr)
	}
	if code, _, _ := run(t, "history", dir, "--history", dir+"x"); code != ExitUsage {
		t.Errorf("two directories: exit %d", code)
	}
	if code, _, _ := run(t, "history", dir, "x"); code != ExitUsage {
		t.Errorf("two arguments: exit %d", code)
	}
}

// serve --history refuses, at once and with exit 2, a directory another
// serve holds, one other users may write, and a bound too small to hold
// an evidence file.
func TestServeHistoryRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "history")
	lock, err := history.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--history", dir}, "held by another tcpdoctor serve --history (pid " + strconv.Itoa(os.Getpid()) + ")"},
		{[]string{"--history", open}, "may be written by other users (mode 0777)"},
		{[]string{"--history", t.TempDir(), "--history-size", "1"}, "below the minimum, 1MiB"},
	} {
		done := make(chan struct{})
		var code int
		var stderr string
		go func() {
			code, _, stderr = run(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--bpf", "off", "--no-owners"}, c.args...)...)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: serve did not refuse (still running after 10 s)", c.args)
		}
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, stderr, c.want)
		}
	}
}

// history's DIR completes as a directory (cobra's FilterDirs, 16), and
// nothing after it.
func TestHistoryDirCompletes(t *testing.T) {
	if _, out, _ := run(t, "__complete", "history", ""); !strings.HasSuffix(strings.TrimSpace(out), ":16") {
		t.Errorf("history <TAB>: %q", out)
	}
	if _, out, _ := run(t, "__complete", "history", "dir", ""); !strings.HasSuffix(strings.TrimSpace(out), ":4") {
		t.Errorf("history DIR <TAB>: %q", out)
	}
}

// TestHistoryWrapsToWidth: at a terminal's width (here $COLUMNS) the
// incident's heading and summary wrap at spaces; the replay command
// stays whole; the words are the unwrapped listing's.
func TestHistoryWrapsToWidth(t *testing.T) {
	dir, _, _ := storeFrom(t, overflowFixture)
	flat := mustRun(t, 0, "history", dir, "--since", "7000d")
	var out, errb bytes.Buffer
	e := &Env{Stdout: &out, Stderr: &errb, Now: time.Now, ProcRoot: "/proc",
		Getenv: func(k string) string {
			if k == "COLUMNS" {
				return "80"
			}
			return ""
		}}
	if code := Main([]string{"history", dir, "--since", "7000d"}, e); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if n := utf8.RuneCountInString(l); n > 80 && !strings.HasPrefix(l, "  replay: ") && !strings.HasPrefix(l, "history ") {
			t.Errorf("line of %d: %q", n, l)
		}
	}
	if strings.Join(strings.Fields(out.String()), " ") != strings.Join(strings.Fields(flat), " ") || !strings.Contains(flat, "1 incident") {
		t.Errorf("the words differ from the unwrapped listing:\n%s\nwant\n%s", out.String(), flat)
	}
}
