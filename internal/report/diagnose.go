// SPDX-License-Identifier: Apache-2.0

package report

import (
	"iter"
	"os"
	"slices"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/remedy"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Diagnose runs the rules over each window and assembles the report:
// the findings, unknowns and source errors of every namespace's window
// in one Report, the same for `check`, serve and the lab. It samples
// nothing: the windows come from internal/window or from a file read
// back.
// Each input is dropped once its rules ran, so an iterator that builds
// each when asked (window.Inputs) holds one window's index at a time.
func Diagnose(ins iter.Seq[*diag.Input], rs []diag.Rule) *Report {
	var d diagnosis
	for in := range ins {
		d.add(in, rs)
	}
	return d.report()
}

// diagnosis is a report being assembled, one window at a time.
type diagnosis struct {
	res diag.Result
	rep Report
	// The eBPF counters are read once for every namespace: what they
	// missed is looked at in the first window that has them and said
	// once, for the host, after the namespaces' own notes.
	eventsSeen bool
	eventsNote string
}

func (d *diagnosis) add(in *diag.Input, rs []diag.Rule) {
	prev, cur := in.Prev, in.Cur
	ns := cur.Netns.Name
	n := len(d.res.Findings)
	diag.Run(rs, in, &d.res)
	remedy.InPods(d.res.Findings[n:], &cur.Netns)
	rep := &d.rep
	rep.Netns = append(rep.Netns, ns)
	rep.Sockets += len(cur.Sockets)
	if rep.Host == "" {
		rep.Host, rep.Kernel = cur.Host, cur.Kernel
	}
	if cur.Taken.After(rep.Taken) {
		rep.Taken = cur.Taken
	}
	rep.Window.To = cur.Taken
	if prev != nil {
		rep.Window.From = prev.Taken
		rep.Window.Seconds = cur.Taken.Sub(prev.Taken).Seconds()
		// Said once: a failure the second sample repeats is not
		// reported for the first as well.
		for _, er := range prev.Errors {
			if !slices.Contains(cur.Errors, er) {
				rep.Sources = append(rep.Sources, SourceError{Netns: ns, Source: er.Source, Error: "first sample: " + er.Err})
			}
		}
	}
	for _, er := range cur.Errors {
		rep.Sources = append(rep.Sources, SourceError{Netns: ns, Source: er.Source, Error: er.Err})
	}
	if ev := cur.Events; ev != nil && !d.eventsSeen {
		d.eventsSeen, d.eventsNote = true, ev.Incomplete()
	}
}

func (d *diagnosis) report() *Report {
	rep := &d.rep
	rep.Version = JSONVersion
	d.res.Sort()
	rep.Findings, rep.Unknown, rep.RulesRun = d.res.Findings, d.res.Unknown, d.res.Ran
	if d.eventsNote != "" {
		rep.Sources = append(rep.Sources, SourceError{Source: snapshot.SourceBPF, Error: d.eventsNote})
	}
	if rep.Host == "" {
		rep.Host, _ = os.Hostname()
	}
	return rep
}
