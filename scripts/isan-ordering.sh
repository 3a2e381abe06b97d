#!/usr/bin/env bash
# The ISAN paper's ordering at small scale (ISAN §4.1): ISAN < linear RNN with a tanh readout
# < fully linear RNN, in bits per character on the validation split of the embedded corpus
# (character level, lowercased). About 1 minute per model on 2 cores.
#
#   scripts/isan-ordering.sh [STEPS] [OUT_DIR]
#
# All three models get the same data, seed, size (128 units), windows (32 × 100 characters,
# every window from the learned h0) and optimizer. The optimizer is plain SGD with the
# gradient's global norm clipped to 1, and the initialisation uniform ±0.05, because with Adam
# the linear recurrence of linear-tanh explodes: Adam moves every entry of W by about the
# learning rate per step, which grows W's spectral radius by ~H·lr per step, the state runs
# past tanh's range, and the saturated readout passes no gradient back to bring it down
# (measured: Adam 2e-3 with Xavier init stays at the unigram's 4.31 bits; uniform ±0.05 and
# Adam 2e-3 diverges at step 26). The fully linear model has no such trap: an over-large state
# makes over-confident predictions, which the loss itself pushes back.
set -euo pipefail
steps="${1:-3000}"
out="${2:-runs/isan-ordering}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo build --release --quiet
for cell in isan linear-tanh linear; do
  ./target/release/rnnlens train --cell "$cell" --level char --hidden-size 128 \
    --batch-size 32 --bptt 100 --carry-state false --dropout 0 \
    --optimizer sgd --lr 1 --clip-norm 1 --init uniform --init-scale 0.05 \
    --max-steps "$steps" --seed 1 --quiet --overwrite --out "$out/$cell" 2>&1 |
    grep '^validation' | sed "s/^/$cell: /"
done
