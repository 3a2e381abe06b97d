#!/usr/bin/env bash
# The screenshots of docs/explorer.md: the browser test of the explorer (tests/serve.rs), its
# models trained longer (RNNLENS_SHOT_STEPS, 600 steps by default) and its screenshots kept in
# docs/explorer/. Needs Debian's chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p docs/explorer
RNNLENS_SHOT_STEPS=${RNNLENS_SHOT_STEPS:-600} RNNLENS_SCREENSHOTS=$PWD/docs/explorer \
  cargo test --release --test serve -- --ignored the_page_in_headless_chromium
