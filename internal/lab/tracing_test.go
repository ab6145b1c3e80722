// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testbrowser"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/tracetest"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
)

// TestTraceAccuracy: the client's responses, back to back on its wall
// clock, and the server's traced ones a one-way delay (15 ms) later,
// matched by time.
func TestTraceAccuracy(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	var want []measured
	at := 0
	for _, d := range []int{700, 610, 612, 640} {
		want = append(want, measured{ms: float64(d), bytes: 3_400_000, from: ms(at), to: ms(at + d), timed: true})
		at += d
	}
	// tr: the server's responses to want[from:], each d ms long.
	tr := func(from int, ds ...int) []trace.Transfer {
		var out []trace.Transfer
		for i, d := range ds {
			out = append(out, trace.Transfer{Dir: trace.Send, Start: want[from+i].from + ms(15), Dur: ms(d), Bytes: 3_400_090})
		}
		return out
	}
	// The first response was not traced: the rest are matched by time.
	if s, ok := traceAccuracy(tr(1, 606, 615, 645), want); !ok || !strings.HasPrefix(s, "3 traced, worst 5.0 ms, bytes 0.00% (within") {
		t.Errorf("%s %v", s, ok)
	}
	// The server answered the last one 35 ms after its request: the
	// client's 640 ms holds that wait and trace's 605 ms transfer not.
	waited := tr(1, 606, 615, 605)
	waited[2].Start += ms(35)
	waited[2].RequestWait = ms(35)
	if s, ok := traceAccuracy(waited, want); !ok {
		t.Errorf("%s: the server's wait not counted", s)
	}
	// 700 against 640: off by more than 5 % and one sample.
	if s, ok := traceAccuracy(tr(1, 610, 612, 700), want); ok {
		t.Errorf("%s: want not within", s)
	}
	// Bytes off by 10 %.
	short := tr(1, 610)
	short[0].Bytes = 3_060_000
	if s, ok := traceAccuracy(short, want); ok {
		t.Errorf("%s: want not within", s)
	}
	// The trace joined the first 10 % of the third response to the
	// second: matched by the time they overlap most, the second shows
	// the bytes it took, where a line-up by duration would not.
	merged := tr(1, 671, 551, 645)
	merged[0].Bytes, merged[1].Bytes = 3_740_000, 3_060_000
	merged[1].Start += ms(61)
	if s, ok := traceAccuracy(merged, want); ok || !strings.Contains(s, "bytes 10.00%") {
		t.Errorf("%s: an unmarked merge, want not within", s)
	}
	// Marked uncertain, both are counted apart and not compared.
	merged[0].Uncertain, merged[1].Uncertain = true, true
	if s, ok := traceAccuracy(merged, want); !ok || !strings.HasPrefix(s, "3 traced (2 uncertain, not compared), worst 5.0 ms") {
		t.Errorf("%s %v", s, ok)
	}
	if s, ok := traceAccuracy(merged[:2], want); ok || !strings.Contains(s, "2 uncertain") {
		t.Errorf("%s %v: nothing compared, want not within", s, ok)
	}
	// A writer that paused in the second response: two transfers, one
	// response, compared together.
	split := tr(1, 606, 615, 645)
	tail := split[0]
	split[0].Dur, split[0].Bytes = ms(400), 3_000_000
	tail.Start, tail.Dur, tail.Bytes = tail.Start+ms(500), ms(106), 400_090
	if s, ok := traceAccuracy(append(split, tail), want); !ok || !strings.HasPrefix(s, "3 traced, worst 5.0 ms") {
		t.Errorf("a paused tail: %s %v", s, ok)
	}
	// Clipped (under way when the recorder found it): not traced.
	clipped := tr(0, 500, 615)
	clipped[0].Clipped = true
	if s, ok := traceAccuracy(clipped, want); !ok || !strings.HasPrefix(s, "1 traced,") {
		t.Errorf("clipped: %s %v", s, ok)
	}
	// The client's own trace: its edges are the client's, 3 ms off here.
	recv := []trace.Transfer{{Dir: trace.Recv, Start: want[2].from + ms(3), Dur: ms(612), Bytes: 3_400_000}}
	if s, ok := traceAccuracy(recv, want); !ok || !strings.HasPrefix(s, "1 traced, worst 0.0 ms, edges 3.0 ms,") {
		t.Errorf("receiving: %s %v", s, ok)
	}
	// Untimed (a generator that gives durations only): in order.
	if s, ok := traceAccuracy(tr(0, 704), []measured{{ms: 700, bytes: 3_400_000}}); !ok || !strings.HasPrefix(s, "1 traced, worst 4.0 ms") {
		t.Errorf("untimed: %s %v", s, ok)
	}
	if s, ok := traceAccuracy(nil, want); ok || s != "-" {
		t.Errorf("nothing traced: %s %v", s, ok)
	}
}

// TestWriteLabHTML: lab run --html DIR writes its files mode 0600 and not
// through a symlink planted in DIR.
func TestWriteLabHTML(t *testing.T) {
	dir := t.TempDir()
	tr := &trace.Trace{Header: trace.Header{Trace: trace.Version, Interval: labTraceInterval}}
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "run.html")); err != nil {
		t.Fatal(err)
	}
	if err := writeLabHTML(dir, "run", tr, 0); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("through a symlink: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me\n" {
		t.Errorf("victim changed: %.60q", b)
	}
	if err := writeLabHTML(dir, "ok", tr, 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ok.jsonl", "ok.html"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", name, err)
		}
	}
}

// TestOfLocal: a transfer of an earlier connection to the same port (the
// last run's, still closing) is not taken for the client's own.
func TestOfLocal(t *testing.T) {
	old := trace.Transfer{Local: netip.MustParseAddrPort("198.18.1.2:40000"), Bytes: 1}
	own := trace.Transfer{Local: netip.MustParseAddrPort("198.18.1.2:40001"), Bytes: 2}
	ts := []trace.Transfer{old, own}
	if got := ofLocal(ts, "198.18.1.2:40001"); len(got) != 1 || got[0].Bytes != 2 {
		t.Errorf("ofLocal kept %+v, want the client's own transfer only", got)
	}
	if got := ofLocal(ts, ""); len(got) != 2 {
		t.Errorf("without the client's address: %d transfers kept, want all", len(got))
	}
}

// TestLabHTMLFits: the page lab run --html writes for ten slow responses
// is no wider than a 1280x900 window, says the connection's verdict once
// (not ten times above the plots), starts its plots in the first screen
// and does not repeat its table.
func TestLabHTMLFits(t *testing.T) {
	dir := t.TempDir()
	if err := writeLabHTML(dir, "c5-small-rcvbuf-4k", tracetest.Responses(10, labTraceInterval), 1e9); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "c5-small-rcvbuf-4k.html")
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "waiting for the peer&#39;s receive window"); n != 1 {
		t.Errorf("the verdict is said %d times, want once", n)
	}
	if n := strings.Count(string(b), `<table class="transfers">`); n != 1 {
		t.Errorf("%d tables of transfers, want 1", n)
	}
	scroll, client := testbrowser.Width(t, page, 1280, 900, 5000)
	if scroll > client || client < 1200 {
		t.Errorf("the document is %d px wide in a %d px viewport", scroll, client)
	}
	dom, img := testbrowser.Render(t, page, 1280, 900, 5000)
	m := regexp.MustCompile(`data-first-plot-top="(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no plot drawn")
	}
	if top, _ := strconv.Atoi(m[1]); top > 900-200 {
		t.Errorf("the first plot starts at %d px: below the fold of a 900 px window", top)
	}
	testbrowser.Save(t, "LAB_SCREENSHOT", img)
}
