#!/usr/bin/env bash
# The whole test suite: unit tests, fuzz seeds, and (as root) the kernel,
# netns and lab tiers. Installs the Debian packages the real-peer tests use
# when run as root and they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in iproute2 iperf3 prometheus; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "test.sh: installing ${need[*]}" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "test.sh: not root: ${need[*]} missing; tests that need them will skip" >&2
  fi
fi

go vet ./...
CGO_ENABLED=0 go build -trimpath -o bin/tcpdoctor ./cmd/tcpdoctor
if [ "$(id -u)" != 0 ]; then
  echo "test.sh: not root: kernel, netns and lab tests will skip (run as root for the full suite)" >&2
fi
go test -count=1 -timeout 20m ./...
if [ "$(id -u)" = 0 ]; then
  # The lab tier: every scenario in its quick form, in namespaces it creates.
  bin/tcpdoctor lab clean
  bin/tcpdoctor lab run all --quick
fi
