#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The real-node test (internal/kubenode, docs/kubernetes-node.md): builds
# Kubernetes from its Go module and helm (scripts/k8s-build.sh, cached
# between runs), then runs, as root:
#
#   scripts/k8s-node.sh [kubelet]   the kubelet alone, the chart's pod as a
#                                   static pod (what CI runs)
#   scripts/k8s-node.sh full        etcd, kube-apiserver, kube-controller-manager,
#                                   kube-scheduler and the kubelet; helm install
#
# Needs the Debian packages containerd, runc and containernetworking-plugins
# (and etcd-server and kubectl for full). Prints the time of each part.
set -euo pipefail
cd "$(dirname "$0")/.."
form=${1:-kubelet}
case $form in
  kubelet) progs=(kubelet helm) run=TestKubeletChartPod ;;
  full) progs=(kubelet kube-apiserver kube-controller-manager kube-scheduler helm) run=TestClusterHelmInstall ;;
  *) echo "usage: scripts/k8s-node.sh [kubelet|full]" >&2; exit 2 ;;
esac
start=$SECONDS
bin=$(scripts/k8s-build.sh "${progs[@]}")
built=$((SECONDS - start))
start=$SECONDS
# On Ctrl-C the test stops where it waits and cleans up before it exits
# (go test waits for it): wait for that rather than leave while it cleans.
trap 'echo "k8s-node.sh: interrupted: the test stops its node" >&2' INT
TCPDOCTOR_K8S_BIN=$bin TCPDOCTOR_KUBELET=$bin/kubelet TCPDOCTOR_HELM=$bin/helm \
  go test -count=1 -v -timeout 25m -run "^$run\$" ./internal/kubenode
echo "k8s-node.sh: $form: build ${built}s (cached in $bin), test $((SECONDS - start))s"
