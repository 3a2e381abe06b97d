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
import os
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _rnnlens
from ._rnnlens import RnnlensError

__all__ = ["Model", "RnnlensError", "load", "set_threads"]
__version__ = "0.1.0"

PathLike = Union[str, "os.PathLike[str]"]
Text = Union[str, bytes]


def set_threads(n: int) -> int:
    """Use ``n`` worker threads for everything rnnlens computes in this process.

    Results are identical for a given count (as on the command line's ``--threads``). The pool
    is started once, by the first computation: call this before anything else. Without it the
    pool has one thread per core. Returns the size in force."""
    return _rnnlens.set_threads(int(n))


class Model:
    """A trained model: its network, parameters and tokenizer, as a checkpoint holds them.

    Made by :func:`load`. Attributes: ``config`` (``config.json`` as a dict), ``trainer``
    (``trainer.json`` as a dict, or None for a checkpoint written without training state),
    ``vocab`` (the tokens, indexed by id), ``level`` (``"word"``, ``"char"`` or ``"byte"``),
    ``path``."""

    def __init__(self, inner: "_rnnlens.Model"):
        self._m = inner
        self.config: Dict[str, Any] = json.loads(inner.config_json)
        t = inner.trainer_json
        self.trainer: Optional[Dict[str, Any]] = None if t is None else json.loads(t)
        self.vocab: List[str] = inner.vocab
        self.level: str = inner.level
        self.path: str = str(inner.path)

    def __repr__(self) -> str:
        return repr(self._m)

    def encode(self, text: Text) -> np.ndarray:
        """Token ids of ``text`` (uint32), as the model's tokenizer reads a file: at word level
        every line ends with ``<eos>`` and unknown words are ``<unk>``; at char level a
        character outside the vocabulary is an error naming it."""
        return self._m.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (word level: joined by spaces, ``<eos>`` as a line break)."""
        return self._m.decode([int(i) for i in ids])

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """The bytes of token ids (for byte-level models, whose tokens need not be UTF-8)."""
        return bytes(self._m.decode_bytes([int(i) for i in ids]))

    def log_probs(self, text: Text) -> np.ndarray:
        """Natural-log probability of every token of ``text`` after the first, given all the
        tokens before it (float64, one per scored token): the exact streaming evaluation of
        ``rnnlens eval --input FILE --per-token OUT``, the same numbers. A model trained with
        its state reset every window is scored the same way, as ``eval`` does.

        Perplexity is ``exp(-mean)``; bits per character ``-mean / ln 2``."""
        return self._m.log_probs(text)

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

        The arrays hold the library's buffers (no copy)."""
        return [dict(layer) for layer in self._m.states(text)]

    def sample(self, prime: str = "", length: int = 100, inverse_temperature: float = 1.0, seed: int = 1) -> str:
        """``rnnlens sample``: feed ``prime``, then draw ``length`` tokens with probabilities
        proportional to ``exp(inverse_temperature * logit)`` from a generator seeded with
        ``seed``. Returns the drawn text (without the prime; at word level it starts with a
        space when the prime does not end in one)."""
        if length < 0:
            raise ValueError(f"length must be positive, got {length}")
        return self._m.sample(prime, int(length), float(inverse_temperature), int(seed))


def load(path: PathLike) -> Model:
    """Load a checkpoint directory (``config.json``, ``model.safetensors``, ``vocab.txt``; see
    docs/checkpoint.md), as written by ``rnnlens train`` or ``rnnlens.torch``'s
    ``to_checkpoint``. A missing or damaged directory raises :class:`RnnlensError`."""
    return Model(_rnnlens.load(os.fspath(path)))
