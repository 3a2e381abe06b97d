//! `--device gpu` end to end (on lavapipe in CI): a run trained on the GPU (two layers, with
//! dropout everywhere) ends where the same run on the CPU ends, resumes on the GPU to the bytes of an uninterrupted run, and moves to
//! the CPU; a task trains there as on the CPU; what the GPU does not run is refused with the
//! option to change.

use std::path::Path;
use std::process::{Command, Output};

fn rnnlens(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(args).output().expect("run rnnlens")
}

fn ok(args: &[&str]) -> String {
    let out = rnnlens(args);
    assert!(out.status.success(), "rnnlens {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// The validation bits per character of a `train` run stopped by `--max-steps`
/// ("..., valid X bits per character").
fn valid_ppl(log: &str) -> f64 {
    let at = log.rfind("valid ").unwrap_or_else(|| panic!("no validation in:\n{log}"));
    log[at + 6..].split_whitespace().next().unwrap().parse().unwrap_or_else(|_| panic!("no figure after 'valid' in:\n{log}"))
}

/// A small corpus of words at random from a few (its valid split is some 2,000 characters:
/// lavapipe validates it in a second, the Brown corpus's in a minute).
fn corpus(dir: &Path) -> std::path::PathBuf {
    let words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red", "house"];
    let (mut s, mut x) = (String::new(), 7u64);
    for line in 0..800 {
        for _ in 0..(5 + line % 7) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            s.push_str(words[(x >> 33) as usize % words.len()]);
            s.push(' ');
        }
        s.push_str(".\n");
    }
    let p = dir.join("corpus.txt");
    std::fs::write(&p, s).unwrap();
    p
}

/// A short character-level run with variational dropout on the inputs, the outputs and the
/// recurrent inputs, of two layers.
fn train(out: &Path, cell: &str, device: &str, steps: &str) -> String {
    train_with(out, cell, device, steps, &[])
}

fn train_with(out: &Path, cell: &str, device: &str, steps: &str, extra: &[&str]) -> String {
    let data = corpus(out.parent().unwrap());
    let mut a = vec![
        "train", "--data", data.to_str().unwrap(), "--level", "char", "--cell", cell, "--hidden-size", "24,20", "--embedding-size", "16", "--dropout", "0.3",
        "--rec-dropout", "0.2", "--batch-size", "4", "--bptt", "12", "--max-steps", steps, "--sample-length", "0", "--device", device, "--out", out.to_str().unwrap(),
    ];
    a.extend_from_slice(extra);
    ok(&a)
}

#[test]
fn a_learned_initial_state_the_papers_gru_and_projections_train_on_the_gpu_as_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let d = |n: &str| tmp.path().join(n);
    // every window from the learned state (no carry): its gradient on every step; and the GRU
    // with its reset before the candidate's product
    for (name, cell, extra) in [
        ("s0", "lstm", &["--learn-initial-state", "--carry-state", "false"][..]),
        ("gru-papers", "gru", &["--gru-reset-after", "false"][..]),
        ("lstm-proj", "lstm", &["--projection-size", "10"][..]),
        ("ran-proj", "ran-tanh", &["--projection-size", "10"][..]),
    ] {
        let cpu = valid_ppl(&train_with(&d(&format!("{name}-cpu")), cell, "cpu", "20", extra));
        let gpu = valid_ppl(&train_with(&d(&format!("{name}-gpu")), cell, "gpu", "20", extra));
        assert!((gpu - cpu).abs() < 1e-3 * cpu, "{name}: valid perplexity {gpu} on the GPU, {cpu} on the CPU");
    }
    // the ISAN and a linear RNN of its paper: one layer reading the symbols, its learned h0
    let data = corpus(tmp.path());
    for cell in ["isan", "linear-tanh"] {
        let run = |device: &str| {
            let out = d(&format!("{cell}-{device}"));
            valid_ppl(&ok(&[
                "train", "--data", data.to_str().unwrap(), "--level", "char", "--cell", cell, "--hidden-size", "24", "--optimizer", "sgd", "--lr", "0.1",
                "--init", "uniform", "--init-scale", "0.05", "--batch-size", "4", "--bptt", "12", "--max-steps", "20", "--sample-length", "0", "--device", device,
                "--out", out.to_str().unwrap(),
            ]))
        };
        let (cpu, gpu) = (run("cpu"), run("gpu"));
        assert!((gpu - cpu).abs() < 1e-3 * cpu, "{cell}: valid perplexity {gpu} on the GPU, {cpu} on the CPU");
    }
}

#[test]
fn a_gpu_run_ends_where_the_cpu_run_ends_and_resumes_across_devices() {
    let tmp = tempfile::tempdir().unwrap();
    for cell in ["lstm", "ran-tanh", "gru", "rda-exp-tanh"] {
        let d = |n: &str| tmp.path().join(format!("{cell}-{n}"));
        let (cpu, gpu) = (valid_ppl(&train(&d("cpu"), cell, "cpu", "20")), valid_ppl(&train(&d("gpu"), cell, "gpu", "20")));
        assert!((gpu - cpu).abs() < 1e-3 * cpu, "{cell}: valid perplexity {gpu} on the GPU, {cpu} on the CPU");
        // 10 steps, then 10 more on the GPU: the bytes of the 20-step run.
        train(&d("half"), cell, "gpu", "10");
        let resumed = ok(&["train", "--resume", d("half").to_str().unwrap(), "--max-steps", "20", "--device", "gpu"]);
        assert!(resumed.contains("resuming"), "{resumed}");
        let (a, b) = (std::fs::read(d("half").join("model.safetensors")).unwrap(), std::fs::read(d("gpu").join("model.safetensors")).unwrap());
        assert!(a == b, "{cell}: the resumed GPU run's weights differ from the uninterrupted run's");
        // On to the CPU, which says so; the run goes on from the GPU's weights and state.
        let moved = ok(&["train", "--resume", d("half").to_str().unwrap(), "--max-steps", "30", "--device", "cpu"]);
        assert!(moved.contains("trained on the gpu until now and goes on on the cpu"), "{moved}");
        let went_on = valid_ppl(&moved);
        assert!(went_on.is_finite() && went_on < 1.5 * gpu, "{cell}: after moving to the CPU the run reached {went_on} (GPU: {gpu})");
    }
}

/// ln p of every token of the valid split, from `eval --per-token` on `device`.
fn per_token(dir: &Path, device: &str) -> Vec<f64> {
    let file = dir.join(format!("per-token-{device}.txt"));
    ok(&["eval", "--checkpoint", dir.to_str().unwrap(), "--split", "valid", "--per-token", file.to_str().unwrap(), "--device", device]);
    std::fs::read_to_string(&file).unwrap().lines().map(|l| l.split('\t').next().unwrap().parse().unwrap()).collect()
}

#[test]
fn eval_on_either_device_gives_either_checkpoint_the_same_ln_p() {
    let tmp = tempfile::tempdir().unwrap();
    for trained_on in ["cpu", "gpu"] {
        let dir = tmp.path().join(trained_on);
        train(&dir, "lstm", trained_on, "6");
        let (cpu, gpu) = (per_token(&dir, "cpu"), per_token(&dir, "gpu"));
        assert_eq!(cpu.len(), gpu.len());
        assert!(cpu.len() > 1_000, "the whole valid split is scored");
        let worst = cpu.iter().zip(&gpu).map(|(a, b)| (a - b).abs()).fold(0f64, f64::max);
        assert!(worst < 1e-4, "trained on the {trained_on}: ln p differs by up to {worst} nats between eval on the CPU and on the GPU");
    }
}

#[test]
fn what_the_gpu_does_not_run_is_refused_with_the_option_to_change() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("x");
    let data = corpus(tmp.path());
    let (data, o) = (data.to_str().unwrap(), o.to_str().unwrap());
    for (a, says) in [
        (vec!["train", "--data", data, "--level", "char", "--device", "gpu", "--max-steps", "1", "--out", o, "--precision", "bf16"], "the GPU engine's mixed precision is f16"),
        (vec!["task", "addition", "--device", "gpu", "--steps", "1", "--out", o, "--precision", "bf16"], "the GPU engine's mixed precision is f16"),
    ] {
        let out = rnnlens(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says) && !err.contains("panicked"), "{a:?}:\n{err}");
    }
    assert!(!Path::new(o).exists(), "nothing was written");
}

#[test]
fn sample_on_the_gpu_draws_what_the_cpu_draws() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lstm");
    train(&dir, "lstm", "cpu", "20");
    let d = dir.to_str().unwrap();
    let draw = |device: &str| {
        let out = rnnlens(&["sample", "--checkpoint", d, "--prime", "the cat ", "--length", "60", "--seed", "3", "--device", device]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let (cpu, gpu) = (draw("cpu"), draw("gpu"));
    assert!(cpu.starts_with("the cat ") && cpu.len() > 40, "{cpu}");
    // the same generator and logits within float rounding: the same draws
    assert_eq!(gpu, cpu);
}

/// `rnnlens task --device gpu` says where it trains and prints the CPU's table: the same
/// steps to the threshold and final loss to the digits shown.
#[test]
fn a_task_trains_on_the_gpu_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |device: &str| {
        let o = tmp.path().join(device);
        let a = ["task", "parentheses", "--compare", "gru,isan", "--length", "16", "--hidden-size", "10", "--batch-size", "4", "--steps", "8", "--device", device, "--out", o.to_str().unwrap()];
        let out = rnnlens(&a);
        assert!(out.status.success(), "{a:?}:\n{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string(), o)
    };
    let (cpu, _, _) = run("cpu");
    let (gpu, log, o) = run("gpu");
    assert!(log.contains("on the GPU"), "{log}");
    // Without XDG_RUNTIME_DIR (a container, CI), Mesa's drivers printed an "error:" line of
    // their own on every run; nothing prints one now.
    let a = ["task", "parentheses", "--cell", "gru", "--length", "8", "--hidden-size", "4", "--batch-size", "2", "--steps", "1", "--device", "gpu", "--out"];
    let quiet = Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(a).arg(tmp.path().join("xdg")).env_remove("XDG_RUNTIME_DIR").output().unwrap();
    let err = String::from_utf8_lossy(&quiet.stderr);
    assert!(quiet.status.success() && !err.contains("error"), "{err}");
    // Every cell's line but its last column (the seconds) is the same.
    let strip = |t: &str| t.lines().skip(2).filter(|l| !l.starts_with('(')).map(|l| l.split_whitespace().collect::<Vec<_>>()).map(|w| w[..w.len() - 1].join(" ")).collect::<Vec<_>>();
    assert_eq!(strip(&cpu).len(), 2, "{cpu}");
    assert_eq!(strip(&cpu), strip(&gpu), "CPU:\n{cpu}\nGPU:\n{gpu}");
    assert!(o.join("isan").join("model.safetensors").exists());
}

/// `train --sampled-softmax K --device gpu` at the word level (batch 2, windows of 3: six
/// targets and four draws from the 14 words and `<eos>`), 20 steps and a resume: the CPU's
/// validation figure, and the resumed run's bytes.
#[test]
fn the_sampled_softmax_trains_on_the_gpu_as_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let run = |out: &Path, device: &str, steps: &str| {
        ok(&[
            "train", "--data", data.to_str().unwrap(), "--level", "word", "--cell", "lstm", "--hidden-size", "12", "--embedding-size", "8", "--dropout", "0.2",
            "--batch-size", "2", "--bptt", "3", "--sampled-softmax", "4", "--max-steps", steps, "--sample-length", "0", "--device", device, "--out", out.to_str().unwrap(),
        ])
    };
    let d = |n: &str| tmp.path().join(n);
    let (cpu, gpu) = (run(&d("cpu"), "cpu", "20"), run(&d("gpu"), "gpu", "20"));
    assert!(gpu.contains("sampled loss"), "{gpu}");
    let ppl = |log: &str| -> f64 {
        let at = log.rfind("valid perplexity ").unwrap_or_else(|| panic!("no validation in:\n{log}"));
        log[at + 17..].split_whitespace().next().unwrap().parse().unwrap()
    };
    let (c, g) = (ppl(&cpu), ppl(&gpu));
    assert!((g - c).abs() < 1e-3 * c, "valid perplexity {g} on the GPU, {c} on the CPU");
    run(&d("half"), "gpu", "10");
    ok(&["train", "--resume", d("half").to_str().unwrap(), "--max-steps", "20", "--device", "gpu"]);
    let (a, b) = (std::fs::read(d("half").join("model.safetensors")).unwrap(), std::fs::read(d("gpu").join("model.safetensors")).unwrap());
    assert!(a == b, "the resumed sampled-softmax GPU run's weights differ from the uninterrupted run's");
}

#[test]
fn bench_on_the_gpu_says_how_many_dispatches_a_step_has() {
    let o = rnnlens(&["bench", "--device", "gpu", "--shapes", "c1", "--cells", "lstm", "--mode", "both", "--batch", "4", "--window", "6", "--steps", "1", "--warmup", "0", "--no-peak", "--quiet"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    // "dispatches: N a step, X a time step", a line under each mode's row (train, then infer)
    let counts: Vec<(usize, f64)> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("dispatches: "))
        .map(|l| {
            let (n, rest) = l.split_once(" a step, ").unwrap();
            (n.parse().unwrap(), rest.strip_suffix(" a time step").unwrap().parse().unwrap())
        })
        .collect();
    assert_eq!(counts.len(), 2, "{out}");
    let [(train, per_train), (infer, _)] = [counts[0], counts[1]];
    // a step has at least one dispatch a time step forward, and training adds the backward's
    assert!(infer >= 6 && train > infer, "{out}");
    assert!((per_train - train as f64 / 6.0).abs() < 0.06, "{out}");
    // in f16 it says what its products compute, and its CSV rows are f16's
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("f16.csv");
    let o = rnnlens(&["bench", "--device", "gpu", "--precision", "f16", "--shapes", "c1", "--cells", "lstm", "--mode", "train", "--batch", "4", "--window", "6", "--steps", "1", "--warmup", "0", "--no-peak", "--csv", csv.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("f16: every product"), "{out}{}", String::from_utf8_lossy(&o.stderr));
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(rows.lines().nth(1).is_some_and(|l| l.starts_with("rnnlens-gpu-f16,c1,lstm,")), "{rows}");
}

/// `--precision f16` on the GPU: the run says what its products compute, ends near the f32
/// run, keeps its loss scale in trainer.json, and a run resumed from its checkpoint gives the
/// bytes of the uninterrupted one (the scale and its count go on from the save).
#[test]
fn f16_training_says_what_it_computes_and_resumes_to_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = |n: &str| tmp.path().join(n);
    let f16 = ["--precision", "f16"];
    let whole = train_with(&d("f16"), "lstm", "gpu", "20", &f16);
    assert!(whole.contains("f16: every product's operands rounded to f16") && whole.contains("f16 loss scale 65536 (0 steps skipped so far)"), "{whole}");
    let f32 = valid_ppl(&train_with(&d("f32"), "lstm", "gpu", "20", &[]));
    let half = valid_ppl(&whole);
    assert!((half - f32).abs() < 0.01 * f32, "valid perplexity {half} in f16 against {f32} in f32");
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d("f16").join("trainer.json")).unwrap()).unwrap();
    assert_eq!(saved["loss_scale"]["scale"], 65536.0, "trainer.json keeps the loss scale: {}", saved["loss_scale"]);
    assert_eq!(saved["loss_scale"]["steps"], 20, "and the steps since it last changed");
    assert_eq!(saved["loss_scale"]["skipped"], 0, "and those its overflows skipped");
    train_with(&d("half"), "lstm", "gpu", "10", &f16);
    ok(&["train", "--resume", d("half").to_str().unwrap(), "--max-steps", "20", "--device", "gpu", "--precision", "f16"]);
    let (a, b) = (std::fs::read(d("half").join("model.safetensors")).unwrap(), std::fs::read(d("f16").join("model.safetensors")).unwrap());
    assert!(a == b, "the resumed f16 run's weights differ from the uninterrupted run's");
}

/// The campaign on the GPU (`DEVICE=gpu scripts/paper.sh run ROW`, as the device check runs the
/// slowest rows): a task row trains with `--device gpu`, its record names the device and goes to
/// `PAPER_RECORDS`, its id says gpu, and the row's setup on the page says where it ran.
#[test]
fn the_papers_campaign_runs_a_row_on_the_gpu_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let driver = r#"
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("paper", "scripts/paper.py")
p = importlib.util.module_from_spec(spec)
spec.loader.exec_module(p)
tmp = Path(sys.argv[1])
p.PAGE, p.RUNS = tmp / "paper.md", tmp / "runs"
p.RDA_TABLES["rda-t2"]["steps"] = 3
p.VARIANTS["tiny"] = dict(args=["--length", "20", "--hidden-size", "4"], what="a tiny run")
p.run(["rda-t2/rwa"], 1, "f32", 1, sys.argv[2], "tiny")
"#;
    let out = Command::new("python3")
        .args(["-c", driver, dir.path().to_str().unwrap(), env!("CARGO_BIN_EXE_rnnlens")])
        .env("DEVICE", "gpu")
        .env("PAPER_RECORDS", dir.path().join("records"))
        // a commit of its own: the work tree's state (changes under way) would mark the record
        .env("PAPER_COMMIT", "0123456789abcdef0123456789abcdef01234567")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("python3 runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let path = dir.path().join("records/rda-t2-rwa-f32-gpu-s1-tiny.json");
    let rec: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}\n{text}"))).unwrap();
    assert!(rec["command"].as_str().unwrap().ends_with("--device gpu"), "{rec}");
    assert!(!rec["device"].as_str().unwrap_or("").is_empty(), "{rec}");
    assert_eq!(rec["result"]["steps_run"], 3, "{rec}");
    let task: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("runs/rda-t2-rwa-f32-gpu-s1-tiny/task.json")).unwrap()).unwrap();
    assert_eq!(task["device"], "gpu", "{task}");
    let page = std::fs::read_to_string(dir.path().join("paper.md")).unwrap();
    let row = page.lines().find(|l| l.starts_with("| RWA | 133 |")).unwrap_or_else(|| panic!("{page}"));
    assert!(row.contains("[f32 GPU s1 tiny: > 3"), "{row}");
}
