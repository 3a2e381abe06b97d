#!/usr/bin/env python3
"""The GPU device check's table: rnnlens's GPU engine beside PyTorch on CUDA, one row per
(shape, cell, mode), from the CSVs of `rnnlens bench --device gpu` and
`bench/pytorch_bench.py --device cuda [--compile]`.

    python3 bench/gpu_table.py rnnlens-gpu.csv pytorch-cuda.csv [pytorch-cuda-compile.csv]

PyTorch's eager column is cuDNN for lstm, gru and rnn, and a loop of CUDA kernels for the other
cells; the compiled column is that loop with its step through torch.compile (loop cells only).
A ratio above 1 means rnnlens is faster.
"""

import csv
import sys


def rows(path):
    try:
        with open(path, newline="") as f:
            return {(r["shape"], r["cell"], r["mode"]): r for r in csv.DictReader(f)}
    except OSError:
        return {}


def num(r, key):
    try:
        return float(r[key])
    except (KeyError, TypeError, ValueError):
        return None


def fmt(x, d=0):
    return "—" if x is None else f"{x:,.{d}f}"


def main():
    ours = rows(sys.argv[1])
    eager = rows(sys.argv[2]) if len(sys.argv) > 2 else {}
    comp = rows(sys.argv[3]) if len(sys.argv) > 3 else {}
    print("| shape | cell | mode | rnnlens GPU tok/s | PyTorch eager (cuDNN for lstm/gru/rnn) | ratio | PyTorch compiled | ratio | rnnlens GEMM GFLOP/s | same GEMMs alone |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    keys = list(ours) + [k for k in eager if k not in ours]
    for k in keys:
        o = num(ours.get(k, {}), "tokens_per_s")
        e = num(eager.get(k, {}), "tokens_per_s")
        c = num(comp.get(k, {}), "tokens_per_s")
        re = o / e if o and e else None
        rc = o / c if o and c else None
        g = num(ours.get(k, {}), "achieved_gflops")
        p = num(ours.get(k, {}), "peak_gflops")
        print(f"| {k[0]} | {k[1]} | {k[2]} | {fmt(o)} | {fmt(e)} | {fmt(re, 2)} | {fmt(c)} | {fmt(rc, 2)} | {fmt(g)} | {fmt(p)} |")


if __name__ == "__main__":
    main()
