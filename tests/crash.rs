//! Nothing lost: a training run killed (SIGKILL) at random moments and resumed each time ends
//! bit-identical to an uninterrupted run, and a full or read-only disk at checkpoint time
//! leaves the previous checkpoint intact.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rnnlens"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run rnnlens")
}

fn corpus(dir: &Path) -> PathBuf {
    let words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red", "house"];
    let mut s = String::new();
    let mut x: u64 = 11;
    for line in 0..500 {
        for i in 0..(4 + line % 6) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            s.push_str(words[(x >> 33) as usize % words.len()]);
            s.push(if i % 3 == 2 { ',' } else { ' ' });
        }
        s.push_str(".\n");
    }
    let p = dir.join("tiny.txt");
    std::fs::write(&p, s).unwrap();
    p
}

fn train_args(data: &str, out: &str, hidden: &str) -> Vec<String> {
    [
        "train", "--data", data, "--level", "char", "--embedding-size", "8", "--hidden-size", hidden, "--batch-size", "4",
        "--bptt", "10", "--epochs", "4", "--save-every", "7", "--threads", "1", "--sample-length", "0", "--quiet",
        "--dropout", "0.2", "--out", out,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn spawn(args: &[String]) -> Child {
    bin().args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn rnnlens")
}

#[test]
fn killed_and_resumed_training_ends_bit_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    let reference = tmp.path().join("ref");
    let out = run(&train_args(data, reference.to_str().unwrap(), "64").iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let dir = tmp.path().join("killed");
    let d = dir.to_str().unwrap().to_string();
    let mut x: u64 = 2026;
    let mut kills = 0;
    let t0 = Instant::now();
    loop {
        // Resume whenever a checkpoint exists (an interrupted save never leaves a partial one).
        let args = if dir.join("trainer.json").exists() {
            ["train", "--resume", &d, "--threads", "1", "--quiet"].iter().map(|s| s.to_string()).collect()
        } else {
            train_args(data, &d, "64")
        };
        let mut child = spawn(&args);
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = Duration::from_millis(10 + (x >> 33) % 190);
        let started = Instant::now();
        let finished = loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                use std::io::Read;
                child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                assert!(status.success(), "a resumed run failed: {err}");
                break true;
            }
            // After enough kills, let the run finish.
            if kills < 12 && started.elapsed() >= delay {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                kills += 1;
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if finished {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "the killed run never finished");
    }
    assert!(kills >= 3, "only {kills} kills landed; the test did not interrupt anything");
    for f in ["model.safetensors", "trainer.safetensors"] {
        let a = std::fs::read(reference.join(f)).unwrap();
        let b = std::fs::read(dir.join(f)).unwrap();
        assert!(a == b, "{f} differs after {kills} kills and resumes");
    }
    // The history too: every report once, none lost, the same numbers (wall times aside).
    let history = |d: &Path| -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(d.join("metrics.jsonl")).unwrap();
        text.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("seconds");
                v
            })
            .collect()
    };
    let h = history(&reference);
    assert!(h.len() > 20, "{} reports", h.len());
    assert!(history(&dir) == h, "metrics.jsonl differs after {kills} kills and resumes");
    // No temporary directories were left behind.
    let leftovers: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A small tmpfs mounted for the test, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(at: &Path, size: &str) -> Option<Mount> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", at.to_str().unwrap()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mount(at.to_path_buf()))
    }
    fn remount_read_only(&self) -> bool {
        Command::new("mount")
            .args(["-o", "remount,ro", self.0.to_str().unwrap()])
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn load_ok(dir: &Path) {
    rnnlens::model::lm::Lm::load(dir).unwrap_or_else(|e| panic!("the previous checkpoint in {} does not load: {e:#}", dir.display()));
}

#[test]
#[ignore = "needs root to mount a small tmpfs; .ci/run runs this with --ignored where it can mount one"]
fn a_full_or_read_only_disk_keeps_the_previous_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    let mut args = train_args(data, "", "96");
    let every = args.iter().position(|a| a == "--save-every").unwrap() + 1;
    args[every] = "1".into();
    let out_at = args.iter().position(|a| a == "--out").unwrap() + 1;
    // Measure one checkpoint, then give the run a disk where one fits and two do not: the
    // second save runs out of space while the first is still there.
    let probe = tmp.path().join("probe");
    args[out_at] = probe.to_str().unwrap().to_string();
    let mut one = args.clone();
    one.extend(["--max-steps".into(), "1".into()]);
    assert!(run(&one.iter().map(String::as_str).collect::<Vec<_>>()).status.success());
    let size: u64 = std::fs::read_dir(&probe).unwrap().flatten().map(|e| e.metadata().unwrap().len().div_ceil(4096) * 4096).sum();
    let mnt = Mount::tmpfs(&tmp.path().join("small"), &format!("{}k", size * 3 / 2 / 1024)).expect("cannot mount a tmpfs here (needs root)");
    let out = mnt.0.join("ck");
    let o = out.to_str().unwrap();
    args[out_at] = o.to_string();
    args.extend(["--max-steps".into(), "5".into()]);
    let r = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "expected the disk to fill up");
    assert!(err.contains("No space left") && err.contains("intact"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    load_ok(&out);
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("trainer.json")).unwrap()).unwrap();
    assert_eq!(saved["step"], 1, "the checkpoint on disk is the first one");
    // Nothing half-written stays on the small disk.
    let names: Vec<String> = std::fs::read_dir(&mnt.0).unwrap().flatten().map(|e| e.file_name().to_string_lossy().to_string()).collect();
    assert_eq!(names, vec!["ck"]);

    // Read-only at checkpoint time: resume from that checkpoint on a disk that became read-only.
    assert!(mnt.remount_read_only());
    let r = run(&["train", "--resume", o, "--threads", "1", "--quiet"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success());
    assert!(err.contains("Read-only") && err.contains(o), "{err}");
    load_ok(&out);
}

#[test]
fn divergence_stops_with_the_step_named_or_skips_the_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("div");
    let o = out.to_str().unwrap();
    // A linear recurrence carried across windows at a high rate overflows within a few steps.
    let mut args = train_args(data.to_str().unwrap(), o, "32");
    args.extend(["--cell", "linear-tanh", "--lr", "0.05"].map(String::from));
    let every = args.iter().position(|a| a == "--save-every").unwrap() + 1;
    args[every] = "1".into();
    let r = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "expected the run to diverge");
    assert!(err.contains("at step") && err.contains("intact"), "{err}");
    assert!(err.contains("layer 0 (linear)") || err.contains("rnn.0."), "names the layer or tensor: {err}");
    let step: u64 = err.split("at step ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    // The checkpoint on disk is the last good one, finite, from the step before.
    load_ok(&out);
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("trainer.json")).unwrap()).unwrap();
    assert_eq!(saved["step"], step - 1);

    // With --on-divergence skip the run goes on past that step, with a lower rate.
    let skip = tmp.path().join("skip");
    let s = skip.to_str().unwrap();
    let at = args.iter().position(|a| a == "--out").unwrap() + 1;
    args[at] = s.into();
    args.extend(["--on-divergence", "skip", "--max-steps", &(step + 20).to_string()].map(String::from));
    let r = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("batch skipped"), "{err}");
    load_ok(&skip);
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(skip.join("trainer.json")).unwrap()).unwrap();
    assert!(saved["skipped"].as_u64().unwrap() >= 1);
    assert!(saved["lr_scale"].as_f64().unwrap() <= 0.5);
}

#[test]
fn a_finite_but_exploding_loss_is_divergence_too() {
    // A RAN with identity output at a high rate, its additive state carried across windows
    // (not its default): the state grows until the loss is finite but absurd (tens of nats
    // per character).
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let out = tmp.path().join("ran");
    let o = out.to_str().unwrap();
    let mut args = train_args(data.to_str().unwrap(), o, "32");
    let at = args.iter().position(|a| a == "--dropout").unwrap() + 1;
    args[at] = "0".into();
    args.extend(["--cell", "ran-identity", "--carry-state", "true", "--lr", "0.1", "--clip-norm", "1000"].map(String::from));
    let r = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "expected the run to diverge: {err}");
    assert!(err.contains("nats per token, far above a uniform guess") && err.contains("training diverged at step"), "{err}");
    assert!(err.contains("outputs of layer 0 (ran) up to"), "names the layer: {err}");
    let step: u64 = err.split("at step ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    load_ok(&out);
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("trainer.json")).unwrap()).unwrap();
    let at = saved["step"].as_u64().unwrap();
    assert!(at < step && step - at <= 7, "the last checkpoint (step {at}) is the last one saved before step {step}");
    let history = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    for l in history.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if v["kind"] == "baseline" {
            continue; // measured before training
        }
        assert!(v["step"].as_u64().unwrap() <= at, "a report past the checkpoint: {l}");
        assert!(v["loss"].as_f64().or(v["nll"].as_f64()).unwrap() < 12.0, "a diverged figure was recorded: {l}");
    }

}

/// A run started with --max-steps, killed part way and resumed with `--resume DIR` alone ends
/// where the uninterrupted run ends (the same step, the same bytes), not at the end of its
/// epochs; an explicit --max-steps on resume sets a new total.
#[test]
fn a_killed_max_steps_run_resumed_alone_ends_at_its_max_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let data = corpus(tmp.path());
    let data = data.to_str().unwrap();
    let with = |out: &Path| {
        // 256 units: slow enough (milliseconds a step) that the kill lands well before the end.
        let mut a = train_args(data, out.to_str().unwrap(), "256");
        let every = a.iter().position(|x| x == "--save-every").unwrap() + 1;
        a[every] = "3".into();
        a.extend(["--max-steps".to_string(), "60".to_string()]);
        a
    };
    let reference = tmp.path().join("ref");
    let out = run(&with(&reference).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let step = |d: &Path| -> u64 {
        let t: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d.join("trainer.json")).unwrap()).unwrap();
        t["step"].as_u64().unwrap()
    };
    assert_eq!(step(&reference), 60);

    // Killed as soon as a checkpoint past step 6 exists, far from the end.
    let dir = tmp.path().join("killed");
    let mut child = spawn(&with(&dir));
    let t0 = Instant::now();
    loop {
        if dir.join("trainer.json").exists() && std::fs::read_to_string(dir.join("trainer.json")).is_ok_and(|t| t.contains("\"step\"")) && step(&dir) >= 6 {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be interrupted");
        assert!(t0.elapsed() < Duration::from_secs(60), "no checkpoint appeared");
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_at = step(&dir);
    assert!(killed_at < 60, "killed at step {killed_at}");
    let d = dir.to_str().unwrap();
    let out = run(&["train", "--resume", d, "--threads", "1", "--quiet"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(step(&dir), 60, "resumed from step {killed_at}");
    for f in ["model.safetensors", "trainer.safetensors"] {
        assert!(std::fs::read(reference.join(f)).unwrap() == std::fs::read(dir.join(f)).unwrap(), "{f} differs");
    }
    // Settings equal to the saved ones may be repeated; a different one is refused, by name.
    let out = run(&["train", "--resume", d, "--threads", "1", "--quiet", "--hidden-size", "256", "--level", "char", "--data", data]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(step(&dir), 60);
    let out = run(&["train", "--resume", d, "--quiet", "--hidden-size", "32", "--bptt", "10", "--lr", "0.01"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--hidden-size") && err.contains("--lr") && !err.contains("--bptt"), "{err}");
    // A new total goes on from there.
    let out = run(&["train", "--resume", d, "--threads", "1", "--quiet", "--max-steps", "70"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(step(&dir), 70);
}
