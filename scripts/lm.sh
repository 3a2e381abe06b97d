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
#   RUNS="diag/lstm-reset diag/lstm-reset-d5" scripts/lm.sh diagnose   # some diagnosis runs only
#
#   RNNLENS=/path/to/rnnlens scripts/lm.sh ...             # a binary built already (no cargo build)
#
# Runs go to runs/lm/ (runs/lm-paper/ with SCALE=paper; LM_ROOT moves them). A run that was
# interrupted is resumed, so the script can be stopped and started again at any point. A run
# that finished leaves its record in docs/lm/runs/NAME/ (docs/lm-paper/runs/ with SCALE=paper):
# its metrics.jsonl and config.json (what `rnnlens curves` reads), and result.json (test
# perplexity, recurrent parameters) or diverged.txt. The records are what the page is written
# from, and they are kept in the repository: a run whose record exists is not run again, so the
# hours of training a page needs can be spread over several machines and days.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${RNNLENS:-}" ]; then
  bin=$RNNLENS
else
  cargo build --release -q
  bin=target/release/rnnlens
fi
cfg=configs/lm-brown.toml
root=${LM_ROOT:-runs/lm}
records=${LM_RECORDS:-docs/lm/runs}
scale=()
if [ "${SCALE:-}" = paper ]; then
  root=${LM_ROOT:-runs/lm-paper}
  records=${LM_RECORDS:-docs/lm-paper/runs}
  scale=(--hidden-size 1024 --batch-size 512 --epochs 100)
fi
read -r -a extra <<< "${TRAIN_ARGS:-}"

# record NAME DIR [RESULT]: keep a finished run's record in $records/NAME (metrics.jsonl,
# config.json, and RESULT, a JSON of its test figures, completed with its recurrent parameter
# count read from the shapes in model.safetensors's header: the papers' count, embedding and
# softmax excluded).
record() {
  local name=$1 dir=$2 result=${3:-}
  mkdir -p "$records/$name"
  local f
  for f in metrics.jsonl config.json; do
    # A run that diverged before its first checkpoint has neither.
    if [ -f "$dir/$f" ]; then cp "$dir/$f" "$records/$name/"; fi
  done
  [ -z "$result" ] && return 0
  python3 - "$dir" "$result" "$records/$name/result.json" <<'EOF'
import json, math, os, sys
d, res, out = sys.argv[1:]
r = json.load(open(res))
p = os.path.join(d, "model.safetensors")
if os.path.exists(p):
    with open(p, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    r["recurrent_params"] = sum(math.prod(v["shape"]) for k, v in header.items() if k.startswith("rnn."))
json.dump(r, open(out, "w"), indent=1)
EOF
}

recorded() { [ -s "$records/$1/result.json" ] || [ -s "$records/$1/diverged.txt" ]; }

# train NAME ARGS...: train (or resume) runs/lm/NAME, score it on the test split (one stream,
# batch 1), and record it; a run recorded already is skipped.
train() {
  local name=$1; shift
  local dir=$root/$name
  if recorded "$name"; then
    echo "== $name: recorded already ($records/$name)"
    return 0
  fi
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
  # A run that diverges stops with a message; its record keeps the message for the page.
  local status=0 log=$root/results/${name//\//_}.log
  mkdir -p "$root/results"
  case $state in
    new) echo "== $name: training"; "$bin" train --config "$cfg" "${scale[@]}" "$@" "${extra[@]}" --out "$dir" 2> >(tee "$log" >&2) || status=$? ;;
    resume) echo "== $name: resuming"; "$bin" train --resume "$dir" "${extra[@]}" 2> >(tee "$log" >&2) || status=$? ;;
    done) echo "== $name: trained already" ;;
  esac
  if [ $status -ne 0 ]; then
    local why
    why=$(grep -h "diverged" "$log") || { echo "lm.sh: $name failed" >&2; exit 1; }
    record "$name" "$dir"
    echo "$why" > "$records/$name/diverged.txt"
    echo "   $name diverged: $why"
    return 0
  fi
  local test
  test=$("$bin" eval --checkpoint "$dir" --split test | grep '^perplexity')
  echo "   $test"
  python3 - "$dir" "$test" "$root/results/result.json" <<'EOF'
import json, re, sys
d, line, out = sys.argv[1:]
m = re.match(r"perplexity ([0-9.]+) over ([0-9]+) tokens \(mean NLL ([0-9.]+) nats\)", line)
cfg = json.load(open(d + "/config.json"))
json.dump({"test_perplexity": float(m.group(1)), "test_tokens": int(m.group(2)), "test_nll": float(m.group(3)),
           "cell": cfg["cell_name"], "layers": cfg["layers"]}, open(out, "w"), indent=1)
EOF
  record "$name" "$dir" "$root/results/result.json"
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
    if [ -d "$root/diag/$d" ] && [ ! -s "$records/diag/$d/units.json" ]; then
      bench/.venv/bin/python bench/ran_units.py "$root/diag/$d" --json > "$records/diag/$d/units.json"
    fi
  done
}

# diag NAME ARGS...: one run of the diagnosis (train's defaults plus ARGS, no config file),
# recorded with its validation curve; a run that diverges is recorded as such.
diag() {
  local name=$1; shift
  local dir=$root/$name log=$root/results/${name//\//_}.log
  if [ -n "${RUNS:-}" ] && [[ " $RUNS " != *" $name "* ]]; then
    return 0
  fi
  if [ -s "$records/$name/metrics.jsonl" ] || [ -s "$records/$name/diverged.txt" ]; then
    echo "== $name: recorded already"
    return 0
  fi
  echo "== $name"
  mkdir -p "$root/results"
  rm -rf "$dir"
  if "$bin" train "$@" "${extra[@]}" --out "$dir" 2> >(tee "$log" >&2); then
    record "$name" "$dir"
  else
    local why
    why=$(grep -h "diverged" "$log") || { echo "lm.sh: $name failed" >&2; exit 1; }
    record "$name" "$dir"
    echo "$why" > "$records/$name/diverged.txt"
  fi
}

five_cells() {
  # Each cell with the state as our earlier defaults had it (the RANs start every window from
  # zeros, the others carry it), then the RAN as the paper ran it: the state carried (now the
  # RAN-tanh's default with the paper's recurrent dropout), and the gates reading c_{t-1} as
  # the later paper's equations write them (docs/lm.md explains the difference).
  for cell in ${CELLS:-rnn gru lstm ran-identity ran-tanh ran-tanh-carried ran-tanh-gates-c ran-identity-carried}; do
    case $cell in
      ran-tanh-carried) train five-cells/ran-tanh-carried --cell ran-tanh --carry-state true ;;
      ran-tanh-gates-c) train five-cells/ran-tanh-gates-c --cell ran-tanh --ran-gates c --carry-state true ;;
      # Diverges within tens of steps: the run stops there, saying so, and the page says where.
      ran-identity-carried) train five-cells/ran-identity-carried --cell ran-identity --carry-state true ;;
      # From zeros, as the record was made before the RAN-tanh's default changed.
      ran-tanh) train five-cells/ran-tanh --cell ran-tanh --carry-state false ;;
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
    local name=twin/torch-s$seed pt=$root/twin/torch-s$seed
    if recorded "$name"; then
      echo "== $name: recorded already ($records/$name)"
      continue
    fi
    if [ ! -s "$pt/result.json" ]; then
      echo "== $name: training"
      # It follows the rnnlens run's settings and vocabulary, from the run or from its record.
      local run=$root/twin/rnnlens-s$seed
      [ -s "$run/trainer.json" ] || { echo "lm.sh: $name needs the run $run (its record alone does not hold vocab.txt)" >&2; exit 1; }
      bench/.venv/bin/python bench/lm_twin.py --run "$run" --seed "$seed" --out "$pt"
    fi
    # rnnlens scores the PyTorch weights too: the same number means the same model and data.
    "$bin" eval --checkpoint "$pt" --input "$pt/test.txt" > "$pt/rnnlens-eval.txt"
    record "$name" "$pt" "$pt/result.json"
    cp "$pt/rnnlens-eval.txt" "$records/$name/"
  done
}

# The page's figures and tables, from the records alone (no run directory is needed).
page() {
  local figs=${records%/runs} five=() abl=() tw=()
  local r=$records
  for cell in rnn gru lstm ran-identity ran-tanh ran-tanh-gates-c; do
    [ -s "$r/five-cells/$cell/metrics.jsonl" ] && five+=("$r/five-cells/$cell")
  done
  [ ${#five[@]} -gt 0 ] && "$bin" curves "${five[@]}" --out "$figs/five-cells.svg"
  for d in "$r/five-cells/lstm" "$r/ablations/lstm-simple-content" "$r/ablations/lstm-no-output-gate" "$r/five-cells/ran-tanh-gates-c"; do
    [ -s "$d/metrics.jsonl" ] && abl+=("$d")
  done
  [ ${#abl[@]} -gt 0 ] && "$bin" curves "${abl[@]}" --out "$figs/ablations.svg"
  for s in 1 2 3; do
    for side in rnnlens torch; do
      [ -s "$r/twin/$side-s$s/metrics.jsonl" ] && tw+=("$r/twin/$side-s$s")
    done
  done
  [ ${#tw[@]} -gt 0 ] && "$bin" curves "${tw[@]}" --out "$figs/twin.svg"
  # The paper's scale gets its own page, begun as a copy of the scaled one.
  local doc=docs/lm.md
  if [ "${SCALE:-}" = paper ]; then doc=docs/lm-paper.md; [ -f $doc ] || cp docs/lm.md $doc; fi
  python3 scripts/lm_page.py "$r" "${LM_PAGE:-$doc}"
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
