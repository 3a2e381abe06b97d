//! Linear RNN baselines of the ISAN paper (Foerster et al., section 4.1): one recurrent matrix
//! for every input, the input entering only through a per-symbol bias.
//!
//! ```text
//! h_t = W h_{t-1} + b_{x_t}
//! y_t = g(h_t),            g ∈ {identity, tanh}
//! ```
//! With `g` the identity this is the "fully linear RNN"; with tanh it is the "fully linear
//! network with a non-linear readout": the recurrence stays linear and only the output passed to
//! the softmax readout is squashed. `x_t` is the input symbol itself (`seq.tokens`,
//! `0 ≤ x_t < K`), so `b_x` plays the part of an embedding added to the state. Every row starts
//! from the learned `h0` unless `seq.s0` is given. A variational dropout mask, when given,
//! multiplies `h_{t-1}` before the recurrent GEMM.
//!
//! Flat parameter layout and checkpoint names (per layer, prefix `rnn.{l}.`):
//! `W [H, H]`, `b_x [K, H]`, `h0 [H]`. Options: `readout` (`"identity"` | `"tanh"`). The paper
//! says nothing about initialisation, so `W` is initialised like any square weight.
//!
//! Workspace use: `st` holds `h`; `rin[t] = mask ∘ h_{t-1}`; each step's GEMM writes `h_t` straight
//! into `st[t+1]` and the symbol's bias is added by a gather. In backward `drp[t]` is the
//! gradient of `h_t` (backward recomputes `g'` from `h_t` in `st`), `ds` the running gradient of
//! `h`. `xp`, `act`, `rp`, `extra`, `tmp`, `dr` are unused.

use super::{Outputs, masked_copy, row_parts, Shared, split, split_mut, Grads, InitKind, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::gemm::{add_col_sums, linear_dw};
use crate::kernels::num::{Act, Float};

#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    /// `K`: number of input symbols (the vocabulary)
    pub symbols: usize,
    pub hidden: usize,
    /// the function applied to `h` before the softmax readout: identity or tanh
    pub readout: crate::kernels::num::Act,
}

impl Linear {
    fn lens(&self) -> [usize; 3] {
        let (k, h) = (self.symbols, self.hidden);
        [h * h, k * h, h]
    }
}

/// The GPU twin (`linear.wgsl`): the symbol's bias gathered into `xp`, the recurrent GEMM adding
/// `W h̃_{t-1}` to it, the learned `h0` as the layer's own start.
#[cfg(feature = "gpu")]
impl Linear {
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        let h = self.hidden;
        let [wr, bx, _] = self.lens();
        if !matches!(self.readout, Act::Identity | Act::Tanh) {
            anyhow::bail!("the linear RNN's readout must be identity or tanh");
        }
        let source = concat!(include_str!("linear.wgsl"), include_str!("plain_start.wgsl"));
        Ok(super::gpu::GpuCell {
            own_start: Some(wr + bx),
            opts: (self.readout == Act::Tanh) as u32,
            gather: Some(wr),
            ..super::gpu::GpuCell::square("linear", source, self.symbols, h)
        })
    }
}

impl Recurrent for Linear {
    fn sizes(&self) -> Sizes {
        let h = self.hidden;
        Sizes { input: self.symbols, hidden: h, output: h, state: h, rec: h }
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let (k, h) = (self.symbols, self.hidden);
        vec![
            TensorSpec::new("W", &[h, h], InitKind::Weight { fan_in: h, fan_out: h }),
            TensorSpec::new("b_x", &[k, h], InitKind::Bias),
            TensorSpec::new("h0", &[h], InitKind::Bias),
        ]
    }

    fn ws_dims(&self, _thin: bool) -> WsDims {
        let h = self.hidden;
        WsDims { state: h, rin: h, rp: h, ..Default::default() }
    }

    fn reads_tokens(&self) -> bool {
        true
    }

    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        let (nk, h, g) = (self.symbols, self.hidden, self.readout);
        let (nt, nb) = (seq.steps, seq.batch);
        let n = nb * h;
        let [wr, bx, h0] = split(w, &self.lens())[..] else { unreachable!() };
        let tokens = seq.tokens.expect("linear reads token ids");
        assert_eq!(tokens.len(), nt * nb, "linear: tokens must be [T, B]");
        assert!(tokens.iter().all(|&x| (x as usize) < nk), "linear: symbol out of range (K = {nk})");

        ws.begin_forward(seq.s0);
        ws.pk[0].pack_linear(wr, h, h);
        if seq.s0.is_none() {
            ws.st[..n].chunks_exact_mut(h).for_each(|row| row.copy_from_slice(h0));
        }

        let (pk, mask) = (&ws.pk, seq.mask);
        let (st, rin_all, yy) = (Shared::new(&mut ws.st), Shared::new(&mut ws.rin), Outputs::new(y, &mut ws.y_scratch, seq, h));
        row_parts(nb, |p| {
            let m = p.len();
            for t in 0..nt {
                // SAFETY (every `at`): each part reads and writes only its own batch rows of
                // each step, inside the buffers sized for (T, B).
                let rin = unsafe { rin_all.at(p.at(t, h)) };
                masked_copy(rin, unsafe { st.at(p.at(t, h)) }, mask.map(|mk| &mk[p.block(0, h)]));
                let h_next = unsafe { st.at(p.at(t + 1, h)) };
                pk[0].gemm_serial(0, m, rin, h, h_next, h, false);
                let y_t = unsafe { yy.rows(&p, t) };
                let toks = &tokens[p.at(t, 1)];
                for ((hv, yv), &x) in h_next.chunks_exact_mut(h).zip(y_t.chunks_exact_mut(h)).zip(toks) {
                    let b = &bx[x as usize * h..(x as usize + 1) * h];
                    for ((hj, yj), &bj) in hv.iter_mut().zip(yv.iter_mut()).zip(b) {
                        *hj += bj;
                        *yj = g.f(*hj);
                    }
                }
            }
        });
    }

    fn backward<T: Float>(&self, w: &[T], gr: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        let (h, g) = (self.hidden, self.readout);
        let (nt, nb) = (seq.steps, seq.batch);
        let [wr, _, _] = split(w, &self.lens())[..] else { unreachable!() };
        let [gwr, gbx, gh0] = &mut split_mut(gr, &self.lens())[..] else { unreachable!() };
        let tokens = seq.tokens.expect("linear reads token ids");

        // ds = ∂L/∂h_t through the later steps and the final state.
        ws.begin_backward(grads.ds_final);
        ws.pk[0].pack_linear_dx(wr, h, h);

        let (pk, mask, dy_all, st) = (&ws.pk, seq.mask, grads.dy, &ws.st);
        let (drp, ds_all) = (Shared::new(&mut ws.drp), Shared::new(&mut ws.ds));
        row_parts(nb, |p| {
            let m = p.len();
            // SAFETY (every `at`): each part reads and writes only its own batch rows.
            let ds = unsafe { ds_all.at(p.block(0, h)) };
            for t in (0..nt).rev() {
                let (dy, h_t) = (&dy_all[p.at(t, h)], &st[p.at(t + 1, h)]);
                let da = unsafe { drp.at(p.at(t, h)) };
                if g == Act::Identity {
                    da.iter_mut().zip(ds.iter().zip(dy)).for_each(|(o, (&a, &b))| *o = a + b);
                } else {
                    for (((o, &hv), &dyv), &dsv) in da.iter_mut().zip(h_t).zip(dy).zip(ds.iter()) {
                        *o = dsv + dyv * g.df_from_y(g.f(hv));
                    }
                }
                // h_{t-1} reaches the loss only through this step's recurrent GEMM.
                pk[0].gemm_serial(0, m, da, h, ds, h, false);
                if let Some(mk) = mask {
                    ds.iter_mut().zip(&mk[p.block(0, h)]).for_each(|(v, &mv)| *v *= mv);
                }
            }
        });
        // ds is now the gradient of the initial state.
        if seq.s0.is_none() {
            add_col_sums(nb, h, &ws.ds, gh0);
        }
        if let Some(ds0) = grads.ds0 {
            ds0.copy_from_slice(&ws.ds);
        }

        // The recurrent matrix: one GEMM over all T·B rows; the biases: a scatter-add by symbol.
        linear_dw(nt * nb, h, h, &ws.drp, &ws.rin, gwr);
        for (da, &x) in ws.drp.chunks_exact(h).zip(tokens) {
            let gb = &mut gbx[x as usize * h..(x as usize + 1) * h];
            gb.iter_mut().zip(da).for_each(|(o, &v)| *o += v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::{gradcheck, Cell};
    use crate::kernels::rng::Rng;

    #[test]
    fn gradients_match_finite_differences() {
        for readout in [Act::Identity, Act::Tanh] {
            for symbols in [3, 4] {
                let cell = Cell::Linear(Linear { symbols, hidden: 4, readout });
                gradcheck::check_with_symbols(&cell, &[1, 2, 3], symbols as u64);
            }
        }
    }

    /// The recurrence written plainly, one row at a time: returns (outputs, states).
    fn reference(cell: &Linear, w: &[f64], tokens: &[u32], s0: Option<&[f64]>, mask: Option<&[f64]>, nb: usize) -> (Vec<f64>, Vec<f64>) {
        let (nk, h) = (cell.symbols, cell.hidden);
        let (wr, bx, h0) = (&w[..h * h], &w[h * h..h * h + nk * h], &w[h * h + nk * h..]);
        let mut state: Vec<f64> = match s0 {
            Some(s) => s.to_vec(),
            None => (0..nb).flat_map(|_| h0.iter().copied()).collect(),
        };
        let (mut ys, mut hs) = (Vec::new(), Vec::new());
        for toks in tokens.chunks(nb) {
            let mut next = vec![0.0; nb * h];
            for b in 0..nb {
                let k = toks[b] as usize;
                for i in 0..h {
                    let mut v = bx[k * h + i];
                    for j in 0..h {
                        let m = mask.map_or(1.0, |m| m[b * h + j]);
                        v += wr[i * h + j] * m * state[b * h + j];
                    }
                    next[b * h + i] = v;
                }
            }
            state = next;
            hs.extend_from_slice(&state);
            ys.extend(state.iter().map(|&v| if cell.readout == Act::Tanh { v.tanh() } else { v }));
        }
        (ys, hs)
    }

    #[test]
    fn forward_matches_per_row_reference() {
        let mut rng = Rng::new(5);
        let (nt, nb, nk, h) = (8, 7, 5, 6);
        for readout in [Act::Identity, Act::Tanh] {
            let cell = Linear { symbols: nk, hidden: h, readout };
            let wrap = Cell::Linear(cell.clone());
            let w: Vec<f64> = (0..wrap.param_len()).map(|_| rng.range(-0.5, 0.5)).collect();
            // Symbol 3 never occurs.
            let tokens: Vec<u32> = (0..nt * nb).map(|_| [0, 1, 2, 4][rng.below(4) as usize]).collect();
            let s0: Vec<f64> = (0..nb * h).map(|_| rng.range(-1.0, 1.0)).collect();
            let mask: Vec<f64> = (0..nb * h).map(|_| rng.range(0.0, 2.0)).collect();
            for (given, masked) in [(false, false), (true, false), (true, true), (false, true)] {
                let s0 = given.then_some(&s0[..]);
                let mask = masked.then_some(&mask[..]);
                let (want_y, want_h) = reference(&cell, &w, &tokens, s0, mask, nb);
                let seq = Seq { steps: nt, batch: nb, x: &[], tokens: Some(&tokens), s0, mask, emb: None, out_from: 0 };
                let mut ws = Workspace::default();
                let mut y = vec![0.0; nt * nb * h];
                wrap.forward(&w, &seq, &mut ws, &mut y);
                for (a, b) in y.iter().zip(&want_y) {
                    assert!((a - b).abs() < 1e-12, "{readout:?} given {given} masked {masked}: {a} vs {b}");
                }
                for (a, b) in ws.final_state().iter().zip(&want_h[(nt - 1) * nb * h..]) {
                    assert!((a - b).abs() < 1e-12);
                }
            }
        }
    }

    #[test]
    fn continuing_from_the_final_state_equals_one_long_run() {
        let mut rng = Rng::new(13);
        let (nt, t1, nb, nk, h) = (10, 3, 5, 4, 6);
        let cell = Cell::Linear(Linear { symbols: nk, hidden: h, readout: Act::Tanh });
        let w: Vec<f64> = (0..cell.param_len()).map(|_| rng.range(-0.5, 0.5)).collect();
        let tokens: Vec<u32> = (0..nt * nb).map(|_| rng.below(nk as u64) as u32).collect();
        let run = |toks: &[u32], steps: usize, s0: Option<&[f64]>| {
            let seq = Seq { steps, batch: nb, x: &[], tokens: Some(toks), s0, mask: None, emb: None, out_from: 0 };
            let mut ws = Workspace::default();
            let mut y = vec![0.0; steps * nb * h];
            cell.forward(&w, &seq, &mut ws, &mut y);
            (y, ws.final_state().to_vec())
        };
        let (y_all, s_all) = run(&tokens, nt, None);
        let (mut y, s1) = run(&tokens[..t1 * nb], t1, None);
        let (y2, s2) = run(&tokens[t1 * nb..], nt - t1, Some(&s1));
        y.extend_from_slice(&y2);
        assert_eq!(y, y_all);
        assert_eq!(s2, s_all);
    }
}
