//! Training a cell on a task: the model (cells and a linear readout), the loss at the scored
//! positions, the training loop with its test evaluations, and the trained model's checkpoint.

use super::generate::{generate, permutation, Batch, Images, Loss, TaskKind, TASK_NAMES};
use super::model::{TaskCheckpointConfig, TaskMeta};
use crate::kernels::rng::Rng;
use crate::training::Stopped;
use anyhow::{bail, Result};
use std::ops::ControlFlow;
use crate::kernels::gemm::{add_bias_rows, add_col_sums, linear, linear_dw, linear_dx};
use crate::model::{layer_configs, Init, Model, ModelConfig, ModelWs, TokenizerConfig};
use crate::cells::registry::{reads_tokens, CellOptions};
use crate::training::optim::{clip, Optimizer, OptimizerKind};
use crate::kernels::runtime::Device;

/// The RDA paper's training set-up (section 6.1), with the sizes a run may reduce.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    pub hidden: usize,
    pub batch: usize,
    /// optimizer steps at most
    pub steps: usize,
    pub lr: f64,
    /// gradients clipped to [-clip, clip]
    pub clip: f64,
    pub seed: u64,
    /// images for the MNIST tasks: (train, test)
    pub mnist: Option<(crate::data::idx::Mnist, crate::data::idx::Mnist)>,
    /// test images scored at the end (MNIST)
    pub test_limit: usize,
    /// the task's length `N` (None: the paper's; see the module doc)
    pub length: Option<usize>,
    /// learned initial state for cells that start from zeros (None: the task's default,
    /// [`TaskKind::default_learn_initial_state`])
    pub learn_initial_state: Option<bool>,
    /// where the model trains
    pub device: Device,
    /// the GRU in PyTorch's form (true) or the papers' (false; `--gru-reset-after`)
    pub gru_reset_after: bool,
}

impl TaskConfig {
    pub fn length(&self, kind: TaskKind) -> usize {
        self.length.unwrap_or(kind.default_length())
    }
    pub fn learn_initial_state(&self, kind: TaskKind) -> bool {
        self.learn_initial_state.unwrap_or(kind.default_learn_initial_state())
    }
    /// The model this run trains for `cell` on `kind`.
    pub fn model(&self, kind: TaskKind, cell: &str) -> Result<Model> {
        let opts = CellOptions { learn_initial_state: self.learn_initial_state(kind), gru_reset_after: self.gru_reset_after, ..Default::default() };
        task_model_with(kind, cell, self.hidden, opts)
    }
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig { hidden: 250, batch: 100, steps: 10_000, lr: 0.001, clip: 1.0, seed: 1, mnist: None, test_limit: 10_000, length: None, learn_initial_state: None, device: Device::Cpu, gru_reset_after: true }
    }
}

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

/// The paper's measure for each task: loss below (addition) or accuracy reaching a threshold.
pub fn threshold(kind: TaskKind) -> Option<(&'static str, f64)> {
    match kind {
        TaskKind::Addition => Some(("loss <", 0.001)),
        TaskKind::ClassifyLength => Some(("accuracy =", 1.0)),
        TaskKind::Copy => Some(("accuracy >", 0.999)),
        TaskKind::Multicopy => Some(("accuracy >", 0.99)),
        TaskKind::Parentheses => Some(("accuracy >", 0.99)),
        TaskKind::SeqMnist | TaskKind::PermutedSeqMnist => None,
    }
}

fn met(kind: TaskKind, p: &Point) -> bool {
    match threshold(kind) {
        Some(("loss <", t)) => p.loss < t,
        Some(("accuracy =", t)) => p.accuracy.is_some_and(|a| a >= t),
        Some((_, t)) => p.accuracy.is_some_and(|a| a > t),
        None => false,
    }
}

/// A task model: the cell stack on the task's input vectors (or symbols), and a readout; with
/// `learn_initial_state`, cells that start from zeros start from a learned state instead.
pub fn task_model(kind: TaskKind, cell: &str, hidden: usize, learn_initial_state: bool) -> Result<Model> {
    task_model_with(kind, cell, hidden, CellOptions { learn_initial_state, ..Default::default() })
}

/// [`task_model`] with the cell's options `opts` (its variant beside its name).
pub fn task_model_with(kind: TaskKind, cell: &str, hidden: usize, opts: CellOptions) -> Result<Model> {
    let spec = kind.spec();
    if reads_tokens(cell) && spec.symbols.is_none() {
        bail!("{cell} switches on input symbols; the {kind:?} task's inputs are real numbers");
    }
    let input = if reads_tokens(cell) { spec.symbols.unwrap_or(spec.input) } else { spec.input };
    let layers = layer_configs(cell, input, &[hidden], None, opts)?;
    Model::new(ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: spec.outputs,
        tokenizer: TokenizerConfig { level: "task".into(), normalize: "none".into(), split: None },
        embedding_size: None,
        layers,
        cell_name: cell.into(),
        input_size: Some(input),
    })
}

/// Loss and accuracy at the scored positions, from the readout's outputs `out`
/// `[scored, C]`; with `grad`, `out` becomes the gradient of the mean loss.
pub fn task_loss(kind: TaskKind, b: &Batch, out: &mut [f32], grad: bool) -> (f64, Option<f64>) {
    let spec = kind.spec();
    let c = spec.outputs;
    let n = b.scored.len();
    match spec.loss {
        Loss::Squared => {
            let mut loss = 0.0f64;
            let mut right = 0usize;
            for (row, tgt) in out.chunks_exact_mut(c).zip(b.values.chunks_exact(c)) {
                for (o, &t) in row.iter_mut().zip(tgt) {
                    let d = *o - t;
                    loss += (d as f64) * (d as f64);
                    right += (o.round() == t) as usize;
                    if grad {
                        *o = 2.0 * d / (n * c) as f32;
                    }
                }
            }
            let acc = (kind != TaskKind::Addition).then(|| right as f64 / (n * c) as f64);
            (loss / (n * c) as f64, acc)
        }
        Loss::CrossEntropy => {
            let mut loss = 0.0f64;
            let mut right = 0usize;
            for (row, &k) in out.chunks_exact_mut(c).zip(&b.classes) {
                let mx = row.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
                let arg = row.iter().position(|&v| v == mx).unwrap_or(0);
                right += (arg == k as usize) as usize;
                let sum: f32 = row.iter().map(|&v| (v - mx).exp()).sum();
                loss += (sum.ln() + mx - row[k as usize]) as f64;
                if grad {
                    for v in row.iter_mut() {
                        *v = (*v - mx).exp() / sum / n as f32;
                    }
                    row[k as usize] -= 1.0 / n as f32;
                }
            }
            (loss / n as f64, Some(right as f64 / n as f64))
        }
    }
}

/// Scratch space of a task step: the model's workspace and the readout's buffers, allocated
/// once and reused by every step.
#[derive(Default)]
pub struct TaskWs {
    pub model: ModelWs<f32>,
    /// the top layer's outputs at the scored positions `[scored, H]`
    gathered: Vec<f32>,
    /// the readout's outputs `[scored, C]`, then their gradient
    out: Vec<f32>,
    /// the gradient of `gathered`
    dg: Vec<f32>,
}

/// Forward a batch and compute the readout at the scored positions into `ws.out` `[scored, C]`.
fn forward_scored(model: &Model, w: &[f32], b: &Batch, ws: &mut TaskWs) {
    // A symbol-reading cell (ISAN) takes `tokens`; the one-hot `x` is then simply unused.
    let mut state = model.initial_state::<f32>(b.batch);
    model.forward_layers(w, Some(&b.x[..]), &b.tokens, b.steps, b.batch, &mut state, &mut ws.model, None);
    let h = model.top_width();
    let top = &ws.model.xs[model.cells.len()];
    let (gathered, out) = (&mut ws.gathered, &mut ws.out);
    gathered.clear();
    for &p in &b.scored {
        gathered.extend_from_slice(&top[p * h..(p + 1) * h]);
    }
    let (hw, hb) = model.head();
    let c = model.vocab_size();
    out.clear();
    out.resize(b.scored.len() * c, 0.0);
    linear(b.scored.len(), c, h, gathered, &w[hw], out, false);
    add_bias_rows(b.scored.len(), c, &[&w[hb]], out, c);
}

/// Forward `b` and score it without a gradient: the mean loss and the accuracy.
pub fn task_eval(kind: TaskKind, model: &Model, w: &[f32], b: &Batch, ws: &mut TaskWs) -> (f64, Option<f64>) {
    forward_scored(model, w, b, ws);
    task_loss(kind, b, &mut ws.out, false)
}

/// One training step on `b` as [`run_task`] takes it: forward, loss, backward into `g`
/// (overwritten), gradients clipped to `[-cfg.clip, cfg.clip]`, one optimizer update at `cfg.lr`.
/// Returns the mean loss and the accuracy; a non-finite loss leaves the weights unchanged.
#[allow(clippy::too_many_arguments)]
pub fn task_step(
    kind: TaskKind,
    model: &Model,
    w: &mut [f32],
    g: &mut [f32],
    opt: &mut Optimizer,
    b: &Batch,
    ws: &mut TaskWs,
    cfg: &TaskConfig,
) -> (f64, Option<f64>) {
    let (loss, accuracy) = task_gradient(kind, model, w, g, b, ws);
    if loss.is_finite() {
        clip(g, None, Some(cfg.clip));
        opt.step(w, g, cfg.lr);
    }
    (loss, accuracy)
}

/// The loss and accuracy of one batch, and in `g` the gradient of its mean loss (left as it
/// was when the loss is not finite).
pub fn task_gradient(kind: TaskKind, model: &Model, w: &[f32], g: &mut [f32], b: &Batch, ws: &mut TaskWs) -> (f64, Option<f64>) {
    forward_scored(model, w, b, ws);
    let (loss, accuracy) = task_loss(kind, b, &mut ws.out, true);
    if !loss.is_finite() {
        return (loss, accuracy);
    }
    g.fill(0.0);
    let (hw, hb) = model.head();
    let (h, c) = (model.top_width(), model.vocab_size());
    let n = b.scored.len();
    linear_dw(n, c, h, &ws.out, &ws.gathered, &mut g[hw.clone()]);
    add_col_sums(n, c, &ws.out, &mut g[hb]);
    let nl = model.cells.len();
    let dxs = &mut ws.model.dxs[nl];
    dxs.fill(0.0);
    ws.dg.resize(n * h, 0.0);
    linear_dx(n, c, h, &ws.out, &w[hw], &mut ws.dg, false);
    for (k, &p) in b.scored.iter().enumerate() {
        dxs[p * h..(p + 1) * h].copy_from_slice(&ws.dg[k * h..(k + 1) * h]);
    }
    model.backward_layers(w, g, &b.tokens, &mut ws.model);
    (loss, accuracy)
}

/// One step under MPI ([`crate::training::dist`]): this rank's rows `b` of the global batch;
/// the losses, accuracies and gradients are summed over the ranks weighted by their scored
/// positions, then every rank clips and updates alike.
#[allow(clippy::too_many_arguments)]
pub fn task_step_ranks(kind: TaskKind, model: &Model, w: &mut [f32], g: &mut [f32], opt: &mut Optimizer, b: &Batch, ws: &mut TaskWs, cfg: &TaskConfig) -> (f64, Option<f64>) {
    let dist = crate::training::dist::get();
    let (loss, accuracy) = task_gradient(kind, model, w, g, b, ws);
    let n = b.scored.len() as f64;
    let mut v = [loss * n, accuracy.unwrap_or(0.0) * n, n];
    dist.sum_f64(&mut v);
    let (loss, total) = (v[0] / v[2], v[2]);
    let accuracy = accuracy.map(|_| v[1] / total);
    if loss.is_finite() {
        let share = (n / total) as f32;
        g.iter_mut().for_each(|x| *x *= share);
        dist.sum_f32(g);
        clip(g, None, Some(cfg.clip));
        opt.step(w, g, cfg.lr);
    }
    (loss, accuracy)
}

/// Train `cell` on `kind` with the paper's set-up, recording the learning curve at every step;
/// stops early once the paper's threshold is met, or where `progress` answers `Break` (the
/// error is then [`crate::training::Stopped`]).
pub fn run_task(kind: TaskKind, cell: &str, cfg: &TaskConfig, progress: impl FnMut(&Point) -> ControlFlow<()>) -> Result<TaskResult> {
    run_task_kept(kind, cell, cfg, None, progress)
}

/// Where a run is kept ([`super::keep`]): its cell's checkpoint directory, saved every `every`
/// steps (0: never during the run), and the saved run it continues, if any.
pub struct Keep<'a> {
    pub dir: &'a std::path::Path,
    pub every: usize,
    pub from: Option<super::keep::Saved>,
}

/// [`run_task`], saving the run every `keep.every` steps in `keep.dir`, or continuing the run
/// saved there: the same bits as an uninterrupted run at the same thread count and precision.
pub fn run_task_kept(kind: TaskKind, cell: &str, cfg: &TaskConfig, keep: Option<Keep>, mut progress: impl FnMut(&Point) -> ControlFlow<()>) -> Result<TaskResult> {
    let t0 = std::time::Instant::now();
    let length = cfg.length(kind);
    kind.check_length(length)?;
    let model = cfg.model(kind, cell)?;
    check_memory(&model, kind, length, cfg)?;
    let dist = crate::training::dist::get();
    if !cfg.batch.is_multiple_of(dist.size) {
        bail!("the batch of {} rows does not divide evenly among the {} ranks; give a --batch-size that does", cfg.batch, dist.size);
    }
    if dist.size > 1 && cfg.device != Device::Cpu {
        bail!("tasks under MPI train on the CPU: leave out --device gpu");
    }
    let mut result = TaskResult {
        task: format!("{kind:?}"),
        cell: cell.into(),
        steps_to_threshold: None,
        test_accuracy: None,
        curve: Vec::new(),
        seconds: 0.0,
        weights: Vec::new(),
    };
    let (mut keep, from) = match keep {
        Some(Keep { dir, every, from }) => (Some((dir, every)), from),
        None => (None, None),
    };
    // Identical data for every cell: the batches come from their own generator.
    let (mut engine, mut data_rng, before) = match from {
        Some(saved) => {
            let data_rng = saved.data_rng()?;
            let p = &saved.progress;
            (result.curve, result.seconds) = (p.curve.clone(), p.seconds);
            let mut e = Engine::new(&model, saved.w, cfg)?;
            e.set_moments(saved.m, saved.v, p.optimizer_steps);
            (e, data_rng, p.seconds)
        }
        None => {
            let w = model.init_params(Init::Xavier, &mut Rng::new(cfg.seed));
            (Engine::new(&model, w, cfg)?, Rng::new(cfg.seed.wrapping_add(1000)), 0.0)
        }
    };
    if !dist.is_root() {
        keep = None;
    }
    let perm = match kind {
        TaskKind::PermutedSeqMnist => permutation(cfg.seed, length),
        _ => Vec::new(),
    };
    let train_images = cfg.mnist.as_ref().map(|(tr, _)| Images { pixels: &tr.images, labels: &tr.labels });
    let seconds = |t0: std::time::Instant| before + t0.elapsed().as_secs_f64();
    for step in result.curve.len() + 1..=cfg.steps {
        // Every rank draws the whole batch (the same data as one process) and trains its rows.
        let b = generate(kind, length, cfg.batch, &mut data_rng, train_images.as_ref().map(|i| (i, &[][..])), &perm)?;
        let (loss, accuracy) = engine.step(kind, &model, &b, cfg)?;
        if !loss.is_finite() {
            bail!("{cell} on {kind:?}: the loss became {loss} at step {step}");
        }
        let p = Point { step, loss, accuracy };
        if progress(&p).is_break() {
            let kept = match keep {
                Some((dir, _)) if dir.join(super::keep::PROGRESS_JSON).exists() => format!("{cell} on {kind:?} continues from its last save in {} with --resume", dir.display()),
                _ => format!("{cell} on {kind:?} was not saved"),
            };
            return Err(Stopped { step: step as u64, kept }.into());
        }
        result.curve.push(p);
        if met(kind, &p) {
            result.steps_to_threshold = Some(step);
            break;
        }
        if let Some((dir, _)) = keep.filter(|&(_, every)| every > 0 && step % every == 0 && step < cfg.steps) {
            let (w, m, v, t) = engine.snapshot()?;
            result.seconds = seconds(t0);
            let progress = super::keep::TaskProgress {
                cell: cell.into(),
                step,
                data_seed: data_rng.position().0,
                data_pos: data_rng.position().1.to_string(),
                optimizer_steps: t,
                curve: result.curve.clone(),
                seconds: result.seconds,
                steps_to_threshold: None,
                test_accuracy: None,
                finished: false,
            };
            write_task_dir(dir, kind, cell, cfg, &w, step, &super::keep::extra_files(&progress, Some((&m, &v)))?)?;
        }
    }
    if let Some((_, test)) = &cfg.mnist {
        let images = Images { pixels: &test.images, labels: &test.labels };
        let n = test.labels.len().min(cfg.test_limit);
        let mut right = 0.0;
        let mut start = 0;
        while start < n {
            let idx: Vec<usize> = (start..(start + cfg.batch).min(n)).collect();
            let b = generate(kind, length, idx.len(), &mut data_rng, Some((&images, &idx)), &perm)?;
            let (_, acc) = engine.eval(kind, &model, &b)?;
            right += acc.unwrap_or(0.0) * idx.len() as f64;
            start += idx.len();
        }
        result.test_accuracy = Some(right / n.max(1) as f64);
    }
    result.seconds = seconds(t0);
    result.weights = engine.weights()?;
    Ok(result)
}

/// Refuse a task run whose estimated memory ([`memory_need`]) the machine does not have, before
/// anything large is allocated: a `--length` or `--batch-size` a user can type would otherwise
/// end in an abort, and take a Python interpreter with it.
fn check_memory(model: &Model, kind: TaskKind, length: usize, cfg: &TaskConfig) -> Result<()> {
    crate::kernels::runtime::check_fits(
        &format!(
            "the task ({} parameters with their gradient and Adam's moments, a batch of {} sequences of {length} steps and its workspaces)",
            model.n_params, cfg.batch
        ),
        memory_need(model, kind, length, cfg.batch, cfg.device),
        "choose a smaller --length, --batch-size or --hidden-size",
    )
}

/// Bytes a task run of `model` holds at its peak, estimated before anything is allocated: the
/// weights, their gradient and Adam's two moments; a batch's inputs and targets; on the CPU the
/// workspaces over the batch's `T·B` positions, twice `forward_bytes` (each layer's tape and the
/// readout's outputs, then the backward's own: at the paper's sizes the peaks measured 0.8-1.9
/// times one `forward_bytes`, docs/benchmarks.md); a tenth more. A GPU run keeps its workspaces
/// on the device, whose own limits are checked when its buffers are made.
pub fn memory_need(model: &Model, kind: TaskKind, length: usize, batch: usize, device: Device) -> u64 {
    let spec = kind.spec();
    let rows = (length as u64).saturating_mul(batch as u64);
    // x, a symbol, and at most one scored position (index, class, values) per position
    let inputs = rows.saturating_mul(4 * (spec.input + spec.outputs) as u64 + 16);
    let workspaces = match device {
        Device::Cpu => crate::model::memory::forward_bytes(model, rows).saturating_mul(2),
        _ => 0,
    };
    let need = (16 * model.n_params as u64).saturating_add(inputs).saturating_add(workspaces);
    need.saturating_add(need / 10)
}

/// What a kept run saves of its engine: the weights, Adam's two moments, its update count.
type Snapshot = (Vec<f32>, Vec<f32>, Vec<f32>, u64);

/// Where [`run_task`] trains: the CPU engine (MPI ranks included), or the GPU's (a model per
/// batch shape: the training batches', and the shorter last batch of an MNIST test).
#[allow(clippy::large_enum_variant)] // one per run, never moved in its loop
enum Engine {
    Cpu { w: Vec<f32>, g: Vec<f32>, opt: Optimizer, ws: TaskWs },
    #[cfg(feature = "gpu")]
    Gpu {
        w: Vec<f32>,
        train: Option<crate::model::gpu::GpuLm>,
        eval: Option<crate::model::gpu::GpuLm>,
        /// Adam's moments and update count to give the training model when it is made
        pending: Option<(Vec<f32>, Vec<f32>, u64)>,
    },
}

impl Engine {
    fn new(model: &Model, w: Vec<f32>, cfg: &TaskConfig) -> Result<Engine> {
        cfg.device.check_built()?;
        Ok(match cfg.device {
            Device::Cpu => Engine::Cpu { g: vec![0f32; model.n_params], opt: Optimizer::new(OptimizerKind::Adam, model.n_params), ws: TaskWs::default(), w },
            #[cfg(feature = "gpu")]
            Device::Gpu => {
                for c in &model.cells {
                    c.gpu_cell()?;
                }
                Engine::Gpu { w, train: None, eval: None, pending: None }
            }
            #[cfg(not(feature = "gpu"))]
            Device::Gpu => unreachable!("check_built refuses the GPU in a build without it"),
        })
    }

    /// One training step on `b` (this rank's rows under MPI), as [`task_step`] takes it.
    fn step(&mut self, kind: TaskKind, model: &Model, b: &Batch, cfg: &TaskConfig) -> Result<(f64, Option<f64>)> {
        Ok(match self {
            Engine::Cpu { w, g, opt, ws } => {
                let dist = crate::training::dist::get();
                if dist.size > 1 {
                    task_step_ranks(kind, model, w, g, opt, &b.rows(dist.rows(cfg.batch)), ws, cfg)
                } else {
                    task_step(kind, model, w, g, opt, b, ws, cfg)
                }
            }
            #[cfg(feature = "gpu")]
            Engine::Gpu { w, train, pending, .. } => {
                let lm = gpu_model(train, model, w, cfg.length(kind), b, true)?;
                if let Some((m, v, t)) = pending.take() {
                    lm.set_moments(&m, &v, t);
                }
                gpu_task_batch(lm, kind, b, Some(cfg))?
            }
        })
    }

    /// The loss and accuracy of `b` with the current weights, no gradient.
    fn eval(&mut self, kind: TaskKind, model: &Model, b: &Batch) -> Result<(f64, Option<f64>)> {
        Ok(match self {
            Engine::Cpu { w, ws, .. } => task_eval(kind, model, w, b, ws),
            #[cfg(feature = "gpu")]
            Engine::Gpu { w, train, eval, .. } => {
                // The training model where the batch has its shape, else one of the batch's own
                // with the trained weights.
                let lm = match train.as_mut() {
                    Some(t) if t.batch == b.batch => t,
                    t => {
                        if let Some(t) = t {
                            *w = t.params()?;
                        }
                        let lm = gpu_model(eval, model, w, b.steps, b, false)?;
                        lm.set_params(w);
                        lm
                    }
                };
                gpu_task_batch(lm, kind, b, None)?
            }
        })
    }

    /// Continue from Adam's moments `m`, `v` after `t` updates (a resumed run).
    fn set_moments(&mut self, m: Vec<f32>, v: Vec<f32>, t: u64) {
        match self {
            Engine::Cpu { opt, .. } => (opt.m, opt.v, opt.t) = (m, v, t),
            #[cfg(feature = "gpu")]
            Engine::Gpu { pending, .. } => *pending = Some((m, v, t)),
        }
    }

    /// The weights, Adam's moments and its update count, to save.
    fn snapshot(&self) -> Result<Snapshot> {
        Ok(match self {
            Engine::Cpu { w, opt, .. } => (w.clone(), opt.m.clone(), opt.v.clone(), opt.t),
            #[cfg(feature = "gpu")]
            Engine::Gpu { w, train, pending, .. } => match (train, pending) {
                (Some(t), _) => {
                    let (m, v) = t.moments()?;
                    (t.params()?, m, v, t.t)
                }
                (None, Some((m, v, t))) => (w.clone(), m.clone(), v.clone(), *t),
                (None, None) => (w.clone(), vec![0.0; w.len()], vec![0.0; w.len()], 0),
            },
        })
    }

    /// The trained weights.
    fn weights(self) -> Result<Vec<f32>> {
        Ok(match self {
            Engine::Cpu { w, .. } => w,
            #[cfg(feature = "gpu")]
            Engine::Gpu { w, train, .. } => match train {
                Some(t) => t.params()?,
                None => w,
            },
        })
    }
}

/// A task batch on the GPU from the cells' starts: the readout's outputs read back, the loss
/// and accuracy from [`task_loss`] on the host; with `train`, the loss's gradient written back,
/// then the parameters' gradient, clipped, and Adam's step (as [`task_step`] on the CPU).
#[cfg(feature = "gpu")]
pub fn gpu_task_batch(lm: &mut crate::model::gpu::GpuLm, kind: TaskKind, b: &Batch, train: Option<&TaskConfig>) -> Result<(f64, Option<f64>)> {
    let mut out = lm.task_forward(&b.x, &b.tokens, &b.scored)?;
    let (loss, accuracy) = task_loss(kind, b, &mut out, train.is_some());
    if let Some(cfg) = train.filter(|_| loss.is_finite()) {
        lm.task_update(&out, cfg.clip, cfg.lr)?;
    }
    Ok((loss, accuracy))
}

/// The GPU model in `slot`, made for `b`'s shape (at most `steps` steps) with weights `w` where
/// there is none yet or it was made for another batch size. Every training batch of a task has
/// the same batch size and number of scored positions, so training makes one.
#[cfg(feature = "gpu")]
fn gpu_model<'a>(slot: &'a mut Option<crate::model::gpu::GpuLm>, model: &Model, w: &[f32], steps: usize, b: &Batch, adam: bool) -> Result<&'a mut crate::model::gpu::GpuLm> {
    if slot.as_ref().is_none_or(|lm| lm.batch != b.batch || lm.steps < b.steps) {
        let gpu = crate::kernels::gpu::Gpu::shared()?;
        *slot = Some(crate::model::gpu::GpuLm::for_task(gpu, model, w, (steps.max(b.steps), b.batch), b.scored.len(), adam)?);
    }
    Ok(slot.as_mut().expect("made above"))
}

/// Write the model a run trained as a checkpoint directory (config.json with a `task` key,
/// model.safetensors; `vocab.txt` names the outputs), with `extra` files beside it.
pub fn save_task_model(dir: &std::path::Path, kind: TaskKind, r: &TaskResult, cfg: &TaskConfig, extra: &[(&str, Vec<u8>)]) -> Result<()> {
    write_task_dir(dir, kind, &r.cell, cfg, &r.weights, r.curve.len(), extra)
}

/// The checkpoint directory of `cell`'s task model with weights `w` after `steps_run` steps.
fn write_task_dir(dir: &std::path::Path, kind: TaskKind, cell: &str, cfg: &TaskConfig, w: &[f32], steps_run: usize, extra: &[(&str, Vec<u8>)]) -> Result<()> {
    let length = cfg.length(kind);
    let model = cfg.model(kind, cell)?;
    if w.len() != model.n_params {
        bail!("no trained weights to save for {cell}");
    }
    let tensors: Vec<crate::data::checkpoint::NamedTensor> = model
        .named(w)
        .into_iter()
        .map(|(name, shape, data)| crate::data::checkpoint::NamedTensor::new(name, shape.to_vec(), data.to_vec()))
        .collect();
    let config = TaskCheckpointConfig {
        model: &model.config,
        task: TaskMeta {
            name: TASK_NAMES[kind as usize].to_string(),
            length,
            seed: cfg.seed,
            steps_run,
            permutation: (kind == TaskKind::PermutedSeqMnist).then(|| permutation(cfg.seed, length)),
        },
    };
    let outputs: Vec<String> = (0..kind.spec().outputs).map(|i| format!("output{i}")).collect();
    crate::data::checkpoint::save_model_dir(dir, &config, &tensors, &outputs, false, extra)
}

#[cfg(test)]
mod run_tests {
    use super::*;

    #[test]
    fn a_gru_learns_short_parentheses_counting_and_isan_reads_symbols() {
        let cfg = TaskConfig { hidden: 24, batch: 16, steps: 150, lr: 0.01, ..Default::default() };
        let r = run_task(TaskKind::Parentheses, "gru", &cfg, |_| ControlFlow::Continue(())).unwrap();
        let first = r.curve.first().unwrap().loss;
        let last = r.curve.last().unwrap().loss;
        assert!(last < 0.5 * first, "loss {first} -> {last}");
        let r = run_task(TaskKind::Parentheses, "isan", &cfg, |_| ControlFlow::Continue(())).unwrap();
        assert!(r.curve.last().unwrap().loss < r.curve.first().unwrap().loss);
        assert!(run_task(TaskKind::Addition, "isan", &cfg, |_| ControlFlow::Continue(())).is_err());
    }

    #[test]
    fn a_task_the_machine_cannot_hold_is_refused_before_it_allocates() {
        assert!(crate::kernels::runtime::available_memory().is_some(), "the machine says its available memory (/proc/meminfo)");
        // 100 sequences of 10^9 steps: 400 GB of inputs alone, where the run used to abort in
        // the allocator (and take a Python interpreter with it).
        let cfg = TaskConfig { hidden: 8, batch: 100, steps: 1, length: Some(1_000_000_000), ..Default::default() };
        let e = run_task(TaskKind::Copy, "gru", &cfg, |_| ControlFlow::Continue(())).unwrap_err().to_string();
        assert!(e.contains("needs about") && e.contains("GiB") && e.contains("smaller --length"), "{e}");
        // The same for a batch no machine holds; a run the machine holds goes on.
        let big = TaskConfig { hidden: 8, batch: 1 << 40, steps: 1, length: Some(40), ..Default::default() };
        assert!(run_task(TaskKind::Addition, "lstm", &big, |_| ControlFlow::Continue(())).unwrap_err().to_string().contains("needs about"));
        let small = TaskConfig { hidden: 8, batch: 4, steps: 2, length: Some(40), ..Default::default() };
        assert_eq!(run_task(TaskKind::Addition, "lstm", &small, |_| ControlFlow::Continue(())).unwrap().curve.len(), 2);
    }

    #[test]
    fn a_run_stopped_and_resumed_from_its_last_save_gives_the_same_bits() {
        for (kind, cell) in [(TaskKind::ClassifyLength, "lstm"), (TaskKind::Parentheses, "isan"), (TaskKind::Multicopy, "rda-exp-tanh")] {
            let cfg = TaskConfig { hidden: 8, batch: 6, steps: 37, length: Some(40), ..Default::default() };
            let whole = run_task(kind, cell, &cfg, |_| ControlFlow::Continue(())).unwrap();
            assert!(whole.curve.len() > 14, "{kind:?}: the run ends before the stop");
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join(cell);
            // Stopped at step 14 (as by Ctrl-C): the save at step 10 is what is left.
            let keep = Keep { dir: &dir, every: 5, from: None };
            let e = run_task_kept(kind, cell, &cfg, Some(keep), |p| if p.step == 14 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }).unwrap_err();
            assert!(e.to_string().contains("continues from its last save"), "{e}");
            let model = task_model(kind, cell, cfg.hidden, cfg.learn_initial_state(kind)).unwrap();
            let names: Vec<(String, Vec<usize>)> = model.slots.iter().map(|s| (s.name.clone(), s.shape.clone())).collect();
            let saved = super::super::keep::load(&dir, &names, cell).unwrap().unwrap();
            assert_eq!((saved.progress.step, saved.progress.finished), (10, false), "{kind:?}");
            let keep = Keep { dir: &dir, every: 5, from: Some(saved) };
            let resumed = run_task_kept(kind, cell, &cfg, Some(keep), |p| {
                assert!(p.step > 10, "step {} trained again", p.step);
                ControlFlow::Continue(())
            })
            .unwrap();
            assert_eq!(resumed.curve, whole.curve, "{kind:?} {cell}");
            assert!(resumed.weights.iter().zip(&whole.weights).all(|(a, b)| a.to_bits() == b.to_bits()), "{kind:?} {cell}");
        }
    }

    #[test]
    fn classify_length_learns_the_initial_state_by_default() {
        let has = |m: &Model| m.slots.iter().any(|s| s.name == "rnn.0.initial_state");
        let cfg = TaskConfig::default();
        for (kind, cell, want) in [
            (TaskKind::ClassifyLength, "gru", true),
            (TaskKind::ClassifyLength, "lstm", true),
            (TaskKind::ClassifyLength, "rwa", false), // its own s0 instead
            (TaskKind::Addition, "gru", false),
        ] {
            let m = task_model(kind, cell, 8, cfg.learn_initial_state(kind)).unwrap();
            assert_eq!(has(&m), want, "{kind:?} {cell}");
        }
        let cfg = TaskConfig { learn_initial_state: Some(false), ..cfg };
        assert!(!has(&task_model(TaskKind::ClassifyLength, "gru", 8, cfg.learn_initial_state(TaskKind::ClassifyLength)).unwrap()));
        // A short run trains through it.
        let cfg = TaskConfig { hidden: 8, batch: 8, steps: 3, length: Some(12), ..Default::default() };
        let r = run_task(TaskKind::ClassifyLength, "lstm", &cfg, |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(r.curve.len(), 3);
        assert!(r.curve.iter().all(|p| p.loss.is_finite()));
    }

    #[test]
    fn a_permuted_mnist_model_is_saved_with_its_permutation() {
        let mk = |n: usize| crate::data::idx::Mnist {
            images: (0..n * 784).map(|i| (i * 7 % 256) as u8).collect(),
            labels: (0..n).map(|i| (i % 10) as u8).collect(),
            rows: 28,
            cols: 28,
        };
        let cfg = TaskConfig { hidden: 4, batch: 3, steps: 2, length: Some(49), seed: 5, mnist: Some((mk(6), mk(4))), ..Default::default() };
        let r = run_task(TaskKind::PermutedSeqMnist, "gru", &cfg, |_| ControlFlow::Continue(())).unwrap();
        assert!(r.test_accuracy.is_some());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gru");
        save_task_model(&path, TaskKind::PermutedSeqMnist, &r, &cfg, &[]).unwrap();
        let (config, tensors, vocab) =
            crate::data::checkpoint::load_model_dir::<serde_json::Value>(&path, |_| false).unwrap();
        assert_eq!(vocab.len(), 10);
        let want: Vec<serde_json::Value> = permutation(5, 49).into_iter().map(|p| p.into()).collect();
        assert_eq!(config["task"]["permutation"].as_array().unwrap(), &want);
        assert_eq!(config["task"]["length"], 49);
        assert_eq!(config["input_size"], 1);
        let n: usize = tensors.iter().map(|t| t.data.len()).sum();
        assert_eq!(n, r.weights.len());
        let model = task_model(TaskKind::PermutedSeqMnist, "gru", 4, false).unwrap();
        for t in &tensors {
            let (_, _, data) = model.named(&r.weights).into_iter().find(|(name, _, _)| *name == t.name).unwrap();
            assert_eq!(&t.data[..], data, "{}", t.name);
        }
    }
}
