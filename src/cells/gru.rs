//! Gated recurrent unit, `torch.nn.GRU` semantics (rows r, z, n; two biases).
//!
//! ```text
//! r_t = σ(W_ir x_t + b_ir + W_hr h̃_{t-1} + b_hr)
//! z_t = σ(W_iz x_t + b_iz + W_hz h̃_{t-1} + b_hz)
//! n_t = tanh(W_in x_t + b_in + r_t ∘ (W_hn h̃_{t-1} + b_hn))     reset_after (PyTorch's form)
//! n_t = tanh(W_in x_t + b_in + W_hn (r_t ∘ h̃_{t-1}) + b_hn)     original form of the papers
//! h_t = (1 − z_t) ∘ n_t + z_t ∘ h_{t-1}
//! y_t = h_t
//! ```
//! `h̃_{t-1} = mask ∘ h_{t-1}` is the recurrent input the GEMMs read: a variational dropout
//! mask, when given, applies to `h_{t-1}` where it enters the recurrent matrices, not to the
//! `z_t ∘ h_{t-1}` carry (without a mask `h̃ = h`).
//!
//! The state is `h` (`[B, H]`, zeros at the start).
//!
//! Flat parameter layout (torch's order): `weight_ih [3H, D]`, `weight_hh [3H, H]`,
//! `bias_ih [3H]`, `bias_hh [3H]`.
//!
//! Per step, `reset_after` needs one recurrent GEMM (all `3H` rows) and one pointwise pass.
//! The original form needs `r_t` before the candidate's GEMM can run, so a step is: GEMM on the
//! `r, z` rows, pointwise pass for the gates, GEMM of `W_hn` on `r ∘ h̃`, pointwise pass for
//! `n` and `h` (and the mirror image in backward).
//!
//! Workspace use: `xp[t] = W_ih x_t + b_ih` (`b_hh` is added in the pointwise pass, because
//! `b_hn` sits inside the reset in PyTorch's form); `rp` is one step's recurrent projection
//! `[B, 3H]` without bias (in the original form its last `H` columns are `W_hn (r ∘ h̃)`);
//! `act[t] = [r | z | n]`, plus `| W_hn h̃ + b_hn` with `reset_after`; `st` holds `h`;
//! `rin[t] = h̃_{t-1}`; original form only: `extra[t] = r_t ∘ h̃_{t-1}` and `tmp` is one `[B, H]`
//! scratch for the gradient of `r ∘ h̃`. In backward `dxp` (written over `xp`, which backward
//! no longer reads) and `drp` are the gradients of the input and recurrent parts of the
//! pre-activations (hence also of `bias_ih`/`bias_hh`), `ds` the
//! running gradient of `h`, `dr` that of `h̃_{t-1}`.
//!
//! With a narrow input (`rin_width`: at most `FOLD_MAX` features given as values: the tasks'
//! inputs, a `rnnlens.torch` layer's) `rin[t]` carries `[h̃_{t-1} | x_t | 1]` and the step's first GEMM, with the packed
//! `[W_h· | W_i· | b_i· + b_h·]`, gives r's and z's pre-activations whole (with reset-after
//! also `W_hn h̃ + b_hn`, its x-columns zero), so only the candidate's `W_in x + b_in` is
//! projected beforehand (`xp` is that block alone, `H` wide); backward writes r's and z's
//! gradients to `drp` alone, and one GEMM `drpᵀ · rin` gives those rows' weights and both
//! biases (as the LSTM's and the RDA's; docs/benchmarks.md, "The RDA's thin input in its step
//! product").

use super::{Outputs, fill_rin_rows, folds_input, pack_folded, input_backward, project_input, rin_width, row_parts, Shared, split, split_mut, Grads, InitKind, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::gemm::{add_col_sums, gemm, linear_dw_db_strided};
use crate::kernels::num::Float;

#[derive(Clone, Debug, PartialEq)]
pub struct Gru {
    pub input: usize,
    pub hidden: usize,
    /// PyTorch's form (reset applied after `W_hn`) when true, the papers' form when false
    pub reset_after: bool,
}

impl Gru {
    fn lens(&self) -> [usize; 4] {
        let (d, h) = (self.input, self.hidden);
        [3 * h * d, 3 * h * h, 3 * h, 3 * h]
    }
}

/// The GPU twin (`gru.wgsl`). PyTorch's form: the recurrent products (with `bias_hh`) kept
/// apart from the input's, since the reset multiplies the candidate's alone. The papers' form:
/// two recurrent GEMMs a step (`SecondRec`), as the CPU runs it.
#[cfg(feature = "gpu")]
impl Gru {
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        let (d, h) = (self.input, self.hidden);
        let [wih, whh, bih, _] = self.lens();
        if !self.reset_after {
            // The papers' form: the r, z rows' recurrent GEMM, the gates, then W_hn (r ∘ h̃) as
            // the step's second GEMM; every bias outside a product, so both are the input's.
            return Ok(super::gpu::GpuCell {
                name: "gru",
                source: concat!(include_str!("gru.wgsl"), include_str!("plain_start.wgsl")),
                input: d,
                hidden: h,
                xp: 3 * h,
                rec_width: 2 * h,
                rin: h,
                state: h,
                out: h,
                inputs: vec![super::gpu::InputBlock { col: 0, rows: 3 * h, w: 0, ld: d, biases: vec![wih + whh, wih + whh + bih] }],
                w_rec: wih,
                rec_ld: h,
                act: h,
                opts: 1,
                threads: h,
                second: Some(super::gpu::SecondRec { col: 2 * h, rows: h, w: wih + 2 * h * h, ld: h }),
                ..Default::default()
            });
        }
        Ok(super::gpu::GpuCell {
            name: "gru",
            source: concat!(include_str!("gru.wgsl"), include_str!("plain_start.wgsl")),
            input: d,
            hidden: h,
            xp: 3 * h,
            rec_width: 3 * h,
            rin: h,
            state: h,
            out: h,
            inputs: vec![super::gpu::InputBlock { col: 0, rows: 3 * h, w: 0, ld: d, biases: vec![wih + whh] }],
            w_rec: wih,
            rec_ld: h,
            rec_apart: Some(wih + whh + bih),
            threads: h,
            ..Default::default()
        })
    }
}

impl Recurrent for Gru {
    fn sizes(&self) -> Sizes {
        let h = self.hidden;
        Sizes { input: self.input, hidden: h, output: h, state: h, rec: h }
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let (d, h) = (self.input, self.hidden);
        // Fans are those of one gate's block, as for the RAN's separate gate matrices.
        vec![
            TensorSpec::new("weight_ih", &[3 * h, d], InitKind::Weight { fan_in: d, fan_out: h }),
            TensorSpec::new("weight_hh", &[3 * h, h], InitKind::Weight { fan_in: h, fan_out: h }),
            TensorSpec::new("bias_ih", &[3 * h], InitKind::Bias),
            TensorSpec::new("bias_hh", &[3 * h], InitKind::Bias),
        ]
    }

    fn ws_dims(&self, thin: bool) -> WsDims {
        let h = self.hidden;
        let orig = if self.reset_after { 0 } else { h };
        WsDims {
            // with a thin input r's and z's pre-activations come whole from the step's GEMM:
            // only the candidate's input part is projected beforehand
            xp: if thin { h } else { 3 * h },
            act: if self.reset_after { 4 * h } else { 3 * h },
            state: h,
            rin: rin_width(h, self.input),
            rp: 3 * h,
            extra: orig,
            tmp: orig,
            ..Default::default()
        }
    }

    /// The gates `r` and `z` and the candidate `n`.
    fn trace<T: Float>(&self, ws: &Workspace<T>) -> Vec<super::Trace<T>> {
        let h = self.hidden;
        let row = ws.dims.act;
        ["r", "z", "n"].iter().enumerate().map(|(k, &name)| ws.trace(name, &ws.act, row, k * h..(k + 1) * h)).collect()
    }

    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        let (d, h, ra) = (self.input, self.hidden, self.reset_after);
        let (nt, nb) = (seq.steps, seq.batch);
        let aw = ws.dims.act;
        let [wih, whh, bih, bhh] = split(w, &self.lens())[..] else { unreachable!() };
        let whn = &whh[2 * h * h..];

        let (ri, fold, xw) = (ws.dims.rin, folds_input(seq, d), ws.dims.xp);
        // The rows of W_hh in the step's first GEMM: all three with reset-after, else r and z.
        let rows = if ra { 3 * h } else { 2 * h };
        if fold {
            // A thin input rides in `rin` as `[h̃ | x | 1]`: the first GEMM gives r's and z's
            // pre-activations whole from the packed `[W_h· | W_i· | b_i· + b_h·]` (and with
            // reset-after the candidate's `W_hn h̃ + b_hn`, its x-columns zero); only the
            // candidate's input part `W_in x + b_in` is projected beforehand.
            project_input(seq, (d, h), (&wih[2 * h * d..], d, true), &[&bih[2 * h..]], (&mut ws.xp, h), &mut ws.tok);
            pack_folded(&mut ws.pk[0], &mut ws.tok, (rows, ri), |j| {
                let rec = &whh[j * h..(j + 1) * h];
                if j < 2 * h { (rec, Some(&wih[j * d..(j + 1) * d]), bih[j] + bhh[j]) } else { (rec, None, bhh[j]) }
            });
        } else {
            project_input(seq, (d, 3 * h), (wih, d, true), &[bih], (&mut ws.xp, 3 * h), &mut ws.tok);
            ws.pk[0].pack_linear(whh, rows, h);
        }
        if !ra {
            ws.pk[1].pack_linear(whn, h, h);
        }
        ws.begin_forward(seq.s0);

        let (pk, mask) = (&ws.pk, seq.mask);
        let (xp_all, st, act_all, rin_all, rp_all, extra, yy) = (
            &ws.xp,
            Shared::new(&mut ws.st),
            Shared::new(&mut ws.act),
            Shared::new(&mut ws.rin),
            Shared::new(&mut ws.rp),
            Shared::new(&mut ws.extra),
            Outputs::new(y, &mut ws.y_scratch, seq, h),
        );
        row_parts(nb, |p| {
            let m = p.len();
            // SAFETY (every `at` below): each part reads and writes only its own batch rows of
            // each step, inside the buffers sized for (T, B).
            let rp = unsafe { rp_all.at(p.block(0, 3 * h)) };
            for t in 0..nt {
                let h_prev = unsafe { st.at(p.at(t, h)) };
                let rin = unsafe { rin_all.at(p.at(t, ri)) };
                fill_rin_rows(rin, (h, ri), h_prev, mask.map(|mk| &mk[p.block(0, h)]), fold.then(|| &seq.x[p.at(t, d)]));
                let xp = &xp_all[p.at(t, xw)];
                let act = unsafe { act_all.at(p.at(t, aw)) };
                pk[0].gemm_serial(0, m, rin, ri, rp, 3 * h, false);
                if !ra {
                    // Gates first: the candidate's GEMM reads r ∘ h̃.
                    let rh = unsafe { extra.at(p.at(t, h)) };
                    for bi in 0..m {
                        let (xp, rp) = (&xp[bi * xw..(bi + 1) * xw], &rp[bi * 3 * h..(bi + 1) * 3 * h]);
                        let (act, rh) = (&mut act[bi * aw..bi * aw + 2 * h], &mut rh[bi * h..(bi + 1) * h]);
                        let hin = &rin[bi * ri..bi * ri + h];
                        if fold {
                            gates_row::<T, true>(xp, rp, bhh, hin, act, rh);
                        } else {
                            gates_row::<T, false>(xp, rp, bhh, hin, act, rh);
                        }
                    }
                    pk[1].gemm_serial(0, m, rh, h, &mut rp[2 * h..], 3 * h, false);
                }
                let h_next = unsafe { st.at(p.at(t + 1, h)) };
                // The output is h_t again: copied only where it is read.
                let mut y_t = yy.read(t).then(|| unsafe { yy.rows(&p, t) });
                for bi in 0..m {
                    let (xp, rp) = (&xp[bi * xw..(bi + 1) * xw], &rp[bi * 3 * h..(bi + 1) * 3 * h]);
                    let (hp, hn) = (&h_prev[bi * h..(bi + 1) * h], &mut h_next[bi * h..(bi + 1) * h]);
                    let act = &mut act[bi * aw..(bi + 1) * aw];
                    if fold {
                        forward_row::<T, true>(ra, xp, rp, bhh, hp, hn, act);
                    } else {
                        forward_row::<T, false>(ra, xp, rp, bhh, hp, hn, act);
                    }
                    if let Some(y) = y_t.as_mut() {
                        y[bi * h..(bi + 1) * h].copy_from_slice(hn);
                    }
                }
            }
        });
    }

    fn backward<T: Float>(&self, w: &[T], gr: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        let (d, h, ra) = (self.input, self.hidden, self.reset_after);
        let (nt, nb) = (seq.steps, seq.batch);
        let aw = ws.dims.act;
        let [wih, whh, _, _] = split(w, &self.lens())[..] else { unreachable!() };
        let whn = &whh[2 * h * h..];
        let [gwih, gwhh, gbih, gbhh] = &mut split_mut(gr, &self.lens())[..] else { unreachable!() };

        // ds = ∂L/∂h_t through the later steps and the final state.
        ws.begin_backward(grads.ds_final);
        if ra {
            ws.pk[0].pack_linear_dx(whh, 3 * h, h);
        } else {
            ws.pk[0].pack_linear_dx(whh, 2 * h, h);
            ws.pk[1].pack_linear_dx(whn, h, h);
        }

        let (pk, mask, dy_all) = (&ws.pk, seq.mask, grads.dy);
        let (act_all, st, rin_all) = (&ws.act, &ws.st, &ws.rin);
        let (ri, fold, xw) = (ws.dims.rin, folds_input(seq, d), ws.dims.xp);
        let (dxp_all, drp_all, ds_all, dr_all, tmp_all) =
            (Shared::new(&mut ws.xp), Shared::new(&mut ws.drp), Shared::new(&mut ws.ds), Shared::new(&mut ws.dr), Shared::new(&mut ws.tmp));
        row_parts(nb, |p| {
            let m = p.len();
            // SAFETY (every `at` below): each part reads and writes only its own batch rows.
            let (ds, dr, tmp) = unsafe { (ds_all.at(p.block(0, h)), dr_all.at(p.block(0, h)), tmp_all.at(p.block(0, h))) };
            for t in (0..nt).rev() {
                let dy = &dy_all[p.at(t, h)];
                let act = &act_all[p.at(t, aw)];
                let h_prev = &st[p.at(t, h)];
                let rin = &rin_all[p.at(t, ri)];
                let dxp = unsafe { dxp_all.at(p.at(t, xw)) };
                let drp = unsafe { drp_all.at(p.at(t, 3 * h)) };
                for bi in 0..m {
                    let (act, hp, dy) = (&act[bi * aw..(bi + 1) * aw], &h_prev[bi * h..(bi + 1) * h], &dy[bi * h..(bi + 1) * h]);
                    let (dxp, drp) = (&mut dxp[bi * xw..(bi + 1) * xw], &mut drp[bi * 3 * h..(bi + 1) * 3 * h]);
                    let ds = &mut ds[bi * h..(bi + 1) * h];
                    if fold {
                        backward_row::<T, true>(ra, act, hp, dy, ds, dxp, drp);
                    } else {
                        backward_row::<T, false>(ra, act, hp, dy, ds, dxp, drp);
                    }
                }
                if ra {
                    pk[0].gemm_serial(0, m, drp, 3 * h, dr, h, false);
                } else {
                    // Gradient of r ∘ h̃ through the candidate's GEMM, then the reset gate.
                    pk[1].gemm_serial(0, m, &drp[2 * h..], 3 * h, tmp, h, false);
                    for bi in 0..m {
                        let (r, hin, drh) = (&act[bi * aw..bi * aw + h], &rin[bi * ri..bi * ri + h], &tmp[bi * h..(bi + 1) * h]);
                        // (r's input part: none with a thin input, whose r is in drp alone)
                        let (dxp, drp) = (&mut dxp[bi * xw..bi * xw + if fold { 0 } else { h }], &mut drp[bi * 3 * h..bi * 3 * h + h]);
                        let dr = &mut dr[bi * h..(bi + 1) * h];
                        if fold {
                            reset_backward_row::<T, true>(r, hin, drh, dxp, drp, dr);
                        } else {
                            reset_backward_row::<T, false>(r, hin, drh, dxp, drp, dr);
                        }
                    }
                    pk[0].gemm_serial(0, m, drp, 3 * h, dr, h, true);
                }
                // h̃_{t-1} = mask ∘ h_{t-1}.
                match mask {
                    Some(mk) => ds.iter_mut().zip(&*dr).zip(&mk[p.block(0, h)]).for_each(|((o, &v), &mv)| *o += v * mv),
                    None => ds.iter_mut().zip(&*dr).for_each(|(o, &v)| *o += v),
                }
            }
        });
        if let Some(ds0) = grads.ds0 {
            ds0.copy_from_slice(&ws.ds);
        }

        // Weight gradients: one GEMM each over all T·B rows (the original form's W_hn reads
        // r ∘ h̃ rather than h̃, so its rows take a GEMM of their own).
        let m = nt * nb;
        if fold {
            self.folded_weight_gradients(seq, ws, (wih, gwih), gwhh, (gbih, gbhh), grads.dx);
            return;
        }
        input_backward(seq, (d, 3 * h), &ws.xp, (wih, gwih), &mut [&mut gbih[..]], grads.dx, &mut ws.tok);
        add_col_sums(m, 3 * h, &ws.drp, gbhh);
        // `rin`'s rows are `ri` apart (wider than h for an input `rin_width` widens).
        if ra {
            gemm(3 * h, h, m, &ws.drp, 3 * h, true, &ws.rin, ri, false, gwhh, h, true);
        } else {
            let (gw_rz, gw_n) = gwhh.split_at_mut(2 * h * h);
            gemm(2 * h, h, m, &ws.drp, 3 * h, true, &ws.rin, ri, false, gw_rz, h, true);
            gemm(h, h, m, &ws.drp[2 * h..], 3 * h, true, &ws.extra, h, false, gw_n, h, true);
        }
    }
}

impl Gru {
    /// The weight gradients when `rin` carries `[h̃ | x | 1]` ([`folds_input`]): the rows of the
    /// step's first GEMM (r and z, and with reset-after n) from one GEMM `drpᵀ · rin`, which
    /// gives their recurrent and input weights and both biases (r's and z's gradients are the
    /// same in `dxp` and `drp`, so backward wrote them to `drp` alone); the candidate's input
    /// part from one pass over its gradient in `xp` (`H` wide here); the original form's `W_hn`
    /// from `r ∘ h̃`.
    fn folded_weight_gradients<T: Float>(
        &self,
        seq: &Seq<T>,
        ws: &mut Workspace<T>,
        (wih, gwih): (&[T], &mut [T]),
        gwhh: &mut [T],
        (gbih, gbhh): (&mut [T], &mut [T]),
        dx: Option<&mut [T]>,
    ) {
        let (d, h, ra) = (self.input, self.hidden, self.reset_after);
        let (m, ri) = (seq.steps * seq.batch, ws.dims.rin);
        let rows = if ra { 3 * h } else { 2 * h };
        let c = &mut ws.tok;
        c.clear();
        c.resize(rows * ri, T::zero());
        gemm(rows, ri, m, &ws.drp, 3 * h, true, &ws.rin, ri, false, c, ri, false);
        for (j, row) in c.chunks_exact(ri).enumerate() {
            gwhh[j * h..(j + 1) * h].iter_mut().zip(&row[..h]).for_each(|(o, &v)| *o += v);
            if j < 2 * h {
                gwih[j * d..(j + 1) * d].iter_mut().zip(&row[h..h + d]).for_each(|(o, &v)| *o += v);
                gbih[j] += row[h + d];
            }
            gbhh[j] += row[h + d];
        }
        let (gbih_n, gbhh_n) = (&mut gbih[2 * h..], &mut gbhh[2 * h..]);
        // The original form's candidate: dxp's n block is also b_hn's gradient.
        let mut dbs: Vec<&mut [T]> = if ra { vec![gbih_n] } else { vec![gbih_n, gbhh_n] };
        linear_dw_db_strided(m, (h, h), d, &ws.xp, seq.x, &mut gwih[2 * h * d..], &mut dbs);
        if !ra {
            gemm(h, h, m, &ws.drp[2 * h..], 3 * h, true, &ws.extra, h, false, &mut gwhh[2 * h * h..], h, true);
        }
        if let Some(dx) = dx {
            // x's gradient: r's and z's part from drp, the candidate's from dxp.
            gemm(m, d, 2 * h, &ws.drp, 3 * h, false, wih, d, false, dx, d, false);
            gemm(m, d, h, &ws.xp, h, false, &wih[2 * h * d..], d, false, dx, d, true);
        }
    }
}

/// One row at one step, from the input parts `xp = [r|z|n]` and recurrent parts `rp` (with
/// reset-after, `rp`'s `n` block is `W_hn h̃` and the gates are computed here; otherwise `act`
/// already holds `r` and `z` and `rp`'s `n` block is `W_hn (r ∘ h̃)`) to `h_t`. With `FOLD`
/// (a thin input in the step's GEMM) `rp`'s `r` and `z` blocks are the whole pre-activations
/// and, with reset-after, its `n` block includes `b_hn`; `xp` holds the `n` block alone. A function of
/// its own so that the compiler knows the slices do not overlap and vectorises the loop.
#[inline(never)]
fn forward_row<T: Float, const FOLD: bool>(ra: bool, xp: &[T], rp: &[T], bhh: &[T], hp: &[T], hn: &mut [T], act: &mut [T]) {
    let h = hn.len();
    // The candidate's input part: `xp`'s `n` block, or `xp` whole with `FOLD`.
    let no = if FOLD { 0 } else { 2 * h };
    assert!(xp.len() == no + h && rp.len() == 3 * h && bhh.len() == 3 * h && hp.len() == h && act.len() >= 3 * h);
    let one = T::one();
    if ra {
        assert!(act.len() == 4 * h);
        for j in 0..h {
            let (r, z, hnv) = if FOLD {
                (rp[j].sigmoid(), rp[h + j].sigmoid(), rp[2 * h + j])
            } else {
                ((xp[j] + rp[j] + bhh[j]).sigmoid(), (xp[h + j] + rp[h + j] + bhh[h + j]).sigmoid(), rp[2 * h + j] + bhh[2 * h + j])
            };
            let nv = (xp[no + j] + r * hnv).tanh_fast();
            act[j] = r;
            act[h + j] = z;
            act[2 * h + j] = nv;
            act[3 * h + j] = hnv;
            hn[j] = (one - z) * nv + z * hp[j];
        }
    } else {
        for j in 0..h {
            let z = act[h + j];
            let nv = (xp[no + j] + rp[2 * h + j] + bhh[2 * h + j]).tanh_fast();
            act[2 * h + j] = nv;
            hn[j] = (one - z) * nv + z * hp[j];
        }
    }
}

/// The papers' form's gates of one row at one step, before the candidate's GEMM: `act = [r | z]`
/// and `rh = r ∘ h̃_{t-1}` (`hin`), the product's input. With `FOLD` `rp`'s `r` and `z` blocks
/// are the whole pre-activations. A function of its own, the lengths asserted, so that the
/// loop vectorises.
#[inline(never)]
fn gates_row<T: Float, const FOLD: bool>(xp: &[T], rp: &[T], bhh: &[T], hin: &[T], act: &mut [T], rh: &mut [T]) {
    let h = rh.len();
    assert!(xp.len() == if FOLD { h } else { 3 * h } && rp.len() == 3 * h && bhh.len() == 3 * h && hin.len() == h && act.len() == 2 * h);
    for j in 0..h {
        let (pr, pz) = if FOLD { (rp[j], rp[h + j]) } else { (xp[j] + rp[j] + bhh[j], xp[h + j] + rp[h + j] + bhh[h + j]) };
        let r = pr.sigmoid();
        act[j] = r;
        act[h + j] = pz.sigmoid();
        rh[j] = r * hin[j];
    }
}

/// The papers' form: the reset gate's pre-activation gradient from that of `r ∘ h̃_{t-1}`
/// (`drh`), into `drp` (and `dxp` without `FOLD`), and `r ∘ drh`, the part of h̃_{t-1}'s
/// gradient that passes through the product (`dr`).
#[inline(never)]
fn reset_backward_row<T: Float, const FOLD: bool>(r: &[T], hin: &[T], drh: &[T], dxp: &mut [T], drp: &mut [T], dr: &mut [T]) {
    let h = dr.len();
    assert!(r.len() == h && hin.len() == h && drh.len() == h && dxp.len() == if FOLD { 0 } else { h } && drp.len() == h);
    for j in 0..h {
        let da_r = drh[j] * hin[j] * r[j] * (T::one() - r[j]);
        if !FOLD {
            dxp[j] = da_r;
        }
        drp[j] = da_r;
        dr[j] = drh[j] * r[j];
    }
}

/// The backward of [`forward_row`] with `ds` the running ∂L/∂h_t (replaced by the part of
/// ∂L/∂h_{t-1} that the `z ∘ h_{t-1}` carry passes), `dy` the gradient from above. With `FOLD`
/// the gates' gradients go to `drp` alone (the weight gradients read them there).
#[inline(never)]
fn backward_row<T: Float, const FOLD: bool>(ra: bool, act: &[T], hp: &[T], dy: &[T], ds: &mut [T], dxp: &mut [T], drp: &mut [T]) {
    let h = ds.len();
    let no = if FOLD { 0 } else { 2 * h };
    assert!(act.len() >= 3 * h && hp.len() == h && dy.len() == h && dxp.len() == no + h && drp.len() == 3 * h);
    let one = T::one();
    if ra {
        assert!(act.len() == 4 * h);
    }
    for j in 0..h {
        let (r, z, nv) = (act[j], act[h + j], act[2 * h + j]);
        let dh = ds[j] + dy[j];
        let da_n = dh * (one - z) * (one - nv * nv);
        let da_z = dh * (hp[j] - nv) * z * (one - z);
        ds[j] = dh * z; // the z ∘ h_{t-1} carry
        if !FOLD {
            dxp[h + j] = da_z;
        }
        drp[h + j] = da_z;
        dxp[no + j] = da_n;
        if ra {
            let da_r = da_n * act[3 * h + j] * r * (one - r);
            if !FOLD {
                dxp[j] = da_r;
            }
            drp[j] = da_r;
            drp[2 * h + j] = da_n * r;
        } else {
            drp[2 * h + j] = da_n; // r's gradient needs W_hnᵀ da_n: the caller's
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::Cell;

    #[test]
    fn parameter_counts_match_the_papers() {
        // Later RAN paper, table 1: input 256, hidden 1024 (both forms have the same tensors).
        for reset_after in [true, false] {
            assert_eq!(Cell::Gru(Gru { input: 256, hidden: 1024, reset_after }).param_len(), 3_938_304);
        }
    }
}
