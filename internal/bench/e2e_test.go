// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/lab/topo"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testns"
)

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	if s := Summarize([]time.Duration{5 * ms, 1 * ms, 3 * ms}); s != (Stats{Median: 3 * ms, Min: ms, Max: 5 * ms, N: 3}) {
		t.Errorf("odd: %+v", s)
	}
	if s := Summarize([]time.Duration{4 * ms, 1 * ms}); s.Median != 4*ms || s.Min != ms {
		t.Errorf("even: %+v (want the upper middle)", s)
	}
	if s := Summarize(nil); s.N != 0 || s.Median != 0 {
		t.Errorf("empty: %+v", s)
	}
}

// runs makes one Run per wall time (ms), all with peak RSS rss MB.
func runs(rss float64, walls ...int) []Run {
	out := make([]Run, len(walls))
	for i, w := range walls {
		out[i] = Run{Wall: time.Duration(w) * time.Millisecond, PeakRSS: int64(rss * MB)}
	}
	return out
}

func row(name string, ours, theirs []Run) Row {
	for _, c := range Commands(5 * time.Second) {
		if c.Name == name {
			return Row{Command: c, Ours: ours, Theirs: theirs}
		}
	}
	panic(name)
}

func TestRatioAndAbove(t *testing.T) {
	r := row("sockets", runs(10, 100, 120, 110), runs(5, 450, 440, 900))
	if got := r.Ratio(); got < 4.08 || got > 4.1 { // 450 / 110
		t.Errorf("ratio %.3f, want 450/110", got)
	}
	if got := row("sockets", runs(10, 100), nil).Ratio(); got != 0 {
		t.Errorf("ratio without ss %v, want 0", got)
	}
	if got := row("check", runs(10, 1800, 1500, 1700), nil).Above(); got != 700*time.Millisecond {
		t.Errorf("above %v, want 700ms (median 1.7s - 1s interval)", got)
	}
}

func TestJudge(t *testing.T) {
	serve := row("serve", runs(300, 9000), nil)
	serve.Scrapes = []time.Duration{3 * time.Millisecond, 151 * time.Millisecond, 5 * time.Millisecond}
	failed := row("record", nil, nil)
	failed.Err = "killed at 7000 MB"
	sizes := []SizeResult{
		{Want: 20000, Rows: []Row{
			row("sockets", runs(40, 100), runs(10, 600)),  // 6.0x: met (at least)
			row("no-owners", runs(40, 100), runs(9, 590)), // 5.9x: missed
		}},
		{Want: 100000, Rows: []Row{
			row("sockets", runs(149.9, 1000), runs(10, 2000)),
			row("json", runs(150, 1000), runs(10, 2000)), // not under 150
			row("check", runs(249, 2000), nil),
			failed,
		}},
		{Want: 1000000, Rows: []Row{row("check", runs(299, 3999), nil), serve}},
		{Want: 50000, Rows: []Row{row("sockets", runs(1, 1), runs(1, 1))}},
	}
	got := map[string]string{}
	for _, v := range Judge(sizes, Targets()) {
		verdict := "missed"
		switch {
		case v.Missing:
			verdict = "missing"
		case v.Met:
			verdict = "met"
		}
		got[v.Text] = v.Figure + " " + verdict
	}
	want := map[string]string{
		"sockets >= 6x faster than ss -tinmp":            "6.00x met",
		"sockets --no-owners >= 6x faster than ss -tinm": "5.90x missed",
		"sockets --json >= 6x faster than ss -tinmp":     "not measured missing",
		"sockets peak RSS < 150 MB":                      "149.9 MB met",
		"sockets --json peak RSS < 150 MB":               "150.0 MB missed",
		"check peak RSS < 250 MB":                        "249.0 MB met",
		"record peak RSS < 250 MB":                       "failed (see its row) missed",
		"check < 3s above its interval":                  "2999ms met",
		"check peak RSS < 300 MB":                        "299.0 MB met",
		"serve slowest scrape < 150ms":                   "151ms missed",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d verdicts, want %d (none at 50000): %v", len(got), len(want), got)
	}
}

func TestWrite(t *testing.T) {
	serve := row("serve", runs(30, 2500), nil)
	serve.Scrapes = []time.Duration{2 * time.Millisecond}
	failed := row("json", nil, nil)
	failed.Err = "sockets --json: killed after 10m0s (--timeout)"
	ss := runs(29.8, 4000, 4200, 4400)
	ss[1].PeakRSS, ss[1].Floor = 31*MB, 31*MB // its figure is our own size: a bound
	res := &E2EResult{Netns: "tdlab-x-server", Kernel: "6.18", Runs: 3, Sizes: []SizeResult{{
		Want: 20000, Sockets: 20002, Conns: 10000, Holders: 2, Setup: 310 * time.Millisecond,
		Base: KernelMem{Slab: 100 * MB}, Kernel: KernelMem{Slab: 184 * MB, SUnreclaim: 58 * MB, TCPMem: 4096},
		LoadFrom: "1.00 0.50 0.20", LoadTo: "2.00 1.00 0.40", Files: 123456, Procs: 2070, IdleProcs: 2000,
		Rows: []Row{row("sockets", runs(97.2, 1000, 1100, 900), ss), failed, row("check", runs(103, 2912), nil), serve},
	}}}
	var b bytes.Buffer
	if err := res.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range [][]string{
		{"kernel 6.18"}, {"20002 = 10000 connections x 2 + 2 holder listeners"}, {"Slab +84.0 MB"},
		{"loadavg 1.00 0.50 0.20 before, 2.00 1.00 0.40 after; 123456 open files and 2070 processes on the host, 2000 of them the bench's idle ones (--procs)"},
		{"sockets ", "1000ms (900ms-1100ms)", "97.2 MB", "ss -tinmp", "4200ms (4000ms-4400ms)", "<=31.0 MB", "4.20x"},
		{"sockets --json ", "FAILED (below)"}, {"FAILED: sockets --json: killed after 10m0s (--timeout)"},
		{"check --interval 1s --json", "2912ms", "103.0 MB", "above interval", "1912ms"},
		{"serve --listen", "first window after 2500ms", "30.0 MB", "median 2ms, max 2ms (1)"},
		{"target at 20000: sockets >= 6x faster than ss -tinmp", "4.20x", "MISSED"},
		{"target at 20000: sockets --json >= 6x faster than ss -tinmp", "failed (see its row)", "MISSED"},
		{"target at 20000: sockets --no-owners >= 6x faster than ss -tinm", "not measured", "-"},
	} {
		if !hasLine(out, want...) {
			t.Errorf("no line with %q in order:\n%s", want, out)
		}
	}
}

// hasLine reports whether one line of out holds parts in this order.
func hasLine(out string, parts ...string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		rest, ok := line, true
		for _, p := range parts {
			_, after, found := strings.Cut(rest, p)
			if !found {
				ok = false
				break
			}
			rest = after
		}
		if ok {
			return true
		}
	}
	return false
}

// TestEndToEnd runs the end-to-end bench at 2,000 sockets with our own
// executable: every row completes and prints, and nothing is left behind.
func TestEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if testing.Short() {
		t.Skip("builds tcpdoctor-lab and tcpdoctor: not in -short")
	}
	self := testns.Lab(t)
	tcpdoctor := filepath.Join(filepath.Dir(self), "tcpdoctor")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := EndToEnd(ctx, E2EOptions{
		Sizes: []int{2000}, Runs: 1, Scrapes: 2, ScrapeEvery: 50 * time.Millisecond, ServeInterval: time.Second,
		Timeout: time.Minute, MaxRSS: 2 << 30, Exe: tcpdoctor, Parallel: 2, ProcRoot: "/proc",
		Self: Self{Hold: []string{self, "hold"}, Stderr: os.Stderr}, Phases: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sizes) != 1 || res.Sizes[0].Sockets < 2000 || res.Sizes[0].Conns != 1000 {
		t.Fatalf("sizes %+v: want one of 2000 sockets or more (1000 connections)", res.Sizes)
	}
	var b bytes.Buffer
	if err := res.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, r := range res.Sizes[0].Rows {
		if r.Err != "" || len(r.Ours) != 1 || r.Ours[0].Wall <= 0 || r.Ours[0].PeakRSS <= 0 {
			t.Errorf("row %s: %+v", r.Name, r)
		}
		if r.SS != nil && (len(r.Theirs) != 1 || r.Theirs[0].PeakRSS <= 0 || r.Ratio() <= 0) {
			t.Errorf("row %s: ss runs %+v", r.Name, r.Theirs)
		}
		if r.Serve && len(r.Scrapes) != 2 {
			t.Errorf("serve: %d scrapes, want 2", len(r.Scrapes))
		}
		if !strings.Contains(out, strings.Join(r.Args, " ")) {
			t.Errorf("output lacks row %s:\n%s", r.Name, out)
		}
	}
	// Every row but those run only when named (kernel-owners).
	want := 0
	for _, c := range Commands(time.Second) {
		if !c.Named {
			want++
		}
	}
	if len(res.Sizes[0].Rows) != want || strings.Contains(out, "sockets --bpf on") {
		t.Errorf("%d rows, want %d, kernel-owners not among them", len(res.Sizes[0].Rows), want)
	}
	// --phases: the collection library timed in parts in this process.
	lib := res.Sizes[0].Library
	if len(lib) != 1 || lib[0].Phases == nil || len(lib[0].Phases.File.Spans) == 0 || lib[0].Wall <= 0 {
		t.Errorf("library runs %+v: want one, timed in parts", lib)
	}
	b.Reset()
	if err := res.WritePhases(&b, 0); err != nil || !strings.Contains(b.String(), "where the collection library spent its") {
		t.Errorf("phases table %v:\n%s", err, b.String())
	}
	t.Log("\n" + out + b.String())
	left, err := topo.List(topo.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(left, res.Netns) {
		t.Errorf("namespace %q left behind", res.Netns)
	}
}
