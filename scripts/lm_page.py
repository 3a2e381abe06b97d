#!/usr/bin/env python3
"""Writes docs/lm.md's tables from the records of scripts/lm.sh's runs (no dependencies beyond
Python).

    python3 scripts/lm_page.py docs/lm/runs docs/lm.md

A record is a finished run's directory under the first argument: metrics.jsonl, config.json,
and result.json (test perplexity, recurrent parameters) or diverged.txt. Each table replaces
what lies between `<!-- lm.sh: NAME -->` and `<!-- /lm.sh -->` in the page; a table none of
whose runs is recorded is left as the page has it, and the prose around the tables is not
touched.
"""

import json
import math
import os
import re
import sys

# The later paper's table 1 (PTB test perplexity, RNN parameters) and table 2.
PAPER = {
    "rnn": ("S-RNN", 352.6, "1.31M"),
    "gru": ("GRU", 147.1, "3.94M"),
    "lstm": ("LSTM", 157.7, "5.25M"),
    "ran-identity": ("RAN (identity)", 130.9, "2.89M"),
    "ran-tanh": ("RAN (tanh)", 121.0, "2.89M"),
}
PAPER_ABLATIONS = {
    "lstm": ("LSTM", 157.7, "5.25M"),
    "lstm-simple-content": ("simplified content layer", 134.7, "4.20M"),
    "lstm-no-output-gate": ("no output gate (gates still read h)", None, None),
    "ran-tanh-gates-c": ("RAN (tanh), gates reading c, state carried: the paper's chain ends here", 121.0, "2.89M"),
}


def load(root, name):
    d = os.path.join(root, name)
    res = os.path.join(d, "result.json")
    if not os.path.exists(os.path.join(d, "metrics.jsonl")):
        return None
    recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
    valid = [r for r in recs if r["kind"] == "valid"]
    out = {
        "name": name,
        "epochs": len(valid),
        # a figure that overflowed is written "inf" (rnnlens's rundir::figure)
        "best_valid": min((float(r["perplexity"]) for r in valid), default=None),
        "last_valid": float(valid[-1]["perplexity"]) if valid else None,
        "seconds": recs[-1]["seconds"] if recs else None,
        "tokens": recs[-1]["tokens"] if recs else None,
    }
    if os.path.exists(res):
        out.update(json.load(open(res)))
    return out


def fmt_params(n):
    """The papers' count (the recurrent layers; embedding and softmax excluded), as lm.sh read
    it from the run's model.safetensors into result.json."""
    if n is None:
        return "-"
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def fmt_time(s):
    if s is None:
        return "-"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def ppl(x):
    return "-" if x is None else f"{x:.1f}"


EXTRA_ROWS = {
    "ran-tanh-carried": "RAN (tanh), state carried across windows",
    "ran-tanh-gates-c": "RAN (tanh), gates reading c, state carried: the later paper's equations",
    "ran-identity-carried": "RAN (identity), state carried across windows",
}


def recorded(root, name):
    d = os.path.join(root, name)
    return any(os.path.exists(os.path.join(d, f)) for f in ("result.json", "diverged.txt"))


def diverged(root, name):
    p = os.path.join(root, name, "diverged.txt")
    if not os.path.exists(p):
        return None
    m = re.search(r"at step ([0-9]+)", open(p).read())
    return f"diverged at step {m.group(1)}" if m else "diverged"


# The paper-set-up rows that stand for a default row in the ordering "as the paper runs it".
PAPER_SETUP = {"ran-tanh-carried": "ran-tanh"}


def keys_of(ours):
    # The PAPER key of each (perplexity, label) in `ours`, by its label.
    by_label = {v[0]: k for k, v in PAPER.items()}
    return [by_label[n] for _, n in ours]


def five_cells(root):
    rows, ours, paper_setup = [], [], {}
    head = ("| cell | state across windows | test perplexity | best validation | epochs | recurrent parameters | wall time | "
            "paper: PTB test perplexity | paper: parameters |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for key in ["rnn", "gru", "lstm", "ran-identity", "ran-tanh", "ran-tanh-carried", "ran-tanh-gates-c", "ran-identity-carried"]:
        name = "five-cells/" + key
        label, p_ppl, p_par = PAPER[key] if key in PAPER else (EXTRA_ROWS[key], None, None)
        carried = "carried" if key in ("rnn", "gru", "lstm") or key.endswith("carried") or key.endswith("gates-c") else "from zeros"
        d = diverged(root, name)
        if d:
            rows.append(f"| {label} | {carried} | {d} | | | | | {ppl(p_ppl)} | {p_par or ''} |")
            continue
        r = load(root, name)
        if r is None:
            rows.append(f"| {label} | {carried} | not run | | | | | {ppl(p_ppl)} | {p_par or ''} |")
            continue
        rows.append(f"| {label} | {carried} | {ppl(r.get('test_perplexity'))} | {ppl(r['best_valid'])} | {r['epochs']} | "
                    f"{fmt_params(r.get('recurrent_params'))} | {fmt_time(r['seconds'])} | {ppl(p_ppl)} | {p_par or ''} |")
        if key in PAPER and r.get("test_perplexity"):
            ours.append((r["test_perplexity"], PAPER[key][0]))
        if key in PAPER_SETUP and r.get("test_perplexity"):
            paper_setup[PAPER_SETUP[key]] = (r["test_perplexity"], PAPER[PAPER_SETUP[key]][0] + ", state carried")
    order = " < ".join(f"{n} {p:.1f}" for p, n in sorted(ours))
    # The same with each RAN run as the paper ran it, where that run exists.
    as_paper = [paper_setup.get(k, (p, n)) for (p, n), k in zip(ours, keys_of(ours))]
    order_paper = " < ".join(f"{n} {p:.1f}" for p, n in sorted(as_paper))
    paper = " < ".join(f"{n} {p:.1f}" for n, p, _ in sorted(PAPER.values(), key=lambda v: v[1]))
    extra = f"\n\nWith the RAN run as the paper runs it (state carried): {order_paper}." if paper_setup else ""
    return f"{head}\n" + "\n".join(rows) + f"\n\nOrdering here: {order or '(no runs yet)'}.{extra}\n\nThe paper's: {paper}.\n"


def ablations(root):
    head = ("| model | test perplexity | best validation | recurrent parameters | wall time | "
            "paper: PTB test perplexity | paper: parameters |\n|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for key, name in [("lstm", "five-cells/lstm"), ("lstm-simple-content", "ablations/lstm-simple-content"),
                      ("lstm-no-output-gate", "ablations/lstm-no-output-gate"),
                      ("ran-tanh-gates-c", "five-cells/ran-tanh-gates-c")]:
        label, p_ppl, p_par = PAPER_ABLATIONS[key]
        r = load(root, name)
        if r is None:
            rows.append(f"| {label} | not run | | | | {ppl(p_ppl)} | {p_par or ''} |")
            continue
        rows.append(f"| {label} | {ppl(r.get('test_perplexity'))} | {ppl(r['best_valid'])} | "
                    f"{fmt_params(r.get('recurrent_params'))} | {fmt_time(r['seconds'])} | {ppl(p_ppl)} | {p_par or ''} |")
    return f"{head}\n" + "\n".join(rows) + "\n"


def twin(root):
    head = ("| seed | rnnlens: test perplexity | PyTorch: test perplexity | rnnlens scoring the PyTorch weights | "
            "rnnlens: wall time | PyTorch: wall time |\n|---:|---:|---:|---:|---:|---:|")
    rows, a, b = [], [], []
    for s in [1, 2, 3]:
        r = load(root, f"twin/rnnlens-s{s}")
        pt = os.path.join(root, "twin", f"torch-s{s}")
        if r is None or not os.path.exists(os.path.join(pt, "result.json")):
            rows.append(f"| {s} | not run | | | | |")
            continue
        t = json.load(open(os.path.join(pt, "result.json")))
        cross = "-"
        ev = os.path.join(pt, "rnnlens-eval.txt")
        if os.path.exists(ev):
            m = re.search(r"perplexity ([0-9.]+)", open(ev).read())
            cross = m.group(1) if m else "-"
        a.append(r["test_perplexity"])
        b.append(t["test_perplexity"])
        rows.append(f"| {s} | {r['test_perplexity']:.2f} | {t['test_perplexity']:.2f} | {cross} | "
                    f"{fmt_time(r['seconds'])} | {fmt_time(t['seconds'])} |")
    text = f"{head}\n" + "\n".join(rows) + "\n"
    if a and len(a) == len(b):
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        text += (f"\nMean over {len(a)} seeds: rnnlens {ma:.2f}, PyTorch {mb:.2f}; "
                 f"rnnlens / PyTorch = {ma / mb:.4f} ({100 * (ma / mb - 1):+.2f} %).\n")
    return text


def diag_cell(root, name):
    """Validation perplexity after the run's one epoch, or where it diverged."""
    d = diverged(root, name)
    if d:
        return d
    r = load(root, name)
    return "not run" if r is None or r["last_valid"] is None else f"{r['last_valid']:.1f}"


def diagnose(root):
    rows = [("LSTM", "lstm"), ("RAN (tanh), gates reading c", "ran-tanh-c"), ("RAN (tanh), gates reading h", "ran-tanh-h"),
            ("RAN (identity)", "ran-identity")]
    out = ["| cell | no dropout, state carried | no dropout, from zeros each window | dropout 0.5, carried | dropout 0.5, from zeros |",
           "|---|---:|---:|---:|---:|"]
    for label, key in rows:
        cells = [diag_cell(root, f"diag/{key}-{c}") for c in ["carried", "reset", "carried-d5", "reset-d5"]]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("| variant (no dropout, state carried) | validation perplexity |")
    out.append("|---|---:|")
    for label, key in [("RAN (tanh), gates reading c, learning rate 0.001", "ran-tanh-c-lr0.001"),
                       ("RAN (tanh), gates reading c, windows of 100", "ran-tanh-c-bptt100"),
                       ("RAN (identity), learning rate 0.001", "ran-identity-lr0.001"),
                       ("RAN (identity), learning rate 0.0002", "ran-identity-lr0.0002"),
                       ("LSTM, the first paper's SGD (rate 1, uniform ±0.05)", "lstm-sgd"),
                       ("RAN (tanh), gates reading c, the same SGD", "ran-tanh-c-sgd"),
                       ("RAN (identity), the same SGD", "ran-identity-sgd")]:
        out.append(f"| {label} | {diag_cell(root, 'diag/' + key)} |")
    out.append("")
    out.append("| `rnnlens train --cell ...` with its defaults (256-d embeddings, dropout 0.25) | validation perplexity |")
    out.append("|---|---:|")
    for label, key in [("lstm", "defaults-lstm"),
                       ("ran-tanh, before this page (gates reading c, state carried)", "defaults-ran-tanh-before"),
                       ("ran-tanh, now (gates reading h, from zeros each window)", "defaults-ran-tanh"),
                       ("ran-tanh, now but with the state carried", "defaults-ran-tanh-carried"),
                       ("ran-identity, before this page", "defaults-ran-identity-before"),
                       ("ran-identity, now", "defaults-ran-identity")]:
        out.append(f"| {label} | {diag_cell(root, 'diag/' + key)} |")
    out.append("")
    out.append("| RAN (tanh) run | units with \\|c\\| > 5 after 3,000 tokens | their mean f | \\|c\\| grows a token | other units' mean f | rms c after 35 tokens |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for label, key in [("gates reading c, no dropout", "ran-tanh-c-carried"), ("gates reading c, dropout 0.5", "ran-tanh-c-carried-d5"),
                       ("gates reading h, no dropout", "ran-tanh-h-carried"), ("gates reading h, dropout 0.5", "ran-tanh-h-carried-d5"),
                       ("gates reading h, no dropout, trained from zeros each window", "ran-tanh-h-reset")]:
        p = os.path.join(root, "diag", key, "units.json")
        if not os.path.exists(p):
            out.append(f"| {label} | not run | | | | |")
            continue
        u = json.load(open(p))
        f = lambda v, fmt: "-" if v is None else format(v, fmt)
        out.append(f"| {label} | {100 * u['stuck_fraction']:.0f} % | {f(u['stuck_mean_f'], '.4f')} | "
                   f"{f(u['stuck_drift_per_token'], '.3f')} | {f(u['other_mean_f'], '.3f')} | {u['rms_c_after_35']:.1f} |")
    return "\n".join(out) + "\n"


def main():
    root, page = sys.argv[1], sys.argv[2]
    text = open(page).read()
    for name, fn in [("diagnose", diagnose), ("five-cells", five_cells), ("ablations", ablations), ("twin", twin)]:
        pat = re.compile(r"(<!-- lm\.sh: " + name + r" -->\n).*?(<!-- /lm\.sh -->)", re.S)
        if not pat.search(text):
            sys.exit(f"{page} has no <!-- lm.sh: {name} --> ... <!-- /lm.sh --> section")
        section = os.path.join(root, "diag" if name == "diagnose" else name)
        if not any(recorded(dp, "") for dp, _, _ in os.walk(section)):
            print(f"{name}: no run recorded under {section}; the page's table is kept")
            continue
        body = fn(root)
        text = pat.sub(lambda m: m.group(1) + body + m.group(2), text)
    open(page, "w").write(text)
    print(f"wrote the tables of {page}")


if __name__ == "__main__":
    main()
