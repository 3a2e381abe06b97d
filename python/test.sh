#!/usr/bin/env bash
# The Python package's tests (.ci/run calls this after cargo test): builds the package into
# python/.venv, a virtual environment this script makes, with what the tests need, then runs
# pytest. The tests train with the rnnlens binary of `cargo build --release` (RNNLENS_BIN names
# another). Usage: [RNNLENS_PY_FEATURES=gpu] python/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x target/release/rnnlens ] || cargo build --release -q
if [ ! -x python/.venv/bin/python ]; then
  python3 -m venv python/.venv
fi
python/.venv/bin/pip install -q --upgrade pip
python/.venv/bin/pip install -q -r python/requirements-test.txt
# RNNLENS_PY_FEATURES=gpu builds the GPU engine in (.ci/run does where a Vulkan driver is present).
if [ -n "${RNNLENS_PY_FEATURES:-}" ]; then
  MATURIN_PEP517_ARGS="--features ${RNNLENS_PY_FEATURES}" python/.venv/bin/pip install -q ./python
else
  python/.venv/bin/pip install -q ./python
fi
# From the repository's root, so that the installed package (not python/rnnlens without its
# extension) is the one imported.
exec python/.venv/bin/pytest -q python/tests "$@"
