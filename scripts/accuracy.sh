#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates docs/accuracy.md: runs the real-software corpus
# (internal/testkit/corpus: nginx, redis, wrk, iperf3 and python3 in network
# namespaces, each diagnosed with `tcpdoctor check`) and writes its table.
# Needs root and the packages .ci/run installs. Every false alarm and miss
# fails here, also those the corpus marks as known; the table is written
# either way and the script exits with the test's status.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "accuracy.sh: needs root (network namespaces, sock_diag of other namespaces)" >&2
  exit 2
fi
rev="${TCPDOCTOR_ACCURACY_REV:-}"
if [ -z "$rev" ]; then
  rev="commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  git diff --quiet HEAD -- cmd internal 2>/dev/null || rev="$rev with local changes"
fi
export TCPDOCTOR_ACCURACY_REV="$rev" TCPDOCTOR_CORPUS_STRICT=1
rm -f docs/accuracy.md.new
status=0
TCPDOCTOR_ACCURACY_TABLE="$PWD/docs/accuracy.md.new" \
  go test -p 1 -count=1 -v -timeout 20m -run '^TestCorpus$' ./internal/testkit/corpus/ || status=$?
if [ -s docs/accuracy.md.new ]; then
  mv docs/accuracy.md.new docs/accuracy.md
  echo "accuracy.sh: wrote docs/accuracy.md (test exit $status)" >&2
else
  echo "accuracy.sh: the corpus did not run to the end; docs/accuracy.md unchanged (test exit $status)" >&2
fi
exit "$status"
