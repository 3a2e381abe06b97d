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
    pub curve: Vec<Point>,
    pub seconds: f64,
    /// the trained parameters (not serialised: [`save_task_model`] writes them)
    #[serde(skip)]
    pub weights: Vec<f32>,
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
}

/// A task checkpoint's `config.json`.
#[derive(Serialize, Deserialize)]
pub struct TaskCheckpointConfig<M> {
    #[serde(flatten)]
    pub model: M,
    pub task: TaskMeta,
}

/// The comparison's options, in its output directory.
pub const TASK_JSON: &str = "task.json";
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
        TaskResult { task, cell: p.cell, steps_to_threshold: p.steps_to_threshold, test_accuracy: p.test_accuracy, curve: p.curve, seconds: p.seconds, weights: self.w }
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
    let (m, v) = if progress.finished {
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

/// The options of the comparison saved in `dir`, to resume it: its own, with the thread count
/// given now where one is (the result is then the same bits only at the saved count), and
/// `resume` and `out` naming `dir`.
pub fn resume_options(dir: &Path, threads: Option<usize>) -> Result<TaskOptions> {
    let path = dir.join(TASK_JSON);
    if !path.exists() {
        bail!("{} holds no task run to resume ({TASK_JSON} is missing; it is written when a run starts)", dir.display());
    }
    let mut o: TaskOptions = checkpoint::load_json(&path)?;
    if let (Some(now), Some(then)) = (threads, o.runtime.threads) {
        if now != then {
            eprintln!("warning: the run started with --threads {then}; continuing with {now} gives a result that may differ in its last bits from an uninterrupted run");
        }
    }
    o.runtime.threads = threads.or(o.runtime.threads);
    o.out = dir.to_path_buf();
    o.resume = Some(dir.to_path_buf());
    o.overwrite = false;
    Ok(o)
}
