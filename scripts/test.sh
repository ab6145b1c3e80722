#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite: unit tests, fuzz seeds, and (as root) the kernel,
# netns, lab and real-software corpus tiers. Installs the Debian packages
# the real-peer tests use when run as root and they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in iproute2 iperf3 prometheus nginx-light apache2 redis-server redis-tools postgresql-15 haproxy wrk python3 curl chromium \
  containerd runc busybox-static docker.io podman rpm qemu-user-static openjdk-17-jdk-headless maven; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "test.sh: installing ${need[*]}" >&2
    apt-get update -qq >/dev/null
    # nginx, apache2, redis, postgresql and haproxy must not start as services (the corpus runs its own
    # copies in namespaces): policy-rc.d exit 101 stops invoke-rc.d.
    policy=/usr/sbin/policy-rc.d
    made_policy=
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy"
      chmod 755 "$policy"
      made_policy=1
      trap 'rm -f "$policy"' EXIT
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    if [ -n "$made_policy" ]; then
      rm -f "$policy"
      trap - EXIT
    fi
  else
    echo "test.sh: not root: ${need[*]} missing; tests that need them will skip" >&2
  fi
fi

go vet ./...
# go.mod and go.sum must be as `go mod tidy` leaves them (it prints the diff).
if ! go mod tidy -diff; then
  echo "test.sh: go.mod/go.sum not tidy: run go mod tidy" >&2
  exit 1
fi
# golangci-lint at a pinned version, built once from the module proxy into
# GOBIN; .golangci.yml says which linters and why.
lint_version=2.15.0
lint_bin="$(go env GOBIN)"
lint="${lint_bin:-$(go env GOPATH)/bin}/golangci-lint"
if ! "$lint" version 2>/dev/null | grep -q "version $lint_version "; then
  echo "test.sh: installing golangci-lint v$lint_version" >&2
  go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$lint_version"
fi
"$lint" run ./...
# The race detector on the packages outside the namespace, lab, corpus and
# live tiers (those measure timing, which -race would distort); all run
# again without it below.
go test -race -count=1 $(go list ./... | grep -v -E '/internal/(testkit/)?(lab|livetest|corpus|netns|testns|bench|cli|labcli)(/|$)')
CGO_ENABLED=0 go build -trimpath -o bin/tcpdoctor ./cmd/tcpdoctor
CGO_ENABLED=0 go build -trimpath -o bin/tcpdoctor-lab ./cmd/tcpdoctor-lab
if [ "$(id -u)" != 0 ]; then
  echo "test.sh: not root: kernel, netns and lab tests will skip (run as root for the full suite)" >&2
fi
# -p 1: the netns, link-emulator and lab tests measure timing; packages
# running side by side on a 2-core machine starve the delay line.
# The lab tests run every scenario in its --quick form (internal/lab).
go test -p 1 -count=1 -timeout 25m ./...
