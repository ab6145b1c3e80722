// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"strconv"

	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

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

// labelsOf names namespace netns and workload w (nil: none known): the
// one place a subject's workload becomes labels. The pod's namespace is
// the label "namespace" (JSON's "pod_namespace"; docs/exporter.md).
// container is the name, else the short id; empty for a pod's sandbox,
// which has no container of its own.
func labelsOf(netns string, w *snapshot.Workload) nsLabels {
	n := w.Names()
	return nsLabels{netns, n.Pod, n.PodNamespace, n.Container}
}

// with returns the label values followed by extra, for viewBuilder.add.
func (n nsLabels) with(extra ...string) []string {
	out := make([]string, 0, len(n)+len(extra))
	out = append(out, n[:]...)
	return append(out, extra...)
}

// findingLabels are the values of tcpdoctor_finding's labels for f
// (descs.go names them): its subject's namespace and workload (labelsOf),
// its rule and severity, addresses, process, and the pod of its other
// end when the finding found that on this host (one value per finding:
// no new series).
func findingLabels(f *diag.Finding) []string {
	s := &f.Subject
	pid := ""
	if s.Pid > 0 {
		pid = strconv.Itoa(s.Pid)
	}
	var peer nsLabels
	if s.Peer != nil {
		peer = labelsOf(s.Peer.Netns, s.Peer.Workload)
	}
	return labelsOf(s.Netns, s.Workload).with(f.Rule, f.Severity.String(), s.Local.String(), s.Remote.String(), pid, s.Command, peer[1], peer[2])
}
