// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"fmt"
	"slices"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/selector"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// Target points o at what sel asks for (--pod, --container) among the
// host's namespaces nss and its processes' workloads byPid: a pod's own
// namespace (all of it for a pod alone), and the container's processes
// (or, for a pod on the host's network, the pod's) by their sockets.
// ofPid finds the namespace of a process when no namespace is the pod's.
func (o *LiveOptions) Target(sel *selector.Selector, nss []netns.NS, byPid map[int]snapshot.Workload, ofPid func(pid int) (netns.NS, error)) error {
	for _, ns := range nss {
		if w := ns.Workload; w != nil && w.Pod != "" && sel.MayHold(w) {
			o.NS, o.Workload = ns, w
			break
		}
	}
	if sel.Container == "" && o.NS.Path != "" {
		return nil // the pod's namespace, whole
	}
	for pid, w := range byPid {
		if sel.Match(&w) {
			o.Pids = append(o.Pids, pid)
			if o.Workload == nil || o.Workload.Sandbox {
				o.Workload = &w
			}
		}
	}
	if len(o.Pids) == 0 {
		return fmt.Errorf("%s has no process to trace", sel.What())
	}
	slices.Sort(o.Pids)
	if o.NS.Path == "" {
		ns, err := ofPid(o.Pids[0])
		if err != nil {
			return fmt.Errorf("%s: %w", sel.What(), err)
		}
		o.NS = ns
	}
	return nil
}
