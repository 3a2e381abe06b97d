//! A recurrent layer on the GPU: the whole-sequence forward and backward of any cell that
//! describes itself as a [`GpuCell`], recorded as a [`Program`] of dispatches. The shape is the
//! CPU engine's (`cells/mod.rs`): the input projections of all steps as one GEMM; per step one
//! recurrent GEMM and one fused pointwise kernel from the cell's own WGSL (`cells/<cell>.wgsl`,
//! beside its CPU twin); backward the mirror image; weight gradients after the loop as single
//! GEMMs over all `T·B` rows.
//!
//! Every cell's kernels take the same parameter slots, so this file serves them all. Each has a
//! name, declared once ([`slots!`]): `slot::DY` where the Rust fills it, `pu(P_DY)` where a kernel
//! reads it.
//!
//! | slot | `fwd` (step t)          | `bwd` (step t)                         | `init_fwd` / `init_bwd`   |
//! |------|-------------------------|----------------------------------------|---------------------------|
//! | 0, 1 | B, H                    | B, H                                   | B, H                      |
//! | 2    | `xp[t]`: pre-activations in, the cell's saved values out | the same, then their gradients | –  |
//! | 3, 4 | state before and after  | state before and after                 | `st[0]`                   |
//! | 5    | `y[t]`                  | –                                      | –                         |
//! | 6    | `rin[t+1]` (written)    | `dr`: ∂L/∂`rin[t+1]` (read)            | `rin[0]` / `dr`           |
//! | 7    | –                       | `dy[t]`                                | –                         |
//! | 8    | –                       | `ds`: the running state gradient       | `ds` (becomes ∂L/∂`st[0]`)|
//! | 9    | the cell's option bits  | the same                               | the same                  |
//! | 10–12| xp width, R, S          | the same                               | the same                  |
//! | 13,14| the recurrent dropout mask `[B, R]` and whether there is one: `rin` is written masked, `dr` read masked |||
//! | 15   | `rp[t]` (cells whose recurrent GEMM has its own buffer, or the second GEMM's input) | the same, then its gradient | – |
//! | 16   | `act[t]`: the cell's tape of the step, written | read (with a second GEMM: ∂L/∂`rp[t]`) | – |
//! | 17, 18, 19 | where the layer's "started fresh" flag is (A), its parameters (W, G), the cell's own offset (its `s0`) |||
//! | 20–27 | the split-K reduction of the product `fwd`/`bwd` reads first, which it finishes (`fold_split`) | the same | – |
//!
//! Buffers, all in `A` (offsets in elements): `xp [T·B, X]`, `st [(T+1)·B, S]`, `rin [(T+1)·B, R]`
//! (the recurrent GEMMs' input, `rin[t+1]` written by step t), `dr [B, R]`, `ds [B, S]`, and for a
//! cell whose recurrent product must stay apart from the input's (the GRU's reset multiplies it
//! alone) `rp [T·B, G]`.

use crate::kernels::gpu::{Buf, Gemm, Gpu, Program};
use anyhow::Result;
use std::sync::Arc;

/// Declares the slots once: `slot::NAME` for the Rust that fills them, and the same names as
/// WGSL constants `P_NAME` ([`SLOT_CONSTANTS`]) for the kernels that read them (`pu(P_DY)`).
macro_rules! slots {
    ($($(#[$doc:meta])* $name:ident = $i:literal,)*) => {
        /// The parameter slots of every cell kernel (the table above), by name. A few share a
        /// number: what a slot holds depends on the kernel reading it.
        pub mod slot {
            $($(#[$doc])* pub const $name: usize = $i;)*
            /// how many there are
            pub const COUNT: usize = 28;
        }
        /// The slots as WGSL constants, prepended to every cell's kernels.
        const SLOT_CONSTANTS: &str = concat!($("const P_", stringify!($name), ": u32 = ", stringify!($i), "u;\n",)*);
    };
}

slots! {
    /// the batch rows
    B = 0,
    /// the hidden width
    H = 1,
    /// step t's pre-activations in `xp` (in backward, their gradients)
    XP = 2,
    /// the state before the step (outside the loop: `st[0]`)
    S_PREV = 3,
    /// the state after the step
    S_NEXT = 4,
    /// the step's output `y[t]`
    Y = 5,
    /// forward: the next step's recurrent input `rin[t+1]`, written masked (`rin[0]` by `init_fwd`)
    RIN = 6,
    /// backward: ∂L/∂`rin[t+1]`, read masked
    DR = 6,
    /// backward: ∂L/∂`y[t]` from above
    DY = 7,
    /// the `[B, H]` scratch of the projection's first recurrent input (`proj_init`, `proj_init_bwd`)
    SCRATCH = 7,
    /// backward: the running state gradient (outside the loop it becomes ∂L/∂`st[0]`)
    DS = 8,
    /// the cell's option bits
    OPTS = 9,
    /// the width of a step's pre-activations (`X`)
    XP_WIDTH = 10,
    /// the recurrent input's width (`R`)
    R = 11,
    /// the state's width (`S`)
    S = 12,
    /// the recurrent dropout mask `[B, R]`, and whether there is one
    MASK = 13,
    MASKED = 14,
    /// the switched recurrence's weight gradient: where each symbol's positions start, the
    /// positions sorted by symbol (both in `I`), and how many symbols there are
    SYM_STARTS = 13,
    SYM_POSITIONS = 14,
    SYM_COUNT = 15,
    /// `rp[t]`: the recurrent product kept apart, or the second GEMM's input
    RP = 15,
    /// the switched recurrence's step: where step t's symbols are in `I`
    SYMBOLS = 15,
    /// `act[t]`: the cell's tape of the step
    ACT = 16,
    /// where the layer's "started fresh" flag is (in `A`)
    FRESH = 17,
    /// where the layer's parameters start (in `W` and `G`)
    PARAMS = 18,
    /// the cell's own initial state's offset in its parameters
    OWN_START = 19,
    /// the split-K reduction of the product the kernel reads first, folded into it
    /// (`fold_split` in slots.wgsl, [`Program::gemm_folded`]): the number of splits (0:
    /// nothing to fold), where the partial products are, the output's offset, row stride and
    /// width, the GEMM's flags and its bias rows
    FOLD_SPLITS = 20,
    FOLD_AT = 21,
    FOLD_C = 22,
    FOLD_LDC = 23,
    FOLD_N = 24,
    FOLD_FLAGS = 25,
    FOLD_BIAS0 = 26,
    FOLD_BIAS1 = 27,
}

/// Put a folded product's reduction ([`Program::gemm_folded`]) into a kernel's `FOLD_*` slots.
fn set_fold(prm: &mut [u32; slot::COUNT], fold: Option<[u32; 8]>) {
    if let Some(f) = fold {
        prm[slot::FOLD_SPLITS..=slot::FOLD_BIAS1].copy_from_slice(&f);
    }
}

/// One input weight block: the product `x · W_blockᵀ` fills columns `col..col + rows` of every
/// `xp` row, with its biases.
#[derive(Clone, Debug)]
pub struct InputBlock {
    pub col: usize,
    pub rows: usize,
    /// offset inside the layer's parameters and row stride of `[rows, D]` (a wider stride
    /// when the block is the `x` columns of a `[rows, D + H]` matrix)
    pub w: usize,
    pub ld: usize,
    /// biases (offsets in the layer) added to these columns, each getting their gradient
    pub biases: Vec<usize>,
}

/// What the generic layer needs to know of a cell to run it on the GPU (a cell names what it
/// has; the rest stays at the default: no input block, no tape, no own start, none of the
/// special recurrences).
#[derive(Clone, Debug, Default)]
pub struct GpuCell {
    /// the shader's name, and its source (`cells/<cell>.wgsl`)
    pub name: &'static str,
    pub source: &'static str,
    pub input: usize,
    pub hidden: usize,
    /// `X`: the width of a step's pre-activations
    pub xp: usize,
    /// the recurrent GEMM writes columns `rec_col..rec_col + rec_width` of `xp[t]`
    pub rec_col: usize,
    pub rec_width: usize,
    /// `R`, `S`, and the output width
    pub rin: usize,
    pub state: usize,
    pub out: usize,
    /// the input weight blocks
    pub inputs: Vec<InputBlock>,
    /// offset inside the layer's parameters of the recurrent weight `[rec_width, R]`, and its
    /// row stride
    pub w_rec: usize,
    pub rec_ld: usize,
    /// per-step tape width of `act` (`[T·B, act]`, slot 16), 0 for none
    pub act: usize,
    /// the cell starts from its own learned state: its `fresh` kernel writes `st[0]` from the
    /// parameters (slot 19: where they are), and `s0_grad` adds the initial state's gradient
    /// to them when the window started fresh
    pub own_start: Option<usize>,
    /// option bits the cell's kernels read (slot 9)
    pub opts: u32,
    /// the recurrent GEMM writes its own buffer `rp[t]` (`[B, rec_width]`, with the bias at
    /// this offset added) instead of adding into `xp[t]`
    pub rec_apart: Option<usize>,
    /// threads of the pointwise kernels per batch row (usually `H`)
    pub threads: usize,
    /// a second recurrent product per step that needs the first one's gates (the GRU in the
    /// papers' form: `W_hn (r ∘ h̃)`), see [`SecondRec`]
    pub second: Option<SecondRec>,
    /// an output projection `y = W_proj h` (the LSTM's `proj_size`), see [`ProjRec`]
    pub proj: Option<ProjRec>,
    /// a cell reading the symbols themselves (the linear RNNs): the offset of its `[K, X]`
    /// per-symbol rows, gathered into `xp` in place of input GEMMs, their gradient scattered
    /// back by symbol in position order (the layer's `symbols`)
    pub gather: Option<usize>,
    /// the recurrent matrix switched by the input symbol (the ISAN: `W_x [K, H, H]` at this
    /// offset): each row's step product is the cell's `switch_fwd` kernel with its symbol's
    /// matrix instead of the recurrent GEMM, `switch_bwd` its backward, and `switch_dw` the
    /// matrices' gradients after the loop (one thread per element, its symbol's positions in
    /// order). The symbols' positions come from the layer's `symbols`.
    pub switched: Option<usize>,
}

/// An output projection: the cell's `fwd` writes `h_t` into `act[t]` (`act` is `H` wide), the
/// product `act[t] · W_projᵀ` is the output `y[t]` (`[B, P]`, `out` = `rin` = `P`), and the cell's
/// `proj_post` kernel (`P` threads a row) puts it in the state's first block and `rin[t+1]`. In
/// backward the cell's `proj_pre` kernel gathers ∂L/∂`y_t` into `rp[t]` (`[T·B, P]`), its
/// product with `W_proj` goes into a `[B, H]` scratch after them, which `bwd` reads as its
/// ∂L/∂`h_t` (slot 7); `W_proj`'s gradient is one GEMM over all `T·B` rows after the loop.
#[derive(Clone, Debug)]
pub struct ProjRec {
    /// offset inside the layer's parameters of `W_proj` `[P, H]`
    pub w: usize,
    pub p: usize,
    /// the state does not hold `y` (the RAN's is `c` alone), so the first recurrent input
    /// `W_proj g(c_{-1})` is made from it: the cell's `proj_init` writes `g(c_{-1})` into the
    /// `[B, H]` scratch, a GEMM with `W_proj` gives `rin[0]`, which `init_fwd` then masks; in
    /// backward `init_bwd` masks `dr` in place, `W_proj` gets `drᵀ g(c_{-1})`, and the cell's
    /// `proj_init_bwd` adds `(dr · W_proj) ∘ g'` to `ds`
    pub from_state: bool,
}

/// A step's second recurrent GEMM: after the first GEMM, the cell's `gate` kernel writes this
/// GEMM's input `[B, R]` into `rp[t]`, the product `rp[t] · Wᵀ` is added into columns
/// `col..col + rows` of `xp[t]`, then `fwd` runs. In backward, after `bwd`, the gradient of
/// `rp[t]` (those columns of `xp[t]` times `W`) goes into `act[t]` (`act` must be `R` wide),
/// and the cell's `bwd_gate` kernel turns it into its gates' gradients and writes `dr` (slot 6),
/// to which the first GEMM's backward then adds.
#[derive(Clone, Debug)]
pub struct SecondRec {
    pub col: usize,
    pub rows: usize,
    /// offset inside the layer's parameters of `W` `[rows, R]`, and its row stride
    pub w: usize,
    pub ld: usize,
}

/// Where one layer's buffers sit in `A`, and the offset of its parameters in `W`/`G`.
#[derive(Clone, Copy, Debug)]
pub struct LayerBufs {
    pub params: usize,
    /// `[T·B, D]` input (written by the layer below or the embedding)
    pub x: usize,
    /// `[T·B, out]` output
    pub y: usize,
    /// `[T·B, out]` gradient of the output (from above)
    pub dy: usize,
    /// `[T·B, D]` gradient of the input, if wanted
    pub dx: Option<usize>,
    pub xp: usize,
    pub st: usize,
    pub rin: usize,
    pub dr: usize,
    pub ds: usize,
    /// `[T·B, G]` the recurrent products, for a cell that keeps them apart
    pub rp: usize,
    /// `[B, R]` the recurrent input's dropout mask, if the layer has one
    pub rec_mask: Option<usize>,
    /// `[T·B, act]` the cell's tape
    pub act: usize,
    /// one element: 1 while the next window starts from the cell's own state (a cell with
    /// `own_start`), cleared after every window
    pub fresh: usize,
    /// for a cell that gathers by symbol: where the window's tokens, the symbols' position
    /// ranges and the positions sorted by symbol are (in `I`), and the number of symbols
    pub symbols: Option<(usize, usize, usize, usize)>,
}

impl GpuCell {
    /// A cell `H` wide throughout: its pre-activations, the recurrent product and its input,
    /// the state and the output, one thread a unit (the simple and linear RNNs, the ISAN); the
    /// rest at the default, for the cell to name.
    pub fn square(name: &'static str, source: &'static str, input: usize, h: usize) -> GpuCell {
        GpuCell { name, source, input, hidden: h, xp: h, rec_width: h, rin: h, state: h, out: h, rec_ld: h, threads: h, ..Default::default() }
    }

    /// Elements of `A` the layer's own buffers take at `(steps, batch)`: `xp`, `st`, `rin`,
    /// `dr`, `ds`, `rp`, `act`, `fresh` in that order.
    pub fn ws_lens(&self, steps: usize, batch: usize) -> [usize; 8] {
        let (tb, b) = (steps * batch, batch);
        // a projection's [B, H] scratch follows its rows
        let rp = tb * self.rp_width() + if self.proj.is_some() { b * self.hidden } else { 0 };
        [tb * self.xp, (steps + 1) * b * self.state, (steps + 1) * b * self.rin, b * self.rin, b * self.state, rp, tb * self.act, 1]
    }

    /// Where step `t`'s recurrent products are: a block of `rp`, or columns of `xp[t]`; with
    /// its row stride.
    fn rec_at(&self, l: &LayerBufs, batch: usize, t: usize) -> (usize, usize) {
        match self.rec_apart {
            Some(_) => (l.rp + t * batch * self.rec_width, self.rec_width),
            None => (l.xp + t * batch * self.xp + self.rec_col, self.xp),
        }
    }

    /// The row width of `rp` (`[T·B, ·]`): the recurrent products kept apart, the second GEMM's
    /// input, or the gradient of a projection's output; 0 for a cell without it.
    fn rp_width(&self) -> usize {
        match (&self.rec_apart, &self.second, &self.proj) {
            (Some(_), _, _) => self.rec_width,
            (None, Some(_), _) => self.rin,
            (None, None, Some(pr)) => pr.p,
            (None, None, None) => 0,
        }
    }

    /// A projection's `[B, H]` scratch, after `rp`'s `tb` rows.
    fn proj_scratch(&self, l: &LayerBufs, tb: usize) -> usize {
        l.rp + tb * self.rp_width()
    }

    /// Where step `t`'s tokens are in `I`, for a cell switched by its symbols.
    fn step_tokens(&self, l: &LayerBufs, batch: usize, t: usize) -> Result<u32> {
        match l.symbols {
            Some((tokens, ..)) => Ok((tokens + t * batch) as u32),
            None => anyhow::bail!("a cell switched by its input symbols must be the model's first layer"),
        }
    }

    fn kernel(&self, gpu: &Gpu, entry: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        let src = self.source;
        gpu.pipeline(self.name, &|| format!("{SLOT_CONSTANTS}{}\n{src}", include_str!("slots.wgsl")), entry)
    }

    /// The cell's kernel `entry` where the cell has the part that needs it.
    fn kernel_if(&self, gpu: &Gpu, has: bool, entry: &str) -> Result<Option<Arc<wgpu::ComputePipeline>>> {
        has.then(|| self.kernel(gpu, entry)).transpose()
    }

    /// The slots of the cell's kernels (`xp` is step t's row block, or 0 outside the loop).
    #[allow(clippy::too_many_arguments)]
    fn params(&self, l: &LayerBufs, batch: usize, xp: usize, s_prev: usize, s_next: usize, y: usize, r: usize, dy: usize, ds: usize) -> [u32; slot::COUNT] {
        let u = |x: usize| x as u32;
        // step t's blocks of rp and act, found from xp's (all are [T·B, ·] row blocks)
        let row = if xp >= l.xp { (xp - l.xp) / self.xp } else { 0 };
        let mut p = [0; slot::COUNT];
        for (i, v) in [
            (slot::B, batch),
            (slot::H, self.hidden),
            (slot::XP, xp),
            (slot::S_PREV, s_prev),
            (slot::S_NEXT, s_next),
            (slot::Y, y),
            (slot::RIN, r),
            (slot::DY, dy),
            (slot::DS, ds),
            (slot::XP_WIDTH, self.xp),
            (slot::R, self.rin),
            (slot::S, self.state),
            (slot::MASK, l.rec_mask.unwrap_or(0)),
            (slot::MASKED, l.rec_mask.is_some() as usize),
            (slot::RP, l.rp + row * self.rp_width()),
            (slot::ACT, l.act + row * self.act),
            (slot::FRESH, l.fresh),
            (slot::PARAMS, l.params),
            (slot::OWN_START, self.own_start.unwrap_or(0)),
        ] {
            p[i] = u(v);
        }
        p[slot::OPTS] = self.opts;
        p
    }

    /// Whether the step's pointwise kernels finish a split recurrent product themselves
    /// (`fold_split`): every cell whose `fwd` (and `bwd`) reads it first, so not one with a
    /// second product (its `gate` kernels come between).
    fn folds(&self) -> bool {
        self.second.is_none()
    }

    /// Record what makes `st[0]` the cell's own initial state (nothing for a cell starting
    /// from zeros, which the caller writes).
    pub fn fresh(&self, gpu: &Gpu, p: &mut Program, l: &LayerBufs, batch: usize) -> Result<()> {
        if self.own_start.is_some() {
            p.flat(self.kernel(gpu, "fresh")?, &self.params(l, batch, 0, l.st, 0, 0, 0, 0, 0), batch * self.state);
        }
        Ok(())
    }

    /// Record the forward pass over `steps` steps from the state in `st[0]`; the final state
    /// is left in `st[T]` (the caller carries it over).
    pub fn forward(&self, gpu: &Gpu, p: &mut Program, l: &LayerBufs, steps: usize, batch: usize) -> Result<()> {
        let (x, b, d) = (self.xp, batch, self.input);
        // A cell reading the symbols starts from its rows gathered by them, or from zeros.
        if let (Some(rows), Some((tokens, ..))) = (self.gather, l.symbols) {
            let u = |v: usize| v as u32;
            p.flat(crate::kernels::gpu::op(gpu, "embed_gather")?, &[u(steps * b), u(x), u(tokens), u(l.params + rows), u(l.xp), 0, 0], steps * b * x);
        } else if self.switched.is_some() {
            p.clear(Buf::A, l.xp, steps * b * x);
        }
        for blk in &self.inputs {
            let bias = [blk.biases.first().map(|o| l.params + o), blk.biases.get(1).map(|o| l.params + o)];
            let w = (Buf::W, l.params + blk.w, blk.ld);
            p.gemm(gpu, Gemm { m: steps * b, n: blk.rows, k: d, a: (Buf::A, l.x, d), ta: false, b: w, tb: true, c: (Buf::A, l.xp + blk.col, x), accumulate: false, bias })?;
        }
        let (fwd, init) = (self.kernel(gpu, "fwd")?, self.kernel(gpu, "init_fwd")?);
        if let Some(pr) = self.proj.as_ref().filter(|pr| pr.from_state) {
            let scratch = self.proj_scratch(l, steps * b);
            p.flat(self.kernel(gpu, "proj_init")?, &self.params(l, b, 0, l.st, 0, 0, l.rin, scratch, 0), b * self.hidden);
            let w = (Buf::W, l.params + pr.w, self.hidden);
            p.gemm(gpu, Gemm { m: b, n: pr.p, k: self.hidden, a: (Buf::A, scratch, self.hidden), ta: false, b: w, tb: true, c: (Buf::A, l.rin, pr.p), accumulate: false, bias: [None; 2] })?;
        }
        p.flat(init, &self.params(l, b, 0, l.st, 0, 0, l.rin, 0, 0), b * self.rin.max(self.state));
        let (ns, nr) = (b * self.state, b * self.rin);
        // the kernels a step may add to `fwd`
        let (switch, gate, post) = (self.kernel_if(gpu, self.switched.is_some(), "switch_fwd")?, self.kernel_if(gpu, self.second.is_some(), "gate")?, self.kernel_if(gpu, self.proj.is_some(), "proj_post")?);
        for t in 0..steps {
            let xp_t = l.xp + t * b * x;
            let mut fold = None;
            if let Some(switch) = &switch {
                let mut prm = self.params(l, b, xp_t, 0, 0, 0, l.rin + t * nr, 0, 0);
                prm[slot::SYMBOLS] = self.step_tokens(l, b, t)?;
                p.flat(switch.clone(), &prm, b * self.hidden);
            } else {
                let (rec, ld) = self.rec_at(l, b, t);
                let bias = [self.rec_apart.map(|o| l.params + o), None];
                let (a, w) = ((Buf::A, l.rin + t * nr, self.rin), (Buf::W, l.params + self.w_rec, self.rec_ld));
                let g = Gemm { m: b, n: self.rec_width, k: self.rin, a, ta: false, b: w, tb: true, c: (Buf::A, rec, ld), accumulate: self.rec_apart.is_none(), bias };
                // `fwd` reads the product first and finishes a split one itself (`fold_split`);
                // with a second product, `gate` reads it first and keeps the reduction.
                if self.folds() {
                    fold = p.gemm_folded(gpu, g)?;
                } else {
                    p.gemm(gpu, g)?;
                }
            }
            let mut prm = self.params(l, b, xp_t, l.st + t * ns, l.st + (t + 1) * ns, l.y + t * b * self.out, l.rin + (t + 1) * nr, 0, 0);
            set_fold(&mut prm, fold);
            if let (Some(s), Some(gate)) = (&self.second, &gate) {
                p.flat(gate.clone(), &prm, b * self.threads);
                let w = (Buf::W, l.params + s.w, s.ld);
                let a = (Buf::A, l.rp + t * nr, self.rin);
                p.gemm(gpu, Gemm { m: b, n: s.rows, k: self.rin, a, ta: false, b: w, tb: true, c: (Buf::A, xp_t + s.col, x), accumulate: true, bias: [None; 2] })?;
            }
            p.flat(fwd.clone(), &prm, b * self.threads);
            if let (Some(pr), Some(post)) = (&self.proj, &post) {
                let (h_t, y_t) = ((Buf::A, l.act + t * b * self.act, self.act), (Buf::A, l.y + t * b * self.out, self.out));
                p.gemm(gpu, Gemm { m: b, n: pr.p, k: self.hidden, a: h_t, ta: false, b: (Buf::W, l.params + pr.w, self.hidden), tb: true, c: y_t, accumulate: false, bias: [None; 2] })?;
                p.flat(post.clone(), &prm, b * pr.p);
            }
        }
        Ok(())
    }

    /// Record the backward pass of the latest forward: parameter gradients added to `G`, the
    /// input gradient written to `dx` when wanted, `ds` left holding ∂L/∂`st[0]`. The gradient
    /// of the final state is taken as zero (truncated backpropagation).
    pub fn backward(&self, gpu: &Gpu, p: &mut Program, l: &LayerBufs, steps: usize, batch: usize) -> Result<()> {
        let (x, b, d, r) = (self.xp, batch, self.input, self.rin);
        let (ns, nr, tb) = (b * self.state, b * r, steps * batch);
        p.clear(Buf::A, l.ds, ns);
        p.clear(Buf::A, l.dr, nr);
        let (bwd, init) = (self.kernel(gpu, "bwd")?, self.kernel(gpu, "init_bwd")?);
        // the kernels a step may add to `bwd`
        let (switch, gate, pre) = (self.kernel_if(gpu, self.switched.is_some(), "switch_bwd")?, self.kernel_if(gpu, self.second.is_some(), "bwd_gate")?, self.kernel_if(gpu, self.proj.is_some(), "proj_pre")?);
        // the split product into `dr` of the step after, for this step's `bwd` to finish
        let mut pending = None;
        for t in (0..steps).rev() {
            let xp_t = l.xp + t * b * x;
            let mut prm = self.params(l, b, xp_t, l.st + t * ns, l.st + (t + 1) * ns, 0, l.dr, l.dy + t * b * self.out, l.ds);
            set_fold(&mut prm, pending.take());
            if let (Some(pr), Some(pre)) = (&self.proj, &pre) {
                // ∂L/∂y_t into rp[t], then ∂L/∂h_t = that · W_proj into the scratch `bwd` reads.
                p.flat(pre.clone(), &prm, b * pr.p);
                let scratch = self.proj_scratch(l, tb);
                let gy = (Buf::A, l.rp + t * b * pr.p, pr.p);
                p.gemm(gpu, Gemm { m: b, n: self.hidden, k: pr.p, a: gy, ta: false, b: (Buf::W, l.params + pr.w, self.hidden), tb: false, c: (Buf::A, scratch, self.hidden), accumulate: false, bias: [None; 2] })?;
                prm[slot::DY] = scratch as u32;
            }
            p.flat(bwd.clone(), &prm, b * self.threads);
            if let (Some(s), Some(gate)) = (&self.second, &gate) {
                // ∂L/∂rp[t] into act[t], then the gates' gradients and dr's first part.
                let w = (Buf::W, l.params + s.w, s.ld);
                let c = (Buf::A, l.act + t * b * self.act, self.act);
                p.gemm(gpu, Gemm { m: b, n: r, k: s.rows, a: (Buf::A, xp_t + s.col, x), ta: false, b: w, tb: false, c, accumulate: false, bias: [None; 2] })?;
                p.flat(gate.clone(), &prm, b * self.threads);
            }
            // ∂L/∂rin[t]: what step t-1 produced reaches the loss through this step's product.
            if let Some(switch) = &switch {
                let mut prm = self.params(l, b, xp_t, 0, 0, 0, l.dr, 0, 0);
                prm[slot::SYMBOLS] = self.step_tokens(l, b, t)?;
                p.flat(switch.clone(), &prm, b * self.hidden);
            } else {
                let (rec, ld) = self.rec_at(l, b, t);
                let w = (Buf::W, l.params + self.w_rec, self.rec_ld);
                let g = Gemm { m: b, n: r, k: self.rec_width, a: (Buf::A, rec, ld), ta: false, b: w, tb: false, c: (Buf::A, l.dr, r), accumulate: self.second.is_some(), bias: [None; 2] };
                // the next step back's `bwd` reads `dr` first (not so with a projection, whose
                // `proj_pre` does, nor after step 0, where `init_bwd` does): it finishes a split
                if t > 0 && self.folds() && self.proj.is_none() {
                    pending = p.gemm_folded(gpu, g)?;
                } else {
                    p.gemm(gpu, g)?;
                }
            }
        }
        p.flat(init, &self.params(l, b, 0, l.st, 0, 0, l.dr, 0, l.ds), b * self.rin.max(self.state));
        if let Some(pr) = self.proj.as_ref().filter(|pr| pr.from_state) {
            // rin[0] = mask ∘ W_proj g(c_{-1}): its gradient (dr, masked by init_bwd) reaches
            // W_proj and, through g, the initial state.
            let scratch = self.proj_scratch(l, tb);
            let (w, gw) = ((Buf::W, l.params + pr.w, self.hidden), (Buf::G, l.params + pr.w, self.hidden));
            p.flat(self.kernel(gpu, "proj_init")?, &self.params(l, b, 0, l.st, 0, 0, l.dr, scratch, l.ds), b * self.hidden);
            p.gemm(gpu, Gemm { m: pr.p, n: self.hidden, k: b, a: (Buf::A, l.dr, pr.p), ta: true, b: (Buf::A, scratch, self.hidden), tb: false, c: gw, accumulate: true, bias: [None; 2] })?;
            p.gemm(gpu, Gemm { m: b, n: self.hidden, k: pr.p, a: (Buf::A, l.dr, pr.p), ta: false, b: w, tb: false, c: (Buf::A, scratch, self.hidden), accumulate: false, bias: [None; 2] })?;
            p.flat(self.kernel(gpu, "proj_init_bwd")?, &self.params(l, b, 0, l.st, 0, 0, l.dr, scratch, l.ds), b * self.hidden);
        }
        if self.own_start.is_some() {
            p.flat(self.kernel(gpu, "s0_grad")?, &self.params(l, b, 0, l.st, 0, 0, l.dr, 0, l.ds), self.hidden);
        }
        // Weight gradients over all T·B rows.
        if self.switched.is_some() {
            let Some((_, starts, positions, k)) = l.symbols else { anyhow::bail!("a cell switched by its input symbols must be the model's first layer") };
            let mut prm = self.params(l, b, l.xp, 0, 0, 0, l.rin, 0, 0);
            (prm[slot::SYM_STARTS], prm[slot::SYM_POSITIONS], prm[slot::SYM_COUNT]) = (starts as u32, positions as u32, k as u32);
            p.flat(self.kernel(gpu, "switch_dw")?, &prm, k * self.hidden * self.hidden);
        } else {
            let (rec, ld) = self.rec_at(l, b, 0);
            let gw = (Buf::G, l.params + self.w_rec, self.rec_ld);
            p.gemm(gpu, Gemm { m: self.rec_width, n: r, k: tb, a: (Buf::A, rec, ld), ta: true, b: (Buf::A, l.rin, r), tb: false, c: gw, accumulate: true, bias: [None; 2] })?;
        }
        if let Some(pr) = &self.proj {
            let (a, c) = ((Buf::A, l.rp, pr.p), (Buf::G, l.params + pr.w, self.hidden));
            p.gemm(gpu, Gemm { m: pr.p, n: self.hidden, k: tb, a, ta: true, b: (Buf::A, l.act, self.act), tb: false, c, accumulate: true, bias: [None; 2] })?;
        }
        if let Some(s) = &self.second {
            let (a, c) = ((Buf::A, l.xp + s.col, x), (Buf::G, l.params + s.w, s.ld));
            p.gemm(gpu, Gemm { m: s.rows, n: r, k: tb, a, ta: true, b: (Buf::A, l.rp, r), tb: false, c, accumulate: true, bias: [None; 2] })?;
        }
        let u = |v: usize| v as u32;
        for blk in &self.inputs {
            let (a, w) = ((Buf::A, l.xp + blk.col, x), (Buf::G, l.params + blk.w, blk.ld));
            p.gemm(gpu, Gemm { m: blk.rows, n: d, k: tb, a, ta: true, b: (Buf::A, l.x, d), tb: false, c: w, accumulate: true, bias: [None; 2] })?;
            let (b0, b1) = (blk.biases.first().map_or(0, |o| l.params + o), blk.biases.get(1).map(|o| l.params + o));
            if !blk.biases.is_empty() {
                let prm = [u(tb), u(blk.rows), u(l.xp + blk.col), u(x), u(b0), u(b1.unwrap_or(0)), b1.is_some() as u32];
                p.dispatch(crate::kernels::gpu::op(gpu, "colsum")?, &prm, [u(blk.rows.div_ceil(64)), 1, 1]);
            }
        }
        if let (Some(rows), Some((_, starts, positions, k))) = (self.gather, l.symbols) {
            let prm = [u(k), u(x), u(starts), u(positions), u(l.params + rows), u(l.xp), 0, 0];
            p.flat(crate::kernels::gpu::op(gpu, "embed_scatter")?, &prm, k * x);
        }
        if let Some(o) = self.rec_apart {
            let prm = [u(tb), u(self.rec_width), u(l.rp), u(self.rec_width), u(l.params + o), 0, 0];
            p.dispatch(crate::kernels::gpu::op(gpu, "colsum")?, &prm, [u(self.rec_width.div_ceil(64)), 1, 1]);
        }
        if let Some(dx) = l.dx {
            for (i, blk) in self.inputs.iter().enumerate() {
                let w = (Buf::W, l.params + blk.w, blk.ld);
                p.gemm(gpu, Gemm { m: tb, n: d, k: blk.rows, a: (Buf::A, l.xp + blk.col, x), ta: false, b: w, tb: false, c: (Buf::A, dx, d), accumulate: i > 0, bias: [None; 2] })?;
            }
        }
        Ok(())
    }
}
