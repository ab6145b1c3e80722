package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/testbrowser"
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
	if m == nil || m[1] != strconv.Itoa(3*2) {
		t.Fatalf("plots rendered: %v, want 6 (3 per connection)", m)
	}
	points := regexp.MustCompile(`class="plot" data-points="(\d+)"`).FindAllStringSubmatch(dom, -1)
	if len(points) != 6 {
		t.Errorf("%d plots carry a point count, want 6", len(points))
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
	if n := strings.Count(dom, `class="u-over"`); n != 6 {
		t.Errorf("%d uPlot canvases, want 6", n)
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
