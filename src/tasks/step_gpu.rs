//! [`run_task`](super::run_task)'s device half on the GPU (`step.rs` has the trait and the
//! CPU's): a model per batch shape (the training batches', and the shorter last batch of an
//! MNIST test), the readout's loss computed on the host as the CPU computes it.

use super::generate::{Batch, TaskKind};
use super::config::TaskConfig;
use super::step::{task_loss, Snapshot, Steps};
use crate::kernels::gpu::Gpu;
use crate::model::gpu::GpuLm;
use crate::model::Model;
use anyhow::Result;
use std::sync::Arc;

pub(crate) struct GpuSteps {
    gpu: Arc<Gpu>,
    w: Vec<f32>,
    train: Option<GpuLm>,
    eval: Option<GpuLm>,
    /// Adam's moments and update count to give the training model when it is made
    pending: Option<(Vec<f32>, Vec<f32>, u64)>,
    /// a resumed f16 run's loss scale, for the training model when it is made
    pending_scale: Option<crate::kernels::precision::LossScale>,
}

impl GpuSteps {
    /// Refuses a model with a cell the GPU does not run yet, before any work.
    pub fn new(gpu: Arc<Gpu>, model: &Model, w: Vec<f32>) -> Result<GpuSteps> {
        for c in &model.cells {
            c.gpu_cell()?;
        }
        Ok(GpuSteps { gpu, w, train: None, eval: None, pending: None, pending_scale: None })
    }
}

impl Steps for GpuSteps {
    fn step(&mut self, kind: TaskKind, model: &Model, b: &Batch, cfg: &TaskConfig) -> Result<(f64, Option<f64>)> {
        // Under MPI each rank trains its rows of the batch, as the CPU's ranks do.
        let dist = crate::training::dist::get();
        dist.refuse_half(crate::kernels::precision::current() == crate::kernels::precision::Precision::F16)?;
        let rows = (dist.size > 1).then(|| b.rows(dist.rows(cfg.batch)));
        let b = rows.as_ref().unwrap_or(b);
        let lm = gpu_model(&self.gpu, &mut self.train, model, &self.w, cfg.length(kind), b, true)?;
        if let Some((m, v, t)) = self.pending.take() {
            lm.set_moments(&m, &v, t);
        }
        if let (Some(s), true) = (self.pending_scale.take(), lm.half()) {
            lm.set_loss_scale(s);
        }
        match rows {
            Some(_) => gpu_task_batch_ranks(lm, kind, b, cfg),
            None => gpu_task_batch(lm, kind, b, Some(cfg)),
        }
    }

    fn eval(&mut self, kind: TaskKind, model: &Model, b: &Batch) -> Result<(f64, Option<f64>)> {
        // The training model where the batch has its shape, else one of the batch's own with
        // the trained weights.
        let lm = match self.train.as_mut() {
            Some(t) if t.batch == b.batch => t,
            t => {
                if let Some(t) = t {
                    self.w = t.params()?;
                }
                let lm = gpu_model(&self.gpu, &mut self.eval, model, &self.w, b.steps, b, false)?;
                lm.set_params(&self.w);
                lm
            }
        };
        gpu_task_batch(lm, kind, b, None)
    }

    fn set_moments(&mut self, m: Vec<f32>, v: Vec<f32>, t: u64) {
        self.pending = Some((m, v, t));
    }

    fn loss_scale(&self) -> Result<Option<crate::kernels::precision::LossScale>> {
        match &self.train {
            Some(t) if t.half() => Ok(Some(t.loss_scale()?)),
            Some(_) => Ok(None),
            None => Ok(self.pending_scale),
        }
    }

    fn set_loss_scale(&mut self, scale: crate::kernels::precision::LossScale) {
        self.pending_scale = Some(scale);
    }

    fn snapshot(&self) -> Result<Snapshot> {
        let w = &self.w;
        Ok(match (&self.train, &self.pending) {
            (Some(t), _) => {
                let (m, v) = t.moments()?;
                (t.params()?, m, v, t.t)
            }
            (None, Some((m, v, t))) => (w.clone(), m.clone(), v.clone(), *t),
            (None, None) => (w.clone(), vec![0.0; w.len()], vec![0.0; w.len()], 0),
        })
    }

    fn weights(self: Box<Self>) -> Result<Vec<f32>> {
        match self.train {
            Some(t) => t.params(),
            None => Ok(self.w),
        }
    }
}

/// A task batch on the GPU from the cells' starts: the readout's outputs read back, the loss
/// and accuracy from [`task_loss`] on the host; with `train`, the loss's gradient written back,
/// then the parameters' gradient, clipped, and Adam's step (as `task_step` on the CPU).
pub fn gpu_task_batch(lm: &mut GpuLm, kind: TaskKind, b: &Batch, train: Option<&TaskConfig>) -> Result<(f64, Option<f64>)> {
    let mut out = lm.task_forward(&b.x, &b.tokens, &b.scored)?;
    let (loss, accuracy) = task_loss(kind, b, &mut out, train.is_some());
    if let Some(cfg) = train.filter(|_| loss.is_finite()) {
        lm.task_update(&out, cfg.clip_value(), cfg.lr)?;
    }
    Ok((loss, accuracy))
}

/// [`gpu_task_batch`]'s training step for one rank under MPI: this rank's rows `b` through the
/// device, the gradient read back and made the batch's on the host
/// ([`mean_over_ranks`](super::step::mean_over_ranks), as the CPU's ranks make theirs), then
/// sent back for the device's optimizer step.
fn gpu_task_batch_ranks(lm: &mut GpuLm, kind: TaskKind, b: &Batch, cfg: &TaskConfig) -> Result<(f64, Option<f64>)> {
    let mut out = lm.task_forward(&b.x, &b.tokens, &b.scored)?;
    let rank = task_loss(kind, b, &mut out, true);
    // Every rank takes part in the sums: the gradient is made whatever this rank's loss.
    lm.task_gradient(&out)?;
    let mut g = lm.grads()?;
    let (loss, accuracy) = super::step::mean_over_ranks(&mut g, rank, b.scored.len(), cfg.clip_value());
    if loss.is_finite() {
        lm.set_grads(&g);
        lm.apply_update(cfg.lr);
    }
    Ok((loss, accuracy))
}

/// The GPU model in `slot`, made for `b`'s shape (at most `steps` steps) with weights `w` where
/// there is none yet or it was made for another batch size. Every training batch of a task has
/// the same batch size and number of scored positions, so training makes one.
fn gpu_model<'a>(gpu: &Arc<Gpu>, slot: &'a mut Option<GpuLm>, model: &Model, w: &[f32], steps: usize, b: &Batch, adam: bool) -> Result<&'a mut GpuLm> {
    if slot.as_ref().is_none_or(|lm| lm.batch != b.batch || lm.steps < b.steps) {
        *slot = Some(GpuLm::for_task(gpu.clone(), model, w, (steps.max(b.steps), b.batch), b.scored.len(), adam)?);
    }
    Ok(slot.as_mut().expect("made above"))
}
