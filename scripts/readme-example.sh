#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Reproduces the example in README.md: a server that listens with backlog 8
# and never accepts, a burst of 200 connects, and `tcpdoctor check` on its
# namespace. Everything happens in a namespace this script creates and
# removes. Needs root, bin/tcpdoctor and bin/tcpdoctor-lab, whose traffic
# generators make the load (go build -o bin/ ./cmd/tcpdoctor ./cmd/tcpdoctor-lab).
set -euo pipefail
cd "$(dirname "$0")/.."
ns=tdexample-$$
ip netns add "$ns"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
ip -n "$ns" link set lo up
ip netns exec "$ns" bin/tcpdoctor-lab traffic storm-server --addr 127.0.0.1:8080 --backlog 8 --accept-rate 0 \
  --comm api-server --duration 10s >/dev/null & pids+=($!)
sleep 0.5
ip netns exec "$ns" bin/tcpdoctor-lab traffic storm-client --addr 127.0.0.1:8080 --count 200 --rate 200 \
  --connect-timeout 3s --duration 5s >/dev/null & pids+=($!)
bin/tcpdoctor check --netns "$ns" --interval 2s || true
