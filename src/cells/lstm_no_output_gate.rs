//! LSTM without its output gate: the first RAN paper's section 4.2, first step ("Simplifying
//! the Output Layer"), with the output function `g` that the paper abstracts kept as the
//! LSTM's `tanh`.
//!
//! ```text
//! c~_t = tanh(W_ch r_{t-1} + W_cx x_t + b_c)
//! i_t  = σ(W_ih r_{t-1} + W_ix x_t + b_i)
//! f_t  = σ(W_fh r_{t-1} + W_fx x_t + b_f)
//! c_t  = i_t ∘ c~_t + f_t ∘ c_{t-1}
//! h_t  = tanh(c_t)
//! y_t  = h_t
//! ```
//! The recurrent input is `r_{t-1} = h_{t-1} = tanh(c_{t-1})`; a variational dropout mask, when
//! given, multiplies it before the recurrent GEMM.
//!
//! The state is `c` alone (`[B, H]`, zeros at the start): `h` is a function of `c`, so
//! `h_{-1} = tanh(c_{-1})` is taken from the initial state.
//!
//! Flat parameter layout (so that one GEMM covers each group):
//! `[W_cx; W_ix; W_fx] [3H, D]`, `[b_c; b_i; b_f] [3H]`, `[W_ch; W_ih; W_fh] [3H, H]`.
//!
//! Workspace use: `xp[t]` starts as `[W_cx; W_ix; W_fx] x_t + [b_c; b_i; b_f]` and the step's
//! recurrent GEMM accumulates into it, so it ends as the three pre-activations (no separate
//! `rp`); the step's pointwise pass replaces them by `[c~ | i | f]`, which backward replaces by
//! the pre-activations' gradient (as the LSTM's gates: no `act` tape, no `dxp` buffer), which
//! serves for both weight groups and the biases. `st` holds `c`; backward computes `h_t =
//! tanh(c_t)` again from it (forward's function: forward's bits), so `h` is written once, to the
//! output. `rin[t] = mask ∘ h_{t-1}`. `ds` is the running gradient of `c`, `dr` that of `r` (the
//! recurrent input of the current step). `rp`, `drp`, `extra` and `tmp` are unused.

use super::{Outputs, input_backward, masked_copy, project_input, row_parts, Shared, split, split_mut, Grads, InitKind, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::gemm::linear_dw;
use crate::kernels::num::Float;

#[derive(Clone, Debug, PartialEq)]
pub struct LstmNoOutputGate {
    pub input: usize,
    pub hidden: usize,
}

impl LstmNoOutputGate {
    fn lens(&self) -> [usize; 3] {
        let (d, h) = (self.input, self.hidden);
        [3 * h * d, 3 * h, 3 * h * h]
    }

    /// The GPU description: the input weights `[3H, D]` as one block, the recurrent GEMM adding
    /// into all three pre-activations, the state `c`.
    #[cfg(feature = "gpu")]
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        let (d, h) = (self.input, self.hidden);
        let [wx, b, _] = self.lens();
        Ok(super::gpu::GpuCell {
            name: "lstm_no_output_gate",
            source: include_str!("lstm_no_output_gate.wgsl"),
            input: d,
            hidden: h,
            xp: 3 * h,
            rec_width: 3 * h,
            rin: h,
            state: h,
            out: h,
            inputs: vec![super::gpu::InputBlock { col: 0, rows: 3 * h, w: 0, ld: d, biases: vec![wx] }],
            w_rec: wx + b,
            rec_ld: h,
            threads: h,
            ..Default::default()
        })
    }
}

impl Recurrent for LstmNoOutputGate {
    fn sizes(&self) -> Sizes {
        let h = self.hidden;
        Sizes { input: self.input, hidden: h, output: h, state: h, rec: h }
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let (d, h) = (self.input, self.hidden);
        let wx = InitKind::Weight { fan_in: d, fan_out: h };
        let wh = InitKind::Weight { fan_in: h, fan_out: h };
        vec![
            TensorSpec::new("W_cx", &[h, d], wx),
            TensorSpec::new("W_ix", &[h, d], wx),
            TensorSpec::new("W_fx", &[h, d], wx),
            TensorSpec::new("b_c", &[h], InitKind::Bias),
            TensorSpec::new("b_i", &[h], InitKind::Bias),
            TensorSpec::new("b_f", &[h], InitKind::GateBias),
            TensorSpec::new("W_ch", &[h, h], wh),
            TensorSpec::new("W_ih", &[h, h], wh),
            TensorSpec::new("W_fh", &[h, h], wh),
        ]
    }

    fn ws_dims(&self, _thin: bool) -> WsDims {
        let h = self.hidden;
        WsDims { xp: 3 * h, state: h, rin: h, ..Default::default() }
    }

    /// `c`, the content `c~` and the gates `i` and `f`.
    fn trace<T: Float>(&self, ws: &Workspace<T>) -> Vec<super::Trace<T>> {
        let h = self.hidden;
        let mut t = vec![ws.trace_state("c", 0..h)];
        // After a forward `xp` holds `[c~ | i | f]`.
        t.extend(["content", "i", "f"].iter().enumerate().map(|(k, &name)| ws.trace(name, &ws.xp, 3 * h, k * h..(k + 1) * h)));
        t
    }

    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        let (d, h) = (self.input, self.hidden);
        let (nt, nb) = (seq.steps, seq.batch);
        let [wx, b, wh] = split(w, &self.lens())[..] else { unreachable!() };

        project_input(seq, (d, 3 * h), (wx, d, true), &[b], (&mut ws.xp, 3 * h), &mut ws.tok);
        ws.begin_forward(seq.s0);
        ws.pk[0].pack_linear(wh, 3 * h, h);

        // r_{-1} = tanh(c_{-1}), from the initial state.
        {
            let rin0 = &mut ws.rin[..nb * h];
            rin0.iter_mut().zip(&ws.st[..nb * h]).for_each(|(o, &c)| *o = c.tanh_fast());
            if let Some(m) = seq.mask {
                rin0.iter_mut().zip(m).for_each(|(v, &mv)| *v *= mv);
            }
        }

        let (pk, mask) = (&ws.pk, seq.mask);
        let (xp, st, rin_all, yy) = (Shared::new(&mut ws.xp), Shared::new(&mut ws.st), Shared::new(&mut ws.rin), Outputs::new(y, &mut ws.y_scratch, seq, h));
        row_parts(nb, |p| {
            let m = p.len();
            for t in 0..nt {
                // SAFETY (every `at`): each part reads and writes only its own batch rows of
                // each step, inside the buffers sized for (T, B).
                let a = unsafe { xp.at(p.at(t, 3 * h)) };
                pk[0].gemm_serial(0, m, unsafe { rin_all.at(p.at(t, h)) }, h, a, 3 * h, true);
                let (c_prev, c_next) = unsafe { (st.at(p.at(t, h)), st.at(p.at(t + 1, h))) };
                let y_t = unsafe { yy.rows(&p, t) };
                for bi in 0..m {
                    let a = &mut a[bi * 3 * h..(bi + 1) * 3 * h];
                    let (cp, cn) = (&c_prev[bi * h..(bi + 1) * h], &mut c_next[bi * h..(bi + 1) * h]);
                    forward_row(a, cp, cn, &mut y_t[bi * h..(bi + 1) * h]);
                }
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
        let [wx, _, wh] = split(w, &self.lens())[..] else { unreachable!() };
        let [gwx, gb, gwh] = &mut split_mut(gr, &self.lens())[..] else { unreachable!() };

        // ds: gradient of c_t through later steps and the final state; dr: gradient of h_t
        // through the next step's recurrent GEMM (mask applied).
        ws.begin_backward(grads.ds_final);
        ws.pk[0].pack_linear_dx(wh, 3 * h, h);

        let (pk, mask, dy_all, st) = (&ws.pk, seq.mask, grads.dy, &ws.st);
        let (gates, ds_all, dr_all) = (Shared::new(&mut ws.xp), Shared::new(&mut ws.ds), Shared::new(&mut ws.dr));
        row_parts(nb, |p| {
            let m = p.len();
            // SAFETY (every `at`): each part reads and writes only its own batch rows.
            let (ds_p, dr_p) = unsafe { (ds_all.at(p.block(0, h)), dr_all.at(p.block(0, h))) };
            for t in (0..nt).rev() {
                let (dy, c_prev, c_t) = (&dy_all[p.at(t, h)], &st[p.at(t, h)], &st[p.at(t + 1, h)]);
                // The gates in, their pre-activations' gradient out.
                let da = unsafe { gates.at(p.at(t, 3 * h)) };
                for bi in 0..m {
                    let da = &mut da[bi * 3 * h..(bi + 1) * 3 * h];
                    let ds = &mut ds_p[bi * h..(bi + 1) * h];
                    let (dy, dr) = (&dy[bi * h..(bi + 1) * h], &dr_p[bi * h..(bi + 1) * h]);
                    let (cp, cn) = (&c_prev[bi * h..(bi + 1) * h], &c_t[bi * h..(bi + 1) * h]);
                    backward_row(da, [cp, cn], dy, dr, ds);
                }
                // Gradient with respect to r_{t-1}, then through the mask to h_{t-1}.
                pk[0].gemm_serial(0, m, da, 3 * h, dr_p, h, false);
                if let Some(mk) = mask {
                    dr_p.iter_mut().zip(&mk[p.block(0, h)]).for_each(|(v, &mv)| *v *= mv);
                }
            }
        });

        // h_{-1} = tanh(c_{-1}) was taken from the initial state.
        for ((o, &v), &c) in ws.ds.iter_mut().zip(&ws.dr).zip(&ws.st[..nb * h]) {
            let hv = c.tanh_fast();
            *o += v * (T::one() - hv * hv);
        }
        if let Some(ds0) = grads.ds0 {
            ds0.copy_from_slice(&ws.ds);
        }

        // Weight gradients: one GEMM each over all T·B rows.
        let m = nt * nb;
        input_backward(seq, (d, 3 * h), &ws.xp, (wx, gwx), &mut [&mut gb[..]], grads.dx, &mut ws.tok);
        linear_dw(m, 3 * h, h, &ws.xp, &ws.rin, gwh);
    }
}

/// One row at one step: the pre-activations `a = [c~ | i | f]` replaced by the content and the
/// gates, `c_t` (`cn`) from `c_{t-1}` (`cp`), and `h_t = tanh(c_t)` to the output `ho`. A
/// function of its own, the blocks split apart, so that the compiler knows the slices do not
/// overlap and are in bounds, and vectorises the loop.
#[inline(never)]
fn forward_row<T: Float>(a: &mut [T], cp: &[T], cn: &mut [T], ho: &mut [T]) {
    let h = cn.len();
    let (g, rest) = a.split_at_mut(h);
    let (i, f) = rest.split_at_mut(h);
    assert!(i.len() == h && f.len() == h && cp.len() == h && ho.len() == h);
    for j in 0..h {
        let (gv, iv, fv) = (g[j].tanh_fast(), i[j].sigmoid(), f[j].sigmoid());
        let c = iv * gv + fv * cp[j];
        cn[j] = c;
        g[j] = gv;
        i[j] = iv;
        f[j] = fv;
        ho[j] = c.tanh_fast();
    }
}

/// The backward of [`forward_row`]: the content and gates in `da` replaced by the gradients of
/// their pre-activations, from `dy + dr` (∂L/∂h_t from above and from the next step) and the
/// running ∂L/∂c_t in `ds` (replaced by ∂L/∂c_{t-1}); `h_t = tanh(c_t)` computed again as
/// forward computed it.
#[inline(never)]
fn backward_row<T: Float>(da: &mut [T], [cp, cn]: [&[T]; 2], dy: &[T], dr: &[T], ds: &mut [T]) {
    let h = ds.len();
    let (dg, rest) = da.split_at_mut(h);
    let (di, df) = rest.split_at_mut(h);
    assert!(di.len() == h && df.len() == h && cp.len() == h && cn.len() == h && dy.len() == h && dr.len() == h);
    let one = T::one();
    for j in 0..h {
        let (g, i, f, hv) = (dg[j], di[j], df[j], cn[j].tanh_fast());
        let dc = ds[j] + (dy[j] + dr[j]) * (one - hv * hv);
        dg[j] = dc * i * (one - g * g);
        di[j] = dc * g * i * (one - i);
        df[j] = dc * cp[j] * f * (one - f);
        ds[j] = dc * f;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::Cell;

    #[test]
    fn parameter_counts() {
        let count = |input, hidden| Cell::LstmNoOutputGate(LstmNoOutputGate { input, hidden }).param_len();
        // Three blocks (content, input gate, forget gate) of W_*x, W_*h and one bias each.
        // At the later paper's sizes (d_i = 256, d_h = 1024): 3·(1024·256 + 1024² + 1024).
        // Neither paper reports this model's count (the later paper's table 2 has no such
        // column; the first paper reports no ablation numbers).
        assert_eq!(count(256, 1024), 3_935_232);
        // First paper, PTB medium and large sizes (two layers, input = hidden).
        assert_eq!(2 * count(650, 650), 5_073_900);
        assert_eq!(2 * count(1500, 1500), 27_009_000);
    }

    #[test]
    fn state_is_c_alone() {
        let cell = LstmNoOutputGate { input: 3, hidden: 4 };
        let s = cell.sizes();
        assert_eq!((s.output, s.rec, s.state), (4, 4, 4));
        let names: Vec<_> = cell.tensors().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["W_cx", "W_ix", "W_fx", "b_c", "b_i", "b_f", "W_ch", "W_ih", "W_fh"]);
    }
}
