#!/usr/bin/env bash
# The papers' experiments at the papers' scale (docs/paper.md): list the rows, run the ones
# without a record, write the page from the records. See scripts/paper.py for everything.
#
#   scripts/paper.sh list
#   scripts/paper.sh run rda-t2 rda-t1/gru       # SEED=1 PRECISION=bf16 THREADS=1 by default
#   scripts/paper.sh run all                     # every row without a record, cheap tables first
#   scripts/paper.sh queue                       # the next runs of docs/paper/queue.txt, in order
#   scripts/paper.sh probe isan-f1a/irnn         # the short runs a row's note quotes, each with a record
#   scripts/paper.sh score ran-t1                # kept models scored with the state reset every window
#   scripts/paper.sh analyses                    # the ISAN paper's analyses of Figure 1a's kept models
#   scripts/paper.sh record ID DIR               # the record of a task run made by hand
#   scripts/paper.sh status                      # what runs, what is stopped, what is left
#   scripts/paper.sh page [--check]
#
# Two campaigns on one machine share the rows: a row another one is running is skipped.
#
# Runs go to $PAPER_RUNS (default ../paper-runs, beside the work tree); RNNLENS names a binary
# built already (else this builds target/release/rnnlens first).
set -euo pipefail
cd "$(dirname "$0")/.."
# The commands that run rnnlens build it first, unless RNNLENS names a binary.
case "${1:-}" in
  run | queue | probe | score | analyses | record)
    [ -n "${RNNLENS:-}" ] || cargo build --release -q ;;
esac
exec python3 scripts/paper.py "$@"
