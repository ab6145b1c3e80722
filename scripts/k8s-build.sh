#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds Kubernetes' kubelet, kube-apiserver, kube-controller-manager and
# kube-scheduler from the k8s.io/kubernetes module that tools/k8snode/go.mod
# pins, with the version variables Kubernetes' own build sets (as its
# hack/lib/version.sh does), and helm (by version, from the module proxy),
# into a cache directory keyed by that version, the Go version and the
# module's sums; a second run finds them there and builds nothing. Prints
# the directory.
#
#   scripts/k8s-build.sh [PROGRAM...]   (default: all four and helm)
#
# TCPDOCTOR_K8S_CACHE overrides the cache root (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/tcpdoctor/k8s).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mod=$here/tools/k8snode
all=(kubelet kube-apiserver kube-controller-manager kube-scheduler helm)
# The helm scripts/release-test.sh builds for the chart's checks.
helm_version=$(sed -n 's/^helm_version=//p' "$here/scripts/release-test.sh")
progs=("$@")
[ ${#progs[@]} -gt 0 ] || progs=("${all[@]}")
for p in "${progs[@]}"; do
  case " ${all[*]} " in *" $p "*) ;; *) echo "k8s-build: unknown program $p (want one of ${all[*]})" >&2; exit 2 ;; esac
done

cd "$mod"
version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
[[ $version =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || { echo "k8s-build: unexpected k8s.io/kubernetes version $version" >&2; exit 1; }
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
sum=$(cat go.mod go.sum $(find cmd -name '*.go' | sort) | sha256sum | cut -c1-12)
key=$version-$(go env GOVERSION)-$(go env GOARCH)-$sum
root=${TCPDOCTOR_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tcpdoctor/k8s}
out=$root/$key
mkdir -p "$out"

flags=()
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  flags+=("-X" "$pkg.gitVersion=$version" "-X" "$pkg.gitMajor=$major" "-X" "$pkg.gitMinor=$minor"
    "-X" "$pkg.gitTreeState=archive" "-X" "$pkg.buildDate=1970-01-01T00:00:00Z")
done
for p in "${progs[@]}"; do
  if [ -x "$out/$p" ]; then
    echo "k8s-build: $p cached in $out" >&2
    continue
  fi
  start=$SECONDS
  if [ "$p" = helm ]; then
    echo "k8s-build: building helm $helm_version" >&2
    rm -rf "$out/.helm"
    CGO_ENABLED=0 GOBIN="$out/.helm" go install "helm.sh/helm/v3/cmd/helm@$helm_version"
    mv "$out/.helm/helm" "$out/helm" && rmdir "$out/.helm"
  else
    echo "k8s-build: building $p $version (a cold build takes 15-30 min)" >&2
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w ${flags[*]}" -o "$out/.$p.tmp" "./cmd/$p"
    mv "$out/.$p.tmp" "$out/$p"
  fi
  echo "k8s-build: built $p in $((SECONDS - start)) s" >&2
done
echo "$out"
