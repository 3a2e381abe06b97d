#!/usr/bin/env bash
# rnnlens against PyTorch, in one invocation so that the ratios come from one run on one machine.
#
#   bench/run.sh                      # every shape and cell, 2 threads, shape by shape
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

# One shape at a time, rnnlens then PyTorch, with nothing else of ours running in between: a
# ratio then compares runs a minute or two apart, not the five to ten minutes that separate
# one tool's whole sweep from the other's (this machine's speed moves by 20-50 % within
# minutes). With --shapes among the arguments, each tool runs once over those shapes.
rl_logs=() pt_logs=() rl_csvs=() pt_csvs=()
run_pair() { # $1: a tag for the files; the rest: arguments for both tools
    local tag="$1"; shift
    echo "== rnnlens bench $tag ($THREADS threads)"
    ./target/release/rnnlens bench --threads "$THREADS" --csv "$results/rnnlens.$tag.csv" "$@" \
        2>&1 | tee "$results/rnnlens.$tag.log"
    echo "== PyTorch bench $tag ($THREADS threads)"
    bench/.venv/bin/python bench/pytorch_bench.py --threads "$THREADS" --csv "$results/pytorch.$tag.csv" "$@" \
        2>&1 | tee "$results/pytorch.$tag.log"
    rl_csvs+=("$results/rnnlens.$tag.csv") pt_csvs+=("$results/pytorch.$tag.csv")
    rl_logs+=("$results/rnnlens.$tag.log") pt_logs+=("$results/pytorch.$tag.log")
}
if [[ " $* " == *" --shapes "* || " $* " == *" --shapes="* ]]; then
    run_pair all "$@"
else
    for shape in c1 c2 c3 isan; do
        run_pair "$shape" --shapes "$shape" "$@"
    done
fi
# One CSV and one log per tool, as before: the header once, then every shape's rows.
join_csv() { local out="$1"; shift; { head -n 1 "$1"; for f in "$@"; do tail -n +2 "$f"; done; } > "$out"; }
join_csv "$results/rnnlens.csv" "${rl_csvs[@]}"
join_csv "$results/pytorch.csv" "${pt_csvs[@]}"
cat "${rl_logs[@]}" > "$results/rnnlens.log"
cat "${pt_logs[@]}" > "$results/pytorch.log"
rm -f "${rl_csvs[@]}" "${pt_csvs[@]}" "${rl_logs[@]}" "${pt_logs[@]}"

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
