//! The documentation cannot drift from what produced it.

use std::process::Command;

/// docs/paper.md is what `scripts/paper.sh page` writes from the run records
/// (docs/paper/runs/) and the row notes (docs/paper/notes.json).
#[test]
fn the_papers_page_is_written_from_its_records() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3").args(["scripts/paper.py", "page", "--check"]).current_dir(root).output().expect("python3 runs (the page's script needs it)");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// Runs `body` in Python with scripts/paper.py loaded as `p`, its records, page and runs moved
/// into `dir` (`tmp`), and the binary under test as `sys.argv[2]`; returns what it printed,
/// having checked that it succeeded.
fn paper_py(body: &str, dir: &std::path::Path) -> String {
    let driver = format!(
        "import importlib.util, sys\nfrom pathlib import Path\nspec = importlib.util.spec_from_file_location(\"paper\", \"scripts/paper.py\")\n\
         p = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(p)\ntmp = Path(sys.argv[1])\n\
         p.RECORDS, p.PAGE, p.RUNS = tmp / \"records\", tmp / \"paper.md\", tmp / \"runs\"\n\
         import os\nos.environ.setdefault(\"PAPER_COMMIT\", \"0123456789abcdef0123456789abcdef01234567\")\n{body}"
    );
    let out = Command::new("python3")
        .args(["-c", &driver, dir.to_str().unwrap(), env!("CARGO_BIN_EXE_rnnlens")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

/// The record `id` that a run of `paper_py` in `dir` wrote (`log`: what it printed, for the
/// message when there is none).
fn record(dir: &std::path::Path, id: &str, log: &str) -> serde_json::Value {
    let path = dir.join(format!("records/{id}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}\n{log}"))).unwrap()
}

/// The two rates of the ISAN's contribution decay (docs/paper.md, the analyses) come back from a
/// curve made of two exponentials with a known break.
#[test]
fn the_decays_two_rates_are_recovered_from_a_curve_built_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = paper_py(
        r##"
import math
decay = [[l, math.exp(-0.5 * l) if l <= 6 else math.exp(-0.5 * 6 - 0.1 * (l - 6))] for l in range(0, 41)]
fast, slow, brk = p.two_rates(decay)
print(f"rates {fast:.3f} {slow:.3f} break {brk}")
"##,
        dir.path(),
    );
    assert!(out.contains("rates 0.500 0.100 break 6"), "{out}");
}

/// A row's probes (`scripts/paper.sh probe`): each short run is recorded with its command,
/// commit and what it gave (the training figure of the steps it ran, or the divergence that
/// stopped it), a recorded probe is not run again, and a note that links a probe without a
/// record stops the page.
#[test]
fn a_rows_probes_are_recorded_and_a_note_cannot_quote_one_without_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
cfg = tmp / "tiny.toml"
cfg.write_text('level = "char"\nembedding_size = 8\nbatch_size = 8\nbptt = 20\nepochs = 1\nsample_length = 0\n')
p.LM_TABLES["isan-f1a"].update(config=str(cfg), hidden={"irnn": 6})
p.PROBES_DIR, p.PROBE_STEPS, p.PROBE_PRECISION = tmp / "probes", 5, "f32"
p.PROBES = {"isan-f1a/irnn": {"starts": ["--optimizer", "sgd", "--lr", "0.01", "--carry-state", "false"], "blows": ["--optimizer", "sgd", "--lr", "1e6"]}}
p.probe(["all"], sys.argv[2])
try:
    p.probe_links({"isan-f1a/irnn": "it starts ([probe](paper/probes/isan-f1a-irnn-starts.json)), not ([probe](paper/probes/isan-f1a-irnn-gone.json))"})
except SystemExit as e:
    print("refused:", e)
"#;
    let first = paper_py(driver, dir.path());
    let read = |id: &str| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(dir.path().join(format!("probes/{id}.json"))).unwrap()).unwrap() };
    let starts = read("isan-f1a-irnn-starts");
    assert_eq!(starts["result"]["steps_run"], 5, "{starts}");
    let bpc = starts["result"]["train_bpc"].as_f64().unwrap();
    assert!(bpc > 4.0 && bpc < 6.5, "{starts}");
    assert!(starts["command"].as_str().unwrap().ends_with("--out DIR --optimizer sgd --lr 0.01 --carry-state false"), "{starts}");
    assert!(starts["commit"].as_str().unwrap().len() >= 40 && starts["products"][0].as_str().unwrap().starts_with("f32 on "), "{starts}");
    let blows = read("isan-f1a-irnn-blows");
    assert!(blows["result"]["diverged"].as_str().is_some_and(|w| w.contains("training diverged")), "{blows}");
    assert!(first.contains("refused: docs/paper/notes.json links probes without a record: isan-f1a-irnn-gone"), "{first}");
    let second = paper_py(driver, dir.path());
    assert_eq!(second.matches("recorded already").count(), 2, "{second}");
}

/// A language-model row whose batches diverged and were skipped keeps the count and the rate's
/// final scale in its record (the notes quote them), from the trainer's state.
#[test]
fn a_language_model_record_keeps_its_skipped_batches() {
    let dir = tempfile::tempdir().unwrap();
    let text = paper_py(
        r#"
import json
out = tmp / "runs" / "isan-f1a-rnn-f32-s1"
(out / "model").mkdir(parents=True)
(out / "model" / "trainer.json").write_text(json.dumps({"seconds": 1.0, "epoch": 1, "step": 4, "skipped": 3, "lr_scale": 0.125}))
(out / "started.json").write_text(json.dumps({"command": "rnnlens train", "commit": "0" * 40, "cpu": "a CPU", "threads": 1, "precision": "f32", "seed": 1, "at": "2026-12-06 15:00:00"}))
(out / "log.txt").write_text("model: rnn [6], embedding 8, 100 recurrent / 981 total parameters; 1 threads\n")
p.record_lm("isan-f1a-rnn-f32-s1", "isan-f1a", "rnn", out, sys.argv[2], why="training diverged at step 4")
"#,
        dir.path(),
    );
    let rec = record(dir.path(), "isan-f1a-rnn-f32-s1", &text);
    assert_eq!((rec["result"]["skipped_batches"].as_u64(), rec["result"]["lr_scale"].as_f64()), (Some(3), Some(0.125)), "{rec}");
}

/// `run all` fills the rows still pending: a row whose figure was run in the other precision is
/// skipped (a row named is run in the precision asked for, as before).
#[test]
fn run_all_skips_a_row_recorded_in_the_other_precision() {
    let dir = tempfile::tempdir().unwrap();
    let out = paper_py(
        r#"
import json
(tmp / "records").mkdir()
rec = json.loads((Path("docs/paper/runs") / "isan-f1a-isan-bf16-s1.json").read_text())
(tmp / "records" / "isan-f1a-isan-f32-s1.json").write_text(json.dumps(dict(rec, id="isan-f1a-isan-f32-s1", precision="f32")))
p.CAMPAIGN = ["isan-f1a"]
p.LM_TABLES["isan-f1a"]["hidden"] = {"isan": 6}
p.run(["all"], 1, "bf16", 1, "/nonexistent/rnnlens")
print("ran:", (tmp / "runs" / "isan-f1a-isan-bf16-s1").exists())
"#,
        dir.path(),
    );
    assert!(out.contains("isan-f1a-isan-bf16-s1: the row has its figure in") && out.contains("skipped by `run all`"), "{out}");
    assert!(out.contains("ran: False"), "{out}");
}

/// A bf16 run whose products ran on AMX tiles says so where its precision shows, on its row and
/// in its link (its bits are not AVX512-BF16's); one without the record's `products` (the records
/// before it) does not.
#[test]
fn a_bf16_row_on_amx_tiles_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = paper_py(
        r##"
amx = {"precision": "bf16", "threads": 1, "products": ["bf16 on AMX (TDPBF16PS: 16 x 32 bf16 tiles, f32 accumulation)"]}
avx = {"precision": "bf16", "threads": 1, "products": ["bf16 on AVX512-BF16 (VDPBF16PS: bf16 pairs, f32 accumulation)"]}
print(p.where(amx) + " | " + p.where(avx) + " | " + p.where({"precision": "bf16", "threads": 2}))
print(p.label(dict(amx, seed=1, commit="0" * 40)) + " | " + p.label(dict(avx, seed=1, commit="0" * 40)))
"##,
        dir.path(),
    );
    assert!(out.contains("bf16 on AMX, 1 thread | bf16, 1 thread | bf16, 2 threads"), "{out}");
    assert!(out.contains("bf16 AMX s1 | bf16 s1"), "{out}");
}

/// A record run from uncommitted code is marked on the page and run again: `recorded` does not
/// count it, and the rerun's record moves it aside as ID.superseded.json, which the rows leave
/// out and the provenance paragraph counts.
#[test]
fn a_record_from_uncommitted_code_is_marked_and_superseded_by_its_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let out = paper_py(
        r##"
import json, shutil
(tmp / "records").mkdir()
rid = "rda-t2-gru-f32-s1"
rec = json.loads((Path("docs/paper/runs") / f"{rid}.json").read_text())
loose = dict(rec, commit=rec["commit"] + " (with uncommitted changes)")
(tmp / "records" / f"{rid}.json").write_text(json.dumps(loose))
print("recorded before:", p.recorded(rid))
p.write_outputs()
print("marked:", "s1 †" in p.PAGE.read_text(), "1 records († on their links)" in p.PAGE.read_text())
p.write_record(rid, dict(rec, started="2026-12-06 05:00:00"))
print("recorded after:", p.recorded(rid))
old = json.loads((tmp / "records" / f"{rid}.superseded.json").read_text())
print("superseded by:", old["superseded_by"])
page = p.PAGE.read_text()
print("marked after:", "†" in page.split("Where ours differs")[1], "replaced so far (rda-t2-gru-f32-s1) is kept" in page, "its rerun giving the same figure" in page)
# two more reruns: one that ends at the same step with other bits (its last loss), one that does not
for rid, steps in (("rda-t2-rwa-bf16-s1", None), ("rda-t2-rda-exp-tanh-bf16-s1", 300)):
    rec = json.loads((Path("docs/paper/runs") / f"{rid}.json").read_text())
    (tmp / "records" / f"{rid}.json").write_text(json.dumps(dict(rec, commit=rec["commit"] + " (with uncommitted changes)")))
    res = dict(rec["result"], final_loss=rec["result"]["final_loss"] / 2, steps_to_threshold=steps or rec["result"]["steps_to_threshold"])
    p.write_record(rid, dict(rec, started="2026-12-06 06:00:00", result=res))
page = p.PAGE.read_text()
print("replaced:", page.split("replaced so far")[1].split(". ")[0].strip())
"##,
        dir.path(),
    );
    assert!(out.contains("recorded before: False") && out.contains("marked: True True"), "{out}");
    assert!(out.contains("recorded after: True") && out.contains("superseded by: the rerun of 2026-12-06 05:00:00 from commit"), "{out}");
    assert!(out.contains("marked after: False True True"), "{out}");
    // Each rerun's figure is set against the first run's: only a different figure is named.
    assert!(out.contains("replaced: (rda-t2-gru-f32-s1, rda-t2-rda-exp-tanh-bf16-s1, rda-t2-rwa-bf16-s1) are kept as `docs/paper/runs/ID.superseded.json`\
                          : the reruns of rda-t2-gru-f32-s1, rda-t2-rwa-bf16-s1 gave the same figure, of rda-t2-rda-exp-tanh-bf16-s1 300 where the first run gave 347\n"), "{out}");
}

/// The campaign's language-model rows (`scripts/paper.sh run isan-f1a`) as paper.py runs them,
/// on a tiny set-up in a directory of their own: each row is trained, scored on the test split
/// and recorded with its parameters and curve, the page shows the figure, and a second call
/// runs nothing.
#[test]
fn the_papers_language_model_rows_train_score_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
cfg = tmp / "tiny.toml"
cfg.write_text('level = "char"\nembedding_size = 8\nbatch_size = 8\nbptt = 20\nepochs = 1\nmax_steps = 30\nvalid_every = 10\nsample_length = 0\n')
p.LM_TABLES["isan-f1a"].update(config=str(cfg), hidden={"isan": 6, "lstm": 7})
p.run(["isan-f1a"], 1, "f32", 1, sys.argv[2])
"#;
    let run = || paper_py(driver, dir.path());
    let first = run();
    // The row is held (running.pid) until its record is written, then let go.
    assert!(!dir.path().join("runs/isan-f1a-isan-f32-s1/running.pid").exists() && dir.path().join("runs/isan-f1a-isan-f32-s1/log.txt").exists(), "{first}");
    for (cell, units) in [("isan", 6), ("lstm", 7)] {
        let rec = record(dir.path(), &format!("isan-f1a-{cell}-f32-s1"), &first);
        let res = &rec["result"];
        let bpc = res["test_bpc"].as_f64().unwrap();
        // Above zero and below a uniform guess over the 59 symbols with room for 30 steps' worth.
        assert!(bpc > 0.5 && bpc < 59f64.log2() + 1.0, "{cell}: {bpc} bits per character");
        assert_eq!(res["hidden_size"], units, "{cell}");
        assert!(res["parameters"].as_u64().unwrap() > 0, "{cell}: {res}");
        assert!(rec["products"].as_array().is_some_and(|k| k.len() == 1 && k[0].as_str().unwrap().starts_with("f32 on ")), "{cell}: {rec}");
        let valid: Vec<u64> = rec["curve"].as_array().unwrap().iter().filter(|p| !p[2].is_null()).map(|p| p[0].as_u64().unwrap()).collect();
        assert_eq!(valid, [10, 20, 30], "{cell}: the validation points of the curve");
    }
    let page = std::fs::read_to_string(dir.path().join("paper.md")).unwrap();
    assert!(page.lines().any(|l| l.starts_with("| ISAN | 1.58 | ") && !l.contains("pending")), "{page}");
    // The figure: one line a run, through its three validations, both cells in the legend.
    assert!(page.contains("![isan-f1a: learning curves](paper/curves/isan-f1a.svg)"), "{page}");
    let svg = std::fs::read_to_string(dir.path().join("paper/curves/isan-f1a.svg")).unwrap();
    let lines: Vec<&str> = svg.lines().filter(|l| l.starts_with("<polyline")).collect();
    assert_eq!(lines.len(), 2, "{svg}");
    assert!(lines.iter().all(|l| l.split("points=\"").nth(1).unwrap().split(' ').count() == 3), "{svg}");
    assert!(svg.contains(">ISAN</text>") && svg.contains(">LSTM</text>"), "{svg}");
    let second = run();
    assert_eq!(second.matches("recorded already").count(), 2, "{second}");
    // A variant's run (a longer budget) is drawn dashed beside the row's own, and said.
    let variant = driver.replace("p.run([\"isan-f1a\"], 1, \"f32\", 1, sys.argv[2])", "p.run([\"isan-f1a/isan\"], 1, \"f32\", 1, sys.argv[2], \"epochs30\")");
    paper_py(&variant, dir.path());
    let svg = std::fs::read_to_string(dir.path().join("paper/curves/isan-f1a.svg")).unwrap();
    let dashed: Vec<&str> = svg.lines().filter(|l| l.starts_with("<polyline") && l.contains("stroke-dasharray")).collect();
    assert_eq!(dashed.len(), 1, "{svg}");
    let page = std::fs::read_to_string(dir.path().join("paper.md")).unwrap();
    assert!(page.contains("dashed: a variant's run"), "{page}");
}

/// The MNIST tables' rows (`scripts/paper.sh run rda-t3`) as paper.py runs them, on a few
/// random digits written as IDX files in place of `scripts/mnist.sh`'s: the command carries the
/// stopping rule, the record keeps every held-out evaluation and the best, and the row shows the
/// best evaluation's accuracy and step, before any of the tables' long runs.
#[test]
fn the_papers_mnist_rows_record_their_best_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
import random, struct
digits = tmp / "digits"
digits.mkdir()
rng = random.Random(1)
for split, n in [("train", 200), ("t10k", 30)]:
    (digits / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(rng.randrange(256) for _ in range(n * 784)))
    (digits / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, n) + bytes(rng.randrange(10) for _ in range(n)))
p.mnist_dir = lambda: str(digits)
p.RDA_TABLES["rda-t3"]["steps"] = 6
p.MNIST_EVAL_EVERY, p.MNIST_PATIENCE = 2, 2
p.run(["rda-t3/gru"], 1, "bf16", 1, sys.argv[2])
"#;
    let log = paper_py(driver, dir.path());
    let rec = record(dir.path(), "rda-t3-gru-bf16-s1", &log);
    let command = rec["command"].as_str().unwrap();
    assert!(command.contains("task seq-mnist --cell gru --steps 6 ") && command.ends_with("--eval-every 2 --patience 2"), "{command}");
    let res = &rec["result"];
    let evals: Vec<(u64, f64)> = res["evals"].as_array().unwrap().iter().map(|e| (e[0].as_u64().unwrap(), e[1].as_f64().unwrap())).collect();
    let steps: Vec<u64> = evals.iter().map(|e| e.0).collect();
    assert!(steps == [2, 4] || steps == [2, 4, 6], "{res}");
    assert!(evals.iter().all(|e| (0.0..=1.0).contains(&e.1)), "{res}");
    // The best evaluation is the row's figure: the first of the highest.
    let best = evals.iter().fold(evals[0], |b, e| if e.1 > b.1 { *e } else { b });
    assert_eq!((res["best_eval"][0].as_u64().unwrap(), res["best_eval"][1].as_f64().unwrap()), best, "{res}");
    let page = std::fs::read_to_string(dir.path().join("paper.md")).unwrap();
    let row = format!("| GRU | 0.985 | {:.3} (step {}) | [bf16 s1: {:.3} (step {})]", best.1, best.0, best.1, best.0);
    assert!(page.lines().any(|l| l.starts_with(&row)), "{row}\n{page}");
}

/// A word-level table's rows (the RAN paper's, `scripts/paper.sh run ran-t1`) on a tiny set-up:
/// scored in test perplexity, its curve in perplexity, and shown again in Table 2's chain.
#[test]
fn the_papers_word_level_rows_record_perplexity_and_table_2_shows_table_1s_ends() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
cfg = tmp / "tiny.toml"
cfg.write_text('level = "word"\nvocab_size = 500\nembedding_size = 8\nbatch_size = 16\nbptt = 10\nepochs = 1\nmax_steps = 20\nvalid_every = 10\nsample_length = 0\n')
p.LM_TABLES["ran-t1"].update(config=str(cfg), hidden={"lstm": 8})
p.run(["ran-t1"], 1, "f32", 1, sys.argv[2])
"#;
    let text = paper_py(driver, dir.path());
    let rec = record(dir.path(), "ran-t1-lstm-f32-s1", &text);
    let res = &rec["result"];
    let ppl = res["test_perplexity"].as_f64().unwrap_or_else(|| panic!("{res}"));
    // exp of the mean NLL, below a uniform guess over the 500 words (with room for 20 steps).
    assert!((ppl - res["test_nll"].as_f64().unwrap().exp()).abs() < 1e-9 * ppl && ppl > 1.0 && ppl < 600.0, "{res}");
    assert!(res.get("test_bpc").is_none(), "{res}");
    let valid: Vec<f64> = rec["curve"].as_array().unwrap().iter().filter_map(|p| p[2].as_f64()).collect();
    assert!(valid.len() == 2 && valid.iter().all(|&v| v > 1.0 && v < 600.0), "perplexities: {valid:?}");
    let page = std::fs::read_to_string(dir.path().join("paper.md")).unwrap();
    let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("| LSTM | 157.7 | ")).collect();
    assert_eq!(rows.len(), 2, "Table 1's row and Table 2's: {page}");
    assert!(rows.iter().all(|r| r.contains(&format!("| {ppl:.1} |")) && r.contains("ran-t1-lstm-f32-s1.json")), "{rows:?}");
    assert!(rows[1].contains("Table 1's row"), "{}", rows[1]);
    assert!(page.contains("rnnlens (test perplexity)") && page.contains("paper/curves/ran-t1.svg"), "{page}");
    assert!(std::fs::read_to_string(dir.path().join("paper/curves/ran-t1.svg")).unwrap().contains("validation perplexity"));
}

/// A task row run with a set-up beside the paper's (`VARIANT=NAME scripts/paper.sh run ROW`):
/// its options reach the command, its record says the variant, and the page links it on the
/// row without making it the row's figure.
#[test]
fn a_papers_row_run_with_a_variant_set_up_is_recorded_beside_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
p.RDA_TABLES["rda-t2"]["steps"] = 3
p.VARIANTS["tiny-code"] = dict(args=["--length", "20", "--hidden-size", "4", *p.VARIANTS["rwa-code"]["args"]], what="a tiny run")
p.run(["rda-t2/rwa"], 1, "f32", 1, sys.argv[2], "tiny-code")
"#;
    let text = paper_py(driver, dir.path());
    let rec = record(dir.path(), "rda-t2-rwa-f32-s1-tiny-code", &text);
    assert_eq!(rec["variant"], "tiny-code");
    let command = rec["command"].as_str().unwrap();
    assert!(command.ends_with("--clip 0 --s0-std 1"), "{command}");
    assert_eq!(rec["result"]["steps_run"], 3, "{rec}");
    // The record names the kernels that ran the products, as the binary logged them.
    assert!(rec["products"].as_array().is_some_and(|k| k.len() == 1 && k[0].as_str().unwrap().starts_with("f32 on ")), "{rec}");
    let log = std::fs::read_to_string(dir.path().join("runs/rda-t2-rwa-f32-s1-tiny-code/log.txt")).unwrap();
    assert!(log.contains("gradients not clipped") && log.contains("initial state (drawn from N(0, 1"), "{log}");
    let page = std::fs::read_to_string(dir.path().join("paper.md")).unwrap();
    let row = page.lines().find(|l| l.starts_with("| RWA | 133 |")).unwrap_or_else(|| panic!("{page}"));
    // Stopped at its cap: the last training batch's accuracy and the model's on fresh sequences, each named.
    let fresh = rec["result"]["fresh"]["accuracy"].as_f64().unwrap();
    assert!(row.contains("| pending | [f32 s1 tiny-code: > 3 (last batch: accuracy ") && row.contains(&format!("; fresh: {fresh:.4})"))
            && row.contains("rda-t2-rwa-f32-s1-tiny-code.json"), "{row}");
    // The table's figure draws the paper's set-up's runs only: with none, there is no figure.
    assert!(!dir.path().join("paper/curves/rda-t2.svg").exists() && !page.contains("rda-t2.svg"), "{page}");
}

/// A variant's run continued under a raised cap (its `--steps` changed after it began): the
/// continued run takes the new cap (`task --resume --steps`), and its record keeps both
/// commands, the first and the continuation's, so that the cap it ran to shows.
#[test]
fn a_continued_run_takes_its_variants_cap_and_its_record_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
p.VARIANTS["tiny-cap"] = dict(args=["--length", "20", "--hidden-size", "4", "--steps", "2"], what="a tiny run")
p.run(["rda-t2/rwa"], 1, "f32", 1, sys.argv[2], "tiny-cap")
(p.RECORDS / "rda-t2-rwa-f32-s1-tiny-cap.json").unlink()
# as a run stopped an hour ago (a fresh log is another campaign's run, left alone)
import time
os.utime(p.RUNS / "rda-t2-rwa-f32-s1-tiny-cap" / "log.txt", (time.time() - 3600, time.time() - 3600))
p.VARIANTS["tiny-cap"]["args"][-1] = "4"
p.run(["rda-t2/rwa"], 1, "f32", 1, sys.argv[2], "tiny-cap")
"#;
    let text = paper_py(driver, dir.path());
    let rec = record(dir.path(), "rda-t2-rwa-f32-s1-tiny-cap", &text);
    assert!(rec["command"].as_str().unwrap().contains(" --steps 2 "), "{rec}");
    let continued = rec["continued"].as_array().unwrap_or_else(|| panic!("{rec}"));
    assert_eq!(continued.len(), 1, "{rec}");
    assert!(continued[0]["command"].as_str().unwrap().contains("task --resume ") && continued[0]["command"].as_str().unwrap().ends_with("--steps 4"), "{rec}");
    assert_eq!(rec["result"]["steps_run"], 4, "{rec}");
    assert_eq!(rec["result"]["max_steps"], 4, "{rec}");
}

/// A threshold record keeps the training batches over the 50 steps before its step (the level
/// the notes set beside the crossing batch), from the whole curve: loss for the addition task,
/// accuracy for the others; the crossing step itself is not among them.
#[test]
fn a_threshold_record_keeps_the_batches_before_its_step() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
curve = [[s, 1.0 / s, min(1.0, s / 100)] for s in range(1, 101)]
for hit, col in [(100, 1), (60, 2), (1, 2)]:
    r = p.before_threshold(curve, hit, col)
    print(r and (r["steps"], r["measure"], round(r["mean"], 9), round(r["min"], 9), round(r["max"], 9)))
"#;
    let text = paper_py(driver, dir.path());
    let lines: Vec<&str> = text.lines().collect();
    let mean = (50..100).map(|s| 1.0 / s as f64).sum::<f64>() / 50.0;
    assert_eq!(lines[0], format!("(50, 'loss', {}, {}, 0.02)", (mean * 1e9).round() / 1e9, (1e9 / 99.0f64).round() / 1e9), "{text}");
    assert_eq!(lines[1], "(50, 'accuracy', 0.345, 0.1, 0.59)", "{text}");
    assert_eq!(lines[2], "None", "{text}");
}

/// A variant's option replaces the row's own of the same flag (`lr03` on the IRNN's SGD rate),
/// since the command line takes each option once; without a variant the row's stays.
#[test]
fn a_variants_option_replaces_the_rows_own() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
for v in [None, "lr03"]:
    print(" ".join(p.command("isan-f1a", "irnn", tmp / "run", 1, "bf16", 1, "rnnlens", v)))
"#;
    let text = paper_py(driver, dir.path());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].ends_with("--optimizer sgd --lr 0.01 --carry-state false"), "{}", lines[0]);
    assert!(lines[1].ends_with("--optimizer sgd --carry-state false --lr 0.03") && lines[1].matches("--lr").count() == 1, "{}", lines[1]);
}

/// A task variant's cap (`zero-state`'s `--steps 3000`) replaces the table's, given once, and a
/// run of it continued from its save keeps that cap (`task --resume` takes `--steps`).
#[test]
fn a_task_variants_cap_replaces_the_tables_and_holds_on_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
out = tmp / "run"
print(" ".join(p.command("rda-t2", "gru", out, 1, "bf16", 1, "rnnlens", "zero-state")))
out.mkdir()
(out / "task.json").write_text("{}")
print(" ".join(p.command("rda-t2", "gru", out, 1, "bf16", 1, "rnnlens", "zero-state")))
print(" ".join(p.command("rda-t2", "gru", out, 1, "bf16", 1, "rnnlens")))
"#;
    let text = paper_py(driver, dir.path());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].contains(" --steps 3000 ") && lines[0].matches("--steps").count() == 1, "{}", lines[0]);
    assert!(lines[0].ends_with("--overwrite --learn-initial-state false"), "{}", lines[0]);
    assert!(lines[1].contains("task --resume ") && lines[1].ends_with("--threads 1 --steps 3000"), "{}", lines[1]);
    assert!(lines[2].ends_with("--threads 1 --steps 10000"), "{}", lines[2]);
}

/// `scripts/paper.sh status`: a started run without a record is listed with its log's last
/// progress line and as stopped (its process gone, its log an hour old), the queue's runs without a record are
/// listed, and `run all`'s rows without one are counted, each with its lane time and a total.
#[test]
fn the_campaigns_status_lists_started_runs_the_queue_and_the_rows_left() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r##"
out = p.RUNS / "rda-t2-gru-bf16-s1"
out.mkdir(parents=True)
(out / "started.json").write_text("{}")
(out / "log.txt").write_text("gru: step 10/10000, loss 0.69\rgru: step 20/10000, loss 0.68, at most 1:00:00 left\n")
(out / "running.pid").write_text("999999999\n")
import os, time
os.utime(out / "log.txt", (time.time() - 3600, time.time() - 3600))
p.QUEUE = tmp / "queue.txt"
p.QUEUE.write_text("# a comment\nrda-t2/gru 1\nrda-t5/rwa 2 rwa-code\nrda-t2/gru 3 f32\nisan-f1a/gru 2 f32\nrda-t2/gru 2 zero-state\n"
                   "rda-t2/gru 4\nisan-f1a/lstm 2 f32\n")
# a threshold run past the step count of the recorded run its estimate comes from (340)
past = p.RUNS / "rda-t2-gru-bf16-s4"
past.mkdir(parents=True)
(past / "started.json").write_text("{}")
(past / "log.txt").write_text("gru: step 400/10000, loss 0.69, 0.3 s a step, at most 0:50:00 left\n")
# a language model whose log ends with an epoch's validation: its pace from the epoch's lines
# (4 minutes for the last 100 of 1000 windows: 40 minutes an epoch), seven epochs left
ended = p.RUNS / "isan-f1a-lstm-f32-s2"
ended.mkdir(parents=True)
(ended / "started.json").write_text("{}")
(ended / "log.txt").write_text("epoch 3/10: window 900/1000, loss 1.3, 9000 tokens/s, epoch ends in 0:04:00\r"
    "epoch 3/10: window 1000/1000, loss 1.3, 9000 tokens/s, epoch ends in 0:00:00\n"
    "epoch 3/10: train bpc 1.88, valid bpc 1.90 (60000 tokens), lr 2.000e-3, 9000 tokens/s, 2400s (+20s validation)\n")
# a task three quarters through its cap, whose last line says less is left than a quarter of
# its estimate
cap = p.RUNS / "rda-t5-rwa-bf16-s2-rwa-code"
cap.mkdir(parents=True)
(cap / "started.json").write_text("{}")
(cap / "log.txt").write_text("rwa: step 15000/20000, loss 0.10000, 0.12 s a step, at most 0:10:00 left\n")
# a language model in f32 a quarter through its epochs, half through its third: its own pace
# (20 minutes for the half epoch left) for the rest of the third and the seven after it
lm = p.RUNS / "isan-f1a-gru-f32-s2"
lm.mkdir(parents=True)
(lm / "started.json").write_text("{}")
(lm / "log.txt").write_text("epoch 3/10: window 500/1000, loss 1.300 (bpc 1.876), 9000 tokens/s, epoch ends in 0:20:00\n")
# another seed's record of the first: its wall time is the estimate
import json
p.RECORDS.mkdir(parents=True, exist_ok=True)
(p.RECORDS / "rda-t2-gru-bf16-s2.json").write_text(json.dumps({"id": "rda-t2-gru-bf16-s2", "table": "rda-t2", "cell": "gru", "seed": 2,
    "precision": "bf16", "commit": "abc", "wall_seconds": 1020, "result": {"steps_run": 340}}))
p.status()
"##;
    let text = paper_py(driver, dir.path());
    assert!(text.contains("started, without a record") && text.contains("  rda-t2-gru-bf16-s1: stopped"), "{text}");
    assert!(text.contains("    gru: step 20/10000, loss 0.68, at most 1:00:00 left (1.0 h ago)"), "{text}");
    // each run with its estimate: a recorded run of the row (another seed's here), else the
    // page's at the step cap, an upper bound (the copy task's 20,000 steps of the RWA at about
    // 0.15 s on a Zen 4)
    // (an f32 run estimated from a bf16 record says so)
    // a started task: by its own pace (its last line's time left at the cap) to the step count
    // of the recorded run its estimate comes from (seed 2's 340: 320 of its 9980 steps left at
    // 20); past that count, or without one, at most its time left at the cap
    assert!(text.contains("7 run(s) without a record, "), "{text}");
    assert!(text.contains("\n  rda-t2/gru seed 4 (started, 4 % done: at most 50 min left)\n"), "{text}");
    // a variant with a step cap of its own, not run yet: the row's pace (3 s a step) to its cap
    assert!(text.contains("\n  rda-t2/gru seed 2 zero-state (at most 2.5 h)"), "{text}");
    assert!(text.contains(" lane-hours, some at their step cap (upper bounds)\n  rda-t2/gru seed 1 (started, 0 % done: about 2 min left)\n  rda-t5/rwa seed 2 rwa-code (started, 75 % done: at most 10 min left)\n  rda-t2/gru seed 3 f32 (about 17 min in bf16)\n"), "{text}");
    // a language model's by its own pace, in its own precision (its estimate was a bf16 step's)
    assert!(text.contains("\n  isan-f1a/gru seed 2 f32 (started, 25 % done: about 5.0 h left)\n"), "{text}");
    // and one whose log ends with an epoch's validation, by the pace of that epoch's lines
    assert!(text.contains("\n  isan-f1a/lstm seed 2 f32 (started, 30 % done: about 4.7 h left)\n"), "{text}");
    let rows = text.split("run all: ").nth(1).unwrap_or_else(|| panic!("{text}"));
    let count: usize = rows.split(' ').next().unwrap().parse().unwrap();
    // a row the queue runs at seed 1 is counted there; the others at the page's estimate
    assert!(count > 30 && rows.contains("rda-t2: gru (in the queue), lstm (at most 2.9 h),"), "{text}");
}

/// A run whose running.pid names a dead process was stopped with its lanes: a lane started
/// again at once takes it up, though its log is seconds old; a run with a fresh log and no
/// running.pid (a campaign that writes none) is left to whoever runs it.
#[test]
fn a_run_whose_process_is_gone_is_taken_up_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
for name, pid in [("killed", "999999999"), ("foreign", None), ("live", str(os.getpid()))]:
    out = tmp / name
    out.mkdir()
    (out / "log.txt").write_text("gru: step 20/10000\n")
    if pid:
        (out / "running.pid").write_text(pid + "\n")
    print(name, p.running_elsewhere(out))
"#;
    let text = paper_py(driver, dir.path());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "killed None", "{text}");
    assert!(lines[1].starts_with("foreign its log was written in the last 5 minutes"), "{text}");
    assert!(lines[2].starts_with("live running in process "), "{text}");
}

/// The figure a language-model record takes from `rnnlens eval`'s output: none where the
/// figure overflowed, whether its mean NLL printed as NaN or as a finite number beyond e^50
/// (the IRNN's seed 2: 3e18 nats, once recorded as 4.7e18 bits per character).
#[test]
fn an_overflowed_eval_figure_is_no_figure() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
for text in ["perplexity 140.2 over 61112 tokens (mean NLL 4.94300 nats) of the test split",
             "perplexity overflowed: a mean NLL of NaN nats per token (beyond e^50); the model diverged over 308707 tokens (mean NLL NaN nats) of the test split",
             "perplexity overflowed: a mean NLL of 3254349551626212352.0 nats per token (beyond e^50); the model diverged over 308707 tokens (mean NLL 3254349551626212352.00000 nats) of the test split"]:
    m = p.eval_figure(text)
    print(m.group(1, 2) if m else None)
"#;
    let text = paper_py(driver, dir.path());
    assert_eq!(text.lines().collect::<Vec<_>>(), ["('61112', '4.94300')", "None", "None"], "{text}");
}

/// A row trained with its state reset every window (the ISAN figure's IRNN, as its row runs it)
/// is scored the way it was trained, whatever the streaming measure gives (overflowed, or a
/// finite figure as the IRNN's seed 3: 6.5 bits per character against 4.2 with the reset), the
/// same for every seed; the record keeps the streaming attempt's line beside it.
#[test]
fn a_row_trained_with_its_state_reset_is_scored_so() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
cfg = tmp / "tiny.toml"
cfg.write_text('level = "char"\nembedding_size = 8\nbatch_size = 8\nbptt = 20\nepochs = 1\nmax_steps = 20\nvalid_every = 10\nsample_length = 0\n')
p.LM_TABLES["isan-f1a"].update(config=str(cfg), hidden={"irnn": 6})
p.run(["isan-f1a/irnn"], 1, "f32", 1, sys.argv[2])
"#;
    let text = paper_py(driver, dir.path());
    let rec = record(dir.path(), "isan-f1a-irnn-f32-s1", &text);
    let res = &rec["result"];
    assert_eq!(res["test_measure"], "the state reset every 20 characters, as trained", "{res}");
    assert!(res["streaming"].as_str().is_some_and(|l| l.contains(" over ") || l.contains("overflowed")), "{res}");
    let bpc = res["test_bpc"].as_f64().unwrap();
    assert!((bpc - res["test_nll"].as_f64().unwrap() / 2f64.ln()).abs() < 1e-9 && bpc > 0.5 && bpc < 59f64.log2() + 1.0, "{res}");
    assert!(rec["command"].as_str().unwrap().ends_with("--optimizer sgd --lr 0.01 --carry-state false"), "{rec}");
    // Its curve's validation is read as it was trained, window by window (the run's end's).
    assert_eq!(res["valid_measure"], "the state reset every window, as trained", "{res}");
    let valid: Vec<u64> = rec["curve"].as_array().unwrap().iter().filter(|p| !p[2].is_null()).map(|p| p[0].as_u64().unwrap()).collect();
    assert_eq!(valid, [20], "{rec}");
    // The page links the figure exactly when one was drawn.
    let page = std::fs::read_to_string(dir.path().join("paper.md")).unwrap();
    let drawn = dir.path().join("paper/curves/isan-f1a.svg").exists();
    assert_eq!(drawn, page.contains("isan-f1a.svg"), "{page}");
}

/// A table where one row is scored with its state reset every window (the RAN table's
/// RAN-identity) sets every row beside it measured alike: `scripts/paper.sh score` scores a kept
/// model of another row so (one record each, not twice), and the page puts the figures in one
/// line under the table, each linked to its record; the reset row's own record says its window in
/// words. A variant's kept model is scored too, for its note, and stays off that line.
#[test]
fn a_table_with_a_reset_row_sets_the_others_beside_it_measured_alike() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
cfg = tmp / "tiny.toml"
cfg.write_text('level = "word"\nvocab_size = 200\nembedding_size = 8\nhidden_size = [6]\nbatch_size = 8\nbptt = 7\nepochs = 1\nmax_steps = 6\nvalid_every = 3\nsample_length = 0\n')
p.LM_TABLES["ran-t1"].update(config=str(cfg), hidden={"lstm": 6, "ran-identity": 6, "rnn": 6})
p.SCORES_DIR = tmp / "scores"
p.run(["ran-t1/lstm", "ran-t1/ran-identity", "ran-t1/rnn"], 1, "f32", 1, sys.argv[2])
# the S-RNN's model lost, its set-up run again to keep one (variant rerun): that one is scored
import shutil
shutil.rmtree(p.RUNS / "ran-t1-rnn-f32-s1" / "model")
p.run(["ran-t1/rnn"], 1, "f32", 1, sys.argv[2], "rerun")
# a variant's kept model is scored too (a note may quote it), but stays off the line
p.run(["ran-t1/lstm"], 1, "f32", 1, sys.argv[2], "epochs30")
p.score(["ran-t1"], sys.argv[2])
p.score(["ran-t1"], sys.argv[2])
p.write_outputs()
print("order:", p.order([("gru", "113.6"), ("lstm", "113.6"), ("rnn", "149.5")], False))
print("order:", p.order([("gru", "0.985"), ("rwa", "0.979"), ("rda-exp-tanh", "0.985")], True))
"#;
    let text = paper_py(driver, dir.path());
    let identity = record(dir.path(), "ran-t1-ran-identity-f32-s1", &text);
    assert_eq!(identity["result"]["test_measure"], "the state reset every 7 words, as trained", "{identity}");
    assert!(!dir.path().join("scores/ran-t1-ran-identity-f32-s1-reset.json").exists(), "a reset row's own figure is scored so already");
    let path = dir.path().join("scores/ran-t1-lstm-f32-s1-reset.json");
    let score: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}\n{text}"))).unwrap();
    assert_eq!(score["measure"], "the state reset every 7 words", "{score}");
    assert_eq!(score["of"], "ran-t1-lstm-f32-s1.json", "{score}");
    assert!(score["command"].as_str().unwrap().ends_with("--split test --threads 1 --reset-every 7"), "{score}");
    let (ppl, nll) = (score["result"]["test_perplexity"].as_f64().unwrap(), score["result"]["test_nll"].as_f64().unwrap());
    assert!((ppl - nll.exp()).abs() < 1e-9 * ppl && ppl > 1.0 && ppl < 400.0, "{score}");
    assert!(text.contains("ran-t1-lstm-f32-s1-reset: recorded already"), "{text}");
    let page = std::fs::read_to_string(dir.path().join("paper.md")).unwrap();
    let alike = page.lines().find(|l| l.starts_with("**Measured alike**")).unwrap_or_else(|| panic!("{page}"));
    assert!(alike.contains("every 7 words") && alike.contains("](paper/scores/ran-t1-lstm-f32-s1-reset.json)")
        && alike.contains("](paper/runs/ran-t1-ran-identity-f32-s1.json)"), "{alike}");
    // A row whose figure's model was lost is scored from its rerun's, and the line says so.
    assert!(!dir.path().join("scores/ran-t1-rnn-f32-s1-reset.json").exists(), "{text}");
    let rerun: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("scores/ran-t1-rnn-f32-s1-rerun-reset.json")).unwrap()).unwrap();
    assert_eq!(rerun["of"], "ran-t1-rnn-f32-s1-rerun.json", "{rerun}");
    assert!(alike.contains("](paper/scores/ran-t1-rnn-f32-s1-rerun-reset.json) (its rerun's model)")
        && !alike.contains("ran-t1-lstm-f32-s1-reset.json) (its rerun"), "{alike}");
    // A variant's model is scored on its own record, which the line leaves out.
    let variant: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("scores/ran-t1-lstm-f32-s1-epochs30-reset.json")).unwrap_or_else(|e| panic!("{e}\n{text}"))).unwrap();
    assert_eq!(variant["of"], "ran-t1-lstm-f32-s1-epochs30.json", "{variant}");
    assert!(text.contains("ran-t1-lstm-f32-s1-epochs30-reset: recorded already") && !alike.contains("epochs30"), "{alike}\n{text}");
    // The table's orders (its three rows here, the GRU not run): the paper's, and ours with the
    // reset row marked as measured otherwise and sent to the line above.
    assert!(page.contains("Order, the paper's: RAN (identity) 130.9 < LSTM 157.7 < S-RNN 352.6."), "{page}");
    let ours = page.lines().find(|l| l.starts_with("Order, ours: ")).unwrap_or_else(|| panic!("{page}"));
    assert!(ours.contains("RAN (identity) ") && ours.contains(" (state reset every window)") && ours.contains("LSTM ")
        && ours.contains("**Measured alike** below sets them on one measure"), "{ours}");
    // Figures equal as shown are not ordered.
    assert!(text.contains("order: GRU 113.6 = LSTM 113.6 < S-RNN 149.5\n"), "{text}");
    assert!(text.contains("order: GRU 0.985 = RDA-exp-tanh 0.985 > RWA 0.979\n"), "{text}");
}

/// Every cell a table of the page runs has a colour of its own in the figures (two cells drawn in
/// one colour cannot be told apart: the RAN table's RAN-identity and RAN-tanh once were).
#[test]
fn every_cell_of_the_page_has_a_colour_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let text = paper_py(
        r#"
sys.path.insert(0, "scripts")
import paper_plot
cells = sorted({c for _, c in p.rows()})
print("cells:", len(cells))
print("missing:", [c for c in cells if c not in paper_plot.COLORS])
print("shared:", sorted(c for c in paper_plot.COLORS if list(paper_plot.COLORS.values()).count(paper_plot.COLORS[c]) > 1))
"#,
        dir.path(),
    );
    assert!(text.contains("missing: []\n") && text.contains("shared: []\n"), "{text}");
    let cells: usize = text.split("cells: ").nth(1).and_then(|t| t.lines().next()).unwrap().parse().unwrap();
    assert!(cells >= 15, "{text}");
}

/// A language-model figure's caption says how each drawn curve was measured and why a cell is
/// missing: a row whose own runs have no validation to draw is drawn by its variants' runs alone
/// or left out of the legend, and a run validated with its state reset every window is named.
#[test]
fn a_figure_caption_names_the_curves_drawn_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let out = paper_py(
        r##"
import shutil
(tmp / "records").mkdir()
for rid in ("isan-f1a-irnn-bf16-s1", "isan-f1a-irnn-bf16-s1-lr03", "isan-f1a-linear-bf16-s1", "isan-f1a-isan-bf16-s1",
            "ran-t1-lstm-f32-s1", "ran-t1-ran-identity-f32-s1-ran-gates-h"):
    shutil.copy(Path("docs/paper/runs") / f"{rid}.json", tmp / "records")
recs = p.load_records()
for table in ("isan-f1a", "ran-t1"):
    print(table, "caption:", [l for l in p.figure_lines(table, recs) if l.startswith("The figure")][0])
"##,
        dir.path(),
    );
    let isan = out.lines().find(|l| l.starts_with("isan-f1a caption:")).unwrap_or_else(|| panic!("{out}"));
    assert!(isan.contains("the rows' own runs of IRNN and linear RNN have none to draw")
        && isan.contains("so linear RNN is not in the legend, and IRNN is drawn by its variants' runs alone"), "{isan}");
    let ran = out.lines().find(|l| l.starts_with("ran-t1 caption:")).unwrap_or_else(|| panic!("{out}"));
    assert!(ran.contains("validated with the state reset every window, as trained, where the others carry it through the split: RAN (identity) (ran-gates-h)"), "{ran}");
}

/// The subcommands a documented command line may start with.
const SUBCOMMANDS: &[&str] = &["train", "eval", "sample", "params", "explain", "task", "curves", "serve", "bench"];

/// The `rnnlens` command lines of a Markdown text, in its code blocks (a continued line, `\`,
/// joined) and in its inline code spans: `(line, arguments)`.
fn command_lines(text: &str) -> Vec<(usize, Vec<String>)> {
    let (mut out, mut fenced, mut held) = (Vec::new(), false, None::<(usize, String)>);
    // an inline span still open at a line's end: where it started, and its text so far
    let mut open = None::<(usize, String)>;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            // inline spans: the odd pieces between backticks, one that a line break splits
            // read whole
            let (at, joined) = match open.take() {
                Some((at, head)) => (at, format!("`{head} {line}")),
                None => (i + 1, line.to_string()),
            };
            let pieces: Vec<&str> = joined.split('`').collect();
            let closed = if pieces.len().is_multiple_of(2) { pieces.len() - 1 } else { pieces.len() };
            if closed < pieces.len() {
                open = Some((i + 1, pieces[closed].to_string()));
            }
            for (k, span) in pieces[..closed].iter().enumerate().skip(1).step_by(2) {
                out.extend(command(span).map(|a| (if k == 1 { at } else { i + 1 }, a)));
            }
            continue;
        }
        let (at, joined) = match held.take() {
            Some((at, head)) => (at, format!("{head} {}", line.trim())),
            None => (i + 1, line.to_string()),
        };
        match joined.strip_suffix('\\') {
            Some(head) => held = Some((at, head.to_string())),
            None => out.extend(command(&joined).map(|a| (at, a))),
        }
    }
    out
}

/// The arguments of the `rnnlens` command on a shell line, cut where the shell takes over (a
/// comment, a pipe, a redirection, `||`, `&&`, `;`) and split as the shell splits words; `None`
/// for a line without one, a line of output ("serve: open ...") and a synopsis ("[--seed S]",
/// "--cell NAME", "RUN...").
fn command(line: &str) -> Option<Vec<String>> {
    let words = shell_words(line);
    let k = words.iter().position(|w| w == "rnnlens" || w.ends_with("/rnnlens"))?;
    let cut = ["|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "<"];
    let args: Vec<String> = words[k + 1..].iter().take_while(|w| !cut.contains(&w.as_str()) && !w.starts_with('#')).cloned().collect();
    let placeholder = |w: &String| w.chars().any(|c| c.is_ascii_uppercase()) && w.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit());
    let synopsis = args.iter().any(|w| w.starts_with('[') || w.starts_with('(') || w.contains("...") || placeholder(w));
    (args.first().is_some_and(|c| SUBCOMMANDS.contains(&c.as_str())) && !synopsis).then_some(args)
}

/// Words as a POSIX shell splits them, single and double quotes removed (no expansions).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// Every `rnnlens` command shown in README.md and docs/*.md names a subcommand and options
/// this binary has, with values they accept: each is parsed with `--help` appended, which
/// prints the help (exit 0) only once everything before it parsed. What a command prints is
/// checked where a script runs it (README.md, docs/python.md, docs/paper.md).
#[test]
fn every_documented_command_line_parses() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "md")).collect();
    docs.sort();
    files.extend(docs);
    let (mut checked, mut failed) = (0, Vec::new());
    for f in &files {
        for (line, args) in command_lines(&std::fs::read_to_string(f).unwrap()) {
            let o = Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(&args).arg("--help").output().unwrap();
            checked += 1;
            if !o.status.success() {
                let err = String::from_utf8_lossy(&o.stderr);
                failed.push(format!("{}:{line}: rnnlens {}\n  {}", f.strip_prefix(root).unwrap().display(), args.join(" "), err.lines().next().unwrap_or("")));
            }
        }
    }
    assert!(checked >= 40, "only {checked} command lines found: the extraction missed them");
    assert!(failed.is_empty(), "{} of {checked} documented command lines do not parse:\n{}", failed.len(), failed.join("\n"));
}

#[test]
fn command_lines_are_read_as_the_shell_reads_them() {
    let md = "text rnnlens train --x, `rnnlens bench | head` and `rnnlens train --cell NAME`, `rnnlens\nparams --cell gru`\n```\n$ rnnlens eval --checkpoint 'a b' --split test | head  # note\nrnnlens task copy \\\n  --steps 3 > out.txt\n./target/release/rnnlens sample --prime \"the cat\" || true\nrnnlens serve: open http://x\nrnnlens eval --checkpoint DIR [--seed S]\n```\n";
    let got = command_lines(md);
    let want: Vec<(usize, Vec<String>)> = vec![
        (1, ["bench"].map(String::from).to_vec()),
        (1, ["params", "--cell", "gru"].map(String::from).to_vec()),
        (4, ["eval", "--checkpoint", "a b", "--split", "test"].map(String::from).to_vec()),
        (5, ["task", "copy", "--steps", "3"].map(String::from).to_vec()),
        (7, ["sample", "--prime", "the cat"].map(String::from).to_vec()),
    ];
    assert_eq!(got, want);
}

/// docs/cells.md names every registered cell in its overview (the `config.json` it writes) and
/// in its surfaces table (where it runs), so that a cell added to the registry without its
/// docs row fails here.
#[test]
fn every_registered_cell_has_its_rows_in_docs_cells() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cells.md")).unwrap();
    let section = |title: &str| -> String {
        let start = text.find(title).unwrap_or_else(|| panic!("docs/cells.md has no {title}"));
        let rest = &text[start + title.len()..];
        rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
    };
    let first_cells = |table: &str| -> Vec<String> {
        table.lines().filter(|l| l.starts_with("| `")).map(|l| l.split('|').nth(1).unwrap().to_string()).collect()
    };
    let (overview, surfaces) = (first_cells(&section("## Overview")), first_cells(&section("## Surfaces")));
    for name in rnnlens::cells::registry::names() {
        let cell = format!("`{name}`");
        assert!(overview.iter().any(|c| c.trim() == cell), "docs/cells.md's overview has no row for {name}");
        assert!(surfaces.iter().any(|c| c.split(", ").any(|x| x.trim() == cell)), "docs/cells.md's surfaces table has no row for {name}");
    }
}

/// A shape as docs/cells.md writes it (`4H`, `D+H`, `K,H,H`) at these sizes.
fn doc_shape(expr: &str, size: &dyn Fn(char) -> usize) -> Option<Vec<usize>> {
    expr.split(',')
        .map(|dim| {
            dim.trim().split('+').map(|term| {
                let (num, letter) = term.trim().split_at(term.trim().len() - 1);
                let k = if num.is_empty() { 1 } else { num.parse().ok()? };
                Some(k * size(letter.chars().next()?))
            }).sum::<Option<usize>>()
        })
        .collect()
}

/// docs/cells.md is the one place a cell's tensors are written down (docs/checkpoint.md points
/// there): each section's "Tensors:" line names every tensor the registry gives each of the
/// section's cells, in every variant (`registry::variants`), with its shape, and nothing more
/// than a projection's `W_proj` or what it says an option leaves out.
#[test]
fn the_documented_tensors_are_the_registrys() {
    use rnnlens::cells::registry::{names, reads_tokens, variants};
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cells.md")).unwrap();
    let sections: Vec<&str> = text.split("\n## ").skip(1).collect();
    // the backticked `NAME [SHAPE]` of a section's Tensors line, with what follows each
    let listed = |section: &str| -> Vec<(String, String, String)> {
        let Some(start) = section.find("- Tensors:") else { return Vec::new() };
        let line = &section[start..];
        let line = &line[..line[2..].find("\n- ").map_or(line.len(), |i| i + 2)];
        let parts: Vec<&str> = line.split('`').collect();
        (1..parts.len()).step_by(2).filter_map(|i| {
            let (name, shape) = parts[i].split_once(" [")?;
            // the model's own tensors (`decoder.weight`), named beside a cell's, are not the cell's
            (!name.contains('.')).then_some(())?;
            Some((name.to_string(), shape.strip_suffix(']')?.to_string(), parts.get(i + 1).unwrap_or(&"").to_string()))
        }).collect()
    };
    let rwa = listed(sections.iter().find(|s| s.starts_with("RWA")).unwrap());
    let mut checked = std::collections::BTreeSet::new();
    for section in &sections {
        let heading = section.lines().next().unwrap();
        let cells: Vec<&str> = names().filter(|n| heading.contains(&format!("`{n}`"))).collect();
        let mut docs = listed(section);
        if section.contains("the `rwa` tensors plus") {
            docs.extend(rwa.clone());
        }
        // a section about cells that is not one's own (a comparison, a note) lists no tensors
        for v in variants().into_iter().filter(|v| cells.contains(&v.name) && !docs.is_empty()) {
            let symbols = reads_tokens(v.name);
            let (d, h, p) = (if symbols { 3 } else { 7 }, 5, 3);
            let size = |c: char| match c {
                'D' | 'K' => d,
                'H' => h,
                'P' => p,
                'R' => if v.projection.is_some() { p } else { h },
                _ => panic!("docs/cells.md: an unknown size {c} in {heading:?}"),
            };
            let cell = v.cell(d, h).unwrap();
            let reg: Vec<(String, Vec<usize>)> = cell.tensors().iter().map(|t| (t.name.clone(), t.shape.clone())).collect();
            let doc: Vec<(String, Vec<usize>, bool)> = docs
                .iter()
                .map(|(n, s, after)| {
                    let optional = n == "W_proj" || after.contains("absent for");
                    (n.clone(), doc_shape(s, &size).unwrap_or_else(|| panic!("{heading:?}: shape {s}")), optional)
                })
                .collect();
            for (n, s) in &reg {
                assert!(doc.iter().any(|(dn, ds, _)| dn == n && ds == s), "{v}: tensor {n} {s:?} is not in docs/cells.md's {heading:?} (it lists {docs:?})");
            }
            for (n, s, optional) in &doc {
                assert!(*optional || reg.iter().any(|(rn, rs)| rn == n && rs == s), "{v}: docs/cells.md's {heading:?} lists {n} {s:?}, which the cell does not have");
            }
            checked.insert(v.name);
        }
    }
    assert_eq!(checked.len(), names().count(), "cells without a section of their own in docs/cells.md: {:?}", names().filter(|n| !checked.contains(n)).collect::<Vec<_>>());
}

/// A threshold row's check on fresh sequences is shown to enough places that a model below the
/// threshold never reads as at it (0.9898 against Table 6's 0.99, 0.9986 against Table 5's 0.999,
/// a loss of 0.00104 against Table 1's 0.001), a loss as `rnnlens eval` printed it (0.001995, not
/// 0.00199 or 0.00200).
#[test]
fn a_fresh_accuracy_below_its_threshold_never_rounds_up_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = paper_py(
        r##"
for acc in (0.9898, 0.9986, 0.841):
    print("fresh", acc, p.fresh_text({"fresh": {"accuracy": acc, "loss": 0.05}}))
for loss in (0.00104, 0.001995):
    print("fresh loss", loss, p.fresh_text({"fresh": {"accuracy": None, "loss": loss}}))
"##,
        dir.path(),
    );
    for (acc, threshold) in [("0.9898", "0.990"), ("0.9986", "0.999")] {
        let line = out.lines().find(|l| l.starts_with(&format!("fresh {acc} "))).unwrap_or_else(|| panic!("{out}"));
        assert!(line.contains(&format!("accuracy {acc}")) && !line.contains(&format!("accuracy {threshold}")), "{line}");
    }
    for (loss, shown) in [("0.00104", "0.001040"), ("0.001995", "0.001995")] {
        let line = out.lines().find(|l| l.starts_with(&format!("fresh loss {loss} "))).unwrap_or_else(|| panic!("{out}"));
        assert!(line.contains(&format!("(fresh: loss {shown})")), "{line}");
    }
}
