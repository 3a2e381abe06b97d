#!/usr/bin/env bash
# Checks that a change leaves rnnlens's results the same bits: two binaries (before and after)
# run the same short trainings of ten cells, then eval, sample, explain and a task comparison;
# the weights, the optimizer state and every printed figure must be identical (wall times,
# speeds and the directories' names aside).
#
#   scripts/same-bits.sh OLD_BINARY NEW_BINARY
#   PRECISION=bf16 scripts/same-bits.sh OLD_BINARY NEW_BINARY   # every command in bf16
#
# Build the old binary from a worktree of the commit before the change, e.g.
#   git worktree add /tmp/old HEAD~1 && (cd /tmp/old && cargo build --release)
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
p=(--precision "${PRECISION:-f32}")
runs() {
  local b=$1 d=$2 cell lvl
  mkdir -p "$d"
  for cell in lstm gru ran-tanh ran-identity rwa rda isan linear-tanh lstm-no-output-gate lstm-simple-content; do
    lvl=word; case $cell in isan|linear-tanh) lvl=char ;; esac
    "$b" train "${p[@]}" --cell $cell --level $lvl --hidden-size 24 --embedding-size 16 --batch-size 8 --bptt 20 \
      --max-steps 25 --epochs 1 --sample-length 0 --threads 2 --out "$d/$cell" > "$d/$cell.out" 2>&1
    "$b" eval "${p[@]}" --checkpoint "$d/$cell" --split test >> "$d/$cell.out" 2>&1
    "$b" sample "${p[@]}" --checkpoint "$d/$cell" --length 40 --seed 3 >> "$d/$cell.out" 2>&1
  done
  "$b" explain "${p[@]}" --checkpoint "$d/ran-tanh" --text "the cat sat on the mat" > "$d/explain-ran.out" 2>&1
  "$b" explain "${p[@]}" --checkpoint "$d/isan" --text "the cat sat on the mat" > "$d/explain-isan.out" 2>&1
  "$b" task addition "${p[@]}" --compare ran-tanh,lstm --length 20 --steps 30 --hidden-size 8 --batch-size 10 --out "$d/task" > "$d/task.out" 2>&1
  # Every attention and output function of the RDA (its row loops are compiled per attention).
  for att in relu softplus sigmoid; do
    "$b" train "${p[@]}" --cell rda --rda-attention $att --rda-output-fn tanh --level word --hidden-size 16 --embedding-size 8 \
      --batch-size 8 --bptt 20 --max-steps 15 --epochs 1 --sample-length 0 --threads 2 --out "$d/rda-$att" > "$d/rda-$att.out" 2>&1
  done
  "$b" task multicopy "${p[@]}" --compare rwa,rda-exp-tanh,rda-sigmoid-id --steps 20 --hidden-size 8 --batch-size 10 --out "$d/task-rda" > "$d/task-rda.out" 2>&1
}
runs "$1" "$work/a"
runs "$2" "$work/b"
# Wall times and speeds differ from run to run; so do the directories' names.
# A bf16 run measures the CPU's bf16 rate at its start and prints it (a note that varies).
# Wordings that say more than before (eval naming what it scored, a divergence's checkpoint
# note) are cut to the figures; lines are compared as a set (a report may move a line).
norm() {
  sed -E "/^note: on this CPU bf16 multiply-adds run at/d; s|$work/[ab]|DIR|g; s/[0-9.]+ tokens\/s.*//; s/read in [0-9.]+s//; s/[0-9.]+s \(\+.*//; s/,[0-9.]+$//; \
    s/ \([0-9]+s in all\)//; s/(mean NLL [0-9.]+ nats\)).*/\1/; s/: training diverged; .*/: training diverged/; \
    s/ steps in [0-9.]+s$/ steps/; s/^([a-z0-9-]+ +[>0-9 ]+ +[0-9.]+ +[0-9.]+) +[0-9.]+$/\1/" | sort
}
bad=0
while IFS= read -r f; do
  case $f in
    *.safetensors|*/vocab.txt|*/config.json) cmp -s "$work/a/$f" "$work/b/$f" || { echo "differs: $f"; bad=1; } ;;
    *.out|*.csv) diff <(norm < "$work/a/$f") <(norm < "$work/b/$f") > /dev/null || { echo "differs: $f"; diff <(norm < "$work/a/$f") <(norm < "$work/b/$f") | head -5; bad=1; } ;;
  esac
done < <(cd "$work/a" && find . -type f | sort)
n=$(cd "$work/a" && find . -name '*.safetensors' | wc -l)
[ $bad = 0 ] && echo "same bits: $n weight and optimizer files, every eval, sample, explain and task figure"
exit $bad
