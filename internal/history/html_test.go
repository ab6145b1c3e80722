package history

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/testbrowser"
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
	if n := strings.Count(page, "<tr><td>2023-"); n != 3 {
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
