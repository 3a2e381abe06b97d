#!/usr/bin/env python3
"""PyTorch side of the rnnlens benchmark.

Measures training and inference throughput of PyTorch at the shapes and cells of
`rnnlens bench` and writes one CSV row per (shape, cell, mode) in the same columns.

LSTM, GRU and RNN use PyTorch's fused modules. The other cells (RAN, RWA, RDA, ISAN) have no
PyTorch module, so they are written as a competent user would: all input projections in one
matmul before the time loop, only the recurrent part inside it. The equations are rnnlens's
(src/cells/*.rs, docs/cells.md).
"""

import argparse
import csv
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

COLUMNS = [
    "impl", "shape", "cell", "mode", "threads", "batch", "window", "tokens_per_s",
    "step_ms_median", "gemm_gflop_per_step", "achieved_gflops", "peak_gflops",
]

# Shapes of `rnnlens bench`. `vocab` None means real-valued input (the task shapes c3, mnist),
# read out at the last step only: `classes` outputs (cross-entropy), or one value (MSE).
SHAPES = {
    # char LM: Embedding(27,128) -> 512 units -> Linear(512,27), cross-entropy at every step
    "c1": dict(vocab=27, embed=128, hidden=512, batch=64, window=100),
    # word LM: Embedding(10000,256) -> 1024 units -> Linear(1024,10000), cross-entropy
    "c2": dict(vocab=10000, embed=256, hidden=1024, batch=32, window=35),
    # 2 real inputs per step, 250 units, Linear(250,1) at the last step only, MSE
    "c3": dict(vocab=None, embed=2, hidden=250, batch=100, window=1000),
    # sequential MNIST (the RDA paper's tables 3 and 4): 1 pixel per step, 784 steps, 250
    # units, Linear(250,10) at the last step only, cross-entropy
    "mnist": dict(vocab=None, embed=1, hidden=250, batch=100, window=784, classes=10),
    # ISAN: 27 symbols read directly (no embedding), 216 units, readout Linear(216,27)
    "isan": dict(vocab=27, embed=None, hidden=216, batch=64, window=100),
    # the first RAN paper's large PTB model: Embedding(10000,1500) -> 2 x 1500 -> Linear(1500,10000)
    "ptb": dict(vocab=10000, embed=1500, hidden=1500, layers=2, batch=20, window=35),
    "ptb128": dict(vocab=10000, embed=1500, hidden=1500, layers=2, batch=128, window=35),
}

# `--precision`: what PyTorch computes the products in. The CUDA-only ones make a GPU
# comparison fair in each direction: float32 with TF32 off everywhere (the IEEE float32 rnnlens's
# GEMM computes), TF32 on everywhere (tensor cores at float32's range), and automatic mixed
# precision in float16 (beside rnnlens's `--precision f16` once it exists).
PRECISIONS = {
    "f32": "float32, PyTorch's defaults (on CUDA: TF32 off in matmul, on in cuDNN)",
    "f32-strict": "CUDA: float32 with TF32 off in matmul and cuDNN",
    "tf32": "CUDA: TF32 on in matmul and cuDNN",
    "bf16": "torch.autocast(dtype=torch.bfloat16) around forward and loss",
    "f16": "CUDA: torch.autocast(dtype=torch.float16) around forward and loss, a GradScaler "
           "(dynamic loss scaling) in training",
}
CUDA_ONLY = ("f32-strict", "tf32", "f16")

# `--compile`: the loop cells' per-step arithmetic through torch.compile (the loop stays in
# Python, as a user would write it; compiling the unrolled window takes minutes per shape):
# the RAN's whole step, the RWA's and RDA's running average after the first step.
COMPILE = False


def _ran_step(gx, h, w_t, c, cand):
    i, f = torch.sigmoid(torch.addmm(gx, h, w_t)).chunk(2, dim=1)
    c = torch.addcmul(f * c, i, cand)
    return c, torch.tanh(c)


_compiled = {}


def step_fn(fn):
    """`fn`, or with --compile its torch.compile'd version (compiled once)."""
    if not COMPILE:
        return fn
    if fn not in _compiled:
        _compiled[fn] = torch.compile(fn)
    return _compiled[fn]


def ran_step():
    return step_fn(_ran_step)

DENSE_CELLS = ["lstm", "gru", "rnn", "ran-tanh", "rwa", "rda-exp-tanh", "rda-sigmoid-id"]
ISAN_CELLS = ["isan", "isan-gather"]


# ---------------------------------------------------------------------------------------------
# Cells written as Python loops. Every layer takes x [T, B, D] and returns outputs [T, B, H].
# ---------------------------------------------------------------------------------------------

class RanTanh(nn.Module):
    """RAN with g = tanh and the gates reading h_{t-1} (rnnlens's default, `gates: "h"`):

        c~_t = W_cx x_t + b_c
        i_t  = σ(W_ic h_{t-1} + W_ix x_t + b_i)
        f_t  = σ(W_fc h_{t-1} + W_fx x_t + b_f)
        c_t  = i_t ∘ c~_t + f_t ∘ c_{t-1}
        h_t  = tanh(c_t)
    """

    def __init__(self, d, h):
        super().__init__()
        self.h = h
        # rows [i | f | c~]: the two gate blocks first so that the per-step addmm reads one
        # contiguous slice
        self.x_proj = nn.Linear(d, 3 * h)
        self.w_c = nn.Parameter(torch.empty(2 * h, h))  # [W_ic; W_fc], reading h_{t-1}
        nn.init.xavier_uniform_(self.w_c)
        with torch.no_grad():
            self.x_proj.bias[h:2 * h].fill_(1.0)  # forget gate opens at 1, as in rnnlens

    def forward(self, x):
        T, B, _ = x.shape
        H = self.h
        xp = self.x_proj(x)  # one GEMM over all T·B rows
        # unbind, not gates_x[t] in the loop: indexing a whole-sequence tensor per step makes
        # autograd zero-fill a full copy of it for every step in backward (quadratic in T).
        gates_x, cand = xp[..., :2 * H].unbind(0), xp[..., 2 * H:].unbind(0)
        w_t = self.w_c.t()
        c = x.new_zeros(B, H)
        h = c
        hs = []
        step = ran_step()
        for t in range(T):
            c, h = step(gates_x[t], h, w_t, c, cand[t])
            hs.append(h)
        return torch.stack(hs)


def _att_step(lam, p_gamma, z, m, n, d):
    """One later step of the running-maximum average (see AttentionCell)."""
    c = m + F.logsigmoid(p_gamma) if p_gamma is not None else m
    # h depends only on n'/d', which is the same for any m, so m is treated as a constant
    # (detached): the gradients are exact and backward does less work
    m_new = torch.maximum(c, lam).detach()
    alpha = torch.exp(c - m_new)
    beta = torch.exp(lam - m_new)
    n = torch.addcmul(alpha * n, beta, z)
    d = torch.addcmul(beta, alpha, d)
    return n, d, m_new


def att_step():
    return step_fn(_att_step)


class AttentionCell(nn.Module):
    """RWA and RDA in the numerically stable running-maximum form of rnnlens's src/cells/rda.rs.

        u_t = W_u x_t + b_u
        g_t = W_g [x_t, h_{t-1}] + b_g
        z_t = u_t ∘ tanh(g_t)
        a_t = f_a(W_a [x_t, h_{t-1}] + b_a)                   a_t = e^{λ_t}, λ = ln f_a(p)
        γ_t = σ(W_γ [x_t, h_{t-1}] + b_γ)                     (RDA only; RWA: γ = 1)
        n_t = n_{t-1} ∘ γ_t + z_t ∘ a_t,   d_t = d_{t-1} ∘ γ_t + a_t
        h_t = f_h(n_t / d_t),              o_t = f_o(h_t) passed upward

    Stored: n' = n·e^{-m}, d' = d·e^{-m} with a per-unit reference m. With c = m_{t-1} + ln γ_t:
    the first step sets m = λ, n' = z, d' = 1 (d'_0 = 0); later steps m = max(c, λ),
    n' = e^{c-m} n' + e^{λ-m} z, d' = e^{c-m} d' + e^{λ-m}. Starts from h_0 = f_h(s0).

    rwa:            f_a = exp,     f_h = tanh,     f_o = identity, no discount
    rda-exp-tanh:   f_a = exp,     f_h = identity, f_o = tanh
    rda-sigmoid-id: f_a = sigmoid, f_h = identity, f_o = identity
    """

    def __init__(self, d, h, attention, hidden_fn, output_fn, discount):
        super().__init__()
        self.h = h
        self.attention, self.hidden_fn, self.output_fn = attention, hidden_fn, output_fn
        self.discount = discount
        k = 3 if discount else 2  # recurrent blocks: g, a (, γ)
        # x-parts of [u | g | a (| γ)] with their biases: one GEMM before the loop
        self.x_proj = nn.Linear(d, (k + 1) * h)
        # h-columns of [W_g; W_a (; W_γ)]
        self.w_h = nn.Parameter(torch.empty(k * h, h))
        nn.init.xavier_uniform_(self.w_h)
        self.s0 = nn.Parameter(torch.zeros(h))
        if discount:
            with torch.no_grad():
                self.x_proj.bias[3 * h:].fill_(1.0)  # discount gate opens at 1, as in rnnlens

    def forward(self, x):
        T, B, _ = x.shape
        H = self.h
        xp = self.x_proj(x)
        u, rec_x = xp[..., :H].unbind(0), xp[..., H:].unbind(0)  # unbind: see RanTanh
        w_t = self.w_h.t()
        fh = torch.tanh if self.hidden_fn == "tanh" else (lambda v: v)
        h = fh(self.s0).expand(B, H)
        n = d = m = None
        hs = []
        for t in range(T):
            p = torch.addmm(rec_x[t], h, w_t)
            if self.discount:
                p_g, p_a, p_gamma = p.chunk(3, dim=1)
            else:
                p_g, p_a = p.chunk(2, dim=1)
            z = u[t] * torch.tanh(p_g)
            lam = p_a if self.attention == "exp" else F.logsigmoid(p_a)  # λ = ln f_a(p)
            if t == 0:
                # from the initial state d' = 0: the reference is this step's λ, so
                # n' = z and d' = 1 in value; written with e^{λ-m} (= 1) because m is detached
                # (below) and the gradient must still reach λ
                m = lam.detach()
                beta = torch.exp(lam - m)
                n, d = beta * z, beta
            else:
                n, d, m = att_step()(lam, p_gamma if self.discount else None, z, m, n, d)
            h = fh(n / d)
            hs.append(h)
        out = torch.stack(hs)
        # o = f_o(h) is not read by the recurrence, so apply it once
        return torch.tanh(out) if self.output_fn == "tanh" else out


class IsanBase(nn.Module):
    """ISAN: h_t = W_{x_t} h_{t-1} + b_{x_t}, learned h0, no embedding, no nonlinearity.
    W [K, H, H] with W[k] as [out, in], b [K, H]."""

    def __init__(self, k, h):
        super().__init__()
        self.k, self.h = k, h
        w = torch.empty(k, h, h)
        for i in range(k):
            nn.init.xavier_uniform_(w[i])
        self.w = nn.Parameter(w)
        self.b = nn.Parameter(torch.zeros(k, h))
        self.h0 = nn.Parameter(torch.zeros(h))


class IsanGather(IsanBase):
    """The direct formulation: gather each row's matrix per step, then one bmm."""

    def forward(self, tokens):
        T, B = tokens.shape
        bx = self.b[tokens].unbind(0)  # [B, H] per step, all biases before the loop
        h = self.h0.expand(B, self.h)
        hs = []
        for t in range(T):
            w_t = self.w[tokens[t]]  # [B, H, H]
            h = torch.baddbmm(bx[t].unsqueeze(2), w_t, h.unsqueeze(2)).squeeze(2)
            hs.append(h)
        return torch.stack(hs)


class IsanDense(IsanBase):
    """The fastest formulation found (2 threads, against gather+bmm, one-hot ⊗ h times the
    stacked matrices, and one GEMM per symbol group): one GEMM of h against all K matrices
    side by side ([H, K·H]), then each row picks its own symbol's block. It does K times the
    arithmetic but as one large GEMM instead of B small matrix-vector products."""

    def forward(self, tokens):
        T, B = tokens.shape
        K, H = self.k, self.h
        # w_all[in, k·H + out] = W[k][out, in]
        w_all = self.w.permute(2, 0, 1).reshape(H, K * H)
        bx = self.b[tokens].unbind(0)
        pick = tokens.view(T, B, 1, 1).expand(T, B, 1, H)
        h = self.h0.expand(B, H)
        hs = []
        for t in range(T):
            every = (h @ w_all).view(B, K, H)  # W_k h for every symbol k
            h = every.gather(1, pick[t]).squeeze(1) + bx[t]
            hs.append(h)
        return torch.stack(hs)


def make_layer(cell, d, h, layers=1):
    if cell == "lstm":
        return nn.LSTM(d, h, num_layers=layers)
    if cell == "gru":
        return nn.GRU(d, h, num_layers=layers)
    if cell == "rnn":
        return nn.RNN(d, h, nonlinearity="tanh", num_layers=layers)
    if layers > 1:
        return Stacked([make_layer(cell, d if i == 0 else h, h) for i in range(layers)])
    if cell == "ran-tanh":
        return RanTanh(d, h)
    if cell == "rwa":
        return AttentionCell(d, h, "exp", "tanh", "identity", discount=False)
    if cell == "rda-exp-tanh":
        return AttentionCell(d, h, "exp", "identity", "tanh", discount=True)
    if cell == "rda-sigmoid-id":
        return AttentionCell(d, h, "sigmoid", "identity", "identity", discount=True)
    raise ValueError(f"unknown cell {cell}")


class Stacked(nn.Module):
    """Loop cells one above the other (the fused modules take num_layers)."""

    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Model(nn.Module):
    def __init__(self, shape, cell):
        super().__init__()
        s = SHAPES[shape]
        self.shape, self.cell = shape, cell
        if cell == "isan":
            self.rnn = IsanDense(s["vocab"], s["hidden"])
        elif cell == "isan-gather":
            self.rnn = IsanGather(s["vocab"], s["hidden"])
        else:
            self.rnn = make_layer(cell, s["embed"], s["hidden"], s.get("layers", 1))
        self.embed = nn.Embedding(s["vocab"], s["embed"]) if s["vocab"] and s["embed"] else None
        self.out = nn.Linear(s["hidden"], s["vocab"] or s.get("classes", 1))

    def forward(self, x, y):
        inp = self.embed(x) if self.embed is not None else x
        out = self.rnn(inp)
        if isinstance(out, tuple):  # nn.LSTM / nn.GRU / nn.RNN return (output, state)
            out = out[0]
        if self.shape == "c3":
            return F.mse_loss(self.out(out[-1]), y)  # readout at the last step only
        if self.shape == "mnist":
            return F.cross_entropy(self.out(out[-1]), y)
        logits = self.out(out)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


DEVICE = "cpu"


def make_data(shape, seed=0):
    s = SHAPES[shape]
    g = torch.Generator().manual_seed(seed)
    T, B = s["window"], s["batch"]
    if "classes" in s:
        x, y = torch.rand(T, B, s["embed"], generator=g), torch.randint(0, s["classes"], (B,), generator=g)
    elif s["vocab"] is None:
        x, y = torch.randn(T, B, s["embed"], generator=g), torch.randn(B, 1, generator=g)
    else:
        x = torch.randint(0, s["vocab"], (T, B), generator=g)
        y = torch.randint(0, s["vocab"], (T, B), generator=g)
    return x.to(DEVICE), y.to(DEVICE)


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def time_steps(step, warmup, steps):
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def set_tf32(precision, defaults):
    """TF32 in CUDA's matmul and cuDNN as `precision` asks (PyTorch's `defaults` otherwise)."""
    if DEVICE != "cuda":
        return
    on = {"f32-strict": (False, False), "tf32": (True, True)}.get(precision, defaults)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = on


def bench(shape, cell, mode, warmup, steps, precision="f32"):
    torch.manual_seed(0)
    model = Model(shape, cell).to(DEVICE)
    x, y = make_data(shape)
    half = {"bf16": torch.bfloat16, "f16": torch.float16}.get(precision)
    # f16's range needs the loss scaled (PyTorch's AMP recipe); bf16 has float32's range.
    scaler = torch.amp.GradScaler("cuda") if precision == "f16" else None

    def loss_of():
        # Mixed precision as PyTorch's documentation recommends it, the forward pass and the
        # loss under autocast (matrix products in bf16 or f16, the loss and reductions in
        # f32), the backward pass outside it; weights and Adam stay f32.
        if half is not None:
            with torch.autocast(DEVICE, dtype=half):
                return model(x, y)
        return model(x, y)

    if mode == "train":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step():
            loss = loss_of()
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)  # the clipping below sees the true gradient
            else:
                loss.backward()
            # The clipping rnnlens's step does (its trainer's and task runner's defaults), so
            # that both sides do the same work: the global norm capped at 5 for the language
            # models, each value clamped to [-1, 1] (and the norm computed) for the tasks.
            if SHAPES[shape]["vocab"] is None:
                torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
                torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad()
    else:
        def step():
            with torch.no_grad():
                loss_of()
    return time_steps(step, warmup, steps)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="c1,c2,c3,isan")
    ap.add_argument("--cells", default=",".join(DENSE_CELLS + ["isan"]),
                    help="rnnlens cell names; 'isan' runs both ISAN formulations")
    ap.add_argument("--mode", choices=["train", "infer", "both"], default="both")
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--csv", default=None, help="write the results here")
    ap.add_argument("--quiet", action="store_true", help="no per-row progress lines")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: cuDNN for lstm/gru/rnn, the other cells as loops of CUDA kernels")
    ap.add_argument("--precision", default="f32",
                    help="comma-separated, each row measured in each: "
                         + "; ".join(f"{k}: {v}" for k, v in PRECISIONS.items())
                         + "; both: f32,bf16. Rows other than f32 are named IMPL-PRECISION (pytorch-bf16, pytorch-cuda-tf32)")
    ap.add_argument("--compile", action="store_true",
                    help="the loop cells' step through torch.compile (the fused modules are unchanged)")
    args = ap.parse_args()
    global DEVICE, COMPILE
    DEVICE, COMPILE = args.device, args.compile
    if DEVICE == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: this PyTorch sees no CUDA device")

    # Both must be set before any parallel work starts.
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    # Gradients through long sequences shrink into the denormal range, where x86 is very
    # slow; rnnlens sets FTZ/DAZ too.
    ftz = torch.set_flush_denormal(True)

    print(f"# machine: {cpu_model()}, {os.cpu_count()} logical CPUs")
    if DEVICE == "cuda":
        print(f"# device: {torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}, "
              f"TF32 matmul {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}, "
              f"TF32 in cuDNN {'on' if torch.backends.cudnn.allow_tf32 else 'off'} (PyTorch's defaults)")
    impl = "pytorch" + ("-cuda" if DEVICE == "cuda" else "") + ("-compile" if COMPILE else "")
    precisions = ["f32", "bf16"] if args.precision == "both" else [p for p in args.precision.split(",") if p]
    for p in precisions:
        if p not in PRECISIONS:
            ap.error(f"unknown precision {p}; precisions: {', '.join(PRECISIONS)}, both")
        if p in CUDA_ONLY and DEVICE != "cuda":
            ap.error(f"--precision {p} is for --device cuda (TF32 and PyTorch's float16 AMP are GPU features)")
    tf32_defaults = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    if "bf16" in precisions:
        print(f"# bf16: torch.autocast({DEVICE!r}, dtype=torch.bfloat16) around forward and loss; "
              f"oneDNN ISA {torch.backends.mkldnn.is_available() and 'available' or 'unavailable'}, "
              f"CPU flags: {', '.join(f for f in ('amx_bf16', 'avx512_bf16') if f in open('/proc/cpuinfo').read()) or 'neither amx_bf16 nor avx512_bf16'}")
    print(f"# python {platform.python_version()}, torch {torch.__version__}")
    print(f"# threads: {torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} inter-op")
    print(f"# torch.set_flush_denormal(True) called: {'supported, on' if ftz else 'NOT supported on this CPU'}")
    sys.stdout.flush()

    shapes = [s for s in args.shapes.split(",") if s]
    cells = [c for c in args.cells.split(",") if c]
    for s in shapes:
        if s not in SHAPES:
            ap.error(f"unknown shape {s}; shapes: {', '.join(SHAPES)}")
    for c in cells:
        if c not in DENSE_CELLS + ISAN_CELLS:
            ap.error(f"unknown cell {c}; cells: {', '.join(DENSE_CELLS + ISAN_CELLS)}")
    if "isan" in cells and "isan-gather" not in cells:
        cells.append("isan-gather")  # report both ISAN formulations
    modes = ["train", "infer"] if args.mode == "both" else [args.mode]

    rows = []
    writer = None
    out = None
    if args.csv:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        out = open(args.csv, "w", newline="")
        writer = csv.DictWriter(out, fieldnames=COLUMNS)
        writer.writeheader()
    if not args.quiet:
        print(f"{'shape':<6} {'cell':<15} {'mode':<6} {'prec':<10} {'tok/s':>12} {'step ms':>10}")
    for shape in shapes:
        for cell in cells:
            # ISAN cells run only on the isan shape, and only they do
            if (shape == "isan") != (cell in ISAN_CELLS):
                continue
            for mode, precision in [(m, p) for m in modes for p in precisions]:
                s = SHAPES[shape]
                set_tf32(precision, tf32_defaults)
                sec = bench(shape, cell, mode, args.warmup, args.steps, precision)
                tokens = s["batch"] * s["window"]
                row = dict(impl=impl + ("" if precision == "f32" else f"-{precision}"), shape=shape, cell=cell, mode=mode, threads=args.threads,
                           batch=s["batch"], window=s["window"], tokens_per_s=f"{tokens / sec:.1f}",
                           step_ms_median=f"{sec * 1000:.3f}", gemm_gflop_per_step="",
                           achieved_gflops="", peak_gflops="")
                rows.append(row)
                if writer:
                    writer.writerow(row)
                    out.flush()  # a long run keeps what it has measured
                if not args.quiet:
                    print(f"{shape:<6} {cell:<15} {mode:<6} {precision:<10} {tokens / sec:>12.1f} {sec * 1000:>10.1f}", flush=True)
    if out:
        out.close()


if __name__ == "__main__":
    main()
