// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"github.com/spf13/pflag"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/selector"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// workloadOpts are --pod and --container, shared by check, sockets,
// trace and watch: the flags of a selector.Selector, which does the
// matching (docs/containers.md).
type workloadOpts struct {
	// cmd names the command in usage errors.
	cmd string
	selector.Selector
}

func (o *workloadOpts) register(fs *pflag.FlagSet, cmd string) {
	o.cmd = cmd
	fs.StringVar(&o.Pod, "pod", "", "only this Kubernetes pod: `[NAMESPACE/]NAME` (names from the container runtime's files, docs/containers.md)")
	fs.StringVar(&o.Container, "container", "", "only this container: its name (Kubernetes or Docker) or its id of 12 or more hex digits")
}

// validate checks the flags' shape.
func (o *workloadOpts) validate() error {
	if err := o.Check(); err != nil {
		return usageErr("%s: %v", o.cmd, err)
	}
	return nil
}

// find is Selector.Find, its error a usage error.
func (o *workloadOpts) find(where string, known []snapshot.Workload) error {
	if err := o.Find(where, known); err != nil {
		return usageErr("%s: %v", o.cmd, err)
	}
	return nil
}

// holds reports whether the last sample of sr is about what o asks for.
func (o *workloadOpts) holds(sr series) bool {
	return len(sr.Snaps) > 0 && o.Holds(sr.Snaps[len(sr.Snaps)-1])
}

// knownLive is every workload of the host: each process's (by the Env's
// resolver) and each namespace's. A partial look is used, with a note.
func knownLive(e *Env, cmd string, nss []netns.NS) ([]snapshot.Workload, map[int]snapshot.Workload, error) {
	if e.Workloads == nil {
		return nil, nil, usageErr("%s: --pod and --container need container names, and this run resolves none", cmd)
	}
	byPid, err := e.Workloads.Processes()
	if byPid == nil && err != nil {
		return nil, nil, collectErr(err)
	}
	if err != nil {
		e.progress("note: %v; some processes may be unnamed", err)
	}
	var known []snapshot.Workload
	for _, w := range byPid {
		known = append(known, w)
	}
	for _, ns := range nss {
		if ns.Workload != nil {
			known = append(known, *ns.Workload)
		}
	}
	return known, byPid, nil
}

// knownIn is every workload a snapshot file names: its namespaces' and
// its processes'.
func knownIn(ss []series) []snapshot.Workload {
	var known []snapshot.Workload
	for _, sr := range ss {
		for _, s := range sr.Snaps {
			known = selector.Known(known, s)
		}
	}
	return known
}
