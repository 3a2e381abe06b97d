#!/usr/bin/env bash
# rnnlens against PyTorch, in one invocation so that the ratios come from one run on one machine.
#
#   bench/run.sh                      # every shape and cell, 2 threads, cell by cell, one round
#   ROUNDS=3 bench/run.sh             # the same three times over; the table gives medians
#   THREADS=4 bench/run.sh --shapes c1 --steps 3
#   PRECISION=both bench/run.sh --shapes c1,c2   # each pair in f32, then in bf16 (rnnlens
#                                     # --precision bf16 against PyTorch's bf16 autocast)
#
# Extra arguments go to both benchmark commands (they share --shapes, --cells, --mode, --steps,
# --warmup). Results: bench/results/{rnnlens,pytorch}.csv (one row per round), their logs, and
# table.md.
set -euo pipefail

THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-1}"
case "${PRECISION:-f32}" in
    f32|bf16) precisions="${PRECISION:-f32}" ;;
    both) precisions="f32 bf16" ;;
    *) echo "run.sh: PRECISION must be f32, bf16 or both, not '$PRECISION'" >&2; exit 2 ;;
esac
if ! [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]]; then
    echo "run.sh: ROUNDS must be a whole number of at least 1, not '$ROUNDS'" >&2
    exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
results=bench/results
mkdir -p "$results"

# --shapes and --cells choose the pairs; everything else goes to both tools as given.
arguments="${*:-(defaults)}"
shapes="c1,c2,c3,isan" cells="" rest=()
while [ $# -gt 0 ]; do
    case "$1" in
        --shapes) shapes="${2:?--shapes needs a value}"; shift 2 ;;
        --shapes=*) shapes="${1#--shapes=}"; shift ;;
        --cells) cells="${2:?--cells needs a value}"; shift 2 ;;
        --cells=*) cells="${1#--cells=}"; shift ;;
        *) rest+=("$1"); shift ;;
    esac
done
dense_cells="lstm,gru,rnn,ran-tanh,rwa,rda-exp-tanh,rda-sigmoid-id"
pairs=()
for shape in $(echo "$shapes" | tr , ' '); do
    case "$shape" in
        c1|c2|c3)
            for cell in $(echo "${cells:-$dense_cells}" | tr , ' '); do
                if [ "$cell" != isan ]; then pairs+=("$shape $cell"); fi
            done ;;
        isan)
            if [[ -z "$cells" || ",$cells," == *",isan,"* ]]; then pairs+=("isan isan"); fi ;;
        *) echo "run.sh: unknown shape '$shape' (c1, c2, c3, isan)" >&2; exit 2 ;;
    esac
done
if [ ${#pairs[@]} -eq 0 ]; then
    echo "run.sh: no (shape, cell) pair to run: isan runs only on the isan shape, the other cells only on c1-c3" >&2
    exit 2
fi

if [ ! -x bench/.venv/bin/python ]; then
    echo "== creating bench/.venv"
    python3 -m venv bench/.venv
    bench/.venv/bin/pip install -r bench/requirements.txt
fi

echo "== building rnnlens"
cargo build --release

# One cell at a time, rnnlens then PyTorch on that shape and cell, with nothing else of ours
# running in between: a ratio then compares runs seconds apart, not the minutes that separate
# one tool's whole sweep from the other's (this machine's speed moves by 20-50 % within
# minutes; whole sweeps gave C2 LSTM ratios from 0.95x to 1.24x where alternated rounds gave
# 1.26-1.35x). With ROUNDS > 1 the whole sequence repeats, so each cell's rounds are minutes
# apart, and compare.py reports the medians and the spread of the per-round ratios.
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
for round in $(seq 1 "$ROUNDS"); do
    for pair in "${pairs[@]}"; do
        set -- $pair
        for p in $precisions; do
            run_pair "r$round.$p.$1.$2" --shapes "$1" --cells "$2" --precision "$p" ${rest[@]+"${rest[@]}"}
        done
    done
done
# One CSV and one log per tool: the header once, then every pair's rows, round after round.
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
    echo "- rounds: $ROUNDS (each tool, cell by cell, alternated)"
    echo "- precision: $precisions (bf16: rnnlens --precision bf16, PyTorch under torch.autocast(dtype=torch.bfloat16); CPU flags: $(grep -o 'amx_bf16\|avx512_bf16' /proc/cpuinfo | sort -u | paste -sd, - || echo none))"
    grep -m1 -h '^precision: bf16' "$results/rnnlens.log" | sed 's/^precision: bf16 (GEMM kernels: \(.*\))$/- rnnlens bf16 kernel: \1/' || true
    echo "- rnnlens $rnnlens_version, $(rustc --version 2>/dev/null || echo 'rustc unknown')"
    echo "- PyTorch $torch_version, Python $python_version"
    echo "- arguments: $arguments"
    # Each rnnlens process measures the machine's FMA limit first (not with --no-peak).
    for p in f32 bf16; do
        grep -h "^machine limit: [0-9.]* GFLOP/s in $p" "$results/rnnlens.log" | awk '{print $3}' | sort -n | awk -v p="$p" '
            { v[NR] = $1 } END { if (NR) printf "- machine limit in %s (independent FMA or VDPBF16PS chains on every thread, %d measurements): %s-%s GFLOP/s, median %s\n", p, NR, v[1], v[NR], v[int((NR + 1) / 2)] }'
    done
    echo
    bench/.venv/bin/python bench/compare.py "$results/rnnlens.csv" "$results/pytorch.csv"
} > "$results/table.md"

echo
cat "$results/table.md"
