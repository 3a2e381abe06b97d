//! Recurrent cells. One file per cell, each with the same structure (follow `ran.rs` to write
//! a new one):
//!
//! - a struct holding the cell's sizes and options, with its equations in the doc comment;
//! - `tensors()`: the parameter tensors in the order they sit in the layer's flat parameter
//!   slice, named as `docs/checkpoint.md` (the order is chosen so that the matrices one
//!   GEMM needs are adjacent);
//! - `forward()` over a whole sequence: the input projections of all steps as one GEMM, then
//!   per step one recurrent GEMM and one fused pointwise pass, keeping on the [`Workspace`]
//!   exactly what backward needs, each step's output rows written where [`Outputs`] says (`y`
//!   only from the first step the caller reads, [`Seq::out_from`]);
//! - `backward()` over the same sequence in reverse, producing gradients of every parameter,
//!   the inputs and the initial state; weight gradients are formed after the loop by single
//!   GEMMs over all steps.
//!
//! Layout conventions: sequences are time-major, `x[t][b][d]` flattened as `[T, B, D]`; a state
//! is `[B, S]` where `S` is the cell's state length (an LSTM's `[h | c]` are two blocks,
//! `h` first, each `[B, ·]`).

#[cfg(feature = "gpu")]
pub mod gpu;
pub mod gru;
pub mod registry;
pub mod isan;
pub mod linear;
pub mod lstm;
pub mod lstm_no_output_gate;
pub mod lstm_simple_content;
pub mod ran;
pub mod rda;
pub mod rnn;

#[cfg(test)]
pub mod gradcheck;

use crate::kernels::num::Float;
pub use registry::Cell;
use std::ops::Range;

/// `dst = mask ∘ src` (a plain copy without a mask).
pub(crate) fn masked_copy<T: Float>(dst: &mut [T], src: &[T], mask: Option<&[T]>) {
    match mask {
        Some(mk) => dst.iter_mut().zip(src.iter().zip(mk)).for_each(|(o, (&s, &mv))| *o = s * mv),
        None => dst.copy_from_slice(src),
    }
}

/// A buffer the row parts of [`row_parts`] share: each part touches only its own batch rows.
#[derive(Clone, Copy)]
pub(crate) struct Shared<T>(*mut T);
// SAFETY: parts only ever touch disjoint elements (see `at`).
unsafe impl<T: Send> Send for Shared<T> {}
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub(crate) fn new(v: &mut [T]) -> Self {
        Shared(v.as_mut_ptr())
    }

    /// Elements `range` of the buffer.
    ///
    /// # Safety
    /// `range` lies inside the buffer, and no other live slice overlaps it.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn at(&self, range: Range<usize>) -> &mut [T] {
        // SAFETY: as the caller guarantees.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(range.start), range.len()) }
    }
}

/// Run `f(part)` on one contiguous range of batch rows per thread.
///
/// A recurrent step never mixes batch rows (row `b` of `h_t` depends on row `b` of `h_{t-1}`
/// only), so each range can run the whole time loop, GEMM and pointwise work alike, without
/// meeting the others: no synchronisation per step, the pointwise work is split as well as the
/// GEMM, and each row's gates stay in the cache of the core that computed them. Every element
/// is computed by the same code in the same order however the rows are split, so results do
/// not depend on the thread count. Ranges are as even as the batch allows (the GEMM kernel
/// balances its own row blocks, so a range need not be a multiple of its 6 rows).
pub(crate) fn row_parts(batch: usize, f: impl Fn(Part) + Sync) {
    let threads = rayon::current_num_threads().clamp(1, batch.max(1));
    let per = batch.div_ceil(threads).max(1);
    crate::kernels::gemm::for_each_block(0, batch.div_ceil(per), &|i| f(Part { batch, rows: i * per..((i + 1) * per).min(batch) }));
}

/// Where each step's output rows go: `y`'s own rows from [`Seq::out_from`] on, and before it
/// the part's rows of one `[B, width]` scratch block that every such step overwrites (a cell
/// may read a step's outputs back within the step: the LSTM's `h` into its state, the RAN's
/// into the next step's input).
pub(crate) struct Outputs<T> {
    y: Shared<T>,
    scratch: Shared<T>,
    from: usize,
    width: usize,
}

impl<T: Float> Outputs<T> {
    /// `y` is `[T, B, width]`; `scratch` is sized here (`[B, width]`, only when some step
    /// goes there).
    pub(crate) fn new(y: &mut [T], scratch: &mut Vec<T>, seq: &Seq<T>, width: usize) -> Self {
        assert!(y.len() >= seq.steps * seq.batch * width, "Outputs: y too short");
        if seq.out_from > 0 && scratch.len() < seq.batch * width {
            scratch.resize(seq.batch * width, T::zero());
        }
        Outputs { y: Shared::new(y), scratch: Shared::new(scratch), from: seq.out_from, width }
    }

    /// Whether anyone reads step `t`'s outputs (a cell whose output is a copy of its state
    /// skips the copy where not).
    pub(crate) fn read(&self, t: usize) -> bool {
        t >= self.from
    }

    /// Part `p`'s output rows at step `t`.
    ///
    /// # Safety
    /// As [`Shared::at`]: each part asks only for its own rows, and holds one step's at a time.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn rows(&self, p: &Part, t: usize) -> &mut [T] {
        // SAFETY: the part's own rows of a buffer sized for them (asserted in `new`).
        unsafe {
            if self.read(t) {
                self.y.at(p.at(t, self.width))
            } else {
                self.scratch.at(p.block(0, self.width))
            }
        }
    }
}

/// How a tensor is initialised by the model (see `model::Init`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitKind {
    /// A weight matrix with the given fan-in and fan-out.
    Weight { fan_in: usize, fan_out: usize },
    /// A bias (zero under Xavier, uniform under the uniform scheme).
    Bias,
    /// A gate bias that should start open (forget or discount gates): 1 under Xavier.
    GateBias,
    /// Stacked gate biases of which block `gate` of `gates` equal blocks starts open (an
    /// LSTM's forget rows): that block is 1 under Xavier, the rest 0.
    OpenGateRows { gate: usize, gates: usize },
    /// A square recurrent matrix initialised to the identity (IRNN).
    Identity,
}

/// One named parameter tensor of a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: InitKind,
}

impl TensorSpec {
    pub fn new(name: &str, shape: &[usize], init: InitKind) -> Self {
        TensorSpec { name: name.to_string(), shape: shape.to_vec(), init }
    }
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Per-row widths of the workspace buffers a cell needs (see [`Workspace`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WsDims {
    /// input projections per step; backward writes their gradients over them, each row's
    /// read before it is written (a trace reads them after a forward)
    pub xp: usize,
    /// activations kept for backward per step
    pub act: usize,
    /// state length
    pub state: usize,
    /// recurrent input per step (what the recurrent GEMM reads, after the dropout mask)
    pub rin: usize,
    /// recurrent projection per step (and its gradient)
    pub rp: usize,
    /// cell-specific per-step buffer
    pub extra: usize,
    /// per-step scratch, not kept across steps
    pub tmp: usize,
    /// integer scratch (for example symbol groupings): `idx` entries per `(t, b)` position
    /// plus `idx_fixed` more
    pub idx: usize,
    pub idx_fixed: usize,
}

/// Buffers for one sequence shape, allocated once and reused by every forward/backward of
/// that shape. All are `[T, B, width]` unless noted.
#[derive(Default)]
pub struct Workspace<T> {
    pub steps: usize,
    pub batch: usize,
    pub dims: WsDims,
    pub xp: Vec<T>,
    pub act: Vec<T>,
    /// `[T+1, B, S]`: `st[0]` is the initial state, `st[t+1]` the state after step `t`.
    pub st: Vec<T>,
    pub rin: Vec<T>,
    /// `[B, rp]`: one step's recurrent projection in forward.
    pub rp: Vec<T>,
    pub extra: Vec<T>,
    /// `[B, tmp]`
    pub tmp: Vec<T>,
    pub drp: Vec<T>,
    /// `[B, S]`: the running state gradient in backward.
    pub ds: Vec<T>,
    /// `[B, rin]`: gradient with respect to the recurrent input of the current step.
    pub dr: Vec<T>,
    /// `[T·B·idx + idx_fixed]` integer scratch
    pub idx: Vec<u32>,
    /// `[B, output]`: where the steps before [`Seq::out_from`] put their outputs (`Outputs`)
    pub y_scratch: Vec<T>,
    /// The shape `(dims, steps, batch)` the gradient buffers (`drp`, `ds`, `dr`) were
    /// made for: they are made at the first backward of a shape, not by [`Workspace::ensure`].
    grad_shape: Option<(WsDims, usize, usize)>,
    /// The recurrent weights packed once per forward or backward pass for the per-step GEMMs.
    pub pk: [crate::kernels::gemm::PackedB<T>; 2],
    /// Scratch for the input side: with an embedded input the per-symbol projections in
    /// forward and their gradients' sums in backward; with a thin input the weight's columns
    /// in forward and the one gradient product in backward (see `project_input`, `input_rows`,
    /// `rec_input_backward`); grown to the largest size seen.
    pub tok: Vec<T>,
}

/// `v` as `n` zeros, in a fresh allocation (the old one freed first). A zeroed allocation
/// (`vec![0.0; n]` asks the allocator for zeroed memory) leaves its pages to the kernel until
/// written: a buffer a cell never writes (the RNN's `rin` without a dropout mask) takes no
/// memory, and the written ones are zeroed once, by the kernel, not also by a fill here. (Parts
/// of rows left unwritten share their pages with written ones and are mapped all the same.)
fn zeroed<T: Float>(v: &mut Vec<T>, n: usize) {
    *v = Vec::new();
    *v = vec![T::zero(); n];
}

impl<T: Float> Workspace<T> {
    /// Make the buffers fit `(dims, steps, batch)`, reallocating only when the shape changes.
    pub fn ensure(&mut self, dims: WsDims, steps: usize, batch: usize) {
        if self.dims == dims && self.steps == steps && self.batch == batch {
            return;
        }
        let (tb, fit) = (steps * batch, zeroed::<T>);
        fit(&mut self.xp, tb * dims.xp);
        fit(&mut self.act, tb * dims.act);
        fit(&mut self.st, (steps + 1) * batch * dims.state);
        fit(&mut self.rin, tb * dims.rin);
        fit(&mut self.rp, batch * dims.rp);
        fit(&mut self.extra, tb * dims.extra);
        fit(&mut self.tmp, batch * dims.tmp);
        self.idx.clear();
        self.idx.resize(tb * dims.idx + dims.idx_fixed, 0);
        self.dims = dims;
        self.steps = steps;
        self.batch = batch;
    }

    /// Set the initial state `st[0]`: a copy of `s0`, or zeros for `None` (cells with a learned
    /// initial state write their own after this).
    pub fn begin_forward(&mut self, s0: Option<&[T]>) {
        let n = self.batch * self.dims.state;
        match s0 {
            Some(s) => self.st[..n].copy_from_slice(s),
            None => self.st[..n].fill(T::zero()),
        }
    }

    /// Make the backward's buffers fit the shape of the latest [`Workspace::ensure`], zeroed
    /// when that shape is new to them, as `ensure` makes the others. Only a backward pass asks
    /// for them, so that a forward alone (`eval`, `explain`, inference) neither allocates nor
    /// touches them.
    fn ensure_grads(&mut self) {
        let shape = (self.dims, self.steps, self.batch);
        if self.grad_shape == Some(shape) {
            return;
        }
        let (dims, tb, batch, fit) = (self.dims, self.steps * self.batch, self.batch, zeroed::<T>);
        fit(&mut self.drp, tb * dims.rp);
        fit(&mut self.ds, batch * dims.state);
        fit(&mut self.dr, batch * dims.rin);
        self.grad_shape = Some(shape);
    }

    /// Start the running state gradient from the final state's gradient (or zero), after
    /// sizing the backward's buffers (every cell's backward begins here).
    pub fn begin_backward(&mut self, ds_final: Option<&[T]>) {
        self.ensure_grads();
        match ds_final {
            Some(ds) => self.ds.copy_from_slice(ds),
            None => self.ds.fill(T::zero()),
        }
        self.dr.fill(T::zero());
    }

    /// The state after the last step of the latest forward.
    pub fn final_state(&self) -> &[T] {
        let n = self.batch * self.dims.state;
        &self.st[self.steps * n..(self.steps + 1) * n]
    }
}

/// One quantity a cell computed at every step of its latest forward, for the reader of its
/// state (`rnnlens.Model.states`): `values` is `[T, B, width]`.
#[derive(Clone, Debug)]
pub struct Trace<T> {
    pub name: &'static str,
    pub width: usize,
    pub values: Vec<T>,
}

impl<T: Float> Workspace<T> {
    /// Columns `cols` of every step's row of a per-step buffer whose rows are `row` wide
    /// (`xp`, `act`: `[T, B, row]`), as a [`Trace`] named `name`.
    pub fn trace(&self, name: &'static str, buf: &[T], row: usize, cols: std::ops::Range<usize>) -> Trace<T> {
        let width = cols.len();
        let mut values = Vec::with_capacity(self.steps * self.batch * width);
        for r in buf.chunks_exact(row).take(self.steps * self.batch) {
            values.extend_from_slice(&r[cols.clone()]);
        }
        Trace { name, width, values }
    }

    /// The state's block at columns `cols` after every step (`st[1..=T]`), `[T, B, width]`. A
    /// state `[B, S]` is stored as its blocks one after another, each `[B, width]` (an LSTM's
    /// `[h | c]`), so the block starting at column `c0` starts at `B·c0`; `cols` is one whole
    /// block.
    pub fn trace_state(&self, name: &'static str, cols: std::ops::Range<usize>) -> Trace<T> {
        let (s, nb, width) = (self.dims.state, self.batch, cols.len());
        let mut values = Vec::with_capacity(self.steps * nb * width);
        for t in 1..=self.steps {
            let at = t * nb * s + nb * cols.start;
            values.extend_from_slice(&self.st[at..at + nb * width]);
        }
        Trace { name, width, values }
    }
}

/// A sequence presented to a cell.
pub struct Seq<'a, T> {
    pub steps: usize,
    pub batch: usize,
    /// `[T, B, D]`
    pub x: &'a [T],
    /// `[T, B]` token ids, for cells that switch on the symbol itself (ISAN)
    pub tokens: Option<&'a [u32]>,
    /// `[B, S]` initial state; `None` starts from the cell's own: zeros, or a learned state
    /// (whose parameters then receive the initial-state gradient)
    pub s0: Option<&'a [T]>,
    /// `[B, R]` variational dropout mask on the recurrent input (already scaled by `1/(1-p)`).
    pub mask: Option<&'a [T]>,
    /// `[V, D]`: when given, `x[t][b]` is row `tokens[t][b]` of this table (an embedding looked
    /// up without dropout), and the cell forms its input-side products per symbol instead of
    /// per step (see `project_input`); `tokens` must then be given.
    pub emb: Option<&'a [T]>,
    /// The first step whose output the caller reads (0: every step). The steps before it put
    /// their output rows in a scratch block (`Outputs`) instead of `y`, whose rows there stay
    /// as they were: a task scored at its last step (C3's addition, MNIST) stores one step's
    /// outputs of `T`, not a `T·B·H` stream a step each line of which is first read for
    /// ownership, and the pages of `y` it never writes are never mapped (docs/benchmarks.md,
    /// "Outputs only where they are read"). The gradient `dy` of those steps must be zero.
    pub out_from: usize,
}

impl<'a, T> Seq<'a, T> {
    /// The embedding table (`V` rows of `d`), the symbols of the `T·B` positions (each checked
    /// to be below `V`) and `V`, when the inputs are rows of the table.
    fn embedded(&self, d: usize) -> Option<(&'a [T], &'a [u32], usize)> {
        let emb = self.emb?;
        let tokens = &self.tokens.expect("Seq: an embedding needs its tokens")[..self.steps * self.batch];
        let v = emb.len() / d.max(1);
        if let Some(bad) = tokens.iter().find(|&&tok| tok as usize >= v) {
            panic!("embedded input: symbol {bad} out of range (V = {v})");
        }
        Some((emb, tokens, v))
    }
}

/// `f(i, row i of c)` for rows `i < rows` of `c` (`n` wide at stride `ldc`), blocks of rows
/// spread over the pool.
fn par_rows<T: Float>(rows: usize, (c, ldc, n): (&mut [T], usize, usize), f: impl Fn(usize, &mut [T]) + Sync) {
    assert!(rows == 0 || c.len() >= (rows - 1) * ldc + n, "par_rows: C too short");
    let out = Shared::new(c);
    crate::kernels::gemm::for_each_block(0, rows.div_ceil(ROWS_PER_BLOCK), &|blk| {
        for i in blk * ROWS_PER_BLOCK..((blk + 1) * ROWS_PER_BLOCK).min(rows) {
            // SAFETY: row i lies inside `c` (asserted above), and blocks own disjoint rows.
            f(i, unsafe { out.at(i * ldc..i * ldc + n) });
        }
    });
}

/// Rows per block of [`par_rows`].
const ROWS_PER_BLOCK: usize = 256;

/// `c[T·B, n] = x · op(W) + bias[0] + bias[1] + …` (overwritten, row stride `ldc`; the biases
/// added in that order to each element), the input projections of all steps; `W` is `[n, D]`
/// at row stride `ldw` when `tw` (PyTorch's layout), else `[D, n]`. The biases are added in
/// one pass over the rows however many there are (C3's projections are 400 MB).
///
/// With an embedding (`seq.emb`, `V` symbols) the product is formed once per symbol, into
/// `table` (`[V, n]`), and each step's row is copied from it: `V·n·D` multiply-adds instead
/// of `T·B·n·D` (a character model's 27 symbols against 6,400 rows). Where our kernel runs the
/// product (f32, `n ≥ 16`), each element is the same dot product in the same order as in the
/// per-step GEMM, so the result is bit-identical to it.
pub(crate) fn project_input<T: Float>(
    seq: &Seq<T>,
    (d, n): (usize, usize),
    (w, ldw, tw): (&[T], usize, bool),
    bias: &[&[T]],
    (c, ldc): (&mut [T], usize),
    table: &mut Vec<T>,
) {
    project_input_or_table(seq, (d, n), (w, ldw, tw), bias, (c, ldc), table, false);
}

/// As [`project_input`], except that with an embedding (`seq.emb`) the rows are not copied
/// into `c`: returns true, and `table[..V·n]` holds the per-symbol rows for the cell to copy
/// into each step's block just before that step's product ([`step_rows`]), while the block is
/// in cache. The C1 LSTM's inference spent about a tenth of its time writing the 6,400 rows
/// out and reading them back (docs/benchmarks.md); the LSTM, the simple RNN and the RAN defer.
pub(crate) fn project_input_or_table<T: Float>(
    seq: &Seq<T>,
    (d, n): (usize, usize),
    (w, ldw, tw): (&[T], usize, bool),
    bias: &[&[T]],
    (c, ldc): (&mut [T], usize),
    table: &mut Vec<T>,
    defer: bool,
) -> bool {
    use crate::kernels::gemm::{add_bias_row, add_bias_rows};
    let m = seq.steps * seq.batch;
    let Some((emb, tokens, v)) = seq.embedded(d) else {
        if d > crate::kernels::gemm::THIN {
            crate::kernels::gemm::gemm(m, n, d, seq.x, d, false, w, ldw, tw, c, ldc, false);
            add_bias_rows(m, n, bias, c, ldc);
            return false;
        }
        // A few features per step (C3's two): the product and the biases in one pass over
        // the rows, each row built in L1, instead of a GEMM that writes the 400 MB and a pass
        // that reads and writes them again (docs/benchmarks.md, "Thin inputs projected in one
        // pass"). The same operations in the same order as our kernel's dot product (a chain
        // of FMAs from zero) and the biases after, so the result is bit-identical to that path.
        let cols: &[T] = if tw {
            table.resize(table.len().max(d * n), T::zero());
            for (kk, col) in table.chunks_exact_mut(n).take(d).enumerate() {
                col.iter_mut().enumerate().for_each(|(j, o)| *o = w[j * ldw + kk]);
            }
            &table[..d * n]
        } else {
            w
        };
        let ldcol = if tw { n } else { ldw };
        par_rows(m, (c, ldc, n), |i, row| {
            let x = &seq.x[i * d..(i + 1) * d];
            row.fill(T::zero());
            for (kk, &xk) in x.iter().enumerate() {
                let col = &cols[kk * ldcol..kk * ldcol + n];
                row.iter_mut().zip(col).for_each(|(o, &wv)| *o = xk.mul_add(wv, *o));
            }
            add_bias_row(row, bias);
        });
        return false;
    };
    table.resize(table.len().max(v * n), T::zero());
    crate::kernels::gemm::gemm(v, n, d, emb, d, false, w, ldw, tw, table, n, false);
    add_bias_rows(v, n, bias, table, n);
    if defer {
        return true;
    }
    let table = &table[..v * n];
    par_rows(m, (c, ldc, n), |i, row| {
        let tok = tokens[i] as usize;
        row.copy_from_slice(&table[tok * n..(tok + 1) * n]);
    });
    false
}

/// Each row of `out` (`n` wide) set to row `tokens[i]` of the per-symbol `table`, as
/// [`project_input`] would have set it.
pub(crate) fn step_rows<T: Float>(table: &[T], n: usize, tokens: &[u32], out: &mut [T]) {
    for (row, &tok) in out.chunks_exact_mut(n).zip(tokens) {
        row.copy_from_slice(&table[tok as usize * n..(tok as usize + 1) * n]);
    }
}

/// What the input-side gradients of a cell sum over: the `T·B` rows of `(dxp, x)`, or with an
/// embedding one row per symbol, `(Σ_{t,b: tok = v} dxp[t][b], emb[v])`; the input weights'
/// gradient is `gᵀ x` either way, and the input gradient `g · W` is then the embedding's.
pub(crate) struct InputRows<'b, T> {
    pub rows: usize,
    /// `[rows, width]`
    pub g: &'b [T],
    /// `[rows, D]`
    pub x: &'b [T],
    /// whether the input gradient (`Grads::dx`) is added to, as an embedding's, rather than
    /// overwritten, as a sequence's
    pub add: bool,
}

/// The [`InputRows`] of `seq` for the projections' gradients `dxp` (`[T·B, width]`); `sums`
/// holds the per-symbol sums when there is an embedding. The sums run over the rows in order,
/// each thread over its own columns, so they do not depend on the thread count.
pub(crate) fn input_rows<'b, T: Float>(seq: &Seq<'b, T>, d: usize, dxp: &'b [T], width: usize, sums: &'b mut Vec<T>) -> InputRows<'b, T> {
    let m = seq.steps * seq.batch;
    let Some((emb, tokens, v)) = seq.embedded(d) else {
        return InputRows { rows: m, g: dxp, x: seq.x, add: false };
    };
    sums.clear();
    sums.resize(v * width, T::zero());
    let out = Shared::new(sums);
    crate::kernels::gemm::for_column_blocks(m, width, |j0, j1| {
        for (row, &tok) in dxp[..m * width].chunks_exact(width).zip(tokens) {
            let tok = tok as usize;
            // SAFETY: tok < V (checked by `embedded`); blocks own disjoint columns of `sums`.
            let acc = unsafe { out.at(tok * width + j0..tok * width + j1) };
            acc.iter_mut().zip(&row[j0..j1]).for_each(|(a, &g)| *a += g);
        }
    });
    InputRows { rows: v, g: sums, x: emb, add: true }
}

/// The input side of the backward of a cell whose gates read `x W_inᵀ + b` (LSTM, GRU, RNN,
/// RAN and the LSTM ablations), from those products' gradient `dxp` (`[T·B, width]`, `w_in`
/// `[width, D]`): `gw += Σ dxpᵀ x`, every bias in `dbs` `+= Σ dxp`, and the input gradient
/// `dxp · W_in` into `dx` where wanted; per symbol with an embedding ([`input_rows`], `sums`
/// its scratch).
#[allow(clippy::too_many_arguments)]
pub(crate) fn input_backward<T: Float>(
    seq: &Seq<T>,
    (d, width): (usize, usize),
    dxp: &[T],
    (w_in, gw): (&[T], &mut [T]),
    dbs: &mut [&mut [T]],
    dx: Option<&mut [T]>,
    sums: &mut Vec<T>,
) {
    let inp = input_rows(seq, d, dxp, width, sums);
    crate::kernels::gemm::linear_dw_db(inp.rows, width, d, inp.g, inp.x, gw, dbs);
    if let Some(dx) = dx {
        crate::kernels::gemm::linear_dx(inp.rows, width, d, inp.g, w_in, dx, inp.add);
    }
}

/// Width of a cell's `rin` rows: the recurrent input `r`, and with an input of at most
/// [`FOLD_MAX`] features the step's `x_t` and a 1 after it, so that [`rec_input_backward`]
/// takes the recurrent weights', the input weights' and the biases' gradients from one GEMM.
pub(crate) fn rin_width(r: usize, d: usize) -> usize {
    if d <= FOLD_MAX {
        r + d + 1
    } else {
        r
    }
}

/// Whether `x_t` and 1 ride along in `rin` (see [`rin_width`]) for this sequence: an input of
/// at most [`FOLD_MAX`] features given as values. With an embedding the input side goes per symbol ([`input_rows`]) instead.
pub(crate) fn folds_input<T>(seq: &Seq<T>, d: usize) -> bool {
    d <= FOLD_MAX && seq.emb.is_none()
}

/// The widest input given as values that rides in `rin` ([`rin_width`]): up to here the
/// backward's one GEMM `dxpᵀ · [r | x | 1]` reads the gates' gradient once where two GEMMs
/// (and the biases' column sums) read it three times. Measured at 128 inputs into 512 units
/// (`rnnlens.torch`'s C1 layer, one thread, the Intel Xeon with AMX of 2026-12-06): the bf16
/// step 13-30 % faster for the LSTM, GRU, RAN, RDA and RWA, f32 within ±5 % (docs/benchmarks.md,
/// "The input folded into the step's product"). Wider inputs not measured: kept apart.
pub(crate) const FOLD_MAX: usize = 128;

/// Pack the step GEMM's weights for a thin input riding in `rin` ([`folds_input`]): `rows`
/// rows of `[W_rec | W_x | b]` (`ri` wide, [`rin_width`]), row `j` from `row(j)` = its
/// recurrent weights, its input weights (none: zeros) and its bias; staged in `staged`.
pub(crate) fn pack_folded<'w, T: Float + 'w>(
    pk: &mut crate::kernels::gemm::PackedB<T>,
    staged: &mut Vec<T>,
    (rows, ri): (usize, usize),
    row: impl Fn(usize) -> (&'w [T], Option<&'w [T]>, T),
) {
    staged.clear();
    staged.resize(rows * ri, T::zero());
    for (j, out) in staged.chunks_exact_mut(ri).enumerate() {
        let (rec, x, b) = row(j);
        let r = rec.len();
        out[..r].copy_from_slice(rec);
        if let Some(x) = x {
            out[r..r + x.len()].copy_from_slice(x);
        }
        out[ri - 1] = b;
    }
    pk.pack_linear(staged, rows, ri);
}

/// One step's rows of `rin` (width `ri`): the recurrent input `y` (`r` per row, times the
/// matching rows of `mask` when given), then, when `x` is given (`d` per row, [`folds_input`]),
/// `x_t` and a 1 ([`rin_width`]).
pub(crate) fn fill_rin_rows<T: Float>(rows: &mut [T], (r, ri): (usize, usize), y: &[T], mask: Option<&[T]>, x: Option<&[T]>) {
    for (b, row) in rows.chunks_exact_mut(ri).enumerate() {
        masked_copy(&mut row[..r], &y[b * r..(b + 1) * r], mask.map(|mk| &mk[b * r..(b + 1) * r]));
        if let Some(x) = x {
            let d = ri - r - 1;
            row[r..r + d].copy_from_slice(&x[b * d..(b + 1) * d]);
            row[r + d] = T::one();
        }
    }
}

/// The recurrent weights' gradient `gw_rec += dxpᵀ · rin[.., ..r]` (`[width, r]`; `rin` rows
/// of [`rin_width`]) and the input side as [`input_backward`] gives it. When `rin` carries
/// `x_t` and 1 ([`folds_input`]: C3's two features) both come from one GEMM `dxpᵀ · rin` over
/// the whole row, which reads the gradient (400 MB on C3's LSTM) once instead of twice: a thin
/// input's weights and the biases are its last `d + 1` columns.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rec_input_backward<T: Float>(
    seq: &Seq<T>,
    (d, width): (usize, usize),
    dxp: &[T],
    (rin, r): (&[T], usize),
    gw_rec: &mut [T],
    (w_in, gw_in): (&[T], &mut [T]),
    dbs: &mut [&mut [T]],
    dx: Option<&mut [T]>,
    scratch: &mut Vec<T>,
) {
    let (m, ri) = (seq.steps * seq.batch, rin_width(r, d));
    if !folds_input(seq, d) {
        input_backward(seq, (d, width), dxp, (w_in, gw_in), dbs, dx, scratch);
        crate::kernels::gemm::gemm(width, r, m, dxp, width, true, rin, ri, false, gw_rec, r, true);
        return;
    }
    scratch.resize(scratch.len().max(width * ri), T::zero());
    let c = &mut scratch[..width * ri];
    crate::kernels::gemm::gemm(width, ri, m, dxp, width, true, rin, ri, false, c, ri, false);
    for (j, row) in c.chunks_exact(ri).enumerate() {
        gw_rec[j * r..(j + 1) * r].iter_mut().zip(&row[..r]).for_each(|(o, &v)| *o += v);
        gw_in[j * d..(j + 1) * d].iter_mut().zip(&row[r..r + d]).for_each(|(o, &v)| *o += v);
        for db in dbs.iter_mut() {
            db[j] += row[r + d];
        }
    }
    if let Some(dx) = dx {
        crate::kernels::gemm::linear_dx(m, width, d, dxp, w_in, dx, false);
    }
}

/// Gradients flowing into a cell's backward pass and where its input gradients go.
pub struct Grads<'a, T> {
    /// `[T, B, O]` gradient of the loss with respect to the outputs.
    pub dy: &'a [T],
    /// `[B, S]` gradient with respect to the final state, if the loss reads it.
    pub ds_final: Option<&'a [T]>,
    /// `[T, B, D]` receives the input gradient (overwritten), if wanted; with an embedding
    /// (`seq.emb`), the table's gradient `[V, D]` is added to instead.
    pub dx: Option<&'a mut [T]>,
    /// `[B, S]` receives the initial-state gradient (overwritten), if wanted and `seq.s0` was
    /// given.
    pub ds0: Option<&'a mut [T]>,
}

/// Sizes every cell reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// `D`: width of the input at each step
    pub input: usize,
    /// `H`: hidden units
    pub hidden: usize,
    /// `O`: width of the output passed upward (`P` with a projection)
    pub output: usize,
    /// `S`: state length per batch row
    pub state: usize,
    /// `R`: width of the recurrent input the gates read (the dropout mask's width)
    pub rec: usize,
}

/// What every cell implements; [`Cell`] dispatches to it.
pub trait Recurrent {
    fn sizes(&self) -> Sizes;
    fn tensors(&self) -> Vec<TensorSpec>;
    /// The workspace's row widths; `thin`: the input rides in the step's GEMM
    /// ([`folds_input`]), which a cell may need fewer input projections for.
    fn ws_dims(&self, thin: bool) -> WsDims;
    /// Run the whole sequence. `w` is the cell's flat parameter slice, `y` is `[T, B, O]`.
    /// The final state is left in `ws.final_state()`.
    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]);
    /// Backward over the sequence of the latest `forward` on `ws`; parameter gradients are
    /// added to `g` (same layout as `w`).
    fn backward<T: Float>(&self, w: &[T], g: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>);
    /// Whether the cell reads token ids (`seq.tokens`) instead of vectors (`Sizes.input` is
    /// then the number of symbols and `seq.x` is empty).
    fn reads_tokens(&self) -> bool {
        false
    }
    /// Move an arbitrary state `[B, S]` into the cell's valid domain (for example a positive
    /// denominator); gradient checks call it on their random initial states.
    fn sanitize_state<T: Float>(&self, _s: &mut [T], _batch: usize) {}
    /// What the latest `forward` on `ws` computed at every step beside the layer's output: the
    /// cell's memory and gates, by the names of its equations. Nothing for a cell whose state
    /// is its output. Read it before any `backward` on `ws`: backward writes the gradients
    /// over the pre-activations (`xp`) some traces read.
    fn trace<T: Float>(&self, _ws: &Workspace<T>) -> Vec<Trace<T>> {
        Vec::new()
    }
    /// The cell's GPU kernels, described for `cells/gpu.rs` (each cell's `gpu_cell` beside its
    /// `.wgsl`); a cell without them keeps this, and `--device gpu` refuses it, naming it.
    #[cfg(feature = "gpu")]
    fn gpu_cell(&self) -> anyhow::Result<gpu::GpuCell> {
        anyhow::bail!("it has no GPU kernels yet: run it on the CPU (leave out --device gpu)")
    }
}


/// Split a flat parameter slice into consecutive pieces of the given lengths.
pub fn split<'a, T>(mut w: &'a [T], lens: &[usize]) -> Vec<&'a [T]> {
    let mut out = Vec::with_capacity(lens.len());
    for &n in lens {
        let (a, b) = w.split_at(n);
        out.push(a);
        w = b;
    }
    out
}

/// Mutable counterpart of [`split`].
pub fn split_mut<'a, T>(mut w: &'a mut [T], lens: &[usize]) -> Vec<&'a mut [T]> {
    let mut out = Vec::with_capacity(lens.len());
    for &n in lens {
        let (a, b) = std::mem::take(&mut w).split_at_mut(n);
        out.push(a);
        w = b;
    }
    out
}

/// One thread's batch rows in [`row_parts`], and where they lie in the cells' buffers.
pub(crate) struct Part {
    /// rows in the whole batch
    pub batch: usize,
    /// this part's rows
    pub rows: Range<usize>,
}

impl Part {
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// The part's rows of a `[B, w]` block that starts at element `offset`.
    pub(crate) fn block(&self, offset: usize, w: usize) -> Range<usize> {
        offset + self.rows.start * w..offset + self.rows.end * w
    }

    /// The part's rows of step `t` of a `[T, B, w]` buffer.
    pub(crate) fn at(&self, t: usize, w: usize) -> Range<usize> {
        self.block(t * self.batch * w, w)
    }
}

#[cfg(test)]
mod thread_tests {
    use super::*;
    use super::registry::{self, reads_tokens};
    use crate::kernels::rng::Rng;

    /// Forward and backward of `cell` on 13 rows in a pool of `threads`, the output gradient
    /// zero before step `from` and, with `skip`, the outputs read from there on only
    /// (`Seq::out_from`): outputs, final state, parameter, input and initial-state gradients.
    fn run(cell: &Cell, threads: usize, symbols: bool, given_s0: bool, (from, skip): (usize, bool)) -> Vec<Vec<f32>> {
        let (nt, nb) = (5, 13);
        let sz = cell.sizes();
        let mut rng = Rng::new(3);
        let w: Vec<f32> = (0..cell.param_len()).map(|_| rng.range(-0.4, 0.4) as f32).collect();
        let x: Vec<f32> = (0..nt * nb * sz.input).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        let tokens: Vec<u32> = (0..nt * nb).map(|_| rng.below(sz.input as u64) as u32).collect();
        let s0: Vec<f32> = (0..nb * sz.state).map(|_| rng.range(-0.5, 0.5) as f32).collect();
        let mask: Vec<f32> = (0..nb * sz.rec).map(|_| rng.range(0.0, 2.0) as f32).collect();
        let mut dy: Vec<f32> = (0..nt * nb * sz.output).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        dy[..from * nb * sz.output].fill(0.0);
        let ds_final: Vec<f32> = (0..nb * sz.state).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let seq = Seq {
                steps: nt,
                batch: nb,
                x: if symbols { &[] } else { &x },
                tokens: symbols.then_some(&tokens[..]),
                s0: given_s0.then_some(&s0[..]),
                mask: Some(&mask),
                emb: None,
                out_from: if skip { from } else { 0 },
            };
            let mut ws = Workspace::default();
            let mut y = vec![0f32; nt * nb * sz.output];
            cell.forward(&w, &seq, &mut ws, &mut y);
            let fin = ws.final_state().to_vec();
            let (mut g, mut dx, mut ds0) = (vec![0f32; w.len()], vec![0f32; x.len()], vec![0f32; s0.len()]);
            let dx_opt = (!symbols).then_some(&mut dx[..]);
            cell.backward(&w, &mut g, &seq, &mut ws, Grads { dy: &dy, ds_final: Some(&ds_final), dx: dx_opt, ds0: given_s0.then_some(&mut ds0[..]) });
            vec![y, fin, g, dx, ds0]
        })
    }

    /// Forward and backward of `cell` (f32 or f64) on inputs that are rows of a 3-symbol
    /// table, either looked up (`emb` false: `dx` is the `[T, B, D]` gradient, summed here into
    /// the table's) or read through `Seq::emb`: outputs, final state, parameter gradient, and
    /// the table's gradient (which the embedded path adds to a prefilled buffer).
    fn run_embedded<T: Float>(cell: &Cell, emb: bool, threads: usize) -> Vec<Vec<T>> {
        let (nt, nb, nv) = (6, 11, 3);
        let sz = cell.sizes();
        let d = sz.input;
        let mut rng = Rng::new(5);
        let w: Vec<T> = (0..cell.param_len()).map(|_| T::c(rng.range(-0.4, 0.4))).collect();
        let table: Vec<T> = (0..nv * d).map(|_| T::c(rng.range(-1.0, 1.0))).collect();
        let tokens: Vec<u32> = (0..nt * nb).map(|_| rng.below(nv as u64) as u32).collect();
        let x: Vec<T> = tokens.iter().flat_map(|&v| table[v as usize * d..(v as usize + 1) * d].to_vec()).collect();
        let dy: Vec<T> = (0..nt * nb * sz.output).map(|_| T::c(rng.range(-1.0, 1.0))).collect();
        let ds_final: Vec<T> = (0..nb * sz.state).map(|_| T::c(rng.range(-1.0, 1.0))).collect();
        let prefill: Vec<T> = (0..nv * d).map(|i| T::c(i as f64 * 0.25)).collect();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let seq = Seq { steps: nt, batch: nb, x: &x, tokens: Some(&tokens), s0: None, mask: None, emb: emb.then_some(&table[..]), out_from: 0 };
            let mut ws = Workspace::default();
            let mut y = vec![T::zero(); nt * nb * sz.output];
            cell.forward(&w, &seq, &mut ws, &mut y);
            let fin = ws.final_state().to_vec();
            let mut g = vec![T::zero(); w.len()];
            let mut dx = vec![T::zero(); x.len()];
            let mut dtable = prefill.clone();
            let target = if emb { &mut dtable[..] } else { &mut dx[..] };
            cell.backward(&w, &mut g, &seq, &mut ws, Grads { dy: &dy, ds_final: Some(&ds_final), dx: Some(target), ds0: None });
            if !emb {
                for (row, &v) in dx.chunks_exact(d).zip(&tokens) {
                    dtable[v as usize * d..(v as usize + 1) * d].iter_mut().zip(row).for_each(|(o, &g)| *o += g);
                }
            }
            vec![y, fin, g, dtable]
        })
    }

    /// Reading the embedding table through `Seq::emb` (the input products formed per symbol)
    /// gives what the looked-up rows give, to rounding in f64, and the same bits on any number
    /// of threads.
    #[test]
    fn every_cell_reads_an_embedding_as_its_looked_up_rows() {
        for v in registry::variants().into_iter().filter(|v| !reads_tokens(v.name)) {
            let name = v.to_string();
            let cell = v.cell(4, 7).unwrap();
            let (dense, fused) = (run_embedded::<f64>(&cell, false, 1), run_embedded::<f64>(&cell, true, 1));
            for (what, (a, b)) in ["outputs", "final state", "gradient", "table gradient"].iter().zip(dense.iter().zip(&fused)) {
                let scale = a.iter().fold(0f64, |m, v| m.max(v.abs()));
                assert!(scale > 0.0, "{name}: {what} all zero");
                for (i, (u, v)) in a.iter().zip(b).enumerate() {
                    assert!((u - v).abs() <= 1e-12 * scale, "{name}: {what}[{i}] {u} against {v}");
                }
            }
            let one = run_embedded::<f32>(&cell, true, 1);
            for threads in [2, 3] {
                assert!(one == run_embedded::<f32>(&cell, true, threads), "{name}: embedded path differs on {threads} threads");
            }
        }
    }

    /// A thin input's projection (one pass per row) is what the GEMM and the bias passes give,
    /// bit for bit in f32, for both weight layouts, one to `THIN` features, a row stride past
    /// the width, and rows past a parallel block.
    #[test]
    fn thin_projection_equals_the_gemm_and_bias_passes() {
        let (nt, nb, n, ldc) = (7, 43, 40, 45);
        let mut rng = Rng::new(3);
        for d in [1, 2, crate::kernels::gemm::THIN] {
            for tw in [true, false] {
                let x: Vec<f32> = (0..nt * nb * d).map(|_| rng.range(-1.0, 1.0) as f32).collect();
                let w: Vec<f32> = (0..n * d).map(|_| rng.range(-1.0, 1.0) as f32).collect();
                let b: Vec<Vec<f32>> = (0..2).map(|_| (0..n).map(|_| rng.range(-1.0, 1.0) as f32).collect()).collect();
                let ldw = if tw { d } else { n };
                let seq = Seq { steps: nt, batch: nb, x: &x, tokens: None, s0: None, mask: None, emb: None, out_from: 0 };
                let mut got = vec![f32::NAN; nt * nb * ldc];
                project_input(&seq, (d, n), (&w, ldw, tw), &[&b[0], &b[1]], (&mut got, ldc), &mut Vec::new());
                let mut want = vec![f32::NAN; nt * nb * ldc];
                crate::kernels::gemm::gemm(nt * nb, n, d, &x, d, false, &w, ldw, tw, &mut want, ldc, false);
                for row in want.chunks_mut(ldc) {
                    for bias in &b {
                        row[..n].iter_mut().zip(bias).for_each(|(o, &v)| *o += v);
                    }
                }
                for (i, (g, e)) in got.chunks(ldc).zip(want.chunks(ldc)).enumerate() {
                    assert_eq!(g[..n].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), e[..n].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "d {d}, tw {tw}, row {i}");
                }
            }
        }
    }

    /// Forward (and backward, with `grad`) of `cell` on `nt × nb` rows in `ws`: outputs and the
    /// parameter gradient.
    fn pass_in(cell: &Cell, ws: &mut Workspace<f32>, (nt, nb): (usize, usize), grad: bool) -> Vec<Vec<f32>> {
        let sz = cell.sizes();
        let mut rng = Rng::new(5);
        let w: Vec<f32> = (0..cell.param_len()).map(|_| rng.range(-0.4, 0.4) as f32).collect();
        let x: Vec<f32> = (0..nt * nb * sz.input).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        let dy: Vec<f32> = (0..nt * nb * sz.output).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        let seq = Seq { steps: nt, batch: nb, x: &x, tokens: None, s0: None, mask: None, emb: None, out_from: 0 };
        let mut y = vec![0f32; nt * nb * sz.output];
        cell.forward(&w, &seq, ws, &mut y);
        let mut g = vec![0f32; w.len()];
        if grad {
            cell.backward(&w, &mut g, &seq, ws, Grads { dy: &dy, ds_final: None, dx: None, ds0: None });
        }
        vec![y, g]
    }

    /// A forward alone makes no gradient buffers, and a workspace that went through other
    /// shapes gives a backward the bits a fresh one gives.
    #[test]
    fn gradient_buffers_are_made_by_the_backward_alone() {
        for v in registry::variants().into_iter().filter(|v| !reads_tokens(v.name)) {
            let (name, cell) = (v.to_string(), v.cell(3, 6).unwrap());
            let mut ws = Workspace::default();
            pass_in(&cell, &mut ws, (4, 5), false);
            assert!(ws.drp.is_empty() && ws.ds.is_empty() && ws.dr.is_empty(), "{name}: a forward made gradient buffers");
            let fresh = pass_in(&cell, &mut Workspace::default(), (4, 5), true);
            // Backward at one shape, forward alone at another, then both at the first again.
            let mut used = Workspace::default();
            pass_in(&cell, &mut used, (4, 5), true);
            pass_in(&cell, &mut used, (2, 3), false);
            pass_in(&cell, &mut used, (3, 2), true);
            assert_eq!(pass_in(&cell, &mut used, (4, 5), true), fresh, "{name}: a reused workspace changed the results");
            assert!(fresh[1].iter().any(|&v| v != 0.0), "{name}: no gradient");
        }
    }

    /// A cell whose outputs are read from step `from` on (`Seq::out_from`) leaves `y`'s rows
    /// before it as they were and changes nothing else: the outputs read, the final state and
    /// every gradient are the bits of a pass that writes every step's (given the same zero
    /// output gradient before `from`), on one thread or several.
    #[test]
    fn outputs_left_out_before_the_first_read_step_change_nothing_else() {
        let (nt, nb) = (5, 13);
        for v in registry::variants() {
            let name = v.to_string();
            let symbols = reads_tokens(v.name);
            let cell = v.cell(if symbols { 5 } else { 4 }, 7).unwrap();
            let width = nb * cell.sizes().output;
            for (given_s0, from) in [(true, nt - 1), (false, 2)] {
                let all = run(&cell, 1, symbols, given_s0, (from, false));
                assert!(all[0][..from * width].iter().any(|&v| v != 0.0), "{name}: no output before step {from}");
                assert!(all[2].iter().any(|&v| v != 0.0), "{name}: no gradient");
                for threads in [1, 2] {
                    let part = run(&cell, threads, symbols, given_s0, (from, true));
                    assert!(part[0][..from * width].iter().all(|&v| v == 0.0), "{name}: outputs before step {from} written");
                    assert!(part[0][from * width..] == all[0][from * width..], "{name}: the outputs read differ");
                    for (what, (a, b)) in ["final state", "gradient", "dx", "ds0"].iter().zip(all[1..].iter().zip(&part[1..])) {
                        assert!(a == b, "{name} (from {from}, {threads} threads): {what} differ");
                    }
                }
            }
        }
    }

    /// The time loops split the batch rows between threads (`row_parts`); every cell must give
    /// bit-identical results for any split.
    #[test]
    fn every_cell_gives_the_same_bits_on_any_number_of_threads() {
        for v in registry::variants() {
            let name = v.to_string();
            let symbols = reads_tokens(v.name);
            let input = if symbols { 5 } else { 4 };
            let cell = v.cell(input, 7).unwrap();
            // With a given initial state, and from the cell's own (zeros or learned).
            for given_s0 in [true, false] {
                let one = run(&cell, 1, symbols, given_s0, (0, false));
                assert!(one[2].iter().any(|&v| v != 0.0), "{name}: no gradient");
                for threads in [2, 3] {
                    let many = run(&cell, threads, symbols, given_s0, (0, false));
                    for (what, (a, b)) in ["outputs", "final state", "gradient", "dx", "ds0"].iter().zip(one.iter().zip(&many)) {
                        assert!(a == b, "{name} (s0 given {given_s0}): {what} differ on {threads} threads");
                    }
                }
            }
        }
    }
}
