// SPDX-License-Identifier: Apache-2.0

// Package source is the contract every source of a collection keeps: a
// Step, with the name of the snapshot source it fills and a run function,
// and one executor (Exec) that times it, marks its phase and, through
// Result.Record, records its snapshot.SourceStat and its error. No source
// times or records itself, so every one is timed and recorded alike (as
// node_exporter's execute() times every collector in one place).
package source

import (
	"errors"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/phases"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Step is one source, or one part of a collection, in its place in the
// order.
type Step struct {
	// Name is the snapshot source it fills (snapshot.Source*), recorded
	// in every snapshot it ran for; "" records nothing: a part of a
	// source, or a group of steps, timed as a phase only.
	Name string
	// Phase names its span in the phases recorder; "" marks none.
	Phase string
	// Run reads the source. Its error is recorded under Name.
	Run func() error
}

// ErrAbsent is what a Run returns (or wraps) when its source was not
// there to read (an eBPF program that did not load): nothing is
// recorded, as when there was no step.
var ErrAbsent = errors.New("source absent")

// ErrRecorded is what a Run returns (or wraps) when its source recorded
// its own errors in the snapshot (several, each under its own name): the
// step is recorded as failed, and no error is added.
var ErrRecorded = errors.New("source errors recorded in the snapshot")

// Result is how a step went.
type Result struct {
	Name string
	Err  error
	Took time.Duration
}

// Exec runs st: times it and marks its phase in ph (nil marks nothing).
// A step without a Run fails with an error that names it.
func Exec(ph *phases.Recorder, st Step) Result {
	var end func()
	if st.Phase != "" {
		end = ph.Begin(st.Phase)
	}
	start := time.Now()
	var err error
	if st.Run == nil {
		err = errors.New("source: " + st.Name + ": nothing to run")
	} else {
		err = st.Run()
	}
	took := time.Since(start)
	if end != nil {
		end()
	}
	return Result{Name: st.Name, Err: err, Took: took}
}

// Run is Exec, then Record in snaps; it returns the step's error.
func Run(ph *phases.Recorder, st Step, snaps ...*snapshot.Snapshot) error {
	r := Exec(ph, st)
	r.Record(snaps...)
	return r.Err
}

// Record notes r in each of snaps: its SourceStat and, when it failed,
// its error under its name. A step without a name, or an absent source
// (ErrAbsent), records nothing; one that recorded its own errors
// (ErrRecorded) only its SourceStat.
func (r Result) Record(snaps ...*snapshot.Snapshot) {
	if r.Name == "" || errors.Is(r.Err, ErrAbsent) {
		return
	}
	for _, s := range snaps {
		s.Sources = append(s.Sources, snapshot.SourceStat{Source: r.Name, OK: r.Err == nil, Duration: r.Took})
		if r.Err != nil && !errors.Is(r.Err, ErrRecorded) {
			s.AddError(r.Name, r.Err)
		}
	}
}
