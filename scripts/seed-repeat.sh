#!/usr/bin/env bash
# Repeats the seed's own case (C1) on real software: the corpus's Dubbo 3 and
# grpc-java cases (one connection with 32K buffers, named; autotuned buffers,
# quiet) N times on this host as it is and N times with both CPUs kept busy
# by shell loops, and prints how often each was judged right, with the load
# average at each run's start (internal/corpus TestSeedRepeat). Needs root,
# java 17 and mvn (Maven Central, or the jars already in ~/.m2).
# Usage: scripts/seed-repeat.sh [N] (default 10; about 35 s a run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "seed-repeat.sh: needs root (network namespaces)" >&2
  exit 2
fi
n="${1:-10}"
TCPDOCTOR_SEED_RUNS="$n" go test -p 1 -count=1 -v -timeout 0 -run '^TestSeedRepeat$' ./internal/corpus/ |
  tee /dev/stderr | sed -n '/repeated runs/,/^ *[^ |]/p' | sed 's/^ *//; s/^rpc_test.go:[0-9]*: //' | grep -v '^---'
