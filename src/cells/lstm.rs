//! Long short-term memory, exactly `torch.nn.LSTM` (gate rows i, f, g, o; two biases), with
//! PyTorch's optional output projection (`proj_size`).
//!
//! ```text
//! i_t = σ(W_ii x_t + b_ii + W_hi r_{t-1} + b_hi)
//! f_t = σ(W_if x_t + b_if + W_hf r_{t-1} + b_hf)
//! g_t = tanh(W_ig x_t + b_ig + W_hg r_{t-1} + b_hg)
//! o_t = σ(W_io x_t + b_io + W_ho r_{t-1} + b_ho)
//! c_t = f_t ∘ c_{t-1} + i_t ∘ g_t
//! h_t = o_t ∘ tanh(c_t)
//! y_t = h_t   or   y_t = W_proj h_t   (projection, no bias)
//! ```
//! The recurrent input is the previous output, `r_{t-1} = y_{t-1}` (`R = P` with a projection,
//! `R = H` without). A variational dropout mask, when given, multiplies `y_{t-1}` before the
//! recurrent GEMM.
//!
//! The state is `[y | c]` as two blocks: a `[B, R]` block holding the previous output (torch's
//! `h_n`), then a `[B, H]` block holding the cell (torch's `c_n`); `S = R + H`. Both blocks of the
//! initial state are read and both receive gradients.
//!
//! Flat parameter layout (torch's order): `weight_ih [4H, D]`, `weight_hh [4H, R]`,
//! `bias_ih [4H]`, `bias_hh [4H]`, `W_proj [P, H]`.
//!
//! Workspace use: `xp[t]` starts as `W_ih x_t + b_ih + b_hh` and the step's recurrent GEMM
//! accumulates into it, or, with a thin input, the step's one GEMM of `rin[t]` and the packed
//! `[W_hh | W_ih | b_ih + b_hh]` (staged in `tok`) writes it whole, so it holds the four gate
//! pre-activations (no separate `rp`); the step's pointwise work then overwrites them with the
//! gates `[i | f | g | o]`, and backward overwrites those with the pre-activations' gradient, which
//! serves for both `weight_ih` and `weight_hh` (no `dxp`: on C3 each of these buffers is 400 MB,
//! and writing over the rows just read spares a pass through memory; a forward then serves one
//! backward, as every caller uses it). `st[t]` is the state `[y | c]` before step `t`, except
//! that the `y` block is written for the final state alone (every step's `y` is in the output
//! and in `rin`; backward reads the cells); `tanh c_t` is not kept but recomputed in backward
//! from `c_t`, which the step before read (C3: two streams of 100 MB through memory fewer, one
//! written in forward and one read in backward; docs/benchmarks.md, "`tanh c_t` recomputed in
//! the LSTM's backward"); `rin[t] = mask ∘ y_{t-1}`, followed
//! by `[x_t | 1]` when the input is thin (`rin_width`: one GEMM then gives the pre-activations
//! in forward and every weight and bias gradient in backward, `rec_input_backward`); with a
//! projection `extra[t] = [h_t | gy_t]` (`[B, H+P]`: `h` in forward, then the total gradient of
//! `y_t` in backward) and `tmp` is one `[B, H]` scratch for `∂L/∂h`. `ds` is the running state
//! gradient `[dy | dc]`; `dr` is unused.

use super::{Outputs, fill_rin_rows, folds_input, pack_folded, project_input_or_table, rec_input_backward, step_rows, rin_width, row_parts, split, split_mut, Shared, Grads, InitKind, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::gemm::gemm;
use crate::kernels::num::Float;

#[derive(Clone, Debug, PartialEq)]
pub struct Lstm {
    pub input: usize,
    pub hidden: usize,
    /// `P`: output projection size (torch's `proj_size`), if any
    pub projection: Option<usize>,
}

impl Lstm {
    fn rec(&self) -> usize {
        self.projection.unwrap_or(self.hidden)
    }
    fn lens(&self) -> [usize; 5] {
        let (d, h, r) = (self.input, self.hidden, self.rec());
        [4 * h * d, 4 * h * r, 4 * h, 4 * h, self.projection.map_or(0, |p| p * h)]
    }
}

/// The GPU twin (`lstm.wgsl`): the four gates' pre-activations in one `[B, 4H]` row, the
/// recurrent GEMM accumulating into all of it; with a projection (`ProjRec`), `h_t` goes through
/// `W_proj` after the step, as on the CPU.
#[cfg(feature = "gpu")]
impl Lstm {
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        let (d, h, r) = (self.input, self.hidden, self.rec());
        let [wih, whh, bih, bhh, _] = self.lens();
        Ok(super::gpu::GpuCell {
            name: "lstm",
            source: concat!(include_str!("lstm.wgsl"), include_str!("plain_start.wgsl")),
            input: d,
            hidden: h,
            xp: 4 * h,
            rec_width: 4 * h,
            rin: r,
            state: r + h,
            out: r,
            inputs: vec![super::gpu::InputBlock { col: 0, rows: 4 * h, w: 0, ld: d, biases: vec![wih + whh, wih + whh + bih] }],
            w_rec: wih,
            rec_ld: r,
            act: if self.projection.is_some() { h } else { 0 },
            opts: self.projection.is_some() as u32,
            proj: self.projection.map(|p| super::gpu::ProjRec { w: wih + whh + bih + bhh, p, from_state: false }),
            threads: h,
            ..Default::default()
        })
    }
}

impl Recurrent for Lstm {
    fn sizes(&self) -> Sizes {
        let (h, r) = (self.hidden, self.rec());
        Sizes { input: self.input, hidden: h, output: r, state: r + h, rec: r }
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let (d, h, r) = (self.input, self.hidden, self.rec());
        // Fans are those of one gate's block, as for the RAN's separate gate matrices.
        let mut v = vec![
            TensorSpec::new("weight_ih", &[4 * h, d], InitKind::Weight { fan_in: d, fan_out: h }),
            TensorSpec::new("weight_hh", &[4 * h, r], InitKind::Weight { fan_in: r, fan_out: h }),
            TensorSpec::new("bias_ih", &[4 * h], InitKind::OpenGateRows { gate: 1, gates: 4 }),
            TensorSpec::new("bias_hh", &[4 * h], InitKind::Bias),
        ];
        if let Some(p) = self.projection {
            v.push(TensorSpec::new("W_proj", &[p, h], InitKind::Weight { fan_in: h, fan_out: p }));
        }
        v
    }

    fn ws_dims(&self, _thin: bool) -> WsDims {
        let (h, r) = (self.hidden, self.rec());
        WsDims {
            xp: 4 * h,
            state: r + h,
            rin: rin_width(r, self.input),
            rp: 0,
            extra: self.projection.map_or(0, |p| h + p),
            tmp: h, // ∂L/∂h_t of one step
            ..Default::default()
        }
    }

    /// `c` and the gates `i`, `f`, `g` (the candidate) and `o`.
    fn trace<T: Float>(&self, ws: &Workspace<T>) -> Vec<super::Trace<T>> {
        let (h, r) = (self.hidden, self.rec());
        let mut t = vec![ws.trace_state("c", r..r + h)];
        t.extend(["i", "f", "g", "o"].iter().enumerate().map(|(k, &name)| ws.trace(name, &ws.xp, 4 * h, k * h..(k + 1) * h)));
        t
    }

    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        let (d, h, r) = (self.input, self.hidden, self.rec());
        let (nt, nb) = (seq.steps, seq.batch);
        let ns = nb * (r + h);
        let ne = ws.dims.extra; // H + P with a projection
        let [wih, whh, bih, bhh, wp] = split(w, &self.lens())[..] else { unreachable!() };

        let (ri, fold) = (ws.dims.rin, folds_input(seq, d));
        let mut from_table = false;
        if fold {
            // A thin input rides in `rin` as `[y | x | 1]`, so one packed `[W_hh | W_ih | b]`
            // gives each step's pre-activations whole: no pass writing the input projections of
            // every step first (C3: 400 MB) for the steps to read back.
            pack_folded(&mut ws.pk[0], &mut ws.tok, (4 * h, ri), |j| (&whh[j * r..(j + 1) * r], Some(&wih[j * d..(j + 1) * d]), bih[j] + bhh[j]));
        } else {
            from_table = project_input_or_table(seq, (d, 4 * h), (wih, d, true), &[bih, bhh], (&mut ws.xp, 4 * h), &mut ws.tok, true);
            ws.pk[0].pack_linear(whh, 4 * h, r);
        }
        ws.begin_forward(seq.s0);

        // r_{-1}: the y block of the initial state (then x_0 and 1 with a thin input).
        fill_rin_rows(&mut ws.rin[..nb * ri], (r, ri), &ws.st[..nb * r], seq.mask, fold.then(|| &seq.x[..nb * d]));

        if self.projection.is_some() {
            ws.pk[1].pack_linear(wp, r, h);
        }
        let (pk, mask, projected) = (&ws.pk, seq.mask, self.projection.is_some());
        // With an embedding, each step's rows come from the per-symbol table.
        let table = from_table.then(|| (&ws.tok[..], seq.tokens.expect("an embedding has its tokens")));
        let (xp, st, rin, extra, yy) = (Shared::new(&mut ws.xp), Shared::new(&mut ws.st), Shared::new(&mut ws.rin), Shared::new(&mut ws.extra), Outputs::new(y, &mut ws.y_scratch, seq, r));
        row_parts(nb, |p| {
            let m = p.len();
            for t in 0..nt {
                // SAFETY (every `at` in this loop): each part reads and writes only its own
                // batch rows of each step, inside the buffers sized for (T, B).
                let a = unsafe { xp.at(p.at(t, 4 * h)) };
                if let Some((table, tokens)) = table {
                    step_rows(table, 4 * h, &tokens[p.at(t, 1)], a);
                }
                pk[0].gemm_serial(0, m, unsafe { rin.at(p.at(t, ri)) }, ri, a, 4 * h, !fold);
                let c_prev = unsafe { st.at(p.block(t * ns + nb * r, h)) };
                let c_next = unsafe { st.at(p.block((t + 1) * ns + nb * r, h)) };
                let y_t = unsafe { yy.rows(&p, t) };
                // h_t goes straight to the output, or into extra[t] to be projected.
                let (h_out, h_stride) = if projected { (unsafe { extra.at(p.at(t, ne)) }, ne) } else { (&mut y_t[..], h) };
                for bi in 0..m {
                    let (cp, cn) = (&c_prev[bi * h..(bi + 1) * h], &mut c_next[bi * h..(bi + 1) * h]);
                    let ho = &mut h_out[bi * h_stride..bi * h_stride + h];
                    forward_row(&mut a[bi * 4 * h..(bi + 1) * 4 * h], cp, cn, ho);
                }
                if projected {
                    pk[1].gemm_serial(0, m, unsafe { extra.at(p.at(t, ne)) }, ne, y_t, r, false);
                }
                if t + 1 == nt {
                    unsafe { st.at(p.block((t + 1) * ns, r)) }.copy_from_slice(y_t);
                } else {
                    let next = unsafe { rin.at(p.at(t + 1, ri)) };
                    fill_rin_rows(next, (r, ri), y_t, mask.map(|mk| &mk[p.block(0, r)]), fold.then(|| &seq.x[p.at(t + 1, d)]));
                }
            }
        });
    }

    fn backward<T: Float>(&self, w: &[T], gr: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        let (d, h, r) = (self.input, self.hidden, self.rec());
        let (nt, nb) = (seq.steps, seq.batch);
        let ns = nb * (r + h);
        let ne = ws.dims.extra;
        let [wih, whh, _, _, wp] = split(w, &self.lens())[..] else { unreachable!() };
        let [gwih, gwhh, gbih, gbhh, gwp] = &mut split_mut(gr, &self.lens())[..] else { unreachable!() };

        // ds = [dy | dc]: gradients of y_t and c_t through the later steps and the final state.
        ws.begin_backward(grads.ds_final);
        ws.pk[0].pack_linear_dx(whh, 4 * h, r);
        if self.projection.is_some() {
            ws.pk[1].pack_linear_dx(wp, r, h);
        }

        let (pk, mask, projected, dy_all) = (&ws.pk, seq.mask, self.projection.is_some(), grads.dy);
        let (ds, extra, tmp, gates) = (Shared::new(&mut ws.ds), Shared::new(&mut ws.extra), Shared::new(&mut ws.tmp), Shared::new(&mut ws.xp));
        let st = &ws.st;
        row_parts(nb, |p| {
            let m = p.len();
            // SAFETY (every `at` below): each part reads and writes only its own batch rows.
            let (dy_rec, dc_run) = unsafe { (ds.at(p.block(0, r)), ds.at(p.block(nb * r, h))) };
            let tmp = unsafe { tmp.at(p.block(0, h)) };
            for t in (0..nt).rev() {
                let dy = &dy_all[p.at(t, r)];
                if projected {
                    // gy = total gradient of y_t; ∂L/∂h_t = gy W_proj.
                    let ex = unsafe { extra.at(p.at(t, ne)) };
                    for bi in 0..m {
                        let gy = &mut ex[bi * ne + h..(bi + 1) * ne];
                        for (k, o) in gy.iter_mut().enumerate() {
                            *o = dy[bi * r + k] + dy_rec[bi * r + k];
                        }
                    }
                    pk[1].gemm_serial(0, m, &ex[h..], ne, tmp, h, false);
                }
                let (c_prev, c_t) = (&st[p.block(t * ns + nb * r, h)], &st[p.block((t + 1) * ns + nb * r, h)]);
                // The gates in, their pre-activations' gradient out.
                let da = unsafe { gates.at(p.at(t, 4 * h)) };
                for bi in 0..m {
                    let dh = &mut tmp[bi * h..(bi + 1) * h];
                    if !projected {
                        let (dy, dy_rec) = (&dy[bi * h..(bi + 1) * h], &dy_rec[bi * h..(bi + 1) * h]);
                        dh.iter_mut().zip(dy.iter().zip(dy_rec)).for_each(|(o, (&a, &b))| *o = a + b);
                    }
                    let (cp, dc) = (&c_prev[bi * h..(bi + 1) * h], &mut dc_run[bi * h..(bi + 1) * h]);
                    backward_row(&mut da[bi * 4 * h..(bi + 1) * 4 * h], &c_t[bi * h..(bi + 1) * h], cp, dh, dc);
                }
                // y_{t-1} reaches the loss only through this step's recurrent GEMM.
                pk[0].gemm_serial(0, m, da, 4 * h, dy_rec, r, false);
                if let Some(mk) = mask {
                    dy_rec.iter_mut().zip(&mk[p.block(0, r)]).for_each(|(v, &mv)| *v *= mv);
                }
            }
        });
        if let Some(ds0) = grads.ds0 {
            ds0.copy_from_slice(&ws.ds);
        }

        // Weight gradients: GEMMs over all T·B rows (one for all of them with a thin input).
        let m = nt * nb;
        let dxp = &ws.xp; // the gates' pre-activation gradient, written over them above
        let (rin, dbs) = ((&ws.rin[..], r), &mut [&mut gbih[..], &mut gbhh[..]]);
        rec_input_backward(seq, (d, 4 * h), dxp, rin, gwhh, (wih, gwih), dbs, grads.dx, &mut ws.tok);
        if self.projection.is_some() {
            // dW_proj += Σ_t gy_tᵀ h_t, both read in place from extra (row stride H+P).
            gemm(r, h, m, &ws.extra[h..], ne, true, &ws.extra, ne, false, gwp, h, true);
        }
    }
}

/// One row's gates, cell and output at one step: `a` holds the pre-activations `[i|f|g|o]`
/// and receives the gates. A function of its own so that the compiler knows the slices do not
/// overlap and vectorises the loop.
#[inline(never)]
fn forward_row<T: Float>(a: &mut [T], cp: &[T], cn: &mut [T], ho: &mut [T]) {
    let h = cn.len();
    assert!(a.len() == 4 * h && cp.len() == h && ho.len() == h);
    let (ifg, ao) = a.split_at_mut(3 * h);
    let (aif, ag) = ifg.split_at_mut(2 * h);
    // The gates first, one function per loop: fused with the cell's update, the loop needed
    // more constants than there are vector registers and reloaded them on every iteration.
    aif.iter_mut().chain(ao.iter_mut()).for_each(|v| *v = v.sigmoid());
    ag.iter_mut().for_each(|v| *v = v.tanh_fast());
    let (ai, af) = aif.split_at(h);
    for j in 0..h {
        let c = af[j] * cp[j] + ai[j] * ag[j];
        cn[j] = c;
        ho[j] = ao[j] * c.tanh_fast();
    }
}

/// The backward of [`forward_row`]: from `dh` (∂L/∂h_t) and the running `dc` (∂L/∂c_t from the
/// later steps, replaced by ∂L/∂c_{t-1}), `a` goes from the gates `[i|f|g|o]` to their
/// pre-activations' gradients; `tanh c_t` is recomputed from `ct` as forward computed it.
#[inline(never)]
fn backward_row<T: Float>(a: &mut [T], ct: &[T], cp: &[T], dh: &[T], dc: &mut [T]) {
    let h = dc.len();
    assert!(a.len() == 4 * h && ct.len() == h && cp.len() == h && dh.len() == h);
    let (ai, rest) = a.split_at_mut(h);
    let (af, rest) = rest.split_at_mut(h);
    let (ag, ao) = rest.split_at_mut(h);
    let one = T::one();
    for j in 0..h {
        let (i, f, g, o, t) = (ai[j], af[j], ag[j], ao[j], ct[j].tanh_fast());
        let dcj = dc[j] + dh[j] * o * (one - t * t);
        ai[j] = dcj * g * i * (one - i);
        af[j] = dcj * cp[j] * f * (one - f);
        ag[j] = dcj * i * (one - g * g);
        ao[j] = dh[j] * t * o * (one - o);
        dc[j] = dcj * f;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::Cell;

    #[test]
    fn parameter_counts_match_the_papers() {
        let count = |input, hidden, projection| Cell::Lstm(Lstm { input, hidden, projection }).param_len();
        // Later RAN paper, table 1: input 256, hidden 1024.
        assert_eq!(count(256, 1024, None), 5_251_072);
        // First RAN paper, PTB: two layers of 650 (input 650), and two of 1500.
        assert_eq!(count(650, 650, None), 3_385_200);
        assert_eq!(2 * count(650, 650, None), 6_770_400);
        assert_eq!(2 * count(1500, 1500, None), 36_024_000);
        // First RAN paper, billion word: input 512, hidden 2048, projection 512.
        assert_eq!(count(512, 2048, Some(512)), 9_453_568);
    }

    #[test]
    fn state_is_output_block_then_cell_block() {
        let cell = Lstm { input: 3, hidden: 4, projection: Some(2) };
        let s = cell.sizes();
        assert_eq!((s.output, s.rec, s.state), (2, 2, 6));
        let names: Vec<_> = cell.tensors().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["weight_ih", "weight_hh", "bias_ih", "bias_hh", "W_proj"]);
    }
}
