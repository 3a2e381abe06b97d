#!/usr/bin/env python3
"""The cost of the Python binding: `Model.log_probs` on a text against the command line's
`rnnlens eval --input FILE --per-token OUT` on the same text, both as whole processes (start,
load, tokenize, score), alternated round by round; and the binding's own call alone.

    python/.venv/bin/python bench/python_cost.py CHECKPOINT TEXT_FILE [--rounds 7]

Prints the median seconds of each and their ratio (binding / command line)."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("text")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "rnnlens"))
    a = ap.parse_args()
    out = os.path.join(tempfile.mkdtemp(), "per_token.txt")
    cli = [a.bin, "eval", "--checkpoint", a.checkpoint, "--input", a.text, "--per-token", out]
    py = [sys.executable, "-c", f"import rnnlens; rnnlens.load({a.checkpoint!r}).log_probs(open({a.text!r}, encoding='utf-8').read())"]
    t_cli, t_py, t_call = [], [], []
    import rnnlens

    m = rnnlens.load(a.checkpoint)
    text = open(a.text, encoding="utf-8").read()
    for _ in range(a.rounds):
        for cmd, acc in ((cli, t_cli), (py, t_py)):
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            acc.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        m.log_probs(text)
        t_call.append(time.perf_counter() - t0)
    med = statistics.median
    n = len(m.encode(text))
    print(f"{n} tokens, {m}")
    print(f"command line (eval --per-token), whole process: median {med(t_cli):.3f} s (min {min(t_cli):.3f}, max {max(t_cli):.3f})")
    print(f"Python (load + log_probs), whole process:       median {med(t_py):.3f} s (min {min(t_py):.3f}, max {max(t_py):.3f})")
    print(f"Python, the log_probs call alone:               median {med(t_call):.3f} s")
    print(f"ratio Python / command line (medians): {med(t_py) / med(t_cli):.3f}")


if __name__ == "__main__":
    main()
