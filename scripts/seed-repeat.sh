#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Repeats the seed's own case (C1) on real software: the corpus's Dubbo 3 and
# grpc-java cases (one connection with 32K buffers, named; autotuned buffers,
# quiet) N times on this host as it is and N times with both CPUs kept busy
# by shell loops, and writes how often each was judged right, with the load
# average at each run's start, to docs/accuracy-seed.md (internal/testkit/corpus
# TestSeedRepeat); the section in docs/accuracy.md is replaced by it, and
# scripts/accuracy.sh includes it. Needs root, java 17 and mvn (Maven
# Central, or the jars already in ~/.m2).
# A run whose workload breaks its case's own claim is invalid: listed with what
# check said, counted neither way, and it fails the test (exit 1).
# Usage: scripts/seed-repeat.sh [N] (default 10; 8 N runs of about 45 s: N=3
# took 17m40s at load average 9-34).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "seed-repeat.sh: needs root (network namespaces)" >&2
  exit 2
fi
n="${1:-10}"
rev="${TCPDOCTOR_ACCURACY_REV:-}"
if [ -z "$rev" ]; then
  rev="commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  git diff --quiet HEAD -- cmd internal 2>/dev/null || rev="$rev with local changes"
fi
status=0
rm -f docs/accuracy-seed.md.new
TCPDOCTOR_ACCURACY_REV="$rev" TCPDOCTOR_SEED_RUNS="$n" TCPDOCTOR_SEED_TABLE="$PWD/docs/accuracy-seed.md.new" \
  go test -p 1 -count=1 -v -timeout 0 -run '^TestSeedRepeat$' ./internal/testkit/corpus/ || status=$?
if [ ! -s docs/accuracy-seed.md.new ]; then
  echo "seed-repeat.sh: the runs did not finish; nothing written (test exit $status)" >&2
  exit 1
fi
mv docs/accuracy-seed.md.new docs/accuracy-seed.md
cat docs/accuracy-seed.md
# docs/accuracy.md: everything before the section, then the new section.
if [ -f docs/accuracy.md ]; then
  awk '/^## The seed'"'"'s case, repeated$/ {exit} {print}' docs/accuracy.md >docs/accuracy.md.new
  if [ "$(tail -c1 docs/accuracy.md.new | od -An -c | tr -d ' ')" != '\n' ]; then echo >>docs/accuracy.md.new; fi
  printf '\n' >>docs/accuracy.md.new
  cat docs/accuracy-seed.md >>docs/accuracy.md.new
  mv docs/accuracy.md.new docs/accuracy.md
fi
echo "seed-repeat.sh: wrote docs/accuracy-seed.md and its section in docs/accuracy.md (test exit $status)" >&2
exit "$status"
