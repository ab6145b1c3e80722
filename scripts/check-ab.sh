#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compare `check --interval 1s --json` of two or more tcpdoctor binaries in
# one namespace filled once: the binaries run in turn, ROUNDS times, each
# run printing its wall, user and system CPU time and peak RSS, and, once
# a round, `ss -tin`'s times: its system time is what the kernel spends
# filling one dump with tcp_info. (Where the collection's time goes:
# `tcpdoctor-lab bench --phases`.)
# Running both binaries against the very same sockets, back to back, is
# what tells a change apart on a busy host, where a fresh bench fill per
# binary moves the figures by seconds (docs/performance-history.md, "`check` at a million sockets").
#
#   sudo scripts/check-ab.sh [-n CONNS] [-r ROUNDS] [-c ARGS] [-l LAB] BINARY...
#
# -c gives the arguments the binaries run with instead of `check
# --interval 1s --json` (split as the shell splits words), e.g. -c
# "sockets --no-owners" to compare listings; given more than once, each
# binary runs with each in turn, to compare two ways of one binary.
# It needs root and GNU time (/usr/bin/time). The namespace (tdab-PID)
# holds CONNS loopback connections (default 500000, a million sockets:
# about 4 GB of kernel memory), opened by holders started from
# tcpdoctor-lab (`tcpdoctor-lab hold`, at most 9,000 connections each):
# -l LAB, else the tcpdoctor-lab beside the first binary, else the one on
# $PATH; they and the namespace are removed on exit, Ctrl-C included.
set -euo pipefail

conns=500000
rounds=3
argsets=()
lab=
while getopts "n:r:c:l:" o; do
  case $o in
  n) conns=$OPTARG ;;
  r) rounds=$OPTARG ;;
  c) argsets+=("$OPTARG") ;;
  l) lab=$OPTARG ;;
  *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ ${#argsets[@]} -gt 0 ] || argsets=("check --interval 1s --json")
if [ $# -lt 1 ]; then
  echo "usage: sudo $0 [-n CONNS] [-r ROUNDS] [-c ARGS] [-l LAB] BINARY..." >&2
  exit 2
fi
if [ -z "$lab" ]; then
  lab=$(dirname "$1")/tcpdoctor-lab
  [ -x "$lab" ] || lab=$(command -v tcpdoctor-lab || true)
fi
[ -n "$lab" ] && [ -x "$lab" ] || { echo "check-ab.sh: no tcpdoctor-lab beside $1 nor on PATH (give -l LAB)" >&2; exit 2; }
if [ "$(id -u)" != 0 ]; then
  echo "check-ab.sh: needs root (network namespaces, eBPF)" >&2
  exit 2
fi
for b in "$@"; do
  [ -x "$b" ] || { echo "check-ab.sh: $b is not an executable" >&2; exit 2; }
done
[ -x /usr/bin/time ] || { echo "check-ab.sh: needs GNU time (/usr/bin/time)" >&2; exit 2; }

ns=tdab-$$
work=$(mktemp -d)
pids=()
cleanup() {
  # Holders end when their stdin closes; killed by pid if not.
  exec {hold}>&- 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$ns"
ip -n "$ns" link set lo up
ulimit -n 20000
# One pipe feeds every holder's stdin; closing it ends them all.
mkfifo "$work/hold"
sleep infinity >"$work/hold" &
pids+=($!)
exec {hold}<"$work/hold"
left=$conns
i=0
start=$(date +%s)
while [ "$left" -gt 0 ]; do
  k=$((left < 9000 ? left : 9000))
  "$lab" hold "$ns" --conns "$k" <&$hold >"$work/out$i" 2>&1 &
  pids+=($!)
  until grep -q ready "$work/out$i" 2>/dev/null; do
    kill -0 "${pids[-1]}" 2>/dev/null || { echo "check-ab.sh: holder failed: $(cat "$work/out$i")" >&2; exit 3; }
    sleep 0.05
  done
  left=$((left - k))
  i=$((i + 1))
done
echo "check-ab.sh: $conns connections in netns $ns, $i holders, $(($(date +%s) - start)) s; $(ip netns exec "$ns" awk '/^TCP:/{print $3}' /proc/net/sockstat) TCP sockets in use"

for r in $(seq "$rounds"); do
  # The kernel's side of one dump with tcp_info: ss's system time.
  /usr/bin/time -f "ss -tin: wall %e s, user %U s, sys %S s, peak RSS %M KiB" -o "$work/time" \
    nsenter --net="/run/netns/$ns" ss -tin >/dev/null 2>&1 || true
  echo "== round $r: $(cat "$work/time")"
  for b in "$@"; do
    for args in "${argsets[@]}"; do
      echo "== round $r: $b $args; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
      # shellcheck disable=SC2086 # args are words
      /usr/bin/time -f "wall %e s, user %U s, sys %S s, peak RSS %M KiB" -o "$work/time" \
        nsenter --net="/run/netns/$ns" "$b" $args >/dev/null 2>"$work/err" || true
      cat "$work/time"
    done
  done
done
