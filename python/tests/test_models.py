"""Every cell's checkpoint read three ways: the command line, rnnlens.load and rnnlens.torch."""

import json
from pathlib import Path
import subprocess

import numpy as np
import pytest

import rnnlens
from conftest import TEXT, VARIANTS, cli

torch = pytest.importorskip("torch", reason="rnnlens.torch needs PyTorch (pip install './python[torch]')")
from rnnlens.torch import LanguageModel  # noqa: E402


def per_token(checkpoint, text_file, tmp_path):
    out = tmp_path / "per_token.txt"
    cli("eval", "--checkpoint", str(checkpoint), "--input", str(text_file), "--per-token", str(out))
    return np.array([float(l.split("\t")[0]) for l in out.read_text().splitlines()])  # ln p, a tab, the token


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_cli_load_and_torch_give_the_same_log_probs(name, checkpoints, text_file, tmp_path):
    want = per_token(checkpoints[name], text_file, tmp_path)
    m = rnnlens.load(checkpoints[name])
    got = m.log_probs(TEXT)
    # The library's own numbers: the same bits as the command line.
    assert np.array_equal(got, want), np.abs(got - want).max()
    # Both engines: the fused kernels (the default) and the plain loops (PyTorch sums in another
    # order: float32 rounding).
    for engine in ("rnnlens", "torch"):
        lm = LanguageModel.from_checkpoint(checkpoints[name], engine=engine)
        t = lm.log_probs(m.encode(TEXT)).numpy()
        assert t.shape == want.shape
        assert np.abs(t - want).max() < 1e-5 * max(1.0, np.abs(want).max()), (engine, np.abs(t - want).max())


def test_a_ran_fine_tuned_in_pytorch_is_read_back_by_rnnlens(checkpoints, text_file, tmp_path):
    lm = LanguageModel.from_checkpoint(checkpoints["ran-2"])
    m = rnnlens.load(checkpoints["ran-2"])
    before = per_token(checkpoints["ran-2"], text_file, tmp_path)
    ids = torch.as_tensor(m.encode(TEXT * 4), dtype=torch.long)
    opt = torch.optim.Adam(lm.parameters(), lr=0.01)
    for step in range(5):
        x, y = ids[step * 5:step * 5 + 10].view(10, 1), ids[step * 5 + 1:step * 5 + 11]
        logits, _ = lm(x)
        loss = torch.nn.functional.cross_entropy(logits[:, 0], y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = Path(lm.to_checkpoint(tmp_path / "finetuned"))
    after = per_token(out, text_file, tmp_path)
    assert np.abs(after - before).max() > 1e-3, "the fine-tuning changed the model"
    # Both read it streaming, with or without the training state.
    assert lm.reset_every is None
    t = lm.log_probs(m.encode(TEXT)).numpy()
    assert np.abs(t - after).max() < 1e-5 * max(1.0, np.abs(after).max())
    assert np.array_equal(rnnlens.load(out).log_probs(TEXT), after)
    # The vocabulary and the configuration come back as they were.
    assert rnnlens.load(out).vocab == m.vocab
    assert json.loads(open(out / "config.json").read())["layers"] == m.config["layers"]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        lm.to_checkpoint(out)
    lm.to_checkpoint(out, overwrite=True)


def test_a_byte_level_vocabulary_round_trips_through_to_checkpoint(checkpoints, tmp_path):
    lm = LanguageModel.from_checkpoint(checkpoints["byte-gru"])
    out = Path(lm.to_checkpoint(tmp_path / "bytes"))
    assert (out / "vocab.txt").read_bytes() == (checkpoints["byte-gru"] / "vocab.txt").read_bytes()


def test_torch_rnn_gives_the_torch_module_of_a_baseline_layer(checkpoints, text_file, tmp_path):
    from safetensors.torch import load_file
    from rnnlens.torch import torch_rnn

    d = checkpoints["lstm-proj"]
    config = json.loads((d / "config.json").read_text())
    tensors = {k[len("rnn.0."):]: v for k, v in load_file(str(d / "model.safetensors")).items() if k.startswith("rnn.0.")}
    lstm = torch_rnn(config["layers"][0], tensors)
    assert isinstance(lstm, torch.nn.LSTM) and lstm.proj_size == 5
    assert torch.equal(lstm.weight_hr_l0, tensors["W_proj"])
    with pytest.raises(ValueError, match="PaperGRU"):
        torch_rnn(json.loads((checkpoints["gru-paper"] / "config.json").read_text())["layers"][0])


def test_states_follow_the_cells_equations_and_are_not_copied(checkpoints):
    m = rnnlens.load(checkpoints["ran-tanh-c"])
    st = m.states(TEXT)
    assert len(st) == 1
    s = st[0]
    n = len(m.encode(TEXT))
    for k in ("output", "c", "i", "f", "content", "h"):
        assert s[k].shape == (n, 12) and s[k].dtype == np.float32
    prev = np.vstack([np.zeros((1, 12), np.float32), s["c"][:-1]])
    np.testing.assert_allclose(s["c"], s["i"] * s["content"] + s["f"] * prev, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s["output"], np.tanh(s["c"]), rtol=1e-5, atol=1e-6)
    # Views of the library's buffer, not second copies.
    assert not s["c"].flags["OWNDATA"] and s["c"].base is not None
    two = rnnlens.load(checkpoints["lstm-2"]).states(TEXT)
    assert [l["output"].shape[1] for l in two] == [12, 7] and set(two[0]) == {"output", "h", "c", "i", "f", "g", "o"}
    assert two[1]["h"] is two[1]["output"]


@pytest.mark.parametrize("name,cls", [("ran-proj", "RAN"), ("isan", "ISAN"), ("linear-tanh", "LinearRNN"), ("rwa", "RWA"),
                                      ("rda-relu", "RDA"), ("lstm-simple-content", "LSTMSimpleContent"),
                                      ("lstm-no-output-gate", "LSTMNoOutputGate"), ("gru-paper", "PaperGRU")])
def test_each_cell_reads_and_writes_its_own_layer(name, cls, checkpoints, text_file, tmp_path):
    import shutil
    import rnnlens.torch as rt

    cell = getattr(rt, cls).from_checkpoint(checkpoints[name])
    with torch.no_grad():
        for p in cell.parameters():
            p.mul_(1.05)
    copy = tmp_path / name
    shutil.copytree(checkpoints[name], copy)
    cell.to_checkpoint(copy)
    assert not (copy / "trainer.json").exists(), "the stale training state goes with the old weights"
    want = per_token(copy, text_file, tmp_path)
    lm = LanguageModel.from_checkpoint(copy)
    assert lm.reset_every is None
    got = lm.log_probs(rnnlens.load(copy).encode(TEXT)).numpy()
    assert np.abs(got - want).max() < 1e-5 * max(1.0, np.abs(want).max())
    assert np.abs(want - per_token(checkpoints[name], text_file, tmp_path)).max() > 1e-4
    other = "ISAN" if cls != "ISAN" else "RAN"
    with pytest.raises(ValueError, match="not a"):
        getattr(rt, other).from_checkpoint(checkpoints[name])


def test_torch_verifies_the_manifest_as_load_does(checkpoints, tmp_path):
    import shutil
    d = tmp_path / "flipped"
    shutil.copytree(checkpoints["lstm-2"], d)
    data = bytearray((d / "model.safetensors").read_bytes())
    for i in range(len(data) - 64, len(data)):
        data[i] ^= 0xFF  # 64 bytes of the last tensor: still a valid safetensors file
    (d / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(rnnlens.RnnlensError) as by_load:
        rnnlens.load(d)
    with pytest.raises(rnnlens.RnnlensError) as by_torch:
        LanguageModel.from_checkpoint(d)
    assert "does not match the manifest" in str(by_torch.value)
    assert str(by_torch.value) == str(by_load.value)
    # A model copied without its training state loads in both.
    c = tmp_path / "copied"
    c.mkdir()
    for f in ("config.json", "model.safetensors", "vocab.txt", "manifest.json"):
        shutil.copy(Path(checkpoints["lstm-2"]) / f, c / f)
    LanguageModel.from_checkpoint(c)
    rnnlens.load(c)


def independent_ran_log_probs(path, text):
    """ln p of every character of ``text`` after the first from ``config.json``,
    ``model.safetensors`` and ``vocab.txt`` alone, following docs/checkpoint.md with numpy (none
    of rnnlens's code): a one-layer char-level RAN, the state carried from zeros."""
    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    raw = (path / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    t = {}
    for name, d in header.items():
        if name != "__metadata__":
            a, b = d["data_offsets"]
            t[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").astype(np.float64).reshape(d["shape"])
    lines = (path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    escapes = {"\\\\": "\\", "\\n": "\n", "\\r": "\r", "\\t": "\t"}
    ids = {escapes.get(tok, tok): i for i, tok in enumerate(lines)}
    layer = config["layers"][0]
    assert len(config["layers"]) == 1 and layer["cell"] == "ran" and config["tokenizer"]["level"] == "char"
    g = np.tanh if layer["options"]["output"] == "tanh" else (lambda v: v)
    read_h = layer["options"].get("gates", "c") == "h"
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    p = lambda k: t["rnn.0." + k]  # noqa: E731
    c = np.zeros(layer["hidden_size"])
    xs = [ids[ch] for ch in text]
    out = []
    for k in range(len(xs) - 1):
        x = t["embedding.weight"][xs[k]]
        r = g(c) if read_h else c
        i = sig(p("W_ix") @ x + p("W_ic") @ r + p("b_i"))
        f = sig(p("W_fx") @ x + p("W_fc") @ r + p("b_f"))
        # no b_c in a RAN without its content bias (options' content_bias false)
        c = i * (p("W_cx") @ x + (p("b_c") if layer["options"].get("content_bias", True) else 0)) + f * c
        logits = t["decoder.weight"] @ g(c) + t["decoder.bias"]
        m = logits.max()
        out.append(logits[xs[k + 1]] - m - np.log(np.exp(logits - m).sum()))
    return np.array(out)


@pytest.mark.parametrize("name", ["ran-tanh", "ran-tanh-carried", "ran-tanh-c", "ran-identity", "ran-tanh-nocb"])
def test_an_independent_reader_and_a_torch_round_trip_give_evals_numbers(name, checkpoints, text_file, tmp_path):
    # trained with the state reset every window (ran-tanh, ran-identity) or carried: eval's
    # streaming numbers are the contract's either way
    want = per_token(checkpoints[name], text_file, tmp_path)
    assert np.abs(independent_ran_log_probs(checkpoints[name], TEXT) - want).max() < 1e-4
    out = Path(LanguageModel.from_checkpoint(checkpoints[name]).to_checkpoint(tmp_path / "copy"))
    after = per_token(out, text_file, tmp_path)
    assert np.array_equal(after, want), np.abs(after - want).max()
    assert np.abs(independent_ran_log_probs(out, TEXT) - want).max() < 1e-4
