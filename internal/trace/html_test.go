// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
	"github.com/tcpdoctor/tcpdoctor/internal/testkit/testbrowser"
)

// pageTrace is a trace of two connections with a few transfers each.
func pageTrace() (*Trace, []Transfer) {
	a := series([][6]int64{
		{0, 0, 100, 0, 0, 0}, {10, 10000, 100, 4000, 0, 5000}, {20, 30000, 100, 14000, 5000, 5000},
		{30, 50000, 100, 24000, 5000, 5000}, {40, 60000, 100, 27000, 5000, 0}, {50, 60000, 600, 27000, 5000, 0},
		{60, 70000, 600, 37000, 5000, 1000}, {70, 80000, 600, 42000, 5000, 0}, {80, 80000, 600, 42000, 5000, 0},
	})
	b := series([][6]int64{
		{0, 0, 0, 0, 0, 0}, {10, 10000, 0, 10000, 8000, 9000}, {20, 20000, 0, 20000, 16000, 9000},
		{30, 30000, 0, 30000, 24000, 9000}, {40, 40000, 0, 40000, 32000, 0}, {50, 40000, 0, 40000, 32000, 0},
	})
	b.ID = 2
	for i := range b.Points {
		b.Points[i].Conn = 2
		b.Points[i].SndWnd = 16384
		b.Points[i].Rate = 1e6
		b.Points[i].Unacked = 8
	}
	tr := trace1(a, b)
	tr.Header.Started = time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	tr.Header.Events = true
	tr.Conns[0].Events = []Event{{T: 25 * time.Millisecond, Conn: 1, Kind: EvRetransmit}}
	tr.Conns[1].Events = []Event{{T: 15 * time.Millisecond, Conn: 2, Kind: EvRetransmit}, {T: 45 * time.Millisecond, Conn: 2, Kind: EvResetSent, Reason: "TCP_ABORT_ON_CLOSE"}}
	ts := Segment(tr, SegmentOptions{})
	Judge(tr, ts, JudgeOptions{Bandwidth: 100e6})
	return tr, ts
}

func TestHTMLSelfContained(t *testing.T) {
	tr, ts := pageTrace()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, tr, ts, "test"); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, bad := range []string{"<script src", "<link ", "http://", "https://cdn"} {
		if strings.Contains(page, bad) {
			t.Errorf("page refers outside itself: %q", bad)
		}
	}
	for _, want := range []string{"uPlot", "waiting for the peer&#39;s receive window", `id="conn2"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// TestHTMLInChromium renders the page in headless chromium: no script
// errors, every plot drawn with data and its event markers, a screenshot
// that is not blank. CI installs chromium (.ci/run) and runs as root, so
// the browser runs without its sandbox (--no-sandbox; it refuses root
// otherwise) and with /tmp for shared memory (a container's /dev/shm is
// small).
func TestHTMLInChromium(t *testing.T) {
	tr, ts := pageTrace()
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(f, tr, ts, "chromium test"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dom, img := testbrowser.Render(t, page, 1280, 2400, 5000)
	if m := regexp.MustCompile(`(?s)<pre id="errors">(.*?)</pre>`).FindStringSubmatch(dom); m == nil || strings.TrimSpace(m[1]) != "" {
		t.Errorf("script errors: %q", m)
	}
	m := regexp.MustCompile(`data-rendered="(\d+)"`).FindStringSubmatch(dom)
	if m == nil || m[1] != strconv.Itoa(7*2) {
		t.Fatalf("plots rendered: %v, want 14 (7 per connection)", m)
	}
	points := regexp.MustCompile(`class="plot" data-points="(\d+)"`).FindAllStringSubmatch(dom, -1)
	if len(points) != 14 {
		t.Errorf("%d plots carry a point count, want 14", len(points))
	}
	for _, p := range points {
		if p[1] == "0" {
			t.Errorf("a plot has no data")
		}
	}
	// Every plot of a connection carries its event markers.
	for _, e := range regexp.MustCompile(`data-events="(\d+)"`).FindAllStringSubmatch(dom, -1) {
		if e[1] != "1" && e[1] != "2" {
			t.Errorf("a plot has %s event markers, want its connection's 1 or 2", e[1])
		}
	}
	if n := strings.Count(dom, `class="u-over"`); n != 14 {
		t.Errorf("%d uPlot canvases, want 14", n)
	}
	bounds := img.Bounds()
	colours := map[[3]uint32]bool{}
	inked := 0
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 2 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, b >> 8}] = true
			if r>>8 < 230 || g>>8 < 230 || b>>8 < 230 {
				inked++
			}
		}
	}
	total := bounds.Dx() * bounds.Dy() / 4
	if len(colours) < 20 || inked < total/50 {
		t.Errorf("screenshot looks blank: %d colours, %d of %d sampled pixels not white", len(colours), inked, total)
	}
	testbrowser.Save(t, "TRACE_SCREENSHOT", img)
}

func TestPageTitle(t *testing.T) {
	for _, c := range []struct {
		h    Header
		want string
	}{{Header{Filter: "port 80"}, "port 80"}, {Header{Filter: "port 80", Netns: "tdlab-a"}, "port 80 in tdlab-a"}} {
		if got := PageTitle(&c.h); got != c.want {
			t.Errorf("PageTitle(%+v) = %q, want %q", c.h, got, c.want)
		}
	}
}

// responsesTrace is a lab-like recording: one connection serving n
// responses of 3.4 MB each at 10 ms samples, held by a 64 KiB peer window
// while cwnd (200 segments of 64 KiB) and Send-Q are megabytes, with
// samples missing for 300 ms in the second response.
func responsesTrace(n int) (*Trace, []Transfer) {
	const (
		step  = 10 * time.Millisecond
		mss   = 65483
		total = 3_400_000
	)
	c := &Conn{ID: 1, Local: netip.MustParseAddrPort("198.18.0.1:8080"), Remote: netip.MustParseAddrPort("198.18.1.2:40000"), CC: "cubic"}
	var acked, recvd, busy, rwnd uint64
	t := time.Duration(0)
	add := func(sendq uint32, unacked uint32) {
		c.Points = append(c.Points, Point{T: t, Conn: 1, State: snapshot.Established, Acked: acked, Recvd: recvd, Busy: busy, Rwnd: rwnd,
			SendQ: sendq, Chrono: true, MSS: mss, Cwnd: 200, Unacked: unacked, RTT: 200, SndWnd: 65536, RcvWnd: 65536, Rate: 5_600_000})
		t += step
	}
	for r := 0; r < n; r++ {
		for i := 0; i < 20; i++ { // idle between responses
			add(0, 0)
		}
		recvd += 200 // the request
		left := uint64(total)
		for i := 0; left > 0; i++ {
			d := min(left, total/60)
			left -= d
			acked += d
			busy += 10000
			rwnd += 9000
			if r == 1 && i == 20 {
				// The sampler stalled; the kernel's busy time ran on
				// (data stayed queued), most of it window-limited.
				t, busy, rwnd = t+300*time.Millisecond, busy+300000, rwnd+270000
			}
			add(uint32(left), 1)
		}
	}
	add(0, 0)
	tr := trace1(c)
	tr.Header.Interval = step
	tr.Header.Started = time.Date(2026, 12, 6, 23, 29, 0, 0, time.UTC)
	tr.Header.Filter = "port 8080"
	ts := Segment(tr, SegmentOptions{})
	Judge(tr, ts, JudgeOptions{Bandwidth: 1e9})
	return tr, ts
}

// writePage writes tr's page into a temporary directory.
func writePage(t *testing.T, tr *Trace, ts []Transfer, title string) string {
	t.Helper()
	page := filepath.Join(t.TempDir(), "report.html")
	var b bytes.Buffer
	if err := WriteHTML(&b, tr, ts, title); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return page
}

// TestHTMLFits: the page, of two connections and of ten responses on one,
// is no wider than a 1280x900 window (no sideways scrolling).
func TestHTMLFits(t *testing.T) {
	tr, ts := pageTrace()
	tr10, ts10 := responsesTrace(10)
	for _, c := range []struct {
		name, env string
		page      string
	}{
		{"two connections", "TRACE_FIT_SCREENSHOT", writePage(t, tr, ts, "chromium test")},
		{"ten responses", "TRACE10_SCREENSHOT", writePage(t, tr10, ts10, "c5-small-rcvbuf-4k")},
	} {
		scroll, client := testbrowser.Width(t, c.page, 1280, 900, 5000)
		if scroll > client || client < 1200 {
			t.Errorf("%s: the document is %d px wide in a %d px viewport", c.name, scroll, client)
		}
		if os.Getenv(c.env) != "" {
			_, img := testbrowser.Render(t, c.page, 1280, 900, 5000)
			testbrowser.Save(t, c.env, img)
		}
	}
}

// TestHTMLOnce: a connection's verdict is said once above its plots, not
// on every row; a page of one connection does not repeat its table as
// the slowest; the sampler's stall is a gap (nulls) in every series.
func TestHTMLOnce(t *testing.T) {
	tr, ts := responsesTrace(10)
	slow := 0
	for i := range ts {
		if ts[i].Verdict != nil && ts[i].Verdict.Slow {
			slow++
		}
	}
	if slow < 10 {
		t.Fatalf("%d slow transfers, want the 10 responses", slow)
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, tr, ts, "ten"); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if n := strings.Count(page, "waiting for the peer&#39;s receive window"); n != 1 {
		t.Errorf("the verdict is said %d times, want once", n)
	}
	if n := strings.Count(page, `<p class="verdict">`); n != 1 {
		t.Errorf("%d verdict paragraphs, want 1", n)
	}
	if strings.Contains(page, "Slowest transfers") {
		t.Errorf("a page of one connection repeats its table as the slowest")
	}
	if n := strings.Count(page, `<table class="transfers">`); n != 1 {
		t.Errorf("%d tables of transfers, want 1", n)
	}
	if !strings.Contains(page, "Samples were missing in 1 place(s)") {
		t.Errorf("the page does not say the gap")
	}
	m := regexp.MustCompile(`"inflight":\[([^\]]*)\]`).FindStringSubmatch(page)
	if m == nil || strings.Count(m[1], "null") != 1 {
		t.Errorf("in flight has no single gap: %.200q", m)
	}
}
