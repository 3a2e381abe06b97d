"""Fixtures of the Python package's tests: the rnnlens binary the command line builds
(`cargo build --release`; RNNLENS_BIN names another), a small corpus, and checkpoints of every
cell trained for a few steps by that binary."""

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("RNNLENS_BIN", os.path.join(ROOT, "target", "release", "rnnlens"))

# Every cell and option whose checkpoint the modules must read: name -> train flags.
VARIANTS = {
    "lstm": ["--cell", "lstm", "--level", "char"],
    "lstm-proj": ["--cell", "lstm", "--level", "char", "--projection-size", "5"],
    "lstm-2": ["--cell", "lstm", "--level", "word", "--hidden-size", "12,7"],
    "lstm-learned": ["--cell", "lstm", "--level", "char", "--learn-initial-state"],
    "gru": ["--cell", "gru", "--level", "char"],
    "gru-paper": ["--cell", "gru", "--level", "char", "--gru-reset-after", "false"],
    "rnn": ["--cell", "rnn", "--level", "char"],
    "irnn": ["--cell", "irnn", "--level", "char", "--optimizer", "sgd", "--lr", "0.01"],
    "ran-tanh": ["--cell", "ran-tanh", "--level", "char"],
    "ran-tanh-c": ["--cell", "ran-tanh", "--level", "char", "--ran-gates", "c", "--carry-state", "true"],
    "ran-tanh-carried": ["--cell", "ran-tanh", "--level", "char", "--carry-state", "true"],
    "ran-tanh-nocb": ["--cell", "ran-tanh", "--level", "char", "--ran-content-bias", "false"],
    "ran-identity": ["--cell", "ran-identity", "--level", "char"],
    "ran-proj": ["--cell", "ran-tanh", "--level", "char", "--projection-size", "5"],
    "ran-2": ["--cell", "ran-tanh", "--level", "word", "--hidden-size", "12,9", "--learn-initial-state"],
    "isan": ["--cell", "isan", "--level", "char"],
    "isan-nobias": ["--cell", "isan-nobias", "--level", "char"],
    "linear": ["--cell", "linear", "--level", "char", "--optimizer", "sgd", "--lr", "0.1", "--init", "uniform", "--init-scale", "0.05"],
    "linear-tanh": ["--cell", "linear-tanh", "--level", "char", "--optimizer", "sgd", "--lr", "0.1", "--init", "uniform", "--init-scale", "0.05"],
    "rwa": ["--cell", "rwa", "--level", "char"],
    "rda": ["--cell", "rda", "--level", "char"],
    "rda-sigmoid-id": ["--cell", "rda-sigmoid-id", "--level", "char"],
    "rda-relu": ["--cell", "rda", "--level", "char", "--rda-attention", "relu", "--rda-hidden-fn", "tanh", "--rda-output-fn", "identity"],
    "rda-softplus": ["--cell", "rda", "--level", "char", "--rda-attention", "softplus"],
    "lstm-simple-content": ["--cell", "lstm-simple-content", "--level", "char"],
    "lstm-no-output-gate": ["--cell", "lstm-no-output-gate", "--level", "word"],
    "byte-gru": ["--cell", "gru", "--level", "byte"],
}

TEXT = "the dog ran to the big red house.\nthe cat sat on a mat and the dog ran to the house\n"


def cli(*args: str) -> str:
    """Run the rnnlens binary; its stdout (a failure shows its stderr)."""
    r = subprocess.run([BIN, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"rnnlens {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    if not os.path.exists(BIN):
        pytest.skip(f"the rnnlens binary is not built ({BIN}): run cargo build --release first")
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red", "house", "é"]
    lines, x = [], 7
    for line in range(600):
        ws = []
        for i in range(5 + line % 7):
            x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
            ws.append(words[(x >> 33) % 4] if i % 2 == 0 else words[4 + (x >> 33) % 10])
        lines.append(" ".join(ws) + " .")
    p = tmp_path_factory.mktemp("data") / "corpus.txt"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


@pytest.fixture(scope="session")
def checkpoints(corpus, tmp_path_factory):
    """name -> checkpoint directory, every variant trained 20 steps."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for name, flags in VARIANTS.items():
        d = root / name
        size = [] if "--hidden-size" in flags else ["--hidden-size", "12"]
        cli("train", "--data", str(corpus), *size, "--embedding-size", "8", "--batch-size", "4", "--bptt", "10",
            "--max-steps", "20", "--epochs", "1", "--sample-length", "0", "--threads", "2", "--quiet", "--dropout", "0",
            "--out", str(d), *flags)
        out[name] = d
    return out


@pytest.fixture(scope="session")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("text") / "text.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p
