// SPDX-License-Identifier: Apache-2.0

package history

import (
	"errors"
	"sort"
	"time"
)

// AtLookback is how far before a time IncidentsAt reads the timeline: an
// incident that started earlier is given as starting at the first window
// read (its Start is then at most AtLookback before the time).
const AtLookback = 24 * time.Hour

// Moment is an incident covering a time, with the evidence of it kept
// nearest that time.
type Moment struct {
	Incident
	// Nearest is the incident's evidence window nearest the time (the one
	// covering it when kept), nil when none of its evidence is in the
	// store.
	Nearest *Window
}

// At opens the store in dir and returns what IncidentsAt returns.
func At(dir string, t time.Time, f Filter) ([]Moment, *Store, error) {
	s, err := Open(dir)
	if err != nil {
		return nil, nil, err
	}
	ms, err := s.IncidentsAt(t, f)
	return ms, s, err
}

var errStop = errors.New("stop")

// IncidentsAt returns the incidents f selects whose span covers t (Start
// < t <= End), most severe first, then those whose nearest kept evidence
// is nearer t. It reads the timeline from AtLookback before t until every
// incident covering t has ended, one entry at a time.
func (s *Store) IncidentsAt(t time.Time, f Filter) ([]Moment, error) {
	kept := map[string]bool{}
	for _, w := range s.Evidence() {
		kept[w.Name] = true
	}
	g := NewGrouper(f)
	g.Near = t
	g.Kept = func(name string) bool { return kept[name] }
	var last time.Time
	err := s.Walk(t.Add(-AtLookback), time.Time{}, func(e *Entry) error {
		if e.From.After(t) && !g.openAcross(t) {
			return errStop
		}
		g.Add(e)
		last = maxTime(last, e.To)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	var out []Moment
	for _, in := range g.Incidents(last) {
		if in.Start.Before(t) && !in.End.Before(t) {
			out = append(out, Moment{Incident: in, Nearest: in.near})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if a.Severity != b.Severity {
			return a.Severity > b.Severity
		}
		if (a.Nearest == nil) != (b.Nearest == nil) {
			return a.Nearest != nil
		}
		return a.Nearest != nil && distance(a.Nearest, t) < distance(b.Nearest, t)
	})
	return out, nil
}

// openAcross says whether an incident that started before t is still
// open.
func (g *Grouper) openAcross(t time.Time) bool {
	for k, o := range g.opened {
		if l := g.last[k.netns]; o.inc.Start.Before(t) && o.lastTo.Equal(l.to) {
			return true
		}
	}
	return false
}
