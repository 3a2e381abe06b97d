"""rnnlens.torch's two engines: the fused kernels (engine="rnnlens") against the plain loops
(engine="torch"), the plain loops against torch.autograd.gradcheck in float64, initialisation,
training, bf16 autocast and bad input."""

import copy
import pickle

import pytest

torch = pytest.importorskip("torch", reason="rnnlens.torch needs PyTorch (pip install './python[torch]')")
import rnnlens.torch as rt  # noqa: E402
from rnnlens import _rnnlens  # noqa: E402

D, K = 5, 7  # input width; symbols of the cells that read token ids

# Every cell and option the engine serves: name -> constructor(engine, input, hidden).
CELLS = {
    "ran-tanh": lambda e, d, h: rt.RAN(d, h, "tanh", "h", engine=e),
    "ran-tanh-c": lambda e, d, h: rt.RAN(d, h, "tanh", "c", engine=e),
    "ran-identity": lambda e, d, h: rt.RAN(d, h, "identity", "h", engine=e),
    "ran-identity-c": lambda e, d, h: rt.RAN(d, h, "identity", "c", engine=e),
    "ran-proj": lambda e, d, h: rt.RAN(d, h, "tanh", "h", projection_size=3, engine=e),
    "ran-nocb": lambda e, d, h: rt.RAN(d, h, "tanh", "h", content_bias=False, engine=e),
    "ran-identity-c-nocb": lambda e, d, h: rt.RAN(d, h, "identity", "c", content_bias=False, engine=e),
    "lstm": lambda e, d, h: rt.LSTM(d, h, engine=e),
    "lstm-proj": lambda e, d, h: rt.LSTM(d, h, proj_size=3, engine=e),
    "gru": lambda e, d, h: rt.GRU(d, h, engine=e),
    "gru-paper": lambda e, d, h: rt.GRU(d, h, reset_after=False, engine=e),
    "rnn": lambda e, d, h: rt.RNN(d, h, engine=e),
    "rnn-relu": lambda e, d, h: rt.RNN(d, h, "relu", engine=e),
    "irnn": lambda e, d, h: rt.IRNN(d, h, engine=e),
    "isan": lambda e, d, h: rt.ISAN(K, h, engine=e),
    "isan-nobias": lambda e, d, h: rt.ISAN(K, h, biases=False, engine=e),
    "linear": lambda e, d, h: rt.LinearRNN(K, h, engine=e),
    "linear-tanh": lambda e, d, h: rt.LinearRNN(K, h, "tanh", engine=e),
    "rwa": lambda e, d, h: rt.RWA(d, h, engine=e),
    "rda-exp-tanh": lambda e, d, h: rt.RDA(d, h, "exp", "identity", "tanh", engine=e),
    "rda-sigmoid-id": lambda e, d, h: rt.RDA(d, h, "sigmoid", "identity", "identity", engine=e),
    "rda-relu": lambda e, d, h: rt.RDA(d, h, "relu", "tanh", "identity", engine=e),
    "rda-softplus": lambda e, d, h: rt.RDA(d, h, "softplus", "tanh", "tanh", engine=e),
    "lstm-simple-content": lambda e, d, h: rt.LSTMSimpleContent(d, h, engine=e),
    "lstm-no-output-gate": lambda e, d, h: rt.LSTMNoOutputGate(d, h, engine=e),
}
TOKENS = {"isan", "isan-nobias", "linear", "linear-tanh"}


def pair(name, h=6, seed=0):
    """The same layer in both engines and as a float64 plain loop, weights moved off their start
    (a biased start hides errors in the terms it zeroes)."""
    torch.manual_seed(seed)
    fused = CELLS[name]("rnnlens", D, h)
    with torch.no_grad():
        for p in fused.parameters():
            p.add_(0.3 * torch.randn_like(p))
    plain = CELLS[name]("torch", D, h)
    plain.load_state_dict(fused.state_dict())
    ref = CELLS[name]("torch", D, h).double()
    ref.load_state_dict(fused.state_dict())
    return fused, plain, ref


def inputs(name, steps, batch, seed):
    g = torch.Generator().manual_seed(seed)
    if name in TOKENS:
        return torch.randint(0, K, (steps, batch), generator=g)
    return torch.randn(steps, batch, D, generator=g)


def run(module, x, s0, double=False):
    """Outputs, final state and every gradient of a loss reading both."""
    module.zero_grad()
    cast = (lambda t: t.double()) if double else (lambda t: t.float())
    xx = x if not x.is_floating_point() else cast(x).detach().requires_grad_()
    ss = None if s0 is None else cast(s0).detach().requires_grad_()
    y, s = module(xx, ss)
    g = torch.Generator().manual_seed(99)
    ry, rs = torch.randn(y.shape, generator=g, dtype=y.dtype), torch.randn(s.shape, generator=g, dtype=s.dtype)
    ((y * ry).sum() + (s * rs).sum()).backward()
    out = {"y": y, "state": s}
    # a learned start the given state replaces gets no gradient: None in the loop, zeros fused
    out.update({f"d{k}": p.grad if p.grad is not None else torch.zeros_like(p) for k, p in module.named_parameters()})
    if x.is_floating_point():
        out["dx"] = xx.grad
    if ss is not None:
        out["ds0"] = ss.grad
    return {k: v.detach().double() for k, v in out.items()}


@pytest.mark.parametrize("name", sorted(CELLS))
@pytest.mark.parametrize("steps,batch,given", [(1, 1, False), (4, 3, False), (5, 1, True), (3, 7, True)])
def test_fused_and_plain_agree_to_float32_rounding(name, steps, batch, given):
    """Outputs, final states and every gradient: the fused engine lies as close to the float64
    loop as the float32 loop does (within a factor for the order of the sums)."""
    fused, plain, ref = pair(name, seed=steps * 10 + batch)
    x = inputs(name, steps, batch, seed=steps + batch)
    s0 = None
    if given:
        # A state the cell can reach (an RDA's running sums are not arbitrary): after a prefix.
        with torch.no_grad():
            _, s0 = ref(inputs(name, 3, batch, seed=5).double() if name not in TOKENS else inputs(name, 3, batch, seed=5))
    a, b, want = run(fused, x, s0), run(plain, x, s0), run(ref, x, s0, double=True)
    assert set(a) == set(want), (sorted(a), sorted(want))
    for k in want:
        scale = max(1.0, want[k].abs().max().item())
        err_fused = (a[k] - want[k]).abs().max().item()
        err_plain = (b[k] - want[k]).abs().max().item()
        assert err_fused <= 20 * err_plain + 2e-6 * scale, f"{name} {k}: fused {err_fused:.2e}, plain float32 {err_plain:.2e}"


@pytest.mark.parametrize("name", sorted(CELLS))
def test_the_plain_loop_passes_gradcheck_in_float64(name):
    _, _, ref = pair(name, h=3, seed=1)
    x = inputs(name, 3, 2, seed=2)
    params = list(ref.parameters())
    if name in TOKENS:
        f = lambda *ps: _with(ref, ps, lambda: sum(t.sum() for t in ref(x)))  # noqa: E731
    else:
        x = x.double().requires_grad_()
        f = lambda xx, *ps: _with(ref, ps, lambda: sum((t * t).sum() for t in ref(xx)))  # noqa: E731
        params = [x] + params
    assert torch.autograd.gradcheck(f, params, eps=1e-6, atol=1e-5)


def _with(module, ps, fn):
    """`fn()` with the module's parameters replaced by `ps` (which gradcheck perturbs)."""
    names = [n for n, _ in module.named_parameters()]
    saved = {n: getattr(module, n) for n in names}
    try:
        for n, p in zip(names, ps[-len(names):]):
            delattr(module, n)
            setattr(module, n, p)
        return fn()
    finally:
        for n, p in saved.items():
            delattr(module, n)
            module.register_parameter(n, p)


@pytest.mark.parametrize("name", ["ran-tanh", "lstm", "gru-paper", "rwa", "rda-sigmoid-id", "isan", "lstm-simple-content"])
def test_training_a_few_steps_gives_the_plain_loops_weights(name):
    fused, plain, _ = pair(name, seed=3)
    head = torch.nn.Linear(6, 4)
    heads = [head, copy.deepcopy(head)]
    # SGD: an update linear in the gradient (Adam's normalised step would magnify the rounding
    # of a gradient near zero into a full step)
    opts = [torch.optim.SGD(list(m.parameters()) + list(hd.parameters()), lr=0.1) for m, hd in zip((fused, plain), heads)]
    for step in range(5):
        x = inputs(name, 6, 4, seed=step)
        target = torch.randint(0, 4, (6, 4), generator=torch.Generator().manual_seed(step))
        for m, hd, opt in zip((fused, plain), heads, opts):
            opt.zero_grad()
            y, _ = m(x)
            torch.nn.functional.cross_entropy(hd(y[..., :6]).reshape(-1, 4), target.reshape(-1)).backward()
            opt.step()
    for (k, a), (_, b) in zip(fused.named_parameters(), plain.named_parameters()):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), f"{name}.{k}: {(a - b).abs().max():.2e}"
    # the updates kept the parameters in the flat vector the kernels read without a copy
    assert fused._weights().data_ptr() == fused._flat.data_ptr()


def test_a_new_module_starts_as_rnnlens_train_starts_it():
    torch.manual_seed(0)
    lstm = rt.LSTM(10, 8)
    h = 8
    assert torch.equal(lstm.bias_ih[h:2 * h], torch.ones(h)) and lstm.bias_ih[:h].abs().sum() == 0
    bound = (6 / (10 + h)) ** 0.5  # each gate's block its own matrix: fan-out H
    assert 0.5 * bound < lstm.weight_ih.abs().max() <= bound
    assert torch.equal(rt.IRNN(4, 5).weight_hh, torch.eye(5))
    rda = rt.RDA(4, 5)
    assert torch.equal(rda.b_gamma, torch.ones(5)) and rda.s0.abs().sum() == 0
    # the seed picks the draw; without one, torch.manual_seed does
    a, b = rt.RAN(4, 5), rt.RAN(4, 5)
    a.reset_parameters(seed=7)
    b.reset_parameters(seed=7)
    assert torch.equal(a.W_ix, b.W_ix)
    torch.manual_seed(1)
    c = rt.RAN(4, 5)
    torch.manual_seed(1)
    assert torch.equal(c.W_cx, rt.RAN(4, 5).W_cx) and not torch.equal(c.W_cx, a.W_cx)


def test_batch_first_copies_and_pickles_run_the_same_layer():
    torch.manual_seed(0)
    m = rt.RDA(D, 6)
    x = torch.randn(4, 3, D)
    y, s = m(x)
    bf = rt.RDA(D, 6, batch_first=True)
    bf.load_state_dict(m.state_dict())
    yb, sb = bf(x.transpose(0, 1))
    assert torch.equal(yb.transpose(0, 1), y) and torch.equal(sb, s)
    for other in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        y2, _ = other(x)
        assert torch.equal(y2, y)
        assert other._weights().data_ptr() == other._flat.data_ptr()
    # a parameter replaced by another tensor is gathered into a copy: still the same numbers
    m.W_u = torch.nn.Parameter(m.W_u.detach().clone())
    assert torch.equal(m(x)[0], y)


def test_under_bf16_autocast_the_products_run_in_bf16_within_tolerance():
    if not _rnnlens.bf16_supported():
        pytest.skip("this CPU has no AVX512-BF16: under autocast the engine computes in float32 (said once)")
    torch.manual_seed(0)
    for make in (lambda: rt.LSTM(16, 32), lambda: rt.RDA(16, 32), lambda: rt.RAN(16, 32)):
        m = make()
        x = torch.randn(20, 8, 16)
        y32, _ = m(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y16, _ = m(x)
            y16.sum().backward()
        err = (y16 - y32).abs().max().item()
        # bf16 operands (8 bits of mantissa), f32 sums: about 1e-2 of the outputs' scale
        assert 0 < err < 3e-2 * max(1.0, y32.abs().max().item()), err
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


def test_bad_input_is_refused_with_what_to_do():
    m = rt.GRU(D, 6)
    with pytest.raises(ValueError, match=r"x must be \[T, B, D\] with D = 5"):
        m(torch.randn(4, D))
    with pytest.raises(ValueError, match="last dimension must be the layer's input_size, 5"):
        m(torch.randn(4, 2, 3))
    with pytest.raises(ValueError, match="NaN"):
        m(torch.full((2, 1, D), float("nan")))
    with pytest.raises(ValueError, match=r"float64: convert it \(.float\(\)\), or build the module with engine='torch'"):
        m(torch.randn(2, 1, D, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"runs on the CPU; the input is on meta"):
        m(torch.randn(2, 1, D, device="meta"))
    with pytest.raises(ValueError, match=r"the state must be \[B, S\] = \[B, 6\]"):
        m(torch.randn(2, 1, D), torch.zeros(1, 5))
    with pytest.raises(ValueError, match="empty"):
        m(torch.randn(0, 1, D))
    isan = rt.ISAN(K, 4)
    with pytest.raises(ValueError, match=r"token ids must lie in 0..6"):
        isan(torch.tensor([[7]]))
    with pytest.raises(ValueError, match="reads token ids"):
        isan(torch.randn(2, 1))
    with pytest.raises(ValueError, match="engine must be"):
        rt.RAN(2, 3, engine="cuda")
    with pytest.raises(ValueError, match="float32 on the CPU"):
        rt.RAN(2, 3).double()(torch.randn(1, 1, 2))
    y, s = m(torch.randn(3, 2, D))
    (y.sum() + s.sum()).backward(retain_graph=True)
    with pytest.raises(ValueError, match="backward ran already"):
        y.sum().backward()
    # the plain loop serves what the fused engine refuses
    p = rt.GRU(D, 6, engine="torch").double()
    assert p(torch.randn(2, 1, D, dtype=torch.float64))[0].dtype == torch.float64


def test_a_stack_runs_its_layers_in_either_engine_with_dropout_between():
    def make(engine):
        torch.manual_seed(0)
        return rt.Stack(rt.RAN(D, 6, projection_size=4, engine=engine), rt.LSTM(4, 3, engine=engine), dropout=0.5)
    fused, plain = make("rnnlens"), make("torch")
    fused.eval(), plain.eval()
    x = torch.randn(5, 2, D)
    (ya, sa), (yb, sb) = fused(x), plain(x)
    assert ya.shape == (5, 2, 3) and [s.shape for s in sa] == [(2, 6), (2, 6)]
    assert torch.allclose(ya, yb, atol=1e-6) and all(torch.allclose(a, b, atol=1e-6) for a, b in zip(sa, sb))
    # continuing from the final states is one longer run
    y1, s1 = fused(x[:2])
    y2, _ = fused(x[2:], s1)
    assert torch.allclose(torch.cat([y1, y2]), ya, atol=1e-6)
    fused.train()
    assert not torch.allclose(fused(x)[0], ya), "dropout between the layers in training"
    with pytest.raises(ValueError, match="layer 1 reads 5 values a step; layer 0 gives 4"):
        rt.Stack(rt.RAN(D, 6, projection_size=4), rt.GRU(5, 3))
