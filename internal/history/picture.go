// SPDX-License-Identifier: Apache-2.0

package history

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// Cell values of a Strip besides a severity: no window of the subject's
// namespace overlaps the bucket, or windows do and none shows the finding.
const (
	NoWindow = -1
	Quiet    = 0
)

// Strip is one finding (a rule and a subject) over a picture's buckets:
// each cell is the highest severity of the windows overlapping the
// bucket, Quiet, or NoWindow.
type Strip struct {
	Rule    string        `json:"rule"`
	Subject diag.Subject  `json:"subject"`
	Worst   diag.Severity `json:"worst"`
	Cells   []int         `json:"cells"`
}

// Picture is the findings over time per subject: From..To in equal
// buckets, one Strip per finding, in order of first appearance.
type Picture struct {
	From, To time.Time
	Bucket   time.Duration
	Strips   []Strip
	// More counts the findings not drawn: beyond MaxStrips.
	More int
}

// MakePicture buckets entries (in time order) from..to into n buckets,
// keeping the findings f selects. It returns an empty picture when the
// span or n is not positive.
func MakePicture(es []Entry, f Filter, from, to time.Time, n int) Picture {
	b := NewPictureBuilder(f, from, to, n)
	for i := range es {
		b.Add(&es[i])
	}
	return b.Picture()
}

// MaxStrips bounds the strips a picture draws: the findings after that
// many are counted (Picture.More), not drawn.
const MaxStrips = 1000

// PictureBuilder makes a Picture from entries fed one at a time, holding
// only its cells.
type PictureBuilder struct {
	f     Filter
	p     Picture
	n     int
	idx   map[findingKey]int
	seen  map[string][]bool // buckets with a window, per namespace
	more  map[findingKey]bool
	valid bool
}

// NewPictureBuilder starts a picture of from..to in n buckets.
func NewPictureBuilder(f Filter, from, to time.Time, n int) *PictureBuilder {
	b := &PictureBuilder{f: f, p: Picture{From: from, To: to}, n: n, idx: map[findingKey]int{}, seen: map[string][]bool{}, more: map[findingKey]bool{}}
	if n <= 0 || !to.After(from) {
		return b
	}
	b.valid = true
	b.p.Bucket = to.Sub(from) / time.Duration(n)
	if b.p.Bucket <= 0 {
		b.p.Bucket = 1
	}
	return b
}

// Add takes the next entry.
func (b *PictureBuilder) Add(e *Entry) {
	if b == nil || !b.valid || !e.To.After(b.p.From) || !e.From.Before(b.p.To) {
		return
	}
	// every bucket the window overlaps
	lo := max(int(e.From.Sub(b.p.From)/b.p.Bucket), 0)
	hi := min(int((e.To.Sub(b.p.From)-1)/b.p.Bucket), b.n-1)
	seen := b.seen[e.Netns]
	if seen == nil {
		seen = make([]bool, b.n)
		b.seen[e.Netns] = seen
	}
	for c := lo; c <= hi; c++ {
		seen[c] = true
	}
	for j := range e.Findings {
		fd := &e.Findings[j]
		if !b.f.keep(fd) {
			continue
		}
		k := keyOf(fd.Rule, &fd.Subject)
		i, ok := b.idx[k]
		if !ok {
			if len(b.p.Strips) >= MaxStrips {
				b.more[k] = true
				continue
			}
			i = len(b.p.Strips)
			b.idx[k] = i
			cells := make([]int, b.n)
			for c := range cells {
				cells[c] = NoWindow
			}
			b.p.Strips = append(b.p.Strips, Strip{Rule: fd.Rule, Subject: fd.Subject, Cells: cells})
		}
		st := &b.p.Strips[i]
		for c := lo; c <= hi; c++ {
			st.Cells[c] = max(st.Cells[c], int(fd.Severity))
		}
		st.Worst = max(st.Worst, fd.Severity)
	}
}

// Picture is the picture of the entries added, most severe strips first.
func (b *PictureBuilder) Picture() Picture {
	p := b.p
	p.More = len(b.more)
	for i := range p.Strips {
		st := &p.Strips[i]
		seen := b.seen[st.Subject.Netns]
		for c := range st.Cells {
			if st.Cells[c] == NoWindow && seen != nil && seen[c] {
				st.Cells[c] = Quiet
			}
		}
	}
	sort.SliceStable(p.Strips, func(i, j int) bool { return p.Strips[i].Worst > p.Strips[j].Worst })
	return p
}

// cellRune is a cell as a character: meaning never rests on colour.
func cellRune(c int) rune {
	switch {
	case c >= int(diag.Critical):
		return 'C'
	case c == int(diag.Warning):
		return 'W'
	case c == int(diag.Info):
		return 'i'
	case c == Quiet:
		return '.'
	}
	return ' '
}

// StripText is a strip's cells, one character each: C critical,
// W warning, i info, . windows without the finding, space no window.
func StripText(s *Strip) string {
	var b strings.Builder
	for _, c := range s.Cells {
		b.WriteRune(cellRune(c))
	}
	return b.String()
}

// WritePicture prints each strip between bars with its rule and escaped
// subject, under a line with the span and the bucket length, times in
// loc.
func WritePicture(w io.Writer, p *Picture, loc *time.Location) {
	if len(p.Strips) == 0 {
		return
	}
	clock := func(t time.Time) string { return t.In(loc).Format("2006-01-02 15:04:05") }
	n := len(p.Strips[0].Cells)
	fmt.Fprintf(w, "\nfindings over time, %s .. %s, one character per %s (C critical, W warning, i info, . quiet, blank no window):\n",
		clock(p.From), clock(p.To), units.Dur(p.Bucket))
	for i := range p.Strips {
		s := &p.Strips[i]
		fmt.Fprintf(w, "  |%s|  %s %s\n", StripText(s), textsafe.String(s.Rule), report.SubjectText(s.Subject))
	}
	layout := "15:04"
	switch span := p.To.Sub(p.From); {
	case span < time.Hour:
		layout = "15:04:05"
	case span >= 24*time.Hour:
		layout = "01-02 15:04"
	}
	start, end := "^"+p.From.In(loc).Format(layout), p.To.In(loc).Format(layout)+"^"
	fmt.Fprintf(w, "   %s%s%s\n", start, strings.Repeat(" ", max(n-len(start)-len(end), 1)), end)
	if p.More > 0 {
		fmt.Fprintf(w, "  and %d more findings not drawn (at most %d are; narrow with --rule, --netns or --since)\n", p.More, MaxStrips)
	}
}
