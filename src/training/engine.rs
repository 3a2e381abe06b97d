//! Where the trainer's windows run: the CPU engine (`window_gradient`, `Optimizer::step`) or
//! the GPU's (`model::gpu::GpuLm`, the `gpu` feature). On the GPU the weights, the optimizer's
//! moments and the carried state live on the device; [`Engine::sync`] brings them to the
//! host's copies before anything reads them there (a checkpoint, a validation, the sample), so
//! the run directory is the same whichever engine wrote it and `--resume` crosses devices.

use super::{window_gradient, Dropout, SampledSoftmax, TrainConfig};
use crate::kernels::runtime::Device;
use crate::model::{Model, ModelWs, State};
use crate::training::optim::Optimizer;
use crate::kernels::rng::Rng;
use anyhow::Result;

pub(crate) enum Engine {
    Cpu,
    #[cfg(feature = "gpu")]
    Gpu {
        lm: Box<crate::model::gpu::GpuLm>,
        /// whether the device's state is the host's (false until the first window)
        uploaded: bool,
    },
}

impl Engine {
    /// The engine `cfg.device` names for `model` with weights `w` and optimizer `opt`,
    /// refusing what the GPU does not run yet with the option to change.
    pub fn new(cfg: &TrainConfig, model: &Model, w: &[f32], opt: &Optimizer, ranks: usize) -> Result<Engine> {
        cfg.device.check_built()?;
        if cfg.device == Device::Cpu {
            return Ok(Engine::Cpu);
        }
        #[cfg(feature = "gpu")]
        {
            use anyhow::bail;
            if ranks > 1 {
                bail!("--device gpu does not run under mpirun yet");
            }
            let gpu = crate::kernels::gpu::Gpu::shared()?;
            let adam = cfg.optimizer == crate::training::optim::OptimizerKind::Adam;
            let (steps, batch, dropout) = (cfg.bptt, cfg.batch_size, Some(cfg.dropout()?));
            let mut lm = match cfg.sampled_softmax {
                0 => crate::model::gpu::GpuLm::new(gpu, model, w, steps, batch, adam, dropout)?,
                // as many candidates as `SampledSoftmax` can draw for a window
                k => crate::model::gpu::GpuLm::sampled(gpu, model, w, steps, batch, adam, dropout, steps * batch + k)?,
            };
            lm.set_moments(&opt.m, &opt.v, opt.t);
            Ok(Engine::Gpu { lm: Box::new(lm), uploaded: false })
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = (model, w, opt, ranks);
            unreachable!("check_built refuses the GPU in a build without it")
        }
    }

    /// A line for the log: which device trains.
    pub fn describe(&self) -> Option<String> {
        match self {
            Engine::Cpu => None,
            #[cfg(feature = "gpu")]
            Engine::Gpu { lm, .. } => Some(format!("device: {}", lm.gpu.describe())),
        }
    }

    /// A window's summed NLL and its gradient's norm before clipping (`None` when the loss is
    /// not finite), the state advanced to the window's end; as [`window_gradient`].
    #[allow(clippy::too_many_arguments)]
    pub fn window(
        &mut self,
        model: &Model,
        w: &[f32],
        g: &mut [f32],
        xy: (&[u32], &[u32]),
        local: usize,
        state: &mut State<f32>,
        ws: &mut ModelWs<f32>,
        drop: (&Dropout, &mut Rng),
        sampled: Option<&mut SampledSoftmax<f32>>,
        clipping: (Option<f64>, Option<f64>),
    ) -> Result<(f64, Option<f64>)> {
        match self {
            Engine::Cpu => Ok(window_gradient(model, w, g, xy, local, state, ws, Some(drop), sampled, clipping)),
            #[cfg(feature = "gpu")]
            Engine::Gpu { lm, uploaded } => {
                // The trainer starts a window from a fresh state (each epoch, every window
                // without carrying, after a skipped batch), else from the device's own.
                if state.fresh || !*uploaded {
                    lm.set_state(state);
                    *uploaded = true;
                }
                lm.set_masks(model, drop.1);
                match sampled {
                    // The candidates drawn after the masks, from the same generator, as the CPU
                    // engine draws them; the targets are then their columns among them.
                    Some(s) => {
                        s.prepare(xy.1, drop.1);
                        lm.set_candidates(s.candidates(), s.corrections())?;
                        lm.gradient_norm(xy.0, s.target_columns(), clipping)?;
                    }
                    None => lm.gradient_norm(xy.0, xy.1, clipping)?,
                }
                state.fresh = false;
                let (nll, norm) = lm.loss_and_norm()?;
                Ok((nll, nll.is_finite().then_some(norm)))
            }
        }
    }

    /// The optimizer's step with the window's (clipped) gradient.
    pub fn step(&mut self, opt: &mut Optimizer, w: &mut [f32], g: &[f32], lr: f64) {
        match self {
            Engine::Cpu => opt.step(w, g, lr),
            #[cfg(feature = "gpu")]
            Engine::Gpu { lm, .. } => {
                lm.apply_update(lr);
                opt.t = lm.t;
            }
        }
    }

    /// Bring the weights, the optimizer's moments and the carried state to the host's copies.
    pub fn sync(&mut self, w: &mut Vec<f32>, opt: &mut Optimizer, state: &mut State<f32>) -> Result<()> {
        match self {
            Engine::Cpu => {
                let _ = (w, opt, state); // already the host's
                Ok(())
            }
            #[cfg(feature = "gpu")]
            Engine::Gpu { lm, uploaded } => {
                *w = lm.params()?;
                let (m, v) = lm.moments()?;
                if !m.is_empty() {
                    (opt.m, opt.v) = (m, v);
                }
                opt.t = lm.t;
                if *uploaded && !state.fresh {
                    state.layers = lm.state()?.layers;
                }
                Ok(())
            }
        }
    }

    /// The validation score of `w` (synced first): on the run's device.
    #[allow(clippy::too_many_arguments)]
    pub fn validate(&self, model: &Model, w: &[f32], valid: &[u32], cfg: &TrainConfig, carry: bool, quiet: bool) -> Result<crate::model::score::Score> {
        match self {
            Engine::Cpu => Ok(super::validate(model, w, valid, cfg, carry, quiet)),
            #[cfg(feature = "gpu")]
            Engine::Gpu { lm, .. } => crate::model::gpu::evaluate(lm.gpu.clone(), model, w, valid, cfg.eval_batch_size, cfg.bptt, carry, None, !quiet),
        }
    }

    /// Whether the layer outputs in the host's workspace are this run's (for naming the layer
    /// of a divergence).
    pub fn on_host(&self) -> bool {
        matches!(self, Engine::Cpu)
    }
}
