//! Input Switched Affine Network (Foerster, Gilmer, Sohl-Dickstein, Chorowski, Sussillo).
//!
//! ```text
//! h_t = W_{x_t} h_{t-1} + b_{x_t}       one H×H matrix and one bias per input symbol
//! y_t = h_t
//! ```
//! `x_t` is the input symbol itself (`seq.tokens`, `0 ≤ x_t < K`): there is no embedding and no
//! nonlinearity. Every row starts from the learned `h0` unless `seq.s0` is given. With
//! `biases: false` this is the purely linear ISAN of the paper's section 6.1 (no `b_x`). A
//! variational dropout mask, when given, multiplies `h_{t-1}` before the recurrent GEMM.
//!
//! Flat parameter layout (the checkpoint names): `W_x [K, H, H]` (`W_x[k]` is `[out, in]`),
//! `b_x [K, H]` (absent without biases), `h0 [H]`. The paper says nothing about initialisation,
//! so `W_x[k]` is initialised like any square weight (fan-in = fan-out = H).
//!
//! Batching. Before the time loop one stable counting sort orders the positions
//! `p = t·B + b` by their symbol and gives each position a *slot*: symbol `k` owns the slots
//! `start[k]..start[k+1]`, and within them its positions ascend in time. So at step `t` the rows
//! that read `k` hold one contiguous run of slots, and each run is one GEMM with `W_x[k]`. The
//! per-position buffers the weight gradients need are kept in slot order, which makes `dW_x[k]`
//! (and `db_x[k]`) one GEMM (one column sum) over every position where `k` occurred, with no
//! gather after the loop.
//!
//! Workspace use: `idx = [slot of each position (T·B) | position of each slot (T·B) |
//! start (K+1) | sort cursor (K)]`; `st` holds `h`; `rin[slot] = mask ∘ h_{t-1}` of the slot's
//! position (the GEMM input, gathered into slot order); `rp` is one group's GEMM output before it
//! is scattered to its rows (each thread's groups use the `rp` rows of that thread's batch rows,
//! see `cells::row_parts`). In backward `drp[slot]` is the gradient of `h_t` at the slot's
//! position, `ds` the running gradient of `h`, `dr` one group's gradient with respect to its
//! recurrent input (per thread, as `rp`). `xp`, `act`, `extra`, `tmp` are unused.

use std::ops::Range;

use super::{row_parts, split, split_mut, Grads, Shared, InitKind, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::gemm::{add_col_sums, linear_dw};
use crate::kernels::num::Float;

#[derive(Clone, Debug, PartialEq)]
pub struct Isan {
    /// `K`: number of input symbols (the vocabulary)
    pub symbols: usize,
    pub hidden: usize,
    /// `false`: the purely linear ISAN without biases `b_x`
    pub biases: bool,
}

impl Isan {
    fn lens(&self) -> [usize; 3] {
        let (k, h) = (self.symbols, self.hidden);
        [k * h * h, if self.biases { k * h } else { 0 }, h]
    }
}

/// Sort the positions of `tokens` (`[T·B]`) by symbol, stably, into `idx` laid out as
/// `[slot (n) | perm (n) | start (K+1) | cursor (K)]`.
fn sort_by_symbol(tokens: &[u32], symbols: usize, idx: &mut [u32]) {
    let n = tokens.len();
    let (slot, rest) = idx.split_at_mut(n);
    let (perm, rest) = rest.split_at_mut(n);
    let (start, cursor) = rest.split_at_mut(symbols + 1);
    start.fill(0);
    for &x in tokens {
        assert!((x as usize) < symbols, "isan: symbol {x} out of range (K = {symbols})");
        start[x as usize + 1] += 1;
    }
    for k in 0..symbols {
        start[k + 1] += start[k];
    }
    cursor.copy_from_slice(&start[..symbols]);
    for (p, &x) in tokens.iter().enumerate() {
        let s = cursor[x as usize];
        cursor[x as usize] += 1;
        slot[p] = s;
        perm[s as usize] = p as u32;
    }
}

/// A read-only view of the grouping [`sort_by_symbol`] left in `idx`.
struct Groups<'a> {
    tokens: &'a [u32],
    batch: usize,
    slot: &'a [u32],
    perm: &'a [u32],
    start: &'a [u32],
}

impl<'a> Groups<'a> {
    fn new(tokens: &'a [u32], batch: usize, symbols: usize, idx: &'a [u32]) -> Self {
        let n = tokens.len();
        Groups {
            tokens,
            batch,
            slot: &idx[..n],
            perm: &idx[n..2 * n],
            start: &idx[2 * n..2 * n + symbols + 1],
        }
    }

    /// The slots of every position that read symbol `k`.
    fn segment(&self, k: usize) -> Range<usize> {
        self.start[k] as usize..self.start[k + 1] as usize
    }

    /// The batch row of the position in slot `s` at step `t`.
    fn row(&self, s: usize, t: usize) -> usize {
        self.perm[s] as usize - t * self.batch
    }

    /// One `(k, slots)` per symbol `k` read at step `t` by the batch rows `rows`: those rows
    /// hold the consecutive slots `slots` (within a segment, slots ascend in position, so the
    /// rows of one range are a sub-run of the step's run). Each group is found at its first
    /// row: the row whose slot is not preceded, within `k`'s segment, by a slot of the same step
    /// and range. O(rows) per step.
    fn at_step(&self, t: usize, rows: Range<usize>) -> impl Iterator<Item = (usize, Range<usize>)> + '_ {
        let nb = self.batch;
        let (lo, hi) = ((t * nb + rows.start) as u32, (t * nb + rows.end) as u32);
        rows.filter_map(move |b| {
            let p = t * nb + b;
            let k = self.tokens[p] as usize;
            let seg = self.segment(k);
            let s = self.slot[p] as usize;
            if s > seg.start && self.perm[s - 1] >= lo {
                return None;
            }
            let mut e = s + 1;
            while e < seg.end && self.perm[e] < hi {
                e += 1;
            }
            Some((k, s..e))
        })
    }
}

/// The GPU twin (`isan.wgsl`, with `linear.wgsl`'s pointwise kernels): the symbol's bias
/// gathered into `xp`, its matrix's product a kernel per step (`switched`), the learned `h0`.
#[cfg(feature = "gpu")]
impl Isan {
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        let h = self.hidden;
        let [wx, bx, _] = self.lens();
        let source = concat!(include_str!("linear.wgsl"), include_str!("isan.wgsl"), include_str!("plain_start.wgsl"));
        Ok(super::gpu::GpuCell {
            own_start: Some(wx + bx),
            gather: self.biases.then_some(wx),
            switched: Some(0),
            ..super::gpu::GpuCell::square("isan", source, self.symbols, h)
        })
    }
}

impl Recurrent for Isan {
    fn sizes(&self) -> Sizes {
        let h = self.hidden;
        Sizes { input: self.symbols, hidden: h, output: h, state: h, rec: h }
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        let (k, h) = (self.symbols, self.hidden);
        let mut v = vec![TensorSpec::new("W_x", &[k, h, h], InitKind::Weight { fan_in: h, fan_out: h })];
        if self.biases {
            v.push(TensorSpec::new("b_x", &[k, h], InitKind::Bias));
        }
        v.push(TensorSpec::new("h0", &[h], InitKind::Bias));
        v
    }

    fn ws_dims(&self, _thin: bool) -> WsDims {
        let h = self.hidden;
        WsDims { state: h, rin: h, rp: h, idx: 2, idx_fixed: 2 * self.symbols + 1, ..Default::default() }
    }

    fn reads_tokens(&self) -> bool {
        true
    }

    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        let (nk, h) = (self.symbols, self.hidden);
        let (nt, nb) = (seq.steps, seq.batch);
        let n = nb * h;
        let [wx, bx, h0] = split(w, &self.lens())[..] else { unreachable!() };
        let tokens = seq.tokens.expect("isan reads token ids");
        assert_eq!(tokens.len(), nt * nb, "isan: tokens must be [T, B]");

        sort_by_symbol(tokens, nk, &mut ws.idx);
        ws.begin_forward(seq.s0);
        if seq.s0.is_none() {
            ws.st[..n].chunks_exact_mut(h).for_each(|row| row.copy_from_slice(h0));
        }
        let groups = Groups::new(tokens, nb, nk, &ws.idx);
        ws.pk[0].pack(wx, h, true, h, h, nk, h * h);
        let (pk, mask) = (&ws.pk[0], seq.mask);
        let (st, rin, rp, yy) = (Shared::new(&mut ws.st), Shared::new(&mut ws.rin), Shared::new(&mut ws.rp), Shared::new(y));
        // The output is the state again: copied only from the first step that is read.
        let from = seq.out_from;
        row_parts(nb, |p| {
            // SAFETY (every `at` below): this part reads and writes only the state, output and
            // `rp` rows of its own batch rows and the `rin` slots of their positions, which no
            // other part touches; all lie inside the workspace sized for (T, B).
            let rp = unsafe { rp.at(p.block(0, h)) };
            for t in 0..nt {
                for (k, slots) in groups.at_step(t, p.rows.clone()) {
                    // Gather the group's (masked) h_{t-1} rows into their slots.
                    let rin = unsafe { rin.at(slots.start * h..slots.end * h) };
                    for (s, r) in slots.clone().zip(rin.chunks_exact_mut(h)) {
                        let b = groups.row(s, t);
                        r.copy_from_slice(unsafe { st.at((t * nb + b) * h..(t * nb + b + 1) * h) });
                        if let Some(m) = mask {
                            r.iter_mut().zip(&m[b * h..(b + 1) * h]).for_each(|(v, &mv)| *v *= mv);
                        }
                    }
                    pk.gemm_serial(k, slots.len(), rin, h, rp, h, false);
                    // Scatter back with the symbol's bias.
                    for (i, s) in slots.enumerate() {
                        let b = groups.row(s, t);
                        let out = unsafe { st.at(((t + 1) * nb + b) * h..((t + 1) * nb + b + 1) * h) };
                        out.copy_from_slice(&rp[i * h..(i + 1) * h]);
                        if self.biases {
                            out.iter_mut().zip(&bx[k * h..(k + 1) * h]).for_each(|(v, &bv)| *v += bv);
                        }
                        if t >= from {
                            unsafe { yy.at((t * nb + b) * h..(t * nb + b + 1) * h) }.copy_from_slice(out);
                        }
                    }
                }
            }
        });
    }

    fn backward<T: Float>(&self, w: &[T], gr: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        let (nk, h) = (self.symbols, self.hidden);
        let (nt, nb) = (seq.steps, seq.batch);
        let n = nb * h;
        let [wx, _, _] = split(w, &self.lens())[..] else { unreachable!() };
        let [gwx, gbx, gh0] = &mut split_mut(gr, &self.lens())[..] else { unreachable!() };
        let tokens = seq.tokens.expect("isan reads token ids");

        // ds = ∂L/∂h_t through the later steps and the final state.
        ws.begin_backward(grads.ds_final);
        let groups = Groups::new(tokens, nb, nk, &ws.idx);
        ws.pk[0].pack(wx, h, false, h, h, nk, h * h);
        let (pk, mask, dy) = (&ws.pk[0], seq.mask, grads.dy);
        let (ds, drp, dr) = (Shared::new(&mut ws.ds), Shared::new(&mut ws.drp), Shared::new(&mut ws.dr));
        row_parts(nb, |p| {
            // SAFETY (every `at` below): this part reads and writes only the `ds` and `dr` rows
            // of its own batch rows and the `drp` slots of their positions (see forward).
            let dr = unsafe { dr.at(p.block(0, h)) };
            for t in (0..nt).rev() {
                let dy = &dy[t * n..(t + 1) * n];
                for (k, slots) in groups.at_step(t, p.rows.clone()) {
                    // The total gradient of h_t for the group's rows, into their slots.
                    let da = unsafe { drp.at(slots.start * h..slots.end * h) };
                    for (s, d) in slots.clone().zip(da.chunks_exact_mut(h)) {
                        let b = groups.row(s, t);
                        let (ds, dy) = (unsafe { ds.at(b * h..(b + 1) * h) }, &dy[b * h..(b + 1) * h]);
                        d.iter_mut().zip(ds.iter().zip(dy)).for_each(|(o, (&a, &c))| *o = a + c);
                    }
                    // h_{t-1} reaches the loss only through this GEMM (each row is in one group).
                    pk.gemm_serial(k, slots.len(), da, h, dr, h, false);
                    for (i, s) in slots.enumerate() {
                        let b = groups.row(s, t);
                        let ds = unsafe { ds.at(b * h..(b + 1) * h) };
                        ds.copy_from_slice(&dr[i * h..(i + 1) * h]);
                        if let Some(m) = mask {
                            ds.iter_mut().zip(&m[b * h..(b + 1) * h]).for_each(|(v, &mv)| *v *= mv);
                        }
                    }
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

        // Per symbol, one GEMM (and one column sum) over every position that read it.
        for k in 0..nk {
            let seg = groups.segment(k);
            if seg.is_empty() {
                continue;
            }
            let (da, rin) = (&ws.drp[seg.start * h..seg.end * h], &ws.rin[seg.start * h..seg.end * h]);
            linear_dw(seg.len(), h, h, da, rin, &mut gwx[k * h * h..(k + 1) * h * h]);
            if self.biases {
                add_col_sums(seg.len(), h, da, &mut gbx[k * h..(k + 1) * h]);
            }
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
        for biases in [true, false] {
            for symbols in [3, 4] {
                let cell = Cell::Isan(Isan { symbols, hidden: 3, biases });
                gradcheck::check_with_symbols(&cell, &[1, 2, 3], symbols as u64);
            }
        }
    }

    #[test]
    fn paper_parameter_count() {
        let cell = Cell::Isan(Isan { symbols: 27, hidden: 216, biases: true });
        assert_eq!(cell.param_len() + 27 * 216 + 27, 1_271_619);
    }

    /// The recurrence written plainly, one row at a time.
    fn reference(cell: &Isan, w: &[f64], tokens: &[u32], s0: Option<&[f64]>, mask: Option<&[f64]>, nb: usize) -> Vec<f64> {
        let (nk, h) = (cell.symbols, cell.hidden);
        let wx = &w[..nk * h * h];
        let bx = &w[nk * h * h..nk * h * h + if cell.biases { nk * h } else { 0 }];
        let h0 = &w[w.len() - h..];
        let mut state: Vec<f64> = match s0 {
            Some(s) => s.to_vec(),
            None => (0..nb).flat_map(|_| h0.iter().copied()).collect(),
        };
        let mut out = Vec::new();
        for toks in tokens.chunks(nb) {
            let mut next = vec![0.0; nb * h];
            for b in 0..nb {
                let k = toks[b] as usize;
                for i in 0..h {
                    let mut v = if cell.biases { bx[k * h + i] } else { 0.0 };
                    for j in 0..h {
                        let m = mask.map_or(1.0, |m| m[b * h + j]);
                        v += wx[(k * h + i) * h + j] * m * state[b * h + j];
                    }
                    next[b * h + i] = v;
                }
            }
            state = next;
            out.extend_from_slice(&state);
        }
        out
    }

    #[test]
    fn grouped_forward_matches_per_row_reference() {
        let mut rng = Rng::new(7);
        let (nt, nb, nk, h) = (9, 13, 5, 6);
        for biases in [true, false] {
            let cell = Isan { symbols: nk, hidden: h, biases };
            let wrap = Cell::Isan(cell.clone());
            let w: Vec<f64> = (0..wrap.param_len()).map(|_| rng.range(-0.5, 0.5)).collect();
            // Symbol 3 never occurs.
            let tokens: Vec<u32> = (0..nt * nb).map(|_| [0, 1, 2, 4][rng.below(4) as usize]).collect();
            let s0: Vec<f64> = (0..nb * h).map(|_| rng.range(-1.0, 1.0)).collect();
            let mask: Vec<f64> = (0..nb * h).map(|_| rng.range(0.0, 2.0)).collect();
            for (given, masked) in [(false, false), (true, false), (true, true), (false, true)] {
                let s0 = given.then_some(&s0[..]);
                let mask = masked.then_some(&mask[..]);
                let want = reference(&cell, &w, &tokens, s0, mask, nb);
                let seq = Seq { steps: nt, batch: nb, x: &[], tokens: Some(&tokens), s0, mask, emb: None, out_from: 0 };
                let mut ws = Workspace::default();
                let mut y = vec![0.0; nt * nb * h];
                wrap.forward(&w, &seq, &mut ws, &mut y);
                for (a, b) in y.iter().zip(&want) {
                    assert!((a - b).abs() < 1e-12, "biases {biases} given {given} masked {masked}: {a} vs {b}");
                }
                assert_eq!(ws.final_state(), &y[(nt - 1) * nb * h..]);
            }
        }
    }

    #[test]
    fn continuing_from_the_final_state_equals_one_long_run() {
        let mut rng = Rng::new(11);
        let (nt, t1, nb, nk, h) = (10, 4, 6, 4, 5);
        let cell = Cell::Isan(Isan { symbols: nk, hidden: h, biases: true });
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
