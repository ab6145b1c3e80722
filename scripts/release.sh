#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/release.sh VERSION [OUTDIR]: the release artifacts of the commit
# checked out (HEAD), built from a clean clone of it, reproducibly: two runs
# of one commit give the same bytes (docs/release.md).
#
#   OUTDIR (default dist/VERSION):
#     tcpdoctor_X.Y.Z_linux_{amd64,arm64}.tar.gz  tcpdoctor and tcpdoctor-lab, README, LICENSE, NOTICE, licences, docs, man pages, completions
#     tcpdoctor_X.Y.Z_{amd64,arm64}.deb, tcpdoctor-X.Y.Z-1.{x86_64,aarch64}.rpm  (both binaries)
#     tcpdoctor_X.Y.Z_oci.tar                    OCI image layout: multi-arch index, FROM scratch (tcpdoctor only)
#     tcpdoctor-X.Y.Z.tgz                        the Helm chart (deploy/helm/tcpdoctor)
#     SHA256SUMS
#
# Go tools run by version from the module proxy (nfpm) or from tools/go.mod
# (man pages, completions, the image); nothing prebuilt is downloaded.
set -euo pipefail

nfpm_version=v2.45.2

version=${1:-}
if ! [[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "usage: scripts/release.sh vX.Y.Z[-suffix] [OUTDIR]" >&2
  exit 2
fi
semver=${version#v}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$repo/dist/$version}
commit=$(git -C "$repo" rev-parse HEAD)
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  echo "release.sh: note: changes not committed are not in the release (it builds commit ${commit:0:12})" >&2
fi
# Every date in the artifacts is the commit's.
SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct "$commit")
export SOURCE_DATE_EPOCH TZ=UTC LC_ALL=C
umask 022

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A clone of the commit: nothing uncommitted or ignored gets in, and the Go
# toolchain stamps the commit (it does not in a git worktree).
git clone --quiet --no-checkout "$repo" "$work/src"
git -C "$work/src" -c advice.detachedHead=false checkout --quiet "$commit"
src=$work/src
mkdir -p "$out"
rm -f "$out"/tcpdoctor[_-]* "$out"/SHA256SUMS

# tarball DIR PARENT FILE: PARENT/DIR as a gzipped tar with sorted names,
# root ownership and the commit's time on every entry.
tarball() {
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --format=gnu -C "$2" -cf - "$1" | gzip -9n >"$3"
}

export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
ldflags="-s -w -buildid= -X github.com/tcpdoctor/tcpdoctor/internal/version.version=$version"
for arch in amd64 arm64; do
  echo "release.sh: building linux/$arch" >&2
  # tcpdoctor, and tcpdoctor-lab (the lab and benches), which runs the
  # tcpdoctor beside it.
  for cmd in tcpdoctor tcpdoctor-lab; do
    (cd "$src" && GOOS=linux GOARCH=$arch go build -trimpath -buildvcs=true -ldflags="$ldflags" \
      -o "$work/bin/$arch/$cmd" "./cmd/$cmd")
  done
done

echo "release.sh: man pages and completions" >&2
(cd "$src/tools" && go run ./genman -version "$version" -out "$work/gen")
gzip -9n "$work"/gen/man/man1/*.1

# The licences of the Go modules built into the binary (they ask for their
# notices to travel with it), and the project's own when it has one.
mkdir -p "$work/licenses"
(cd "$src" && go list -deps -f '{{with .Module}}{{.Path}} {{.Dir}}{{end}}' ./cmd/tcpdoctor) | sort -u |
  while read -r mod dir; do
    [ "$mod" = github.com/tcpdoctor/tcpdoctor ] && continue
    for f in "$dir"/LICENSE* "$dir"/LICENCE* "$dir"/COPYING* "$dir"/NOTICE*; do
      [ -f "$f" ] || continue
      mkdir -p "$work/licenses/$mod"
      cp "$f" "$work/licenses/$mod/"
    done
  done
# The project's own licence (Apache-2.0; the eBPF programs Dual BSD/GPL)
# travels in every archive, package and image.
for f in LICENSE NOTICE; do
  [ -f "$src/$f" ] || { echo "release.sh: $src/$f missing: every artifact carries the project's licence" >&2; exit 1; }
done
# Debian's machine-readable copyright file, for the .deb and the .rpm's doc dir.
cat >"$work/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: tcpdoctor
Source: https://github.com/tcpdoctor/tcpdoctor

Files: *
Copyright: the tcpdoctor developers
License: Apache-2.0

Files: internal/bpfsource/bpf/*
Copyright: the tcpdoctor developers
License: BSD-2-Clause or GPL-2.0-only
Comment: the eBPF programs loaded into the kernel carry the licence string
 "Dual BSD/GPL", which the kernel requires for the GPL-only helpers they call.

Files: licenses/*
Copyright: see each module's own files under /usr/share/doc/tcpdoctor/licenses
License: see each file

License: Apache-2.0
$(sed -e 's/^$/./' -e 's/^/ /' "$src/LICENSE")
COPYRIGHT

# The packaged unit: deploy/systemd's hardened unit, with the binary where
# packages put it and its arguments in the defaults file.
unit_src=$src/deploy/systemd/tcpdoctor.service
args=$(sed -n 's|^ExecStart=/usr/local/bin/tcpdoctor serve \(.*\)$|\1|p' "$unit_src")
if [ -z "$args" ]; then
  echo "release.sh: $unit_src: no 'ExecStart=/usr/local/bin/tcpdoctor serve ...' line to package" >&2
  exit 1
fi
args=$(sed 's/--listen /--web.listen-address=/' <<<"$args")
mkdir -p "$work/pkg"
sed -e 's|^ExecStart=.*$|EnvironmentFile=-/etc/default/tcpdoctor\nEnvironmentFile=-/etc/sysconfig/tcpdoctor\nExecStart=/usr/bin/tcpdoctor serve $TCPDOCTOR_ARGS|' \
  -e 's|^# Install: deploy/systemd/README.md.|# Installed by the tcpdoctor package, not enabled or started: systemctl enable --now tcpdoctor|' \
  "$unit_src" >"$work/pkg/tcpdoctor.service"
cat >"$work/pkg/tcpdoctor.default" <<DEFAULTS
# Arguments of tcpdoctor serve, the tcpdoctor systemd unit (tcpdoctor serve --help,
# /usr/share/doc/tcpdoctor/exporter.md). For TLS and basic auth add
# --web.config.file=/etc/tcpdoctor/web.yml.
TCPDOCTOR_ARGS="$args"
DEFAULTS
cat >"$work/pkg/postinstall.sh" <<'POST'
#!/bin/sh
# The unit is installed, not enabled or started: systemctl enable --now tcpdoctor
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
POST
cp "$work/pkg/postinstall.sh" "$work/pkg/postremove.sh"

for arch in amd64 arm64; do
  name=tcpdoctor_${semver}_linux_$arch
  stage=$work/stage/$name
  mkdir -p "$stage/docs" "$stage/licenses"
  install -m 0755 "$work/bin/$arch/tcpdoctor" "$work/bin/$arch/tcpdoctor-lab" "$stage/"
  install -m 0644 "$src/README.md" "$stage/README.md"
  install -m 0644 "$src/LICENSE" "$src/NOTICE" "$stage/"
  (cd "$src/docs" && find . -name '*.md' -exec cp --parents {} "$stage/docs/" \;)
  cp -r "$work/gen/man" "$work/gen/completions" "$stage/"
  cp -r "$work/licenses/." "$stage/licenses/"
  find "$stage" -type d -exec chmod 0755 {} + && find "$stage" -type f ! -name tcpdoctor ! -name tcpdoctor-lab -exec chmod 0644 {} +
  tarball "$name" "$work/stage" "$out/$name.tar.gz"

  # .deb and .rpm: the same files at the system's places.
  cat >"$work/pkg/nfpm-$arch.yaml" <<NFPM
name: tcpdoctor
arch: $arch
platform: linux
version: $version
version_schema: semver
release: "1"
section: net
priority: optional
maintainer: tcpdoctor developers <noreply@tcpdoctor.invalid>
license: Apache-2.0
description: |-
  Tells why TCP services are slow or fail to connect, with kernel evidence and the fix.
  check, sockets, trace, watch, record, and serve: a Prometheus exporter (systemd unit
  tcpdoctor.service, installed but not enabled or started); tcpdoctor-lab reproduces the
  case catalogue in network namespaces and measures tcpdoctor.
mtime: "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
contents:
  - src: $stage/tcpdoctor
    dst: /usr/bin/tcpdoctor
    file_info: {mode: 0755}
  - src: $stage/tcpdoctor-lab
    dst: /usr/bin/tcpdoctor-lab
    file_info: {mode: 0755}
  - src: $stage/man/man1
    dst: /usr/share/man/man1
  - src: $stage/completions/tcpdoctor.bash
    dst: /usr/share/bash-completion/completions/tcpdoctor
  - src: $stage/completions/_tcpdoctor
    dst: /usr/share/zsh/vendor-completions/_tcpdoctor
  - src: $stage/completions/tcpdoctor.fish
    dst: /usr/share/fish/vendor_completions.d/tcpdoctor.fish
  - src: $stage/completions/tcpdoctor-lab.bash
    dst: /usr/share/bash-completion/completions/tcpdoctor-lab
  - src: $stage/completions/_tcpdoctor-lab
    dst: /usr/share/zsh/vendor-completions/_tcpdoctor-lab
  - src: $stage/completions/tcpdoctor-lab.fish
    dst: /usr/share/fish/vendor_completions.d/tcpdoctor-lab.fish
  - src: $work/pkg/tcpdoctor.service
    dst: /usr/lib/systemd/system/tcpdoctor.service
  - src: $work/pkg/tcpdoctor.default
    dst: /etc/default/tcpdoctor
    type: config|noreplace
    packager: deb
  - src: $work/pkg/tcpdoctor.default
    dst: /etc/sysconfig/tcpdoctor
    type: config|noreplace
    packager: rpm
  - src: $stage/README.md
    dst: /usr/share/doc/tcpdoctor/README.md
  - src: $stage/docs
    dst: /usr/share/doc/tcpdoctor
  - src: $stage/licenses
    dst: /usr/share/doc/tcpdoctor/licenses
  - src: $work/copyright
    dst: /usr/share/doc/tcpdoctor/copyright
  - src: $stage/LICENSE
    dst: /usr/share/doc/tcpdoctor/LICENSE
  - src: $stage/NOTICE
    dst: /usr/share/doc/tcpdoctor/NOTICE
scripts:
  postinstall: $work/pkg/postinstall.sh
  postremove: $work/pkg/postremove.sh
NFPM
  for fmt in deb rpm; do
    (cd "$work" && go run "github.com/goreleaser/nfpm/v2/cmd/nfpm@$nfpm_version" package \
      -f "$work/pkg/nfpm-$arch.yaml" -p "$fmt" -t "$out/") >&2
  done
done

echo "release.sh: OCI image" >&2
(cd "$src/tools" && go run ./ociimage -version "$version" -revision "$commit" -out "$out/tcpdoctor_${semver}_oci.tar" \
  -bin "linux/amd64=$work/bin/amd64/tcpdoctor" -bin "linux/arm64=$work/bin/arm64/tcpdoctor")

echo "release.sh: Helm chart" >&2
mkdir -p "$work/chart"
cp -rL "$src/deploy/helm/tcpdoctor" "$work/chart/tcpdoctor"
install -m 0644 "$src/LICENSE" "$work/chart/tcpdoctor/LICENSE"
sed -i -e "s|^version: .*|version: $semver|" -e "s|^appVersion: .*|appVersion: \"$version\"|" "$work/chart/tcpdoctor/Chart.yaml"
find "$work/chart" -type d -exec chmod 0755 {} + && find "$work/chart" -type f -exec chmod 0644 {} +
tarball tcpdoctor "$work/chart" "$out/tcpdoctor-$semver.tgz"

(cd "$out" && sha256sum tcpdoctor[_-]* >SHA256SUMS)
# The binaries too, for the checks of scripts/release-test.sh.
for arch in amd64 arm64; do
  for cmd in tcpdoctor tcpdoctor-lab; do install -D -m 0755 "$work/bin/$arch/$cmd" "$out/bin/linux_$arch/$cmd"; done
done
echo "release.sh: $version (commit ${commit:0:12}) in $out:" >&2
(cd "$out" && ls -l tcpdoctor[_-]* SHA256SUMS) >&2
