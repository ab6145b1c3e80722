#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Rerun the commands behind docs/performance.md's figures, one after the
# other, each output saved with the time, load average, process count and
# commit it ran under, so the document can be checked or refreshed in one
# go on a quiet machine.
#
#   sudo scripts/perf-figures.sh [-o DIR] [STEP...]
#
# STEP is one of the names below (default: all, in this order; a step
# named twice runs twice); outputs go to DIR/N-STEP.txt (default
# /tmp/tcpdoctor-perf-figures). It needs
# root (namespaces, eBPF), builds bin/tcpdoctor and bin/tcpdoctor-lab
# (which runs the tcpdoctor beside it) first, and runs nothing
# beside the steps: run it alone.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${TMPDIR:-/tmp}/tcpdoctor-perf-figures
while getopts "o:" o; do
  case $o in
  o) out=$OPTARG ;;
  *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ "$(id -u)" != 0 ]; then
  echo "perf-figures.sh: needs root (network namespaces, eBPF)" >&2
  exit 2
fi

td=bin/tcpdoctor
lab=bin/tcpdoctor-lab
declare -A steps=(
  [collection]="$lab bench --sizes 20000,100000 --runs 7 --phases"
  [collection-procs]="$lab bench --sizes 20000 --runs 7 --only sockets,no-owners,json,proc-owners --procs 2000 --phases"
  [collection-procs4000]="$lab bench --sizes 20000 --runs 15 --only sockets,json,no-owners --procs 4000 --phases"
  [netns-walk]="go test -count=1 -run XXX -bench ProcessNetns -benchtime 50x ./internal/bpfsource"
  [netns-links]="go test -count=1 -run XXX -bench ByProcess -benchtime 50x ./internal/netns"
  [million]="$lab bench --sizes 1000000 --runs 3 --only check,record,serve"
  [million-phases]="$lab bench --sizes 1000000 --runs 3 --only check --phases"
  [serve-10k]="$lab serve-bench --conns 5000 --cycles 5 --interval 2s"
  [serve-100k]="$lab serve-bench --conns 50000 --cycles 5 --interval 5s"
  [trace-bpf]="$lab trace-bench --others 50000 --matched 100 --rate 100 --duration 30s --bpf"
  [trace]="$lab trace-bench --others 50000 --matched 100 --rate 100 --duration 30s"
  [lookup-cost]="env TCPDOCTOR_LOOKUP_COST=100 go test -count=1 ./internal/sockdiag -run TestLookupCost -v"
  [trace-hooks]="env TCPDOCTOR_BPF_COST=1 go test -count=1 -run TestTraceHookCost -v ./internal/bpfsource"
  [trace-c5]="$lab run c5-small-rcvbuf --quick --html $out/trace-reports"
  [trace-c3]="$lab run c3-pinned-sndbuf --quick --html $out/trace-reports"
  [link]="$lab link-bench"
  [bpf-cost]="env TCPDOCTOR_BPF_COST=1 go test -count=1 -run TestCost -v ./internal/bpfsource"
  [history-10k]="$lab serve-bench --history --conns 5000 --cycles 20"
  [history-100k]="$lab serve-bench --history --conns 50000 --cycles 6"
  [history-trace]="go test -count=1 -v -run TestHistoryLiveTrace ./internal/cli/"
  [serve-with-history]="$lab serve-bench --conns 5000 --cycles 5 --interval 2s --with-history"
)
order=(collection collection-procs collection-procs4000 netns-walk netns-links million million-phases serve-10k serve-100k trace-bpf trace
  lookup-cost trace-hooks trace-c5 trace-c3 link bpf-cost history-10k history-100k history-trace
  link link serve-with-history)
[ $# -gt 0 ] && order=("$@")
for s in "${order[@]}"; do
  [ -n "${steps[$s]:-}" ] || { echo "perf-figures.sh: no step $s (have: ${!steps[*]})" >&2; exit 2; }
done

go build -o "$td" ./cmd/tcpdoctor
go build -o "$lab" ./cmd/tcpdoctor-lab
mkdir -p "$out"
n=0
for s in "${order[@]}"; do
  n=$((n + 1))
  f="$out/$n-$s.txt"
  {
    echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD)$(git diff --quiet || echo +changes)"
    echo "# loadavg $(cut -d' ' -f1-3 /proc/loadavg), $(ls -d /proc/[0-9]* | wc -l) processes"
    echo "\$ ${steps[$s]}"
  } >"$f"
  echo "perf-figures.sh: $s" >&2
  # shellcheck disable=SC2086 # the step is a command line
  ${steps[$s]} >>"$f" 2>&1 || echo "# exit status $?" >>"$f"
  echo "# ended $(date -u +%FT%TZ), loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >>"$f"
done
echo "perf-figures.sh: outputs in $out/" >&2
