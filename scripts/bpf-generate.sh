#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates the committed eBPF objects and their Go bindings
# (internal/bpfsource/{lifecycle,events,socklocks,traceprog,owners}_bpfel.{o,go}) from internal/bpfsource/bpf/*.c.
# Needs clang-14 and llvm-strip-14 (Debian: apt-get install clang-14 llvm-14);
# building tcpdoctor does not.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-14 >/dev/null || { echo "bpf-generate.sh: clang-14 missing (apt-get install -y clang-14 llvm-14)" >&2; exit 1; }
go generate ./internal/bpfsource
