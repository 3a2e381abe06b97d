//! What a task run records, and keeps on disk so that a killed run continues where it stopped
//! and ends with the same bits as an uninterrupted one (`rnnlens task --resume OUT`): its
//! learning curve ([`Point`]) and result ([`TaskResult`]), the task a checkpoint was trained on
//! ([`TaskMeta`]), and its progress.
//!
//! `OUT/task.json` holds the options the comparison started with (the thread count resolved).
//! Every `--save-every` steps, and at its end, each cell's checkpoint directory `OUT/CELL`
//! holds its task checkpoint ([`super::save_task_model`]'s files) and beside them
//! `trainer.task.json` ([`TaskProgress`]: the step, the data generator's position, the curve so
//! far) and `trainer.task.safetensors` (Adam's two moments). Nothing else is random after the
//! initialisation, so the weights, the moments, the optimizer's step count and the generator's
//! position are the whole state of a run.

use super::TaskOptions;
use crate::data::checkpoint::{self, NamedTensor};
use crate::kernels::rng::Rng;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One point of a learning curve.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Point {
    pub step: usize,
    pub loss: f64,
    /// fraction of scored outputs right (None for addition)
    pub accuracy: Option<f64>,
}

/// What a run measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TaskResult {
    pub task: String,
    pub cell: String,
    /// first step at which the paper's threshold was met, if it was
    pub steps_to_threshold: Option<usize>,
    /// test accuracy (MNIST tasks)
    pub test_accuracy: Option<f64>,
    /// MNIST tasks with `--eval-every`: (step, held-out accuracy) of each evaluation
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evals: Vec<(usize, f64)>,
    /// the step at which `--patience` stopped the run (its best held-out accuracy that many
    /// steps behind)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stop: Option<usize>,
    pub curve: Vec<Point>,
    pub seconds: f64,
    /// the trained parameters (not serialised: [`save_task_model`] writes them)
    #[serde(skip)]
    pub weights: Vec<f32>,
    /// where training stood when a kept run ended at its step cap, the threshold not met: what
    /// continuing it to a larger cap needs (`task --resume DIR --steps N`)
    #[serde(skip)]
    pub end: Option<EndState>,
}

/// The best of held-out evaluations `(step, accuracy)`, the earliest of equal ones.
pub fn best_eval(evals: &[(usize, f64)]) -> Option<(usize, f64)> {
    evals.iter().copied().fold(None, |b, e| if b.is_none_or(|(_, a)| e.1 > a) { Some(e) } else { b })
}

/// The optimizer's and the data generator's state at the end of a run's last step.
#[derive(Clone, Debug)]
pub struct EndState {
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    pub optimizer_steps: u64,
    pub data: (u64, u128),
    pub loss_scale: Option<crate::kernels::precision::LossScale>,
}

/// What a task checkpoint's `config.json` adds to the model's: the task and how its data was
/// drawn (for the permuted MNIST task, the permutation of the steps itself).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TaskMeta {
    pub name: String,
    pub length: usize,
    pub seed: u64,
    pub steps_run: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permutation: Option<Vec<usize>>,
    /// the addition task's marker layout, where it is not the default (so that eval and
    /// explain draw the sequences it was trained on)
    #[serde(default, skip_serializing_if = "super::Markers::is_default")]
    pub markers: super::Markers,
}

/// A task checkpoint's `config.json`.
#[derive(Serialize, Deserialize)]
pub struct TaskCheckpointConfig<M> {
    #[serde(flatten)]
    pub model: M,
    pub task: TaskMeta,
}

/// The comparison's options, in its output directory.
pub const TASK_JSON: &str = checkpoint::TASK_RUN_FILE;
/// A cell's progress ([`TaskProgress`]), in its checkpoint directory.
pub const PROGRESS_JSON: &str = "trainer.task.json";
/// A cell's optimizer moments, in its checkpoint directory.
pub const MOMENTS: &str = "trainer.task.safetensors";

/// Where one cell's run stands.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TaskProgress {
    pub cell: String,
    /// optimizer steps taken (the curve's length)
    pub step: usize,
    /// the data generator after the last step's batch: seed and word position (decimal: it is a
    /// 128-bit number)
    pub data_seed: u64,
    pub data_pos: String,
    /// Adam's update count
    pub optimizer_steps: u64,
    /// f16's loss scale and its counts (`--precision f16` only)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<crate::kernels::precision::LossScale>,
    pub curve: Vec<Point>,
    /// the held-out evaluations so far (`--eval-every`)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evals: Vec<(usize, f64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stop: Option<usize>,
    /// wall time over every part of the run
    pub seconds: f64,
    pub steps_to_threshold: Option<usize>,
    pub test_accuracy: Option<f64>,
    /// the run ended (threshold met, or the step cap reached, and the test scored)
    pub finished: bool,
}

/// A saved run to continue: its progress, weights and Adam's moments.
pub struct Saved {
    pub progress: TaskProgress,
    pub w: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
}

impl Saved {
    pub fn data_rng(&self) -> Result<Rng> {
        let pos: u128 = self.progress.data_pos.parse().with_context(|| format!("{PROGRESS_JSON}: data_pos"))?;
        Ok(Rng::restore(self.progress.data_seed, pos))
    }

    /// The result of a finished run, as training returned it.
    pub fn result(self, task: String) -> TaskResult {
        let p = self.progress;
        TaskResult { task, cell: p.cell, steps_to_threshold: p.steps_to_threshold, test_accuracy: p.test_accuracy, evals: p.evals, early_stop: p.early_stop, curve: p.curve, seconds: p.seconds, weights: self.w, end: None }
    }

    /// Whether this run has nothing left to do under a cap of `steps`: it met the threshold, or
    /// ended at a cap `steps` does not raise.
    pub fn done_at(&self, steps: usize) -> bool {
        let p = &self.progress;
        p.finished && (p.steps_to_threshold.is_some() || p.early_stop.is_some() || p.step >= steps)
    }
}

/// The progress file of a run that ended after `r`'s steps (with its end state, if it has one,
/// so that it can continue to a larger cap).
pub fn finished_progress(r: &TaskResult) -> TaskProgress {
    let end = r.end.as_ref();
    TaskProgress {
        cell: r.cell.clone(),
        step: r.curve.len(),
        data_seed: end.map_or(0, |e| e.data.0),
        data_pos: end.map_or(String::new(), |e| e.data.1.to_string()),
        optimizer_steps: end.map_or(r.curve.len() as u64, |e| e.optimizer_steps),
        loss_scale: end.and_then(|e| e.loss_scale),
        curve: r.curve.clone(),
        evals: r.evals.clone(),
        early_stop: r.early_stop,
        seconds: r.seconds,
        steps_to_threshold: r.steps_to_threshold,
        test_accuracy: r.test_accuracy,
        finished: true,
    }
}

/// The files a cell's checkpoint directory carries beside the model: its progress, and (for a
/// run that goes on) Adam's moments.
pub fn extra_files(progress: &TaskProgress, moments: Option<(&[f32], &[f32])>) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let mut files = vec![(PROGRESS_JSON, checkpoint::encode_json(progress)?)];
    if let Some((m, v)) = moments {
        let t = |name: &str, d: &[f32]| NamedTensor::new(name, vec![d.len()], d.to_vec());
        files.push((MOMENTS, checkpoint::encode_safetensors(&[t("adam.m", m), t("adam.v", v)])?));
    }
    Ok(files)
}

/// The steps a run saved in the cell directory `dir` has taken, or `None` where none was saved.
pub fn steps_run(dir: &Path) -> Result<Option<usize>> {
    let path = dir.join(PROGRESS_JSON);
    Ok(if path.exists() { Some(checkpoint::load_json::<TaskProgress>(&path)?.step) } else { None })
}

/// The run saved in the cell directory `dir`, or `None` where none was saved there; `names`
/// are the model's tensors (name and shape) in the flat vector's order.
pub fn load(dir: &Path, names: &[(String, Vec<usize>)], cell: &str) -> Result<Option<Saved>> {
    let path = dir.join(PROGRESS_JSON);
    if !path.exists() {
        return Ok(None);
    }
    let progress: TaskProgress = checkpoint::load_json(&path)?;
    if progress.cell != cell || progress.curve.len() != progress.step {
        bail!("{} does not describe a run of {cell} (cell {:?}, {} steps, {} curve points)", path.display(), progress.cell, progress.step, progress.curve.len());
    }
    let (_, tensors, _): (serde_json::Value, _, _) = checkpoint::load_model_dir(dir, |_| false)?;
    let w: Vec<f32> = checkpoint::expect_tensors(&tensors, names).with_context(|| format!("{}", dir.join("model.safetensors").display()))?.concat();
    // A finished run keeps its moments where it ended at its cap (to continue to a larger
    // one); one that met its threshold, or that an earlier rnnlens saved, has none.
    let (m, v) = if progress.finished && !dir.join(MOMENTS).exists() {
        (Vec::new(), Vec::new())
    } else {
        let p = dir.join(MOMENTS);
        let n = w.len();
        let t = checkpoint::load_safetensors(&p)?;
        let mv = checkpoint::expect_tensors(&t, &[("adam.m".to_string(), vec![n]), ("adam.v".to_string(), vec![n])]).with_context(|| format!("{}", p.display()))?;
        let mut mv = mv.into_iter();
        (mv.next().expect("two tensors"), mv.next().expect("two tensors"))
    };
    Ok(Some(Saved { progress, w, m, v }))
}

/// Refuse to start a comparison in `out` where one was started before, unless `overwrite`:
/// what it trained would be replaced cell by cell.
pub fn check_fresh(out: &Path, overwrite: bool) -> Result<()> {
    let path = out.join(TASK_JSON);
    if path.exists() && !overwrite {
        let what = checkpoint::load_json::<TaskOptions>(&path).map(|o| format!(" ({} of {})", o.name, o.compare.map_or(o.cell, |c| c.join(","))));
        bail!(
            "{} holds a task run{}: continue it with --resume {}, start it again with --overwrite, or choose another --out",
            out.display(),
            what.unwrap_or_default(),
            out.display()
        );
    }
    Ok(())
}

/// The settings a resumed task run may change: its step cap (a run that ended at its cap
/// continues to a larger one, as if given it from the start), its threads and how often it saves.
pub const RESUMABLE: &[&str] = &["steps", "threads", "save_every"];

/// The options as flat `key: value` pairs, under the names the command line and Python give them.
fn flat(o: &TaskOptions) -> Result<serde_json::Map<String, serde_json::Value>> {
    let serde_json::Value::Object(mut m) = serde_json::to_value(o)? else { bail!("task options are a table") };
    if let Some(serde_json::Value::Object(rt)) = m.remove("runtime") {
        m.extend(rt);
    }
    Ok(m)
}

/// The options among `TaskOptions`' settings that `is_given` says the caller set (a flag on the
/// command line, a key of Python's), by their names.
pub fn given_options(is_given: impl Fn(&str) -> bool) -> Vec<String> {
    flat(&TaskOptions::default()).map(|m| m.keys().filter(|k| is_given(k)).cloned().collect()).unwrap_or_default()
}

/// The options of the comparison saved in `dir`, to resume it: its own, with those of `now`
/// that were `given` (the command line's flags, Python's keys) where they may change
/// ([`RESUMABLE`]); any other setting given must equal the saved one. `resume` and `out` name
/// `dir`.
pub fn resume_options(dir: &Path, now: &TaskOptions, given: &[String]) -> Result<TaskOptions> {
    let path = dir.join(TASK_JSON);
    if !path.exists() {
        bail!("{} holds no task run to resume ({TASK_JSON} is missing; it is written when a run starts)", dir.display());
    }
    let mut o: TaskOptions = checkpoint::load_json(&path)?;
    let (a, b) = (flat(now)?, flat(&o)?);
    let changed: Vec<String> = given
        .iter()
        .filter(|k| !RESUMABLE.contains(&k.as_str()) && !matches!(k.as_str(), "resume" | "overwrite"))
        // with --resume the task's name may be left out; `out` is the directory resumed
        .filter(|k| !matches!((k.as_str(), now.name.is_empty(), now.out == dir), ("name", true, _) | ("out", _, true)))
        .filter(|k| a.get(k.as_str()) != b.get(k.as_str()))
        .map(|k| format!("--{} (saved: {})", k.replace('_', "-"), b.get(k.as_str()).map_or("none".into(), |v| v.to_string())))
        .collect();
    if !changed.is_empty() {
        bail!(
            "--resume continues the saved task run as it was configured; it cannot change {} (only {} may change; start a new run with another --out to change the rest)",
            changed.join(", "),
            RESUMABLE.iter().map(|k| format!("--{}", k.replace('_', "-"))).collect::<Vec<_>>().join(", ")
        );
    }
    let given = |k: &str| given.iter().any(|g| g == k);
    if given("threads") {
        if let (Some(n), Some(then)) = (now.runtime.threads, o.runtime.threads) {
            if n != then {
                eprintln!("warning: the run started with --threads {then}; continuing with {n} gives a result that may differ in its last bits from an uninterrupted run");
            }
        }
        o.runtime.threads = now.runtime.threads.or(o.runtime.threads);
    }
    if given("steps") {
        o.steps = now.steps;
    }
    if given("save_every") {
        o.save_every = now.save_every;
    }
    o.out = dir.to_path_buf();
    o.resume = Some(dir.to_path_buf());
    o.overwrite = false;
    Ok(o)
}
