// SPDX-License-Identifier: Apache-2.0

package history

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/textsafe"
)

// Replay is the kept window that check and sockets --history --at read
// for a time.
type Replay struct {
	// Path is the evidence file to read; "" when none is kept.
	Path string
	// Said is what is replayed and the incidents covering the time, a
	// line each, for stderr.
	Said []string
	// Missing, when Path is "", says what the timeline holds for the
	// time, the nearest windows with evidence and the store's notes.
	Missing []byte
}

// ReplayAt finds the evidence file whose window covers t, else the
// nearest kept of an incident covering t; times print in loc.
func (st *Store) ReplayAt(t time.Time, loc *time.Location) (*Replay, error) {
	cover, before, after := st.At(t)
	clock := func(t time.Time) string { return t.In(loc).Format("2006-01-02 15:04:05.000") }
	// The incidents covering t: their spans, and their evidence nearest t
	// when no window kept covers t itself.
	moments, err := st.IncidentsAt(t, Filter{Min: diag.Warning})
	if err != nil {
		return nil, err
	}
	replay := func(w *Window, why string) *Replay {
		r := &Replay{Path: st.Path(w.Name)}
		r.Said = append(r.Said, fmt.Sprintf("replaying the window %s .. %s kept in %s (%s)%s", clock(w.From), clock(w.To), st.Dir, w.Name, why))
		for _, m := range moments {
			r.Said = append(r.Said, fmt.Sprintf("the incident covering it: %s %s %s, %s .. %s (%d windows)", m.Severity.Label(), textsafe.String(m.Rule),
				report.SubjectText(m.Subject), clock(m.Start), clock(m.End), m.Windows))
		}
		return r
	}
	if cover != nil {
		if _, err := os.Stat(st.Path(cover.Name)); err == nil {
			return replay(cover, ""), nil
		}
	}
	for _, m := range moments {
		if m.Nearest == nil {
			continue
		}
		if _, err := os.Stat(st.Path(m.Nearest.Name)); err != nil {
			continue
		}
		return replay(m.Nearest, fmt.Sprintf(": no window kept covers %s; this is the nearest kept of the incident covering it", clock(t))), nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "no evidence kept in %s for %s\n", textsafe.String(st.Dir), clock(t))
	es, _ := st.Entries(t.Add(-time.Hour), t.Add(time.Hour))
	if cv := Covering(es, t); len(cv) > 0 {
		fmt.Fprintf(&b, "the timeline has:\n")
		WriteEntries(&b, cv, loc)
	} else {
		fmt.Fprintf(&b, "the timeline has no window covering it\n")
	}
	for _, w := range []struct {
		what string
		win  *Window
	}{{"before", before}, {"after", after}} {
		if w.win != nil {
			fmt.Fprintf(&b, "nearest window with evidence %s: %s .. %s: %s\n", w.what, clock(w.win.From), clock(w.win.To),
				textsafe.String(ReplayCommand(st.Dir, w.win.To)))
		}
	}
	if before == nil && after == nil {
		fmt.Fprintf(&b, "no window with evidence is kept\n")
	}
	for _, n := range st.Notes {
		fmt.Fprintf(&b, "note: %s\n", textsafe.String(n))
	}
	return &Replay{Missing: b.Bytes()}, nil
}
