#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Fetches uPlot from the npm registry and copies the files the trace
# report embeds (go:embed in internal/trace/html.go) next to this script.
# Usage: internal/trace/assets/fetch-uplot.sh [VERSION]
set -eu
version=${1:-1.6.32}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$version" >/dev/null && tar -xzf uplot-"$version".tgz)
cp "$tmp/package/dist/uPlot.iife.min.js" "$here/uPlot.iife.min.js"
cp "$tmp/package/dist/uPlot.min.css" "$here/uPlot.min.css"
cp "$tmp/package/LICENSE" "$here/uPlot.LICENSE"
echo "$version" > "$here/uPlot.VERSION"
