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

func TestTraceAccuracy(t *testing.T) {
	tr := func(ms ...int) []trace.Transfer {
		var out []trace.Transfer
		for _, m := range ms {
			out = append(out, trace.Transfer{Dur: time.Duration(m) * time.Millisecond, Bytes: 3_400_090})
		}
		return out
	}
	want := []measured{{700, 3_400_000}, {610, 3_400_000}, {612, 3_400_000}, {640, 3_400_000}}
	// The first response was not traced: the rest line up after it.
	if s, ok := traceAccuracy(tr(606, 615, 645), want); !ok || !strings.Contains(s, "worst 5.0 ms") {
		t.Errorf("%s %v", s, ok)
	}
	// The server answered the last one 35 ms after its request: the
	// client's 640 ms holds that wait and trace's 605 ms transfer not.
	waited := tr(606, 615, 605)
	waited[2].RequestWait = 35 * time.Millisecond
	if s, ok := traceAccuracy(waited, want); !ok {
		t.Errorf("%s: the server's wait not counted", s)
	}
	// 700 against 640: off by more than 5 % and one sample.
	if s, ok := traceAccuracy(tr(610, 612, 700), want[1:]); ok {
		t.Errorf("%s: want not within", s)
	}
	// Bytes off by 10 %.
	short := tr(610)
	short[0].Bytes = 3_060_000
	if s, ok := traceAccuracy(short, want[1:2]); ok {
		t.Errorf("%s: want not within", s)
	}
	// A late sample: the first response lent 10 % of its bytes to the
	// second, both marked uncertain; they keep their places in the
	// line-up, are not compared, and are counted apart.
	lent := tr(700, 560, 670, 645)
	lent[1].Bytes, lent[2].Bytes = 3_740_000, 3_060_000
	lent[1].Uncertain, lent[2].Uncertain = true, true
	if s, ok := traceAccuracy(lent, want); !ok || !strings.Contains(s, "4 traced (2 uncertain, not compared), worst 5.0 ms") {
		t.Errorf("%s %v", s, ok)
	}
	lent[1].Uncertain = false
	if s, ok := traceAccuracy(lent, want); ok {
		t.Errorf("%s: an unmarked wrong one, want not within", s)
	}
	if s, ok := traceAccuracy(lent[1:3:3], want[1:3]); ok || !strings.Contains(s, "1 uncertain") {
		t.Errorf("%s %v", s, ok)
	}
	for i := range lent {
		lent[i].Uncertain = true
	}
	if s, ok := traceAccuracy(lent, want); ok {
		t.Errorf("%s: nothing compared, want not within", s)
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
