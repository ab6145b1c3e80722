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
}

// MakePicture buckets entries (in time order) from..to into n buckets,
// keeping the findings f selects. It returns an empty picture when the
// span or n is not positive.
func MakePicture(es []Entry, f Filter, from, to time.Time, n int) Picture {
	p := Picture{From: from, To: to}
	if n <= 0 || !to.After(from) {
		return p
	}
	p.Bucket = to.Sub(from) / time.Duration(n)
	if p.Bucket <= 0 {
		p.Bucket = 1
	}
	// bucket range of a window: every bucket it overlaps.
	span := func(e *Entry) (int, int) {
		a := int(e.From.Sub(from) / p.Bucket)
		b := int((e.To.Sub(from) - 1) / p.Bucket)
		return max(a, 0), min(b, n-1)
	}
	idx := map[findingKey]int{}
	for i := range es {
		e := &es[i]
		if !e.To.After(from) || !e.From.Before(to) {
			continue
		}
		for j := range e.Findings {
			fd := &e.Findings[j]
			if !f.keep(fd) {
				continue
			}
			k := keyOf(fd.Rule, &fd.Subject)
			if _, ok := idx[k]; !ok {
				idx[k] = len(p.Strips)
				cells := make([]int, n)
				for c := range cells {
					cells[c] = NoWindow
				}
				p.Strips = append(p.Strips, Strip{Rule: fd.Rule, Subject: fd.Subject, Cells: cells})
			}
		}
	}
	if len(p.Strips) == 0 {
		return p
	}
	byNetns := map[string][]int{}
	for i := range p.Strips {
		ns := p.Strips[i].Subject.Netns
		byNetns[ns] = append(byNetns[ns], i)
	}
	for i := range es {
		e := &es[i]
		if !e.To.After(from) || !e.From.Before(to) {
			continue
		}
		a, b := span(e)
		for _, s := range byNetns[e.Netns] {
			for c := a; c <= b; c++ {
				p.Strips[s].Cells[c] = max(p.Strips[s].Cells[c], Quiet)
			}
		}
		for j := range e.Findings {
			fd := &e.Findings[j]
			if !f.keep(fd) {
				continue
			}
			s := &p.Strips[idx[keyOf(fd.Rule, &fd.Subject)]]
			for c := a; c <= b; c++ {
				s.Cells[c] = max(s.Cells[c], int(fd.Severity))
			}
			s.Worst = max(s.Worst, fd.Severity)
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
}
