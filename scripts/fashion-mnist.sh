#!/usr/bin/env bash
# Make the Fashion-MNIST IDX files available (Debian's dataset-fashion-mnist package puts them
# under /usr/share/datasets/fashion-mnist/) and print the directory for `rnnlens task --data`.
# Usage: DIR=$(scripts/fashion-mnist.sh) && rnnlens task seq-mnist --data "$DIR"
set -euo pipefail
dir=/usr/share/datasets/fashion-mnist
if [ ! -f "$dir/train-images-idx3-ubyte.gz" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "installing dataset-fashion-mnist needs root: run this script as root (or apt-get install dataset-fashion-mnist)" >&2
    exit 1
  fi
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) >&2
fi
echo "$dir"
