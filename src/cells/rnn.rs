//! Simple (Elman) recurrent network, `torch.nn.RNN` semantics.
//!
//! ```text
//! h_t = φ(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh),   φ ∈ {tanh, relu}
//! y_t = h_t
//! ```
//! With `identity_init` (the IRNN of Le, Jaitly and Hinton: relu and a recurrent matrix that
//! starts as the identity) `weight_hh` is marked [`InitKind::Identity`]; the equations are the
//! same.
//!
//! The state is `h` (`[B, H]`, zeros at the start). A variational dropout mask, when given,
//! multiplies `h_{t-1}` before the recurrent GEMM.
//!
//! Flat parameter layout: `weight_ih [H, D]`, `weight_hh [H, H]`, `bias_ih [H]`, `bias_hh [H]`.
//!
//! Workspace use: `xp[t]` starts as `W_ih x_t + b_ih + b_hh` and the step's recurrent GEMM
//! accumulates into it, so it ends as the full pre-activation (no separate `rp` buffer);
//! backward writes over it the gradient of that pre-activation (`dxp`), which is also the
//! gradient of the recurrent projection. `st` holds `h` (backward takes `φ'` from it, so `act`
//! is empty); `rin[t] = mask ∘ h_{t-1}` with a dropout mask (without one the step's GEMM and
//! the recurrent weights' gradient read `h_{t-1}` from `st`: no copy of it written a step);
//! `ds` is the running gradient of `h`. `extra`, `tmp`, `dr` unused.

use super::{input_backward, masked_copy, Outputs, project_input_or_table, row_parts, step_rows, Shared, split, split_mut, Grads, InitKind, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::gemm::linear_dw;
use crate::kernels::num::{Act, Float, Squash};

#[derive(Clone, Debug, PartialEq)]
pub struct Rnn {
    pub input: usize,
    pub hidden: usize,
    /// `φ`: [`Act::Tanh`] or [`Act::Relu`]
    pub nonlinearity: Act,
    /// IRNN: initialise `weight_hh` to the identity
    pub identity_init: bool,
}

impl Rnn {
    fn lens(&self) -> [usize; 4] {
        let (d, h) = (self.input, self.hidden);
        [h * d, h * h, h, h]
    }
}

/// The GPU twin (`rnn.wgsl`): the recurrent GEMM accumulating into the pre-activation.
#[cfg(feature = "gpu")]
impl Rnn {
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        let (d, h) = (self.input, self.hidden);
        let [wih, whh, bih, _] = self.lens();
        let opts = match self.nonlinearity {
            Act::Relu => 1,
            Act::Tanh => 0,
            other => anyhow::bail!("the RNN's nonlinearity {} does not run on the GPU", other.name()),
        };
        let source = concat!(include_str!("rnn.wgsl"), include_str!("plain_start.wgsl"));
        Ok(super::gpu::GpuCell {
            inputs: vec![super::gpu::InputBlock { col: 0, rows: h, w: 0, ld: d, biases: vec![wih + whh, wih + whh + bih] }],
            w_rec: wih,
            opts,
            ..super::gpu::GpuCell::square("rnn", source, d, h)
        })
    }
}

impl Recurrent for Rnn {
    fn sizes(&self) -> Sizes {
        let h = self.hidden;
        Sizes { input: self.input, hidden: h, output: h, state: h, rec: h }
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let (d, h) = (self.input, self.hidden);
        let whh = if self.identity_init { InitKind::Identity } else { InitKind::Weight { fan_in: h, fan_out: h } };
        vec![
            TensorSpec::new("weight_ih", &[h, d], InitKind::Weight { fan_in: d, fan_out: h }),
            TensorSpec::new("weight_hh", &[h, h], whh),
            TensorSpec::new("bias_ih", &[h], InitKind::Bias),
            TensorSpec::new("bias_hh", &[h], InitKind::Bias),
        ]
    }

    fn ws_dims(&self, _thin: bool) -> WsDims {
        let h = self.hidden;
        WsDims { xp: h, state: h, rin: h, ..Default::default() }
    }

    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        let (d, h, phi) = (self.input, self.hidden, self.nonlinearity);
        let (nt, nb) = (seq.steps, seq.batch);
        let [wih, whh, bih, bhh] = split(w, &self.lens())[..] else { unreachable!() };

        let from_table = project_input_or_table(seq, (d, h), (wih, d, true), &[bih, bhh], (&mut ws.xp, h), &mut ws.tok, true);
        ws.begin_forward(seq.s0);
        ws.pk[0].pack_linear(whh, h, h);

        let (pk, mask) = (&ws.pk, seq.mask);
        // With an embedding, each step's rows come from the per-symbol table (as the LSTM's).
        let table = from_table.then(|| (&ws.tok[..], seq.tokens.expect("an embedding has its tokens")));
        let (xp, st, rin_all, yy) = (Shared::new(&mut ws.xp), Shared::new(&mut ws.st), Shared::new(&mut ws.rin), Outputs::new(y, &mut ws.y_scratch, seq, h));
        row_parts(nb, |p| {
            let m = p.len();
            for t in 0..nt {
                // SAFETY (every `at`): each part reads and writes only its own batch rows of
                // each step, inside the buffers sized for (T, B).
                let h_prev = unsafe { st.at(p.at(t, h)) };
                let rin: &[T] = match mask {
                    Some(mk) => {
                        let rin = unsafe { rin_all.at(p.at(t, h)) };
                        masked_copy(rin, h_prev, Some(&mk[p.block(0, h)]));
                        rin
                    }
                    // Without a mask the recurrent input is h_{t-1} itself, read where it is.
                    None => h_prev,
                };
                let a = unsafe { xp.at(p.at(t, h)) };
                if let Some((table, tokens)) = table {
                    step_rows(table, h, &tokens[p.at(t, 1)], a);
                }
                pk[0].gemm_serial(0, m, rin, h, a, h, true);
                let h_next = unsafe { st.at(p.at(t + 1, h)) };
                crate::with_act!(phi, s => apply(s, a, h_next));
                if yy.read(t) {
                    unsafe { yy.rows(&p, t) }.copy_from_slice(h_next);
                }
            }
        });
    }

    fn backward<T: Float>(&self, w: &[T], gr: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        let (d, h, phi) = (self.input, self.hidden, self.nonlinearity);
        let (nt, nb) = (seq.steps, seq.batch);
        let [wih, whh, _, _] = split(w, &self.lens())[..] else { unreachable!() };
        let [gwih, gwhh, gbih, gbhh] = &mut split_mut(gr, &self.lens())[..] else { unreachable!() };

        // ds = ∂L/∂h_t through the later steps and the final state.
        ws.begin_backward(grads.ds_final);
        ws.pk[0].pack_linear_dx(whh, h, h);

        let (pk, mask, dy_all, st) = (&ws.pk, seq.mask, grads.dy, &ws.st);
        let (dxp, ds_all) = (Shared::new(&mut ws.xp), Shared::new(&mut ws.ds));
        row_parts(nb, |p| {
            let m = p.len();
            // SAFETY (every `at`): each part reads and writes only its own batch rows.
            let ds = unsafe { ds_all.at(p.block(0, h)) };
            for t in (0..nt).rev() {
                let (dy, h_t) = (&dy_all[p.at(t, h)], &st[p.at(t + 1, h)]);
                let da = unsafe { dxp.at(p.at(t, h)) };
                crate::with_act!(phi, s => apply_backward(s, h_t, dy, ds, da));
                // h_{t-1} reaches the loss only through this step's recurrent GEMM.
                pk[0].gemm_serial(0, m, da, h, ds, h, false);
                if let Some(mk) = mask {
                    ds.iter_mut().zip(&mk[p.block(0, h)]).for_each(|(v, &mv)| *v *= mv);
                }
            }
        });
        if let Some(ds0) = grads.ds0 {
            ds0.copy_from_slice(&ws.ds);
        }

        // Weight gradients: one GEMM each over all T·B rows.
        let m = nt * nb;
        input_backward(seq, (d, h), &ws.xp, (wih, gwih), &mut [&mut gbih[..], &mut gbhh[..]], grads.dx, &mut ws.tok);
        let rin = if seq.mask.is_some() { &ws.rin[..] } else { &ws.st[..m * h] };
        linear_dw(m, h, h, &ws.xp, rin, gwhh);
    }
}

/// `h = φ(a)` over one step's rows; a function of its own so that the loop vectorises.
#[inline(never)]
fn apply<T: Float>(phi: impl Squash, a: &[T], h: &mut [T]) {
    h.iter_mut().zip(a).for_each(|(o, &v)| *o = phi.f(v));
}

/// `da = (ds + dy) ∘ φ'(a)`, with φ' read from the output `h`.
#[inline(never)]
fn apply_backward<T: Float>(phi: impl Squash, h: &[T], dy: &[T], ds: &[T], da: &mut [T]) {
    for (((o, &hv), &dyv), &dsv) in da.iter_mut().zip(h).zip(dy).zip(ds) {
        *o = (dsv + dyv) * phi.df_from_y(hv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::Cell;

    #[test]
    fn parameter_counts_match_the_papers() {
        // Later RAN paper, table 1: input 256, hidden 1024.
        let cell = Cell::Rnn(Rnn { input: 256, hidden: 1024, nonlinearity: Act::Tanh, identity_init: false });
        assert_eq!(cell.param_len(), 1_312_768);
    }

    #[test]
    fn identity_init_marks_the_recurrent_matrix() {
        let cell = Rnn { input: 3, hidden: 4, nonlinearity: Act::Relu, identity_init: true };
        let t = cell.tensors();
        assert_eq!(t[1].name, "weight_hh");
        assert_eq!(t[1].init, InitKind::Identity);
    }
}
