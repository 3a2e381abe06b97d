#!/usr/bin/env python3
"""The GPU device check's table: rnnlens's GPU engine beside PyTorch on CUDA, one row per
(shape, cell, mode), from the CSVs of `rnnlens bench --device gpu` and
`bench/pytorch_bench.py --device cuda [--compile]`.

    python3 bench/gpu_table.py rnnlens-gpu.csv pytorch-cuda.csv [pytorch-cuda-compile.csv]
    python3 bench/gpu_table.py --precisions rnnlens-gpu.csv rnnlens-gpu-f16-coop1.csv \
        rnnlens-gpu-f16-coop0.csv pytorch-cuda-precisions.csv

The second form is the precisions' table: rnnlens in f32, in f16 on tensor cores and in f16 in
the f32 kernels (operands rounded), beside PyTorch in float32 without TF32, with TF32 and in
automatic mixed precision (float16), for the shapes the f16 runs have.

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


def by_impl(path):
    """A CSV of several precisions (pytorch_bench.py --precision a,b): rows by (impl, shape, cell, mode)."""
    try:
        with open(path, newline="") as f:
            return {(r["impl"], r["shape"], r["cell"], r["mode"]): r for r in csv.DictReader(f)}
    except OSError:
        return {}


def precisions(f32, coop, rounded, torch):
    ours = [rows(f32), rows(coop), rows(rounded)]
    theirs = by_impl(torch)
    names = ["pytorch-cuda-f32-strict", "pytorch-cuda-tf32", "pytorch-cuda-f16"]
    print("| shape | cell | mode | rnnlens f32 | rnnlens f16 (tensor cores where offered) | rnnlens f16, RNNLENS_GPU_COOP=0 (rounded in the f32 kernels) | PyTorch f32, no TF32 | PyTorch TF32 | PyTorch f16 AMP | f16 / f16 AMP |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for k in ours[1] or ours[2]:
        o = [num(t.get(k, {}), "tokens_per_s") for t in ours]
        p = [num(theirs.get((n, *k), {}), "tokens_per_s") for n in names]
        ratio = o[1] / p[2] if o[1] and p[2] else None
        print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(fmt(x) for x in o + p) + f" | {fmt(ratio, 2)} |")


def main():
    if sys.argv[1:2] == ["--precisions"]:
        return precisions(*sys.argv[2:6])
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
