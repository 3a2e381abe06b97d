#!/usr/bin/env bash
# The RDA paper's tables at the reduced scale this 2-core machine affords (docs/tasks.md lists
# the results and the reduction of each). Every run: batch 100, Adam 1e-3, gradients clipped to
# [-1, 1], Xavier init, seed 1, one thread per process.
# Usage: scripts/tasks-reduced.sh [addition|classify|copy|multicopy|mnist|permuted-mnist|parentheses ...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
bin=target/release/rnnlens
cells=gru,lstm,rwa,rda-exp-tanh,rda-sigmoid-id
run() { local name=$1; shift; "$bin" task "$@" --compare "$cells" --threads 1 --out "runs/tasks-reduced/$name"; }
for what in "${@:-addition classify copy multicopy mnist permuted-mnist parentheses}"; do
  for w in $what; do
    case $w in
      addition) run addition addition --length 100 --hidden-size 64 --steps 1500 ;;
      classify) run classify classify-length --length 100 --hidden-size 64 --steps 1500 ;;
      copy) run copy copy --length 60 --hidden-size 64 --steps 5000 ;;
      multicopy) run multicopy multicopy --length 200 --hidden-size 64 --steps 4000 ;;
      mnist | permuted-mnist)
        data=$(scripts/fashion-mnist.sh)
        task=seq-mnist; [ "$w" = permuted-mnist ] && task=permuted-seq-mnist
        # 14×14 images (2×2 pixel blocks averaged): 196 steps instead of 784.
        run "$w" "$task" --data "$data" --length 196 --hidden-size 128 --steps 1000 ;;
      parentheses)
        # The ISAN paper's counting task (its section 5): accuracy of the rounded levels.
        cells=isan,gru,lstm,rnn run parentheses parentheses --hidden-size 64 --steps 5000 ;;
      *) echo "unknown part '$w'" >&2; exit 2 ;;
    esac
  done
done
