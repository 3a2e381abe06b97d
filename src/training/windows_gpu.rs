//! The trainer's windows on the GPU (`windows.rs` has the trait and the CPU's): the model,
//! its optimizer's moments and the carried state on the device, read back by `sync`.

use super::windows::{Window, Windows};
use super::TrainConfig;
use crate::kernels::gpu::Gpu;
use crate::model::gpu::GpuLm;
use crate::model::{Dropout, Model, State};
use crate::training::optim::{Optimizer, OptimizerKind};
use anyhow::Result;
use std::sync::Arc;

pub(crate) struct GpuWindows {
    lm: Box<GpuLm>,
    /// whether the device's state is the host's (false until the first window)
    uploaded: bool,
    /// under mpirun: each window's gradient goes to the host, where the ranks' mean is made
    /// and clipped, and comes back for the optimizer's step
    shared: bool,
}

impl GpuWindows {
    /// This rank's `batch` rows of each window with its `dropout` (the whole batch's masks,
    /// these rows kept, as the CPU's ranks draw them).
    pub fn new(gpu: Arc<Gpu>, cfg: &TrainConfig, model: &Model, (w, opt): (&[f32], &Optimizer), (batch, dropout): (usize, Dropout), shared: bool) -> Result<GpuWindows> {
        let adam = cfg.optimizer == OptimizerKind::Adam;
        let (steps, dropout) = (cfg.bptt, Some(dropout));
        let mut lm = match cfg.sampled_softmax {
            0 => GpuLm::new(gpu, model, w, steps, batch, adam, dropout)?,
            // as many candidates as `SampledSoftmax` can draw for a window
            k => GpuLm::sampled(gpu, model, w, steps, batch, adam, dropout, steps * batch + k)?,
        };
        super::dist::get().refuse_half(lm.half())?;
        lm.set_moments(&opt.m, &opt.v, opt.t);
        if let (Some(s), true) = (opt.loss_scale, lm.half()) {
            lm.set_loss_scale(s);
        }
        Ok(GpuWindows { lm: Box::new(lm), uploaded: false, shared })
    }
}

impl Windows for GpuWindows {
    /// The device's own weights, gradient and workspaces serve: of the host's, the window reads
    /// the tokens, the carried state (when fresh), the masks' generator and the candidates.
    fn window(&mut self, a: Window) -> Result<(f64, Option<f64>)> {
        let Window { model, g, xy, state, drop, sampled, clipping, .. } = a;
        let lm = &mut self.lm;
        // The trainer starts a window from a fresh state (each epoch, every window without
        // carrying, after a skipped batch), else from the device's own.
        if state.fresh || !self.uploaded {
            lm.set_state(state);
            self.uploaded = true;
        }
        lm.set_masks(model, drop.1);
        match sampled {
            // The candidates drawn after the masks, from the same generator, as the CPU engine
            // draws them; the targets are then their columns among them.
            Some(s) => {
                s.prepare(xy.1, drop.1);
                lm.set_candidates(s.candidates(), s.corrections())?;
                lm.gradient_norm(xy.0, s.target_columns(), clipping)?;
            }
            None => lm.gradient_norm(xy.0, xy.1, clipping)?,
        }
        state.fresh = false;
        if self.shared {
            g.copy_from_slice(&lm.grads()?);
        }
        let (nll, norm) = lm.loss_and_norm()?;
        // -1: an f16 product overflowed at this loss scale; the device halved the scale and
        // will skip the update (as PyTorch's GradScaler does), which is no divergence.
        let norm = if norm == -1.0 { 0.0 } else { norm };
        Ok((nll, nll.is_finite().then_some(norm)))
    }

    fn step(&mut self, opt: &mut Optimizer, _: &mut [f32], g: &[f32], lr: f64) {
        if self.shared {
            self.lm.set_grads(g);
        }
        self.lm.apply_update(lr);
        opt.t = self.lm.t;
    }

    fn sync(&mut self, w: &mut Vec<f32>, opt: &mut Optimizer, state: &mut State<f32>) -> Result<()> {
        *w = self.lm.params()?;
        let (m, v) = self.lm.moments()?;
        if !m.is_empty() {
            (opt.m, opt.v) = (m, v);
        }
        opt.t = self.lm.t;
        opt.loss_scale = if self.lm.half() { Some(self.lm.loss_scale()?) } else { None };
        if self.uploaded && !state.fresh {
            state.layers = self.lm.state()?.layers;
        }
        Ok(())
    }

    fn on_host(&self) -> bool {
        false
    }
}
