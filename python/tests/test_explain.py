"""Model.explain's arrays are the numbers `rnnlens explain --report` writes."""

import csv
import json

import numpy as np
import pytest

import rnnlens
from conftest import cli

TEXT = "the cat sat on the mat and the dog ran"


def matrix_csv(path):
    rows = list(csv.reader(open(path)))[1:]
    return np.array([[float(x) for x in r[1:]] for r in rows], dtype=np.float32)


@pytest.mark.parametrize("name,prefix", [("ran-tanh", "ran"), ("ran-2", "ran"), ("rda", "attention"), ("rwa", "attention")])
def test_weights_arrows_and_pca_equal_the_report(name, prefix, checkpoints, tmp_path):
    rep = tmp_path / "report"
    cli("explain", "--checkpoint", str(checkpoints[name]), "--text", TEXT, "--components", "1,3", "--report", str(rep))
    ex = rnnlens.load(checkpoints[name]).explain(TEXT, components=[1, 3])
    assert ex["summary"] == (rep / "summary.txt").read_text()
    assert list(ex["tokens"]) == json.loads((rep / "tokens.json").read_text())["ids"]
    layers = ex[prefix]
    assert layers, f"{name} has {prefix} layers"
    for layer in layers:
        l = layer["layer"]
        assert np.array_equal(layer["weights"], matrix_csv(rep / f"{prefix}_layer{l}_weights.csv"))
        for unit in (1, 3):
            assert np.array_equal(layer["components"][unit], matrix_csv(rep / f"{prefix}_layer{l}_unit{unit}.csv"))
        doc = json.loads((rep / f"{prefix}_layer{l}_arrows.json").read_text())
        assert list(layer["arrows"]) == [a["v"] for a in doc["arrows"]]
        assert list(layer["predecessors"]) == [-1 if a["predecessor"] is None else a["predecessor"] for a in doc["arrows"]]
        assert list(layer["initial_state_weight"]) == [a["initial_state_weight"] for a in doc["arrows"]]
        assert layer["reconstruction_relative_error"] == doc["reconstruction_relative_error"]
    spectrum = np.loadtxt(rep / "pca_spectrum.csv", delimiter=",", skiprows=1, ndmin=2)
    assert np.array_equal(ex["pca"]["eigenvalues"], spectrum[:, 1])
    assert np.array_equal(ex["pca"]["fractions"], spectrum[:, 2])
    other = "attention" if prefix == "ran" else "ran"
    assert ex[other] is None and ex["isan"] is None


def test_the_isan_statistics_count_on_the_training_split_as_the_command_line_does(checkpoints, tmp_path):
    rep = tmp_path / "report"
    cli("explain", "--checkpoint", str(checkpoints["isan"]), "--text", TEXT, "--report", str(rep), "--distributions", "train")
    m = rnnlens.load(checkpoints["isan"])
    ex = m.explain(TEXT, distributions="train")
    assert ex["summary"] == (rep / "summary.txt").read_text()
    summary = json.loads((rep / "isan_summary.json").read_text())
    i = ex["isan"]
    assert i["distributions_of"] == summary["distributions_of"] == "the training split"
    assert i["distribution_tokens"] == summary["distribution_tokens"] > len(ex["tokens"])
    own = m.explain(TEXT)["isan"]
    assert own["distributions_of"] == "the explained text" and own["distribution_tokens"] == len(ex["tokens"])
    assert np.array_equal(own["kappa"], i["kappa"])
    with pytest.raises(ValueError, match="distributions must be"):
        m.explain(TEXT, distributions="valid")
    with pytest.raises(rnnlens.RnnlensError, match="an ISAN's symbol statistics"):
        rnnlens.load(checkpoints["ran-tanh"]).explain(TEXT, distributions="train")


def test_the_isan_contributions_equal_the_report(checkpoints, tmp_path):
    rep = tmp_path / "report"
    cli("explain", "--checkpoint", str(checkpoints["isan"]), "--text", TEXT, "--report", str(rep))
    ex = rnnlens.load(checkpoints["isan"]).explain(TEXT)
    assert ex["summary"] == (rep / "summary.txt").read_text()
    i = ex["isan"]
    rows = list(csv.reader(open(rep / "isan_kappa_last.csv")))[1:]
    k = np.array([[float(x) for x in r[2:]] for r in rows])
    w = len(i["window"])
    assert np.array_equal(k[0], i["b_ro"]) and np.array_equal(k[1], i["kappa_before"][-1])
    assert np.array_equal(k[2:2 + w], i["kappa"][-1]) and np.array_equal(k[-1], i["logits"][-1])
    # The contributions sum to the logits (the paper's identity), at every position.
    total = i["b_ro"] + i["kappa_before"] + i["kappa"].sum(axis=1)
    np.testing.assert_allclose(total, i["logits"], rtol=1e-9, atol=1e-9)
    decay = np.loadtxt(rep / "isan_decay.csv", delimiter=",", skiprows=1, ndmin=2)
    assert np.array_equal(i["decay_lag"], decay[:, 0]) and np.array_equal(i["decay_mean_norm"], decay[:, 1])
    ce = list(csv.reader(open(rep / "isan_history_ce.csv")))[1:]
    assert list(i["history_ce"]) == [float(r[1]) for r in ce if r[0] != "all"]
    assert i["full_ce"] == float(ce[-1][1])
    assert ex["ran"] is None and ex["attention"] is None
