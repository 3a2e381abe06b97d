"""rnnlens from Python: load a checkpoint trained by rnnlens, score and sample text, read the
states of its cells and the papers' analyses as numpy arrays, train models and run the sequence
tasks. The computing is rnnlens's own Rust code (the command line's, bit for bit); the
interpreter is released while it runs.

    import rnnlens
    m = rnnlens.load("runs/default")
    lp = m.log_probs("the cat sat on the mat")    # ln p of each token after the first
    print(m.sample("the", length=20, seed=3))

Errors of rnnlens (a missing checkpoint, a symbol outside the vocabulary, a bad option) raise
:class:`RnnlensError`, a :class:`ValueError`, with the command line's message.

``rnnlens.torch`` holds plain PyTorch modules of the cells that read and write rnnlens
checkpoints (it needs PyTorch; this module does not).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _rnnlens
from ._rnnlens import RnnlensError

__all__ = ["Model", "RnnlensError", "TaskModel", "has_gpu", "load", "set_threads", "task", "train"]
__version__ = "0.1.0"

PathLike = Union[str, "os.PathLike[str]"]
Text = Union[str, bytes]

# Arguments are checked here, in Python's words and naming the argument, before the library
# sees them: a wrong type is a TypeError, a value out of range a ValueError.

_U64_MAX = 2**64 - 1

# Above this share of <unk> tokens, log_probs and explain warn that the text is mostly outside
# the vocabulary (Brown's own valid split has about 5 % with a 10,000-word vocabulary).
UNKNOWN_WARNING = 0.2


def _text(name: str, value: Any) -> Text:
    if isinstance(value, bytearray):
        return bytes(value)
    if not isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be str or bytes, got {type(value).__name__}")
    return value


def _int(name: str, value: Any, minimum: int = 0, maximum: int = _U64_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def _ints(name: str, values: Any, minimum: int = 0, maximum: int = 2**32 - 1) -> List[int]:
    if isinstance(values, (str, bytes, bytearray)):
        raise TypeError(f"{name} must be a sequence of integers, not a string ({values!r})")
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of integers, got {type(values).__name__}") from None
    return [_int(f"{name}[{i}]", v, minimum, maximum) for i, v in enumerate(items)]


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    return float(value)


def _in_python_words(e: RnnlensError) -> RnnlensError:
    """The command line's message with its flags named as this API names them: ``--resume``
    and ``--overwrite`` as the arguments ``resume=`` and ``overwrite=True``, every other
    ``--flag`` as the option ``"flag"``."""
    import re

    def name(m: "re.Match[str]") -> str:
        flag = m.group(1)
        if flag == "resume":
            return "resume="
        if flag == "overwrite":
            return "overwrite=True"
        return '"' + flag.replace("-", "_") + '"'

    text = re.sub(r"--resume (?=\S)", "resume=", str(e))  # "--resume DIR" -> "resume=DIR"
    return RnnlensError(re.sub(r"--([a-z][a-z0-9-]*)", name, text))


def set_threads(n: int) -> int:
    """Use ``n`` worker threads for everything rnnlens computes in this process.

    Results are identical for a given count (as on the command line's ``--threads``). The pool
    is started once, by the first computation: call this before anything else. Without it the
    pool has one thread per core. Returns the size in force."""
    return _rnnlens.set_threads(_int("n", n, 1, 2**16))


class Model:
    """A trained model: its network, parameters and tokenizer, as a checkpoint holds them.

    Made by :func:`load`. Attributes: ``config`` (``config.json`` as a dict), ``trainer``
    (``trainer.json`` as a dict, or None for a checkpoint written without training state),
    ``vocab`` (the tokens, indexed by id), ``level`` (``"word"``, ``"char"`` or ``"byte"``),
    ``path``, ``precision`` (``"f32"`` or ``"bf16"``: what its matrix products compute in),
    ``split`` (word level: how typed text is cut into the corpus's words, ``"brown"``,
    ``"ptb"`` or ``"whitespace"``; None at char and byte level), ``device`` (``"cpu"`` or
    ``"gpu"``: where :meth:`log_probs` and :meth:`sample` compute)."""

    def __init__(self, inner: "_rnnlens.Model"):
        self._m = inner
        self.config: Dict[str, Any] = json.loads(inner.config_json)
        t = inner.trainer_json
        self.trainer: Optional[Dict[str, Any]] = None if t is None else json.loads(t)
        self.vocab: List[str] = inner.vocab
        self.level: str = inner.level
        self.path: str = str(inner.path)
        self.precision: str = inner.precision
        self.split: Optional[str] = inner.split
        self.device: str = inner.device

    def __repr__(self) -> str:
        return repr(self._m)

    def encode(self, text: Text) -> np.ndarray:
        """Token ids of ``text`` (uint32), as the model's tokenizer reads a file: at word level
        every line ends with ``<eos>`` and unknown words are ``<unk>``; at char level a
        character outside the vocabulary is an error naming it."""
        return self._m.encode(_text("text", text))

    def tokens(self, text: Text) -> List[str]:
        """The tokens of ``text`` as strings, as :meth:`encode` reads it: at word level cut by
        the corpus's rule (``split``), so ``"world,"`` is ``"world", ","`` for a Brown model,
        and every line ending in ``"<eos>"``."""
        return self._m.tokens(_text("text", text))

    def unknown_share(self, text: Text) -> float:
        """The share of the tokens of ``text`` that are ``<unk>`` (words outside the
        vocabulary). :meth:`log_probs` and :meth:`explain` warn when it is above 20 %.
        0 at char and byte level, where a character outside the vocabulary is an error."""
        return self._m.unknown_share(_text("text", text))

    def _warn_unknown(self, share: Optional[float]) -> None:
        if share is not None and share > UNKNOWN_WARNING:
            warnings.warn(
                f"{100 * share:.1f}% of the text's tokens are <unk> (outside the model's "
                f"{len(self.vocab)}-token vocabulary): its scores say little about the words",
                stacklevel=3,
            )

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (word level: joined by spaces, ``<eos>`` as a line break)."""
        return self._m.decode(_ints("ids", ids))

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """The bytes of token ids (for byte-level models, whose tokens need not be UTF-8)."""
        return bytes(self._m.decode_bytes(_ints("ids", ids)))

    def log_probs(self, text: Text) -> np.ndarray:
        """Natural-log probability of every token of ``text`` after the first, given all the
        tokens before it (float64, one per scored token): the exact streaming evaluation of
        ``rnnlens eval --input FILE --per-token OUT``, the same numbers: the state carried
        through the whole text, whatever the model's training (one trained with its state reset
        every window included).

        Perplexity is ``exp(-mean)``; bits per character ``-mean / ln 2``."""
        lp, share = self._m.log_probs(_text("text", text))
        self._warn_unknown(share)
        return lp

    def states(self, text: Text) -> List[Dict[str, np.ndarray]]:
        """The state after every token of ``text``, read as :meth:`log_probs` reads it: one
        dict per layer, bottom first, of float32 arrays ``[T, width]`` (row ``t``: after token
        ``t``). ``"output"`` is what the layer passes up; the others are the cell's own:

        - ran-tanh, ran-identity: ``c``, the gates ``i`` and ``f``, ``content`` (``c~``) and
          ``h = g(c)`` (before the projection, if any);
        - lstm: ``c`` and the gates ``i``, ``f``, ``g`` (candidate), ``o``;
        - gru: the gates ``r``, ``z`` and the candidate ``n``;
        - lstm-no-output-gate: ``c``, ``content``, ``i``, ``f``; lstm-simple-content: ``c``,
          ``content``, ``i``, ``f``, ``o``;
        - rwa, rda: ``n`` and ``d`` scaled by ``exp(-m)`` (the state as the cell keeps it, so
          that nothing overflows; ``h = f_h(n / d)``), the reference ``m``, ``h``; rda also the
          discount ``gamma``;
        - rnn, irnn, isan, linear: the output is the state.

        Every layer also has ``"h"``: the cell's own where it traces one (before the projection
        or ``f_o``), else the output itself (the same array). The arrays hold the library's
        buffers (no copy)."""
        layers = [dict(layer) for layer in self._m.states(_text("text", text))]
        for layer in layers:
            layer.setdefault("h", layer["output"])
        return layers

    def explain(self, text: Text, components: Sequence[int] = (), distributions: str = "text") -> Dict[str, Any]:
        """``rnnlens explain``: every analysis of the papers that applies to this model, on
        ``text`` (at most 2000 tokens, read in one window from the initial state), as arrays.
        The numbers are those ``explain --report DIR`` writes as CSV and JSON.

        Keys: ``cell``, ``tokens``, ``labels`` (a printable label per token), ``summary`` (the
        text ``explain`` prints), ``not_applicable`` (why an analysis does not apply), and

        - ``ran`` (RAN layers; else None): per layer ``weights`` ``[T, T]`` (``max_m w_j^t(m)``
          at ``[t, j]``, zero above the diagonal), ``arrows`` (the ``j <= t`` of largest
          weight, eq. 8), ``predecessors`` (the strict one; -1 at t = 0),
          ``initial_state_weight``, ``components`` (unit -> ``[T, T]`` weights, for the units
          asked for in ``components``), ``reconstruction_relative_error``;
        - ``attention`` (RWA and RDA layers; else None): the effective attention weights, the
          same keys, and ``max_sum_error``;
        - ``isan`` (ISAN models; else None): ``kappa`` ``[W, W, V]`` (``kappa[t, s]`` the
          contribution of window position ``s`` to the logits at ``t``), ``kappa_before``,
          ``logits``, ``b_ro``, the decay of ``E|kappa|`` with the lag, the cross-entropy by
          history length and by position in the word, unigram and bias statistics (the unigram
          and bigram counted on ``text``, or with ``distributions="train"`` on the training
          split of the corpus the checkpoint records, as the ISAN paper counts them:
          ``distributions_of``, ``distribution_tokens``), the ``word_embedding`` (the paper's
          figure 6);
        - ``pca``: the spectrum of the top layer's outputs (``eigenvalues``, ``fractions``,
          ``participation_ratio``);
        - ``unknown_share``: the share of the text that is ``<unk>`` (None at char and byte
          level)."""
        out = self._m.explain(_text("text", text), _ints("components", components), distributions)
        self._warn_unknown(out["unknown_share"])
        return out

    def sample(self, prime: str = "", length: int = 100, inverse_temperature: float = 1.0, seed: int = 1) -> str:
        """``rnnlens sample``: feed ``prime``, then draw ``length`` tokens with probabilities
        proportional to ``exp(inverse_temperature * logit)`` from a generator seeded with
        ``seed``. Returns the drawn text (without the prime; at word level it starts with a
        space when the prime does not end in one)."""
        if not isinstance(prime, str):
            raise TypeError(f"prime must be str, got {type(prime).__name__}")
        length = _int("length", length)
        return self._m.sample(prime, length, _number("inverse_temperature", inverse_temperature), _int("seed", seed))


def load(path: PathLike, precision: str = "f32", device: str = "cpu") -> Union["Model", "TaskModel"]:
    """Load a checkpoint directory (``config.json``, ``model.safetensors``, ``vocab.txt``; see
    docs/checkpoint.md), as written by ``rnnlens train`` or ``rnnlens.torch``'s
    ``to_checkpoint``, or by ``rnnlens task`` (then a :class:`TaskModel`). A missing or
    damaged directory raises :class:`RnnlensError`.

    ``precision="bf16"`` computes the model's matrix products in bf16 mixed precision (bf16
    operands, f32 accumulation; everything else f32), as ``--precision bf16`` does; it needs a
    CPU with AVX512-BF16 (else :class:`RnnlensError` says so). A checkpoint loads in either
    precision, whichever it was trained in. :func:`train` and :func:`task` take
    ``"precision"`` among their options.

    ``device="gpu"`` computes :meth:`Model.log_probs` and :meth:`Model.sample` on the GPU engine
    (``rnnlens eval --device gpu``; a package built with it: :func:`has_gpu`), in f32, or with
    ``precision="f16"`` its products' operands rounded to f16 (the GPU's mixed precision, as
    ``--precision f16``); the other methods, whose analyses read the cells' internals, compute
    on the CPU in f32."""
    if not isinstance(precision, str):
        raise TypeError(f"precision must be \"f32\", \"bf16\" or \"f16\", got {type(precision).__name__}")
    if not isinstance(device, str):
        raise TypeError(f"device must be \"cpu\" or \"gpu\", got {type(device).__name__}")
    if _rnnlens.is_task_checkpoint(os.fspath(path)):
        if (precision, device) != ("f32", "cpu"):
            raise RnnlensError("a task model (rnnlens task) is read in f32 on the CPU: leave out precision and device")
        return TaskModel(_rnnlens.load_task(os.fspath(path)))
    return Model(_rnnlens.load(os.fspath(path), precision, device))


class TaskModel:
    """A model trained by ``rnnlens task`` (what :func:`load` returns for its checkpoint):
    ``task``, ``cell``, ``length``, ``steps_run``, and

    - :meth:`evaluate`: the task's measure on fresh sequences of its generator (``rnnlens eval``);
    - :meth:`run`: the readout at every step of one sequence;
    - :meth:`explain`: ``rnnlens explain``'s analyses of one sequence.

    A sequence is ``example=SEED`` (the one the task's generator draws from that seed; the MNIST
    tasks: test image SEED of ``data``) or ``inputs="..."``: the task's symbols (copy and
    multicopy ``_12345678!``, parentheses ``()[]{}a``) or values (addition ``"0.3 0.7* 0.1
    0.5*"``, a ``*`` marking the two to add)."""

    def __init__(self, inner: Any) -> None:
        self._m = inner

    task = property(lambda self: self._m.task)
    cell = property(lambda self: self._m.cell)
    length = property(lambda self: self._m.length)
    steps_run = property(lambda self: self._m.steps_run)

    def evaluate(self, batches: int = 10, seed: Optional[int] = None, data: Optional[PathLike] = None) -> Dict[str, Any]:
        """``loss``, ``accuracy`` (None for addition), ``sequences`` and the data ``seed``: the
        task's measure over ``batches`` batches of 100 fresh sequences (default seed: the
        training seed + 2,000,000), or every test image of ``data`` for the MNIST tasks."""
        try:
            return self._m.evaluate(batches, seed, None if data is None else os.fspath(data))
        except RnnlensError as e:
            raise _in_python_words(e) from None

    def run(self, example: Optional[int] = None, inputs: Optional[str] = None, data: Optional[PathLike] = None) -> Dict[str, Any]:
        """``labels`` (each step's input), ``outputs`` ``[T, C]`` (the readout at every step),
        ``scored`` (the steps the task scores) and there ``loss`` and ``accuracy``."""
        try:
            return self._m.run(example, inputs, None if data is None else os.fspath(data))
        except RnnlensError as e:
            raise _in_python_words(e) from None

    def explain(self, example: Optional[int] = None, inputs: Optional[str] = None, components: Sequence[int] = (),
                data: Optional[PathLike] = None) -> Dict[str, Any]:
        """``rnnlens explain`` on one sequence: the keys of :meth:`Model.explain` that apply
        (``ran``, ``attention``, ``pca``, ``summary``, ``labels``, ``not_applicable``) and
        ``outputs``: ``(step, input, target, answer, right)`` for every scored step (the copy
        tasks' blank targets left out)."""
        try:
            return self._m.explain(example, inputs, _ints("components", components), None if data is None else os.fspath(data))
        except RnnlensError as e:
            raise _in_python_words(e) from None

    def __repr__(self) -> str:
        return repr(self._m)


def has_gpu() -> bool:
    """Whether this package was built with the GPU engine (``device="gpu"`` in :func:`load`)."""
    return _rnnlens.has_gpu()


def _settings_json(settings: Dict[str, Any]) -> str:
    """Settings as JSON, which has no NaN or infinity: one of those is a ValueError naming its
    key (``json.dumps`` would write a ``NaN`` the library then cannot read)."""
    for k, v in settings.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{k} must be a finite number, got {v}")
    return json.dumps(settings, allow_nan=False)


def train(
    config: Union[Dict[str, Any], PathLike, None] = None,
    *,
    resume: Optional[PathLike] = None,
    overwrite: bool = False,
    quiet: bool = False,
    callback: Optional[Callable[[Dict[str, Any]], Optional[bool]]] = None,
) -> str:
    """``rnnlens train``: train a language model and return its run directory.

    ``config`` is a dict with the keys of a TOML configuration (the ``train`` flags' names with
    ``_``: ``{"cell": "ran-tanh", "hidden_size": [256], "epochs": 1, "out": "runs/mine"}``;
    the others take the command line's defaults), or the path of such a TOML file. With
    ``resume=DIR`` the saved run continues; ``config`` may then change only what ``--resume``
    may change. ``overwrite`` replaces another run's checkpoint in ``out`` (else refused).

    ``callback(event)`` is called after every step (``{"kind": "step", "step", "epoch",
    "window", "windows", "loss", "lr"}``) and every validation (``{"kind": "valid", "step",
    "epoch", "nll"}``); returning ``False`` stops the run there, keeping its last checkpoint
    (resume it later with ``resume=``). Ctrl-C stops it the same way and raises
    :class:`KeyboardInterrupt`. An exception in the callback stops it and is raised.

    Runs are deterministic for a given seed and thread count (:func:`set_threads`)."""
    given: Optional[str] = None
    path: Optional[str] = None
    if isinstance(config, dict):
        given = _settings_json({k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in config.items()})
    elif config is not None:
        path = os.fspath(config)
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be True or False, got {type(overwrite).__name__}")
    try:
        out, _finished = _rnnlens.train(given, path, None if resume is None else os.fspath(resume), overwrite, bool(quiet), callback)
    except RnnlensError as e:
        raise _in_python_words(e) from None
    return out


def task(
    name: Optional[str] = None,
    *,
    quiet: bool = False,
    callback: Optional[Callable[[Dict[str, Any]], Optional[bool]]] = None,
    **options: Any,
) -> Tuple[str, List[Dict[str, Any]]]:
    """``rnnlens task NAME``: train cells on a sequence task of the RDA and ISAN papers
    (``addition``, ``classify-length``, ``seq-mnist``, ``permuted-seq-mnist``, ``copy``,
    ``multicopy``, ``parentheses``) and report the paper's measure.

    ``options`` are the flags' names with ``_``: ``cell="gru"`` or ``compare=["gru", "rwa"]``,
    ``hidden_size``, ``batch_size``, ``steps``, ``length``, ``learn_initial_state``, ``lr``,
    ``seed``, ``data`` (the MNIST tasks' IDX directory), ``test_images``, ``out``, ``device``
    (``"cpu"``, or ``"gpu"`` in a package built with the GPU engine), ``save_every``,
    ``overwrite`` (start again in an ``out`` that holds an earlier run). Each trained model is
    saved in ``out/CELL`` as with the command line, and every ``save_every`` steps while it
    trains: ``task(resume=out)`` (no name) continues a run that was stopped or killed from
    those saves, with the same result as an uninterrupted run.

    Returns the table the command line prints and, per cell, a dict: ``cell``,
    ``steps_to_threshold``, ``test_accuracy``, ``seconds``, ``checkpoint`` and the learning
    curve as arrays ``step``, ``loss``, ``accuracy`` (NaN where not measured).
    ``callback({"cell", "step", "loss", "accuracy"})`` hears every step; returning ``False``
    or Ctrl-C stops as :func:`train` does."""
    opts = dict(options)
    if name is None and options.get("resume") is None:
        raise TypeError("task() needs the task's name, or resume=DIR to continue a saved run")
    opts["name"] = name or ""
    runtime = {k: opts.pop(k) for k in ("threads", "precision") if k in opts}
    if runtime:
        opts["runtime"] = runtime
    opts = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in opts.items()}
    try:
        return _rnnlens.task(_settings_json(opts), bool(quiet), callback)
    except RnnlensError as e:
        raise _in_python_words(e) from None
