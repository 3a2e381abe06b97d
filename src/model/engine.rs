//! The one seam between a command and the device it computes on. A command opens an
//! [`Engine`] once from its `--device` (checked there against the build and the precision) and
//! then scores and steps a model through it, whatever the device; the trainers ask it for the
//! GPU their device-side halves run on (`training::windows`, `tasks::train`). Adding a device
//! starts here: no other file matches on [`Device`] to choose where to compute.

use super::score::{evaluate, Score};
use super::{Model, ModelWs, State};
use crate::kernels::precision::Precision;
use crate::kernels::runtime::Device;
use anyhow::{bail, Result};

/// Where a command computes, opened once: the CPU, or the process's one GPU (the `gpu` feature).
#[derive(Clone, Default)]
pub struct Engine {
    #[cfg(feature = "gpu")]
    gpu: Option<std::sync::Arc<crate::kernels::gpu::Gpu>>,
}

/// Feeds a window of tokens (batch 1) from the state the previous window left, writing the
/// logits after its last token (`[V]`).
pub type Step<'a> = Box<dyn FnMut(&[u32], &mut [f64]) -> Result<()> + 'a>;

impl Engine {
    /// The CPU engine (needs no opening).
    pub fn cpu() -> Engine {
        Engine::default()
    }

    /// The engine `device` names, refusing what it cannot run (the GPU in a build without it,
    /// or in another precision than f32); the GPU is opened now, so that a missing driver is
    /// said before any work.
    pub fn open(device: Device, precision: Precision) -> Result<Engine> {
        device.check(precision)?;
        Ok(Engine {
            #[cfg(feature = "gpu")]
            gpu: match device {
                Device::Gpu => Some(crate::kernels::gpu::Gpu::shared()?),
                Device::Cpu => None,
            },
        })
    }

    /// The device this engine computes on.
    pub fn device(&self) -> Device {
        #[cfg(feature = "gpu")]
        if self.gpu.is_some() {
            return Device::Gpu;
        }
        Device::Cpu
    }

    /// The GPU, for the trainers' device-side halves (`None` on the CPU).
    #[cfg(feature = "gpu")]
    pub fn gpu(&self) -> Option<&std::sync::Arc<crate::kernels::gpu::Gpu>> {
        self.gpu.as_ref()
    }

    /// The log's line saying what computes: the GPU's adapter, or on the CPU which kernels run
    /// the products (a record then says which kernel made its bits).
    pub fn describe(&self) -> String {
        #[cfg(feature = "gpu")]
        if let Some(gpu) = &self.gpu {
            if crate::kernels::precision::current() == Precision::F16 {
                return format!("device: {}\n{}", gpu.describe(), gpu.f16_note());
            }
            return format!("device: {}", gpu.describe());
        }
        crate::kernels::gemm::products_line(crate::kernels::precision::current())
    }

    /// Refuse `what`, which only the CPU engine runs, on another device.
    pub fn only_cpu(&self, what: &str) -> Result<()> {
        if self.device() != Device::Cpu {
            bail!("{what} runs on the CPU: leave out --device {}", self.device().name());
        }
        Ok(())
    }

    /// [`evaluate`] on this engine: the same windows in the same order, the same sums (the
    /// GPU's NLL read back per window and summed in f64 as the CPU sums it).
    #[allow(clippy::too_many_arguments)]
    pub fn score(&self, model: &Model, w: &[f32], stream: &[u32], batch: usize, bptt: usize, carry: bool, per_token: Option<&mut Vec<f64>>, progress: bool) -> Result<Score> {
        #[cfg(feature = "gpu")]
        if let Some(gpu) = &self.gpu {
            return super::gpu::evaluate(gpu.clone(), model, w, stream, batch, bptt, carry, per_token, progress);
        }
        Ok(evaluate(model, w, stream, batch, bptt, carry, per_token, progress))
    }

    /// `model` with weights `w` stepped window by window from `state` (batch 1): each call
    /// feeds its tokens and gives the logits after the last one. On the GPU a model is made
    /// for each new window length (a prime, then one token), the state handed over.
    pub fn stepper<'a>(&self, model: &'a Model, w: &'a [f32], state: State<f32>) -> Result<Step<'a>> {
        #[cfg(feature = "gpu")]
        if let Some(gpu) = &self.gpu {
            return Ok(gpu_stepper(gpu.clone(), model, w, state));
        }
        let v = model.vocab_size();
        let (mut ws, mut state) = (ModelWs::default(), state);
        Ok(Box::new(move |toks: &[u32], logits: &mut [f64]| {
            model.forward(w, toks, toks.len(), 1, &mut state, &mut ws, None);
            logits.iter_mut().zip(&ws.logits[(toks.len() - 1) * v..toks.len() * v]).for_each(|(a, &b)| *a = b as f64);
            Ok(())
        }))
    }
}

#[cfg(feature = "gpu")]
fn gpu_stepper<'a>(gpu: std::sync::Arc<crate::kernels::gpu::Gpu>, model: &'a Model, w: &'a [f32], state: State<f32>) -> Step<'a> {
    use super::gpu::GpuLm;
    let (mut cur, mut start): (Option<GpuLm>, Option<State<f32>>) = (None, Some(state));
    Box::new(move |toks: &[u32], logits: &mut [f64]| {
        if cur.as_ref().is_none_or(|g| g.steps != toks.len()) {
            let from = match (&cur, start.take()) {
                (Some(prev), _) => prev.state()?,
                (None, Some(s)) => s,
                (None, None) => model.initial_state(1),
            };
            let mut g = GpuLm::new(gpu.clone(), model, w, toks.len(), 1, false, None)?;
            g.set_state(&from);
            cur = Some(g);
        }
        let g = cur.as_mut().expect("made above");
        // no targets: the scores are not read, only the logits
        g.score_window(toks, &vec![0; toks.len()])?;
        logits.iter_mut().zip(g.last_logits()?).for_each(|(a, b)| *a = b as f64);
        Ok(())
    })
}
