#!/usr/bin/env bash
# The explorer's pattern search on a corpus of about a million tokens (docs/explorer.md): starts
# `rnnlens serve` on CHECKPOINT with the embedded Brown corpus's text (1.16M words) or CORPUS,
# then times searches of spans of 1, 3 and 10 tokens on 10 units, 64 units and every unit of the
# top layer, each 7 times: the server's own time (the distance scan and ranking) and the whole
# request (reading the text, ranking, the JSON) as curl sees it. Prints the medians.
#
#   scripts/explorer-latency.sh CHECKPOINT [CORPUS]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 CHECKPOINT [CORPUS]" >&2; exit 2; }
ck=$1
bin=${RNNLENS:-target/release/rnnlens}
[ -n "${RNNLENS:-}" ] || cargo build --release -q
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
corpus=${2:-$work/brown.txt}
[ $# -ge 2 ] || zcat data/brown.txt.gz > "$corpus"
t0=$(date +%s.%N)
"$bin" serve --checkpoint "$ck" --corpus "$corpus" --port 0 > "$work/out" 2> "$work/err" &
pid=$!
until grep -q "http://" "$work/out" 2>/dev/null; do
  kill -0 $pid 2>/dev/null || { cat "$work/err" >&2; exit 1; }
  sleep 0.5
done
port=$(grep -o '127.0.0.1:[0-9]*' "$work/out" | cut -d: -f2)
echo "server ready in $(echo "$(date +%s.%N) - $t0" | bc) s: $(grep corpus: "$work/err")"
text="the jury said it did find that the city of atlanta had been served well by the election"
width=$(curl -s "localhost:$port/api/model" | python3 -c "import json,sys; print(json.load(sys.stdin)['layers'][-1]['hidden'])")
layer=$(curl -s "localhost:$port/api/model" | python3 -c "import json,sys; print(len(json.load(sys.stdin)['layers'])-1)")
for len in 1 3 10; do
  for nu in 10 64 $width; do
    units=$(python3 -c "print(list(range($nu)))")
    body="{\"text\": \"$text\", \"start\": 2, \"end\": $((2 + len)), \"layer\": $layer, \"units\": $units, \"top\": 10}"
    server=(); whole=()
    for _ in 1 2 3 4 5 6 7; do
      r=$(curl -s -w ' %{time_total}' -X POST "localhost:$port/api/search" -d "$body")
      server+=("$(echo "$r" | python3 -c "import json,sys; s=sys.stdin.read(); print(json.loads(s[:s.rindex(' ')])['milliseconds'])")")
      whole+=("$(echo "$r" | awk '{print $NF * 1000}')")
    done
    med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    printf 'span %2d tokens, %4d units: search %8.1f ms, whole request %8.1f ms (medians of 7)\n' "$len" "$nu" "$(med "${server[@]}")" "$(med "${whole[@]}")"
  done
done
