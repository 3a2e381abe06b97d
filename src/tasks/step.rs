//! A task's training step and scoring: the loss at the scored positions, the CPU's forward,
//! gradient and Adam step (MPI ranks included), and the trait each device's half of
//! [`run_task`](super::run_task) implements (the GPU's in `step_gpu.rs`).

use super::config::TaskConfig;
use super::generate::{Batch, Loss, TaskKind};
use crate::kernels::gemm::{add_bias_rows, add_col_sums, linear, linear_dw, linear_dx};
use crate::model::{Model, ModelWs};
use crate::training::optim::{clip, Optimizer, OptimizerKind};
use anyhow::Result;

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
    // Only the scored positions' outputs are read (in increasing order: the first is the
    // earliest step); the top layer keeps the steps before it out of its output buffer.
    ws.model.top_from = b.scored.first().map_or(0, |&p| p / b.batch.max(1));
    model.forward_layers(w, Some(&b.x[..]), &b.tokens, b.steps, b.batch, &mut state, &mut ws.model, None);
    let h = model.top_width();
    let top = ws.model.layer_input(model.cells.len());
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
        clip(g, None, cfg.clip_value());
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
    // The top layer's output gradient is zero but at the scored positions. The buffer is all
    // zero between calls (made so, and each call clears the rows it wrote), so that a step does
    // not fill all T·B·H of it (docs/benchmarks.md, "Fewer tape streams").
    let dxs = &mut ws.model.dxs[nl];
    ws.dg.resize(n * h, 0.0);
    linear_dx(n, c, h, &ws.out, &w[hw], &mut ws.dg, false);
    for (k, &p) in b.scored.iter().enumerate() {
        dxs[p * h..(p + 1) * h].copy_from_slice(&ws.dg[k * h..(k + 1) * h]);
    }
    model.backward_layers(w, g, &b.tokens, &mut ws.model);
    let dxs = &mut ws.model.dxs[nl];
    for &p in &b.scored {
        dxs[p * h..(p + 1) * h].fill(0.0);
    }
    (loss, accuracy)
}

/// One step under MPI ([`crate::training::dist`]): this rank's rows `b` of the global batch;
/// the losses, accuracies and gradients are summed over the ranks weighted by their scored
/// positions, then every rank clips and updates alike.
#[allow(clippy::too_many_arguments)]
pub fn task_step_ranks(kind: TaskKind, model: &Model, w: &mut [f32], g: &mut [f32], opt: &mut Optimizer, b: &Batch, ws: &mut TaskWs, cfg: &TaskConfig) -> (f64, Option<f64>) {
    let rank = task_gradient(kind, model, w, g, b, ws);
    let (loss, accuracy) = mean_over_ranks(g, rank, b.scored.len(), cfg.clip_value());
    if loss.is_finite() {
        opt.step(w, g, cfg.lr);
    }
    (loss, accuracy)
}

/// Under MPI, this rank's `(loss, accuracy)` over its `n` scored positions made the whole
/// batch's (the ranks' sums weighted by their positions); where that loss is finite, `g` (the
/// gradient of this rank's mean loss) becomes the batch's: weighted alike, summed in rank order
/// and clipped to `[-clip, clip]` (where clipped), the same on every rank. Every rank calls it at every step
/// (its sums are collective; the ranks agree on whether the loss is finite).
pub(crate) fn mean_over_ranks(g: &mut [f32], (loss, accuracy): (f64, Option<f64>), n: usize, clip_value: Option<f64>) -> (f64, Option<f64>) {
    let dist = crate::training::dist::get();
    let n = n as f64;
    let mut v = [loss * n, accuracy.unwrap_or(0.0) * n, n];
    dist.sum_f64(&mut v);
    let (loss, total) = (v[0] / v[2], v[2]);
    let accuracy = accuracy.map(|_| v[1] / total);
    if loss.is_finite() {
        let share = (n / total) as f32;
        g.iter_mut().for_each(|x| *x *= share);
        dist.sum_f32(g);
        clip(g, None, clip_value);
    }
    (loss, accuracy)
}

/// What a kept run saves of its device's half: the weights, Adam's two moments, its update
/// count.
pub(crate) type Snapshot = (Vec<f32>, Vec<f32>, Vec<f32>, u64);

/// One device's half of [`run_task`]: the weights and Adam's state where that device keeps
/// them, a training step and a scoring of a batch. The CPU's is here (MPI ranks included), the
/// GPU's in `step_gpu.rs`; `train::open_steps` picks one from the run's engine.
pub(crate) trait Steps {
    /// One training step on `b` (this rank's rows under MPI), as [`task_step`] takes it.
    fn step(&mut self, kind: TaskKind, model: &Model, b: &Batch, cfg: &TaskConfig) -> Result<(f64, Option<f64>)>;
    /// The loss and accuracy of `b` with the current weights, no gradient.
    fn eval(&mut self, kind: TaskKind, model: &Model, b: &Batch) -> Result<(f64, Option<f64>)>;
    /// Continue from Adam's moments `m`, `v` after `t` updates (a resumed run).
    fn set_moments(&mut self, m: Vec<f32>, v: Vec<f32>, t: u64);
    /// The weights, Adam's moments and its update count, to save.
    fn snapshot(&self) -> Result<Snapshot>;
    /// f16's loss scale and its counts, to save (the GPU's
    /// `--precision f16`; `None` in other precisions).
    fn loss_scale(&self) -> Result<Option<crate::kernels::precision::LossScale>> {
        Ok(None)
    }
    /// Continue with a saved loss scale (a resumed f16 run).
    fn set_loss_scale(&mut self, _scale: crate::kernels::precision::LossScale) {}
    /// The trained weights.
    fn weights(self: Box<Self>) -> Result<Vec<f32>>;
}


/// The CPU's half: the host's weights, gradient, Adam and workspaces.
pub(crate) struct CpuSteps {
    w: Vec<f32>,
    g: Vec<f32>,
    opt: Optimizer,
    ws: TaskWs,
}

impl CpuSteps {
    pub fn new(model: &Model, w: Vec<f32>) -> CpuSteps {
        let n = model.n_params;
        CpuSteps { g: vec![0f32; n], opt: Optimizer::new(OptimizerKind::Adam, n), ws: TaskWs::default(), w }
    }
}

impl Steps for CpuSteps {
    fn step(&mut self, kind: TaskKind, model: &Model, b: &Batch, cfg: &TaskConfig) -> Result<(f64, Option<f64>)> {
        let CpuSteps { w, g, opt, ws } = self;
        let dist = crate::training::dist::get();
        Ok(if dist.size > 1 {
            task_step_ranks(kind, model, w, g, opt, &b.rows(dist.rows(cfg.batch)), ws, cfg)
        } else {
            task_step(kind, model, w, g, opt, b, ws, cfg)
        })
    }

    fn eval(&mut self, kind: TaskKind, model: &Model, b: &Batch) -> Result<(f64, Option<f64>)> {
        Ok(task_eval(kind, model, &self.w, b, &mut self.ws))
    }

    fn set_moments(&mut self, m: Vec<f32>, v: Vec<f32>, t: u64) {
        (self.opt.m, self.opt.v, self.opt.t) = (m, v, t);
    }

    fn snapshot(&self) -> Result<Snapshot> {
        Ok((self.w.clone(), self.opt.m.clone(), self.opt.v.clone(), self.opt.t))
    }

    fn weights(self: Box<Self>) -> Result<Vec<f32>> {
        Ok(self.w)
    }
}
