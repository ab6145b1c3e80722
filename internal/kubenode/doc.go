// SPDX-License-Identifier: Apache-2.0

// Package kubenode holds the real-node tests: Kubernetes' own kubelet
// (and, in the full form, its control plane) on containerd's CRI, running
// the Helm chart's pod beside application pods it must name
// (scripts/k8s-node.sh builds Kubernetes and runs them). WriteImage makes
// the images those pods run without a registry.
package kubenode
