"""rnnlens.torch: the cells of rnnlens as plain PyTorch modules, and whole language models,
read from and written to rnnlens checkpoints.

Each cell is an ordinary differentiable ``nn.Module`` whose parameters carry the checkpoint's
tensor names (docs/checkpoint.md, docs/cells.md), written from the papers' equations in a plain
loop over time steps: fine-tune it, then write it back for ``rnnlens eval``/``explain``.

    from rnnlens.torch import LanguageModel
    lm = LanguageModel.from_checkpoint("runs/default")
    logits, state = lm(tokens)            # tokens: LongTensor [T, B]
    lm.to_checkpoint("runs/finetuned")

The modules run in float32 as rnnlens does and agree with it to float32 rounding (the order of
the sums differs). LSTM, GRU (PyTorch's form) and simple RNN layers are ``torch.nn.LSTM``,
``torch.nn.GRU`` and ``torch.nn.RNN`` themselves (:func:`torch_rnn` builds one from a layer
of a checkpoint).

Needs PyTorch and the ``safetensors`` package (``pip install "./python[torch]"``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "RAN",
    "LSTM",
    "GRU",
    "RNN",
    "IRNN",
    "Stack",
    "LSTMNoOutputGate",
    "LSTMSimpleContent",
    "ISAN",
    "LinearRNN",
    "RWA",
    "RDA",
    "PaperGRU",
    "torch_rnn",
    "write_layer",
    "layer_from_config",
    "LanguageModel",
]

Tensor = torch.Tensor


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape))


def _identity(v: Tensor) -> Tensor:
    return v


def _act(name: str):
    if name == "tanh":
        return torch.tanh
    if name == "identity":
        return _identity
    raise ValueError(f"unknown function {name!r} (tanh or identity)")


class _Checkpointed:
    """A cell read from, and written into, one layer of an rnnlens checkpoint."""

    @classmethod
    def from_checkpoint(cls, path: Union[str, "os.PathLike[str]"], layer: int = 0, engine: str = "rnnlens"):
        """Layer ``layer`` of the checkpoint directory ``path`` as this module, its parameters
        loaded (an error if that layer is another cell); ``engine`` as the constructor's."""
        config, tensors = _read_checkpoint(path)
        if not 0 <= layer < len(config["layers"]):
            raise ValueError(f"{path} has {len(config['layers'])} layer(s); there is no layer {layer}")
        module = layer_from_config(config["layers"][layer], engine)
        if not isinstance(module, cls):
            raise ValueError(f"layer {layer} of {path} is a {config['layers'][layer]['cell']} layer, not a {cls.__name__}")
        _load_layer(module, _layer_of(tensors, layer))
        return module

    def to_checkpoint(self, path: Union[str, "os.PathLike[str]"], layer: int = 0) -> str:
        """Write this module's parameters as layer ``layer`` of the checkpoint directory
        ``path`` (the rest of the model as it is there), for rnnlens to read."""
        return write_layer(path, layer, self)


def _layer_of(tensors: Dict[str, Tensor], layer: int) -> Dict[str, Tensor]:
    prefix = f"rnn.{layer}."
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix) and k != prefix + "initial_state"}


# rnnlens's own warning for a ran layer without "gates" (src/cells/registry.rs, MISSING_GATES).
_MISSING_GATES = ('a ran layer of config.json has no "gates" option: read as "c" (gates reading c_{t-1}, what '
                  'checkpoints written before the option meant), while `train` writes "h" by default; add "gates": '
                  '"h" or "c" to the layer\'s options to say which')


def _verify_manifest(path: str) -> None:
    """Every file ``manifest.json`` lists, checked against its length and SHA-256 as
    ``rnnlens.load`` checks it, with the same messages (:class:`rnnlens.RnnlensError`). A
    directory without a manifest passes; a training run's own files (``trainer.*``, the
    history) may be absent."""
    from rnnlens import RnnlensError

    manifest = os.path.join(path, "manifest.json")
    if not os.path.exists(manifest):
        return
    with open(manifest, encoding="utf-8") as f:
        files = json.load(f).get("files", [])
    for entry in files:
        name = entry["name"]
        if "/" in name or "\\" in name or name.startswith("."):
            raise RnnlensError(f"{manifest}: invalid file name {name!r}")
        p = os.path.join(path, name)
        if not os.path.exists(p):
            if name.startswith("trainer.") or name in ("metrics.jsonl", "curves.svg"):
                continue
            raise RnnlensError(f"{p} does not exist (listed in {manifest})")
        with open(p, "rb") as f:
            data = f.read()
        if len(data) != entry["length"]:
            raise RnnlensError(f"{p} is {len(data)} bytes long, but the manifest says {entry['length']}: "
                               "the file is truncated or was changed")
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry["sha256"]:
            raise RnnlensError(f"{p}: SHA-256 {digest} does not match the manifest's {entry['sha256']}: "
                               "the file is corrupt or was changed")


def _read_checkpoint(path: Union[str, "os.PathLike[str]"]) -> Tuple[Dict[str, Any], Dict[str, Tensor]]:
    from safetensors.torch import load_file

    path = os.fspath(path)
    for f in ("config.json", "model.safetensors", "vocab.txt"):
        if not os.path.exists(os.path.join(path, f)):
            raise FileNotFoundError(f"{path} is not an rnnlens checkpoint: {f} is missing")
    _verify_manifest(path)
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    return config, load_file(os.path.join(path, "model.safetensors"))


def _write_manifest(dir: str, names: Sequence[str]) -> None:
    files = []
    for name in names:
        with open(os.path.join(dir, name), "rb") as f:
            data = f.read()
        files.append({"name": name, "length": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    with open(os.path.join(dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump({"format": "rnnlens-manifest", "files": files}, f, indent=1)


def write_layer(path: Union[str, "os.PathLike[str]"], layer: int, module: nn.Module, readout: Optional[nn.Linear] = None) -> str:
    """Replace layer ``layer``'s tensors in the checkpoint directory ``path`` by ``module``'s
    (a cell of this module, or the ``torch.nn.LSTM``/``GRU``/``RNN`` of such a layer); every
    tensor must keep its name and shape. ``readout``, an ``nn.Linear`` from the top layer's
    outputs, replaces the model's head as well (a task model's ``readout``, a language model's
    ``decoder``). ``model.safetensors`` and ``manifest.json`` are rewritten (each written beside
    and then renamed over the old one); a training state in the directory no longer matches the
    new weights, so ``trainer.json`` is removed with it."""
    from safetensors.torch import save_file

    path = os.fspath(path)
    config, tensors = _read_checkpoint(path)
    if not 0 <= layer < len(config["layers"]):
        raise ValueError(f"{path} has {len(config['layers'])} layer(s); there is no layer {layer}")
    if isinstance(module, (nn.LSTM, nn.GRU, nn.RNN)):
        module = _TorchRNN({nn.LSTM: "lstm", nn.GRU: "gru", nn.RNN: "rnn"}[type(module)], module)
    new = _layer_tensors(module)
    old = _layer_of(tensors, layer)
    if set(new) != set(old):
        raise ValueError(f"layer {layer} of {path} holds {sorted(old)}; this module has {sorted(new)}")
    for k, v in new.items():
        if tuple(v.shape) != tuple(old[k].shape):
            raise ValueError(f"rnn.{layer}.{k}: shape {tuple(v.shape)}, the checkpoint's is {tuple(old[k].shape)}")
        tensors[f"rnn.{layer}.{k}"] = v.detach().to(torch.float32).contiguous().cpu()
    if readout is not None:
        head = "readout" if "readout.weight" in tensors else "decoder"
        for k, v in (("weight", readout.weight), ("bias", readout.bias)):
            if v is None or tuple(v.shape) != tuple(tensors[f"{head}.{k}"].shape):
                got = None if v is None else tuple(v.shape)
                raise ValueError(f"{head}.{k}: the readout's is {got}, the checkpoint's {tuple(tensors[f'{head}.{k}'].shape)}")
            tensors[f"{head}.{k}"] = v.detach().to(torch.float32).contiguous().cpu()
    tmp = os.path.join(path, "model.safetensors.writing")
    save_file(tensors, tmp)
    os.replace(tmp, os.path.join(path, "model.safetensors"))
    for stale in ("trainer.json", "trainer.safetensors"):
        if os.path.exists(os.path.join(path, stale)):
            os.remove(os.path.join(path, stale))
    _write_manifest(path, ["config.json", "model.safetensors", "vocab.txt"])
    return path


# ---------------------------------------------------------------------------------------------
# The two engines. engine="rnnlens" runs a layer's whole sequence through rnnlens's fused CPU
# kernels (forward and backward, one call each, through torch.autograd.Function);
# engine="torch" runs the plain loop of each class below (the reference, for float64 and for
# devices rnnlens does not serve).
# ---------------------------------------------------------------------------------------------

_ENGINES = ("rnnlens", "torch")
_said: set = set()


def _say_once(key: str, msg: str) -> None:
    if key not in _said:
        _said.add(key)
        import warnings

        warnings.warn(msg, stacklevel=4)


_threads_chosen = False


def _choose_threads() -> None:
    """rnnlens's worker pool at PyTorch's thread count, unless :func:`rnnlens.set_threads` (or
    anything rnnlens computed before) started it already."""
    global _threads_chosen
    if not _threads_chosen:
        _threads_chosen = True
        from rnnlens import RnnlensError, set_threads

        try:
            set_threads(torch.get_num_threads())
        except RnnlensError:
            pass


def _autocast_cpu() -> Optional[torch.dtype]:
    """The dtype of an active CPU autocast region, or None."""
    try:
        on, dtype = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
    except (TypeError, AttributeError):  # PyTorch before 2.4
        on, dtype = torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    return dtype if on else None


def _precision() -> str:
    """bf16 inside ``torch.autocast("cpu", dtype=torch.bfloat16)`` on a CPU with AVX512-BF16,
    else f32 (said once where autocast asks for what this CPU or engine has not)."""
    from rnnlens import _rnnlens

    dtype = _autocast_cpu()
    if dtype is None:
        return "f32"
    if dtype == torch.bfloat16:
        if _rnnlens.bf16_supported():
            return "bf16"
        _say_once("bf16", "rnnlens.torch: this CPU has no AVX512-BF16, so the rnnlens engine runs its products in float32 under autocast")
    else:
        _say_once("f16", f"rnnlens.torch: the rnnlens engine has no {dtype} on the CPU; it runs in float32 under this autocast")
    return "f32"


class _Fused(torch.autograd.Function):
    """One layer's forward and backward over the whole sequence by rnnlens's kernels. ``w`` is
    the flat parameter vector the kernels read (the parameters' own storage where it is one);
    the gradient of each parameter in ``params`` comes back as a view of one flat gradient."""

    @staticmethod
    def forward(ctx, layer, precision, x, tokens, s0, w, *params):
        y, s, tape = layer.forward(w.numpy(), _np(x), _np_tokens(tokens), _np(s0), precision, True)
        ctx.layer, ctx.tape = layer, tape
        ctx.shapes = [p.shape for p in params]
        ctx.save_for_backward(x, tokens, s0, w)
        return torch.from_numpy(y), torch.from_numpy(s)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy, ds):
        x, tokens, s0, w = ctx.saved_tensors
        need_dx = x is not None and ctx.needs_input_grad[2]
        need_ds0 = s0 is not None and ctx.needs_input_grad[4]
        dw, dx, ds0 = ctx.layer.backward(ctx.tape, w.numpy(), _np(x), _np_tokens(tokens), _np(s0),
                                         _np(dy.float().contiguous()), _np(ds.float().contiguous()), need_dx, need_ds0)
        grads = _split(torch.from_numpy(dw), ctx.shapes)
        dx = torch.from_numpy(dx) if dx is not None else None
        ds0 = torch.from_numpy(ds0) if ds0 is not None else None
        return (None, None, dx, None, ds0, None, *grads)


def _split(flat: Tensor, shapes) -> List[Tensor]:
    """Consecutive views of ``flat``, one of each shape (the kernels' flat layout)."""
    out, at = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(flat[at:at + n].view(*shape))
        at += n
    return out


def _np(t: Optional[Tensor]):
    return None if t is None else t.detach().numpy()


def _np_tokens(t: Optional[Tensor]):
    import numpy as np

    return None if t is None else t.numpy().view(np.uint32)


class _Cell(_Checkpointed, nn.Module):
    """What every cell module shares: the engine (``"rnnlens"``, the fused kernels, or
    ``"torch"``, the plain loop), ``batch_first``, the initialisation of ``rnnlens train``
    (:meth:`reset_parameters`) and the layer's ``config.json`` entry (:meth:`layer_config`).

    The parameters are views of one flat float32 vector laid out as the kernels read it, so
    the fused engine passes them without a copy (a parameter replaced by another tensor is
    gathered into a copy instead, every call)."""

    def __init__(self, engine: str, batch_first: bool):
        nn.Module.__init__(self)
        if engine not in _ENGINES:
            raise ValueError(f"engine must be 'rnnlens' (the fused kernels) or 'torch' (the plain loop), got {engine!r}")
        self.engine, self.batch_first = engine, bool(batch_first)

    def layer_config(self) -> Dict[str, Any]:
        """This layer's entry in ``config.json`` (cell, sizes, options)."""
        raise NotImplementedError

    def _finish(self, seed: Optional[int] = None) -> None:
        """Called at the end of each cell's ``__init__``: lays the parameters out as one flat
        vector and initialises them."""
        specs = self._layer().tensors()
        own = {k: v for k, v in self.named_parameters(recurse=False)}
        if {n for n, _ in specs} != set(own):
            raise RuntimeError(f"{type(self).__name__}: parameters {sorted(own)} against the kernels' {[n for n, _ in specs]}")
        for name, shape in specs:
            if tuple(own[name].shape) != tuple(shape):
                raise RuntimeError(f"{type(self).__name__}.{name}: shape {tuple(own[name].shape)}, the kernels' {tuple(shape)}")
        self._names = [n for n, _ in specs]
        self._lay_out()
        self.reset_parameters(seed)

    def _lay_out(self) -> None:
        """The parameters' values copied into one flat vector and the parameters made views of
        it (new ``nn.Parameter`` objects: done where no optimizer can hold the old ones yet)."""
        ps = [getattr(self, n) for n in self._names]
        flat = torch.cat([p.detach().reshape(-1) for p in ps])
        for name, p, view in zip(self._names, ps, _split(flat, [p.shape for p in ps])):
            setattr(self, name, nn.Parameter(view, requires_grad=p.requires_grad))
        self._flat = flat

    def _layer(self):
        """The fused kernels of this layer (made again after a copy or unpickling)."""
        layer = self.__dict__.get("_fused_layer")
        if layer is None:
            from rnnlens import _rnnlens

            layer = _rnnlens.FusedLayer(json.dumps(self.layer_config()))
            self.__dict__["_fused_layer"] = layer
        return layer

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_fused_layer", None)
        return state

    def __setstate__(self, state):
        # A copy or an unpickled module holds its parameters each in its own storage: laid out
        # in one flat vector again (no optimizer can refer to the new parameters yet).
        nn.Module.__setstate__(self, state)
        if all(p.dtype == torch.float32 and p.device.type == "cpu" for p in (getattr(self, n) for n in self._names)):
            self._lay_out()

    def reset_parameters(self, seed: Optional[int] = None) -> None:
        """Start the parameters as ``rnnlens train`` starts such a layer: Xavier-uniform weights,
        zero biases, forget and discount gate biases at 1, an IRNN's identity, learned initial
        states at zero. ``seed`` (default: drawn from PyTorch's generator, so
        ``torch.manual_seed`` fixes it) picks the draw."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()).item())
        ps = [getattr(self, n) for n in self._names]
        with torch.no_grad():
            for p, value in zip(ps, _split(torch.from_numpy(self._layer().init(int(seed))), [p.shape for p in ps])):
                p.copy_(value)

    def _weights(self) -> Tensor:
        """The flat parameter vector: the parameters' own storage while they still lie in it,
        else a copy gathered from them."""
        ps = [getattr(self, n) for n in self._names]
        flat, at, whole = self._flat, 0, True
        for p in ps:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError(f"engine='rnnlens' computes in float32 on the CPU; the parameter {self._names[ps.index(p)]} is "
                                 f"{p.dtype} on {p.device}: call .float().cpu() on the module, or build it with engine='torch'")
            whole = whole and p.is_contiguous() and p.data_ptr() == flat.data_ptr() + 4 * at
            at += p.numel()
        if whole and at == flat.numel():
            return flat.detach()
        return torch.cat([p.detach().reshape(-1) for p in ps])

    def forward(self, x: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``x``: ``[T, B, D]`` vectors, or token ids ``[T, B]`` for ISAN and the linear RNNs
        (``[B, T, ...]`` with ``batch_first``); ``state``: ``[B, S]`` or None (the cell's own
        start). Returns the outputs ``[T, B, O]`` (``[B, T, O]`` with ``batch_first``) and the
        final state ``[B, S]``."""
        if self.batch_first:
            x = x.transpose(0, 1)
        if self.engine == "torch":
            y, s = self._forward_torch(x, state)
        else:
            y, s = self._forward_fused(x, state)
        return (y.transpose(0, 1) if self.batch_first else y), s

    def _forward_fused(self, x: Tensor, state: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        layer = self._layer()
        d, _, _, width = layer.sizes()
        where = "[B, T]" if self.batch_first else "[T, B]"
        for what, t in (("the input", x), ("the state", state)):
            if t is not None and t.device.type != "cpu":
                raise ValueError(f"engine='rnnlens' runs on the CPU; {what} is on {t.device}: move the module and its inputs "
                                 "to the CPU (.cpu()), or build the module with engine='torch' to run there")
        tokens = None
        if layer.reads_tokens():
            if x.dim() != 2 or x.is_floating_point():
                raise ValueError(f"a {type(self).__name__} reads token ids, an integer tensor {where}; got {x.dtype} of shape {tuple(x.shape)}")
            if x.numel() and (int(x.min()) < 0 or int(x.max()) >= d):
                raise ValueError(f"token ids must lie in 0..{d - 1} (the layer has {d} symbols); got {int(x.min())}..{int(x.max())}")
            tokens, x = x.to(torch.int32).contiguous(), None
        else:
            shape = "[B, T, D]" if self.batch_first else "[T, B, D]"
            if x.dim() != 3:
                raise ValueError(f"x must be {shape} with D = {d}; got shape {tuple(x.shape)}")
            x = self._float(x, "x")
        if state is not None:
            if state.dim() != 2 or state.shape[1] != width:
                raise ValueError(f"the state must be [B, S] = [B, {width}] for this layer; got shape {tuple(state.shape)}")
            state = self._float(state, "the state")
        _choose_threads()
        precision = _precision()
        w = self._weights()
        params = [getattr(self, n) for n in self._names]
        live = torch.is_grad_enabled() and (any(p.requires_grad for p in params) or (x is not None and x.requires_grad)
                                            or (state is not None and state.requires_grad))
        if not live:
            y, s, _ = layer.forward(w.numpy(), _np(x), _np_tokens(tokens), _np(state), precision, False)
            return torch.from_numpy(y), torch.from_numpy(s)
        return _Fused.apply(layer, precision, x, tokens, state, w, *params)

    @staticmethod
    def _float(t: Tensor, what: str) -> Tensor:
        """float32 and contiguous: half-precision inputs (an autocast region's) are widened, a
        float64 one refused (the fused kernels compute in float32)."""
        if t.dtype == torch.float64:
            raise ValueError(f"engine='rnnlens' computes in float32; {what} is float64: convert it (.float()), "
                             "or build the module with engine='torch' to compute in float64")
        if not t.is_floating_point():
            raise ValueError(f"{what} must be a float tensor; got {t.dtype}")
        return t.float().contiguous()

    def _forward_torch(self, x: Tensor, state: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# Cells. Every forward takes x [T, B, D] (or token ids [T, B] for ISAN and the linear RNN) and a
# state (None: the cell's own start) and returns (outputs [T, B, O], final state), the state
# laid out as rnnlens's (docs/cells.md, "state S").
# ---------------------------------------------------------------------------------------------


class RAN(_Cell):
    """Recurrent Additive Network (Lee, Levy, Zettlemoyer)::

        c~_t = W_cx x_t + b_c
        i_t  = sigmoid(W_ic r_{t-1} + W_ix x_t + b_i)
        f_t  = sigmoid(W_fc r_{t-1} + W_fx x_t + b_f)
        c_t  = i_t * c~_t + f_t * c_{t-1}
        h_t  = g(c_t)                      g: tanh or identity
        y_t  = h_t, or W_proj h_t with a projection

    ``r`` is ``h_{t-1}`` (gates "h", the first paper), ``c_{t-1}`` (gates "c", the later
    paper), or ``y_{t-1}`` with a projection. ``content_bias=False`` drops ``b_c`` (the first
    paper's eq. (1) and its authors' code). State: ``c`` [B, H]."""

    def __init__(self, input_size: int, hidden_size: int, output: str = "tanh", gates: str = "h", projection_size: Optional[int] = None, engine: str = "rnnlens", batch_first: bool = False, content_bias: bool = True):
        super().__init__(engine, batch_first)
        if gates not in ("c", "h"):
            raise ValueError(f"gates must be 'c' or 'h', got {gates!r}")
        d, h = input_size, hidden_size
        r = projection_size or h
        self.input_size, self.hidden_size, self.output, self.gates, self.projection_size = d, h, output, gates, projection_size
        self.content_bias = content_bias
        self.g = _act(output)
        for n in ("W_cx", "W_ix", "W_fx"):
            setattr(self, n, _param(h, d))
        self.b_c = _param(h) if content_bias else None
        for n in ("b_i", "b_f"):
            setattr(self, n, _param(h))
        self.W_ic, self.W_fc = _param(h, r), _param(h, r)
        self.W_proj = _param(projection_size, h) if projection_size else None
        self._finish()

    def layer_config(self) -> Dict[str, Any]:
        return {"cell": "ran", "input_size": self.input_size, "hidden_size": self.hidden_size,
                "projection_size": self.projection_size, "options": {"output": self.output, "gates": self.gates, "content_bias": self.content_bias}}

    def extra_repr(self) -> str:
        p = f", projection_size={self.projection_size}" if self.projection_size else ""
        cb = "" if self.content_bias else ", content_bias=False"
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}, output={self.output}, gates={self.gates}{p}{cb}"

    def _rec(self, c: Tensor) -> Tensor:
        if self.W_proj is not None:
            return self.g(c) @ self.W_proj.t()
        return c if self.gates == "c" else self.g(c)

    def _forward_torch(self, x: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        c = x.new_zeros(x.shape[1], self.hidden_size) if state is None else state
        content = x @ self.W_cx.t() + self.b_c if self.b_c is not None else x @ self.W_cx.t()
        xi = x @ self.W_ix.t() + self.b_i
        xf = x @ self.W_fx.t() + self.b_f
        ys = []
        for t in range(x.shape[0]):
            r = self._rec(c)
            i = torch.sigmoid(xi[t] + r @ self.W_ic.t())
            f = torch.sigmoid(xf[t] + r @ self.W_fc.t())
            c = i * content[t] + f * c
            h = self.g(c)
            ys.append(h @ self.W_proj.t() if self.W_proj is not None else h)
        return torch.stack(ys), c


class LSTMNoOutputGate(_Cell):
    """The LSTM without its output gate (the first RAN paper, section 4.2)::

        c~_t = tanh(W_ch h_{t-1} + W_cx x_t + b_c)
        i_t  = sigmoid(W_ih h_{t-1} + W_ix x_t + b_i)
        f_t  = sigmoid(W_fh h_{t-1} + W_fx x_t + b_f)
        c_t  = i_t * c~_t + f_t * c_{t-1};   h_t = tanh(c_t)

    State: ``c`` [B, H]."""

    def __init__(self, input_size: int, hidden_size: int, engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(engine, batch_first)
        d, h = input_size, hidden_size
        self.input_size, self.hidden_size = d, h
        for n in ("W_cx", "W_ix", "W_fx"):
            setattr(self, n, _param(h, d))
        for n in ("b_c", "b_i", "b_f"):
            setattr(self, n, _param(h))
        for n in ("W_ch", "W_ih", "W_fh"):
            setattr(self, n, _param(h, h))
        self._finish()

    def layer_config(self) -> Dict[str, Any]:
        return {"cell": "lstm-no-output-gate", "input_size": self.input_size, "hidden_size": self.hidden_size}

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}"

    def _forward_torch(self, x: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        c = x.new_zeros(x.shape[1], self.hidden_size) if state is None else state
        xc, xi, xf = x @ self.W_cx.t() + self.b_c, x @ self.W_ix.t() + self.b_i, x @ self.W_fx.t() + self.b_f
        ys = []
        for t in range(x.shape[0]):
            hp = torch.tanh(c)
            u = torch.tanh(xc[t] + hp @ self.W_ch.t())
            i = torch.sigmoid(xi[t] + hp @ self.W_ih.t())
            f = torch.sigmoid(xf[t] + hp @ self.W_fh.t())
            c = i * u + f * c
            ys.append(torch.tanh(c))
        return torch.stack(ys), c


class LSTMSimpleContent(_Cell):
    """The LSTM with the RAN's content layer (the later RAN paper, eq. 5)::

        c~_t = W_cx x_t + b_c
        i_t, f_t, o_t = sigmoid(W_{i,f,o}h h_{t-1} + W_{i,f,o}x x_t + b_{i,f,o})
        c_t  = i_t * c~_t + f_t * c_{t-1};   h_t = o_t * tanh(c_t)

    State: ``[h | c]`` [B, 2H]."""

    def __init__(self, input_size: int, hidden_size: int, engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(engine, batch_first)
        d, h = input_size, hidden_size
        self.input_size, self.hidden_size = d, h
        for n in ("W_cx", "W_ix", "W_fx", "W_ox"):
            setattr(self, n, _param(h, d))
        for n in ("b_c", "b_i", "b_f", "b_o"):
            setattr(self, n, _param(h))
        for n in ("W_ih", "W_fh", "W_oh"):
            setattr(self, n, _param(h, h))
        self._finish()

    def layer_config(self) -> Dict[str, Any]:
        return {"cell": "lstm-simple-content", "input_size": self.input_size, "hidden_size": self.hidden_size}

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}"

    def _forward_torch(self, x: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        H = self.hidden_size
        s = x.new_zeros(x.shape[1], 2 * H) if state is None else state
        h, c = s[:, :H], s[:, H:]
        xc, xi = x @ self.W_cx.t() + self.b_c, x @ self.W_ix.t() + self.b_i
        xf, xo = x @ self.W_fx.t() + self.b_f, x @ self.W_ox.t() + self.b_o
        ys = []
        for t in range(x.shape[0]):
            i = torch.sigmoid(xi[t] + h @ self.W_ih.t())
            f = torch.sigmoid(xf[t] + h @ self.W_fh.t())
            o = torch.sigmoid(xo[t] + h @ self.W_oh.t())
            c = i * xc[t] + f * c
            h = o * torch.tanh(c)
            ys.append(h)
        return torch.stack(ys), torch.cat([h, c], dim=1)


class ISAN(_Cell):
    """Input Switched Affine Network (Foerster et al.): ``h_t = W_{x_t} h_{t-1} + b_{x_t}``, one
    matrix and bias per input symbol, no nonlinearity, from the learned ``h0``. Reads token
    ids [T, B]. State: ``h`` [B, H]."""

    def __init__(self, symbols: int, hidden_size: int, biases: bool = True, engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(engine, batch_first)
        self.input_size, self.hidden_size, self.biases = symbols, hidden_size, biases
        self.W_x = _param(symbols, hidden_size, hidden_size)
        self.b_x = _param(symbols, hidden_size) if biases else None
        self.h0 = _param(hidden_size)
        self._finish()

    def layer_config(self) -> Dict[str, Any]:
        return {"cell": "isan", "input_size": self.input_size, "hidden_size": self.hidden_size, "options": {"biases": self.biases}}

    def extra_repr(self) -> str:
        return f"symbols={self.input_size}, hidden_size={self.hidden_size}, biases={self.biases}"

    def _forward_torch(self, tokens: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        h = self.h0.expand(tokens.shape[1], -1) if state is None else state
        ys = []
        for t in range(tokens.shape[0]):
            h = torch.bmm(self.W_x[tokens[t]], h.unsqueeze(-1)).squeeze(-1)
            if self.b_x is not None:
                h = h + self.b_x[tokens[t]]
            ys.append(h)
        return torch.stack(ys), h


class LinearRNN(_Cell):
    """The ISAN paper's linear baselines: ``h_t = W h_{t-1} + b_{x_t}``, ``y_t = rho(h_t)``
    (``rho`` identity for ``linear``, tanh for ``linear-tanh``), from the learned ``h0``. Reads
    token ids [T, B]. State: ``h`` [B, H]."""

    def __init__(self, symbols: int, hidden_size: int, readout: str = "identity", engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(engine, batch_first)
        self.input_size, self.hidden_size, self.readout = symbols, hidden_size, readout
        self.rho = _act(readout)
        self.W = _param(hidden_size, hidden_size)
        self.b_x = _param(symbols, hidden_size)
        self.h0 = _param(hidden_size)
        self._finish()

    def layer_config(self) -> Dict[str, Any]:
        return {"cell": "linear", "input_size": self.input_size, "hidden_size": self.hidden_size, "options": {"readout": self.readout}}

    def extra_repr(self) -> str:
        return f"symbols={self.input_size}, hidden_size={self.hidden_size}, readout={self.readout}"

    def _forward_torch(self, tokens: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        h = self.h0.expand(tokens.shape[1], -1) if state is None else state
        ys = []
        for t in range(tokens.shape[0]):
            h = h @ self.W.t() + self.b_x[tokens[t]]
            ys.append(self.rho(h))
        return torch.stack(ys), h


class RDA(_Cell):
    """Recurrent Discounted Attention unit (Maginnis & Richemond)::

        u_t = W_u x_t + b_u
        z_t = u_t * tanh(W_g [x_t, h_{t-1}] + b_g)
        a_t = f_a(W_a [x_t, h_{t-1}] + b_a)          f_a: exp, relu, softplus or sigmoid
        gamma_t = sigmoid(W_gamma [x_t, h_{t-1}] + b_gamma)
        n_t = n_{t-1} * gamma_t + z_t * a_t;   d_t = d_{t-1} * gamma_t + a_t
        h_t = f_h(n_t / d_t);   o_t = f_o(h_t), passed upward

    from ``n_0 = d_0 = 0`` and ``h_0 = f_h(s0)``. ``n`` and ``d`` are kept scaled by
    ``exp(-m)``, ``m`` a running maximum of the log-attention, so that no attention overflows
    (as rnnlens computes them). State: ``[n' | d' | m | h]`` [B, 4H]. With ``discount=False``
    (no ``gamma``), exp attention, ``f_h = tanh`` and ``f_o = identity`` this is the RWA."""

    def __init__(self, input_size: int, hidden_size: int, attention: str = "exp", hidden_fn: str = "identity", output_fn: str = "tanh", discount: bool = True, engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(engine, batch_first)
        if not discount and (attention, hidden_fn, output_fn) != ("exp", "tanh", "identity"):
            raise ValueError("without the discount the cell is the RWA: exp attention, hidden_fn tanh, output_fn identity (use RWA)")
        if attention not in ("exp", "relu", "softplus", "sigmoid"):
            raise ValueError(f"unknown attention {attention!r}")
        d, h = input_size, hidden_size
        self.input_size, self.hidden_size = d, h
        self.attention, self.hidden_fn, self.output_fn, self.discount = attention, hidden_fn, output_fn, discount
        self.fh, self.fo = _act(hidden_fn), _act(output_fn)
        self.W_u, self.b_u = _param(h, d), _param(h)
        self.W_g, self.b_g = _param(h, d + h), _param(h)
        self.W_a, self.b_a = _param(h, d + h), _param(h)
        if discount:
            self.W_gamma, self.b_gamma = _param(h, d + h), _param(h)
        self.s0 = _param(h)
        self._finish()

    def layer_config(self) -> Dict[str, Any]:
        if not self.discount:
            return {"cell": "rwa", "input_size": self.input_size, "hidden_size": self.hidden_size}
        return {"cell": "rda", "input_size": self.input_size, "hidden_size": self.hidden_size,
                "options": {"attention": self.attention, "hidden_fn": self.hidden_fn, "output_fn": self.output_fn}}

    def extra_repr(self) -> str:
        return (f"input_size={self.input_size}, hidden_size={self.hidden_size}, attention={self.attention}, "
                f"hidden_fn={self.hidden_fn}, output_fn={self.output_fn}, discount={self.discount}")

    def _log_attention(self, p: Tensor) -> Tuple[Tensor, Tensor]:
        """``ln f_a(p)`` and where the attention is positive (relu pays nothing at p <= 0)."""
        if self.attention == "exp":
            return p, torch.ones_like(p, dtype=torch.bool)
        if self.attention == "sigmoid":
            return F.logsigmoid(p), torch.ones_like(p, dtype=torch.bool)
        if self.attention == "softplus":
            # ln softplus(p) = ln ln(1 + e^p), which is p - e^p / 2 to float precision far left.
            far = p < -20
            mid = torch.log(F.softplus(torch.where(far, torch.zeros_like(p), p)))
            return torch.where(far, p - 0.5 * torch.exp(p), mid), torch.ones_like(p, dtype=torch.bool)
        pos = p > 0
        return torch.log(torch.where(pos, p, torch.ones_like(p))), pos

    def initial_state(self, batch: int) -> Tensor:
        H = self.hidden_size
        z = self.s0.new_zeros(batch, H)
        return torch.cat([z, z, z, self.fh(self.s0).expand(batch, -1)], dim=1)

    def _forward_torch(self, x: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        H, D = self.hidden_size, self.input_size
        s = self.initial_state(x.shape[1]) if state is None else state
        n, d, m, h = s[:, :H], s[:, H:2 * H], s[:, 2 * H:3 * H], s[:, 3 * H:]
        u = x @ self.W_u.t() + self.b_u
        gx = x @ self.W_g[:, :D].t() + self.b_g
        ax = x @ self.W_a[:, :D].t() + self.b_a
        if self.discount:
            cx = x @ self.W_gamma[:, :D].t() + self.b_gamma
        ys = []
        for t in range(x.shape[0]):
            z = u[t] * torch.tanh(gx[t] + h @ self.W_g[:, D:].t())
            lam, paid = self._log_attention(ax[t] + h @ self.W_a[:, D:].t())
            c = m + (F.logsigmoid(cx[t] + h @ self.W_gamma[:, D:].t()) if self.discount else 0.0)
            fresh = d == 0
            mx = torch.where(fresh, lam, torch.maximum(c, lam))
            alpha = torch.where(fresh, torch.zeros_like(c), torch.exp(c - mx))
            beta = torch.exp(lam - mx)
            n_new, d_new = alpha * n + beta * z, alpha * d + beta
            # A relu attention that pays nothing leaves the sums alone (m discounted).
            n = torch.where(paid, n_new, n)
            d = torch.where(paid, d_new, d)
            m = torch.where(paid, mx, c)
            # With nothing attended to yet (d = 0) the unit keeps its previous value.
            h = torch.where(d > 0, self.fh(n / torch.where(d > 0, d, torch.ones_like(d))), h)
            ys.append(self.fo(h))
        return torch.stack(ys), torch.cat([n, d, m, h], dim=1)


class RWA(RDA):
    """Recurrent Weighted Average (Ostmeyer & Cowell, as restated by the RDA paper): the RDA
    without the discount, with exp attention, ``h_t = tanh(n_t / d_t)`` and ``h_0 = tanh(s0)``;
    the output is ``h_t``. State: ``[n' | d' | m | h]`` [B, 4H]."""

    def __init__(self, input_size: int, hidden_size: int, engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(input_size, hidden_size, "exp", "tanh", "identity", discount=False, engine=engine, batch_first=batch_first)


class LSTM(_Cell):
    """The LSTM exactly as ``torch.nn.LSTM`` (one layer; gate rows i, f, g, o; two biases;
    PyTorch's optional output projection ``proj_size``)::

        i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of (W_ih x_t + b_ih + W_hh r_{t-1} + b_hh)
        c_t = f * c_{t-1} + i * g;   h_t = o * tanh(c_t);   y_t = h_t, or W_proj h_t

    ``r_{t-1} = y_{t-1}``. State: ``[y | c]`` [B, R + H] (``R`` = ``proj_size`` or ``H``): torch's
    ``h_n`` and ``c_n`` side by side. Built from scratch the forget rows of ``bias_ih`` start at
    1, as ``rnnlens train`` starts them."""

    def __init__(self, input_size: int, hidden_size: int, proj_size: Optional[int] = None, engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(engine, batch_first)
        d, h = input_size, hidden_size
        r = proj_size or h
        self.input_size, self.hidden_size, self.proj_size = d, h, proj_size or None
        self.weight_ih, self.weight_hh = _param(4 * h, d), _param(4 * h, r)
        self.bias_ih, self.bias_hh = _param(4 * h), _param(4 * h)
        self.W_proj = _param(proj_size, h) if proj_size else None
        self._finish()

    def layer_config(self) -> Dict[str, Any]:
        return {"cell": "lstm", "input_size": self.input_size, "hidden_size": self.hidden_size, "projection_size": self.proj_size}

    def extra_repr(self) -> str:
        p = f", proj_size={self.proj_size}" if self.proj_size else ""
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}{p}"

    def _forward_torch(self, x: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        H = self.hidden_size
        R = self.proj_size or H
        s = x.new_zeros(x.shape[1], R + H) if state is None else state
        y, c = s[:, :R], s[:, R:]
        xp = x @ self.weight_ih.t() + self.bias_ih + self.bias_hh
        ys = []
        for t in range(x.shape[0]):
            g = xp[t] + y @ self.weight_hh.t()
            i, f, u, o = torch.sigmoid(g[:, :H]), torch.sigmoid(g[:, H:2 * H]), torch.tanh(g[:, 2 * H:3 * H]), torch.sigmoid(g[:, 3 * H:])
            c = f * c + i * u
            h = o * torch.tanh(c)
            y = h @ self.W_proj.t() if self.W_proj is not None else h
            ys.append(y)
        return torch.stack(ys), torch.cat([y, c], dim=1)


class GRU(_Cell):
    """The GRU, rows r, z, n and two biases as ``torch.nn.GRU``, in PyTorch's form
    (``reset_after=True``: ``n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))``, what
    ``torch.nn.GRU`` computes) or the papers' (``reset_after=False``: ``n_t = tanh(W_in x_t +
    b_in + W_hn (r_t * h_{t-1}) + b_hn)``, TensorFlow's GRUCell, the later RAN paper's eq. 6);
    ``h_t = (1 - z_t) * n_t + z_t * h_{t-1}``. State: ``h`` [B, H]."""

    def __init__(self, input_size: int, hidden_size: int, reset_after: bool = True, engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(engine, batch_first)
        h = hidden_size
        self.input_size, self.hidden_size, self.reset_after = input_size, h, bool(reset_after)
        self.weight_ih, self.weight_hh = _param(3 * h, input_size), _param(3 * h, h)
        self.bias_ih, self.bias_hh = _param(3 * h), _param(3 * h)
        self._finish()

    def layer_config(self) -> Dict[str, Any]:
        return {"cell": "gru", "input_size": self.input_size, "hidden_size": self.hidden_size, "options": {"reset_after": self.reset_after}}

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}, reset_after={self.reset_after}"

    def _forward_torch(self, x: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        H = self.hidden_size
        h = x.new_zeros(x.shape[1], H) if state is None else state
        xp = x @ self.weight_ih.t() + self.bias_ih
        ys = []
        for t in range(x.shape[0]):
            if self.reset_after:
                hp = h @ self.weight_hh.t() + self.bias_hh
                rz = torch.sigmoid(xp[t, :, :2 * H] + hp[:, :2 * H])
                r, z = rz[:, :H], rz[:, H:]
                n = torch.tanh(xp[t, :, 2 * H:] + r * hp[:, 2 * H:])
            else:
                rz = torch.sigmoid(xp[t, :, :2 * H] + h @ self.weight_hh[:2 * H].t() + self.bias_hh[:2 * H])
                r, z = rz[:, :H], rz[:, H:]
                n = torch.tanh(xp[t, :, 2 * H:] + (r * h) @ self.weight_hh[2 * H:].t() + self.bias_hh[2 * H:])
            h = (1 - z) * n + z * h
            ys.append(h)
        return torch.stack(ys), h


class PaperGRU(GRU):
    """The GRU in the papers' form: ``GRU(..., reset_after=False)``."""

    def __init__(self, input_size: int, hidden_size: int, engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(input_size, hidden_size, reset_after=False, engine=engine, batch_first=batch_first)


class RNN(_Cell):
    """The simple RNN as ``torch.nn.RNN``: ``h_t = f(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)``,
    ``f`` tanh or relu. State: ``h`` [B, H]."""

    _init = None

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh", engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(engine, batch_first)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        h = hidden_size
        self.input_size, self.hidden_size, self.nonlinearity = input_size, h, nonlinearity
        self.weight_ih, self.weight_hh = _param(h, input_size), _param(h, h)
        self.bias_ih, self.bias_hh = _param(h), _param(h)
        self._finish()

    def layer_config(self) -> Dict[str, Any]:
        o = {"nonlinearity": self.nonlinearity}
        if self._init:
            o["init"] = self._init
        return {"cell": "rnn", "input_size": self.input_size, "hidden_size": self.hidden_size, "options": o}

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}, nonlinearity={self.nonlinearity}"

    def _forward_torch(self, x: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        f = torch.tanh if self.nonlinearity == "tanh" else torch.relu
        h = x.new_zeros(x.shape[1], self.hidden_size) if state is None else state
        xp = x @ self.weight_ih.t() + self.bias_ih + self.bias_hh
        ys = []
        for t in range(x.shape[0]):
            h = f(xp[t] + h @ self.weight_hh.t())
            ys.append(h)
        return torch.stack(ys), h


class IRNN(RNN):
    """The IRNN (Le, Jaitly, Hinton): the relu RNN whose recurrent matrix starts at the
    identity (the ISAN paper's baseline)."""

    _init = "identity"

    def __init__(self, input_size: int, hidden_size: int, engine: str = "rnnlens", batch_first: bool = False):
        super().__init__(input_size, hidden_size, "relu", engine=engine, batch_first=batch_first)


class Stack(nn.Module):
    """Layers one above the other, as ``rnnlens train --hidden-size A,B`` stacks them: each
    reads the outputs of the one below, with dropout ``p`` on those outputs between layers in
    training (the embedding's and the top output's dropout are the caller's, beside its own
    embedding and head). ``state`` is a list of each layer's state (None: every layer's own
    start); the final states come back as such a list."""

    def __init__(self, *layers: nn.Module, dropout: float = 0.0):
        super().__init__()
        if not layers:
            raise ValueError("a Stack needs at least one layer")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        for k, (below, above) in enumerate(zip(layers, layers[1:])):
            out = getattr(below, "projection_size", None) or getattr(below, "proj_size", None) or below.hidden_size
            if getattr(above, "input_size", out) != out:
                raise ValueError(f"layer {k + 1} reads {above.input_size} values a step; layer {k} gives {out}")
        self.layers = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, state: Optional[List[Optional[Tensor]]] = None) -> Tuple[Tensor, List[Tensor]]:
        state = [None] * len(self.layers) if state is None else list(state)
        if len(state) != len(self.layers):
            raise ValueError(f"the state holds {len(state)} layers' states; this stack has {len(self.layers)} layers")
        finals = []
        for k, (layer, s) in enumerate(zip(self.layers, state)):
            if k > 0:
                x = self.dropout(x)
            x, s = layer(x, s)
            finals.append(s)
        return x, finals


class _TorchRNN(nn.Module):
    """A ``torch.nn.LSTM``/``GRU``/``RNN`` of one layer behind the cells' interface: rnnlens's
    tensor names and state layout (an LSTM's ``[y | c]``)."""

    def __init__(self, kind: str, module: nn.Module):
        super().__init__()
        self.kind, self.module = kind, module
        self.hidden_size = module.hidden_size
        self.proj = getattr(module, "proj_size", 0) or 0

    def forward(self, x: Tensor, state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        if self.kind == "lstm":
            r = self.proj or self.hidden_size
            hc = None if state is None else (state[:, :r].unsqueeze(0).contiguous(), state[:, r:].unsqueeze(0).contiguous())
            y, (hn, cn) = self.module(x, hc)
            return y, torch.cat([hn[0], cn[0]], dim=1)
        y, hn = self.module(x, None if state is None else state.unsqueeze(0).contiguous())
        return y, hn[0]

    def checkpoint_tensors(self) -> Dict[str, Tensor]:
        sd = self.module.state_dict()
        out = {k[: -len("_l0")]: v for k, v in sd.items() if k.endswith("_l0")}
        if "weight_hr_l0" in sd:
            out["W_proj"] = sd["weight_hr_l0"]
            out.pop("weight_hr", None)
        return out

    def load_checkpoint_tensors(self, tensors: Dict[str, Tensor]) -> None:
        sd = {k + "_l0": v for k, v in tensors.items() if k != "W_proj"}
        if "W_proj" in tensors:
            sd["weight_hr_l0"] = tensors["W_proj"]
        self.module.load_state_dict(sd)


def torch_rnn(layer: Dict[str, Any], tensors: Optional[Dict[str, Tensor]] = None) -> nn.Module:
    """The ``torch.nn.LSTM``, ``torch.nn.GRU`` or ``torch.nn.RNN`` of one layer of an rnnlens
    checkpoint (its ``config.json`` entry), loaded with ``tensors`` (the layer's tensors by
    their rnnlens names, without the ``rnn.{l}.`` prefix) when given. Time-major, one layer."""
    d, h, p = layer["input_size"], layer["hidden_size"], layer.get("projection_size")
    opts = layer.get("options") or {}
    cell = layer["cell"]
    if cell == "lstm":
        m = nn.LSTM(d, h, proj_size=p or 0)
    elif cell == "gru":
        if opts.get("reset_after", True) is False:
            raise ValueError("torch.nn.GRU has PyTorch's form only; this layer is the papers' form (reset_after false): use PaperGRU")
        m = nn.GRU(d, h)
    elif cell == "rnn":
        m = nn.RNN(d, h, nonlinearity=opts.get("nonlinearity", "tanh"))
    else:
        raise ValueError(f"{cell} is not an LSTM, GRU or RNN layer")
    if tensors is not None:
        w = _TorchRNN(cell, m)
        w.load_checkpoint_tensors(tensors)
    return m


def layer_from_config(layer: Dict[str, Any], engine: str = "rnnlens") -> nn.Module:
    """The module of one layer of ``config.json`` (parameters as ``rnnlens train`` starts them
    until loaded). ``engine="torch"`` gives the plain loops, and for an LSTM, a GRU in
    PyTorch's form or a simple RNN ``torch.nn.LSTM``/``GRU``/``RNN`` itself."""
    if engine not in _ENGINES:
        raise ValueError(f"engine must be 'rnnlens' (the fused kernels) or 'torch' (the plain loop), got {engine!r}")
    cell, d, h, p = layer["cell"], layer["input_size"], layer["hidden_size"], layer.get("projection_size")
    o = layer.get("options") or {}
    if engine == "torch":
        if cell == "lstm":
            return _TorchRNN("lstm", nn.LSTM(d, h, proj_size=p or 0))
        if cell == "gru" and o.get("reset_after", True):
            return _TorchRNN("gru", nn.GRU(d, h))
        if cell == "rnn":
            return _TorchRNN("rnn", nn.RNN(d, h, nonlinearity=o.get("nonlinearity", "tanh")))
    kw = {"engine": engine}
    if cell == "ran":
        if "gates" not in o:
            import warnings

            warnings.warn(_MISSING_GATES, stacklevel=2)
        return RAN(d, h, output=o.get("output", "tanh"), gates=o.get("gates", "c"), projection_size=p, content_bias=o.get("content_bias", True), **kw)
    if cell == "lstm":
        return LSTM(d, h, proj_size=p, **kw)
    if cell == "gru":
        return GRU(d, h, **kw) if o.get("reset_after", True) else PaperGRU(d, h, **kw)
    if cell == "rnn":
        if o.get("init") == "identity":
            return IRNN(d, h, **kw)
        return RNN(d, h, nonlinearity=o.get("nonlinearity", "tanh"), **kw)
    if cell == "isan":
        return ISAN(d, h, biases=o.get("biases", True), **kw)
    if cell == "linear":
        return LinearRNN(d, h, readout=o.get("readout", "identity"), **kw)
    if cell == "rwa":
        return RWA(d, h, **kw)
    if cell == "rda":
        return RDA(d, h, o.get("attention", "exp"), o.get("hidden_fn", "identity"), o.get("output_fn", "tanh"), **kw)
    if cell == "lstm-simple-content":
        return LSTMSimpleContent(d, h, **kw)
    if cell == "lstm-no-output-gate":
        return LSTMNoOutputGate(d, h, **kw)
    raise ValueError(f"unknown cell {cell!r} in the config")


def _state_width(layer: Dict[str, Any]) -> int:
    h, p, cell = layer["hidden_size"], layer.get("projection_size"), layer["cell"]
    if cell == "lstm":
        return (p or h) + h
    if cell in ("rwa", "rda"):
        return 4 * h
    if cell == "lstm-simple-content":
        return 2 * h
    return h


def _layer_tensors(module: nn.Module) -> Dict[str, Tensor]:
    if isinstance(module, _TorchRNN):
        return module.checkpoint_tensors()
    return {k: v for k, v in module.state_dict().items() if v is not None}


def _load_layer(module: nn.Module, tensors: Dict[str, Tensor]) -> None:
    if isinstance(module, _TorchRNN):
        module.load_checkpoint_tensors(tensors)
    else:
        module.load_state_dict(tensors, strict=True)


class LanguageModel(nn.Module):
    """An rnnlens language model: embedding (none for ISAN and the linear RNNs) -> the layers ->
    a linear decoder to the vocabulary's logits. Parameters named as in ``model.safetensors``
    (``embedding.weight``, ``rnn.{l}.*``, ``decoder.weight``, ``decoder.bias``).

    :meth:`log_probs` is the streaming evaluation, the state carried through the whole text, as
    ``rnnlens eval`` and ``rnnlens.load`` score every model whatever its training (a model
    trained with its state reset every window included). ``reset_every=N`` starts from the
    initial state every ``N`` tokens instead, as ``rnnlens eval --reset-every N`` does."""

    def __init__(self, config: Dict[str, Any], vocab: Sequence[str], reset_every: Optional[int] = None, engine: str = "rnnlens"):
        super().__init__()
        self.config = json.loads(json.dumps(config))
        self.vocab = list(vocab)
        self.reset_every = reset_every
        v, e = config["vocab_size"], config.get("embedding_size")
        self.embedding = nn.Embedding(v, e) if e else None
        self.rnn = nn.ModuleList(layer_from_config(l, engine) for l in config["layers"])
        self.initial_states = nn.ParameterDict(
            {str(i): _param(_state_width(l)) for i, l in enumerate(config["layers"]) if l.get("learn_initial_state")}
        )
        top = config["layers"][-1]
        self.decoder = nn.Linear(top.get("projection_size") or top["hidden_size"], v)

    # -- checkpoints --------------------------------------------------------------------------

    @classmethod
    def from_checkpoint(cls, path: Union[str, "os.PathLike[str]"], engine: str = "rnnlens") -> "LanguageModel":
        """Read a checkpoint directory written by ``rnnlens train`` (or :meth:`to_checkpoint`);
        ``engine="torch"`` runs its layers as plain loops (and ``torch.nn`` modules)."""
        path = os.fspath(path)
        config, tensors = _read_checkpoint(path)
        if config.get("input_size") is not None:
            raise ValueError(f"{path} holds a sequence-task model (it reads vectors), not a language model")
        vocab = _read_vocab(os.path.join(path, "vocab.txt"), config["tokenizer"]["level"] == "byte")
        # config.json, model.safetensors and vocab.txt alone: the streaming evaluation.
        lm = cls(config, vocab, engine=engine)
        lm.load_tensors(tensors)
        lm.source = path
        return lm

    def tensors(self) -> Dict[str, Tensor]:
        """Every parameter under its checkpoint name (detached, contiguous, float32)."""
        out: Dict[str, Tensor] = {}
        if self.embedding is not None:
            out["embedding.weight"] = self.embedding.weight
        for l, layer in enumerate(self.rnn):
            for k, v in _layer_tensors(layer).items():
                out[f"rnn.{l}.{k}"] = v
        for l, p in self.initial_states.items():
            out[f"rnn.{l}.initial_state"] = p
        out["decoder.weight"], out["decoder.bias"] = self.decoder.weight, self.decoder.bias
        return {k: v.detach().to(torch.float32).contiguous().cpu() for k, v in out.items()}

    def load_tensors(self, tensors: Dict[str, Tensor]) -> None:
        """Set every parameter from checkpoint-named tensors; a missing, extra or misshapen
        tensor is an error naming it."""
        want = self.tensors()
        missing = sorted(set(want) - set(tensors))
        extra = sorted(set(tensors) - set(want))
        if missing or extra:
            raise ValueError(f"the tensors do not fit this model: missing {missing}, unexpected {extra}")
        for k, v in want.items():
            if tuple(tensors[k].shape) != tuple(v.shape):
                raise ValueError(f"tensor {k}: shape {tuple(tensors[k].shape)}, the model needs {tuple(v.shape)}")
        with torch.no_grad():
            if self.embedding is not None:
                self.embedding.weight.copy_(tensors["embedding.weight"])
            for l, layer in enumerate(self.rnn):
                _load_layer(layer, _layer_of(tensors, l))
            for l, p in self.initial_states.items():
                p.copy_(tensors[f"rnn.{l}.initial_state"])
            self.decoder.weight.copy_(tensors["decoder.weight"])
            self.decoder.bias.copy_(tensors["decoder.bias"])

    def to_checkpoint(self, path: Union[str, "os.PathLike[str]"], overwrite: bool = False) -> str:
        """Write the model as an rnnlens checkpoint directory (``config.json``,
        ``model.safetensors``, ``vocab.txt``, ``manifest.json``) that ``rnnlens eval``,
        ``sample`` and ``explain`` read. It holds no training state: ``rnnlens`` evaluates it
        with the state carried through the text. An existing checkpoint is replaced only with
        ``overwrite``; a directory holding anything else is refused."""
        from safetensors.torch import save_file

        path = os.fspath(path)
        if os.path.exists(path):
            own = {"config.json", "model.safetensors", "vocab.txt", "manifest.json", "trainer.json", "trainer.safetensors", "metrics.jsonl", "curves.svg"}
            if not os.path.isdir(path):
                raise FileExistsError(f"{path} exists and is not a directory")
            others = sorted(set(os.listdir(path)) - own)
            if others:
                raise FileExistsError(f"{path} holds files that are not a checkpoint's ({', '.join(others)}); choose another directory")
            if os.listdir(path) and not overwrite:
                raise FileExistsError(f"{path} holds a checkpoint already; pass overwrite=True to replace it")
        tmp = path.rstrip("/\\") + ".writing"
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        os.makedirs(tmp)
        save_file(self.tensors(), os.path.join(tmp, "model.safetensors"))
        with open(os.path.join(tmp, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
            byte = self.config["tokenizer"]["level"] == "byte"
            f.write("".join(_escape(t, byte) + "\n" for t in self.vocab))
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(self.config, f, indent=1)
        _write_manifest(tmp, ["config.json", "model.safetensors", "vocab.txt"])
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(tmp, path)
        return path

    # -- running ------------------------------------------------------------------------------

    def initial_state(self, batch: int) -> List[Optional[Tensor]]:
        """Every layer's start: its learned initial state where it has one, else None (the
        cell's own: zeros, ``h0`` or ``s0``)."""
        return [self.initial_states[str(l)].expand(batch, -1) if str(l) in self.initial_states else None for l in range(len(self.rnn))]

    def forward(self, tokens: Tensor, state: Optional[List[Optional[Tensor]]] = None) -> Tuple[Tensor, List[Tensor]]:
        """Logits ``[T, B, V]`` of the next token at every position of ``tokens`` ``[T, B]``,
        and every layer's final state (pass it back to continue the stream)."""
        state = self.initial_state(tokens.shape[1]) if state is None else state
        x = self.embedding(tokens) if self.embedding is not None else tokens
        finals = []
        for layer, s in zip(self.rnn, state):
            x, s = layer(x, s)
            finals.append(s)
        return self.decoder(x), finals

    @torch.no_grad()
    def log_probs(self, ids: Sequence[int], window: int = 100) -> Tensor:
        """ln p of tokens 2..N of ``ids`` given all before them: ``rnnlens eval --per-token``
        on the same tokens (float64; equal to float32 rounding). The state is carried in windows
        of ``window`` tokens (which does not change the result), or reset every
        ``reset_every`` tokens where that was asked for."""
        ids = torch.as_tensor(list(ids), dtype=torch.long)
        step = self.reset_every or window
        out, state = [], None
        for i in range(0, len(ids) - 1, step):
            x = ids[i:min(i + step, len(ids) - 1)].unsqueeze(1)
            y = ids[i + 1:i + 1 + x.shape[0]]
            if self.reset_every:
                state = None
            logits, state = self(x, state)
            lp = torch.log_softmax(logits[:, 0].double(), dim=-1)
            out.append(lp.gather(1, y.unsqueeze(1)).squeeze(1))
        return torch.cat(out)


def _escape(tok: str, byte_level: bool) -> str:
    out = []
    for ch in tok:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif o < 0x20 or 0x7F <= o <= 0x9F or (byte_level and 0x80 <= o <= 0xFF):
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    return "".join(out)


def _unescape(line: str) -> str:
    out, i = [], 0
    while i < len(line):
        ch = line[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = line[i + 1] if i + 1 < len(line) else ""
        if nxt == "x":
            out.append(chr(int(line[i + 2:i + 4], 16)))
            i += 4
        else:
            out.append({"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}[nxt])
            i += 2
    return "".join(out)


def _read_vocab(path: str, byte_level: bool) -> List[str]:
    with open(path, encoding="utf-8", newline="\n") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [_unescape(l) for l in lines]
