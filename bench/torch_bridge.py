#!/usr/bin/env python3
"""rnnlens.torch's fused engine against the plain loops and torch.nn, one training step of one
layer (forward, and backward from a loss on its outputs), every ratio from one run.

    python bench/torch_bridge.py [--shapes c1,c3] [--precisions f32,bf16] [--threads N] [--reps 5]

The shapes are `rnnlens bench`'s: C1 reads 128-wide inputs into 512 units (batch 64, 100
steps; the ISAN reads 27 symbols), every step's output in the loss; C3 reads 2 inputs into 250
units (batch 100, 1000 steps), the last step's output in the loss. bf16 is
`torch.autocast("cpu", dtype=torch.bfloat16)` around forward and loss, for every engine.
"bridge" is the share of the fused step spent outside rnnlens's kernels: forward and backward
through the module (autograd, the output gradient given) less the same two calls on the
extension directly with numpy arrays, over the whole step. Prints a table and writes `--csv` when given.
"""

import argparse
import csv
import statistics
import sys
import time

import torch

import rnnlens
import rnnlens.torch as rt
from rnnlens import _rnnlens

SHAPES = {"c1": dict(d=128, h=512, batch=64, steps=100, every=True, symbols=27),
          "c3": dict(d=2, h=250, batch=100, steps=1000, every=False, symbols=27)}

CELLS = {
    "ran-tanh": lambda e, s: rt.RAN(s["d"], s["h"], engine=e),
    "rwa": lambda e, s: rt.RWA(s["d"], s["h"], engine=e),
    "rda-exp-tanh": lambda e, s: rt.RDA(s["d"], s["h"], engine=e),
    "isan": lambda e, s: rt.ISAN(s["symbols"], s["h"] if s["h"] < 300 else 216, engine=e),
    "lstm": lambda e, s: rt.LSTM(s["d"], s["h"], engine=e),
    "gru": lambda e, s: rt.GRU(s["d"], s["h"], engine=e),
}
TORCH_NN = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}


def median_time(fn, reps, warm=True):
    if warm:
        fn()  # workspaces, packed weights, the allocator
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def step_fn(module, x, every, precision):
    def loss_of(y):
        return (y if every else y[-1]).float().pow(2).mean()

    def step():
        module.zero_grad(set_to_none=True)
        if precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = module(x)[0]
                loss = loss_of(y)
        else:
            loss = loss_of(module(x)[0])
        loss.backward()
    return step


def bridge_times(module, x, every, precision, reps):
    """(module, raw): the median of forward plus backward through the module (autograd, the
    output gradient given) and of the same two calls on the extension directly."""
    import numpy as np

    layer = module._layer()
    w = module._weights().numpy()
    tokens = x.to(torch.int32).numpy().view(np.uint32) if x.dtype == torch.long else None
    xs = None if tokens is not None else x.numpy()
    y0, _, _ = layer.forward(w, xs, tokens, None, precision, False)
    dy = np.random.default_rng(0).standard_normal(y0.shape).astype(np.float32)
    if not every:
        dy[:-1] = 0
    dyt = torch.from_numpy(dy)

    def through_module():
        module.zero_grad(set_to_none=True)
        t = time.perf_counter()
        if precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y, _ = module(x)
        else:
            y, _ = module(x)
        torch.autograd.backward(y, dyt)
        return time.perf_counter() - t

    def raw():
        t = time.perf_counter()
        y, s, tape = layer.forward(w, xs, tokens, None, precision, True)
        layer.backward(tape, w, xs, tokens, None, dy, np.zeros_like(s), False, False)  # x needs no gradient, as in the module's step
        return time.perf_counter() - t

    through_module(), raw()
    return (statistics.median(through_module() for _ in range(reps)), statistics.median(raw() for _ in range(reps)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="c1,c3")
    ap.add_argument("--precisions", default="f32,bf16")
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--plain", default="c1:f32,c1:bf16,c3:f32",
                    help="shape:precision pairs whose plain loop is timed (at C3 one step of the plain loop takes minutes: "
                         "timed once, unwarmed)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rnnlens.set_threads(a.threads)
    precisions = [p for p in a.precisions.split(",") if p != "bf16" or _rnnlens.bf16_supported()]
    if len(precisions) < len(a.precisions.split(",")):
        print("bf16 left out: this CPU has no AVX512-BF16", file=sys.stderr)
    rows = []
    print(f"threads {a.threads}, median of {a.reps} steps (ms); ratios are the other engine's time over the fused one's")
    print(f"{'shape':5} {'cell':13} {'prec':4} {'fused':>8} {'plain':>9} {'x plain':>8} {'torch.nn':>9} {'x nn':>6} {'bridge':>7}")
    for shape in a.shapes.split(","):
        s = SHAPES[shape]
        for cell in a.cells.split(","):
            torch.manual_seed(0)
            fused = CELLS[cell]("rnnlens", s)
            plain = CELLS[cell]("torch", s)
            plain.load_state_dict(fused.state_dict())
            if cell == "isan":
                x = torch.randint(0, s["symbols"], (s["steps"], s["batch"]))
            else:
                x = torch.randn(s["steps"], s["batch"], s["d"])
            for prec in precisions:
                t_fused = median_time(step_fn(fused, x, s["every"], prec), a.reps)
                t_mod, t_raw = bridge_times(fused, x, s["every"], prec, a.reps)
                t_plain = None
                if f"{shape}:{prec}" in a.plain.split(","):
                    quick = shape == "c1"
                    t_plain = median_time(step_fn(plain, x, s["every"], prec), max(1, a.reps // 3) if quick else 1, warm=quick)
                t_nn = None
                if cell in TORCH_NN:
                    nn_mod = TORCH_NN[cell](s["d"], s["h"])
                    t_nn = median_time(step_fn(nn_mod, x, s["every"], prec), a.reps)
                bridge = (t_mod - t_raw) / t_fused
                row = dict(shape=shape, cell=cell, precision=prec, threads=a.threads, fused_ms=1e3 * t_fused,
                           module_ms=1e3 * t_mod, raw_ms=1e3 * t_raw, plain_ms=None if t_plain is None else 1e3 * t_plain, torch_nn_ms=None if t_nn is None else 1e3 * t_nn,
                           plain_over_fused=None if t_plain is None else t_plain / t_fused, nn_over_fused=None if t_nn is None else t_nn / t_fused,
                           bridge_share=bridge)
                rows.append(row)
                nn_txt = f"{1e3 * t_nn:9.1f} {t_nn / t_fused:6.2f}" if t_nn else f"{'-':>9} {'-':>6}"
                plain_txt = f"{1e3 * t_plain:9.1f} {t_plain / t_fused:8.2f}" if t_plain else f"{'-':>9} {'-':>8}"
                print(f"{shape:5} {cell:13} {prec:4} {1e3 * t_fused:8.1f} {plain_txt} {nn_txt} {100 * bridge:6.1f}%", flush=True)
                if a.csv:
                    with open(a.csv, "w", newline="") as f:
                        w = csv.DictWriter(f, fieldnames=list(rows[0]))
                        w.writeheader()
                        w.writerows(rows)


if __name__ == "__main__":
    main()
