//! Optimizers over the flat parameter vector, gradient clipping and the learning-rate schedule.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

const CHUNK: usize = 1 << 14;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    Sgd,
    Adam,
}

impl std::str::FromStr for OptimizerKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "sgd" => Ok(OptimizerKind::Sgd),
            "adam" => Ok(OptimizerKind::Adam),
            _ => anyhow::bail!("unknown optimizer '{s}' (use sgd or adam)"),
        }
    }
}

/// Plain SGD, or Adam (β₁ 0.9, β₂ 0.999, ε 1e-8) with bias correction.
pub struct Optimizer {
    pub kind: OptimizerKind,
    /// Adam's first and second moments (empty for SGD)
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// updates taken
    pub t: u64,
    /// f16's loss scale and its counts (the GPU's `--precision f16`,
    /// which keeps it on the device; here for the checkpoint), `None` in other precisions
    pub loss_scale: Option<crate::kernels::precision::LossScale>,
}

impl Optimizer {
    pub fn new(kind: OptimizerKind, n: usize) -> Self {
        let moments = if kind == OptimizerKind::Adam { n } else { 0 };
        Optimizer { kind, m: written_zeros(moments), v: written_zeros(moments), t: 0, loss_scale: None }
    }

    pub fn step(&mut self, w: &mut [f32], g: &[f32], lr: f64) {
        self.t += 1;
        match self.kind {
            OptimizerKind::Sgd => {
                let lr = lr as f32;
                w.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK)).for_each(|(w, g)| {
                    w.iter_mut().zip(g).for_each(|(w, &g)| *w -= lr * g);
                });
            }
            OptimizerKind::Adam => {
                let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8f32);
                let c1 = 1.0 - b1.powf(self.t as f64);
                let c2 = 1.0 - b2.powf(self.t as f64);
                let step = (lr * c2.sqrt() / c1) as f32;
                let eps = eps * c2.sqrt() as f32;
                let (b1, b2) = (b1 as f32, b2 as f32);
                w.par_chunks_mut(CHUNK)
                    .zip(g.par_chunks(CHUNK))
                    .zip(self.m.par_chunks_mut(CHUNK).zip(self.v.par_chunks_mut(CHUNK)))
                    .for_each(|((w, g), (m, v))| {
                        for i in 0..w.len() {
                            m[i] = b1 * m[i] + (1.0 - b1) * g[i];
                            v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
                            w[i] -= step * m[i] / (v[i].sqrt() + eps);
                        }
                    });
            }
        }
    }
}

/// `n` zeros written now. `vec![0.0; n]` takes pages the kernel zeroes lazily: the first
/// update reads the moments (mapping the shared zero page) and then writes them, a copy-on-write
/// fault and a TLB shoot-down to the other core per 4 KiB page (C2 LSTM: about 3 % of a 10-step
/// run's samples, all in the first update). Written first, each page takes one plain fault.
fn written_zeros(n: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, 0.0);
    v
}

/// The global L2 norm of `g` (summed in f64, in a fixed order: each chunk as
/// [`num::sum_lanes_of`](crate::kernels::num::sum_lanes_of) sums, whose independent partial sums run at
/// the speed of memory where one running sum waited out the adder's latency at every element;
/// docs/benchmarks.md, "Global norm in lane sums"; then the chunks in order). The order depends only on
/// the length, not on the thread count.
pub fn global_norm(g: &[f32]) -> f64 {
    let parts: Vec<f64> = g.par_chunks(CHUNK).map(|c| crate::kernels::num::sum_lanes_of(c, |x| (x as f64) * (x as f64))).collect();
    parts.iter().sum::<f64>().sqrt()
}

/// Clip each value to `[-max_value, max_value]`, then rescale so the global norm is at most
/// `max_norm`. Returns the norm before the rescaling.
pub fn clip(g: &mut [f32], max_norm: Option<f64>, max_value: Option<f64>) -> f64 {
    if let Some(c) = max_value {
        let c = c as f32;
        g.par_chunks_mut(CHUNK).for_each(|ch| ch.iter_mut().for_each(|x| *x = x.clamp(-c, c)));
    }
    let norm = global_norm(g);
    if let Some(mx) = max_norm {
        if norm > mx {
            let s = (mx / norm) as f32;
            g.par_chunks_mut(CHUNK).for_each(|ch| ch.iter_mut().for_each(|x| *x *= s));
        }
    }
    norm
}

/// The papers' SGD schedule (applied to Adam's rate too) for the 0-based `epoch`: `lr`, multiplied by `decay` once for
/// every epoch from `decay_start` (1-based, the first decayed epoch) on. Zaremba et al.'s
/// "decay by 1.2 after 6 epochs" is `decay = 1/1.2, decay_start = 7`.
pub fn scheduled_lr(lr: f64, decay: f64, decay_start: usize, epoch: usize) -> f64 {
    let k = (epoch + 2).saturating_sub(decay_start.max(1));
    lr * decay.powi(k as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adam_first_step_moves_each_weight_by_lr_against_the_gradient_sign() {
        let mut o = Optimizer::new(OptimizerKind::Adam, 3);
        let mut w = vec![1.0f32, 1.0, 1.0];
        o.step(&mut w, &[0.5, -2.0, 1e-3], 0.01);
        for (x, want) in w.iter().zip([0.99, 1.01, 0.99]) {
            assert!((x - want).abs() < 1e-5, "{x} vs {want}");
        }
    }

    #[test]
    fn clipping_bounds_values_then_norm() {
        let mut g = vec![3.0f32, 4.0, -10.0];
        let n = clip(&mut g, Some(1.0), Some(4.0));
        assert!((n - (9.0f64 + 16.0 + 16.0).sqrt()).abs() < 1e-9);
        assert!((global_norm(&g) - 1.0).abs() < 1e-6);
        assert!(g[2] < 0.0 && (g[1] / g[0] - 4.0 / 3.0).abs() < 1e-6);
    }

    #[test]
    fn global_norm_counts_every_element_of_any_length() {
        // Lengths around the 16 partial sums and the parallel chunks, each element distinct so
        // that a dropped or doubled one shows: against the plain sum of squares in f64.
        for len in [0, 1, 15, 16, 17, CHUNK - 1, CHUNK + 17, 3 * CHUNK + 5] {
            let g: Vec<f32> = (0..len).map(|i| 1.0 + (i % 97) as f32 / 64.0).collect();
            let want = g.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>().sqrt();
            let got = global_norm(&g);
            assert!((got - want).abs() <= 1e-12 * want.max(1.0), "len {len}: {got} vs {want}");
        }
    }

    #[test]
    fn schedule_decays_from_the_start_epoch() {
        let lrs: Vec<f64> = (0..5).map(|e| scheduled_lr(1.0, 0.5, 3, e)).collect();
        assert_eq!(lrs, vec![1.0, 1.0, 0.5, 0.25, 0.125]);
    }
}
