#!/usr/bin/env python3
"""Whether rnnlens's worker pool and PyTorch's get in each other's way: the median training step
of a small layer with its head (docs/python.md's example: an RDA of 16 units reading one value a
step, batch 64, 30 steps, cross-entropy, Adam) or of a C1-sized RAN (128 inputs, 512 units,
batch 64, 100 steps), at the thread counts given.

    python bench/torch_threads.py TORCH_THREADS RNNLENS_THREADS ENGINE {small,c1}
"""

import sys
import time

import torch
import torch.nn as nn

import rnnlens
from rnnlens.torch import RAN, RDA


def main(torch_threads, rnnlens_threads, engine, size):
    torch.set_num_threads(torch_threads)
    rnnlens.set_threads(rnnlens_threads)
    torch.manual_seed(0)
    if size == "small":
        layer, head, x, n = RDA(1, 16, engine=engine), nn.Linear(16, 2), torch.rand(30, 64, 1), 50
    else:
        layer, head, x, n = RAN(128, 512, engine=engine), nn.Linear(512, 2), torch.randn(100, 64, 128), 5
    opt = torch.optim.Adam(list(layer.parameters()) + list(head.parameters()), lr=0.01)
    label = (x[0, :, 0] > 0.5).long()

    def step():
        loss = nn.functional.cross_entropy(head(layer(x)[0][-1]), label)
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"{size}: PyTorch {torch_threads} threads, rnnlens {rnnlens_threads}, engine {engine}: median step {1e3 * times[n // 2]:.2f} ms")


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[4] not in ("small", "c1"):
        sys.exit(__doc__)
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
