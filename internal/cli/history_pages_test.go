// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/history"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testbrowser"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/tracetest"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

// TestTriggeredTracePageFits: a trace serve --history recorded for a
// warning (ten slow responses at serve's sampling rate, its header as
// serveTrace sets it), kept by the recorder, and the pages history --html
// writes for it: the history page and the trace's page beside it, each
// no wider than a 1280x900 window.
func TestTriggeredTracePageFits(t *testing.T) {
	f, err := os.Open("../rules/testdata/slow-reader/fires.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	run1 := func(_ context.Context, req history.TraceRequest) (*trace.Trace, error) {
		tr := tracetest.Responses(10, time.Second/traceDefaultRate)
		// As serveTrace leaves it: the finding's filter and rule, its
		// namespace, no eBPF events.
		tr.Header.Filter = trace.Describe(&req.Filter, 0) + " (" + req.Rule + ")"
		tr.Header.Netns = req.Subject.Netns
		tr.Header.NoEvents = "a trace serve --history started for " + req.Rule + ": eBPF events not recorded"
		return tr, nil
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
	if r.Errors() != 0 || r.Traces() != 1 {
		t.Fatalf("%d errors, %d traces, want one trace", r.Errors(), r.Traces())
	}
	from, to := snaps[0].Taken, snaps[len(snaps)-1].Taken
	work := t.TempDir()
	page := filepath.Join(work, "night.html")
	mustRun(t, 0, "history", "--history", dir, "--since", from.Add(-time.Minute).Format(time.RFC3339),
		"--until", to.Add(time.Minute).Format(time.RFC3339), "--html", page)
	traces, _ := filepath.Glob(filepath.Join(work, "night-trace-*.html"))
	if len(traces) != 1 {
		t.Fatalf("trace pages beside the history page: %q, want one", traces)
	}
	if b, err := os.ReadFile(traces[0]); err != nil || !strings.Contains(string(b), "198.18.1.2:40000") {
		t.Fatalf("the trace page: %v", err)
	}
	for _, p := range []string{page, traces[0]} {
		scroll, client := testbrowser.Width(t, p, 1280, 900, 5000)
		if scroll > client || client < 1200 {
			t.Errorf("%s: the document is %d px wide in a %d px viewport", filepath.Base(p), scroll, client)
		}
	}
	if os.Getenv("TRIGGERED_SCREENSHOT") != "" {
		_, img := testbrowser.Render(t, traces[0], 1280, 900, 5000)
		testbrowser.Save(t, "TRIGGERED_SCREENSHOT", img)
	}
}
