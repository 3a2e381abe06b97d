//! Sampled softmax for training with large vocabularies (Jean et al. 2015), training only:
//! validation and evaluation always score the full softmax.
//!
//! Per step the candidate classes are the union of the batch's targets `T` and `K` classes drawn
//! with replacement from the proposal `Q` restricted to the classes outside `T`. Every row scores
//! all candidates (one GEMM against the gathered decoder rows), and its normaliser is
//!
//! ```text
//! Ẑᵢ = Σ_{c∈T} exp(oᵢc) + Σ_{s sampled} (mₛ / (K·Q(s)/Q(∉T))) · exp(oᵢₛ)
//! ```
//!
//! with `mₛ` the number of times `s` was drawn: the targets are counted exactly, the rest of the
//! vocabulary by importance sampling, an unbiased estimate of `Σ_{c∉T} exp(oᵢc)`. So a class is
//! never counted twice (drawing only outside `T` is the "remove accidental hits" of Jean et al.
//! without wasting the draws on targets), and the expected-count correction
//! `ln(K·Q(s)/Q(∉T)) − ln mₛ` is subtracted from a sampled class's logit; a duplicate draw is one
//! column with its weight `mₛ` instead of `mₛ` columns. The loss `ln Ẑᵢ − oᵢ,target` is the
//! *sampled* loss: a consistent but (through the `ln`) biased estimate of the NLL, so the trainer
//! labels it as such and reports the validation perplexity from the full softmax.
//!
//! The proposal is the add-one unigram distribution of the training data: a trained language
//! model's average prediction is the unigram distribution, so it puts the draws where the
//! probability mass outside the targets is, which keeps the importance weights' variance low; it
//! needs no frequency-sorted ids (char and byte vocabularies are sorted by code point); add-one
//! keeps every class reachable, which the estimate's consistency needs.

use crate::kernels::gemm::{add_bias_rows, add_col_sums, linear, linear_dw, linear_dx};
use crate::model::{layer_input, Model, ModelWs};
use crate::kernels::num::Float;
use crate::kernels::rng::Rng;
use rayon::prelude::*;

const NONE: u32 = u32::MAX;

/// The proposal, the draws of the latest step and every buffer a step needs, allocated once.
pub struct SampledSoftmax<T> {
    k: usize,
    q: Vec<f64>,
    /// scratch `[V]`: the cumulative proposal over the classes outside the targets
    cdf: Vec<f64>,
    /// `[V]`: a class's column among the candidates, `NONE` when it is not one
    col: Vec<u32>,
    /// the candidate classes: the batch's distinct targets, then the distinct draws
    cand: Vec<u32>,
    n_targets: usize,
    /// per row, the column of its target
    row_col: Vec<u32>,
    /// rows of the latest step
    rows: usize,
    /// the proposal's mass outside the latest step's targets
    q_rest: f64,
    /// times each drawn class was drawn (indexed from `n_targets`)
    drawn: Vec<u32>,
    /// per candidate, the correction added to its decoder bias
    adj: Vec<f64>,
    /// gathered decoder rows `[C, top]` and bias plus logit correction `[C]`, then their gradients
    w: Vec<T>,
    b: Vec<T>,
    gw: Vec<T>,
    gb: Vec<T>,
    /// `[n, C]` logits, then their gradient
    logits: Vec<T>,
    nll: Vec<f64>,
}

impl<T: Float> SampledSoftmax<T> {
    /// `k` draws per step from the add-one unigram distribution of `train`, for steps of `rows`
    /// positions whose hidden rows are `top` wide.
    pub fn new(k: usize, train: &[u32], vocab: usize, rows: usize, top: usize) -> Self {
        let mut q = vec![1.0f64; vocab];
        for &t in train {
            q[t as usize] += 1.0;
        }
        Self::with_proposal(k, q, rows, top)
    }

    /// `k` draws per step from the proposal proportional to `weights` (all positive).
    pub fn with_proposal(k: usize, mut q: Vec<f64>, rows: usize, top: usize) -> Self {
        assert!(k > 0 && q.iter().all(|&x| x > 0.0), "the proposal must give every class a positive probability");
        let total: f64 = q.iter().sum();
        q.iter_mut().for_each(|x| *x /= total);
        let v = q.len();
        let cmax = (rows + k).min(v);
        let z = |n: usize| vec![T::zero(); n];
        SampledSoftmax {
            k,
            cdf: vec![0.0; v],
            col: vec![NONE; v],
            cand: Vec::with_capacity(cmax),
            n_targets: 0,
            row_col: vec![0; rows],
            rows: 0,
            q_rest: 0.0,
            drawn: Vec::with_capacity(k),
            adj: Vec::with_capacity(cmax),
            w: z(cmax * top),
            b: z(cmax),
            gw: z(cmax * top),
            gb: z(cmax),
            logits: z(rows * cmax),
            nll: vec![0.0; rows],
            q,
        }
    }

    /// Candidates of the latest step (targets first).
    pub fn candidates(&self) -> &[u32] {
        &self.cand
    }

    /// The most candidates a step can have: its rows' targets and the draws, at most `V`.
    pub fn max_candidates(&self) -> usize {
        self.b.len()
    }

    /// Draw the candidates for `targets` (the latest step's from then on) as
    /// [`Self::score_rows`] does, with per candidate the correction added to its decoder bias
    /// ([`Self::corrections`]): 0 for a target (its logit is exact); for a drawn class, which
    /// stands for `mₛ / (K·Q(s)/Q(∉T))` classes, `ln mₛ − ln(K·Q(s)/Q(∉T))`.
    /// [`Self::target_columns`] then gives each row's target among the candidates. (The GPU
    /// engine scores on the device with these.)
    pub fn prepare(&mut self, targets: &[u32], rng: &mut Rng) {
        let n = targets.len();
        assert!(n <= self.row_col.len(), "more rows than the sampled softmax was sized for");
        self.draw(targets, rng);
        self.rows = n;
        let log_kq = (self.k as f64 / self.q_rest).ln();
        self.adj.clear();
        for (j, &cls) in self.cand.iter().enumerate() {
            self.adj.push(match j.checked_sub(self.n_targets) {
                None => 0.0,
                Some(d) => (self.drawn[d] as f64).ln() - log_kq - self.q[cls as usize].ln(),
            });
        }
    }

    /// Per candidate of the latest step, the correction added to its decoder bias.
    pub fn corrections(&self) -> &[f64] {
        &self.adj
    }

    /// Per row of the latest step, its target's column among the candidates.
    pub fn target_columns(&self) -> &[u32] {
        &self.row_col[..self.rows]
    }

    /// Pick the candidates for `targets`: their distinct classes and `k` draws outside them.
    fn draw(&mut self, targets: &[u32], rng: &mut Rng) {
        for &c in &self.cand {
            self.col[c as usize] = NONE;
        }
        self.cand.clear();
        self.drawn.clear();
        for (rc, &t) in self.row_col.iter_mut().zip(targets) {
            if self.col[t as usize] == NONE {
                self.col[t as usize] = self.cand.len() as u32;
                self.cand.push(t);
            }
            *rc = self.col[t as usize];
        }
        self.n_targets = self.cand.len();
        self.q_rest = 0.0;
        // The proposal restricted to the non-targets: one O(V) pass, small beside the O(V·top)
        // the full softmax would cost per row.
        let mut acc = 0.0;
        let mut last_free = None;
        for (c, (cdf, &q)) in self.cdf.iter_mut().zip(&self.q).enumerate() {
            if self.col[c] == NONE {
                acc += q;
                last_free = Some(c);
            }
            *cdf = acc;
        }
        let Some(last_free) = last_free else { return }; // every class is a target: exact softmax
        for _ in 0..self.k {
            let u = rng.uniform() * acc;
            // The first class whose cumulative mass exceeds u; a target adds no mass, so it is
            // never chosen (the clamp only guards u rounding up to the total).
            let c = self.cdf.partition_point(|&x| x <= u).min(last_free);
            match self.col[c] {
                NONE => {
                    self.col[c] = self.cand.len() as u32;
                    self.cand.push(c as u32);
                    self.drawn.push(1);
                }
                j => self.drawn[j as usize - self.n_targets] += 1,
            }
        }
        self.q_rest = acc;
    }

    /// Score `targets` against the hidden rows `h` (`[n, top]`) and the decoder (`dec_w`
    /// `[V, top]`, `dec_b` `[V]`) over this step's candidates: the per-row sampled losses are
    /// summed and returned; with `grad` the logits become `d(mean sampled loss)/d logits`.
    #[allow(clippy::too_many_arguments)]
    pub fn score_rows(&mut self, h: &[T], top: usize, dec_w: &[T], dec_b: &[T], targets: &[u32], rng: &mut Rng, grad: bool) -> f64 {
        let n = targets.len();
        self.prepare(targets, rng);
        let c = self.cand.len();
        for (j, &cls) in self.cand.iter().enumerate() {
            let cls = cls as usize;
            self.w[j * top..(j + 1) * top].copy_from_slice(&dec_w[cls * top..(cls + 1) * top]);
            self.b[j] = dec_b[cls] + T::c(self.adj[j]);
        }
        let logits = &mut self.logits[..n * c];
        linear(n, c, top, &h[..n * top], &self.w[..c * top], logits, false);
        add_bias_rows(n, c, &[&self.b[..c]], logits, c);
        let scale = T::c(1.0 / n as f64);
        logits
            .par_chunks_mut(c)
            .zip(self.nll[..n].par_iter_mut())
            .zip(self.row_col[..n].par_iter())
            .for_each(|((row, nll), &tc)| {
                *nll = crate::model::softmax_xent_row(row, tc as usize, scale, grad);
            });
        self.nll[..n].iter().sum()
    }

    /// Backward of the latest [`Self::score_rows`] with `grad`: the decoder gradients are added
    /// to `g_w` (`[V, top]`) and `g_b` (`[V]`) at the candidates' rows, and `dh` (`[n, top]`)
    /// is overwritten with the gradient of the hidden rows.
    pub fn backward_rows(&mut self, h: &[T], top: usize, g_w: &mut [T], g_b: &mut [T], dh: &mut [T]) {
        let (n, c) = (self.rows, self.cand.len());
        let dlogits = &self.logits[..n * c];
        let (gw, gb) = (&mut self.gw[..c * top], &mut self.gb[..c]);
        gw.fill(T::zero());
        gb.fill(T::zero());
        linear_dw(n, c, top, dlogits, &h[..n * top], gw);
        add_col_sums(n, c, dlogits, gb);
        for (j, &cls) in self.cand.iter().enumerate() {
            let cls = cls as usize;
            g_w[cls * top..(cls + 1) * top].iter_mut().zip(&gw[j * top..(j + 1) * top]).for_each(|(d, &x)| *d += x);
            g_b[cls] += gb[j];
        }
        linear_dx(n, c, top, dlogits, &self.w[..c * top], &mut dh[..n * top], false);
    }

    /// [`Self::score_rows`] on the top layer's output of the latest
    /// [`Model::forward_layers`] and the model's decoder.
    pub fn score(&mut self, model: &Model, w: &[T], targets: &[u32], ws: &ModelWs<T>, rng: &mut Rng) -> f64 {
        let (hw, hb) = model.head();
        self.score_rows(ws.layer_input(model.cells.len()), model.top_width(), &w[hw], &w[hb], targets, rng, true)
    }

    /// Backward of [`Self::score`] through the decoder, the layers and the embedding; gradients
    /// are added to `g`.
    pub fn backward(&mut self, model: &Model, w: &[T], g: &mut [T], tokens: &[u32], ws: &mut ModelWs<T>) {
        let (hw, hb) = model.head();
        let nl = model.cells.len();
        // The bias follows the weight in the flat vector.
        debug_assert_eq!(hw.end, hb.start);
        let (g_w, g_b) = g[hw.start..hb.end].split_at_mut(hw.len());
        self.backward_rows(layer_input(&ws.xs, &ws.ys, ws.drop.p > 0.0, nl), model.top_width(), g_w, g_b, &mut ws.dxs[nl]);
        model.backward_layers(w, g, tokens, ws);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: usize = 6;
    const TOP: usize = 3;
    /// rows 0 and 3 want class 0, rows 1 and 2 class 2: the draws fall in {1, 3, 4, 5}
    const TARGETS: [u32; 4] = [0, 2, 2, 0];

    /// Fixed hidden rows `[4, TOP]`, decoder `[V, TOP]` and bias, spread so the logits differ by
    /// several nats, and a proposal that deliberately disagrees with the model's probabilities.
    fn fixture() -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
        let h: Vec<f64> = (0..TARGETS.len() * TOP).map(|i| (i * 7 % 11) as f64 / 5.0 - 1.0).collect();
        let w: Vec<f64> = (0..V * TOP).map(|i| (i * 5 % 13) as f64 / 4.0 - 1.5).collect();
        let b = vec![0.3, -0.5, 0.1, 0.8, -0.2, 0.0];
        let q = vec![5.0, 1.0, 3.0, 1.0, 2.0, 4.0];
        (h, w, b, q)
    }

    /// The full softmax's probabilities `[n, V]`.
    fn probs(h: &[f64], w: &[f64], b: &[f64], n: usize) -> Vec<f64> {
        let mut p = Vec::with_capacity(n * V);
        for hi in h.chunks_exact(TOP).take(n) {
            let e: Vec<f64> = (0..V).map(|c| (b[c] + (0..TOP).map(|d| w[c * TOP + d] * hi[d]).sum::<f64>()).exp()).collect();
            let z: f64 = e.iter().sum();
            p.extend(e.iter().map(|x| x / z));
        }
        p
    }

    /// The full softmax's mean-NLL gradients w.r.t. the decoder weight and bias.
    fn full_grad(h: &[f64], w: &[f64], b: &[f64], targets: &[u32]) -> (Vec<f64>, Vec<f64>, f64) {
        let n = targets.len();
        let (mut gw, mut gb, mut nll) = (vec![0.0; V * TOP], vec![0.0; V], 0.0);
        for (i, &t) in targets.iter().enumerate() {
            let hi = &h[i * TOP..(i + 1) * TOP];
            let o: Vec<f64> = (0..V).map(|c| b[c] + (0..TOP).map(|d| w[c * TOP + d] * hi[d]).sum::<f64>()).collect();
            let z: f64 = o.iter().map(|x| x.exp()).sum();
            nll += z.ln() - o[t as usize];
            for c in 0..V {
                let d = (o[c].exp() / z - f64::from(c == t as usize)) / n as f64;
                gb[c] += d;
                (0..TOP).for_each(|k| gw[c * TOP + k] += d * hi[k]);
            }
        }
        (gw, gb, nll)
    }

    /// The property that makes a sampled softmax worth training with: averaged over independent
    /// draws, its decoder gradient is the full softmax's (consistency; biased only at O(1/K)).
    #[test]
    fn expected_gradient_matches_the_full_softmax() {
        let (h, w, b, q) = fixture();
        let (want_w, want_b, _) = full_grad(&h, &w, &b, &TARGETS);
        let k = 256;
        let draws = 20_000;
        let n = TARGETS.len();
        let mut ss = SampledSoftmax::<f64>::with_proposal(k, q.clone(), n, TOP);
        let mut rng = Rng::new(9);
        let p = V * TOP + V;
        let (mut sum, mut sum2) = (vec![0.0; p], vec![0.0; p]);
        // per row: Σ Ẑ and Σ Ẑ², for the normaliser's coefficient of variation
        let (mut zs, mut zs2) = (vec![0.0; n], vec![0.0; n]);
        let mut g = vec![0.0; p];
        let mut dh = vec![0.0; n * TOP];
        for _ in 0..draws {
            ss.score_rows(&h, TOP, &w, &b, &TARGETS, &mut rng, true);
            for (i, &t) in TARGETS.iter().enumerate() {
                // Ẑᵢ = exp(sampled lossᵢ + oᵢ,target)
                let o = b[t as usize] + (0..TOP).map(|d| w[t as usize * TOP + d] * h[i * TOP + d]).sum::<f64>();
                let z = (ss.nll[i] + o).exp();
                zs[i] += z;
                zs2[i] += z * z;
            }
            g.fill(0.0);
            let (gw, gb) = g.split_at_mut(V * TOP);
            ss.backward_rows(&h, TOP, gw, gb, &mut dh);
            for ((s, s2), &x) in sum.iter_mut().zip(&mut sum2).zip(&g) {
                *s += x;
                *s2 += x * x;
            }
        }
        // Tolerance = Monte-Carlo error + the finite-K bias. The mean of `draws` independent
        // gradients has standard error sd/√draws; 4 of them leave a chance of 6e-5 per entry.
        // The bias: row i's logit gradient for class c is (a/Ẑ − [c = t])/n with a = exp(oc) for
        // a target, a = wc·exp(oc) (E a = exp(oc)) for a drawn class. By the delta method
        // E[a/Ẑ] − E[a]/Z = (E[a]·Var Ẑ/Z − Cov(a, Ẑ))/Z² + O(1/K²), at most
        // pc·(cv²(Ẑ) + cv(Ẑ)·cv(a)) with pc the full softmax's probability; a target's a is
        // exact (cv 0), a drawn class's weight has cv(a)² = (1 − π)/(Kπ), π its proposal
        // probability among the non-targets. Twice that covers the O(1/K²) rest; a decoder
        // weight entry sums the rows' bounds times |hᵢd|. cv²(Ẑ) is measured from the draws.
        let cv2: Vec<f64> = (0..n)
            .map(|i| {
                let m = zs[i] / draws as f64;
                (zs2[i] / draws as f64 - m * m) / (m * m)
            })
            .collect();
        let rest: f64 = (0..V).filter(|c| !TARGETS.contains(&(*c as u32))).map(|c| q[c]).sum();
        let cv_a = |c: usize| if TARGETS.contains(&(c as u32)) { 0.0 } else { ((1.0 - q[c] / rest) / (k as f64 * q[c] / rest)).sqrt() };
        let p_full = probs(&h, &w, &b, n);
        // bias[i][c]: the bound on row i's logit-gradient bias for class c
        let bias = |i: usize, c: usize| 2.0 * p_full[i * V + c] * (cv2[i] + cv2[i].sqrt() * cv_a(c)) / n as f64;
        let want: Vec<f64> = want_w.iter().chain(&want_b).copied().collect();
        let mut worst: f64 = 0.0;
        for (e, &want) in want.iter().enumerate() {
            let mean = sum[e] / draws as f64;
            let se = ((sum2[e] / draws as f64 - mean * mean).max(0.0) / draws as f64).sqrt();
            let allowance: f64 = match e.checked_sub(V * TOP) {
                None => (0..n).map(|i| bias(i, e / TOP) * h[i * TOP + e % TOP].abs()).sum(),
                Some(c) => (0..n).map(|i| bias(i, c)).sum(),
            };
            let tol = 4.0 * se + allowance;
            worst = worst.max(tol / want.abs().max(0.01));
            assert!((mean - want).abs() <= tol, "entry {e}: sampled {mean} vs full {want} (tolerance {tol})");
        }
        // The tolerances are tight enough to tell a correct gradient from a wrong one.
        assert!(worst < 0.1, "a tolerance is {worst} of its gradient");
    }

    /// When the batch's targets are every class there is nothing to sample: the exact softmax.
    #[test]
    fn targets_covering_the_vocabulary_give_the_full_softmax() {
        let (h, w, b, q) = fixture();
        let h = [&h[..], &h[..]].concat();
        let targets = [0, 1, 2, 3, 4, 5, 5, 1];
        let (want_w, want_b, want_nll) = full_grad(&h, &w, &b, &targets);
        let mut ss = SampledSoftmax::<f64>::with_proposal(10, q, targets.len(), TOP);
        let mut rng = Rng::new(1);
        let nll = ss.score_rows(&h, TOP, &w, &b, &targets, &mut rng, true);
        assert!((nll - want_nll).abs() < 1e-12);
        let (mut gw, mut gb, mut dh) = (vec![0.0; V * TOP], vec![0.0; V], vec![0.0; h.len()]);
        ss.backward_rows(&h, TOP, &mut gw, &mut gb, &mut dh);
        for (a, b) in gw.iter().chain(&gb).zip(want_w.iter().chain(&want_b)) {
            assert!((a - b).abs() < 1e-12);
        }
        assert_eq!(rng.position(), Rng::new(1).position(), "no draws were needed");
    }

    /// For one fixed draw the sampled loss is an ordinary function of the decoder and the hidden
    /// rows: its backward must match central differences.
    #[test]
    fn backward_matches_finite_differences_for_a_fixed_draw() {
        let (h, w, b, q) = fixture();
        let mut ss = SampledSoftmax::<f64>::with_proposal(5, q, TARGETS.len(), TOP);
        let loss = |ss: &mut SampledSoftmax<f64>, h: &[f64], w: &[f64], b: &[f64]| {
            ss.score_rows(h, TOP, w, b, &TARGETS, &mut Rng::new(4), false) / TARGETS.len() as f64
        };
        ss.score_rows(&h, TOP, &w, &b, &TARGETS, &mut Rng::new(4), true);
        assert!(ss.candidates().len() > 2, "the fixed draw sampled something");
        let (mut gw, mut gb, mut dh) = (vec![0.0; V * TOP], vec![0.0; V], vec![0.0; h.len()]);
        ss.backward_rows(&h, TOP, &mut gw, &mut gb, &mut dh);
        let mut params = [h.clone(), w.clone(), b.clone()];
        for (which, grad) in [&dh, &gw, &gb].into_iter().enumerate() {
            for k in 0..grad.len() {
                let x = params[which][k];
                params[which][k] = x + 1e-6;
                let lp = loss(&mut ss, &params[0], &params[1], &params[2]);
                params[which][k] = x - 1e-6;
                let lm = loss(&mut ss, &params[0], &params[1], &params[2]);
                params[which][k] = x;
                let num = (lp - lm) / 2e-6;
                assert!((num - grad[k]).abs() < 1e-7, "tensor {which}[{k}]: {} vs {num}", grad[k]);
            }
        }
    }
}
