#!/usr/bin/env python3
"""What a trained RAN's units do over a long stream (docs/lm.md, "Why the RAN fell behind").

Runs the first RAN layer of an rnnlens checkpoint over the first N tokens of the Brown
corpus's validation split, from zeros, batch 1, dropout off (numpy, from model.safetensors and
the equations of docs/cells.md), and prints how many units end with |c| > 5 (an integrator:
tanh(c) is then stuck at ±1) and what their gates do, against the other units.

    bench/.venv/bin/python bench/ran_units.py runs/lm/diag/ran-tanh-c-carry [--tokens 3000] [--json]
"""

import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lm_twin import ROOT, brown_splits, encode_words, read_vocab  # noqa: E402


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()

    cfg = json.load(open(os.path.join(a.checkpoint, "config.json")))
    layer = cfg["layers"][0]
    if layer["cell"] != "ran" or layer.get("projection_size"):
        sys.exit("ran_units.py: the first layer must be a RAN without a projection")
    gates, output = layer["options"]["gates"], layer["options"]["output"]
    w = load_file(os.path.join(a.checkpoint, "model.safetensors"))
    p = "rnn.0."
    vocab = read_vocab(os.path.join(a.checkpoint, "vocab.txt"))
    ids = {t: i for i, t in enumerate(vocab)}
    text = brown_splits(os.path.join(ROOT, "data", "brown.txt.gz"))[1]
    if cfg["tokenizer"]["normalize"] == "lowercase":
        text = text.lower()
    stream = encode_words(text, ids, ids["<unk>"], ids["<eos>"])[: a.tokens]
    g = np.tanh if output == "tanh" else (lambda z: z)

    h = w[p + "b_c"].shape[0]
    c = np.zeros(h)
    cs, fs, ins, adds = [], [], [], []
    for tok in stream:
        x = w["embedding.weight"][tok]
        r = c if gates == "c" else g(c)
        content = w[p + "W_cx"] @ x + w[p + "b_c"]
        i = sigmoid(w[p + "W_ix"] @ x + w[p + "W_ic"] @ r + w[p + "b_i"])
        f = sigmoid(w[p + "W_fx"] @ x + w[p + "W_fc"] @ r + w[p + "b_f"])
        c = i * content + f * c
        cs.append(c)
        fs.append(f)
        ins.append(i)
        adds.append(i * content)
    cs, fs, ins, adds = map(np.array, (cs, fs, ins, adds))
    n = len(stream)
    stuck = np.abs(cs[-1]) > 5
    half = n // 2
    out = {
        "checkpoint": a.checkpoint,
        "gates": gates,
        "output": output,
        "units": int(h),
        "tokens": n,
        "stuck_fraction": float(stuck.mean()),
        "rms_c_end": float(np.sqrt((cs[-1] ** 2).mean())),
        "rms_c_after_35": float(np.sqrt((cs[min(34, n - 1)] ** 2).mean())),
        "stuck_mean_f": float(fs[:, stuck].mean()) if stuck.any() else None,
        "stuck_min_f_second_half": float(fs[half:, stuck].min()) if stuck.any() else None,
        "stuck_mean_i": float(ins[:, stuck].mean()) if stuck.any() else None,
        "stuck_drift_per_token": float(np.abs((cs[-1] - cs[half]) / (n - half))[stuck].mean()) if stuck.any() else None,
        "other_mean_f": float(fs[:, ~stuck].mean()) if (~stuck).any() else None,
        "f_above_0999": float((fs > 0.999).mean()),
    }
    if a.json:
        print(json.dumps(out))
        return
    print(f"{a.checkpoint}: RAN ({output}, gates reading {gates}), {h} units, {n} validation tokens from zeros")
    print(f"  units with |c| > 5 at the end: {100 * out['stuck_fraction']:.0f} %; rms of c after 35 tokens "
          f"{out['rms_c_after_35']:.1f}, at the end {out['rms_c_end']:.1f}")
    if stuck.any():
        print(f"  those units: mean f {out['stuck_mean_f']:.4f} (lowest in the second half {out['stuck_min_f_second_half']:.4f}), "
              f"mean i {out['stuck_mean_i']:.3f}, |c| grows {out['stuck_drift_per_token']:.3f} a token")
    if out["other_mean_f"] is not None:
        print(f"  the other units: mean f {out['other_mean_f']:.3f}")
    print(f"  (unit, token) pairs with f > 0.999: {100 * out['f_above_0999']:.0f} %")


if __name__ == "__main__":
    main()
