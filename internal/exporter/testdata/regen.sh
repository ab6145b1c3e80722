#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerate pair.jsonl (root): two real samples 1 s apart of a namespace
# running workload.py. Then: go test ./internal/exporter -run Golden -update
set -euo pipefail
cd "$(dirname "$0")"
ns=tdx-golden-$$
ip netns add "$ns"
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; ip netns del "$ns"; }
trap cleanup EXIT
ip -n "$ns" link set lo up
(cd ../../.. && go build -o /tmp/tcpdoctor-regen ./cmd/tcpdoctor)
exec 3< <(ip netns exec "$ns" python3 workload.py)
pid=$!
read -r line <&3
[ "$line" = ready ]
sleep 1.5
/tmp/tcpdoctor-regen record --netns "$ns" --interval 1s --count 2 -o - | sed "s/\"$ns\"/\"golden\"/g" > pair.jsonl
wait "$pid" || true
pid=
