// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/collect"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/report"
	"github.com/tcpdoctor/tcpdoctor/internal/rules"
	"github.com/tcpdoctor/tcpdoctor/internal/window"
)

type checkOpts struct {
	src       sourceOpts
	wl        workloadOpts
	at        atOpts
	bpf       bpfOpts
	interval  time.Duration
	json      jsonOpt
	failOn    string
	verbose   bool
	bandwidth string
	noOwners  bool
	only      []string
	pid       int
}

func newCheckCmd(e *Env) *cobra.Command {
	o := &checkOpts{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Diagnose this host's TCP: what is wrong, the evidence, and the fix",
		Long: `Take two samples --interval apart, run every rule, and print what is wrong, why, and
what to do, most severe first. --interval 0 takes one snapshot and runs only the rules that need
no deltas (the others are reported unknown). --pod and --container keep the findings about that
pod or container (its namespace, or its processes on the host's), looking in every namespace
unless --netns says which. --pid keeps the findings about one process, in its own network
namespace.

Exit codes: 0 nothing at or above --fail-on, 1 findings, 2 usage error, 3 collection failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCheck(cmd, e, o)
		},
	}
	fs := cmd.Flags()
	o.src.register(fs)
	o.wl.register(fs, "check")
	o.src.workload = &o.wl
	o.at.register(fs)
	o.bpf.register(fs)
	fs.DurationVar(&o.interval, "interval", 5*time.Second, "time from the first sample's start to the second's (0: one snapshot; back to back when collecting takes longer)")
	o.json.register(fs)
	fs.StringVar(&o.failOn, "fail-on", "warning", "exit 1 when a finding is at or above this severity (info, warning, critical)")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "also print info findings")
	fs.StringVar(&o.bandwidth, "bandwidth", "", "path bandwidth for BDP arithmetic, e.g. 100mbit (default: the path's rate measured to the peer, bytes_acked per busy_time, as trace)")
	fs.BoolVar(&o.noOwners, "no-owners", false, "do not map sockets to processes (faster, less to say)")
	fs.StringSliceVar(&o.only, "rule", nil, "run only these rules")
	fs.IntVar(&o.pid, "pid", 0, "only the findings about this process (checked in its network namespace unless --netns or --all-netns)")
	return cmd
}

func runCheck(cmd *cobra.Command, e *Env, o *checkOpts) error {
	if err := o.validate(e); err != nil {
		return err
	}
	failOn, err := diag.ParseSeverity(o.failOn)
	if err != nil {
		return usageErr("check: --fail-on: %v", err)
	}
	if o.interval < 0 {
		return usageErr("check: --interval must not be negative")
	}
	var opts diag.Options
	if o.bandwidth != "" {
		if opts.Bandwidth, err = bdp.ParseRate(o.bandwidth); err != nil {
			return usageErr("check: --bandwidth: %v", err)
		}
	}
	rs, err := rules.Select(o.only)
	if err != nil {
		return usageErr("check: %v", err)
	}
	count := 2
	if o.interval == 0 {
		count = 1
	}
	if !o.json.on && o.src.from == "" && count == 2 {
		o.src.begin = func() { e.progress("sampling for %s (--interval 0 for a single snapshot)...", o.interval) }
	}
	x, err := o.bpf.allExtras(e, &o.src)
	if err != nil {
		return err
	}
	defer x.Close()
	ss, err := o.src.sample(cmd.Context(), e, x.Collector(collect.Options{Owners: !o.noOwners, Workloads: e.workloads(), FaultIn: true}, e.Now), count, o.interval, rs)
	if err != nil {
		return err
	}
	if o.wl.Set() {
		// Only the namespaces about the pod or container: their
		// unknowns and counts are the report's.
		ss = slices.DeleteFunc(ss, func(sr series) bool { return !o.wl.holds(sr) })
		if len(ss) == 0 {
			e.progress("note: %s holds no namespace and owns no socket: nothing to check", o.wl.What())
		}
	}
	rep := report.Diagnose(window.Inputs(ss, opts), rs)
	o.keepAbout(e, rep)
	rep.Build = e.knownBuild()
	if o.json.on {
		if err := report.WriteJSON(e.Stdout, rep); err != nil {
			return err
		}
	} else {
		min := diag.Warning
		if o.verbose {
			min = diag.Info
		}
		report.WriteText(e.Stdout, rep, report.Style{Color: e.IsTTY && e.Getenv("NO_COLOR") == "", MinSeverity: min, Width: e.columns()})
	}
	if !o.json.on {
		o.src.othersNote(e)
	}
	for _, f := range rep.Findings {
		if f.Severity >= failOn {
			return errFindings
		}
	}
	return nil
}

// validate checks the flags that need more than their type.
func (o *checkOpts) validate(e *Env) error {
	if err := o.at.resolve(e, &o.src, "check"); err != nil {
		return err
	}
	if err := o.src.validate(); err != nil {
		return err
	}
	if err := o.bpf.validate(&o.src); err != nil {
		return err
	}
	if o.wl.Container != "" && o.noOwners {
		return usageErr("check: --container needs the sockets' owners; drop --no-owners")
	}
	if o.pid < 0 {
		return usageErr("check: --pid %d: not a process id", o.pid)
	}
	if o.pid != 0 && (o.noOwners || o.wl.Set()) {
		return usageErr("check: --pid needs the sockets' owners and chooses the process itself; drop --no-owners, --pod and --container")
	}
	o.src.pid = o.pid
	return nil
}

// keepAbout keeps the findings about --pod, --container or --pid.
func (o *checkOpts) keepAbout(e *Env, rep *report.Report) {
	if o.wl.Set() {
		rep.Findings = slices.DeleteFunc(rep.Findings, func(f diag.Finding) bool {
			return !o.wl.Match(f.Subject.Workload)
		})
	}
	if o.pid != 0 {
		rep.Findings = slices.DeleteFunc(rep.Findings, func(f diag.Finding) bool { return f.Subject.Pid != o.pid })
		if len(rep.Findings) == 0 && !o.json.on {
			e.progress("note: no finding names pid %d (checked %s)", o.pid, o.src.where())
		}
	}
}
