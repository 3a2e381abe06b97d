//! The command line end to end: parameter counts of the papers, training, checkpoint round
//! trips, exact resume, and clear errors for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rnnlens(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(args).output().expect("run rnnlens")
}

fn ok(args: &[&str]) -> String {
    let out = rnnlens(args);
    assert!(out.status.success(), "rnnlens {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let out = rnnlens(args);
    assert!(!out.status.success(), "rnnlens {args:?} should have failed");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "rnnlens {args:?} panicked:\n{err}");
    // An abort (an allocation that failed) ends by a signal, with no exit code.
    assert!(out.status.code().is_some(), "rnnlens {args:?} was killed ({:?}):\n{err}", out.status);
    err
}

fn params(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["params", "--json"];
    a.extend_from_slice(args);
    serde_json::from_str(&ok(&a)).unwrap()
}

#[test]
fn parameter_counts_match_the_papers() {
    // Later RAN paper, table 1: d_i = 256, d_h = 1024 (docs/paper.md shows these beside the
    // paper's counts, scripts/paper.py's `params`).
    for (cell, want) in [("rnn", 1_312_768), ("gru", 3_938_304), ("lstm", 5_251_072), ("ran-tanh", 2_886_656), ("ran-identity", 2_886_656)] {
        let v = params(&["--cell", cell, "--input-size", "256", "--hidden-size", "1024"]);
        assert_eq!(v["recurrent"], want, "{cell}");
    }
    // First RAN paper: PTB medium and large, billion-word with projection; its RANs without
    // the content layer's bias (its eq. (1), its configs: `--ran-content-bias false`), the
    // LSTM's counts the same either way.
    let medium = ["--input-size", "650", "--hidden-size", "650,650", "--ran-content-bias", "false"];
    let large = ["--input-size", "1500", "--hidden-size", "1500,1500", "--ran-content-bias", "false"];
    let bw = ["--input-size", "512", "--hidden-size", "2048", "--projection-size", "512", "--ran-gates", "h", "--ran-content-bias", "false"];
    for (cell, args, want) in [
        ("lstm", &medium[..], 6_770_400),
        ("ran-tanh", &medium[..], 4_227_600),
        ("lstm", &large[..], 36_024_000),
        ("ran-tanh", &large[..], 22_506_000),
        ("lstm", &bw[..], 9_453_568),
        ("ran-tanh", &bw[..], 6_295_552),
        // (docs/paper.md's rows not run yet show these beside the paper's counts)
        ("ran-identity", &medium[..], 4_227_600),
        ("ran-identity", &large[..], 22_506_000),
        ("ran-identity", &bw[..], 6_295_552),
        ("ran-tanh", &["--input-size", "128", "--hidden-size", "1024,1024,2048", "--ran-content-bias", "false"][..], 22_421_504),
        // with b_c, a vector of H a layer more (the later paper's form)
        ("ran-tanh", &large[..4], 22_509_000),
    ] {
        let mut a = vec!["--cell", cell];
        a.extend_from_slice(args);
        assert_eq!(params(&a)["recurrent"], want, "{cell} {args:?}");
    }
    let v = params(&["--cell", "ran-tanh", "--input-size", "650", "--hidden-size", "650,650", "--vocab-size", "10000"]);
    assert_eq!(v["embedding"], 6_500_000);
    assert_eq!(v["decoder"], 6_510_000);
    assert_eq!(v["total"], 4_228_900 + 6_500_000 + 6_510_000);
    // ISAN paper: 27 symbols, 216 units, every parameter counted (readout and h0 included);
    // abbreviated flags as the paper's readers type them.
    let isan: serde_json::Value = serde_json::from_str(&ok(&["params", "--json", "--cell", "isan", "--vocab", "27", "--hidden", "216"])).unwrap();
    assert_eq!(isan["total"], 1_271_619);
    assert_eq!(isan["embedding"], 0);
    // Later RAN paper, table 2: the LSTM with the RAN's simplified content layer, 4.20M; and
    // the first version's link, the LSTM without an output gate (not in the table: docs/paper.md
    // shows its count beside "the paper gives none").
    let simple = params(&["--cell", "lstm-simple-content", "--input-size", "256", "--hidden-size", "1024"]);
    assert_eq!(simple["recurrent"], 4_198_400);
    let no_output = params(&["--cell", "lstm-no-output-gate", "--input-size", "256", "--hidden-size", "1024"]);
    assert_eq!(no_output["recurrent"], 3_935_232);
    // The human-readable form groups digits.
    assert!(ok(&["params", "--cell", "lstm", "--input-size", "256", "--hidden-size", "1024"]).contains("5,251,072"));
}

/// A small corpus with structure a tiny model can learn.
fn corpus(dir: &Path) -> PathBuf {
    let words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red", "house"];
    let mut s = String::new();
    let mut x: u64 = 7;
    for line in 0..600 {
        for i in 0..(5 + line % 7) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let w = if i % 2 == 0 { words[(x >> 33) as usize % 4] } else { words[4 + (x >> 33) as usize % 9] };
            s.push_str(w);
            s.push(' ');
        }
        s.push_str(".\n");
    }
    let p = dir.join("tiny.txt");
    std::fs::write(&p, s).unwrap();
    p
}

fn train_args<'a>(data: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "train", "--data", data, "--level", "char", "--embedding-size", "8", "--hidden-size", "16", "--batch-size", "4",
        "--bptt", "12", "--out", out, "--threads", "1", "--sample-length", "0", "--quiet", "--dropout", "0.1",
        "--rec-dropout", "0.1",
    ];
    a.extend_from_slice(extra);
    a
}

fn file(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn resumed_training_is_bit_identical_to_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    for cell in ["ran-tanh", "lstm"] {
        let full = tmp.path().join(format!("full-{cell}"));
        let part = tmp.path().join(format!("part-{cell}"));
        let (full_s, part_s) = (full.to_str().unwrap(), part.to_str().unwrap());
        // Two epochs straight through.
        ok(&train_args(data, full_s, &["--cell", cell, "--epochs", "2"]));
        // The same run stopped twice (inside the first epoch, then inside the second) and resumed.
        ok(&train_args(data, part_s, &["--cell", cell, "--epochs", "2", "--max-steps", "37"]));
        ok(&["train", "--resume", part_s, "--epochs", "2", "--max-steps", "600", "--quiet", "--threads", "1"]);
        ok(&["train", "--resume", part_s, "--epochs", "2", "--max-steps", "1000000", "--quiet", "--threads", "1"]);
        let a = file(&full.join("model.safetensors"));
        let b = file(&part.join("model.safetensors"));
        assert!(a == b, "{cell}: resumed weights differ from the uninterrupted run");
        assert_eq!(file(&full.join("trainer.safetensors")), file(&part.join("trainer.safetensors")));
        // And the same seed and thread count give the same weights again.
        let again = tmp.path().join(format!("again-{cell}"));
        ok(&train_args(data, again.to_str().unwrap(), &["--cell", cell, "--epochs", "2"]));
        assert!(a == file(&again.join("model.safetensors")), "{cell}: training is not deterministic");
    }
}

/// `--clip-norm 0` turns the norm's clipping off (the RDA paper clips values alone): a run with
/// it trains the weights of a run whose norm limit is never reached, not those of one that
/// rescales every step; and the log names the kernels that ran the products.
#[test]
fn clip_norm_zero_clips_values_alone_and_the_log_names_the_products_kernels() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    let weights = |name: &str, norm: &str| -> (Vec<u8>, String) {
        let out = tmp.path().join(name);
        let args = train_args(data, out.to_str().unwrap(), &["--max-steps", "6", "--clip-value", "0.5", "--clip-norm", norm]);
        let args: Vec<&str> = args.into_iter().filter(|a| *a != "--quiet").collect();
        let r = rnnlens(&args);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        (file(&out.join("model.safetensors")), String::from_utf8_lossy(&r.stderr).into_owned())
    };
    let (off, log) = weights("off", "0");
    assert!(off == weights("far", "1e30").0, "--clip-norm 0 clipped the norm");
    assert!(off != weights("tight", "1e-3").0, "a norm limit of 1e-3 changed nothing: the test cannot tell");
    assert!(log.lines().any(|l| l.starts_with("products: f32 on ")), "{log}");
    let e = fails(&["train", "--clip-norm=-1", "--out", tmp.path().join("x").to_str().unwrap()]);
    assert!(e.contains("clip_norm must be a finite number >= 0"), "{e}");
}

/// A run's metrics.jsonl without the wall times (which differ between runs), one value a line.
fn metrics_sans_time(dir: &Path) -> Vec<serde_json::Value> {
    String::from_utf8(file(&dir.join("metrics.jsonl")))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v["kind"] == "baseline" || v["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{l}");
            v.as_object_mut().unwrap().remove("seconds");
            v
        })
        .collect()
}

#[test]
fn metrics_and_curves_continue_across_a_resume_without_gaps_or_repeats() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    let full = tmp.path().join("full");
    let part = tmp.path().join("part");
    let (full_s, part_s) = (full.to_str().unwrap(), part.to_str().unwrap());
    ok(&train_args(data, full_s, &["--cell", "lstm", "--epochs", "2", "--valid-every", "40"]));
    // Stopped at step 150 (a training report falls there anyway) and resumed to the end of its
    // epochs (a larger --max-steps; tests/crash.rs checks that no flag keeps the saved one).
    ok(&train_args(data, part_s, &["--cell", "lstm", "--epochs", "2", "--max-steps", "150", "--valid-every", "40"]));
    let first = metrics_sans_time(&part);
    assert_eq!(first.last().unwrap()["kind"], "valid", "a stopped run measures where it stopped");
    assert_eq!(first.last().unwrap()["step"], 150);
    ok(&["train", "--resume", part_s, "--quiet", "--threads", "1", "--max-steps", "1000000"]);

    let a = metrics_sans_time(&full);
    let b = metrics_sans_time(&part);
    assert_eq!(&b[..first.len()], &first[..], "the resumed run kept the history it was given");
    // The resumed history is the uninterrupted one plus the measurement where it stopped.
    let extra: Vec<&serde_json::Value> = b.iter().filter(|r| !a.contains(r)).collect();
    assert_eq!(extra.len(), 1, "{extra:?}");
    assert_eq!((extra[0]["kind"].as_str(), extra[0]["step"].as_u64()), (Some("valid"), Some(150)));
    assert_eq!(b.iter().filter(|r| *r != extra[0]).cloned().collect::<Vec<_>>(), a);

    // The uninterrupted history: the unigram baseline first, a training report every 10 steps
    // and at each epoch's end, a validation every 40 steps and after each epoch, steps
    // increasing, nothing twice.
    assert_eq!(a[0]["kind"], "baseline");
    assert_eq!(a.iter().filter(|r| r["kind"] == "baseline").count(), 1);
    let steps = |kind: &str| a.iter().filter(|r| r["kind"] == kind).map(|r| r["step"].as_u64().unwrap()).collect::<Vec<_>>();
    let (train, valid) = (steps("train"), steps("valid"));
    let epoch_end = |e: u64| a.iter().filter(|r| r["kind"] == "valid" && r["epoch"] == e).map(|r| r["step"].as_u64().unwrap()).max().unwrap();
    let (windows, end) = (epoch_end(1), epoch_end(2));
    let mut want: Vec<u64> = (1..=end / 40).map(|k| 40 * k).filter(|s| s % windows != 0).chain([windows, end]).collect();
    want.sort();
    assert_eq!(valid, want);
    let valid = [windows, end];
    let mut expected: Vec<u64> = (1..=end / 10).map(|k| 10 * k).collect();
    expected.extend(valid.iter().filter(|v| *v % 10 != 0));
    expected.sort();
    assert_eq!(train, expected);
    for r in a.iter().skip(1) {
        assert!(r["tokens"].as_u64().unwrap() == r["step"].as_u64().unwrap() * 4 * 12, "{r}");
        let loss = r.get("loss").or(r.get("nll")).and_then(|x| x.as_f64()).unwrap();
        assert!(loss.is_finite() && loss > 0.0, "{r}");
        if r["kind"] == "valid" {
            assert!(r.get("bpc").is_some() && r.get("perplexity").is_none(), "character level reports BPC: {r}");
        }
    }
    // Wall time goes on across the resume instead of starting again.
    let secs: Vec<f64> = String::from_utf8(file(&part.join("metrics.jsonl")))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["seconds"].as_f64())
        .collect();
    assert!(secs.windows(2).all(|w| w[1] >= w[0]), "{secs:?}");
    for d in [&full, &part] {
        let svg = String::from_utf8(file(&d.join("curves.svg"))).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 6, "training loss, validation and the unigram baseline, by step and by time");
        assert_eq!(svg.matches("stroke-dasharray").count(), 3, "the baseline dashed, in the legend and in both panels");
        assert!(svg.contains(">nats per token<") && svg.contains(">bits per character<"), "one unit on the left, BPC on the right");
    }

    // Two runs in one picture and one table.
    let pic = tmp.path().join("both.svg");
    let table = ok(&["curves", full_s, part_s, "--out", pic.to_str().unwrap()]);
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].starts_with("full ") && rows[1].starts_with("part "), "{table}");
    assert!(rows.iter().all(|r| r.contains(" lstm ") && r.contains(&end.to_string()) && r.contains(" bpc")), "{table}");
    let svg = String::from_utf8(file(&pic)).unwrap();
    assert_eq!(svg.matches("<polyline").count(), 10, "two runs in four panels, the baseline in the two of validation");
    assert!(svg.contains(">full (lstm)</text>") && svg.contains(">part (lstm)</text>"));
    let e = fails(&["curves", full_s, data, "--out", pic.to_str().unwrap()]);
    assert!(e.contains("is not a run directory"), "{e}");
}

#[test]
fn validation_that_finds_the_state_exploded_stops_the_run() {
    // A RAN with identity output at a high rate, its state carried across windows (not its
    // default): the training loss stays finite and small, but validation (one long stream per
    // row, the additive state carried through it) finds the
    // state grown without bound at the end of the second epoch. The run stops there, writing
    // nothing, instead of finishing with an infinite perplexity.
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("ran");
    let o = out.to_str().unwrap();
    let args = [
        "train", "--data", data.to_str().unwrap(), "--level", "char", "--embedding-size", "8", "--hidden-size", "32", "--batch-size",
        "4", "--bptt", "10", "--out", o, "--threads", "1", "--sample-length", "0", "--quiet", "--dropout", "0", "--cell",
        "ran-identity", "--ran-gates", "c", "--carry-state", "true", "--lr", "0.05", "--epochs", "2",
    ];
    let err = fails(&args);
    assert!(err.contains("the validation loss at step") && err.contains("training diverged") && err.contains("intact"), "{err}");
    let saved: serde_json::Value = serde_json::from_slice(&file(&out.join("trainer.json"))).unwrap();
    assert_eq!(saved["epoch"], 1, "the first epoch's checkpoint is the one kept");
    assert!(String::from_utf8(file(&out.join("metrics.jsonl"))).unwrap().lines().all(|l| !l.contains("inf")));
}

#[test]
fn a_run_that_diverges_before_its_first_checkpoint_says_none_was_saved() {
    // The same RAN at a rate that blows it up within the first windows: nothing had been
    // saved, and the message must not claim a checkpoint that does not exist.
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("ran");
    let args = [
        "train", "--data", data.to_str().unwrap(), "--level", "char", "--embedding-size", "8", "--hidden-size", "32", "--batch-size",
        "4", "--bptt", "10", "--out", out.to_str().unwrap(), "--threads", "1", "--sample-length", "0", "--quiet", "--dropout", "0",
        "--cell", "ran-identity", "--ran-gates", "c", "--carry-state", "true", "--lr", "1", "--epochs", "1",
    ];
    let err = fails(&args);
    assert!(err.contains("training diverged at step") && err.contains("no checkpoint had been saved"), "{err}");
    assert!(!err.contains("intact"), "{err}");
    assert!(!out.join("trainer.json").exists());
}

#[test]
fn the_ran_defaults_are_gates_on_h_and_a_state_carried_only_under_recurrent_dropout_and_are_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    // The RAN-tanh carries its state when the recurrent dropout is on (docs/lm.md), the
    // RAN-identity never by default.
    for (cell, rec, gates, carry) in [
        ("ran-tanh", "0", Some("h"), false),
        ("ran-tanh", "0.3", Some("h"), true),
        ("ran-identity", "0", Some("h"), false),
        ("ran-identity", "0.3", Some("h"), false),
        ("lstm", "0", None, true),
    ] {
        let out = tmp.path().join(format!("{cell}-{rec}"));
        let mut a = train_args(data, out.to_str().unwrap(), &["--cell", cell, "--max-steps", "3"]);
        let at = a.iter().position(|&x| x == "--rec-dropout").unwrap();
        a[at + 1] = rec;
        ok(&a);
        let t: serde_json::Value = serde_json::from_slice(&file(&out.join("trainer.json"))).unwrap();
        assert_eq!(t["config"]["carry_state"], carry, "{cell} rec dropout {rec}: trainer.json records what the run did");
        let c: serde_json::Value = serde_json::from_slice(&file(&out.join("config.json"))).unwrap();
        if let Some(g) = gates {
            assert_eq!(c["layers"][0]["options"]["gates"], g, "{cell}");
        }
    }
    // Either can be asked for.
    let out = tmp.path().join("literal");
    ok(&train_args(data, out.to_str().unwrap(), &["--cell", "ran-tanh", "--ran-gates", "c", "--carry-state", "true", "--max-steps", "3"]));
    let t: serde_json::Value = serde_json::from_slice(&file(&out.join("trainer.json"))).unwrap();
    assert_eq!(t["config"]["carry_state"], true);
    let c: serde_json::Value = serde_json::from_slice(&file(&out.join("config.json"))).unwrap();
    assert_eq!(c["layers"][0]["options"]["gates"], "c");
}

#[test]
fn a_checkpoint_round_trips_with_identical_per_token_log_probs() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("ck");
    let out_s = out.to_str().unwrap();
    ok(&train_args(data.to_str().unwrap(), out_s, &["--cell", "gru", "--max-steps", "20"]));
    let lp1 = tmp.path().join("lp1.txt");
    let text = tmp.path().join("eval.txt");
    std::fs::write(&text, "the cat sat on a mat .\nthe dog ran to a big red house .\n").unwrap();
    let r1 = ok(&["eval", "--checkpoint", out_s, "--input", text.to_str().unwrap(), "--per-token", lp1.to_str().unwrap()]);

    // Load, save to a new directory through the library, and evaluate that copy.
    let lm = rnnlens::model::lm::Lm::load(&out).unwrap();
    let copy = tmp.path().join("copy");
    lm.save(&copy).unwrap();
    let lp2 = tmp.path().join("lp2.txt");
    let r2 = ok(&["eval", "--checkpoint", copy.to_str().unwrap(), "--input", text.to_str().unwrap(), "--per-token", lp2.to_str().unwrap()]);
    assert_eq!(r1, r2);
    let (a, b) = (std::fs::read_to_string(&lp1).unwrap(), std::fs::read_to_string(&lp2).unwrap());
    assert_eq!(a, b);
    for f in ["config.json", "model.safetensors", "vocab.txt"] {
        assert_eq!(file(&out.join(f)), file(&copy.join(f)), "{f} differs after a round trip");
    }
    // One line per scored token (all but the first of 56 characters), each a log-probability,
    // and their mean is the reported NLL; beside each, the character it scores (escaped as in
    // vocab.txt: the newline as \n).
    let lps: Vec<f64> = a.lines().map(|l| l.split('\t').next().unwrap().parse().unwrap()).collect();
    assert_eq!(lps.len(), text.metadata().unwrap().len() as usize - 1);
    let scored: String = a.lines().map(|l| l.split_once('\t').unwrap().1.replace("\\n", "\n")).collect();
    assert_eq!(scored, &std::fs::read_to_string(&text).unwrap()[1..]);
    assert!(lps.iter().all(|&x| x <= 0.0 && x.is_finite()));
    let mean = -lps.iter().sum::<f64>() / lps.len() as f64;
    assert!(r1.contains(&format!("mean NLL {mean:.5}")), "{r1} vs {mean}");
}

#[test]
fn training_beats_the_unigram_baseline_and_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("m");
    let out_s = out.to_str().unwrap();
    let a = [
        "train", "--data", data.to_str().unwrap(), "--level", "word", "--embedding-size", "16", "--hidden-size", "32",
        "--batch-size", "8", "--bptt", "10", "--out", out_s, "--epochs", "3", "--lr", "0.01", "--sample-length", "12",
        "--dropout", "0",
    ];
    let stdout = ok(&a);
    let num = |key: &str| -> f64 {
        let line = stdout.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no '{key}' in {stdout}"));
        line.split("perplexity ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    let (valid, unigram) = (num("validation"), num("unigram baseline"));
    // The corpus alternates two word classes; a model that learned that is far better than unigram.
    assert!(valid < 0.75 * unigram, "valid {valid} vs unigram {unigram}");
    assert!(stdout.contains("sample: "));
    let s = ok(&["sample", "--checkpoint", out_s, "--prime", "the cat", "--length", "5", "--seed", "3"]);
    assert!(s.starts_with("the cat "), "{s}");
    assert_eq!(s, ok(&["sample", "--checkpoint", out_s, "--prime", "the cat", "--length", "5", "--seed", "3"]));
    let bad = fails(&["sample", "--checkpoint", out_s, "--inverse-temperature", "-1"]);
    assert!(bad.contains("inverse temperature"), "{bad}");
}

#[test]
fn bad_input_gives_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let out = t.join("o");
    let out_s = out.to_str().unwrap();
    let missing = t.join("nope.txt");
    let e = fails(&train_args(missing.to_str().unwrap(), out_s, &[]));
    assert!(e.contains("nope.txt"), "{e}");

    let empty = t.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let e = fails(&train_args(empty.to_str().unwrap(), out_s, &[]));
    assert!(e.contains("empty"), "{e}");

    let bad_utf8 = t.join("bad.txt");
    std::fs::write(&bad_utf8, b"hello \xff world\n".repeat(200)).unwrap();
    let e = fails(&train_args(bad_utf8.to_str().unwrap(), out_s, &[]));
    assert!(e.contains("UTF-8") && e.contains("offset"), "{e}");

    let short = t.join("short.txt");
    std::fs::write(&short, "abc\n").unwrap();
    let e = fails(&train_args(short.to_str().unwrap(), out_s, &[]));
    assert!(e.contains("too short") || e.contains("too small"), "{e}");

    let e = fails(&["train", "--cell", "gru", "--projection-size", "8", "--out", out_s]);
    assert!(e.contains("projection"), "{e}");
    let e = fails(&["train", "--batch-size", "0", "--out", out_s]);
    assert!(e.contains("positive"), "{e}");
    // Each engine's mixed precision is its own: f16 is the GPU's.
    let e = fails(&["train", "--precision", "f16", "--out", out_s]);
    assert!(e.contains("f16 is the GPU engine's") && e.contains("--device gpu"), "{e}");
    let e = fails(&["task", "addition", "--steps", "1", "--precision", "f16", "--out", out_s]);
    assert!(e.contains("f16 is the GPU engine's"), "{e}");
    let cfg = t.join("c.toml");
    std::fs::write(&cfg, "hidden_size = [16]\nbogus_key = 1\n").unwrap();
    let e = fails(&["train", "--config", cfg.to_str().unwrap(), "--out", out_s]);
    assert!(e.contains("c.toml") && e.contains("bogus_key"), "{e}");
    // NaN and infinity, which the configuration's JSON form cannot hold, are named.
    let e = fails(&["train", "--lr", "nan", "--out", out_s]);
    assert!(e.contains("--lr: not a finite number"), "{e}");
    let e = fails(&["train", "--clip-norm", "inf", "--out", out_s]);
    assert!(e.contains("--clip-norm: not a finite number"), "{e}");
    std::fs::write(&cfg, "hidden_size = [16]\nlr = nan\n").unwrap();
    let e = fails(&["train", "--config", cfg.to_str().unwrap(), "--out", out_s]);
    assert!(e.contains("c.toml: lr = nan is not a finite number"), "{e}");
    let e = fails(&["task", "addition", "--lr", "nan", "--steps", "1", "--out", out_s]);
    assert!(e.contains("--lr must be a positive number"), "{e}");
    let e = fails(&["task", "addition", "--clip=-1", "--steps", "1", "--out", out_s]);
    assert!(e.contains("--clip must be a number >= 0"), "{e}");
    let e = fails(&["task", "addition", "--cell", "gru", "--s0-std", "1", "--steps", "1", "--out", out_s]);
    assert!(e.contains("--s0-std draws a learned initial state") && e.contains("gru has none"), "{e}");

    let e = fails(&["eval", "--checkpoint", t.join("nockpt").to_str().unwrap(), "--input", short.to_str().unwrap()]);
    assert!(e.contains("nockpt"), "{e}");

    // A checkpoint whose vocabulary no longer matches its embedding.
    let data = corpus(t);
    ok(&train_args(data.to_str().unwrap(), out_s, &["--max-steps", "2"]));
    let vocab = std::fs::read_to_string(out.join("vocab.txt")).unwrap();
    std::fs::write(out.join("vocab.txt"), format!("{vocab}Z\n")).unwrap();
    let e = fails(&["eval", "--checkpoint", out_s, "--input", data.to_str().unwrap()]);
    assert!(e.contains("vocab"), "{e}");
    std::fs::write(out.join("vocab.txt"), vocab).unwrap();
    // Unknown character in an evaluated file at char level.
    let odd = t.join("odd.txt");
    std::fs::write(&odd, "the cat ☃ sat\n").unwrap();
    let e = fails(&["eval", "--checkpoint", out_s, "--input", odd.to_str().unwrap()]);
    assert!(e.contains('☃') || e.contains("U+2603"), "{e}");
    // --resume cannot silently change the model.
    let e = fails(&["train", "--resume", out_s, "--hidden-size", "32"]);
    assert!(e.contains("--hidden-size"), "{e}");
    // A truncated model file.
    let m = file(&out.join("model.safetensors"));
    std::fs::write(out.join("model.safetensors"), &m[..m.len() / 2]).unwrap();
    let e = fails(&["sample", "--checkpoint", out_s]);
    assert!(e.contains("model.safetensors"), "{e}");
}

#[test]
fn bench_writes_its_csv_and_rejects_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("bench.csv");
    // A reduced c1 (batch 4, window 10) keeps this to a fraction of a second.
    let args = ["bench", "--shapes", "c1", "--cells", "ran-tanh", "--steps", "1", "--warmup", "0", "--batch", "4", "--window", "10", "--quiet", "--threads", "1"];
    let mut a = args.to_vec();
    a.extend(["--csv", csv.to_str().unwrap()]);
    let out = ok(&a);
    assert!(out.contains("flush-to-zero") && out.contains("peak RSS") && out.contains("machine limit: ") && out.contains("memory limit: "), "{out}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("impl,shape,cell,mode,threads,batch,window,tokens_per_s,step_ms_median,gemm_gflop_per_step,achieved_gflops,peak_gflops,ranks,allreduce_ms_median,prod_in_step_ms")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{text}");
    for (row, mode) in rows.iter().zip(["train", "infer"]) {
        assert_eq!(row[..7], ["rnnlens", "c1", "ran-tanh", mode, "1", "4", "10"]);
        let tps: f64 = row[7].parse().unwrap();
        assert!(tps > 0.0 && tps.is_finite(), "{text}");
        let gflop: f64 = row[9].parse().unwrap();
        assert!(gflop > 0.0, "{text}");
        // The step products were recorded as per-thread calls and timed that way too.
        let peak: f64 = row[11].parse().unwrap();
        assert!(peak > 0.0 && peak.is_finite(), "{text}");
        // One process: no gradient sum.
        assert_eq!(row[12..14], ["1", ""], "{text}");
        // The products' time where they ran: measured, and no longer than the step.
        let (step, in_step): (f64, f64) = (row[8].parse().unwrap(), row[14].parse().unwrap());
        assert!(in_step > 0.0 && in_step <= step, "{text}");
    }

    let e = fails(&["bench", "--shapes", "c9"]);
    assert!(e.contains("unknown shape"), "{e}");
    let e = fails(&["bench", "--cells", "transformer"]);
    assert!(e.contains("unknown cell"), "{e}");
    let e = fails(&["bench", "--shapes", "c1", "--cells", "isan"]);
    assert!(e.contains("isan shape"), "{e}");
    let e = fails(&["bench", "--steps", "0"]);
    assert!(e.contains("--steps"), "{e}");
    let e = fails(&["bench", "--mode", "sideways"]);
    assert!(e.contains("mode"), "{e}");
    // Sizes no machine holds are refused with the estimate, where they aborted in the allocator.
    let huge = ["--cells", "lstm", "--steps", "1", "--warmup", "0", "--no-peak", "--quiet"];
    for (shape, size, value) in [("c1", "--batch", "100000000"), ("c1", "--window", "1000000000"), ("c3", "--batch", "10000000")] {
        let e = fails(&[&["bench", "--shapes", shape, size, value][..], &huge[..]].concat());
        assert!(e.contains("needs about") && e.contains("choose a smaller --batch"), "{e}");
    }
}

#[test]
fn more_threads_than_cpus_are_allowed_and_said() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run = |threads: usize| {
        let t = threads.to_string();
        let args = ["bench", "--shapes", "c1", "--cells", "rnn", "--steps", "1", "--warmup", "0", "--batch", "2", "--window", "2", "--no-peak", "--quiet", "--threads", &t];
        let o = rnnlens(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let over = run(cpus + 1);
    assert!(over.contains(&format!("warning: {} threads on {cpus} CPUs", cpus + 1)), "{over}");
    assert!(!run(cpus).contains("threads on"), "no warning at the machine's own count");
}

/// Training with a sampled softmax is deterministic, resumes exactly, labels its loss as the
/// sampled one, and learns: the (full-softmax) validation perplexity falls far below its start.
#[test]
fn sampled_softmax_training_is_deterministic_and_learns() {
    let tmp = tempfile::tempdir().unwrap();
    // 80 words in two classes that alternate: 10 at even positions, 70 at odd ones, so that a
    // batch's targets leave most of the vocabulary to the draws.
    let mut s = String::new();
    let mut x: u64 = 11;
    for line in 0..500 {
        for i in 0..(6 + line % 5) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = (x >> 33) as usize;
            s.push_str(&if i % 2 == 0 { format!("e{} ", r % 10) } else { format!("o{} ", r % 70) });
        }
        s.push('\n');
    }
    let data = tmp.path().join("words.txt");
    std::fs::write(&data, s).unwrap();
    let data = data.to_str().unwrap();
    let run = |name: &str, extra: &[&str]| -> (Output, PathBuf) {
        let out = tmp.path().join(name);
        let mut a = vec![
            "train", "--data", data, "--level", "word", "--embedding-size", "16", "--hidden-size", "32", "--batch-size", "4",
            "--bptt", "10", "--threads", "1", "--sample-length", "0", "--dropout", "0", "--lr", "0.01",
            "--sampled-softmax", "8", "--out", out.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        let o = rnnlens(&a);
        assert!(o.status.success(), "{a:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
        (o, out)
    };
    let ppl = |o: &Output| -> f64 {
        let s = String::from_utf8_lossy(&o.stdout);
        let line = s.lines().find(|l| l.starts_with("validation")).unwrap_or_else(|| panic!("no validation in {s}"));
        line.split("perplexity ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    let (start, _) = run("start", &["--max-steps", "0", "--quiet"]);
    let (trained, a) = run("a", &["--epochs", "2"]);
    let err = String::from_utf8_lossy(&trained.stderr);
    assert!(err.contains("train sampled loss"), "the training loss is not labelled as sampled:\n{err}");
    let (p0, p1) = (ppl(&start), ppl(&trained));
    assert!(p1 < 0.6 * p0, "validation perplexity {p0} → {p1}");
    let (_, b) = run("b", &["--epochs", "2", "--quiet"]);
    assert!(file(&a.join("model.safetensors")) == file(&b.join("model.safetensors")), "sampled training is not deterministic");
    // Stopped inside the first epoch and resumed: the same draws, the same weights.
    let (_, c) = run("c", &["--epochs", "2", "--max-steps", "23", "--quiet"]);
    ok(&["train", "--resume", c.to_str().unwrap(), "--epochs", "2", "--max-steps", "1000000", "--quiet", "--threads", "1"]);
    assert!(file(&a.join("model.safetensors")) == file(&c.join("model.safetensors")), "a resumed sampled run differs");
    let e = fails(&["train", "--resume", c.to_str().unwrap(), "--sampled-softmax", "16"]);
    assert!(e.contains("--sampled-softmax"), "{e}");
}

#[test]
fn task_saves_each_trained_model_and_refuses_a_directory_it_would_clobber() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let run = ["task", "parentheses", "--compare", "gru,isan", "--length", "12", "--hidden-size", "4", "--batch-size", "4", "--steps", "2", "--threads", "1", "--out", out];
    ok(&run);
    for cell in ["gru", "isan"] {
        let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join(cell).join("config.json")).unwrap()).unwrap();
        assert_eq!(config["task"]["name"], "parentheses", "{cell}");
        assert_eq!(config["task"]["length"], 12, "{cell}");
        assert!(dir.path().join(cell).join("model.safetensors").exists());
    }
    assert!(dir.path().join("table.csv").exists());
    // A rerun is refused, naming the ways on; asked to, it replaces the checkpoints; a
    // directory holding anything else is refused before any training, and keeps its files.
    let err = fails(&run);
    assert!(err.contains("holds a task run (parentheses of gru,isan)") && err.contains("--resume") && err.contains("--overwrite"), "{err}");
    assert!(!err.contains("task parentheses:"), "it started before refusing: {err}");
    let run: Vec<&str> = run.iter().copied().chain(["--overwrite"]).collect();
    ok(&run);
    std::fs::write(dir.path().join("isan").join("notes.txt"), "mine").unwrap();
    let err = fails(&run);
    assert!(err.contains("refusing") && err.contains("notes.txt"), "{err}");
    assert!(!err.contains("steps in"), "it trained before refusing: {err}");
    assert_eq!(std::fs::read_to_string(dir.path().join("isan").join("notes.txt")).unwrap(), "mine");
}

/// The progress a task run saved for `cell` in `out`: (step, finished).
fn task_progress(out: &Path, cell: &str) -> Option<(u64, bool)> {
    let text = std::fs::read_to_string(out.join(cell).join("trainer.task.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((v["step"].as_u64()?, v["finished"].as_bool()?))
}

#[test]
fn a_task_run_killed_partway_and_resumed_ends_bit_identical_to_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let args = |out: &Path| -> Vec<String> {
        let mut v: Vec<String> = "task copy --length 100 --hidden-size 64 --batch-size 32 --steps 600 --save-every 20 --threads 1 --seed 3".split(' ').map(String::from).collect();
        v.extend(["--out".to_string(), out.to_str().unwrap().to_string()]);
        v
    };
    let a_args = args(&a);
    ok(&a_args.iter().map(String::as_str).collect::<Vec<_>>());
    // The same run, killed (SIGKILL: nothing of it runs after) once it has saved past step 60.
    let mut child = Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(args(&b)).stderr(std::process::Stdio::null()).spawn().unwrap();
    let killed_at = loop {
        if let Some((step, finished)) = task_progress(&b, "gru") {
            if step >= 60 {
                child.kill().unwrap();
                child.wait().unwrap();
                assert!(!finished, "the run ended before it could be killed: lengthen it");
                break step;
            }
        }
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be killed: lengthen it");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let (step, finished) = task_progress(&b, "gru").unwrap();
    assert!(!finished && step >= killed_at && step < 600, "saved step {step}, finished {finished}");
    // Started again, it continues from its last save and ends where the uninterrupted run did.
    let resumed = rnnlens(&["task", "--resume", b.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{err}");
    assert!(err.contains(&format!("gru: continuing from step {step} saved in")), "{err}");
    for f in ["gru/model.safetensors", "curves.csv"] {
        assert!(file(&a.join(f)) == file(&b.join(f)), "{f} differs between the uninterrupted and the resumed run");
    }
    let drop_seconds = |p: &Path| -> Vec<String> { std::fs::read_to_string(p).unwrap().lines().map(|l| l.rsplit_once(',').unwrap().0.to_string()).collect() };
    assert_eq!(drop_seconds(&a.join("table.csv")), drop_seconds(&b.join("table.csv")));
    // A finished run resumed again trains nothing and gives the same table.
    let again = rnnlens(&["task", "--resume", b.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("gru: finished earlier (its cap of 600 steps reached; --steps N continues it)"));
    assert!(file(&a.join("gru/model.safetensors")) == file(&b.join("gru/model.safetensors")));
    // A directory with no run in it is not resumed.
    let e = fails(&["task", "--resume", dir.path().to_str().unwrap()]);
    assert!(e.contains("holds no task run to resume"), "{e}");
}

/// `task --resume` listens: a setting it cannot change is refused, naming it, its saved value
/// and what may change (it used to be ignored: "at most 1500 steps, 32 units ... finished
/// earlier"); a run that ended at its cap continues to a larger `--steps`, bit-identical to a
/// run given that cap from the start; a cap below the steps run is refused, the run untouched.
#[test]
fn task_resume_refuses_changed_settings_and_continues_to_a_larger_cap() {
    let dir = tempfile::tempdir().unwrap();
    let (mc, whole) = (dir.path().join("mc"), dir.path().join("whole"));
    let (mc_s, whole_s) = (mc.to_str().unwrap(), whole.to_str().unwrap());
    let base = ["task", "multicopy", "--length", "100", "--hidden-size", "32", "--batch-size", "10", "--threads", "1", "--save-every", "7"];
    ok(&[&base[..], &["--steps", "30", "--out", mc_s]].concat());
    let task_json = file(&mc.join("task.json"));
    let e = fails(&["task", "--resume", mc_s, "--steps", "60", "--hidden-size", "64"]);
    assert!(e.contains("error: --resume continues the saved task run as it was configured; it cannot change --hidden-size (saved: 32) (only --steps, --threads, --save-every may change"), "{e}");
    let e = fails(&["task", "--resume", mc_s, "--steps", "20"]);
    assert!(e.contains("error: gru has run 30 steps already: --steps 20 is fewer; give at least 30"), "{e}");
    assert!(file(&mc.join("task.json")) == task_json, "a refused resume rewrote task.json");
    // Given the task's own name and settings again, it is not refused.
    let out = rnnlens(&["task", "multicopy", "--resume", mc_s, "--hidden-size", "32", "--steps", "60"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("at most 60 steps") && err.contains("gru: continuing from step 30 saved in"), "{err}");
    ok(&[&base[..], &["--steps", "60", "--out", whole_s]].concat());
    for f in ["gru/model.safetensors", "curves.csv"] {
        assert!(file(&mc.join(f)) == file(&whole.join(f)), "{f}: continued to 60 steps differs from a run given 60 from the start");
    }
    // The raised cap is the run's from now on.
    let again = rnnlens(&["task", "--resume", mc_s]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("gru: finished earlier (its cap of 60 steps reached"), "{}", String::from_utf8_lossy(&again.stderr));
}

/// A newcomer's mistakes, each answered with what the thing is and what to give instead: a task
/// run's folder, a report or a folder of runs given as a checkpoint (they were called an
/// interrupted save), `train --resume` of a task model (it advised `sample`, which refuses it),
/// a flag of the other kind of model (`eval --batches` of a language model was ignored), a
/// negative count (clap's "unexpected argument '-5'"), a model the machine cannot hold (no
/// estimate, no size that fits).
#[test]
fn wrong_folders_flags_and_sizes_are_named_with_the_way_on() {
    let tmp = tempfile::tempdir().unwrap();
    let (mc, lm, rep) = (tmp.path().join("mc"), tmp.path().join("lm"), tmp.path().join("rep"));
    let (mc_s, lm_s, rep_s) = (mc.to_str().unwrap(), lm.to_str().unwrap(), rep.to_str().unwrap());
    ok(&["task", "multicopy", "--compare", "gru,rwa", "--hidden-size", "8", "--steps", "2", "--length", "40", "--batch-size", "4", "--threads", "1", "--out", mc_s]);
    let folder = format!("error: {mc_s} is not a checkpoint: it is a task run's folder (`rnnlens task`), holding one model per cell: give one of them ({mc_s}/gru, {mc_s}/rwa); `rnnlens task --resume {mc_s}` continues the run");
    for args in [&["eval", "--checkpoint", mc_s][..], &["explain", "--checkpoint", mc_s, "--example", "1"]] {
        let e = fails(args);
        assert!(e.contains(&folder), "{args:?}: {e}");
    }
    let e = fails(&["train", "--resume", &format!("{mc_s}/rwa")]);
    assert!(e.contains(&format!("holds a model trained by `rnnlens task`: continue its run with `rnnlens task --resume {mc_s}`; it loads for `rnnlens eval` and `rnnlens explain`")), "{e}");
    let data = corpus(tmp.path());
    ok(&train_args(data.to_str().unwrap(), lm_s, &["--max-steps", "2"]));
    let e = fails(&["eval", "--checkpoint", lm_s, "--batches", "10"]);
    assert!(e.contains("is a language model: it is scored on a text") && e.contains("(--batches given: those are for task models)"), "{e}");
    let e = fails(&["eval", "--checkpoint", &format!("{mc_s}/gru"), "--batch-size", "3"]);
    assert!(e.contains("is a sequence-task model") && e.contains("(--batch-size given: those are for language models)"), "{e}");
    ok(&["explain", "--checkpoint", lm_s, "--text", "the cat", "--report", rep_s]);
    let e = fails(&["explain", "--checkpoint", rep_s, "--text", "the cat"]);
    assert!(e.contains(&format!("{rep_s} is not a checkpoint: it is an explain report (`rnnlens explain --report`; open {rep_s}/index.html): give the checkpoint the report was made from")), "{e}");
    let e = fails(&["eval", "--checkpoint", tmp.path().to_str().unwrap()]);
    assert!(e.contains(&format!("is not a checkpoint: it is a folder of checkpoints: give one of them ({lm_s})")), "{e}");
    let e = fails(&["train", "--hidden-size", "-5"]);
    assert!(e.contains("error: invalid value '-5' for '--hidden-size <HIDDEN_SIZE>': a whole number (0, 1, 2, ...) is expected"), "{e}");
    for h in ["60000", "20000"] {
        let big = tmp.path().join("big");
        let e = fails(&["train", "--data", data.to_str().unwrap(), "--level", "char", "--hidden-size", h, "--threads", "1", "--out", big.to_str().unwrap()]);
        assert!(e.contains(&format!("a ran-tanh model of {h} units")) && e.contains("GiB (its weights, their gradient and optimizer state") && e.contains(" are available: the largest --hidden-size that fits is "), "{e}");
    }
}

#[test]
fn train_refuses_to_replace_another_runs_checkpoint_before_it_trains() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    let out = tmp.path().join("run");
    let out_s = out.to_str().unwrap();
    ok(&train_args(data, out_s, &["--max-steps", "3"]));
    let before = file(&out.join("model.safetensors"));
    // Another run into the same directory stops at once, naming the ways on.
    let e = fails(&train_args(data, out_s, &["--max-steps", "3", "--cell", "lstm", "--epochs", "50"]));
    assert!(e.contains("holds a checkpoint") && e.contains("--resume") && e.contains("--overwrite"), "{e}");
    assert!(file(&out.join("model.safetensors")) == before, "the refused run changed the checkpoint");
    // Asked to, it replaces it.
    ok(&train_args(data, out_s, &["--max-steps", "3", "--cell", "lstm", "--overwrite"]));
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["cell_name"], "lstm");
    // --resume and --overwrite contradict each other.
    fails(&["train", "--resume", out_s, "--overwrite"]);
}

#[test]
fn options_parse_one_way_and_nothing_runs_for_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let out_s = out.to_str().unwrap();
    // A bad enumerated value is refused the same way by every subcommand that takes it.
    for args in [&["train", "--ran-gates", "x", "--out", out_s][..], &["params", "--cell", "ran-tanh", "--input-size", "4", "--hidden-size", "4", "--ran-gates", "x"]] {
        let e = fails(args);
        assert!(e.contains("invalid value 'x'") && e.contains("[possible values: c, h]"), "{e}");
    }
    let e = fails(&["train", "--cell", "transformer", "--out", out_s]);
    assert!(e.contains("'transformer'") && e.contains("lstm"), "{e}");
    // A TOML file spells a single layer as the flag does.
    let cfg = tmp.path().join("c.toml");
    std::fs::write(&cfg, "hidden_size = 16\nembedding_size = 8\nlevel = \"char\"\nsample_length = 0\n").unwrap();
    let data = corpus(tmp.path());
    ok(&["train", "--config", cfg.to_str().unwrap(), "--data", data.to_str().unwrap(), "--max-steps", "2", "--quiet", "--out", out_s, "--threads", "1"]);
    let t: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("trainer.json")).unwrap()).unwrap();
    assert_eq!(t["config"]["hidden_size"], serde_json::json!([16]));
    assert_eq!(t["config"]["embedding_size"], 8);
    // Doing nothing is an error, not a success.
    let e = fails(&["train", "--epochs", "0", "--out", tmp.path().join("p").to_str().unwrap()]);
    assert!(e.contains("epochs"), "{e}");
    let e = fails(&["sample", "--checkpoint", out_s, "--length", "0"]);
    assert!(e.contains("--length"), "{e}");
}

#[test]
fn eval_names_what_it_scored_and_the_share_the_vocabulary_missed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("w");
    let out_s = out.to_str().unwrap();
    // 13 words in the corpus, 8 in the vocabulary (with <unk> and <eos>): some are <unk>.
    let mut a = train_args(data.to_str().unwrap(), out_s, &["--max-steps", "5", "--vocab-size", "8"]);
    let level = a.iter().position(|x| *x == "char").unwrap();
    a[level] = "word";
    ok(&a);
    let r = ok(&["eval", "--checkpoint", out_s, "--split", "valid"]);
    assert!(r.contains("of the valid split, <unk> ") && r.contains("% of them"), "{r}");
    let share: f64 = r.split("<unk> ").nth(1).unwrap().split('%').next().unwrap().parse().unwrap();
    assert!(share > 5.0 && share < 95.0, "{r}");
    let r = ok(&["eval", "--checkpoint", out_s, "--input", data.to_str().unwrap()]);
    assert!(r.contains("tiny.txt"), "{r}");
}

#[test]
fn a_model_beyond_the_machine_or_its_data_is_refused_or_warned_about_before_allocating() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("big");
    // Workspaces of a million rows at 20,000 units: hundreds of GiB, on any machine.
    let e = fails(&["train", "--hidden-size", "20000", "--batch-size", "1000", "--bptt", "1000", "--out", out.to_str().unwrap(), "--threads", "1"]);
    assert!(e.contains("needs about") && e.contains("GiB") && e.contains("available"), "{e}");
    assert!(!out.exists(), "a refused run left {}", out.display());
    // A task likewise, and asked again it is refused for the same reason (a refused run once
    // left its task.json behind, and the retry was told the directory held a run).
    let out = tmp.path().join("task");
    for _ in 0..2 {
        let e = fails(&["task", "copy", "--length", "1000000000", "--steps", "1", "--out", out.to_str().unwrap(), "--threads", "1"]);
        assert!(e.contains("needs about") && e.contains("GiB") && e.contains("smaller --length"), "{e}");
        assert!(!out.exists(), "a refused task run left {}", out.display());
    }
    // A word-level ISAN: an H×H matrix per word, 76 parameters per training token here.
    let data = corpus(tmp.path());
    let out = tmp.path().join("isan");
    let o = rnnlens(&["train", "--data", data.to_str().unwrap(), "--level", "word", "--cell", "isan", "--hidden-size", "160", "--max-steps", "0", "--sample-length", "0", "--out", out.to_str().unwrap(), "--threads", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warning:") && err.contains("--level char"), "{err}");
}

/// A build without the `gpu` feature answers `--device gpu` with how to get one, on every
/// command that takes it.
#[cfg(not(feature = "gpu"))]
#[test]
fn device_gpu_without_the_feature_says_how_to_build_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    for args in [
        vec!["bench", "--device", "gpu", "--shapes", "c1", "--cells", "lstm"],
        vec!["train", "--device", "gpu", "--max-steps", "1", "--out", out.to_str().unwrap()],
        vec!["task", "addition", "--device", "gpu", "--steps", "1", "--out", out.to_str().unwrap()],
    ] {
        let err = fails(&args);
        assert!(err.contains("rebuild with `cargo build --release --features gpu`"), "{args:?}:\n{err}");
    }
    assert!(!out.join("model.safetensors").exists(), "nothing is trained or written");
}

/// The bf16 tests are ignored unless asked for (they need the instructions): asked for on a CPU
/// without them, they fail rather than pass.
fn assert_bf16_here() {
    assert!(rnnlens::kernels::precision::bf16_supported(), "this CPU has no AVX512-BF16: --precision bf16 cannot run here");
}

#[test]
#[ignore = "needs AVX512-BF16 (avx512_bf16 in /proc/cpuinfo); .ci/run runs it with --ignored where the CPU has it"]
fn bf16_training_is_deterministic_resumes_bit_exactly_and_stays_near_f32() {
    assert_bf16_here();
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    let dir = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let (full, part, again, f32_run) = (dir("full"), dir("part"), dir("again"), dir("f32"));
    let bf16 = ["--cell", "lstm", "--epochs", "2", "--precision", "bf16"];
    ok(&train_args(data, &full, &bf16));
    // Stopped inside the first epoch and resumed: the same bits, as in f32.
    ok(&train_args(data, &part, &[&bf16[..], &["--max-steps", "37"]].concat()));
    ok(&["train", "--resume", &part, "--epochs", "2", "--max-steps", "1000000", "--quiet", "--threads", "1"]);
    let weights = |d: &str| file(&Path::new(d).join("model.safetensors"));
    assert!(weights(&full) == weights(&part), "bf16: resumed weights differ from the uninterrupted run");
    ok(&train_args(data, &again, &bf16));
    assert!(weights(&full) == weights(&again), "bf16 training is not deterministic");
    let saved: serde_json::Value = serde_json::from_slice(&file(&Path::new(&full).join("trainer.json"))).unwrap();
    assert_eq!(saved["config"]["precision"], "bf16", "trainer.json records the precision");
    // The same run in f32: other bits, a validation perplexity within 2 %.
    ok(&train_args(data, &f32_run, &["--cell", "lstm", "--epochs", "2"]));
    assert!(weights(&full) != weights(&f32_run), "bf16 gave the f32 weights: it did not run");
    let valid = |d: &str| -> f64 {
        let m: Vec<serde_json::Value> = String::from_utf8(file(&Path::new(d).join("metrics.jsonl"))).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        m.iter().rev().find(|r| r["kind"] == "valid").unwrap()["nll"].as_f64().unwrap()
    };
    let (vb, vf) = (valid(&full), valid(&f32_run));
    assert!((vb - vf).abs() < 0.02 * vf, "validation NLL bf16 {vb} vs f32 {vf}");
    // Each checkpoint scored in the other precision: within bf16's rounding of its own score.
    let nll = |d: &str, p: &str| -> f64 {
        let out = ok(&["eval", "--checkpoint", d, "--split", "valid", "--precision", p, "--threads", "1"]);
        out.split("mean NLL ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap().parse().unwrap()
    };
    for d in [&full, &f32_run] {
        let (a, b) = (nll(d, "f32"), nll(d, "bf16"));
        assert!(a != b && (a - b).abs() < 0.01 * a, "{d}: scored {a} in f32, {b} in bf16");
    }
}

#[test]
#[ignore = "needs AVX512-BF16 (avx512_bf16 in /proc/cpuinfo); .ci/run runs it with --ignored where the CPU has it"]
fn a_resume_that_changes_the_precision_says_so_in_its_output_and_metrics() {
    assert_bf16_here();
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("run");
    let out_s = out.to_str().unwrap();
    ok(&train_args(data.to_str().unwrap(), out_s, &["--cell", "ran-tanh", "--max-steps", "20"]));
    let r = rnnlens(&["train", "--resume", out_s, "--max-steps", "40", "--precision", "bf16", "--threads", "1"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("the run trained in f32 until now and goes on in bf16"), "{err}");
    let lines: Vec<serde_json::Value> = String::from_utf8(file(&out.join("metrics.jsonl"))).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let change: Vec<_> = lines.iter().filter(|l| l["kind"] == "precision").collect();
    assert_eq!(change.len(), 1, "{lines:?}");
    assert_eq!((change[0]["step"].as_u64(), change[0]["from"].as_str(), change[0]["to"].as_str()), (Some(20), Some("f32"), Some("bf16")));
    let saved: serde_json::Value = serde_json::from_slice(&file(&out.join("trainer.json"))).unwrap();
    assert_eq!(saved["config"]["precision"], "bf16");
    // `curves` still reads the history.
    ok(&["curves", out_s, "--out", tmp.path().join("c.svg").to_str().unwrap()]);
}

#[test]
#[ignore = "needs AMX (amx_bf16 in /proc/cpuinfo); .ci/run runs it with --ignored where the CPU has it"]
fn amx_off_in_the_environment_trains_the_other_kernels_weights_repeatably() {
    // On a CPU with AMX the bf16 products run on its tiles; RNNLENS_AMX=0 runs them on
    // AVX512-BF16 instead, whose bits a CPU without AMX (a Zen 4) gives: the same bf16 run
    // trains other weights with and without it, and the same weights twice without it.
    assert_bf16_here();
    assert!(rnnlens::kernels::gemm::amx::available(), "this CPU has no AMX (or Linux refused the tiles)");
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    let weights = |name: &str, amx: &str| -> Vec<u8> {
        let out = tmp.path().join(name);
        // Depths of 64 (more than one tile's 32 bf16) so that the sums' order matters.
        let args = ["train", "--data", data, "--level", "char", "--cell", "lstm", "--embedding-size", "64", "--hidden-size", "64", "--batch-size", "4", "--bptt", "12", "--max-steps", "10", "--precision", "bf16"];
        let args = [&args[..], &["--out", out.to_str().unwrap(), "--threads", "1", "--sample-length", "0", "--quiet"]].concat();
        let r = Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(&args).env("RNNLENS_AMX", amx).output().expect("run rnnlens");
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        file(&out.join("model.safetensors"))
    };
    let (tiles, avx) = (weights("tiles", "1"), weights("avx", "0"));
    assert!(tiles != avx, "RNNLENS_AMX=0 trained the tiles' weights");
    assert!(avx == weights("avx-again", "0"), "AVX512-BF16 training is not repeatable");
}

#[test]
fn a_sample_longer_than_memory_is_refused_with_the_estimate_not_aborted() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("run");
    let out_s = out.to_str().unwrap();
    ok(&train_args(data.to_str().unwrap(), out_s, &["--cell", "gru", "--max-steps", "2"]));
    let r = rnnlens(&["sample", "--checkpoint", out_s, "--length", "1000000000000"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && r.status.code() == Some(1), "{:?}: {err}", r.status);
    assert!(err.contains("sampling 1000000000000 tokens needs about") && err.contains("ask for a smaller length"), "{err}");
    assert!(!err.contains("backtrace") && !err.contains("memory allocation"), "{err}");
    // A length that fits still samples.
    assert!(!ok(&["sample", "--checkpoint", out_s, "--length", "5"]).is_empty());
}

#[test]
fn an_isans_symbol_statistics_count_on_the_training_split_when_asked() {
    // The ISAN paper counts the unigram and bigram distributions of its Figs. 7 and 9 on the
    // training data; `explain` counts them on the explained text unless told otherwise.
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let (data_s, run) = (data.to_str().unwrap(), tmp.path().join("isan"));
    let run_s = run.to_str().unwrap();
    let out = rnnlens(&["train", "--data", data_s, "--level", "char", "--cell", "isan", "--hidden-size", "16", "--batch-size", "4",
        "--bptt", "12", "--out", run_s, "--threads", "1", "--sample-length", "0", "--max-steps", "3"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    // "...: N train / M valid / K test tokens": the training split's length as training read it
    let train = log.lines().find(|l| l.starts_with("data: ")).and_then(|l| l.split(": ").last()).and_then(|t| t.split(' ').next()).unwrap();
    let held = ok(&["explain", "--checkpoint", run_s, "--split", "test", "--threads", "1"]);
    assert!(held.contains("unigram and bigram counted on the explained text ("), "{held}");
    let counted = ok(&["explain", "--checkpoint", run_s, "--split", "test", "--threads", "1", "--distributions", "train"]);
    assert!(counted.contains(&format!("unigram and bigram counted on the training split ({train} tokens)")), "{counted}");
    // The contributions are the explained text's either way; only the statistics' lines move.
    let kappa = |s: &str| s.lines().filter(|l| l.contains("logits = b_ro + Σ κ") || l.contains("history")).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(kappa(&held), kappa(&counted));
    assert_ne!(held.lines().find(|l| l.contains("softmax(b_ro) vs unigram")), counted.lines().find(|l| l.contains("softmax(b_ro) vs unigram")));
    // Refused where it means nothing: another cell, a checkpoint without its corpus.
    let ran = tmp.path().join("ran");
    ok(&train_args(data_s, ran.to_str().unwrap(), &["--cell", "ran-tanh", "--max-steps", "2"]));
    let e = fails(&["explain", "--checkpoint", ran.to_str().unwrap(), "--text", "the cat", "--distributions", "train"]);
    assert!(e.contains("--distributions train") && e.contains("are an ISAN's symbol statistics") && e.contains("ran-tanh"), "{e}");
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for f in ["config.json", "model.safetensors", "vocab.txt", "manifest.json"] {
        std::fs::copy(run.join(f), copy.join(f)).unwrap();
    }
    let e = fails(&["explain", "--checkpoint", copy.to_str().unwrap(), "--text", "the cat", "--distributions", "train"]);
    assert!(e.contains("records no corpus") && e.contains("to count the distributions on") && e.contains("--distributions train"), "{e}");
}

#[test]
fn a_model_copied_without_its_training_state_loads_and_only_resume_refuses() {
    // config.json, model.safetensors, vocab.txt and the manifest (which lists the trainer
    // files too): everything but --resume works, and --resume names what is missing.
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data_s = data.to_str().unwrap();
    let run = tmp.path().join("run");
    ok(&train_args(data_s, run.to_str().unwrap(), &["--cell", "ran-tanh", "--max-steps", "3"]));
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for f in ["config.json", "model.safetensors", "vocab.txt", "manifest.json"] {
        std::fs::copy(run.join(f), copy.join(f)).unwrap();
    }
    let copy_s = copy.to_str().unwrap();
    let text = tmp.path().join("t.txt");
    std::fs::write(&text, "the cat sat on a mat .\n").unwrap();
    let score = |d: &str| ok(&["eval", "--checkpoint", d, "--input", text.to_str().unwrap(), "--threads", "1"]);
    assert!(score(copy_s).contains("bits per character"), "{}", score(copy_s));
    ok(&["sample", "--checkpoint", copy_s, "--length", "5"]);
    ok(&["explain", "--checkpoint", copy_s, "--text", "the cat"]);
    // The held-out text of the run's corpus: its first tokens, the same as the split's file.
    let held = ok(&["explain", "--checkpoint", run.to_str().unwrap(), "--split", "test"]);
    assert!(held.contains("read in one window"), "{held}");
    let e = fails(&["explain", "--checkpoint", copy_s, "--split", "test"]);
    assert!(e.contains("records no corpus") && e.contains("explain a file with --input"), "{e}");
    let e = fails(&["train", "--resume", copy_s, "--max-steps", "5"]);
    assert!(e.contains("without its training state (trainer.json and trainer.safetensors missing)"), "{e}");
    // A listed model file that was changed still fails, as before.
    let mut bytes = file(&copy.join("vocab.txt"));
    bytes.push(b'x');
    std::fs::write(copy.join("vocab.txt"), bytes).unwrap();
    let e = fails(&["eval", "--checkpoint", copy_s, "--input", text.to_str().unwrap()]);
    assert!(e.contains("truncated or was changed"), "{e}");
}

#[test]
fn a_ran_config_without_its_gates_key_is_read_as_c_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let run = tmp.path().join("run");
    let run_s = run.to_str().unwrap();
    ok(&train_args(data.to_str().unwrap(), run_s, &["--cell", "ran-tanh", "--max-steps", "3"]));
    let text = tmp.path().join("t.txt");
    std::fs::write(&text, "the cat sat on a mat .\n").unwrap();
    let eval = || rnnlens(&["eval", "--checkpoint", run_s, "--input", text.to_str().unwrap(), "--threads", "1"]);
    let quiet = eval();
    assert!(quiet.status.success() && !String::from_utf8_lossy(&quiet.stderr).contains("\"gates\""), "train writes the key");
    // The same config hand-written without the key (its manifest gone with the edit).
    let mut cfg: serde_json::Value = serde_json::from_slice(&file(&run.join("config.json"))).unwrap();
    let options = cfg["layers"][0]["options"].as_object_mut().unwrap();
    assert_eq!(options.remove("gates"), Some(serde_json::json!("h")));
    std::fs::write(run.join("config.json"), serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    std::fs::remove_file(run.join("manifest.json")).unwrap();
    let r = eval();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("has no \"gates\" option: read as \"c\"") && err.contains("`train` writes \"h\" by default"), "{err}");
}

#[test]
fn eval_streams_every_model_and_names_any_other_measure() {
    // A RAN-tanh trained from zeros every window (the default without recurrent dropout):
    // eval carries its state through the text all the same, whatever the batch's window or the
    // training state (the same figure with trainer.json gone); --reset-every gives the
    // windowed measure and says so; a larger batch says it approximates.
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let run = tmp.path().join("run");
    let run_s = run.to_str().unwrap();
    ok(&train_args(data.to_str().unwrap(), run_s, &["--cell", "ran-tanh", "--max-steps", "30", "--carry-state", "false"]));
    let saved: serde_json::Value = serde_json::from_slice(&file(&run.join("trainer.json"))).unwrap();
    assert_eq!(saved["config"]["carry_state"], false, "from zeros every window");
    let input = tmp.path().join("t.txt");
    std::fs::write(&input, std::fs::read_to_string(&data).unwrap().lines().take(60).collect::<Vec<_>>().join("\n")).unwrap();
    let eval = |dir: &str, extra: &[&str]| {
        let mut a = vec!["eval", "--checkpoint", dir, "--input", input.to_str().unwrap(), "--threads", "1"];
        a.extend_from_slice(extra);
        ok(&a)
    };
    let nll = |out: &str| -> f64 { out.split("mean NLL ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap().parse().unwrap() };
    let stream = eval(run_s, &[]);
    assert_eq!(nll(&stream), nll(&eval(run_s, &["--bptt", "7"])), "the window does not change the streaming figure");
    let windowed = eval(run_s, &["--reset-every", "12"]);
    assert!(windowed.contains("note: the state reset every 12 tokens, not the streaming evaluation"), "{windowed}");
    assert!(nll(&windowed) != nll(&stream));
    // Without the training state (config.json, model.safetensors, vocab.txt and the manifest):
    // the same number.
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for f in ["config.json", "model.safetensors", "vocab.txt", "manifest.json"] {
        std::fs::copy(run.join(f), copy.join(f)).unwrap();
    }
    assert_eq!(nll(&eval(copy.to_str().unwrap(), &[])), nll(&stream));
    // Worse streaming than windowed is said next to the number (and only then).
    let said = stream.contains("scores worse with the state carried through the text");
    assert_eq!(said, nll(&stream) > nll(&eval(run_s, &["--reset-every", "12"])), "{stream}");
    let batched = eval(run_s, &["--batch-size", "3"]);
    assert!(batched.contains("3 parallel streams: an approximation of the streaming evaluation"), "{batched}");
    fails(&["eval", "--checkpoint", run_s, "--input", input.to_str().unwrap(), "--reset-every", "0"]);
}

#[test]
fn sizes_beyond_the_memory_are_refused_with_the_estimate() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let (data, out) = (data.to_str().unwrap(), tmp.path().join("m"));
    let o = out.to_str().unwrap();
    ok(&train_args(data, o, &["--cell", "gru", "--max-steps", "2"]));
    // a batch whose workspaces no machine has
    let e = fails(&["eval", "--checkpoint", o, "--input", data, "--batch-size", "100000000000"]);
    assert!(e.contains("scoring") && e.contains("needs about") && e.contains("smaller --batch-size"), "{e}");
    // with the memory capped (RNNLENS_MEMORY_LIMIT): a file, a text's states, a corpus
    let capped = |args: &[&str]| -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(args).env("RNNLENS_MEMORY_LIMIT", "1000").output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail under a 1000-byte cap");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = capped(&["eval", "--checkpoint", o, "--input", data]);
    assert!(e.contains("reading") && e.contains("needs about") && e.contains("MiB"), "{e}");
    let e = capped(&["sample", "--checkpoint", o, "--prime", "the", "--length", "100000"]);
    assert!(e.contains("needs about"), "{e}");
}

#[test]
fn a_checkpoint_in_every_older_form_loads_and_scores_the_same() {
    // What earlier versions wrote lacked, key by key: the tokenizer's split rule, the cell's
    // command-line name, the manifest, the trainer files, the baseline line of metrics.jsonl.
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let run = tmp.path().join("run");
    let run_s = run.to_str().unwrap();
    let mut args = train_args(data.to_str().unwrap(), run_s, &["--cell", "lstm", "--max-steps", "20"]);
    args[4] = "word";
    ok(&args);
    let cfg: serde_json::Value = serde_json::from_slice(&file(&run.join("config.json"))).unwrap();
    assert_eq!(cfg["tokenizer"]["split"], "whitespace", "a text corpus at word level: {cfg}");
    let text = tmp.path().join("t.txt");
    std::fs::write(&text, "the cat sat on a mat .\nthe dog ran .\n").unwrap();
    let score = |dir: &str| ok(&["eval", "--checkpoint", dir, "--input", text.to_str().unwrap(), "--threads", "1"]);
    let want = score(run_s);
    let old = tmp.path().join("old");
    std::fs::create_dir(&old).unwrap();
    let mut c = cfg.clone();
    c["tokenizer"].as_object_mut().unwrap().remove("split");
    c.as_object_mut().unwrap().remove("cell_name");
    std::fs::write(old.join("config.json"), serde_json::to_vec_pretty(&c).unwrap()).unwrap();
    for f in ["model.safetensors", "vocab.txt"] {
        std::fs::copy(run.join(f), old.join(f)).unwrap();
    }
    let metrics = String::from_utf8(file(&run.join("metrics.jsonl"))).unwrap();
    assert!(metrics.starts_with("{\"kind\":\"baseline\""));
    std::fs::write(old.join("metrics.jsonl"), metrics.lines().skip(1).map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    assert_eq!(score(old.to_str().unwrap()), want.replace(run_s, old.to_str().unwrap()));
    let table = ok(&["curves", run_s, old.to_str().unwrap(), "--out", tmp.path().join("c.svg").to_str().unwrap()]);
    assert_eq!(table.lines().count(), 3, "{table}");
}

#[test]
fn task_models_are_evaluated_and_explained_like_any_model() {
    let dir = tempfile::tempdir().unwrap();
    for (task, cell, length, input) in [
        ("copy", "gru", "30", "1234567812____!__________"),
        ("multicopy", "rda-sigmoid-id", "40", "12345678_!__________"),
        ("addition", "lstm", "12", "0.3 0.7* 0.1 0.5*"),
        ("parentheses", "isan", "16", "(([a]{)}"),
    ] {
        let out = dir.path().join(task);
        let out_s = out.to_str().unwrap();
        ok(&["task", task, "--cell", cell, "--length", length, "--hidden-size", "8", "--batch-size", "8", "--steps", "20", "--threads", "1", "--out", out_s]);
        let ckpt = out.join(cell);
        let ckpt = ckpt.to_str().unwrap();
        // eval: the task's measure on fresh sequences; the same seed gives the same figure.
        let e = ok(&["eval", "--checkpoint", ckpt, "--batches", "3", "--seed", "7"]);
        assert!(e.starts_with(&format!("{task} task (length {length}), {cell} trained 20 steps: loss ")), "{e}");
        assert!(e.contains("over 300 fresh sequences (3 batches of 100, data seed 7)"), "{e}");
        assert_eq!(e, ok(&["eval", "--checkpoint", ckpt, "--batches", "3", "--seed", "7"]));
        assert_eq!(e.contains("accuracy"), task != "addition", "{e}");
        // explain: a generated example and a typed one, with the report written.
        let ex = ok(&["explain", "--checkpoint", ckpt, "--example", "3"]);
        assert!(ex.contains(&format!("task {task} (length {length}), {cell} trained 20 steps; the example drawn from seed 3")), "{ex}");
        let report = dir.path().join(format!("{task}-report"));
        let ex = ok(&["explain", "--checkpoint", ckpt, "--task-input", input, "--report", report.to_str().unwrap()]);
        assert!(ex.contains("the typed input"), "{ex}");
        assert!(report.join("index.html").exists() && report.join("summary.txt").exists());
        let analyses = match cell {
            "rda-sigmoid-id" => "Effective attention weights",
            "isan" => "ISAN readout at the last step",
            _ => "PCA spectrum",
        };
        assert!(ex.contains(analyses), "{ex}");
        // What a language model takes is refused with the way on.
        let e = fails(&["eval", "--checkpoint", ckpt, "--split", "test"]);
        assert!(e.contains("is a sequence-task model"), "{e}");
        let e = fails(&["explain", "--checkpoint", ckpt, "--text", "hello"]);
        assert!(e.contains("--example SEED") && e.contains("--task-input"), "{e}");
    }
    let e = fails(&["explain", "--checkpoint", dir.path().join("addition/lstm").to_str().unwrap(), "--task-input", "0.3 x"]);
    assert!(e.contains("\"x\" is not a number"), "{e}");
}

#[test]
fn train_prints_the_exact_validation_that_eval_gives_beside_its_approximation() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("run");
    let s = ok(&train_args(data.to_str().unwrap(), out.to_str().unwrap(), &["--max-steps", "15"]));
    let approx = s.lines().find(|l| l.starts_with("validation: ")).unwrap_or_else(|| panic!("{s}"));
    assert!(approx.contains("(10 parallel streams, as training validates: an approximation"), "{approx}");
    let exact = s.lines().find_map(|l| l.strip_prefix("validation, exact (one stream, as `rnnlens eval --split valid` gives it): ")).unwrap_or_else(|| panic!("{s}"));
    let eval = ok(&["eval", "--checkpoint", out.to_str().unwrap(), "--split", "valid", "--threads", "1"]);
    assert_eq!(exact, eval.trim_end(), "train's exact validation is not eval's");
    // With one validation stream, training's figure is the exact one and is said once.
    let out1 = tmp.path().join("run1");
    let s = ok(&train_args(data.to_str().unwrap(), out1.to_str().unwrap(), &["--max-steps", "15", "--eval-batch-size", "1"]));
    assert!(!s.contains("exact") && !s.contains("approximation"), "{s}");
}
