#!/usr/bin/env bash
# The quality check of bf16 mixed precision (docs/benchmarks.md, "bf16 against f32: quality"):
# the docs/lm.md one-epoch set-up (`rnnlens train` with its defaults: the embedded Brown corpus,
# 256 units, one epoch), LSTM and RAN-tanh, three seeds, in f32 and in bf16; then every bf16
# checkpoint scored in f32 and every f32 one in bf16 (`eval --precision`). Prints one table row
# per run (validation perplexity as train reports it, and the cross-scored test perplexity) and
# writes them to $OUT_DIR/quality.tsv. Needs a CPU with AVX512-BF16; about 1-2 minutes a run on
# 2 cores. HALF=f16 checks the GPU's f16 the same way (`--device gpu`, both precisions there;
# a build with --features gpu): the issue's "within 1 % of f32, three seeds", for a lent GPU.
#
#   scripts/bf16-quality.sh                 # everything
#   CELLS=lstm SEEDS=1 scripts/bf16-quality.sh
#   RNNLENS=/path/to/rnnlens scripts/bf16-quality.sh   # a binary built already
#   HALF=f16 RNNLENS=.gpu/rnnlens scripts/bf16-quality.sh   # f16 against f32 on the GPU
#   EXTRA="--max-steps 2 --hidden-size 8" ...         # extra train options (a quick dry run)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${RNNLENS:-}" ]; then
  bin=$RNNLENS
else
  cargo build --release -q
  bin=target/release/rnnlens
fi
half=${HALF:-bf16}
device=cpu
[ "$half" = f16 ] && device=gpu
root=${OUT_DIR:-runs/$half-quality}
mkdir -p "$root"
tsv=$root/quality.tsv
printf 'cell\tseed\tprecision\tvalid_ppl\ttest_ppl\ttest_ppl_other_precision\tseconds\n' >"$tsv"
other() { [ "$1" = f32 ] && echo "$half" || echo f32; }
ppl() { sed -n 's/.*perplexity \([0-9.]*\).*/\1/p' | tail -1; }
for cell in ${CELLS:-lstm ran-tanh}; do
  for seed in ${SEEDS:-1 2 3}; do
    for p in f32 "$half"; do
      dir=$root/$cell-$p-$seed
      start=$(date +%s)
      [ -f "$dir/config.json" ] || "$bin" train --cell "$cell" --seed "$seed" --precision "$p" --device "$device" --out "$dir" --sample-length 0 --quiet ${EXTRA:-} >"$dir.log" 2>&1
      secs=$(( $(date +%s) - start ))
      valid=$(grep 'validation:' "$dir.log" | ppl)
      test_same=$("$bin" eval --checkpoint "$dir" --split test --precision "$p" --device "$device" 2>/dev/null | ppl)
      test_other=$("$bin" eval --checkpoint "$dir" --split test --precision "$(other $p)" --device "$device" 2>/dev/null | ppl)
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cell" "$seed" "$p" "$valid" "$test_same" "$test_other" "$secs" | tee -a "$tsv"
    done
  done
done
