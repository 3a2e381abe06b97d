#!/bin/bash
# Training speed of the full softmax against --sampled-softmax K on the later RAN paper's C2
# shape (word level, vocabulary 10,000, embedding 256, one LSTM layer of 1024, batch 32,
# bptt 35) on the embedded corpus.
#   speed K...   tokens/s over the first >= 20 steps, read from the trainer's progress line; the
#                run is stopped there, before the validation pass (which dominates the time)
#   valid K...   20 steps, then the (full-softmax) validation perplexity
set -eu
B=${RNNLENS:-target/release/rnnlens}
mode=$1; shift
shape=(--level word --vocab-size 10000 --cell lstm --embedding-size 256 --hidden-size 1024 --batch-size 32 --bptt 35
       --sample-length 0 --threads "${THREADS:-2}")
for k in "$@"; do
  dir=$(mktemp -d)
  if [ "$mode" = valid ]; then
    nice "$B" train "${shape[@]}" --sampled-softmax "$k" --max-steps 20 --out "$dir/ck" 2>&1 | grep -E "stopped after" | sed "s/^/K=$k: /"
  else
    : > "$dir/log"
    nice "$B" train "${shape[@]}" --sampled-softmax "$k" --max-steps 1000 --out "$dir/ck" 2> "$dir/log" &
    pid=$!
    # Progress lines come at most every 30 s, at multiples of 10 windows.
    until grep -qE "window ([2-9][0-9]|[0-9]{3,})/" "$dir/log"; do sleep 1; done
    kill "$pid"; wait "$pid" 2>/dev/null || true
    grep -E "window ([2-9][0-9]|[0-9]{3,})/" "$dir/log" | head -1 | sed "s/^/K=$k: /"
  fi
  rm -rf "$dir"
done
