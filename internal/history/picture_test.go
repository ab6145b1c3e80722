// SPDX-License-Identifier: Apache-2.0

package history

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
)

// pictureTimeline is namespace a's 15 s windows from second 0 to 180:
// a warning at 15-45, critical at 45-60, no windows at 120-150 (serve
// stopped), a warning again at 150-165; and namespace b, whose finding
// names an escape sequence, with windows only at 0-60.
func pictureTimeline() []Entry {
	w, c := finding("a", diag.Warning, "w"), finding("a", diag.Critical, "c")
	b := finding("b", diag.Warning, "b")
	b.Rule = "port-exhaustion"
	b.Subject.Local = diag.MustParseAddress("10.0.0.1:80")
	b.Subject.Command = "\x1b[31m<x>" // an address no longer holds outside text; a command does
	es := []Entry{
		entry(15, ""), entry(30, "", w), entry(45, "", w), entry(60, "e", c), entry(75, ""), entry(90, ""),
		entry(105, ""), entry(120, ""), entry(165, "", w), entry(180, ""),
	}
	for _, sec := range []int{15, 30, 45, 60} {
		e := entry(sec, "")
		e.Netns = "b"
		if sec >= 45 {
			e.Findings = []Finding{{Rule: b.Rule, Severity: b.Severity, Subject: b.Subject, Summary: b.Summary}}
		}
		es = append(es, e)
	}
	return es
}

func TestPicture(t *testing.T) {
	es := pictureTimeline()
	from, to := at("a", 0).Taken, at("a", 180).Taken
	for _, c := range []struct {
		n    int
		want []string // the strips, worst first
	}{
		{12, []string{".WWC....  W.", "..WW        "}},
		// Coarser buckets keep each bucket's worst.
		{4, []string{"WC.W", "WW  "}},
	} {
		p := MakePicture(es, Filter{Min: diag.Warning}, from, to, c.n)
		if len(p.Strips) != 2 {
			t.Fatalf("n=%d: %d strips", c.n, len(p.Strips))
		}
		for i, want := range c.want {
			if got := StripText(&p.Strips[i]); got != want {
				t.Errorf("n=%d strip %d (%s): %q, want %q", c.n, i, p.Strips[i].Rule, got, want)
			}
		}
		if p.Strips[0].Rule != "listen-overflow" || p.Strips[0].Worst != diag.Critical {
			t.Errorf("n=%d: first strip %s %v, want the critical listen-overflow", c.n, p.Strips[0].Rule, p.Strips[0].Worst)
		}
	}
	// Filters apply as they do to incidents.
	if p := MakePicture(es, Filter{Min: diag.Critical}, from, to, 12); len(p.Strips) != 1 {
		t.Errorf("critical only: %d strips", len(p.Strips))
	}
	if p := MakePicture(es, Filter{Min: diag.Warning, Netns: "b"}, from, to, 12); len(p.Strips) != 1 || p.Strips[0].Rule != "port-exhaustion" {
		t.Errorf("netns b: %+v", p.Strips)
	}
	if p := MakePicture(es, Filter{Min: diag.Warning}, to, from, 12); len(p.Strips) != 0 {
		t.Error("a reversed span drew strips")
	}

	var b bytes.Buffer
	p := MakePicture(es, Filter{Min: diag.Warning}, from, to, 12)
	WritePicture(&b, &p, at("a", 0).Taken.Location())
	out := b.String()
	if strings.ContainsRune(out, 0x1b) {
		t.Errorf("the picture prints a raw escape: %q", out)
	}
	for _, want := range []string{"|.WWC....  W.|  listen-overflow 0.0.0.0:80", "|..WW        |  port-exhaustion 10.0.0.1:80", "one character per 15s", "   ^22:13:20", "22:16:20^\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("picture lacks %q:\n%s", want, out)
		}
	}
}
