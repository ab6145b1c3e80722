// SPDX-License-Identifier: Apache-2.0

// Package k8snode pins the Kubernetes node and control-plane programs that
// scripts/k8s-node.sh builds for the real-node test. It is its own module so
// that the product's go.mod does not carry Kubernetes' dependencies.
package k8snode
