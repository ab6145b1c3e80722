// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Result is the outcome of running rules over one or more namespaces.
type Result struct {
	Findings []Finding `json:"findings"`
	Unknown  []Unknown `json:"unknown"`
	// Ran lists the ids of the rules that ran in at least one namespace.
	Ran []string `json:"rules_run"`
}

// Run runs every rule on in and appends to res, in rule order. Rules that
// need a delta are reported unknown without a previous snapshot. A rule
// that panics is reported unknown with the panic, so one bad rule cannot
// hide the rest. Rules are pure functions of in, so they run on every
// CPU at once: with a million sockets each takes a good part of a second.
func Run(rules []Rule, in *Input, res *Result) {
	ns := in.Cur.Netns.Name
	type outcome struct {
		fs  []Finding
		err error
	}
	outs := make([]outcome, len(rules))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), len(rules))) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(rules) {
					return
				}
				if rules[i].NeedsDelta && in.Prev == nil {
					outs[i].err = errNeedsDelta
					continue
				}
				outs[i].fs, outs[i].err = safeCheck(rules[i], in)
			}
		})
	}
	wg.Wait()
	for i, r := range rules {
		fs, err := outs[i].fs, outs[i].err
		if errors.Is(err, errNeedsDelta) {
			res.Unknown = append(res.Unknown, Unknown{Rule: r.ID, Netns: ns, Reason: err.Error()})
			continue
		}
		if err != nil {
			res.Unknown = append(res.Unknown, Unknown{Rule: r.ID, Netns: ns, Reason: err.Error()})
		}
		for i := range fs {
			fs[i].Rule = r.ID
			if fs[i].Subject.Netns == "" {
				fs[i].Subject.Netns = ns
			}
			if sub := &fs[i].Subject; sub.Workload == nil {
				sub.Workload = snapshot.WorkloadIn(&in.Cur.Netns, in.Cur.Procs, sub.Pid)
			}
		}
		res.Findings = append(res.Findings, fs...)
		if !contains(res.Ran, r.ID) {
			res.Ran = append(res.Ran, r.ID)
		}
	}
}

// errNeedsDelta is the reason a rule that needs a delta did not run.
var errNeedsDelta = errors.New("needs two samples (--interval > 0)")

// Sort orders findings most severe first, then by rule and subject, so
// output is stable.
func (res *Result) Sort() {
	sort.SliceStable(res.Findings, func(i, j int) bool {
		a, b := res.Findings[i], res.Findings[j]
		if a.Severity != b.Severity {
			return a.Severity > b.Severity
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		if a.Subject.Netns != b.Subject.Netns {
			return a.Subject.Netns < b.Subject.Netns
		}
		if al, bl := a.Subject.Local.String(), b.Subject.Local.String(); al != bl {
			return al < bl
		}
		return a.Subject.Remote.String() < b.Subject.Remote.String()
	})
	sort.SliceStable(res.Unknown, func(i, j int) bool {
		if res.Unknown[i].Rule != res.Unknown[j].Rule {
			return res.Unknown[i].Rule < res.Unknown[j].Rule
		}
		return res.Unknown[i].Netns < res.Unknown[j].Netns
	})
	sort.Strings(res.Ran)
}

// Worst returns the highest severity found, 0 if none.
func (res *Result) Worst() Severity {
	var w Severity
	for _, f := range res.Findings {
		if f.Severity > w {
			w = f.Severity
		}
	}
	return w
}

func safeCheck(r Rule, in *Input) (fs []Finding, err error) {
	defer func() {
		if p := recover(); p != nil {
			fs, err = nil, fmt.Errorf("rule panicked: %v", p)
		}
	}()
	return r.Check(in)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
