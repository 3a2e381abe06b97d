#!/usr/bin/env python3
"""A PyTorch twin of an rnnlens LSTM language-model run.

Reads an rnnlens run directory (its trainer.json for the configuration, its vocab.txt for the
token ids) and trains the same model the same way in PyTorch, written independently from
rnnlens's Rust code (src/training/, src/model/, src/eval/, src/training/optim.rs, src/data/ are what
it follows):

- data: the embedded Brown corpus (data/brown.txt.gz), split by document (i % 20 == 18 valid,
  19 test), lowercased if the run was, word-level tokens: whitespace-separated words, one <eos>
  a line (the empty line between two documents is one <eos>), words outside vocab.txt <unk>;
- batching: the stream cut into `batch_size` contiguous columns, windows of `bptt` steps, the
  last incomplete window dropped; the state carried from window to window and reset at each
  epoch's start;
- model: embedding -> stacked LSTM (torch semantics) -> linear decoder; Xavier-uniform weights
  (the embedding's fan is (E, V), each gate block's (D, H)), biases zero except the forget rows
  of bias_ih at 1;
- dropout (variational: one mask per row per window, drawn fresh each window, scaled by
  1/(1-p)): on the embeddings, on every layer's output, and on the recurrent input h_{t-1} of
  the gates (`rec_dropout`);
- loss: the mean NLL over the window's tokens; clipping to a global norm; Adam (0.9, 0.999,
  1e-8) or SGD; the rate multiplied by `lr_decay` each epoch from `decay_start` on;
- evaluation: validation after each epoch with `eval_batch_size` columns, windows of `bptt`,
  state carried; test at the end as one stream (batch 1), the exact evaluation of
  `rnnlens eval --split test`.

Writes into --out: metrics.jsonl in rnnlens's format (so `rnnlens curves` draws both runs),
config.json and vocab.txt copied from the run, the trained weights as model.safetensors under
rnnlens's names (so `rnnlens eval --checkpoint OUT --input OUT/test.txt` scores the twin's
weights with rnnlens's code), test.txt (the test split's text), and result.json (test and
validation perplexity, wall time).

    bench/.venv/bin/python bench/lm_twin.py --run runs/lm/twin-rnnlens-s1 --seed 1 --out runs/lm/twin-torch-s1
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

def brown_splits(path):
    """The train, valid and test texts of the Brown corpus, as rnnlens splits them."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        text = f.read()
    docs, cur = [], []
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if line.strip() == "":
            if cur:
                docs.append("\n".join(cur))
                cur = []
        else:
            cur.append(line)
    if cur:
        docs.append("\n".join(cur))
    parts = [[], [], []]
    for i, d in enumerate(docs):
        parts[{18: 1, 19: 2}.get(i % 20, 0)].append(d)
    return ["\n\n".join(p) + "\n" for p in parts]


def read_vocab(path):
    """vocab.txt: one token a line, backslash escapes (docs/checkpoint.md)."""
    tokens = []
    with open(path, "r", encoding="utf-8") as f:
        for line in f.read().split("\n")[:-1]:
            out, i = [], 0
            while i < len(line):
                c = line[i]
                if c == "\\" and i + 1 < len(line):
                    n = line[i + 1]
                    if n == "x":
                        out.append(chr(int(line[i + 2:i + 4], 16)))
                        i += 4
                        continue
                    out.append({"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}[n])
                    i += 2
                    continue
                out.append(c)
                i += 1
            tokens.append("".join(out))
    return tokens


def encode_words(text, ids, unk, eos):
    body = text[:-1] if text.endswith("\n") else text
    out = []
    for line in body.split("\n"):
        out.extend(ids.get(w, unk) for w in line.split())
        out.append(eos)
    return out


def batchify(stream, batch):
    """[len, batch]: column b is the b-th contiguous slice of the stream."""
    n = len(stream) // batch
    t = torch.tensor(stream[: n * batch], dtype=torch.long)
    return t.view(batch, n).t().contiguous()


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------

class LstmLm(nn.Module):
    def __init__(self, vocab, embed, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.layers = nn.ModuleList()
        d = embed
        for h in hidden:
            self.layers.append(nn.LSTM(d, h))
            d = h
        self.decoder = nn.Linear(d, vocab)

    def init_xavier(self, gen):
        def uniform(t, fan_in, fan_out):
            a = math.sqrt(6.0 / (fan_in + fan_out))
            with torch.no_grad():
                t.copy_(torch.rand(t.shape, generator=gen, dtype=torch.float64).mul(2 * a).sub(a).float())

        v, e = self.embedding.weight.shape
        uniform(self.embedding.weight, e, v)
        for lstm in self.layers:
            h, d = lstm.hidden_size, lstm.input_size
            uniform(lstm.weight_ih_l0, d, h)
            uniform(lstm.weight_hh_l0, h, h)
            with torch.no_grad():
                lstm.bias_ih_l0.zero_()
                lstm.bias_ih_l0[h:2 * h] = 1.0  # forget gate rows (i, f, g, o)
                lstm.bias_hh_l0.zero_()
        uniform(self.decoder.weight, self.decoder.in_features, self.decoder.out_features)
        with torch.no_grad():
            self.decoder.bias.zero_()

    def initial_state(self, batch):
        return [(torch.zeros(batch, l.hidden_size), torch.zeros(batch, l.hidden_size)) for l in self.layers]

    def forward(self, x, state, drop=None, gen=None):
        """x [T, B] -> logits [T*B, V] and the final states. `drop` = (p, p_rec) in training."""
        emb = self.embedding(x)
        if drop is not None and drop[0] > 0:
            emb = emb * mask(emb.shape[1:], drop[0], gen)
        out, final = emb, []
        for lstm, (h, c) in zip(self.layers, state):
            if drop is not None and drop[1] > 0:
                out, (h, c) = lstm_loop(lstm, out, h, c, mask(h.shape, drop[1], gen))
            else:
                o, (hn, cn) = lstm(out, (h.unsqueeze(0), c.unsqueeze(0)))
                out, h, c = o, hn[0], cn[0]
            if drop is not None and drop[0] > 0:
                out = out * mask(out.shape[1:], drop[0], gen)
            final.append((h, c))
        return self.decoder(out.reshape(-1, out.shape[-1])), final


def mask(shape, p, gen):
    """A variational mask: one draw a row, the same at every step of the window."""
    keep = torch.rand(shape, generator=gen) >= p
    return keep.float() / (1.0 - p)


def lstm_loop(lstm, x, h, c, rec_mask):
    """torch.nn.LSTM's equations with the recurrent input h_{t-1} dropped out (one mask per
    window): all input projections in one matmul, the recurrence step by step."""
    xp = F.linear(x, lstm.weight_ih_l0, lstm.bias_ih_l0 + lstm.bias_hh_l0)
    outs = []
    for t in range(x.shape[0]):
        g = xp[t] + F.linear(h * rec_mask, lstm.weight_hh_l0)
        i, f, gg, o = g.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs), (h, c)


def detach(state):
    return [(h.detach(), c.detach()) for h, c in state]


# ---------------------------------------------------------------------------------------------
# Training and evaluation
# ---------------------------------------------------------------------------------------------

def scheduled_lr(lr, decay, start, epoch):
    return lr * decay ** max(0, epoch + 2 - max(start, 1))


@torch.no_grad()
def evaluate(model, stream, batch, bptt):
    data = batchify(stream, batch)
    state = model.initial_state(batch)
    nll, n, i = 0.0, 0, 0
    while i + 1 < data.shape[0]:
        t = min(bptt, data.shape[0] - 1 - i)
        logits, state = model(data[i:i + t], state)
        nll += F.cross_entropy(logits, data[i + 1:i + 1 + t].reshape(-1), reduction="sum").item()
        n += t * batch
        i += t
    return nll / n, n


def save_safetensors(model, path):
    from safetensors.torch import save_file
    t = {"embedding.weight": model.embedding.weight}
    for l, lstm in enumerate(model.layers):
        for name in ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]:
            t[f"rnn.{l}.{name}"] = getattr(lstm, name + "_l0")
    t["decoder.weight"] = model.decoder.weight
    t["decoder.bias"] = model.decoder.bias
    save_file({k: v.detach().contiguous() for k, v in t.items()}, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="the rnnlens run directory to follow (trainer.json, vocab.txt)")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True, help="directory for metrics.jsonl, result.json and the weights")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (quick checks)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    cfg = json.load(open(os.path.join(a.run, "trainer.json")))["config"]
    unsupported = []
    if cfg["cell"] != "lstm":
        unsupported.append(f"cell {cfg['cell']} (the twin is an LSTM)")
    if cfg.get("data") is not None or cfg.get("format") not in (None, "brown"):
        unsupported.append("a corpus other than the embedded Brown corpus")
    if cfg.get("level") not in (None, "word"):
        unsupported.append("a level other than word")
    if cfg.get("projection_size") is not None or cfg.get("learn_initial_state") or cfg.get("sampled_softmax", 0):
        unsupported.append("projection, learned initial state or sampled softmax")
    if cfg["init"] != "xavier" or cfg["dropout_kind"] != "variational" or not cfg["carry_state"] or cfg.get("clip_value"):
        unsupported.append("init other than xavier, standard dropout, no state carrying or value clipping")
    if unsupported:
        sys.exit("lm_twin.py: the run uses " + "; ".join(unsupported))

    vocab = read_vocab(os.path.join(a.run, "vocab.txt"))
    ids = {w: i for i, w in enumerate(vocab)}
    unk, eos = ids["<unk>"], ids["<eos>"]
    texts = brown_splits(os.path.join(ROOT, "data", "brown.txt.gz"))
    if cfg.get("lowercase", True):
        texts = [t.lower() for t in texts]
    train, valid, test = (encode_words(t, ids, unk, eos) for t in texts)
    print(f"data: {len(train)} train / {len(valid)} valid / {len(test)} test tokens, vocabulary {len(vocab)}", flush=True)

    os.makedirs(a.out, exist_ok=True)
    gen = torch.Generator().manual_seed(a.seed)
    torch.manual_seed(a.seed)
    model = LstmLm(len(vocab), cfg["embedding_size"], cfg["hidden_size"])
    model.init_xavier(gen)
    params = list(model.parameters())
    if cfg["optimizer"] == "adam":
        opt = torch.optim.Adam(params, lr=cfg["lr"], betas=(0.9, 0.999), eps=1e-8)
    else:
        opt = torch.optim.SGD(params, lr=cfg["lr"])
    batch, bptt = cfg["batch_size"], cfg["bptt"]
    drop = (cfg["dropout"], cfg["rec_dropout"])
    data = batchify(train, batch)
    windows = (data.shape[0] - 1) // bptt
    print(f"model: lstm {cfg['hidden_size']}, embedding {cfg['embedding_size']}, "
          f"{sum(p.numel() for p in params)} parameters; {windows} windows an epoch", flush=True)

    records, step, tokens, t0 = [], 0, 0, time.time()
    log_nll, log_n = 0.0, 0
    metrics = open(os.path.join(a.out, "metrics.jsonl"), "w")

    def record(r):
        records.append(r)
        metrics.write(json.dumps(r) + "\n")
        metrics.flush()

    def report(epoch, lr):
        nonlocal log_nll, log_n
        if log_n:
            record({"kind": "train", "step": step, "epoch": epoch + 1, "tokens": tokens,
                    "seconds": round(time.time() - t0, 3), "loss": log_nll / log_n, "lr": lr})
        log_nll, log_n = 0.0, 0

    done = False
    for epoch in range(cfg["epochs"]):
        lr = scheduled_lr(cfg["lr"], cfg["lr_decay"], cfg["decay_start"], epoch)
        for g in opt.param_groups:
            g["lr"] = lr
        model.train()
        state = model.initial_state(batch)
        te = time.time()
        for w in range(windows):
            if a.max_steps is not None and step >= a.max_steps:
                done = True
                break
            i = w * bptt
            x, y = data[i:i + bptt], data[i + 1:i + 1 + bptt]
            logits, state = model(x, state, drop, gen)
            state = detach(state)
            loss = F.cross_entropy(logits, y.reshape(-1))
            opt.zero_grad(set_to_none=False)
            loss.backward()
            if cfg.get("clip_norm"):
                torch.nn.utils.clip_grad_norm_(params, cfg["clip_norm"])
            opt.step()
            step += 1
            tokens += y.numel()
            log_nll += loss.item() * y.numel()
            log_n += y.numel()
            if step % 10 == 0:
                report(epoch, lr)
                if step % 200 == 0:
                    r = records[-1]
                    print(f"epoch {epoch + 1} window {w + 1}/{windows}: loss {r['loss']:.3f}, "
                          f"{(w + 1) * bptt * batch / (time.time() - te):.0f} tokens/s", flush=True)
        report(epoch, lr)
        model.eval()
        vnll, vn = evaluate(model, valid, cfg["eval_batch_size"], bptt)
        record({"kind": "valid", "step": step, "epoch": epoch + 1, "tokens": tokens,
                "seconds": round(time.time() - t0, 3), "nll": vnll, "perplexity": math.exp(vnll)})
        print(f"epoch {epoch + 1}/{cfg['epochs']}: valid perplexity {math.exp(vnll):.2f} ({vn} tokens), "
              f"lr {lr:.3e}, {time.time() - te:.0f}s", flush=True)
        if done:
            break
    metrics.close()
    seconds = time.time() - t0
    model.eval()
    tnll, tn = evaluate(model, test, 1, 100)
    print(f"test perplexity {math.exp(tnll):.2f} over {tn} tokens (batch 1, one stream)", flush=True)

    save_safetensors(model, os.path.join(a.out, "model.safetensors"))
    for f in ["config.json", "vocab.txt"]:
        with open(os.path.join(a.run, f), "rb") as src, open(os.path.join(a.out, f), "wb") as dst:
            dst.write(src.read())
    with open(os.path.join(a.out, "test.txt"), "w", encoding="utf-8") as f:
        f.write(texts[2])
    json.dump({"seed": a.seed, "steps": step, "seconds": seconds, "test_nll": tnll, "test_perplexity": math.exp(tnll),
               "test_tokens": tn, "valid_perplexity": records[-1].get("perplexity"), "torch": torch.__version__},
              open(os.path.join(a.out, "result.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
