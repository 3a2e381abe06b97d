#!/usr/bin/env bash
# rnnlens against PyTorch, in one invocation so that the ratios come from one run on one machine.
#
#   bench/run.sh                      # every shape and cell, 2 threads
#   THREADS=4 bench/run.sh --shapes c1 --steps 3
#
# Extra arguments go to both benchmark commands (they share --shapes, --cells, --mode, --steps,
# --warmup). Results: bench/results/{rnnlens,pytorch}.csv, their logs, and table.md.
set -euo pipefail

THREADS="${THREADS:-2}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
results=bench/results
mkdir -p "$results"

if [ ! -x bench/.venv/bin/python ]; then
    echo "== creating bench/.venv"
    python3 -m venv bench/.venv
    bench/.venv/bin/pip install -r bench/requirements.txt
fi

echo "== building rnnlens"
cargo build --release

# Sequential: rnnlens first, then PyTorch, with nothing else of ours running in between.
echo "== rnnlens bench ($THREADS threads)"
./target/release/rnnlens bench --threads "$THREADS" --csv "$results/rnnlens.csv" "$@" \
    2>&1 | tee "$results/rnnlens.log"

echo "== PyTorch bench ($THREADS threads)"
bench/.venv/bin/python bench/pytorch_bench.py --threads "$THREADS" --csv "$results/pytorch.csv" "$@" \
    2>&1 | tee "$results/pytorch.log"

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)"
rnnlens_version="$(grep -m1 '^version' Cargo.toml | cut -d'"' -f2)"
torch_version="$(bench/.venv/bin/python -c 'import torch; print(torch.__version__)')"
python_version="$(bench/.venv/bin/python -c 'import platform; print(platform.python_version())')"

{
    echo "# rnnlens vs PyTorch"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- machine: ${cpu:-unknown}, $(nproc) logical CPUs"
    echo "- threads: $THREADS (both)"
    echo "- rnnlens $rnnlens_version, $(rustc --version 2>/dev/null || echo 'rustc unknown')"
    echo "- PyTorch $torch_version, Python $python_version"
    echo "- arguments: ${*:-(defaults)}"
    echo
    bench/.venv/bin/python bench/compare.py "$results/rnnlens.csv" "$results/pytorch.csv"
} > "$results/table.md"

echo
cat "$results/table.md"
