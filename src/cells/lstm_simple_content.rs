//! LSTM with the RAN's simplified content layer: the later RAN paper's equation (5), the first
//! step (a → b) of its LSTM-to-RAN ablation chain ("Simplified Content Layer", table 2).
//!
//! ```text
//! c~_t = W_cx x_t + b_c                          (no recurrence, no nonlinearity)
//! i_t  = σ(W_ih r_{t-1} + W_ix x_t + b_i)
//! f_t  = σ(W_fh r_{t-1} + W_fx x_t + b_f)
//! o_t  = σ(W_oh r_{t-1} + W_ox x_t + b_o)
//! c_t  = i_t ∘ c~_t + f_t ∘ c_{t-1}
//! h_t  = o_t ∘ tanh(c_t)
//! y_t  = h_t
//! ```
//! The paper writes the equations without biases and states (footnote 2) that every `W x` term
//! carries one; so there is one bias per gate and one for the content layer. The recurrent
//! input is `r_{t-1} = h_{t-1}`; a variational dropout mask, when given, multiplies it before
//! the recurrent GEMM.
//!
//! The state is `[h | c]` as two `[B, H]` blocks, `h` first (`S = 2H`), zeros at the start.
//! Both blocks of a given initial state are read and both receive gradients.
//!
//! Flat parameter layout (so that one GEMM covers each group):
//! `[W_cx; W_ix; W_fx; W_ox] [4H, D]`, `[b_c; b_i; b_f; b_o] [4H]`, `[W_ih; W_fh; W_oh] [3H, H]`.
//!
//! Workspace use: `xp[t]` starts as `[c~ | x-part of i | x-part of f | x-part of o]` (biases
//! included) and the step's recurrent GEMM accumulates into its last `3H` columns, so it ends as
//! `[c~ | three gate pre-activations]` (no separate `rp`); backward writes over them their
//! gradient (`dxp`), which serves for the input weights, the biases and (its last `3H`
//! columns) the recurrent weights. `act[t] = [i | f | o | tanh c]`; `st[t]` is the state
//! `[h | c]` before step `t`; `rin[t] = mask ∘ h_{t-1}`. `ds` is the running state gradient
//! `[dh | dc]`. `rp`, `drp`, `extra`, `tmp` and `dr` are unused.

use super::{Outputs, input_backward, masked_copy, project_input, row_parts, Shared, split, split_mut, Grads, InitKind, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::gemm::gemm;
use crate::kernels::num::Float;

#[derive(Clone, Debug, PartialEq)]
pub struct LstmSimpleContent {
    pub input: usize,
    pub hidden: usize,
}

impl LstmSimpleContent {
    fn lens(&self) -> [usize; 3] {
        let (d, h) = (self.input, self.hidden);
        [4 * h * d, 4 * h, 3 * h * h]
    }

    /// The GPU description: the input weights `[4H, D]` as one block, the recurrent GEMM adding
    /// into the gates' `3H` pre-activations (not the content's), the state `[h | c]`.
    #[cfg(feature = "gpu")]
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        let (d, h) = (self.input, self.hidden);
        let [wx, b, _] = self.lens();
        Ok(super::gpu::GpuCell {
            name: "lstm_simple_content",
            source: concat!(include_str!("lstm_simple_content.wgsl"), include_str!("plain_start.wgsl")),
            input: d,
            hidden: h,
            xp: 4 * h,
            rec_col: h,
            rec_width: 3 * h,
            rin: h,
            state: 2 * h,
            out: h,
            inputs: vec![super::gpu::InputBlock { col: 0, rows: 4 * h, w: 0, ld: d, biases: vec![wx] }],
            w_rec: wx + b,
            rec_ld: h,
            threads: h,
            ..Default::default()
        })
    }
}

impl Recurrent for LstmSimpleContent {
    fn sizes(&self) -> Sizes {
        let h = self.hidden;
        Sizes { input: self.input, hidden: h, output: h, state: 2 * h, rec: h }
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let (d, h) = (self.input, self.hidden);
        let wx = InitKind::Weight { fan_in: d, fan_out: h };
        let wh = InitKind::Weight { fan_in: h, fan_out: h };
        vec![
            TensorSpec::new("W_cx", &[h, d], wx),
            TensorSpec::new("W_ix", &[h, d], wx),
            TensorSpec::new("W_fx", &[h, d], wx),
            TensorSpec::new("W_ox", &[h, d], wx),
            TensorSpec::new("b_c", &[h], InitKind::Bias),
            TensorSpec::new("b_i", &[h], InitKind::Bias),
            TensorSpec::new("b_f", &[h], InitKind::GateBias),
            TensorSpec::new("b_o", &[h], InitKind::Bias),
            TensorSpec::new("W_ih", &[h, h], wh),
            TensorSpec::new("W_fh", &[h, h], wh),
            TensorSpec::new("W_oh", &[h, h], wh),
        ]
    }

    fn ws_dims(&self, _thin: bool) -> WsDims {
        let h = self.hidden;
        WsDims { xp: 4 * h, act: 4 * h, state: 2 * h, rin: h, ..Default::default() }
    }

    /// `c`, the content `c~` and the gates `i`, `f` and `o`.
    fn trace<T: Float>(&self, ws: &Workspace<T>) -> Vec<super::Trace<T>> {
        let h = self.hidden;
        let mut t = vec![ws.trace_state("c", h..2 * h), ws.trace("content", &ws.xp, 4 * h, 0..h)];
        t.extend(["i", "f", "o"].iter().enumerate().map(|(k, &name)| ws.trace(name, &ws.act, 4 * h, k * h..(k + 1) * h)));
        t
    }

    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        let (d, h) = (self.input, self.hidden);
        let (nt, nb) = (seq.steps, seq.batch);
        let ns = nb * 2 * h;
        let [wx, b, wh] = split(w, &self.lens())[..] else { unreachable!() };

        project_input(seq, (d, 4 * h), (wx, d, true), &[b], (&mut ws.xp, 4 * h), &mut ws.tok);
        ws.begin_forward(seq.s0);
        ws.pk[0].pack_linear(wh, 3 * h, h);

        // r_{-1}: the h block of the initial state.
        ws.rin[..nb * h].copy_from_slice(&ws.st[..nb * h]);
        if let Some(m) = seq.mask {
            ws.rin[..nb * h].iter_mut().zip(m).for_each(|(v, &mv)| *v *= mv);
        }

        let (pk, mask) = (&ws.pk, seq.mask);
        let (xp, st, act_all, rin_all, yy) = (Shared::new(&mut ws.xp), Shared::new(&mut ws.st), Shared::new(&mut ws.act), Shared::new(&mut ws.rin), Outputs::new(y, &mut ws.y_scratch, seq, h));
        row_parts(nb, |p| {
            let m = p.len();
            for t in 0..nt {
                // SAFETY (every `at`): each part reads and writes only its own batch rows of
                // each step, inside the buffers sized for (T, B).
                let a = unsafe { xp.at(p.at(t, 4 * h)) };
                // Gate pre-activations (columns H..4H) += r_{t-1} [W_ih; W_fh; W_oh]ᵀ.
                pk[0].gemm_serial(0, m, unsafe { rin_all.at(p.at(t, h)) }, h, &mut a[h..], 4 * h, true);
                let c_prev = unsafe { st.at(p.block(t * ns + nb * h, h)) };
                let c_next = unsafe { st.at(p.block((t + 1) * ns + nb * h, h)) };
                let h_state = unsafe { st.at(p.block((t + 1) * ns, h)) };
                let act = unsafe { act_all.at(p.at(t, 4 * h)) };
                let y_t = unsafe { yy.rows(&p, t) };
                for bi in 0..m {
                    let a = &a[bi * 4 * h..(bi + 1) * 4 * h];
                    let act = &mut act[bi * 4 * h..(bi + 1) * 4 * h];
                    let (cp, cn) = (&c_prev[bi * h..(bi + 1) * h], &mut c_next[bi * h..(bi + 1) * h]);
                    forward_row(a, act, cp, cn, &mut y_t[bi * h..(bi + 1) * h]);
                }
                h_state.copy_from_slice(y_t);
                if t + 1 < nt {
                    let rin = unsafe { rin_all.at(p.at(t + 1, h)) };
                    masked_copy(rin, y_t, mask.map(|mk| &mk[p.block(0, h)]));
                }
            }
        });
    }

    fn backward<T: Float>(&self, w: &[T], gr: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        let (d, h) = (self.input, self.hidden);
        let (nt, nb) = (seq.steps, seq.batch);
        let ns = nb * 2 * h;
        let [wx, _, wh] = split(w, &self.lens())[..] else { unreachable!() };
        let [gwx, gb, gwh] = &mut split_mut(gr, &self.lens())[..] else { unreachable!() };

        // ds = [dh | dc]: gradients of h_t (through the next step's GEMM and the final state)
        // and of c_t (through the next step's carry and the final state).
        ws.begin_backward(grads.ds_final);
        ws.pk[0].pack_linear_dx(wh, 3 * h, h);

        let (pk, mask, dy_all, act_all, st) = (&ws.pk, seq.mask, grads.dy, &ws.act, &ws.st);
        // The pre-activations in `xp`, their gradients written over them.
        let (xp_all, ds_all) = (Shared::new(&mut ws.xp), Shared::new(&mut ws.ds));
        row_parts(nb, |p| {
            let m = p.len();
            // SAFETY (every `at`): each part reads and writes only its own batch rows.
            let (dh_rec, dc_run) = unsafe { (ds_all.at(p.block(0, h)), ds_all.at(p.block(nb * h, h))) };
            for t in (0..nt).rev() {
                let (dy, act) = (&dy_all[p.at(t, h)], &act_all[p.at(t, 4 * h)]);
                let c_prev = &st[p.block(t * ns + nb * h, h)];
                let da = unsafe { xp_all.at(p.at(t, 4 * h)) };
                for bi in 0..m {
                    let (da, act) = (&mut da[bi * 4 * h..(bi + 1) * 4 * h], &act[bi * 4 * h..(bi + 1) * 4 * h]);
                    let (cp, dc_run) = (&c_prev[bi * h..(bi + 1) * h], &mut dc_run[bi * h..(bi + 1) * h]);
                    let (dy, dh_rec) = (&dy[bi * h..(bi + 1) * h], &dh_rec[bi * h..(bi + 1) * h]);
                    backward_row(da, act, cp, [dy, dh_rec], dc_run);
                }
                // h_{t-1} reaches the loss only through this step's recurrent GEMM.
                pk[0].gemm_serial(0, m, &da[h..], 4 * h, dh_rec, h, false);
                if let Some(mk) = mask {
                    dh_rec.iter_mut().zip(&mk[p.block(0, h)]).for_each(|(v, &mv)| *v *= mv);
                }
            }
        });
        if let Some(ds0) = grads.ds0 {
            ds0.copy_from_slice(&ws.ds);
        }

        // Weight gradients: one GEMM each over all T·B rows.
        let m = nt * nb;
        input_backward(seq, (d, 4 * h), &ws.xp, (wx, gwx), &mut [&mut gb[..]], grads.dx, &mut ws.tok);
        // d[W_ih; W_fh; W_oh] += Σ_t da_t[H..4H]ᵀ r_{t-1}, read in place (row stride 4H).
        gemm(3 * h, h, m, &ws.xp[h..], 4 * h, true, &ws.rin, h, false, gwh, h, true);
    }
}

/// One row at one step: from the pre-activations `a = [c~ | i | f | o]` (the content taken as
/// it is) and `c_{t-1}` (`cp`), `c_t` (`cn`), the tape `act = [i | f | o | tanh c_t]` and `h_t`
/// to the output `ho`. A function of its own, with the lengths asserted, so that the compiler
/// knows the slices do not overlap and are in bounds, and vectorises the loop.
#[inline(never)]
fn forward_row<T: Float>(a: &[T], act: &mut [T], cp: &[T], cn: &mut [T], ho: &mut [T]) {
    let h = cn.len();
    assert!(a.len() == 4 * h && act.len() == 4 * h && cp.len() == h && ho.len() == h);
    for j in 0..h {
        let i = a[h + j].sigmoid();
        let f = a[2 * h + j].sigmoid();
        let o = a[3 * h + j].sigmoid();
        let c = i * a[j] + f * cp[j];
        let tc = c.tanh_fast();
        cn[j] = c;
        act[j] = i;
        act[h + j] = f;
        act[2 * h + j] = o;
        act[3 * h + j] = tc;
        ho[j] = o * tc;
    }
}

/// The backward of [`forward_row`]: the gradients of the pre-activations, written over them in
/// `da` (only the content is read), from `dy + dh_rec` (∂L/∂h_t from above and through the next
/// step) and the running ∂L/∂c_t (`dc_run`, replaced by ∂L/∂c_{t-1}).
#[inline(never)]
fn backward_row<T: Float>(da: &mut [T], act: &[T], cp: &[T], [dy, dh_rec]: [&[T]; 2], dc_run: &mut [T]) {
    let h = dc_run.len();
    assert!(act.len() == 4 * h && da.len() == 4 * h && cp.len() == h && dy.len() == h && dh_rec.len() == h);
    let one = T::one();
    for j in 0..h {
        let dh = dy[j] + dh_rec[j];
        let (i, f, o, tc) = (act[j], act[h + j], act[2 * h + j], act[3 * h + j]);
        let dc = dc_run[j] + dh * o * (one - tc * tc);
        let content = da[j];
        da[j] = dc * i;
        da[h + j] = dc * content * i * (one - i);
        da[2 * h + j] = dc * cp[j] * f * (one - f);
        da[3 * h + j] = dh * tc * o * (one - o);
        dc_run[j] = dc * f;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::Cell;

    #[test]
    fn parameter_count_matches_the_later_paper() {
        // Later RAN paper, table 2, "Simplified Content Layer" at d_i = 256, d_h = 1024: 4.20M.
        // W_cx and three gates with one bias each: 1024·256 + 3·(1024·256 + 1024²) + 4·1024.
        let n = Cell::LstmSimpleContent(LstmSimpleContent { input: 256, hidden: 1024 }).param_len();
        assert_eq!(n, 4_198_400);
        assert_eq!((n as f64 / 1e4).round() / 100.0, 4.20);
    }

    #[test]
    fn state_is_h_block_then_c_block() {
        let cell = LstmSimpleContent { input: 3, hidden: 4 };
        let s = cell.sizes();
        assert_eq!((s.output, s.rec, s.state), (4, 4, 8));
        let names: Vec<_> = cell.tensors().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["W_cx", "W_ix", "W_fx", "W_ox", "b_c", "b_i", "b_f", "b_o", "W_ih", "W_fh", "W_oh"]);
    }
}
