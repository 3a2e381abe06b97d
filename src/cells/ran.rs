//! Recurrent Additive Network (Lee, Levy, Zettlemoyer).
//!
//! ```text
//! c~_t = W_cx x_t + b_c
//! i_t  = σ(W_ic r_{t-1} + W_ix x_t + b_i)
//! f_t  = σ(W_fc r_{t-1} + W_fx x_t + b_f)
//! c_t  = i_t ∘ c~_t + f_t ∘ c_{t-1}
//! h_t  = g(c_t),            g ∈ {tanh, identity}
//! y_t  = h_t   or   y_t = W_proj h_t   (output projection)
//! ```
//! The recurrent input `r` the gates read is `h_{t-1} = g(c_{t-1})` (first paper,
//! [`RanGates::H`], `train`'s default), `c_{t-1}` (later paper, [`RanGates::C`]; what a
//! `config.json` without the `gates` option means, with a warning), or, with an output
//! projection, the projected previous output `y_{t-1}` (the first paper's billion-word setting;
//! the gates option is then irrelevant). With identity `g` and `r = c` this is also the
//! GRU-derived RAN of the first paper's section 4.3. The content bias `b_c` is the later paper's
//! (its footnote 2: every product carries a bias); the first paper's eq. (1) and the authors'
//! released code have none: `content_bias: false` (`--ran-content-bias false`) drops it, the
//! content then `c~_t = W_cx x_t`, `b_c` absent from the parameters.
//!
//! The state is `c` alone (`[B, H]`, zeros at the start). A variational dropout mask, when
//! given, multiplies `r` before the recurrent GEMM.
//!
//! Flat parameter layout (so that one GEMM covers each group):
//! `[W_cx; W_ix; W_fx] [3H, D]`, `[b_c; b_i; b_f] [3H]` (`[b_i; b_f] [2H]` without the content
//! bias), `[W_ic; W_fc] [2H, R]`, `W_proj [P, H]`.
//!
//! Workspace use: `xp[t] = [c~ | x-part of i | x-part of f]` (biases included; backward writes
//! their gradients over them; without the content bias the gates' biases are added to their
//! columns after the product, one more pass over them, and their gradients summed from them); `act[t] = [i | f]`, and `h` beside them with a projection (its
//! GEMM's input; without one `h` is the output itself, written there, and backward computes
//! `g(c_t)` again from `st`, one `T·B·H` stream fewer written and read back at the task shape);
//! `st` holds `c`; `rin[t] = mask ∘ r_{t-1}`; `extra[t]` holds the total gradient of `y_t`
//! (projection only); `tmp` is one `[B, H]` scratch. With a narrow input (`rin_width`: at most
//! `FOLD_MAX` features given as values: the tasks' inputs, a `rnnlens.torch` layer's) `rin[t]` carries `[r_{t-1} | x_t |
//! 1]`, the step's GEMM with the packed `[W_·c | W_·x | b_·]` gives the gates' whole
//! pre-activations (`rp`), only `c~` is projected beforehand (`xp` is `[c~]`, `H` wide), backward
//! writes the gates' gradients to `drp` alone, and one GEMM `drpᵀ · rin` gives their weights and
//! biases (as the LSTM's, the GRU's and the RDA's; docs/benchmarks.md, "The RDA's thin input in its
//! step product").

use super::{Outputs, fill_rin_rows, folds_input, pack_folded, input_backward, project_input_or_table, rin_width, row_parts, step_rows, Shared, split, split_mut, Grads, InitKind, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::gemm::{add_bias_rows, add_col_sums_strided, gemm, linear_dw, linear_dw_db_strided, linear_dx};
use crate::kernels::num::{Act, Float, Squash};

/// What the RAN's gates read from the previous step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RanGates {
    /// r = c_{t-1} (the later paper)
    C,
    /// r = h_{t-1} = g(c_{t-1}) (the first paper)
    H,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Ran {
    pub input: usize,
    pub hidden: usize,
    pub projection: Option<usize>,
    /// `g`: [`Act::Tanh`] or [`Act::Identity`]
    pub output: Act,
    pub gates: RanGates,
    /// `false`: no content bias `b_c` (the first paper's eq. (1))
    pub content_bias: bool,
}

/// Where the recurrent input comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    C,
    H,
    Proj,
}

impl Ran {
    fn rec(&self) -> usize {
        self.projection.unwrap_or(self.hidden)
    }
    fn source(&self) -> Source {
        match (self.projection, self.gates) {
            (Some(_), _) => Source::Proj,
            (None, RanGates::C) => Source::C,
            (None, RanGates::H) => Source::H,
        }
    }
    /// A row's width of the tape `act`: the gates, and `h` with a projection (module doc).
    fn tape(&self) -> usize {
        if self.projection.is_some() { 3 * self.hidden } else { 2 * self.hidden }
    }
    fn lens(&self) -> [usize; 4] {
        let (d, h, r) = (self.input, self.hidden, self.rec());
        [3 * h * d, self.gate_bias() + 2 * h, 2 * h * r, self.projection.map_or(0, |p| p * h)]
    }
    /// Where the gates' biases `[b_i; b_f]` start in the bias block: after `b_c`, if any.
    fn gate_bias(&self) -> usize {
        if self.content_bias { self.hidden } else { 0 }
    }
}

/// The GPU twin (`ran.wgsl`): `xp[t] = [c~ | i | f]`, the recurrent GEMM adding the gates'
/// recurrent parts to its last `2H` columns. No projection on the GPU yet.
#[cfg(feature = "gpu")]
impl Ran {
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        let (d, h, r) = (self.input, self.hidden, self.rec());
        let [wx, b, wr, _] = self.lens();
        let projected = self.projection.is_some();
        let opts = (self.output == Act::Tanh) as u32 | ((self.gates == RanGates::C && !projected) as u32) << 1 | (projected as u32) << 2;
        if !matches!(self.output, Act::Tanh | Act::Identity) {
            anyhow::bail!("the RAN's output function must be tanh or identity");
        }
        Ok(super::gpu::GpuCell {
            name: "ran",
            source: include_str!("ran.wgsl"),
            input: d,
            hidden: h,
            xp: 3 * h,
            rec_col: h,
            rec_width: 2 * h,
            rin: r,
            state: h,
            out: r,
            // without the content bias, its columns take the product alone
            inputs: if self.content_bias {
                vec![super::gpu::InputBlock { col: 0, rows: 3 * h, w: 0, ld: d, biases: vec![wx] }]
            } else {
                vec![super::gpu::InputBlock { col: 0, rows: h, w: 0, ld: d, biases: vec![] }, super::gpu::InputBlock { col: h, rows: 2 * h, w: h * d, ld: d, biases: vec![wx] }]
            },
            w_rec: wx + b,
            rec_ld: r,
            act: if projected { h } else { 0 },
            opts,
            proj: self.projection.map(|p| super::gpu::ProjRec { w: wx + b + wr, p, from_state: true }),
            threads: h,
            ..Default::default()
        })
    }
}

impl Recurrent for Ran {
    fn sizes(&self) -> Sizes {
        let o = self.rec();
        Sizes { input: self.input, hidden: self.hidden, output: o, state: self.hidden, rec: o }
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let (d, h, r) = (self.input, self.hidden, self.rec());
        let wx = InitKind::Weight { fan_in: d, fan_out: h };
        let wr = InitKind::Weight { fan_in: r, fan_out: h };
        let mut v = vec![
            TensorSpec::new("W_cx", &[h, d], wx),
            TensorSpec::new("W_ix", &[h, d], wx),
            TensorSpec::new("W_fx", &[h, d], wx),
            TensorSpec::new("b_c", &[h], InitKind::Bias),
            TensorSpec::new("b_i", &[h], InitKind::Bias),
            TensorSpec::new("b_f", &[h], InitKind::GateBias),
            TensorSpec::new("W_ic", &[h, r], wr),
            TensorSpec::new("W_fc", &[h, r], wr),
        ];
        v.retain(|t| self.content_bias || t.name != "b_c");
        if let Some(p) = self.projection {
            v.push(TensorSpec::new("W_proj", &[p, h], InitKind::Weight { fan_in: h, fan_out: p }));
        }
        v
    }

    fn ws_dims(&self, thin: bool) -> WsDims {
        let h = self.hidden;
        WsDims {
            // with a thin input the gates' pre-activations come whole from the step's GEMM:
            // only the content is projected beforehand
            xp: if thin { h } else { 3 * h },
            act: self.tape(),
            state: h,
            rin: rin_width(self.rec(), self.input),
            rp: 2 * h,
            extra: self.projection.unwrap_or(0),
            tmp: h,
            ..Default::default()
        }
    }

    /// `c`, the gates `i` and `f`, the content `c~` and `h = g(c)` (the output too, unless projected).
    fn trace<T: Float>(&self, ws: &Workspace<T>) -> Vec<super::Trace<T>> {
        let (h, aw) = (self.hidden, self.tape());
        let mut hv = ws.trace_state("h", 0..h);
        hv.values.iter_mut().for_each(|v| *v = self.output.f(*v));
        vec![ws.trace_state("c", 0..h), ws.trace("i", &ws.act, aw, 0..h), ws.trace("f", &ws.act, aw, h..2 * h), ws.trace("content", &ws.xp, ws.dims.xp, 0..h), hv]
    }

    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        let (d, h, r, g) = (self.input, self.hidden, self.rec(), self.output);
        let (nt, nb) = (seq.steps, seq.batch);
        let [wx, b, wr, wp] = split(w, &self.lens())[..] else { unreachable!() };
        let (src, aw) = (self.source(), self.tape());
        let (bc, bg) = b.split_at(self.gate_bias());
        let content_bias: &[&[T]] = if self.content_bias { &[bc] } else { &[] };

        let (ri, fold, xw) = (ws.dims.rin, folds_input(seq, d), ws.dims.xp);
        let from_table = if fold {
            // A thin input rides in `rin` as `[r | x | 1]`: the step's GEMM with the packed
            // `[W_·c | W_·x | b_·]` gives the gates' pre-activations whole; only the content
            // `c~ = W_cx x + b_c` is projected beforehand (as the RDA's `u`).
            project_input_or_table(seq, (d, h), (wx, d, true), content_bias, (&mut ws.xp, h), &mut ws.tok, false);
            pack_folded(&mut ws.pk[0], &mut ws.tok, (2 * h, ri), |j| (&wr[j * r..(j + 1) * r], Some(&wx[(h + j) * d..(h + j + 1) * d]), bg[j]));
            false
        } else {
            ws.pk[0].pack_linear(wr, 2 * h, r);
            let biases: &[&[T]] = if self.content_bias { &[b] } else { &[] };
            let deferred = project_input_or_table(seq, (d, 3 * h), (wx, d, true), biases, (&mut ws.xp, 3 * h), &mut ws.tok, true);
            if !self.content_bias {
                // the gates' biases on their columns of the rows made: the symbols' table's, or every step's
                let rows = if deferred { seq.embedded(d).map_or(0, |(_, _, v)| v) } else { nt * nb };
                let out = if deferred { &mut ws.tok[h..] } else { &mut ws.xp[h..] };
                add_bias_rows(rows, 2 * h, &[bg], out, 3 * h);
            }
            deferred
        };
        ws.begin_forward(seq.s0);

        // r_{-1}, from the initial state (rows `ri` apart; then x_0 and 1 with a thin input).
        {
            let c0 = &ws.st[..nb * h];
            let rin0 = &mut ws.rin[..nb * ri];
            match src {
                Source::C | Source::H => {
                    for (row, c) in rin0.chunks_exact_mut(ri).zip(c0.chunks_exact(h)) {
                        row[..r].iter_mut().zip(c).for_each(|(o, &c)| *o = if src == Source::C { c } else { g.f(c) });
                    }
                }
                Source::Proj => {
                    ws.tmp.iter_mut().zip(c0).for_each(|(o, &c)| *o = g.f(c));
                    gemm(nb, r, h, &ws.tmp, h, false, wp, h, true, rin0, ri, false);
                }
            }
            for (bi, row) in rin0.chunks_exact_mut(ri).enumerate() {
                if let Some(m) = seq.mask {
                    row[..r].iter_mut().zip(&m[bi * r..(bi + 1) * r]).for_each(|(v, &mv)| *v *= mv);
                }
                if fold {
                    row[r..r + d].copy_from_slice(&seq.x[bi * d..(bi + 1) * d]);
                    row[r + d] = T::one();
                }
            }
        }

        if src == Source::Proj {
            ws.pk[1].pack_linear(wp, r, h);
        }
        let (pk, mask) = (&ws.pk, seq.mask);
        // With an embedding, each step's rows come from the per-symbol table (as the LSTM's).
        let table = from_table.then(|| (&ws.tok[..], seq.tokens.expect("an embedding has its tokens")));
        let (xp_all, st, act_all, rin_all, rp_all, yy) =
            (Shared::new(&mut ws.xp), Shared::new(&mut ws.st), Shared::new(&mut ws.act), Shared::new(&mut ws.rin), Shared::new(&mut ws.rp), Outputs::new(y, &mut ws.y_scratch, seq, r));
        row_parts(nb, |p| {
            let m = p.len();
            // SAFETY (every `at` below): each part reads and writes only its own batch rows of
            // each step, inside the buffers sized for (T, B).
            let rp = unsafe { rp_all.at(p.block(0, 2 * h)) };
            for t in 0..nt {
                pk[0].gemm_serial(0, m, unsafe { rin_all.at(p.at(t, ri)) }, ri, rp, 2 * h, false);
                let xp = unsafe { xp_all.at(p.at(t, xw)) };
                if let Some((table, tokens)) = table {
                    step_rows(table, 3 * h, &tokens[p.at(t, 1)], xp);
                }
                let xp = &*xp;
                let c_prev = unsafe { st.at(p.at(t, h)) };
                let c_next = unsafe { st.at(p.at(t + 1, h)) };
                let act = unsafe { act_all.at(p.at(t, aw)) };
                let y_t = unsafe { yy.rows(&p, t) };
                for bi in 0..m {
                    let (cp, cn) = (&c_prev[bi * h..(bi + 1) * h], &mut c_next[bi * h..(bi + 1) * h]);
                    let (xp, rp) = (&xp[bi * xw..(bi + 1) * xw], &rp[bi * 2 * h..(bi + 1) * 2 * h]);
                    // h = g(c_t) beside the gates (the projection's input), or as the output.
                    let (gates, hv) = act[bi * aw..(bi + 1) * aw].split_at_mut(2 * h);
                    let hv = if src == Source::Proj { hv } else { &mut y_t[bi * h..(bi + 1) * h] };
                    if fold {
                        crate::with_act!(g, s => forward_row::<T, true>(s, xp, rp, cp, cn, (gates, hv)));
                    } else {
                        crate::with_act!(g, s => forward_row::<T, false>(s, xp, rp, cp, cn, (gates, hv)));
                    }
                }
                if src == Source::Proj {
                    pk[1].gemm_serial(0, m, &act[2 * h..], aw, y_t, r, false);
                }
                if t + 1 < nt {
                    let next_in = if src == Source::C { &*c_next } else { &*y_t };
                    let next = unsafe { rin_all.at(p.at(t + 1, ri)) };
                    fill_rin_rows(next, (r, ri), next_in, mask.map(|mk| &mk[p.block(0, r)]), fold.then(|| &seq.x[p.at(t + 1, d)]));
                }
            }
        });
    }

    fn backward<T: Float>(&self, w: &[T], gr: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        let (d, h, r, g) = (self.input, self.hidden, self.rec(), self.output);
        let (nt, nb) = (seq.steps, seq.batch);
        let [wx, _, wr, wp] = split(w, &self.lens())[..] else { unreachable!() };
        let [gwx, gb, gwr, gwp] = &mut split_mut(gr, &self.lens())[..] else { unreachable!() };
        let (src, aw) = (self.source(), self.tape());

        ws.begin_backward(grads.ds_final);
        ws.pk[0].pack_linear_dx(wr, 2 * h, r);
        if src == Source::Proj {
            ws.pk[1].pack_linear_dx(wp, r, h);
        }

        let (pk, mask, dy_all) = (&ws.pk, seq.mask, grads.dy);
        let (act_all, st) = (&ws.act, &ws.st);
        let (ri, fold, xw) = (ws.dims.rin, folds_input(seq, d), ws.dims.xp);
        // The input parts in `xp`, their gradients written over them.
        let (tmp, extra, xp_all, drp_all, dr_all, ds_all) =
            (Shared::new(&mut ws.tmp), Shared::new(&mut ws.extra), Shared::new(&mut ws.xp), Shared::new(&mut ws.drp), Shared::new(&mut ws.dr), Shared::new(&mut ws.ds));
        row_parts(nb, |p| {
            let m = p.len();
            // SAFETY (every `at` below): each part reads and writes only its own batch rows.
            let (dh, dr, ds) = unsafe { (tmp.at(p.block(0, h)), dr_all.at(p.block(0, r)), ds_all.at(p.block(0, h))) };
            for t in (0..nt).rev() {
                let dy = &dy_all[p.at(t, r)];
                // dh: gradient reaching h_t from above and from the next step's gates.
                match src {
                    Source::Proj => {
                        let gy = unsafe { extra.at(p.at(t, r)) };
                        gy.iter_mut().zip(dy.iter().zip(&*dr)).for_each(|(o, (&a, &b))| *o = a + b);
                        pk[1].gemm_serial(0, m, gy, r, dh, h, false);
                    }
                    Source::H => dh.iter_mut().zip(dy.iter().zip(&*dr)).for_each(|(o, (&a, &b))| *o = a + b),
                    Source::C => dh.copy_from_slice(dy),
                }
                let xp = unsafe { xp_all.at(p.at(t, xw)) };
                let act = &act_all[p.at(t, aw)];
                let (c_prev, c_next) = (&st[p.at(t, h)], &st[p.at(t + 1, h)]);
                let drp = unsafe { drp_all.at(p.at(t, 2 * h)) };
                for bi in 0..m {
                    let (xp, gates) = (&mut xp[bi * xw..(bi + 1) * xw], &act[bi * aw..bi * aw + 2 * h]);
                    let (dh, cs) = (&dh[bi * h..(bi + 1) * h], [&c_prev[bi * h..(bi + 1) * h], &c_next[bi * h..(bi + 1) * h]]);
                    // With gates reading c, c_{t-1}'s gradient also arrives through them.
                    let dr = (src == Source::C).then(|| &dr[bi * r..(bi + 1) * r]);
                    let drp = &mut drp[bi * 2 * h..(bi + 1) * 2 * h];
                    let ds = &mut ds[bi * h..(bi + 1) * h];
                    if fold {
                        crate::with_act!(g, s => backward_row::<T, true>(s, xp, gates, cs, dh, dr, ds, drp));
                    } else {
                        crate::with_act!(g, s => backward_row::<T, false>(s, xp, gates, cs, dh, dr, ds, drp));
                    }
                }
                // Gradient with respect to r_{t-1} = the recurrent value produced at step t-1.
                pk[0].gemm_serial(0, m, drp, 2 * h, dr, r, false);
                if let Some(mk) = mask {
                    dr.iter_mut().zip(&mk[p.block(0, r)]).for_each(|(v, &mv)| *v *= mv);
                }
            }
        });

        // r_{-1} was computed from the initial state c_0.
        let c0 = &ws.st[..nb * h];
        match src {
            Source::C => ws.ds.iter_mut().zip(&ws.dr).for_each(|(o, &v)| *o += v),
            Source::H => {
                for ((o, &v), &c) in ws.ds.iter_mut().zip(&ws.dr).zip(c0) {
                    *o += v * g.df_from_y(g.f(c));
                }
            }
            Source::Proj => {
                ws.tmp.iter_mut().zip(c0).for_each(|(o, &c)| *o = g.f(c));
                linear_dw(nb, r, h, &ws.dr, &ws.tmp, gwp);
                let mut dh0 = std::mem::take(&mut ws.tmp);
                linear_dx(nb, r, h, &ws.dr, wp, &mut dh0, false);
                for ((o, &v), &c) in ws.ds.iter_mut().zip(&dh0).zip(c0) {
                    *o += v * g.df_from_y(g.f(c));
                }
                ws.tmp = dh0;
            }
        }
        if let Some(ds0) = grads.ds0 {
            ds0.copy_from_slice(&ws.ds);
        }

        // Weight gradients: one GEMM each over all T·B rows.
        let m = nt * nb;
        if fold {
            // `rin` carries [r | x | 1]: the gates' recurrent and input weights and biases from
            // one GEMM, the content's from one pass over its block of the gradients in `xp`.
            let (gbc, gbg) = gb.split_at_mut(self.gate_bias());
            let c = &mut ws.tok;
            c.clear();
            c.resize(2 * h * ri, T::zero());
            gemm(2 * h, ri, m, &ws.drp, 2 * h, true, &ws.rin, ri, false, c, ri, false);
            for (j, row) in c.chunks_exact(ri).enumerate() {
                gwr[j * r..(j + 1) * r].iter_mut().zip(&row[..r]).for_each(|(o, &v)| *o += v);
                gwx[(h + j) * d..(h + j + 1) * d].iter_mut().zip(&row[r..r + d]).for_each(|(o, &v)| *o += v);
                gbg[j] += row[r + d];
            }
            let gbc: &mut [&mut [T]] = if self.content_bias { &mut [gbc] } else { &mut [] };
            linear_dw_db_strided(m, (h, h), d, &ws.xp, seq.x, &mut gwx[..h * d], gbc);
            if let Some(dx) = grads.dx {
                // x's gradient: the content's part from xp's gradients, the gates' from drp.
                gemm(m, d, h, &ws.xp, h, false, wx, d, false, dx, d, false);
                gemm(m, d, 2 * h, &ws.drp, 2 * h, false, &wx[h * d..], d, false, dx, d, true);
            }
        } else {
            let dbs: &mut [&mut [T]] = if self.content_bias { &mut [&mut gb[..]] } else { &mut [] };
            input_backward(seq, (d, 3 * h), &ws.xp, (wx, gwx), dbs, grads.dx, &mut ws.tok);
            if !self.content_bias {
                // `gb` is the gates' biases alone: summed from their columns
                add_col_sums_strided(m, (2 * h, 3 * h), &ws.xp[h..], gb);
            }
            // `rin`'s rows are `ri` apart (wider than r for an input `rin_width` widens).
            gemm(2 * h, r, m, &ws.drp, 2 * h, true, &ws.rin, ri, false, gwr, r, true);
        }
        if src == Source::Proj {
            // dW_proj += Σ_t gy_tᵀ h_t, with h_t read in place from act (row stride 3H).
            gemm(r, h, m, &ws.extra, r, true, &ws.act[2 * h..], aw, false, gwp, h, true);
        }
    }
}

/// One row at one step: pre-activations `xp = [c̃|i|f]` (input parts) and `rp = [i|f]`
/// (recurrent parts) to `c_t`, the gates `[i|f]` and `h = g(c_t)`; with `FOLD` (a thin input
/// in the step's GEMM) `rp` holds the gates' whole pre-activations and `xp` the content alone.
/// A function of its own so that the compiler knows the slices do not overlap and vectorises
/// the loop.
#[inline(never)]
fn forward_row<T: Float, const FOLD: bool>(g: impl Squash, xp: &[T], rp: &[T], cp: &[T], cn: &mut [T], (act, hv): (&mut [T], &mut [T])) {
    let h = cn.len();
    assert!(xp.len() == if FOLD { h } else { 3 * h } && rp.len() == 2 * h && cp.len() == h && act.len() == 2 * h && hv.len() == h);
    for j in 0..h {
        let (i, f) = if FOLD { (rp[j].sigmoid(), rp[h + j].sigmoid()) } else { ((xp[h + j] + rp[j]).sigmoid(), (xp[2 * h + j] + rp[h + j]).sigmoid()) };
        let c = i * xp[j] + f * cp[j];
        cn[j] = c;
        act[j] = i;
        act[h + j] = f;
        hv[j] = g.f(c);
    }
}

/// The backward of [`forward_row`] from the gates `act = [i|f]` and `[c_{t-1}, c_t]` (`h_t =
/// g(c_t)` computed again: the same bits as forward's, read from memory nowhere): `dh` =
/// ∂L/∂h_t, `dr` = ∂L/∂c_t through the next step's gates (when they read c), `ds` the running
/// ∂L/∂c_t, replaced by ∂L/∂c_{t-1}; writes the gradients of the input parts over them in
/// `xp` (only the content is read) and those of the recurrent parts to `drp` (with `FOLD`, the
/// gates' go to `drp` alone: `xp`'s would be the same values).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn backward_row<T: Float, const FOLD: bool>(g: impl Squash, xp: &mut [T], act: &[T], [cp, cn]: [&[T]; 2], dh: &[T], dr: Option<&[T]>, ds: &mut [T], drp: &mut [T]) {
    let h = ds.len();
    assert!(xp.len() == if FOLD { h } else { 3 * h } && act.len() == 2 * h && cp.len() == h && cn.len() == h && dh.len() == h);
    assert!(drp.len() == 2 * h);
    if let Some(dr) = dr {
        ds.iter_mut().zip(&dr[..h]).for_each(|(d, &r)| *d += r);
    }
    let one = T::one();
    for j in 0..h {
        let (i, f, hv) = (act[j], act[h + j], g.f(cn[j]));
        let dc = ds[j] + dh[j] * g.df_from_y(hv);
        let dai = dc * xp[j] * i * (one - i);
        let daf = dc * cp[j] * f * (one - f);
        xp[j] = dc * i;
        if !FOLD {
            xp[h + j] = dai;
            xp[2 * h + j] = daf;
        }
        drp[j] = dai;
        drp[h + j] = daf;
        ds[j] = dc * f;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::registry::Cell;
    use crate::kernels::rng::Rng;

    /// Without its content bias the RAN is the cell with `b_c` held at zero: the same outputs
    /// and the same gradients of every other parameter, for a thin input (in the step's
    /// product) and a wide one, each gate form and output function, with and without a
    /// projection; and `b_c` is not among its parameters.
    #[test]
    fn without_the_content_bias_it_is_the_cell_with_b_c_at_zero() {
        let (nt, nb, h) = (5, 3, 4);
        let mut rng = Rng::new(11);
        for d in [2, crate::cells::FOLD_MAX + 2] {
            for (gates, output, projection) in [(RanGates::C, Act::Tanh, None), (RanGates::H, Act::Identity, None), (RanGates::H, Act::Tanh, Some(3))] {
                let ran = |content_bias| Cell::Ran(Ran { input: d, hidden: h, projection, output, gates, content_bias });
                let (with, without) = (ran(true), ran(false));
                assert!(without.tensors().iter().all(|t| t.name != "b_c") && with.param_len() == without.param_len() + h);
                // b_c follows the three input matrices
                let bc = 3 * h * d..3 * h * d + h;
                let mut w: Vec<f64> = (0..with.param_len()).map(|_| rng.range(-0.5, 0.5)).collect();
                w[bc.clone()].fill(0.0);
                let w0: Vec<f64> = w[..bc.start].iter().chain(&w[bc.end..]).copied().collect();
                let sz = with.sizes();
                let x: Vec<f64> = (0..nt * nb * d).map(|_| rng.range(-1.0, 1.0)).collect();
                let dy: Vec<f64> = (0..nt * nb * sz.output).map(|_| rng.range(-1.0, 1.0)).collect();
                let seq = Seq { steps: nt, batch: nb, x: &x, tokens: None, s0: None, mask: None, emb: None, out_from: 0 };
                let run = |cell: &Cell, w: &[f64]| {
                    let (mut ws, mut y, mut g) = (Workspace::default(), vec![0.0; dy.len()], vec![0.0; w.len()]);
                    cell.forward(w, &seq, &mut ws, &mut y);
                    cell.backward(w, &mut g, &seq, &mut ws, Grads { dy: &dy, ds_final: None, dx: None, ds0: None });
                    (y, g)
                };
                let ((y, g), (y0, g0)) = (run(&with, &w), run(&without, &w0));
                let g: Vec<f64> = g[..bc.start].iter().chain(&g[bc.end..]).copied().collect();
                let what = format!("input {d}, {gates:?}, {output:?}, projection {projection:?}");
                assert!(y.iter().any(|&v| v != 0.0) && g.iter().filter(|&&v| v != 0.0).count() * 2 > g.len(), "{what}: a vacuous pass");
                for (name, a, b) in [("outputs", &y, &y0), ("gradients", &g, &g0)] {
                    for (i, (u, v)) in a.iter().zip(b.iter()).enumerate() {
                        assert!((u - v).abs() <= 1e-12 * (1.0 + u.abs()), "{what}: {name}[{i}] {u} against {v}");
                    }
                }
            }
        }
    }
}
