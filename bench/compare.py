#!/usr/bin/env python3
"""Join the rnnlens and PyTorch benchmark CSVs on (shape, cell, mode) and print a markdown table.

    python bench/compare.py bench/results/rnnlens.csv bench/results/pytorch.csv

For ISAN the PyTorch number is the fastest of its formulations (`isan`, `isan-gather`), named
in the table. rnnlens's achieved GFLOP/s and peak are shown when its CSV has them.
"""

import argparse
import csv
import sys

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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rnnlens_csv")
    ap.add_argument("pytorch_csv")
    args = ap.parse_args()

    ours = read(args.rnnlens_csv)
    theirs = read(args.pytorch_csv)
    torch_by_key = {(r["shape"], r["cell"], r["mode"]): r for r in theirs}

    threads = {r.get("threads") for r in ours} | {r.get("threads") for r in theirs}
    if len(threads) > 1:
        print(f"warning: the two CSVs were run with different thread counts: {sorted(t for t in threads if t)}",
              file=sys.stderr)

    # Show the FLOP columns only when rnnlens filled them in somewhere.
    show_gflops = any(number(r.get("achieved_gflops")) is not None for r in ours)
    header = ["shape", "cell", "mode", "rnnlens tok/s", "PyTorch tok/s", "rnnlens / PyTorch"]
    if show_gflops:
        header += ["rnnlens GFLOP/s", "peak GFLOP/s", "% of peak"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|")

    matched = set()
    for r in ours:
        shape, cell, mode = r["shape"], r["cell"], r["mode"]
        ours_tps = number(r["tokens_per_s"])
        # the fastest PyTorch row standing for this cell
        best, best_name = None, None
        for name in ALTERNATIVES.get(cell, [cell]):
            t = torch_by_key.get((shape, name, mode))
            if t is None:
                continue
            matched.add((shape, name, mode))
            tps = number(t["tokens_per_s"])
            if tps is not None and (best is None or tps > best):
                best, best_name = tps, name
        label = cell if best_name in (None, cell) else f"{cell} (PyTorch: {best_name})"
        ratio = ours_tps / best if ours_tps and best else None
        cells = [shape, label, mode, fmt(ours_tps), fmt(best), fmt(ratio, 2) + ("×" if ratio else "")]
        if show_gflops:
            achieved, peak = number(r.get("achieved_gflops")), number(r.get("peak_gflops"))
            share = 100 * achieved / peak if achieved is not None and peak else None
            cells += [fmt(achieved), fmt(peak), fmt(share)]
        print("| " + " | ".join(cells) + " |")

    # PyTorch rows rnnlens did not measure, so that nothing disappears silently
    for t in theirs:
        key = (t["shape"], t["cell"], t["mode"])
        if key not in matched:
            cells = [t["shape"], t["cell"], t["mode"], "—", fmt(number(t["tokens_per_s"])), "—"]
            if show_gflops:
                cells += ["—", "—", "—"]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
