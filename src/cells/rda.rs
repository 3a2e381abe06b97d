//! Recurrent Discounted Attention unit (Maginnis & Richemond, "Efficiently applying attention to
//! sequential data with the Recurrent Discounted Attention unit", sections 3–5), and the
//! Recurrent Weighted Average (Ostmeyer & Cowell) as its preset without the discount
//! ([`Rda::rwa`], as the RDA paper restates it in its section 3).
//!
//! ```text
//! u_t = W_u x_t + b_u
//! g_t = W_g [x_t, h_{t-1}] + b_g
//! z_t = u_t ∘ tanh(g_t)
//! a_t = f_a(W_a [x_t, h_{t-1}] + b_a)        f_a ∈ {exp, relu, softplus, sigmoid}
//! γ_t = σ(W_γ [x_t, h_{t-1}] + b_γ)
//! n_t = n_{t-1} ∘ γ_t + z_t ∘ a_t
//! d_t = d_{t-1} ∘ γ_t + a_t
//! h_t = f_h(n_t / d_t)                       f_h ∈ {identity, tanh}
//! o_t = f_o(h_t)                             f_o ∈ {identity, tanh}, passed upward
//! ```
//! starting from `n_0 = d_0 = 0`, `h_0 = f_h(s0)` with a learned `s0`. The recurrence reads `h`
//! (after the variational dropout mask, when one is given); the layer above reads `o`.
//!
//! The RWA is the same cell with `γ_t = 1` (no `W_γ`, `b_γ`), exp attention, `f_h = tanh` and
//! `f_o = identity`:
//!
//! ```text
//! n_t = n_{t-1} + z_t ∘ a_t,   d_t = d_{t-1} + a_t,   a_t = exp(W_a [x_t, h_{t-1}] + b_a)
//! h_t = tanh(n_t / d_t)        (passed upward as it is)
//! ```
//! Everything below holds for it with `ln γ = 0`; its parameters are the RDA's without
//! `W_gamma` and `b_gamma`, and one block of its `act` tape stays unused.
//!
//! # Stable form
//!
//! Write every attention as `a = e^λ` with the log-attention `λ = ln f_a(p)` of its logit `p`
//! (`λ = p` for exp, `ln σ(p)` for sigmoid, `ln softplus(p)` for softplus, `ln p` for relu with
//! `p > 0`; a relu with `p ≤ 0` adds nothing). Per unit we keep a reference `m` and store
//! `n' = n·e^{-m}`, `d' = d·e^{-m}`; the ratio `n/d = n'/d'` does not depend on `m`. With
//! `c_t = m_{t-1} + ln γ_t` (the previous reference discounted along with `n` and `d`; `ln γ`
//! is computed as `min(p_γ, 0) − ln(1 + e^{−|p_γ|})`, finite for every logit):
//!
//! ```text
//! relu with p ≤ 0:          m_t = c_t,    n'_t = n'_{t-1},                 d'_t = d'_{t-1}
//! else if d'_{t-1} = 0:     m_t = λ_t,    n'_t = z_t,                      d'_t = 1
//! else:                     m_t = max(c_t, λ_t)
//!                           n'_t = e^{c_t−m_t} n'_{t-1} + e^{λ_t−m_t} z_t
//!                           d'_t = e^{c_t−m_t} d'_{t-1} + e^{λ_t−m_t}
//! ```
//! Both exponents are ≤ 0 and one of them is exactly 0, so nothing overflows and, once a step
//! has contributed, `d' ≥ min(1, d'_0)`: `n'/d'` never becomes `0/0` and the division never
//! amplifies. The maximum is initialised by the first contributing step (no −∞ sentinel): from
//! the cell's own initial state `d' = 0`, so the first step sets `m = λ`.
//!
//! **Zero denominator.** `d' = 0` happens only for relu attention that has given zero weight
//! to every step so far (from a state with `d' = 0`). The weighted average of nothing is then
//! undefined and the unit keeps its previous hidden value: `h_t = h_{t-1}` (from the cell's own
//! initial state, `f_h(s0)`), and in backward the gradient of `h_t` passes unchanged to
//! `h_{t-1}`.
//!
//! Backward differentiates the forward map exactly, including the reference `m` (a `max`,
//! differentiated as the branch taken; the loss may read the carried `m`, `n'` and `d'`). The
//! hidden values `h` do not depend on `m` at all, so the `m` terms cancel for them.
//!
//! # State
//!
//! `S = 4H`, four `[B, H]` blocks `[n' | d' | m | h]`: the scaled numerator and denominator,
//! the reference and the hidden value. Passing a final state as the next window's `s0`
//! continues the sequence exactly. [`Recurrent::sanitize_state`] makes an arbitrary state valid
//! by setting `d' ← 0.5 + |d'|` (every other value is allowed as it is).
//!
//! # Layout
//!
//! Flat parameters: `W_g, W_a, W_gamma` (each `[H, D+H]`, adjacent so that they form one
//! `[3H, D+H]` matrix whose first `D` columns multiply `x` and last `H` multiply `h`),
//! `W_u [H, D]`, `b_u, b_g, b_a, b_gamma` (each `[H]`, adjacent: the bias of the `[u|g|a|γ]`
//! pre-activations), `s0 [H]`.
//!
//! Workspace use: `xp[t] = [u | p_g | p_a | p_γ]` per row (`[B, 4H]`): the input projections of
//! all steps (two GEMMs over all `T·B` rows, `W_u` and the x-columns of the stacked gates, then
//! the biases), to which each step's recurrent GEMM adds the h-columns' part, so it ends as the
//! pre-activations; backward writes their gradients over them. With a narrow input (`rin_width`:
//! at most `FOLD_MAX` features given as values: the tasks' inputs, a `rnnlens.torch` layer's) only `u` is projected
//! beforehand: `rin[t]` carries `[h_{t-1} | x_t | 1]` and the step's GEMM with the packed
//! `[W_{·h} | W_{·x} | b]` writes the gates' pre-activations whole, and in backward one GEMM
//! `dxpᵀ · rin` gives the gates' weights and biases (`rec_input_backward`'s fold, as in the
//! LSTM). `act[t] = σ` per row (`[B, H]`), the tape: the step's `α = e^{c−m}`, `β = e^{λ−m}`
//! and `κ = 1` when `m_t` is `λ_t`, in one float: one of α and β is 1 (both exponents ≤ 0, one
//! of them 0; a silent relu has α = 1, β = 0), so `σ = −α` when `κ = 1` (then `β = 1`) and
//! `σ = β` otherwise (then `α = 1`), its sign bit telling which, exactly for zeros too (`−0`).
//! Everything else backward needs it computes again from what it reads anyway, with forward's
//! functions and so forward's bits: `tanh g`, `λ' = dλ/dp_a` and `1 − γ` from the
//! pre-activations in `xp`, `o = f_o(h)` from `h` in `st`. Each of those is a stream of `T·B·H`
//! floats the forward would write and the backward read back from memory, which is what these
//! loops wait on at the task shape, against an exponential or a division per element
//! (docs/benchmarks.md); the GPU's tape (`rda.wgsl`) keeps them. (`σ` stays: recomputing it
//! needs `λ`, a library logarithm for relu and softplus attention, and `m_{t-1}`.)
//! `st[t]` is the state before step `t`, `rin[t] = mask ∘
//! h_{t-1}` (then `x_t` and 1 with a thin input), `tmp` holds the step's exponentials
//! `[e^{−2|p_g|} | e^{−|p_γ|} | e^{−|p_a|}]` (one `exp_inplace` per step; the last block only
//! for sigmoid and softplus attention), `ds` is the running state gradient and `dr` the gradient
//! of the recurrent input.

use super::{Outputs, fill_rin_rows, folds_input, pack_folded, input_rows, project_input, rin_width, row_parts, split, Shared, split_mut, Grads, InitKind, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::gemm::{add_col_sums, gemm, linear_dw_db_strided};
use crate::kernels::num::{Act, Float, Squash};

/// The attention function `f_a`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    Exp,
    Relu,
    Softplus,
    Sigmoid,
}

impl Attention {
    pub fn name(self) -> &'static str {
        match self {
            Attention::Exp => "exp",
            Attention::Relu => "relu",
            Attention::Softplus => "softplus",
            Attention::Sigmoid => "sigmoid",
        }
    }
    pub fn parse(s: &str) -> Option<Attention> {
        [Attention::Exp, Attention::Relu, Attention::Softplus, Attention::Sigmoid].into_iter().find(|a| a.name() == s)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rda {
    pub input: usize,
    pub hidden: usize,
    pub attention: Attention,
    /// `f_h`: identity or tanh
    pub hidden_fn: crate::kernels::num::Act,
    /// `f_o`: identity or tanh
    pub output_fn: crate::kernels::num::Act,
    /// whether `γ_t` discounts the past (the RDA); without it, the RWA's running sums
    pub discount: bool,
}

impl Rda {
    /// An RDA of attention `f_a`, hidden function `f_h` and output function `f_o`.
    pub fn new(input: usize, hidden: usize, attention: Attention, hidden_fn: Act, output_fn: Act) -> Rda {
        Rda { input, hidden, attention, hidden_fn, output_fn, discount: true }
    }

    /// The Recurrent Weighted Average: no discount, exp attention, `f_h = tanh`, `f_o = identity`.
    pub fn rwa(input: usize, hidden: usize) -> Rda {
        Rda { input, hidden, attention: Attention::Exp, hidden_fn: Act::Tanh, output_fn: Act::Identity, discount: false }
    }

    /// The `cell` type of its layers in `config.json`.
    pub fn type_name(&self) -> &'static str {
        if self.discount { "rda" } else { "rwa" }
    }

    fn kernel(&self) -> Kernel {
        Kernel {
            d: self.input,
            h: self.hidden,
            att: self.attention,
            fh: self.hidden_fn,
            fo: self.output_fn,
            discount: self.discount,
        }
    }
}

#[cfg(feature = "gpu")]
impl Rda {
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        self.kernel().gpu_cell()
    }
}

impl Recurrent for Rda {
    fn sizes(&self) -> Sizes {
        self.kernel().sizes()
    }
    fn tensors(&self) -> Vec<TensorSpec> {
        self.kernel().tensors()
    }
    fn ws_dims(&self, _thin: bool) -> WsDims {
        self.kernel().ws_dims()
    }
    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        self.kernel().forward(w, seq, ws, y)
    }
    fn backward<T: Float>(&self, w: &[T], g: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        self.kernel().backward(w, g, seq, ws, grads)
    }
    fn sanitize_state<T: Float>(&self, s: &mut [T], batch: usize) {
        self.kernel().sanitize_state(s, batch)
    }
    fn trace<T: Float>(&self, ws: &Workspace<T>) -> Vec<super::Trace<T>> {
        self.kernel().trace(ws)
    }
}

/// The RDA/RWA kernel. The RWA is `discount: false` (no `W_gamma`, `b_gamma`: `γ = 1`), exp
/// attention, `f_h = tanh`, `f_o = identity`. Flat layout `[W_g; W_a; (W_gamma)]`, `W_u`,
/// `[b_u; b_g; b_a; (b_gamma)]`, `s0`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Kernel {
    pub d: usize,
    pub h: usize,
    pub att: Attention,
    pub fh: Act,
    pub fo: Act,
    pub discount: bool,
}

/// The GPU twin (`rda.wgsl`) of the RDA and the RWA: `xp[t] = [u | p_g | p_a | p_γ]` from two
/// input blocks (`W_u`, and the `x` columns of the stacked gate matrices), the recurrent GEMM
/// adding the `h` columns' part to the gates; the tape in `act`; the cell's own start from `s0`.
#[cfg(feature = "gpu")]
impl Kernel {
    pub(crate) fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        let (d, h, ng) = (self.d, self.h, self.gates());
        let [wst, wu, b, _] = self.lens();
        let bit = |on: bool, v: u32| if on { v } else { 0 };
        let att = match self.att {
            Attention::Exp => 0,
            Attention::Sigmoid => 1,
            Attention::Relu => 2,
            Attention::Softplus => 3,
        };
        let opts = att | bit(self.fh == Act::Tanh, 4) | bit(self.fo == Act::Tanh, 8) | bit(self.discount, 16);
        use super::gpu::InputBlock;
        Ok(super::gpu::GpuCell {
            name: "rda",
            source: include_str!("rda.wgsl"),
            input: d,
            hidden: h,
            xp: (ng + 1) * h,
            rec_col: h,
            rec_width: ng * h,
            rin: h,
            state: 4 * h,
            out: h,
            inputs: vec![
                InputBlock { col: 0, rows: h, w: wst, ld: d, biases: vec![wst + wu] },
                InputBlock { col: h, rows: ng * h, w: 0, ld: d + h, biases: vec![wst + wu + h] },
            ],
            w_rec: d,
            rec_ld: d + h,
            // rda.wgsl's tape `[tanh g | λ' | 1−γ | σ | o]` (its `t_width`): λ' for attention
            // other than exp, 1−γ with the discount, o with f_o = tanh. (The CPU's tape is σ
            // alone: its backward computes the others again.)
            act: (2 + (self.att != Attention::Exp) as usize + self.discount as usize + (self.fo == Act::Tanh) as usize) * h,
            own_start: Some(wst + wu + b),
            opts,
            threads: h,
            ..Default::default()
        })
    }
}

impl Kernel {
    /// The state's blocks after every step, `n` and `d` in their scaled form (`n = n'·e^m`,
    /// `d = d'·e^m`; `h = f_h(n/d)` needs only the ratio), the reference `m`, the hidden value
    /// `h` (before `f_o`), and the RDA's discount `γ`.
    pub(crate) fn trace<T: Float>(&self, ws: &Workspace<T>) -> Vec<super::Trace<T>> {
        let h = self.h;
        let mut t: Vec<_> = ["n", "d", "m", "h"].iter().enumerate().map(|(k, &name)| ws.trace_state(name, k * h..(k + 1) * h)).collect();
        if self.discount {
            // γ = 1 − (1 − γ) from its logit, as forward and backward compute 1 − γ.
            let mut g = ws.trace("gamma", &ws.xp, ws.dims.xp, 3 * h..4 * h);
            g.values.iter_mut().for_each(|v| *v = T::one() - log_sigmoid(*v, (-v.abs()).exp_fast()).1);
            t.push(g);
        }
        t
    }

    /// The tensors in flat-layout order: the `[H, D+H]` gate matrices side by side (one GEMM),
    /// then `W_u`, the biases and `s0`; the discount's `W_gamma`, `b_gamma` only for the RDA.
    pub(crate) fn tensors(&self) -> Vec<TensorSpec> {
        let (d, h) = (self.d, self.h);
        let wxh = InitKind::Weight { fan_in: d + h, fan_out: h };
        let mut v = vec![TensorSpec::new("W_g", &[h, d + h], wxh), TensorSpec::new("W_a", &[h, d + h], wxh)];
        if self.discount {
            v.push(TensorSpec::new("W_gamma", &[h, d + h], wxh));
        }
        v.extend([
            TensorSpec::new("W_u", &[h, d], InitKind::Weight { fan_in: d, fan_out: h }),
            TensorSpec::new("b_u", &[h], InitKind::Bias),
            TensorSpec::new("b_g", &[h], InitKind::Bias),
            TensorSpec::new("b_a", &[h], InitKind::Bias),
        ]);
        if self.discount {
            v.push(TensorSpec::new("b_gamma", &[h], InitKind::GateBias));
        }
        v.push(TensorSpec::new("s0", &[h], InitKind::Bias));
        v
    }

    /// Number of gate blocks reading `[x, h]`: g and a, plus γ with a discount.
    fn gates(&self) -> usize {
        if self.discount {
            3
        } else {
            2
        }
    }
    fn lens(&self) -> [usize; 4] {
        let (d, h, g) = (self.d, self.h, self.gates());
        [g * h * (d + h), h * d, (g + 1) * h, h]
    }
    /// Whether the attention needs `e^{−|p_a|}`.
    fn att_exp(&self) -> bool {
        matches!(self.att, Attention::Sigmoid | Attention::Softplus)
    }
    /// Offsets of `e^{−|p_γ|}` and `e^{−|p_a|}` in a `tmp` row.
    fn tmp_offsets(&self) -> (usize, usize) {
        let h = self.h;
        (h, if self.discount { 2 * h } else { h })
    }

    pub(super) fn sizes(&self) -> Sizes {
        Sizes { input: self.d, hidden: self.h, output: self.h, state: 4 * self.h, rec: self.h }
    }

    pub(super) fn ws_dims(&self) -> WsDims {
        let h = self.h;
        WsDims {
            xp: (self.gates() + 1) * h,
            act: h,
            state: 4 * h,
            rin: rin_width(h, self.d),
            rp: 0,
            extra: 0,
            tmp: h * (1 + self.discount as usize + self.att_exp() as usize),
            ..Default::default()
        }
    }

    pub(super) fn sanitize_state<T: Float>(&self, s: &mut [T], batch: usize) {
        let bh = batch * self.h;
        for v in &mut s[bh..2 * bh] {
            *v = T::c(0.5) + v.abs();
        }
    }

    pub(super) fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        let (d, h, ng) = (self.d, self.h, self.gates());
        let (nt, nb) = (seq.steps, seq.batch);
        let (wp, nx, bh, ns) = ((ng + 1) * h, d + h, nb * h, nb * 4 * h);
        let (tw, (o_gam, o_att)) = (ws.dims.tmp, self.tmp_offsets());
        let (att, fh, fo, disc) = (self.att, self.fh, self.fo, self.discount);
        let [wst, wu, b, s0] = split(w, &self.lens())[..] else { unreachable!() };
        let two = T::c(2.0);

        // Input projections of all steps: u from W_u, the gates from the x-columns of the stack.
        let (ri, fold) = (ws.dims.rin, folds_input(seq, d));
        project_input(seq, (d, h), (wu, d, true), &[&b[..h]], (&mut ws.xp, wp), &mut ws.tok);
        if fold {
            // A thin input rides in `rin` as `[h | x | 1]`, so one packed `[W_{·h} | W_{·x} | b]`
            // gives each step's gate pre-activations whole: no pass writing the gates' input
            // projections of every step first (C3: 200 MB of the RWA's) for the steps to read
            // back (docs/benchmarks.md, "The RDA's thin input in its step product").
            pack_folded(&mut ws.pk[0], &mut ws.tok, (ng * h, ri), |j| (&wst[j * nx + d..(j + 1) * nx], Some(&wst[j * nx..j * nx + d]), b[h + j]));
        } else {
            project_input(seq, (d, ng * h), (wst, nx, true), &[&b[h..]], (&mut ws.xp[h..], wp), &mut ws.tok);
            ws.pk[0].pack(&wst[d..], nx, true, ng * h, h, 1, 0);
        }

        ws.begin_forward(seq.s0);
        if seq.s0.is_none() {
            // Own initial state: n' = d' = m = 0, h = f_h(s0) on every row.
            for row in ws.st[3 * bh..4 * bh].chunks_exact_mut(h) {
                row.iter_mut().zip(s0).for_each(|(o, &s)| *o = fh.f(s));
            }
        }
        fill_rin_rows(&mut ws.rin[..nb * ri], (h, ri), &ws.st[3 * bh..4 * bh], seq.mask, fold.then(|| &seq.x[..nb * d]));

        let (pk, mask) = (&ws.pk, seq.mask);
        let (xp_all, st, act_all, rin_all, tmp_all, yy) =
            (Shared::new(&mut ws.xp), Shared::new(&mut ws.st), Shared::new(&mut ws.act), Shared::new(&mut ws.rin), Shared::new(&mut ws.tmp), Outputs::new(y, &mut ws.y_scratch, seq, h));
        row_parts(nb, |part| {
            let m = part.len();
            let q = |t: usize, k: usize| part.block(t * ns + k * bh, h);
            // SAFETY (every `at` below): each part reads and writes only its own batch rows of
            // each step, inside the buffers sized for (T, B).
            let tmp = unsafe { tmp_all.at(part.block(0, tw)) };
            for t in 0..nt {
                let xp = unsafe { xp_all.at(part.at(t, wp)) };
                // Recurrent part of the gates: p += W_{·h} h_{t-1} (with a thin input, p = the
                // whole pre-activation from [h | x | 1]).
                pk[0].gemm_serial(0, m, unsafe { rin_all.at(part.at(t, ri)) }, ri, &mut xp[h..], wp, !fold);
                let xp = &*xp;

                // The exponentials that depend only on the pre-activations, vectorised (zipped
                // blocks: indexed at `h + j`, `o_gam + j`, these loops ran a scalar at a time).
                let neg_abs = |e: &mut [T], p: &[T], k: T| e.iter_mut().zip(p).for_each(|(o, &v)| *o = -k * v.abs());
                for (p, e) in xp.chunks_exact(wp).zip(tmp.chunks_exact_mut(tw)) {
                    neg_abs(&mut e[..h], &p[h..2 * h], two);
                    if disc {
                        neg_abs(&mut e[o_gam..o_gam + h], &p[3 * h..4 * h], T::one());
                    }
                    if self.att_exp() {
                        neg_abs(&mut e[o_att..o_att + h], &p[2 * h..3 * h], T::one());
                    }
                }
                T::exp_inplace(tmp);

                let sp = unsafe { [st.at(q(t, 0)), st.at(q(t, 1)), st.at(q(t, 2)), st.at(q(t, 3))] };
                let [sn_n, sn_d, sn_m, sn_h] = unsafe { [st.at(q(t + 1, 0)), st.at(q(t + 1, 1)), st.at(q(t + 1, 2)), st.at(q(t + 1, 3))] };
                let act = unsafe { act_all.at(part.at(t, h)) };
                let y_t = unsafe { yy.rows(&part, t) };
                for bi in 0..m {
                    let (p, e) = (&xp[bi * wp..(bi + 1) * wp], &tmp[bi * tw..(bi + 1) * tw]);
                    let row = bi * h..(bi + 1) * h;
                    let prev = [&sp[0][row.clone()], &sp[1][row.clone()], &sp[2][row.clone()]];
                    let (nn, dd) = (&mut sn_n[row.clone()], &mut sn_d[row.clone()]);
                    let step = (p, e, (o_gam, o_att), prev, nn, dd, &mut sn_m[row.clone()], &mut act[row.clone()]);
                    match (att, disc) {
                        (Attention::Exp, false) => accumulate_row::<T, EXP, false>(step),
                        (Attention::Exp, true) => accumulate_row::<T, EXP, true>(step),
                        (Attention::Sigmoid, false) => accumulate_row::<T, SIGMOID, false>(step),
                        (Attention::Sigmoid, true) => accumulate_row::<T, SIGMOID, true>(step),
                        (Attention::Relu, false) => accumulate_row::<T, RELU, false>(step),
                        (Attention::Relu, true) => accumulate_row::<T, RELU, true>(step),
                        (Attention::Softplus, false) => accumulate_row::<T, SOFTPLUS, false>(step),
                        (Attention::Softplus, true) => accumulate_row::<T, SOFTPLUS, true>(step),
                    }
                    let (nn, dd, hp) = (&sn_n[row.clone()], &sn_d[row.clone()], &sp[3][row.clone()]);
                    let (hv, o) = (&mut sn_h[row.clone()], &mut y_t[row.clone()]);
                    crate::with_act!(fh, fh => crate::with_act!(fo, fo => output_row(fh, fo, nn, dd, hp, hv, o)));
                }
                if t + 1 < nt {
                    let next = unsafe { rin_all.at(part.at(t + 1, ri)) };
                    fill_rin_rows(next, (h, ri), sn_h, mask.map(|mk| &mk[part.block(0, h)]), fold.then(|| &seq.x[part.at(t + 1, d)]));
                }
            }
        });
    }

    pub(super) fn backward<T: Float>(
        &self,
        w: &[T],
        gr: &mut [T],
        seq: &Seq<T>,
        ws: &mut Workspace<T>,
        grads: Grads<T>,
    ) {
        let (d, h, ng) = (self.d, self.h, self.gates());
        let (nt, nb) = (seq.steps, seq.batch);
        let (wp, nx, bh, ns) = ((ng + 1) * h, d + h, nb * h, nb * 4 * h);
        let (att, fh, fo, disc) = (self.att, self.fh, self.fo, self.discount);
        let [wst, wu, _, s0] = split(w, &self.lens())[..] else { unreachable!() };
        let [gwst, gwu, gb, gs0] = &mut split_mut(gr, &self.lens())[..] else { unreachable!() };

        // ds = [dn' | dd' | dm | dh]: gradients of the state after the current step.
        ws.begin_backward(grads.ds_final);
        ws.pk[0].pack(&wst[d..], nx, false, h, ng * h, 1, 0);

        let (pk, mask, dy_all) = (&ws.pk, seq.mask, grads.dy);
        let (act_all, st) = (&ws.act, &ws.st);
        // The pre-activations in `xp`, their gradients written over them.
        let (xp_all, ds_all, dr_all) = (Shared::new(&mut ws.xp), Shared::new(&mut ws.ds), Shared::new(&mut ws.dr));
        row_parts(nb, |part| {
            let m = part.len();
            let q = |t: usize, k: usize| part.block(t * ns + k * bh, h);
            // SAFETY (every `at` below): each part reads and writes only its own batch rows.
            let [ds_n, ds_d, ds_m, ds_h] = unsafe { [0, 1, 2, 3].map(|k| ds_all.at(part.block(k * bh, h))) };
            let dr_part = unsafe { dr_all.at(part.block(0, h)) };
            for t in (0..nt).rev() {
                let xp = unsafe { xp_all.at(part.at(t, wp)) };
                let act = &act_all[part.at(t, h)];
                let (sp_n, sp_d) = (&st[q(t, 0)], &st[q(t, 1)]);
                let (sn_n, sn_d, sn_h) = (&st[q(t + 1, 0)], &st[q(t + 1, 1)], &st[q(t + 1, 3)]);
                let dy = &dy_all[part.at(t, h)];
                for bi in 0..m {
                    let p = &mut xp[bi * wp..(bi + 1) * wp];
                    let row = bi * h..(bi + 1) * h;
                    let prev = [&sp_n[row.clone()], &sp_d[row.clone()]];
                    let next = [&sn_n[row.clone()], &sn_d[row.clone()], &sn_h[row.clone()]];
                    let (sg, dr, dy) = (&act[row.clone()], &dr_part[row.clone()], &dy[row.clone()]);
                    let ds = [&mut ds_n[row.clone()], &mut ds_d[row.clone()], &mut ds_m[row.clone()], &mut ds_h[row.clone()]];
                    let step = (p, sg, prev, next, dr, dy, ds);
                    crate::with_act!(fh, fh => crate::with_act!(fo, fo => match (att, disc) {
                        (Attention::Exp, false) => backward_row::<T, EXP, false>(fh, fo, step),
                        (Attention::Exp, true) => backward_row::<T, EXP, true>(fh, fo, step),
                        (Attention::Sigmoid, false) => backward_row::<T, SIGMOID, false>(fh, fo, step),
                        (Attention::Sigmoid, true) => backward_row::<T, SIGMOID, true>(fh, fo, step),
                        (Attention::Relu, false) => backward_row::<T, RELU, false>(fh, fo, step),
                        (Attention::Relu, true) => backward_row::<T, RELU, true>(fh, fo, step),
                        (Attention::Softplus, false) => backward_row::<T, SOFTPLUS, false>(fh, fo, step),
                        (Attention::Softplus, true) => backward_row::<T, SOFTPLUS, true>(fh, fo, step),
                    }));
                }
                // Gradient of the recurrent input mask ∘ h_{t-1}, then of h_{t-1} itself.
                pk[0].gemm_serial(0, m, &xp[h..], wp, dr_part, h, false);
                if let Some(mk) = mask {
                    dr_part.iter_mut().zip(&mk[part.block(0, h)]).for_each(|(v, &mv)| *v *= mv);
                }
            }
        });

        // h_0 also fed the first step's gates.
        ws.ds[3 * bh..4 * bh].iter_mut().zip(&ws.dr).for_each(|(o, &v)| *o += v);
        match seq.s0 {
            None => {
                // h_0 = f_h(s0) on every row.
                for row in ws.ds[3 * bh..4 * bh].chunks_exact(h) {
                    for ((gs, &dv), &s) in gs0.iter_mut().zip(row).zip(s0) {
                        *gs += dv * fh.df_from_y(fh.f(s));
                    }
                }
            }
            Some(_) => {
                if let Some(ds0) = grads.ds0 {
                    ds0.copy_from_slice(&ws.ds);
                }
            }
        }

        // Weight gradients: one GEMM each over all T·B rows.
        let (m, ri) = (nt * nb, ws.dims.rin);
        if folds_input(seq, d) {
            // `rin` carries [h | x | 1]: the gates' recurrent and input weights and their biases
            // from one GEMM, u's weights and bias from one pass over its block.
            let c = &mut ws.tok;
            c.resize(ng * h * ri, T::zero());
            gemm(ng * h, ri, m, &ws.xp[h..], wp, true, &ws.rin, ri, false, &mut c[..ng * h * ri], ri, false);
            for (j, row) in c.chunks_exact(ri).take(ng * h).enumerate() {
                gwst[j * nx + d..(j + 1) * nx].iter_mut().zip(&row[..h]).for_each(|(o, &v)| *o += v);
                gwst[j * nx..j * nx + d].iter_mut().zip(&row[h..h + d]).for_each(|(o, &v)| *o += v);
                gb[h + j] += row[h + d];
            }
            linear_dw_db_strided(m, (h, wp), d, &ws.xp, seq.x, gwu, &mut [&mut gb[..h]]);
        }
        let inp = input_rows(seq, d, &ws.xp, wp, &mut ws.tok);
        if !folds_input(seq, d) {
            gemm(h, d, inp.rows, inp.g, wp, true, inp.x, d, false, gwu, d, true);
            gemm(ng * h, d, inp.rows, &inp.g[h..], wp, true, inp.x, d, false, gwst, nx, true);
            gemm(ng * h, h, m, &ws.xp[h..], wp, true, &ws.rin, ri, false, &mut gwst[d..], nx, true);
            add_col_sums(inp.rows, wp, inp.g, gb);
        }
        if let Some(dx) = grads.dx {
            gemm(inp.rows, d, h, inp.g, wp, false, wu, d, false, dx, d, inp.add);
            gemm(inp.rows, d, ng * h, &inp.g[h..], wp, false, wst, nx, false, dx, d, true);
        }
    }
}

// The attention function as a constant, so that each row loop is compiled without a branch on it.
const EXP: u8 = 0;
const SIGMOID: u8 = 1;
const RELU: u8 = 2;
const SOFTPLUS: u8 = 3;

/// `tanh g` from its logit `p_g` and `e = e^{−2|p_g|}` (finite for every logit); forward and
/// backward both compute it this way, so backward gets forward's bits without a tape block.
#[inline(always)]
fn tanh_gate<T: Float>(pg: T, e: T) -> T {
    let one = T::one();
    ((one - e) / (one + e)).copysign(pg)
}

/// `(ln σ(p), 1 − σ(p))` from `e = e^{−|p|}`: the log of a sigmoid and its derivative, finite
/// for every logit (the discount's `ln γ` and `1 − γ`; the sigmoid attention's `λ` and `λ'`).
#[inline(always)]
fn log_sigmoid<T: Float>(p: T, e: T) -> (T, T) {
    let (zero, one) = (T::zero(), T::one());
    let inv = one / (one + e);
    (p.min(zero) - e.ln1p_unit(), if p >= zero { e * inv } else { inv })
}

/// The log-attention of the logit `p_a`: `(contributes, λ, λ' = dλ/dp_a)` (`contributes` is
/// false for a silent relu), with `e = e^{−|p_a|}` for sigmoid and softplus. Backward calls it
/// for `λ'` alone (its logarithms then go unused and are not computed).
#[inline(always)]
fn attention<T: Float, const ATT: u8>(pa: T, e: T) -> (bool, T, T) {
    let (zero, one) = (T::zero(), T::one());
    match ATT {
        EXP => (true, pa, one),
        SIGMOID => {
            let (lam, lp) = log_sigmoid(pa, e);
            (true, lam, lp)
        }
        RELU => {
            if pa > zero {
                (true, pa.ln(), one / pa)
            } else {
                (false, zero, zero)
            }
        }
        _ => {
            if pa < T::c(-20.0) {
                // ln ln(1+e^p) = p − e^p/2 + O(e^{2p})
                let hf = T::c(0.5) * e;
                (true, pa - hf, one - hf)
            } else {
                let sp = pa.max(zero) + e.ln1p_unit();
                let sg = if pa >= zero { one / (one + e) } else { e / (one + e) };
                (true, sp.ln(), sg / sp)
            }
        }
    }
}

/// One row's `(p, e, (o_gam, o_att), [n'_{t-1}, d'_{t-1}, m_{t-1}], n'_t, d'_t, m_t, σ)`.
type RowStep<'a, T> = (&'a [T], &'a [T], (usize, usize), [&'a [T]; 3], &'a mut [T], &'a mut [T], &'a mut [T], &'a mut [T]);

/// One row at one step up to the new `n'`, `d'` and `m` and the tape's `σ`; [`output_row`]
/// then applies `f_h` and `f_o`. Written without a branch that depends on the element but for
/// selects, so that the compiler vectorises it (for exp and sigmoid attention: relu and
/// softplus call the library logarithm).
#[inline(never)]
fn accumulate_row<T: Float, const ATT: u8, const DISC: bool>((p, e, (o_gam, o_att), [np, dp, mp], nn, dd, mm, sg): RowStep<T>) {
    let h = nn.len();
    assert!(p.len() >= 3 * h && e.len() >= h && np.len() == h && dp.len() == h && mp.len() == h);
    assert!(dd.len() == h && mm.len() == h && sg.len() == h);
    assert!(!DISC || (p.len() >= 4 * h && e.len() >= o_gam + h));
    assert!(!(ATT == SIGMOID || ATT == SOFTPLUS) || e.len() >= o_att + h);
    let (zero, one) = (T::zero(), T::one());
    for j in 0..h {
        let z = p[j] * tanh_gate(p[h + j], e[j]);
        let ea = if ATT == SIGMOID || ATT == SOFTPLUS { e[o_att + j] } else { zero };
        let (contrib, lam, _) = attention::<T, ATT>(p[2 * h + j], ea);
        let lg = if DISC { log_sigmoid(p[3 * h + j], e[o_gam + j]).0 } else { zero };
        // The reference maximum: m_t = max(c, λ) with c = m_{t-1} + ln γ, or λ at the first
        // contribution (d' = 0), or c when nothing contributes. α and β rescale n', d' and
        // the new term by it; one exponential serves both branches.
        let c = mp[j] + lg;
        let first = dp[j] == zero;
        let lam_wins = first || lam >= c;
        let ex = (-(lam - c).abs()).exp_fast();
        let (m, al, be, ka) = match (contrib, lam_wins) {
            (false, _) => (c, one, zero, zero),
            (true, true) => (lam, if first { zero } else { ex }, one, one),
            (true, false) => (c, one, ex, zero),
        };
        nn[j] = al * np[j] + be * z;
        dd[j] = al * dp[j] + be;
        mm[j] = m;
        sg[j] = if ka == one { -al } else { be };
    }
}

/// `h_t = f_h(n'/d')` (or `h_{t-1}` while `d' = 0`, see the module doc) and `o = f_o(h_t)`.
#[inline(never)]
fn output_row<T: Float>(fh: impl Squash, fo: impl Squash, nn: &[T], dd: &[T], hp: &[T], hv: &mut [T], o: &mut [T]) {
    let h = hv.len();
    assert!(nn.len() == h && dd.len() == h && hp.len() == h && o.len() == h);
    for j in 0..h {
        let full = fh.f(nn[j] / dd[j]);
        let v = if dd[j] == T::zero() { hp[j] } else { full };
        hv[j] = v;
        o[j] = fo.f(v);
    }
}

/// One row's `(p, σ, [n'_{t-1}, d'_{t-1}], [n'_t, d'_t, h_t], dr, dy, [dn', dd', dm, dh])`; `p`
/// receives its own gradient.
type BackStep<'a, T> = (&'a mut [T], &'a [T], [&'a [T]; 2], [&'a [T]; 3], &'a [T], &'a [T], [&'a mut [T]; 4]);

/// The backward of one row at one step: from the running state gradient `[dn', dd', dm, dh]`
/// (replaced by that of the step before) to the gradients of the pre-activations
/// `[u | p_g | p_a | p_γ]` (`p_γ` with the discount), written over them. `tanh g`, `λ'` and
/// `1 − γ` are computed again from the pre-activations `p` as forward computed them (the same
/// functions, the same bits): an exponential each costs less than the tape stream it replaces,
/// which the forward would write and this loop read back from memory at the task shape
/// (docs/benchmarks.md).
#[inline(never)]
fn backward_row<T: Float, const ATT: u8, const DISC: bool>(fh: impl Squash, fo: impl Squash, (p, sg, [np, dp], [nn, dd, hv], dr, dy, [dsn, dsd, dsm, dsh]): BackStep<T>) {
    let h = dsn.len();
    let w = if DISC { 4 * h } else { 3 * h };
    assert!(p.len() == w && sg.len() == h && np.len() == h && dp.len() == h);
    assert!(nn.len() == h && dd.len() == h && hv.len() == h && dr.len() == h && dy.len() == h);
    assert!(dsd.len() == h && dsm.len() == h && dsh.len() == h);
    // The row's blocks, each read before it is written with its gradient; `pqs` is empty
    // without the discount.
    let (pu, rest) = p.split_at_mut(h);
    let (pgs, rest) = rest.split_at_mut(h);
    let (pas, pqs) = rest.split_at_mut(h);
    let (zero, one, two) = (T::zero(), T::one(), T::c(2.0));
    for j in 0..h {
        let (u, pg, pa) = (pu[j], pgs[j], pas[j]);
        let tg = tanh_gate(pg, (-two * pg.abs()).exp_fast());
        let ea = if ATT == SIGMOID || ATT == SOFTPLUS { (-pa.abs()).exp_fast() } else { zero };
        let lp = attention::<T, ATT>(pa, ea).2;
        // σ: −α with κ = 1 (β = 1), else β (α = 1); see the module doc.
        let sg = sg[j];
        let ka = one.copysign(sg) < zero;
        let (al, be) = if ka { (sg.abs(), one) } else { (one, sg) };
        // o = f_o(h_t) as forward's `output_row` computed it (identity's derivative ignores it).
        let dfo = fo.df_from_y(fo.f(hv[j]));
        let z = u * tg;
        // Total gradient of h_t: carried state, next step's gates, the output.
        let dh = dsh[j] + dr[j] + dy[j] * dfo;
        // While d' = 0, h_t = h_{t-1}: the gradient passes to h_{t-1} untouched.
        // (Both sides of each select are computed: a division under a branch is not speculated,
        // and that branch alone would keep the loop from vectorising.)
        let silent = dd[j] == zero;
        let inv = one / dd[j];
        let inv = if silent { zero } else { inv };
        let r = dh * fh.df_from_y(hv[j]) * inv;
        let dn = dsn[j] + r;
        let dd_ = dsd[j] - r * nn[j] * inv;
        // n' = α n'_{t-1} + β z,  d' = α d'_{t-1} + β,  α = e^{c−m}, β = e^{λ−m}.
        let dz = dn * be;
        let dal = (dn * np[j] + dd_ * dp[j]) * al;
        let dbe = (dn * z + dd_) * be;
        let dm = dsm[j] - dal - dbe;
        let (dc, dlam) = if ka { (dal, dbe + dm) } else { (dal + dm, dbe) };
        dsn[j] = dn * al;
        dsd[j] = dd_ * al;
        dsm[j] = dc;
        dsh[j] = if silent { dh } else { zero };
        pu[j] = dz * tg;
        pgs[j] = dz * u * (one - tg * tg);
        pas[j] = dlam * lp;
        if DISC {
            // c = m_{t-1} + ln γ: dp_γ = dc · (1 − γ).
            let pq = pqs[j];
            pqs[j] = dc * log_sigmoid(pq, (-pq.abs()).exp_fast()).1;
        }
    }
}


#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cells::{gradcheck, Cell};
    use crate::kernels::rng::Rng;

    /// Everything one forward and backward produce.
    pub(crate) struct Run<T> {
        pub y: Vec<T>,
        pub st: Vec<T>,
        pub xp: Vec<T>,
        pub gw: Vec<T>,
        pub dx: Vec<T>,
        pub ds0: Vec<T>,
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run<T: Float>(
        cell: &Cell,
        w: &[T],
        x: &[T],
        steps: usize,
        batch: usize,
        s0: Option<&[T]>,
        dy: &[T],
        ds_final: &[T],
    ) -> Run<T> {
        let sz = cell.sizes();
        let mut ws = Workspace::default();
        let seq = Seq { steps, batch, x, tokens: None, s0, mask: None, emb: None, out_from: 0 };
        let mut y = vec![T::zero(); steps * batch * sz.output];
        cell.forward(w, &seq, &mut ws, &mut y);
        let (st, xp) = (ws.st.clone(), ws.xp.clone());
        let mut gw = vec![T::zero(); w.len()];
        let mut dx = vec![T::zero(); x.len()];
        let mut ds0 = vec![T::zero(); batch * sz.state];
        let grads = Grads {
            dy,
            ds_final: Some(ds_final),
            dx: Some(&mut dx),
            ds0: if s0.is_some() { Some(&mut ds0) } else { None },
        };
        cell.backward(w, &mut gw, &seq, &mut ws, grads);
        Run { y, st, xp, gw, dx, ds0 }
    }

    pub(crate) fn uniform<T: Float>(rng: &mut Rng, n: usize, lo: f64, hi: f64) -> Vec<T> {
        (0..n).map(|_| T::c(rng.range(lo, hi))).collect()
    }

    /// The range of a named tensor in the cell's flat parameters.
    pub(crate) fn slot(cell: &Cell, name: &str) -> std::ops::Range<usize> {
        let mut at = 0;
        for t in cell.tensors() {
            if t.name == name {
                return at..at + t.len();
            }
            at += t.len();
        }
        panic!("no tensor {name}")
    }

    /// The equations as written (f64, no rescaling): per step `(y, n, d, h)`, each `[B, H]`.
    /// `discount` false is the RWA (γ = 1, no `W_gamma`).
    #[allow(clippy::type_complexity)]
    pub(crate) fn naive(
        k: &Kernel,
        w: &[f64],
        x: &[f64],
        steps: usize,
        batch: usize,
    ) -> Vec<(Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>)> {
        let (d, h, ng) = (k.d, k.h, k.gates());
        let nx = d + h;
        let [wst, wu, b, s0] = split(w, &k.lens())[..] else { unreachable!() };
        let mut n = vec![0.0; batch * h];
        let mut den = vec![0.0; batch * h];
        let mut hs: Vec<f64> = (0..batch * h).map(|i| k.fh.f(s0[i % h])).collect();
        let mut out = Vec::new();
        for t in 0..steps {
            let mut ys = vec![0.0; batch * h];
            let mut hn = vec![0.0; batch * h];
            for bi in 0..batch {
                let xt = &x[(t * batch + bi) * d..(t * batch + bi + 1) * d];
                let xh: Vec<f64> = xt.iter().copied().chain(hs[bi * h..(bi + 1) * h].iter().copied()).collect();
                let dot = |row: &[f64], v: &[f64]| row.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
                for j in 0..h {
                    let u = dot(&wu[j * d..(j + 1) * d], xt) + b[j];
                    let g = dot(&wst[j * nx..(j + 1) * nx], &xh) + b[h + j];
                    let pa = dot(&wst[(h + j) * nx..(h + j + 1) * nx], &xh) + b[2 * h + j];
                    let gamma = if ng == 3 {
                        let pg = dot(&wst[(2 * h + j) * nx..(2 * h + j + 1) * nx], &xh) + b[3 * h + j];
                        1.0 / (1.0 + (-pg).exp())
                    } else {
                        1.0
                    };
                    let a = match k.att {
                        Attention::Exp => pa.exp(),
                        Attention::Relu => pa.max(0.0),
                        Attention::Softplus => pa.exp().ln_1p(),
                        Attention::Sigmoid => 1.0 / (1.0 + (-pa).exp()),
                    };
                    let i = bi * h + j;
                    n[i] = n[i] * gamma + u * g.tanh() * a;
                    den[i] = den[i] * gamma + a;
                    hn[i] = if den[i] == 0.0 { hs[i] } else { k.fh.f(n[i] / den[i]) };
                    ys[i] = k.fo.f(hn[i]);
                }
            }
            hs = hn;
            out.push((ys, n.clone(), den.clone(), hs.clone()));
        }
        out
    }

    /// The cell against [`naive`]: outputs, `h`, and the unscaled `n = n'e^m`, `d = d'e^m`.
    pub(crate) fn check_against_naive(cell: &Cell, k: &Kernel, seed: u64) {
        let (steps, batch, d, h) = (7, 3, k.d, k.h);
        let mut rng = Rng::new(seed);
        let w: Vec<f64> = uniform(&mut rng, cell.param_len(), -1.0, 1.0);
        let x: Vec<f64> = uniform(&mut rng, steps * batch * d, -1.0, 1.0);
        let r = run(cell, &w, &x, steps, batch, None, &vec![0.0; steps * batch * h], &vec![0.0; batch * 4 * h]);
        let want = naive(k, &w, &x, steps, batch);
        let (bh, ns) = (batch * h, batch * 4 * h);
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-10 * (1.0 + b.abs());
        let mut zero_den = 0;
        for (t, (ys, n, den, hs)) in want.iter().enumerate() {
            let s = &r.st[(t + 1) * ns..(t + 2) * ns];
            for i in 0..bh {
                let scale = s[2 * bh + i].exp();
                assert!(near(r.y[t * bh + i], ys[i]), "{cell:?} y[{t}][{i}]: {} vs {}", r.y[t * bh + i], ys[i]);
                assert!(near(s[3 * bh + i], hs[i]), "{cell:?} h[{t}][{i}]");
                assert!(near(s[i] * scale, n[i]), "{cell:?} n[{t}][{i}]: {} vs {}", s[i] * scale, n[i]);
                assert!(near(s[bh + i] * scale, den[i]), "{cell:?} d[{t}][{i}]");
                if den[i] == 0.0 {
                    zero_den += 1;
                    assert_eq!(s[bh + i], 0.0);
                }
            }
        }
        if k.att != Attention::Relu {
            assert_eq!(zero_den, 0);
        }
    }

    const ATTENTIONS: [Attention; 4] = [Attention::Exp, Attention::Relu, Attention::Softplus, Attention::Sigmoid];

    fn rda(attention: Attention, hidden_fn: Act, output_fn: Act, input: usize, hidden: usize) -> Rda {
        Rda::new(input, hidden, attention, hidden_fn, output_fn)
    }

    #[test]
    fn gradients_match_finite_differences() {
        for attention in ATTENTIONS {
            for hidden_fn in [Act::Identity, Act::Tanh] {
                for output_fn in [Act::Identity, Act::Tanh] {
                    let cell = Cell::Rda(rda(attention, hidden_fn, output_fn, 3, 4));
                    // Seed 3 puts a relu attention logit at 5e-4 (unit 0, step 3, row 0, from
                    // the own initial state with the mask): the stencil's ±2e-3 straddles the
                    // kink, so relu uses seed 4 instead.
                    let seeds: &[u64] = if attention == Attention::Relu { &[1, 2, 4] } else { &[1, 2, 3] };
                    gradcheck::check(&cell, seeds);
                }
            }
        }
        // An input wider than `FOLD_MAX` takes the projections' passes instead of riding in
        // `rin` (input 3 above).
        let wide = crate::cells::FOLD_MAX + 1;
        gradcheck::check(&Cell::Rda(rda(Attention::Sigmoid, Act::Tanh, Act::Tanh, wide, 4)), &[1, 2]);
        gradcheck::check(&Cell::Rda(Rda::rwa(wide, 4)), &[1, 2]);
    }

    #[test]
    fn forward_matches_the_equations_as_written() {
        for attention in ATTENTIONS {
            for hidden_fn in [Act::Identity, Act::Tanh] {
                for output_fn in [Act::Identity, Act::Tanh] {
                    let c = rda(attention, hidden_fn, output_fn, 2, 5);
                    for seed in [4, 5] {
                        check_against_naive(&Cell::Rda(c.clone()), &c.kernel(), seed);
                    }
                }
            }
        }
    }

    /// A relu unit that has attended to nothing yet keeps `h = f_h(s0)` and `d' = 0`, and the
    /// gradient reaches `s0` through those steps.
    #[test]
    fn relu_zero_denominator_keeps_the_initial_hidden_value() {
        let (steps, batch, d, h, quiet) = (10_000, 2, 3, 8, 100);
        let cell = Cell::Rda(rda(Attention::Relu, Act::Tanh, Act::Tanh, d, h));
        let mut rng = Rng::new(7);
        let mut w: Vec<f32> = uniform(&mut rng, cell.param_len(), -50.0, 50.0);
        // p_a = W_a,x x with non-negative weights and no bias or h-columns: negative while x < 0.
        let wa = slot(&cell, "W_a");
        for (i, v) in w[wa].iter_mut().enumerate() {
            *v = if i % (d + h) < d { v.abs() } else { 0.0 };
        }
        w[slot(&cell, "b_a")].fill(0.0);
        let s0p = slot(&cell, "s0");
        let mut x: Vec<f32> = uniform(&mut rng, steps * batch * d, -20.0, 20.0);
        x[..quiet * batch * d].iter_mut().for_each(|v| *v = -v.abs() - 0.1);
        let dy: Vec<f32> = uniform(&mut rng, steps * batch * h, -1.0, 1.0);
        let dsf: Vec<f32> = uniform(&mut rng, batch * 4 * h, -1.0, 1.0);
        let r = run(&cell, &w, &x, steps, batch, None, &dy, &dsf);
        let (bh, ns) = (batch * h, batch * 4 * h);
        for t in 0..quiet {
            let s = &r.st[(t + 1) * ns..(t + 2) * ns];
            for i in 0..bh {
                assert_eq!(s[bh + i], 0.0);
                assert_eq!(s[3 * bh + i], w[s0p.clone()][i % h].tanh_fast());
                assert_eq!(r.y[t * bh + i], s[3 * bh + i].tanh_fast());
            }
        }
        // Later steps attend, and everything stays finite.
        let last = &r.st[steps * ns..];
        assert!(last[bh..2 * bh].iter().all(|&v| v >= 1.0), "d' ≥ 1 once a step has contributed");
        for (name, v) in [("y", &r.y), ("state", &r.st), ("gw", &r.gw), ("dx", &r.dx)] {
            assert!(v.iter().all(|x| x.is_finite()), "{name} not finite");
        }
        assert!(r.gw[s0p].iter().any(|&g| g != 0.0), "no gradient reached s0");
    }

    /// f32 over 10,000 steps with weights and inputs large enough that the logits reach ±1e3 and
    /// beyond: forward and backward stay finite.
    pub(crate) fn check_long_sequence_is_finite(cell: &Cell, seed: u64) {
        let (steps, batch) = (10_000, 2);
        let sz = cell.sizes();
        let (d, h) = (sz.input, sz.hidden);
        let mut rng = Rng::new(seed);
        let w: Vec<f32> = uniform(&mut rng, cell.param_len(), -50.0, 50.0);
        let x: Vec<f32> = uniform(&mut rng, steps * batch * d, -20.0, 20.0);
        let dy: Vec<f32> = uniform(&mut rng, steps * batch * h, -1.0, 1.0);
        let dsf: Vec<f32> = uniform(&mut rng, batch * sz.state, -1.0, 1.0);
        let r = run(cell, &w, &x, steps, batch, None, &dy, &dsf);
        let wp = r.xp.len() / (steps * batch);
        let max_logit = r.xp.chunks_exact(wp).flat_map(|p| &p[2 * h..3 * h]).fold(0f32, |a, &v| a.max(v.abs()));
        assert!(max_logit >= 1e3, "attention logits only reach {max_logit}");
        for (name, v) in [("y", &r.y), ("state", &r.st), ("gw", &r.gw), ("dx", &r.dx)] {
            assert!(v.iter().all(|x| x.is_finite()), "{cell:?}: {name} not finite");
        }
        let (bh, ns) = (batch * h, batch * sz.state);
        for t in 1..=steps {
            assert!(r.st[t * ns + bh..t * ns + 2 * bh].iter().all(|&v| v >= 1.0), "d' < 1 at step {t}");
        }
        // Starting from the final state continues just as finitely (and reaches ds0).
        let last = r.st[steps * ns..].to_vec();
        let r2 = run(cell, &w, &x[..100 * batch * d], 100, batch, Some(&last), &dy[..100 * batch * h], &dsf);
        for (name, v) in [("y", &r2.y), ("gw", &r2.gw), ("ds0", &r2.ds0)] {
            assert!(v.iter().all(|x| x.is_finite()), "{cell:?}: continued {name} not finite");
        }
    }

    #[test]
    fn long_sequences_with_huge_logits_stay_finite() {
        for (a, fh, fo) in [
            (Attention::Exp, Act::Identity, Act::Tanh),
            (Attention::Exp, Act::Tanh, Act::Identity),
            (Attention::Sigmoid, Act::Identity, Act::Identity),
            (Attention::Softplus, Act::Tanh, Act::Tanh),
        ] {
            check_long_sequence_is_finite(&Cell::Rda(rda(a, fh, fo, 3, 8)), 11);
        }
    }

    /// Running `T` steps equals running `T1` and then `T − T1` from the final state.
    pub(crate) fn check_continuation(cell: &Cell, seed: u64) {
        let (steps, split_at, batch) = (11, 4, 3);
        let sz = cell.sizes();
        let (d, h) = (sz.input, sz.output);
        let mut rng = Rng::new(seed);
        let w: Vec<f64> = uniform(&mut rng, cell.param_len(), -1.5, 1.5);
        let x: Vec<f64> = uniform(&mut rng, steps * batch * d, -1.5, 1.5);
        let zy = vec![0.0; steps * batch * h];
        let zs = vec![0.0; batch * sz.state];
        let all = run(cell, &w, &x, steps, batch, None, &zy, &zs);
        let first = run(cell, &w, &x[..split_at * batch * d], split_at, batch, None, &zy, &zs);
        let ns = batch * sz.state;
        let mid = first.st[split_at * ns..].to_vec();
        let rest = run(cell, &w, &x[split_at * batch * d..], steps - split_at, batch, Some(&mid), &zy, &zs);
        let y: Vec<f64> = first.y.iter().chain(&rest.y).copied().collect();
        for (i, (a, b)) in all.y.iter().zip(&y).enumerate() {
            assert!((a - b).abs() <= 1e-12, "{cell:?}: y[{i}] {a} vs {b}");
        }
        for (i, (a, b)) in all.st[steps * ns..].iter().zip(&rest.st[(steps - split_at) * ns..]).enumerate() {
            assert!((a - b).abs() <= 1e-12 * (1.0 + a.abs()), "{cell:?}: final state[{i}] {a} vs {b}");
        }
    }

    #[test]
    fn continuing_from_the_final_state_is_exact() {
        for attention in ATTENTIONS {
            for seed in [1, 2] {
                check_continuation(&Cell::Rda(rda(attention, Act::Identity, Act::Tanh, 3, 5)), seed);
            }
        }
    }

    /// The traced discount is `γ_t = σ(W_γ [x_t, h_{t-1}] + b_γ)` (the tape no longer holds
    /// `1 − γ`: the trace computes it from the pre-activations), in f64 from the weights and the
    /// traced `h` (two sequences: the state's blocks are `[B, H]` each).
    #[test]
    fn traced_discount_is_the_equations_gamma() {
        let (steps, batch, d, h) = (6, 2, 3, 4);
        let cell = Cell::Rda(rda(Attention::Sigmoid, Act::Tanh, Act::Identity, d, h));
        let mut rng = Rng::new(8);
        let w: Vec<f64> = uniform(&mut rng, cell.param_len(), -1.0, 1.0);
        let x: Vec<f64> = uniform(&mut rng, steps * batch * d, -1.0, 1.0);
        let mut ws = Workspace::default();
        let seq = Seq { steps, batch, x: &x, tokens: None, s0: None, mask: None, emb: None, out_from: 0 };
        cell.forward(&w, &seq, &mut ws, &mut vec![0.0; steps * batch * h]);
        let traces = cell.trace(&ws);
        let get = |name: &str| &traces.iter().find(|t| t.name == name).unwrap().values;
        let (gamma, hs) = (get("gamma"), get("h"));
        let (wg, bg, s0) = (&w[slot(&cell, "W_gamma")], &w[slot(&cell, "b_gamma")], &w[slot(&cell, "s0")]);
        for t in 0..steps {
            for bi in 0..batch {
                let hp: Vec<f64> = (0..h).map(|k| if t == 0 { s0[k].tanh() } else { hs[((t - 1) * batch + bi) * h + k] }).collect();
                for j in 0..h {
                    let row = &wg[j * (d + h)..(j + 1) * (d + h)];
                    let p = bg[j] + (0..d).map(|k| row[k] * x[(t * batch + bi) * d + k]).sum::<f64>() + (0..h).map(|k| row[d + k] * hp[k]).sum::<f64>();
                    let want = 1.0 / (1.0 + (-p).exp());
                    let got = gamma[(t * batch + bi) * h + j];
                    assert!((got - want).abs() <= 1e-12, "γ[{t}][{bi}][{j}]: {got} vs {want}");
                }
            }
        }
    }
    #[test]
    fn parameter_count() {
        // 3 · 250·(2+250) + 250·2 + 4·250 + 250
        let cell = Cell::Rda(rda(Attention::Exp, Act::Identity, Act::Tanh, 2, 250));
        assert_eq!(cell.param_len(), 190_750);
        let s = cell.sizes();
        assert_eq!((s.output, s.state, s.rec), (250, 1000, 250));
    }

    // ---- the RWA preset: the same checks, without the discount ----------------------------

    #[test]
    fn rwa_gradients_match_finite_differences() {
        gradcheck::check(&Cell::Rda(Rda::rwa(3, 4)), &[1, 2, 3]);
    }

    #[test]
    fn rwa_forward_matches_the_equations_as_written() {
        let c = Rda::rwa(2, 5);
        for seed in [4, 5, 6] {
            check_against_naive(&Cell::Rda(c.clone()), &c.kernel(), seed);
        }
    }

    #[test]
    fn rwa_long_sequence_with_huge_logits_stays_finite() {
        check_long_sequence_is_finite(&Cell::Rda(Rda::rwa(3, 8)), 11);
    }

    #[test]
    fn rwa_continuing_from_the_final_state_is_exact() {
        for seed in [1, 2, 3] {
            check_continuation(&Cell::Rda(Rda::rwa(3, 5)), seed);
        }
    }

    #[test]
    fn rwa_parameter_count_and_names() {
        // 2 · 250·(2+250) + 250·2 + 3·250 + 250
        let cell = Cell::Rda(Rda::rwa(2, 250));
        assert_eq!(cell.param_len(), 127_500);
        let names: Vec<_> = cell.tensors().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["W_g", "W_a", "W_u", "b_u", "b_g", "b_a", "s0"]);
        assert_eq!((Rda::rwa(2, 3).type_name(), rda(Attention::Exp, Act::Identity, Act::Tanh, 2, 3).type_name()), ("rwa", "rda"));
    }
}
