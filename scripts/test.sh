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
# -p 1: the netns, link-emulator and lab tests measure timing; packages
# running side by side on a 2-core machine starve the delay line.
# The lab tests run every scenario in its --quick form (internal/lab).
go test -p 1 -count=1 -timeout 25m ./...
