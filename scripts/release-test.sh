#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The proof of the release (docs/release.md), run by .ci/run after the test
# suite: scripts/release.sh twice (the two runs must give the same bytes),
# then internal/release's checks on the artifacts: the .deb installed with
# dpkg, its tcpdoctor version and check run and the package purged; the .rpm
# files listed; the arm64 binary under qemu-user; the OCI image imported into a
# private containerd and run with the host's network namespace; the Helm chart
# linted and rendered. Prints how long each step took. As root (dpkg,
# containerd); needs the Debian packages rpm and qemu-user-static.
set -euo pipefail
cd "$(dirname "$0")/.."

helm_version=v3.22.0
version=${1:-v0.0.0-ci}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
times=()
step() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  times+=("$(printf '%4ds  %s' $((SECONDS - start)) "$name")")
}

step "release.sh $version (first run)" scripts/release.sh "$version" "$work/a"
step "release.sh $version (second run)" scripts/release.sh "$version" "$work/b"
step "helm $helm_version built from the module proxy" env GOBIN="$work/gobin" go install "helm.sh/helm/v3/cmd/helm@$helm_version"
export TCPDOCTOR_RELEASE_DIR=$work/a TCPDOCTOR_RELEASE_DIR2=$work/b TCPDOCTOR_RELEASE_VERSION=$version TCPDOCTOR_HELM=$work/gobin/helm
# One step per check, so each one's time shows.
for t in TestChecksums TestArchive TestRPM TestArm64UnderQemu TestDeb TestImage TestImageLabels TestChart; do
  step "$t" go test -count=1 -v -run "^$t\$" ./internal/release
done
echo "release-test.sh: time per step:"
printf '%s\n' "${times[@]}"
echo "release-test.sh: total ${SECONDS}s"
