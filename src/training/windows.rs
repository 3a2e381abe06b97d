//! Where the trainer's windows run: each device's half of a training step behind one trait,
//! chosen once from the run's engine (`run.rs`). On the CPU the host's weights and workspaces are the
//! run's own (`window_gradient`, `Optimizer::step`); on the GPU (`windows_gpu.rs`) the
//! weights, the optimizer's moments and the carried state live on the device, and
//! [`Windows::sync`] brings them to the host's copies before anything reads them there (a
//! checkpoint, a validation, the sample), so the run directory is the same whichever device
//! wrote it and `--resume` crosses devices.

use super::{window_gradient, Dropout, SampledSoftmax};
use crate::kernels::rng::Rng;
use crate::model::{Model, ModelWs, State};
use crate::training::optim::Optimizer;
use anyhow::Result;

/// What a window reads and writes on the host: the model and its weights, the gradient's
/// buffer, the window's inputs and targets (this rank's `local` rows), the carried state, the
/// workspace, the dropout masks' generator, the sampled softmax if any, and the clipping
/// (norm, value) applied inside (none under MPI, where the ranks' sum is clipped).
pub(crate) struct Window<'a> {
    pub model: &'a Model,
    pub w: &'a [f32],
    pub g: &'a mut [f32],
    pub xy: (&'a [u32], &'a [u32]),
    pub local: usize,
    pub state: &'a mut State<f32>,
    pub ws: &'a mut ModelWs<f32>,
    pub drop: (&'a Dropout, &'a mut Rng),
    pub sampled: Option<&'a mut SampledSoftmax<f32>>,
    pub clipping: (Option<f64>, Option<f64>),
}

/// One device's half of the trainer's step.
pub(crate) trait Windows {
    /// A window's summed NLL and its gradient's norm before clipping (`None` when the loss is
    /// not finite), the state advanced to the window's end; as [`window_gradient`].
    fn window(&mut self, a: Window) -> Result<(f64, Option<f64>)>;

    /// The optimizer's step with the window's (clipped) gradient.
    fn step(&mut self, opt: &mut Optimizer, w: &mut [f32], g: &[f32], lr: f64);

    /// Bring the weights, the optimizer's moments and the carried state to the host's copies.
    fn sync(&mut self, w: &mut Vec<f32>, opt: &mut Optimizer, state: &mut State<f32>) -> Result<()>;

    /// Whether the layer outputs in the host's workspace are this run's (for naming the layer
    /// of a divergence).
    fn on_host(&self) -> bool;
}

/// The CPU's windows: the host's weights, gradient and state are the run's.
pub(crate) struct CpuWindows;

impl Windows for CpuWindows {
    fn window(&mut self, a: Window) -> Result<(f64, Option<f64>)> {
        Ok(window_gradient(a.model, a.w, a.g, a.xy, a.local, a.state, a.ws, Some(a.drop), a.sampled, a.clipping))
    }

    fn step(&mut self, opt: &mut Optimizer, w: &mut [f32], g: &[f32], lr: f64) {
        opt.step(w, g, lr)
    }

    fn sync(&mut self, _: &mut Vec<f32>, _: &mut Optimizer, _: &mut State<f32>) -> Result<()> {
        Ok(()) // already the host's
    }

    fn on_host(&self) -> bool {
        true
    }
}
