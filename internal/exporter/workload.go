// SPDX-License-Identifier: Apache-2.0

package exporter

import "github.com/tcpdoctor/tcpdoctor/internal/snapshot"

// nsLabels are the values of the labels every per-subject family starts
// with: netns, then the workload's pod, Kubernetes namespace and
// container (empty when unknown, which Prometheus stores as absent).
// They are a function of the namespace, or of a listener's or finding's
// process, so they add no series.
type nsLabels [4]string

// subjectLabels are the names of nsLabels, in order, followed by extra.
func subjectLabels(extra ...string) []string {
	return append([]string{"netns", "pod", "namespace", "container"}, extra...)
}

// labelsOf names namespace netns and workload w (nil: none known).
// container is the name, else the short id; empty for a pod's sandbox,
// which has no container of its own.
func labelsOf(netns string, w *snapshot.Workload) nsLabels {
	if w == nil {
		return nsLabels{netns}
	}
	return nsLabels{netns, w.Pod, w.PodNamespace, w.ContainerName()}
}

// with returns the label values followed by extra, for viewBuilder.add.
func (n nsLabels) with(extra ...string) []string {
	out := make([]string, 0, len(n)+len(extra))
	out = append(out, n[:]...)
	return append(out, extra...)
}

// ownerWorkload is the workload of a socket's first owner, else its
// namespace's.
func ownerWorkload(s *snapshot.Snapshot, sk *snapshot.Socket) *snapshot.Workload {
	if sk.Pids.Len() > 0 {
		if p := s.Procs[sk.Pids.List()[0]]; p != nil && p.Workload != nil {
			return p.Workload
		}
	}
	return s.Netns.Workload
}
