#!/usr/bin/env python3
"""Join the rnnlens and PyTorch benchmark CSVs on (shape, cell, mode) and print a markdown table.

    python bench/compare.py bench/results/rnnlens.csv bench/results/pytorch.csv

A key may have several rows, one per round (`ROUNDS=3 bench/run.sh`), in the order they ran:
the k-th rnnlens row of a key pairs with the k-th PyTorch row. The table then gives each tool's
median over the rounds, their ratio, and the lowest and highest of the per-round ratios.
For ISAN the PyTorch number is the fastest of its formulations (`isan`, `isan-gather`) in each
round, named in the table. rnnlens's achieved GFLOP/s and peak are shown when its CSV has them.
"""

import argparse
import csv
import statistics
import sys
from collections import defaultdict

# PyTorch rows that stand for an rnnlens cell besides the row of the same name
ALTERNATIVES = {"isan": ["isan", "isan-gather"]}


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def number(text):
    """A float from a CSV cell, or None when it is empty or not a number."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def fmt(x, digits=1):
    return "—" if x is None else f"{x:,.{digits}f}"


def precision(row):
    """`bf16` for the rows of mixed precision (impl `rnnlens-bf16`, `pytorch-bf16`), else `f32`."""
    return "bf16" if row.get("impl", "").endswith("-bf16") else "f32"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rnnlens_csv")
    ap.add_argument("pytorch_csv")
    args = ap.parse_args()

    ours = read(args.rnnlens_csv)
    theirs = read(args.pytorch_csv)
    # every key's rows in the order they ran: one per round
    ours_by_key, torch_by_key = defaultdict(list), defaultdict(list)
    for r in ours:
        ours_by_key[(r["shape"], r["cell"], r["mode"], precision(r))].append(r)
    for r in theirs:
        torch_by_key[(r["shape"], r["cell"], r["mode"], precision(r))].append(r)
    # A precision column where some rows are bf16.
    show_precision = any(k[3] != "f32" for k in list(ours_by_key) + list(torch_by_key))

    threads = {r.get("threads") for r in ours} | {r.get("threads") for r in theirs}
    if len(threads) > 1:
        print(f"warning: the two CSVs were run with different thread counts: {sorted(t for t in threads if t)}",
              file=sys.stderr)

    rounds = max(len(v) for v in list(ours_by_key.values()) + list(torch_by_key.values())) if ours or theirs else 0
    # Show the FLOP columns only when rnnlens filled them in somewhere.
    show_gflops = any(number(r.get("achieved_gflops")) is not None for r in ours)
    header = ["shape", "cell", "mode", "rnnlens tok/s", "PyTorch tok/s", "rnnlens / PyTorch"]
    if rounds > 1:
        header = header[:3] + ["rounds"] + header[3:] + ["per-round ratios"]
    if show_precision:
        header = header[:3] + ["precision"] + header[3:]
    if show_gflops:
        header += ["rnnlens GFLOP/s", "peak GFLOP/s", "% of peak"]
    print("| " + " | ".join(header) + " |")
    text_columns = 4 if show_precision else 3
    print("|" + "|".join(["---"] * text_columns + ["---:"] * (len(header) - text_columns)) + "|")

    def median(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    matched = set()
    for (shape, cell, mode, prec), rows in ours_by_key.items():
        ours_tps = [number(r["tokens_per_s"]) for r in rows]
        # per round, the fastest PyTorch row standing for this cell
        best, best_names = [], []
        for i in range(len(rows)):
            b, name = None, None
            for alt in ALTERNATIVES.get(cell, [cell]):
                ts = torch_by_key.get((shape, alt, mode, prec), [])
                if ts:
                    matched.add((shape, alt, mode, prec))
                tps = number(ts[i]["tokens_per_s"]) if i < len(ts) else None
                if tps is not None and (b is None or tps > b):
                    b, name = tps, alt
            best.append(b)
            best_names.append(name)
        named = [n for n in best_names if n is not None]
        best_name = max(set(named), key=named.count) if named else None
        label = cell if best_name in (None, cell) else f"{cell} (PyTorch: {best_name})"
        ours_med, best_med = median(ours_tps), median(best)
        ratio = ours_med / best_med if ours_med and best_med else None
        cells = [shape, label, mode, fmt(ours_med), fmt(best_med), fmt(ratio, 2) + ("×" if ratio else "")]
        if rounds > 1:
            per = [o / b for o, b in zip(ours_tps, best) if o and b]
            spread = f"{min(per):.2f}–{max(per):.2f}" if per else "—"
            cells = cells[:3] + [str(len(per))] + cells[3:] + [spread]
        if show_precision:
            cells = cells[:3] + [prec] + cells[3:]
        if show_gflops:
            achieved = median(number(r.get("achieved_gflops")) for r in rows)
            peak = median(number(r.get("peak_gflops")) for r in rows)
            share = 100 * achieved / peak if achieved is not None and peak else None
            cells += [fmt(achieved), fmt(peak), fmt(share)]
        print("| " + " | ".join(cells) + " |")

    # PyTorch rows rnnlens did not measure, so that nothing disappears silently
    for key, ts in torch_by_key.items():
        if key not in matched:
            cells = [*key[:3], "—", fmt(median(number(t["tokens_per_s"]) for t in ts)), "—"]
            if rounds > 1:
                cells = cells[:3] + [str(len(ts))] + cells[3:] + ["—"]
            if show_precision:
                cells = cells[:3] + [key[3]] + cells[3:]
            if show_gflops:
                cells += ["—", "—", "—"]
            print("| " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
