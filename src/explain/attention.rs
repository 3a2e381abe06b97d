//! The effective weight of each past step in an RWA's or RDA's state (our analysis: it appears
//! in none of the papers).
//!
//! Unrolling `n_t = γ_t ∘ n_{t-1} + a_t ∘ z_t` and `d_t = γ_t ∘ d_{t-1} + a_t` (the RWA has
//! `γ = 1`) gives, per unit,
//!
//! ```text
//! n_t / d_t = Σ_{j ≤ t} w_j^t ∘ z_j  +  w_0^t ∘ n_0 / d_0,     w_j^t = a_j Π_{k=j+1..t} γ_k / d_t
//! ```
//!
//! and the weights (with the initial state's `w_0^t = d_0 Π_{k ≤ t} γ_k / d_t`, zero from the
//! cell's own initial state) sum to exactly 1: the unit's value before `f_h` is a weighted
//! *average* of the `z_j`, the weights being the attention the unit pays to each past step.
//!
//! **Computation.** In the log domain, from the pre-activations the forward pass left in the
//! workspace (widened to f64): `ln w_j^t = λ_j + Σ_{k=j+1..t} ln γ_k − ln d_t`, with the
//! log-attention `λ` and `ln γ` computed stably as the cell does, and `ln d_t = m_t + ln d'_t`
//! from the forward's stored reference `m` and scaled denominator `d'`. Every exponent is the
//! log of a number in `[0, 1]` up to rounding, so nothing overflows. Walking `j = t, …, 0`
//! costs `O(t·H)` per row. The sum of the weights and the reconstruction of `n_t/d_t = n'_t/d'_t`
//! are then checked against the forward's state (not against a normalisation of our own). A
//! unit whose denominator is still zero (relu attention that has paid nothing so far) has no
//! weights at that step.

use super::ran::{check_components, Influence, Row};
use crate::cells::rda::Attention;
use crate::cells::{Cell, Workspace};
use crate::model::Model;
use anyhow::{Context, Result};
use rayon::prelude::*;
use std::path::Path;

#[derive(Clone, Debug)]
pub struct AttentionAnalysis {
    pub layers: Vec<Influence>,
}

/// `ln σ(p)`, finite for every `p`.
fn ln_sigmoid(p: f64) -> f64 {
    p.min(0.0) - (-p.abs()).exp().ln_1p()
}

/// The log-attention `ln f_a(p)` (−∞ for a relu that pays nothing).
fn log_attention(att: Attention, p: f64) -> f64 {
    match att {
        Attention::Exp => p,
        Attention::Relu => {
            if p > 0.0 {
                p.ln()
            } else {
                f64::NEG_INFINITY
            }
        }
        Attention::Sigmoid => ln_sigmoid(p),
        Attention::Softplus => {
            if p < -20.0 {
                p - 0.5 * p.exp()
            } else {
                (p.max(0.0) + (-p.abs()).exp().ln_1p()).ln()
            }
        }
    }
}

/// Effective weights of one RWA (`discount = false`) or RDA layer after a batch-1 forward.
pub fn layer_weights(layer: usize, hidden: usize, att: Attention, discount: bool, ws: &Workspace<f32>, comps: &[usize]) -> Influence {
    let (h, n) = (hidden, ws.steps);
    assert_eq!(ws.batch, 1, "the analyses read a batch-1 forward");
    let wp = if discount { 4 * h } else { 3 * h };
    // Per step: z, λ and ln γ in f64.
    let mut z = vec![0f64; n * h];
    let mut lam = vec![0f64; n * h];
    let mut lg = vec![0f64; n * h];
    for t in 0..n {
        let p = &ws.xp[t * wp..(t + 1) * wp];
        for m in 0..h {
            z[t * h + m] = p[m] as f64 * (p[h + m] as f64).tanh();
            lam[t * h + m] = log_attention(att, p[2 * h + m] as f64);
            if discount {
                lg[t * h + m] = ln_sigmoid(p[3 * h + m] as f64);
            }
        }
    }
    // State blocks [n' | d' | m | h] of st[t].
    let st = |t: usize, b: usize| &ws.st[t * 4 * h + b * h..t * 4 * h + (b + 1) * h];
    let (n0, d0, m0) = (st(0, 0), st(0, 1), st(0, 2));
    let rows: Vec<Row> = (0..n)
        .into_par_iter()
        .map(|t| {
            let (nt, dt, mt) = (st(t + 1, 0), st(t + 1, 1), st(t + 1, 2));
            let live: Vec<bool> = dt.iter().map(|&d| d > 0.0).collect();
            let lnd: Vec<f64> = (0..h).map(|m| if live[m] { mt[m] as f64 + (dt[m] as f64).ln() } else { 0.0 }).collect();
            let mut q = vec![0f64; h];
            let mut rec = vec![0f64; h];
            let mut sum = vec![0f64; h];
            let mut row = vec![0f32; t + 1];
            let mut mean = vec![0f32; t + 1];
            let mut crow: Vec<Vec<f32>> = comps.iter().map(|_| vec![0f32; t + 1]).collect();
            for j in (0..=t).rev() {
                let (lj, gj, zj) = (&lam[j * h..(j + 1) * h], &lg[j * h..(j + 1) * h], &z[j * h..(j + 1) * h]);
                let (mut mx, mut all) = (0f64, 0f64);
                for m in 0..h {
                    if live[m] && lj[m] > f64::NEG_INFINITY {
                        let w = (lj[m] + q[m] - lnd[m]).exp();
                        rec[m] += w * zj[m];
                        sum[m] += w;
                        mx = mx.max(w);
                        all += w;
                    }
                }
                mean[j] = (all / h as f64) as f32;
                for (k, &m) in comps.iter().enumerate() {
                    if live[m] && lj[m] > f64::NEG_INFINITY {
                        crow[k][j] = (lj[m] + q[m] - lnd[m]).exp() as f32;
                    }
                }
                for m in 0..h {
                    q[m] += gj[m];
                }
                row[j] = mx as f32;
            }
            // The initial state's share: n_0 = n'_0 e^{m_0}, d_0 = d'_0 e^{m_0}, discounted by
            // every γ of the text.
            let mut init_max = 0f64;
            for m in 0..h {
                if live[m] && d0[m] != 0.0 {
                    let s = (m0[m] as f64 + q[m] - lnd[m]).exp();
                    rec[m] += n0[m] as f64 * s;
                    sum[m] += d0[m] as f64 * s;
                    init_max = init_max.max(d0[m] as f64 * s);
                } else if live[m] && n0[m] != 0.0 {
                    // n'_0 without d'_0 is not a state the cell produces; count it as is.
                    rec[m] += n0[m] as f64 * (m0[m] as f64 + q[m] - lnd[m]).exp();
                }
            }
            let (mut err2, mut ref2, mut sum_err) = (0f64, 0f64, 0f64);
            for m in 0..h {
                if live[m] {
                    let r = nt[m] as f64 / dt[m] as f64;
                    err2 += (rec[m] - r).powi(2);
                    ref2 += r * r;
                    sum_err = sum_err.max((sum[m] - 1.0).abs());
                }
            }
            Row { max_w: row, mean_w: mean, init_max, comps: crow, err2, ref2, sum_err }
        })
        .collect();
    Influence::from_rows(layer, if discount { "rda" } else { "rwa" }, h, comps, rows, true)
}

/// The effective weights of every RWA or RDA layer. `None` when there is none.
pub fn analyze(model: &Model, cell_ws: &[Workspace<f32>], comps: &[usize]) -> Result<Option<AttentionAnalysis>> {
    let mut layers = Vec::new();
    for (l, cell) in model.cells.iter().enumerate() {
        let (hidden, att, discount) = match cell {
            Cell::Rda(c) => (c.hidden, c.attention, c.discount),
            _ => continue,
        };
        check_components(comps, hidden).with_context(|| format!("layer {l}"))?;
        layers.push(layer_weights(l, hidden, att, discount, &cell_ws[l], comps));
    }
    Ok((!layers.is_empty()).then_some(AttentionAnalysis { layers }))
}

impl AttentionAnalysis {
    pub fn summary(&self, labels: &[String]) -> String {
        let mut s = String::from(
            "Effective attention weights w_j^t = a_j Π_{k=j+1..t} γ_k / d_t of the RWA/RDA (rnnlens's own analysis, in none of the papers):\n",
        );
        for l in &self.layers {
            s.push_str(&l.summary(labels, "n_t/d_t"));
        }
        s
    }

    pub fn html(&self, labels: &[String]) -> String {
        let mut s = String::from("<h2>Effective attention weights of the RWA/RDA</h2>\n");
        s.push_str(
            "<p><strong>This analysis is rnnlens's own; it appears in none of the papers.</strong> Per unit, \
             n<sub>t</sub>/d<sub>t</sub> = Σ<sub>j≤t</sub> w<sub>j</sub><sup>t</sup> z<sub>j</sub> with \
             w<sub>j</sub><sup>t</sup> = a<sub>j</sub> Π<sub>k=j+1..t</sub> γ<sub>k</sub> / d<sub>t</sub> \
             (γ = 1 for the RWA): the weights sum to 1 over j, so before f<sub>h</sub> every unit is a weighted \
             average of the values z<sub>j</sub> = u<sub>j</sub> ∘ tanh(g<sub>j</sub>) written so far. The arrows \
             and heat maps are the same as for the RAN.</p>\n",
        );
        for l in &self.layers {
            s.push_str(&l.html(labels));
        }
        s
    }

    pub fn write_data(&self, dir: &Path, labels: &[String]) -> Result<()> {
        for l in &self.layers {
            l.write_data(dir, "attention", labels)?;
        }
        Ok(())
    }
}
