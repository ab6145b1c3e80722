// SPDX-License-Identifier: Apache-2.0

package history

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/outfile"
	"github.com/tcpdoctor/tcpdoctor/internal/trace"
)

// MaxListed bounds the incidents a listing holds (the newest): its
// memory stays bounded whatever the store holds.
const MaxListed = 10000

// Buckets of the picture: a strip fits an 80-column terminal; the page's
// chart is finer.
const (
	textPictureWidth = 60
	htmlPictureWidth = 240
)

// List reads the store's windows ending in (since, until] as a stream,
// one entry at a time, once (history's, and serve's /history): the
// incidents f selects (at most MaxListed held) with their replay
// commands, and the pictures' cells, the terminal's when text, the
// page's when html (the span of the pictures from the store's first and
// last segments).
func List(st *Store, since, until time.Time, f Filter, text, html bool) (l *Listing, pic, hp Picture, err error) {
	g := NewGrouper(f)
	g.Max = MaxListed
	l = &Listing{Dir: st.Dir, Since: since, Until: until}
	first, last, found := st.Bounds(since, until)
	var tb, hb *PictureBuilder
	if found {
		if text {
			tb = NewPictureBuilder(f, first, last, textPictureWidth)
		}
		if html {
			hb = NewPictureBuilder(f, first, last, htmlPictureWidth)
		}
	}
	err = st.Walk(since, until, func(en *Entry) error {
		if l.Windows == 0 || en.From.Before(l.First) {
			l.First = en.From
		}
		if en.To.After(l.Last) {
			l.Last = en.To
		}
		l.Windows++
		g.Add(en)
		if tb != nil {
			tb.Add(en)
		}
		if hb != nil {
			hb.Add(en)
		}
		return nil
	})
	if err != nil {
		return nil, pic, hp, err
	}
	l.Incidents = g.Incidents(until)
	l.Notes = st.Notes
	if g.Dropped > 0 {
		l.Notes = append(l.Notes, fmt.Sprintf("%d older incidents not listed: at most %d are (narrow with --since, --rule or --netns)", g.Dropped, MaxListed))
	}
	kept := map[string]bool{}
	for _, w := range st.Evidence() {
		kept[w.Name] = true
	}
	for _, in := range l.Incidents {
		cmd := ""
		if in.Evidence != "" && kept[in.Evidence] {
			cmd = ReplayCommand(st.Dir, in.At)
		}
		l.Replay = append(l.Replay, cmd)
	}
	if tb != nil {
		pic = tb.Picture()
	}
	if hb != nil {
		hp = hb.Picture()
	}
	return l, pic, hp, nil
}

// TraceLinks fills each incident's trace command (the trace's page named
// after it in the working directory, or beside the page when page is
// given), or says why the trace it names is not in the store (kept:
// Store.Traces).
func TraceLinks(l *Listing, kept map[string]bool, page string) {
	for _, in := range l.Incidents {
		cmd, note := "", ""
		switch {
		case in.Trace == "":
		case kept[in.Trace]:
			html := TracePage(in.Trace)
			if page != "" {
				html = TracePagePath(page, in.Trace)
			}
			cmd = TraceCommand(l.Dir, in.Trace, html)
		default:
			note = in.Trace + " is not in the store: still being recorded, evicted, or not kept (the timeline's notes say why)"
		}
		l.TraceReplay = append(l.TraceReplay, cmd)
		l.TraceNote = append(l.TraceNote, note)
	}
}

// TracePagePath is where history --html PAGE renders the page of the
// trace name: beside PAGE, named after both.
func TracePagePath(page, name string) string {
	base := strings.TrimSuffix(filepath.Base(page), ".html")
	return filepath.Join(filepath.Dir(page), base+"-"+TracePage(name))
}

// WriteTracePages renders each linked incident's trace beside the page
// and links it (by its name: the two pages sit in one directory). A trace
// that cannot be read or written is not linked; failed hears why.
func WriteTracePages(l *Listing, page string, failed func(trace string, err error)) {
	l.TracePages = make([]string, len(l.Incidents))
	for i, in := range l.Incidents {
		if l.TraceReplay[i] == "" {
			continue
		}
		path := TracePagePath(page, in.Trace)
		if err := trace.WritePageFile(filepath.Join(l.Dir, in.Trace), path); err != nil {
			failed(in.Trace, err)
			l.TraceNote[i] = "its page could not be written: " + err.Error()
			l.TraceReplay[i] = ""
			continue
		}
		l.TracePages[i] = filepath.Base(path)
	}
}

// WritePage writes the listing's page to page and renames it into place.
func WritePage(page *outfile.Atomic, l *Listing, p *Picture, loc *time.Location) error {
	return page.Fill(func(w io.Writer) error { return WriteHTML(w, l, p, loc) })
}
