#!/usr/bin/env bash
# The paper campaign's two background lanes (docs/paper.md), as a session starts them on a
# machine: each runs `scripts/paper.sh queue`, then `scripts/paper.sh run all`, one thread, at
# nice 19, so that the foreground keeps the cores it asks for.
#
#   scripts/paper-lanes.sh start     # from a clean tree: build HEAD, start both lanes
#   scripts/paper-lanes.sh stop      # stop them (each run continues from its last save later)
#   scripts/paper-lanes.sh status    # what runs, what is left (scripts/paper.sh status)
#
# `start` builds HEAD's binary and keeps it as ../bin/rnnlens-COMMIT, checks HEAD out in
# ../campaign-COMMIT (the queue and scripts as committed, while this tree moves on), and
# writes the lanes' logs to ../runs/lane1.log and lane2.log; runs go to $PAPER_RUNS (default
# ../paper-runs, where a run stopped by a machine's end continues if the machine comes back)
# and records to this tree's docs/paper/runs. A record names the commit its binary was built
# from, so the tree must be clean: no record from uncommitted code.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
up=$(dirname "$root")
runs=${PAPER_RUNS:-$up/paper-runs}

running() { pgrep -f "paper-lane-body" || true; }

case "${1:-}" in
  start)
    if [ -n "$(running)" ]; then
      echo "paper-lanes: lanes run already (processes $(running | tr '\n' ' ')); 'stop' first" >&2
      exit 1
    fi
    if [ -n "$(git status --porcelain --untracked-files=no -- . ':(exclude)docs/paper' ':(exclude)docs/paper.md')" ]; then
      echo "paper-lanes: the tree has uncommitted changes; commit them first (a record names the commit its binary was built from)" >&2
      exit 1
    fi
    commit=$(git rev-parse HEAD)
    short=$(git rev-parse --short HEAD)
    bin=$up/bin/rnnlens-$short
    tree=$up/campaign-$short
    if [ ! -x "$bin" ]; then
      cargo build --release -q
      mkdir -p "$up/bin"
      cp target/release/rnnlens "$bin"
    fi
    [ -d "$tree" ] || git worktree add -q --detach "$tree" "$commit"
    mkdir -p "$up/runs" "$runs"
    for lane in 1 2; do
      # the second a minute after the first: the queue gives each lane the next run not started
      [ "$lane" = 1 ] || sleep 60
      THREADS=1 PAPER_RECORDS="$root/docs/paper/runs" PAPER_RUNS="$runs" RNNLENS="$bin" PAPER_COMMIT="$commit" \
        setsid nohup nice -n 19 bash -c 'cd "$1" && scripts/paper.sh queue && scripts/paper.sh run all' paper-lane-body "$tree" \
        >> "$up/runs/lane$lane.log" 2>&1 < /dev/null &
      echo "paper-lanes: lane $lane started (binary $bin, log $up/runs/lane$lane.log)"
    done
    ;;
  stop)
    for pid in $(running); do
      kill -- "-$(ps -o pgid= -p "$pid" | tr -d ' ')" 2>/dev/null || true
    done
    echo "paper-lanes: stopped"
    ;;
  status)
    PAPER_RUNS="$runs" exec scripts/paper.sh status
    ;;
  *)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
