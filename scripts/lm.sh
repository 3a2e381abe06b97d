#!/usr/bin/env bash
# Reproduces docs/lm.md: the later RAN paper's five-cell comparison (its table 1) and its LSTM
# ablations (table 2) on the embedded Brown corpus, scaled as configs/lm-brown.toml says, and the
# PyTorch twin of the LSTM language model (bench/lm_twin.py), three seeds a side. Then writes the
# page's tables (between its <!-- lm.sh: ... --> markers) and its figures (docs/lm/*.svg).
#
#   scripts/lm.sh                      # everything (hours on 2 cores), then the page
#   scripts/lm.sh five-cells page      # some parts only: diagnose, five-cells, ablations, twin, page
#   SCALE=paper scripts/lm.sh five-cells ablations page   # the paper's set-up unscaled (1024
#                                      # units, batch 512, 100 epochs): for a GPU build
#   TRAIN_ARGS="--threads 4" scripts/lm.sh ...             # extra flags for every training run
#   CELLS="lstm ran-tanh" scripts/lm.sh five-cells         # some of the table's rows only
#   SEEDS=1 scripts/lm.sh twin                             # some of the twin's seeds only
#
# Runs go to runs/lm/ (runs/lm-paper/ with SCALE=paper). A run that finished is kept, one that
# was interrupted is resumed, so the script can be stopped and started again at any point.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
bin=target/release/rnnlens
cfg=configs/lm-brown.toml
root=${LM_ROOT:-runs/lm}
scale=()
if [ "${SCALE:-}" = paper ]; then
  root=runs/lm-paper
  scale=(--hidden-size 1024 --batch-size 512 --epochs 100)
fi
read -r -a extra <<< "${TRAIN_ARGS:-}"
mkdir -p "$root/results/five-cells" "$root/results/ablations" "$root/results/twin"

# train NAME ARGS...: train (or resume, or skip when finished) runs/lm/NAME, then score it on the
# test split (one stream, batch 1) and count its parameters into results/NAME.json.
train() {
  local name=$1; shift
  local dir=$root/$name
  local state
  state=$(python3 - "$dir" <<'EOF'
import json, os, sys
p = os.path.join(sys.argv[1], "trainer.json")
if not os.path.exists(p):
    print("new")
else:
    t = json.load(open(p))
    print("done" if t["epoch"] >= t["config"]["epochs"] else "resume")
EOF
)
  # A run that diverges stops with a message; it is kept in results/NAME.diverged for the page.
  local status=0
  case $state in
    new) echo "== $name: training"; "$bin" train --config "$cfg" "${scale[@]}" "$@" "${extra[@]}" --out "$dir" 2> >(tee "$root/results/${name//\//_}.log" >&2) || status=$? ;;
    resume) echo "== $name: resuming"; "$bin" train --resume "$dir" "${extra[@]}" 2> >(tee "$root/results/${name//\//_}.log" >&2) || status=$? ;;
    done) echo "== $name: trained already" ;;
  esac
  if [ $status -ne 0 ]; then
    mkdir -p "$(dirname "$root/results/$name")"
    grep -h "diverged" "$root/results/${name//\//_}.log" > "$root/results/$name.diverged" || { echo "lm.sh: $name failed" >&2; exit 1; }
    echo "   $name diverged: $(cat "$root/results/$name.diverged")"
    return 0
  fi
  if [ ! -s "$root/results/$name.json" ] || [ "$dir/trainer.json" -nt "$root/results/$name.json" ]; then
    local test
    test=$("$bin" eval --checkpoint "$dir" --split test)
    echo "   $test"
    python3 - "$dir" "$test" "$root/results/$name.json" <<'EOF'
import json, re, sys
d, line, out = sys.argv[1:]
m = re.match(r"perplexity ([0-9.]+) over ([0-9]+) tokens \(mean NLL ([0-9.]+) nats\)", line)
cfg = json.load(open(d + "/config.json"))
json.dump({"test_perplexity": float(m.group(1)), "test_tokens": int(m.group(2)), "test_nll": float(m.group(3)),
           "cell": cfg["cell_name"], "layers": cfg["layers"]}, open(out, "w"), indent=1)
EOF
  fi
}

# The diagnosis of docs/lm.md: one epoch of each variant at 256 units (128-d embeddings, batch
# 32, Adam 0.002, clipping at 5, Xavier, seed 1), the state carried or not, without dropout and
# with the paper's 0.5 before, after and inside the cell; then the RAN units' state over a long
# stream (bench/ran_units.py).
diagnose() {
  local base=(--embedding-size 128 --hidden-size 256 --epochs 1 --sample-length 0)
  local v
  for v in "lstm --cell lstm" "ran-tanh-c --cell ran-tanh --ran-gates c" "ran-tanh-h --cell ran-tanh --ran-gates h" \
           "ran-identity --cell ran-identity"; do
    set -- $v
    local name=$1; shift
    for carry in true false; do
      local tag=carried; [ $carry = false ] && tag=reset
      diag "diag/$name-$tag" "${base[@]}" "$@" --carry-state $carry --dropout 0
      diag "diag/$name-$tag-d5" "${base[@]}" "$@" --carry-state $carry --dropout 0.5 --rec-dropout 0.5
    done
  done
  # What did not close the gap (the RAN-tanh reading c, state carried, no dropout), and the
  # first paper's SGD set-up for three cells.
  diag diag/ran-tanh-c-lr0.001 "${base[@]}" --cell ran-tanh --ran-gates c --carry-state true --dropout 0 --lr 0.001
  diag diag/ran-tanh-c-bptt100 "${base[@]}" --cell ran-tanh --ran-gates c --carry-state true --dropout 0 --bptt 100
  diag diag/ran-identity-lr0.001 "${base[@]}" --cell ran-identity --carry-state true --dropout 0 --lr 0.001
  diag diag/ran-identity-lr0.0002 "${base[@]}" --cell ran-identity --carry-state true --dropout 0 --lr 0.0002
  for v in "lstm --cell lstm" "ran-tanh-c --cell ran-tanh --ran-gates c" "ran-identity --cell ran-identity"; do
    set -- $v
    local name=$1; shift
    diag "diag/$name-sgd" "${base[@]}" "$@" --carry-state true --dropout 0 --optimizer sgd --lr 1 --init uniform --init-scale 0.05
  done
  # train's own defaults (256-d embeddings, dropout 0.25), before and after this page's changes.
  diag diag/defaults-lstm --cell lstm --sample-length 0
  diag diag/defaults-ran-tanh --cell ran-tanh --sample-length 0
  diag diag/defaults-ran-identity --cell ran-identity --sample-length 0
  diag diag/defaults-ran-tanh-carried --cell ran-tanh --carry-state true --sample-length 0
  diag diag/defaults-ran-tanh-before --cell ran-tanh --ran-gates c --carry-state true --sample-length 0
  diag diag/defaults-ran-identity-before --cell ran-identity --ran-gates c --carry-state true --sample-length 0
  [ -x bench/.venv/bin/python ] || { python3 -m venv bench/.venv && bench/.venv/bin/pip install -q -r bench/requirements.txt; }
  for d in ran-tanh-c-carried ran-tanh-c-carried-d5 ran-tanh-h-carried ran-tanh-h-carried-d5 ran-tanh-h-reset; do
    [ -d "$root/diag/$d" ] && bench/.venv/bin/python bench/ran_units.py "$root/diag/$d" --json > "$root/results/diag/$d.units.json"
  done
}

# diag NAME ARGS...: one run of the diagnosis (train's defaults plus ARGS, no config file); a
# run that diverges is recorded as such.
diag() {
  local name=$1; shift
  local dir=$root/$name
  mkdir -p "$root/results/diag"
  if [ -s "$dir/trainer.json" ] || [ -s "$root/results/$name.diverged" ]; then
    echo "== $name: done already"
    return 0
  fi
  echo "== $name"
  if ! "$bin" train "$@" "${extra[@]}" --out "$dir" 2> >(tee "$root/results/$name.log" >&2); then
    grep -h "diverged" "$root/results/$name.log" > "$root/results/$name.diverged" || { echo "lm.sh: $name failed" >&2; exit 1; }
  fi
}

five_cells() {
  # Each cell with its defaults (the RANs start every window from zeros, the others carry the
  # state), then the RAN as the paper ran it: the state carried, and the gates reading c_{t-1}
  # as the later paper's equations write them (docs/lm.md explains the difference).
  for cell in ${CELLS:-rnn gru lstm ran-identity ran-tanh ran-tanh-carried ran-tanh-gates-c ran-identity-carried}; do
    case $cell in
      ran-tanh-carried) train five-cells/ran-tanh-carried --cell ran-tanh --carry-state true ;;
      ran-tanh-gates-c) train five-cells/ran-tanh-gates-c --cell ran-tanh --ran-gates c --carry-state true ;;
      # Diverges within tens of steps: the run stops there, saying so, and the page says where.
      ran-identity-carried) train five-cells/ran-identity-carried --cell ran-identity --carry-state true ;;
      *) train "five-cells/$cell" --cell "$cell" ;;
    esac
  done
}

ablations() {
  # Table 2: the LSTM, its content layer simplified, then the output gate removed; the RAN
  # (tanh) ends the chain (five-cells/lstm and five-cells/ran-tanh are the ends).
  for cell in lstm-simple-content lstm-no-output-gate; do
    train "ablations/$cell" --cell "$cell"
  done
}

twin() {
  # The LSTM row's settings with two layers, rnnlens and PyTorch, three seeds each.
  [ -x bench/.venv/bin/python ] || { python3 -m venv bench/.venv && bench/.venv/bin/pip install -q -r bench/requirements.txt; }
  for seed in ${SEEDS:-1 2 3}; do
    train "twin/rnnlens-s$seed" --cell lstm --hidden-size 256,256 --epochs 4 --lr-decay 0.5 --decay-start 3 --seed "$seed"
    local pt=$root/twin/torch-s$seed
    if [ ! -s "$pt/result.json" ]; then
      echo "== twin/torch-s$seed: training"
      bench/.venv/bin/python bench/lm_twin.py --run "$root/twin/rnnlens-s$seed" --seed "$seed" --out "$pt"
    fi
    # rnnlens scores the PyTorch weights too: the same number means the same model and data.
    "$bin" eval --checkpoint "$pt" --input "$pt/test.txt" > "$pt/rnnlens-eval.txt"
  done
}

page() {
  mkdir -p docs/lm
  local five=() abl=() tw=()
  for cell in rnn gru lstm ran-identity ran-tanh ran-tanh-gates-c; do
    [ -d "$root/five-cells/$cell" ] && five+=("$root/five-cells/$cell")
  done
  [ ${#five[@]} -gt 0 ] && "$bin" curves "${five[@]}" --out docs/lm/five-cells.svg
  for d in "$root/five-cells/lstm" "$root/ablations/lstm-simple-content" "$root/ablations/lstm-no-output-gate" "$root/five-cells/ran-tanh-gates-c"; do
    [ -d "$d" ] && abl+=("$d")
  done
  [ ${#abl[@]} -gt 0 ] && "$bin" curves "${abl[@]}" --out docs/lm/ablations.svg
  for s in 1 2 3; do
    for side in rnnlens torch; do
      [ -s "$root/twin/$side-s$s/metrics.jsonl" ] && tw+=("$root/twin/$side-s$s")
    done
  done
  [ ${#tw[@]} -gt 0 ] && "$bin" curves "${tw[@]}" --out docs/lm/twin.svg
  python3 scripts/lm_page.py "$root" docs/lm.md
}

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(diagnose five-cells ablations twin page)
for p in "${parts[@]}"; do
  case $p in
    diagnose) diagnose ;;
    five-cells) five_cells ;;
    ablations) ablations ;;
    twin) twin ;;
    page) page ;;
    *) echo "lm.sh: unknown part '$p' (diagnose, five-cells, ablations, twin, page)" >&2; exit 2 ;;
  esac
done
