"""The rest of the API: encoding, sampling, training and tasks from Python, and clear errors."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rnnlens
from conftest import BIN, TEXT, cli


def test_encode_decode_and_sample_match_the_command_line(checkpoints):
    m = rnnlens.load(checkpoints["lstm-2"])
    ids = m.encode("the cat sat")
    assert ids.dtype == np.uint32 and m.decode(ids).startswith("the cat sat")
    assert m.level == "word" and m.vocab[0] == "<eos>" and m.config["layers"][1]["hidden_size"] == 7
    assert m.trainer["config"]["max_steps"] == 20
    want = cli("sample", "--checkpoint", str(checkpoints["lstm-2"]), "--prime", "the cat", "--length", "12", "--seed", "5")
    assert "the cat" + m.sample("the cat", length=12, seed=5) == want.rstrip("\n")
    assert repr(m).startswith("rnnlens.Model(")


def test_bad_input_raises_with_the_command_lines_message(checkpoints, tmp_path):
    with pytest.raises(rnnlens.RnnlensError, match="does not exist"):
        rnnlens.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(rnnlens.RnnlensError, match="not a complete checkpoint"):
        rnnlens.load(tmp_path / "empty")
    m = rnnlens.load(checkpoints["gru"])
    with pytest.raises(rnnlens.RnnlensError, match="'#' .* is not in the char-level vocabulary"):
        m.log_probs("ab#")  # a character outside the vocabulary
    with pytest.raises(ValueError, match="at least 2"):
        m.log_probs("t")
    with pytest.raises(rnnlens.RnnlensError, match="outside the vocabulary"):
        m.decode([10**6])
    with pytest.raises(rnnlens.RnnlensError, match="length 0"):
        m.sample(length=0)
    with pytest.raises(rnnlens.RnnlensError, match="inverse temperature"):
        m.sample(length=3, inverse_temperature=-1.0)
    with pytest.raises(rnnlens.RnnlensError, match="needs about .* GiB"):
        m.sample(length=10**12)  # an estimate, not an abort of the interpreter
    with pytest.raises(rnnlens.RnnlensError, match="at most 2000"):
        m.explain("a " * 1500)
    with pytest.raises(rnnlens.RnnlensError, match="unknown setting 'hidden_sise'; the settings are: .*hidden_size"):
        rnnlens.train({"hidden_sise": 3})
    # a value of the wrong kind names its setting and what it takes (it was serde's "data did
    # not match any variant of untagged enum OneOrMany")
    with pytest.raises(rnnlens.RnnlensError, match=r"setting 'hidden_size' = \[-1\]: expected a positive whole number or a list of them \(e.g. 256, or \[650, 650\]\), got \[-1\]"):
        rnnlens.train({"hidden_size": [-1]})
    with pytest.raises(rnnlens.RnnlensError, match="setting 'batch_size' = \"8\": invalid type"):
        rnnlens.train({"batch_size": "8"})
    with pytest.raises(rnnlens.RnnlensError, match="unknown task"):
        rnnlens.task("nonsense")
    with pytest.raises(ValueError, match="lr must be a finite number, got nan"):
        rnnlens.train({"lr": float("nan")})
    with pytest.raises(ValueError, match="lr must be a finite number, got inf"):
        rnnlens.task("addition", lr=float("inf"))
    with pytest.raises(rnnlens.RnnlensError, match="needs about .* GiB"):
        rnnlens.task("copy", length=10**9, steps=1, out=tmp_path / "big")  # an estimate, not an abort of the interpreter
    assert not (tmp_path / "big").exists()  # a refused run leaves nothing to be refused for next time
    with pytest.raises(TypeError):
        m.log_probs(42)


def config(corpus, out, **more):
    c = {"data": str(corpus), "level": "char", "cell": "gru", "hidden_size": [8], "embedding_size": 4, "batch_size": 8,
         "bptt": 10, "epochs": 2, "out": str(out), "sample_length": 0, "threads": 2}
    c.update(more)
    return c


def test_train_from_python_is_the_command_lines_run(corpus, tmp_path):
    ours = rnnlens.train(config(corpus, tmp_path / "py", max_steps=30), quiet=True)
    cli("train", "--data", str(corpus), "--level", "char", "--cell", "gru", "--hidden-size", "8", "--embedding-size", "4",
        "--batch-size", "8", "--bptt", "10", "--epochs", "2", "--max-steps", "30", "--sample-length", "0", "--threads", "2",
        "--quiet", "--out", str(tmp_path / "cli"))
    assert (tmp_path / "py" / "model.safetensors").read_bytes() == (tmp_path / "cli" / "model.safetensors").read_bytes()
    assert ours == str(tmp_path / "py")


def test_a_callback_sees_the_steps_and_can_stop_and_resume(corpus, tmp_path):
    seen = []

    def stop_after_first_epoch(e):
        seen.append(e)
        return e["kind"] != "valid"

    out = rnnlens.train(config(corpus, tmp_path / "run"), quiet=True, callback=stop_after_first_epoch)
    steps = [e["step"] for e in seen if e["kind"] == "step"]
    assert steps == list(range(1, len(steps) + 1)) and seen[-1]["kind"] == "valid" and seen[-1]["epoch"] == 1
    assert rnnlens.load(out).trainer["epoch"] == 1
    rnnlens.train(resume=out, quiet=True)
    assert rnnlens.load(out).trainer["epoch"] == 2
    # The same as a run never stopped.
    whole = rnnlens.train(config(corpus, tmp_path / "whole"), quiet=True)
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == (tmp_path / "whole" / "model.safetensors").read_bytes()
    with pytest.raises(ZeroDivisionError):
        rnnlens.train(config(corpus, tmp_path / "raises"), quiet=True, callback=lambda e: 1 / 0)


# A child started from a shell's background job inherits SIGINT ignored, and Python then
# installs no KeyboardInterrupt handler: the children restore it, as an interactive Python has
# it, so that these tests do not depend on how the suite was launched.
RESTORE_SIGINT = "signal.signal(signal.SIGINT, signal.default_int_handler)"


def test_ctrl_c_stops_training_cleanly_and_keeps_the_last_checkpoint(corpus, tmp_path):
    out = tmp_path / "interrupted"
    script = textwrap.dedent(f"""
        import signal, sys, rnnlens
        {RESTORE_SIGINT}
        def cb(e):
            if e["kind"] == "valid":
                print("epoch", e["epoch"], flush=True)
        try:
            rnnlens.train({config(corpus, out, epochs=50, hidden_size=[64])!r}, quiet=True, callback=cb)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "epoch 1"
    p.send_signal(signal.SIGINT)
    rest = p.stdout.read()
    assert p.wait(timeout=60) == 3 and "interrupted" in rest
    m = rnnlens.load(out)
    assert m.trainer["epoch"] >= 1
    cli("eval", "--checkpoint", str(out), "--split", "valid")


def test_a_task_from_python_is_the_command_lines(tmp_path):
    if not os.path.exists(BIN):
        pytest.skip("the rnnlens binary is not built")
    table, results = rnnlens.task("addition", compare=["ran-tanh", "lstm"], length=20, steps=30, hidden_size=8, batch_size=10,
                                  out=tmp_path / "py", quiet=True, threads=2)
    want = cli("task", "addition", "--compare", "ran-tanh,lstm", "--length", "20", "--steps", "30", "--hidden-size", "8",
               "--batch-size", "10", "--out", str(tmp_path / "cli"), "--threads", "2")
    strip = lambda t: [l.rsplit(None, 1)[0] for l in t.strip().splitlines()]  # the seconds column aside
    assert strip(table) == strip(want)
    assert [r["cell"] for r in results] == ["ran-tanh", "lstm"] and len(results[0]["loss"]) == 30
    assert (tmp_path / "py" / "lstm" / "model.safetensors").read_bytes() == (tmp_path / "cli" / "lstm" / "model.safetensors").read_bytes()
    # Stopped by its callback at step 17 (its last save at step 10), then resumed: the same model.
    kw = dict(cell="lstm", length=20, steps=30, hidden_size=8, batch_size=10, quiet=True, threads=2, save_every=10)
    rnnlens.task("addition", out=tmp_path / "stopped", callback=lambda p: p["step"] < 17, **kw)
    with pytest.raises(rnnlens.RnnlensError, match="holds a task run"):
        rnnlens.task("addition", out=tmp_path / "stopped", **kw)
    with pytest.raises(TypeError, match="resume=DIR"):
        rnnlens.task()
    _, resumed = rnnlens.task(resume=tmp_path / "stopped", quiet=True)
    assert resumed[0]["checkpoint"] == str(tmp_path / "stopped" / "lstm") and len(resumed[0]["loss"]) == 30
    assert (tmp_path / "stopped" / "lstm" / "model.safetensors").read_bytes() == (tmp_path / "cli" / "lstm" / "model.safetensors").read_bytes()
    # A setting resume cannot change is refused, naming it; the step cap may grow.
    with pytest.raises(rnnlens.RnnlensError, match=r'cannot change "hidden_size" \(saved: 8\)'):
        rnnlens.task(resume=tmp_path / "stopped", hidden_size=64, quiet=True)
    _, longer = rnnlens.task(resume=tmp_path / "stopped", steps=40, quiet=True)
    assert len(longer[0]["loss"]) == 40 and list(longer[0]["loss"][:30]) == list(resumed[0]["loss"])


def test_a_task_model_loads_evaluates_and_explains_as_the_command_line_does(tmp_path):
    if not os.path.exists(BIN):
        pytest.skip("the rnnlens binary is not built")
    cli("task", "multicopy", "--cell", "rda-exp-tanh", "--length", "40", "--hidden-size", "8", "--batch-size", "8",
        "--steps", "20", "--threads", "2", "--out", str(tmp_path / "t"))
    ckpt = tmp_path / "t" / "rda-exp-tanh"
    m = rnnlens.load(ckpt)
    assert isinstance(m, rnnlens.TaskModel) and (m.task, m.cell, m.length, m.steps_run) == ("multicopy", "rda-exp-tanh", 40, 20)
    e = m.evaluate(batches=3, seed=7)
    line = cli("eval", "--checkpoint", str(ckpt), "--batches", "3", "--seed", "7")
    assert f"loss {e['loss']:.6f}, accuracy {e['accuracy']:.4f} over 300 fresh sequences" in line, (e, line)
    r = m.run(example=3)
    assert r["outputs"].shape == (40, 10) and len(r["labels"]) == 40 and len(r["scored"]) == 40
    ex = m.explain(example=3)
    w = ex["attention"][0]["weights"]
    assert w.shape == (40, 40) and np.all(np.triu(w, 1) == 0)
    assert ex["summary"] == cli("explain", "--checkpoint", str(ckpt), "--example", "3")
    assert m.explain(inputs="12345678_!__________")["labels"][9] == "!"
    with pytest.raises(rnnlens.RnnlensError, match="not a symbol of the multicopy task"):
        m.run(inputs="12x")
    with pytest.raises(rnnlens.RnnlensError, match="read in f32 on the CPU"):
        rnnlens.load(ckpt, precision="bf16")


def bf16_here():
    with open("/proc/cpuinfo") as f:
        return "avx512_bf16" in f.read()


def test_precision_is_a_choice_of_load_train_and_task(checkpoints, corpus, tmp_path):
    with pytest.raises(rnnlens.RnnlensError, match='unknown precision "f8"'):
        rnnlens.load(checkpoints["lstm-2"], precision="f8")
    # f16 is the GPU engine's mixed precision, bf16 the CPU's
    with pytest.raises(rnnlens.RnnlensError, match="f16 is the GPU engine's"):
        rnnlens.load(checkpoints["lstm-2"], precision="f16")
    with pytest.raises(TypeError):
        rnnlens.load(checkpoints["lstm-2"], precision=16)
    if not bf16_here():
        with pytest.raises(rnnlens.RnnlensError, match="AVX512-BF16"):
            rnnlens.load(checkpoints["lstm-2"], precision="bf16")
        pytest.skip("this CPU has no AVX512-BF16: the bf16 computations are not run")
    text = "the cat sat on the mat and the dog ran"
    f32, bf16 = rnnlens.load(checkpoints["lstm-2"]), rnnlens.load(checkpoints["lstm-2"], precision="bf16")
    assert (f32.precision, bf16.precision) == ("f32", "bf16")
    a, b = f32.log_probs(text), bf16.log_probs(text)
    # bf16's rounding of the products, not another model; and the f32 model unchanged by it.
    assert not np.array_equal(a, b) and abs(a.sum() - b.sum()) < 0.01 * abs(a.sum())
    assert np.array_equal(a, rnnlens.load(checkpoints["lstm-2"]).log_probs(text))
    out = rnnlens.train(config(corpus, tmp_path / "bf16", precision="bf16", epochs=1))
    assert rnnlens.load(out).trainer["config"]["precision"] == "bf16"
    # Training in bf16 left this process's f32 computations as they were.
    assert np.array_equal(a, f32.log_probs(text))


def test_argument_errors_are_pythons_and_name_the_argument(checkpoints, corpus, tmp_path):
    m = rnnlens.load(checkpoints["gru"])
    with pytest.raises(TypeError, match="text must be str or bytes, got int"):
        m.log_probs(42)
    with pytest.raises(TypeError, match="components must be a sequence of integers, not a string"):
        m.explain("the cat", components="17")
    with pytest.raises(ValueError, match=r"ids\[1\] must be between 0 and"):
        m.decode([1, -1])
    with pytest.raises(TypeError, match="length must be an integer, got float 2.7"):
        m.sample(length=2.7)
    with pytest.raises(ValueError, match="seed must be between 0 and"):
        m.sample(seed=-1)
    with pytest.raises(TypeError, match="inverse_temperature must be a number"):
        m.sample(inverse_temperature="hot")
    assert m.decode(np.array(m.encode("the cat"), dtype=np.int64)) == m.decode(m.encode("the cat"))
    out = rnnlens.train(config(corpus, tmp_path / "run", epochs=1, max_steps=2))
    with pytest.raises(rnnlens.RnnlensError) as e:
        rnnlens.train(config(corpus, out, epochs=1, max_steps=2))
    assert f"resume={out}" in str(e.value) and "overwrite=True" in str(e.value) and "--" not in str(e.value), str(e.value)


@pytest.fixture(scope="module")
def wide(corpus, tmp_path_factory):
    """An untrained word-level LSTM of 768 units: a few thousand tokens take it seconds."""
    d = tmp_path_factory.mktemp("wide") / "lstm-768"
    cli("train", "--data", str(corpus), "--cell", "lstm", "--hidden-size", "768", "--embedding-size", "16", "--max-steps", "0",
        "--sample-length", "0", "--quiet", "--threads", "2", "--out", str(d))
    return d


@pytest.mark.parametrize("call", ["log_probs", "states", "sample"])
def test_ctrl_c_interrupts_a_long_call_within_a_second(call, wide):
    # A call of many seconds, interrupted one second in: KeyboardInterrupt within a second of
    # the signal, nothing printed of a result, and the interpreter still runs (a second call
    # works).
    long_call = {
        "log_probs": "m.log_probs('the cat sat on the mat . ' * 20000)",
        "states": "m.states('the cat sat on the mat . ' * 2500)",
        "sample": "m.sample('the', length=200000)",
    }[call]
    script = textwrap.dedent(f"""
        import signal, sys, time, rnnlens
        {RESTORE_SIGINT}
        m = rnnlens.load({str(wide)!r})
        print("ready", flush=True)
        try:
            {long_call}
            print("finished", flush=True)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic(), flush=True)
            print("again", len(m.log_probs("the cat sat")), flush=True)
            sys.exit(3)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    import time
    time.sleep(1.0)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 3, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith("interrupted") and float(lines[0].split()[1]) - sent < 1.0, (lines, err)
    assert lines[1].startswith("again ") and "PanicException" not in err, (out, err)


def test_typed_text_is_cut_as_the_corpus_was_and_unknown_words_are_counted(tmp_path):
    d = tmp_path / "brown"
    cli("train", "--format", "brown", "--level", "word", "--hidden-size", "8", "--embedding-size", "8", "--batch-size", "4",
        "--bptt", "10", "--max-steps", "2", "--epochs", "1", "--sample-length", "0", "--threads", "2",
        "--quiet", "--out", str(d))
    m = rnnlens.load(d)
    assert m.split == "brown" and m.config["tokenizer"]["split"] == "brown"
    assert m.tokens("Hello, world! It's fine.") == ["hello", ",", "world", "!", "it's", "fine", ".", "<eos>"]
    assert m.unknown_share("Hello, world!") == 0.0
    assert m.unknown_share("zzqx, world") == pytest.approx(1 / 4)
    with pytest.warns(UserWarning, match=r"60\.0% of the text's tokens are <unk>"):
        m.log_probs("zzqx qqzx xxzq world")  # 3 of 5 tokens (with <eos>)


def test_sizes_beyond_the_memory_raise_with_the_estimate(checkpoints, monkeypatch):
    m = rnnlens.load(checkpoints["gru"])  # char level: reading needs 6 bytes a token, scoring 16
    text = "the cat sat on the mat " * 2000
    assert m.log_probs(text).shape == (len(text) - 1,)
    # RNNLENS_MEMORY_LIMIT caps what the library counts on, as a smaller machine would
    monkeypatch.setenv("RNNLENS_MEMORY_LIMIT", str(8 * len(text)))
    with pytest.raises(rnnlens.RnnlensError, match=r"scoring \d+ tokens .* needs about .* MiB.*shorter text"):
        m.log_probs(text)
    with pytest.raises(rnnlens.RnnlensError, match=r"the states of \d+ tokens needs about"):
        m.states(text)
    with pytest.raises(rnnlens.RnnlensError, match=r"reading a text of \d+ bytes needs about"):
        m.encode(text * 2)
    monkeypatch.delenv("RNNLENS_MEMORY_LIMIT")
    assert len(m.states(text)) == 1


def test_the_gpu_scores_and_samples_as_the_cpu(checkpoints):
    if not rnnlens.has_gpu():
        with pytest.raises(rnnlens.RnnlensError, match="built without the GPU engine"):
            rnnlens.load(checkpoints["lstm-2"], device="gpu")
        pytest.skip("this package has no GPU engine (python/test.sh builds it where a Vulkan driver is present)")
    cpu, gpu = rnnlens.load(checkpoints["lstm-2"]), rnnlens.load(checkpoints["lstm-2"], device="gpu")
    assert gpu.device == "gpu" and cpu.device == "cpu"
    text = "the cat sat on the mat and the dog ran to the big red house " * 3
    assert np.abs(gpu.log_probs(text) - cpu.log_probs(text)).max() < 1e-4
    # f16 products on the GPU: f16's rounding of them, not another model
    half = rnnlens.load(checkpoints["lstm-2"], precision="f16", device="gpu")
    a, b = gpu.log_probs(text), half.log_probs(text)
    assert half.precision == "f16" and not np.array_equal(a, b) and abs(a.sum() - b.sum()) < 0.01 * abs(a.sum())
    assert gpu.sample("the cat", length=30, seed=4) == cpu.sample("the cat", length=30, seed=4)
    with pytest.raises(ValueError, match="device must be"):
        rnnlens.load(checkpoints["lstm-2"], device="tpu")


def test_a_task_trains_on_the_gpu_as_on_the_cpu(tmp_path):
    kw = dict(cell="gru", length=16, steps=8, hidden_size=8, batch_size=4, quiet=True, threads=2)
    if not rnnlens.has_gpu():
        with pytest.raises(rnnlens.RnnlensError, match="no GPU engine"):
            rnnlens.task("parentheses", device="gpu", out=tmp_path / "g", **kw)
        pytest.skip("this package has no GPU engine (python/test.sh builds it where a Vulkan driver is present)")
    _, cpu = rnnlens.task("parentheses", out=tmp_path / "c", **kw)
    _, gpu = rnnlens.task("parentheses", device="gpu", out=tmp_path / "g", **kw)
    assert len(gpu[0]["loss"]) == 8
    assert np.allclose(cpu[0]["loss"], gpu[0]["loss"], rtol=1e-5, atol=0)
    with pytest.raises(rnnlens.RnnlensError, match="invalid value 'tpu'|unknown variant"):
        rnnlens.task("parentheses", device="tpu", out=tmp_path / "t", **kw)
