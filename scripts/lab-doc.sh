#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates docs/lab/*.txt (full runs of every scenario) and docs/lab.md
# from them. Needs root and a few minutes; run on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# tcpdoctor-lab runs the tcpdoctor built beside it.
go build -o bin/tcpdoctor ./cmd/tcpdoctor
go build -o bin/tcpdoctor-lab ./cmd/tcpdoctor-lab
for s in $(bin/tcpdoctor-lab list | awk 'NR>1 {print $1}'); do
  rc=0
  bin/tcpdoctor-lab run "$s" > "docs/lab/$s.txt" 2>&1 || rc=$?
  echo "$s rc=$rc" | tee -a "docs/lab/$s.txt"
done
python3 scripts/lab-doc.py > docs/lab.md
