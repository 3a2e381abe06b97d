//! Recurrent cells. One file per cell, each with the same structure (follow `ran.rs` to write
//! a new one):
//!
//! - a struct holding the cell's sizes and options, with its equations in the doc comment;
//! - `tensors()`: the parameter tensors in the order they sit in the layer's flat parameter
//!   slice, named as `shared/spec/checkpoint.md` (the order is chosen so that the matrices one
//!   GEMM needs are adjacent);
//! - `forward()` over a whole sequence: the input projections of all steps as one GEMM, then
//!   per step one recurrent GEMM and one fused pointwise pass, keeping on the [`Workspace`]
//!   exactly what backward needs;
//! - `backward()` over the same sequence in reverse, producing gradients of every parameter,
//!   the inputs and the initial state; weight gradients are formed after the loop by single
//!   GEMMs over all steps.
//!
//! Layout conventions: sequences are time-major, `x[t][b][d]` flattened as `[T, B, D]`; a state
//! is `[B, S]` where `S` is the cell's state length (an LSTM's `[h | c]` are two blocks,
//! `h` first, each `[B, ·]`).

pub mod gru;
pub mod isan;
pub mod linear;
pub mod lstm;
pub mod lstm_no_output_gate;
pub mod lstm_simple_content;
pub mod ran;
pub mod rda;
pub mod rnn;
pub mod rwa;

#[cfg(test)]
pub mod gradcheck;

use crate::num::Float;

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
    /// input projections per step (and their gradients)
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
    pub dxp: Vec<T>,
    pub drp: Vec<T>,
    /// `[B, S]`: the running state gradient in backward.
    pub ds: Vec<T>,
    /// `[B, rin]`: gradient with respect to the recurrent input of the current step.
    pub dr: Vec<T>,
    /// `[T·B·idx + idx_fixed]` integer scratch
    pub idx: Vec<u32>,
    /// The recurrent weights packed once per forward or backward pass for the per-step GEMMs.
    pub pk: [crate::linalg::PackedB<T>; 2],
}

impl<T: Float> Workspace<T> {
    /// Make the buffers fit `(dims, steps, batch)`, reallocating only when the shape changes.
    pub fn ensure(&mut self, dims: WsDims, steps: usize, batch: usize) {
        if self.dims == dims && self.steps == steps && self.batch == batch {
            return;
        }
        let tb = steps * batch;
        let fit = |v: &mut Vec<T>, n: usize| {
            v.clear();
            v.resize(n, T::zero());
        };
        fit(&mut self.xp, tb * dims.xp);
        fit(&mut self.act, tb * dims.act);
        fit(&mut self.st, (steps + 1) * batch * dims.state);
        fit(&mut self.rin, tb * dims.rin);
        fit(&mut self.rp, batch * dims.rp);
        fit(&mut self.extra, tb * dims.extra);
        fit(&mut self.tmp, batch * dims.tmp);
        fit(&mut self.dxp, tb * dims.xp);
        fit(&mut self.drp, tb * dims.rp);
        fit(&mut self.ds, batch * dims.state);
        fit(&mut self.dr, batch * dims.rin);
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

    /// Start the running state gradient from the final state's gradient (or zero).
    pub fn begin_backward(&mut self, ds_final: Option<&[T]>) {
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
}

/// Gradients flowing into a cell's backward pass and where its input gradients go.
pub struct Grads<'a, T> {
    /// `[T, B, O]` gradient of the loss with respect to the outputs.
    pub dy: &'a [T],
    /// `[B, S]` gradient with respect to the final state, if the loss reads it.
    pub ds_final: Option<&'a [T]>,
    /// `[T, B, D]` receives the input gradient (overwritten), if wanted.
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
    fn ws_dims(&self) -> WsDims;
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
}

/// Any recurrent cell.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Ran(ran::Ran),
    Lstm(lstm::Lstm),
    Gru(gru::Gru),
    Rnn(rnn::Rnn),
    Isan(isan::Isan),
    Linear(linear::Linear),
    Rwa(rwa::Rwa),
    Rda(rda::Rda),
    LstmSimpleContent(lstm_simple_content::LstmSimpleContent),
    LstmNoOutputGate(lstm_no_output_gate::LstmNoOutputGate),
}

macro_rules! each_cell {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            Cell::Ran($c) => $e,
            Cell::Lstm($c) => $e,
            Cell::Gru($c) => $e,
            Cell::Rnn($c) => $e,
            Cell::Isan($c) => $e,
            Cell::Linear($c) => $e,
            Cell::Rwa($c) => $e,
            Cell::Rda($c) => $e,
            Cell::LstmSimpleContent($c) => $e,
            Cell::LstmNoOutputGate($c) => $e,
        }
    };
}

impl Cell {
    pub fn sizes(&self) -> Sizes {
        each_cell!(self, c => c.sizes())
    }
    pub fn tensors(&self) -> Vec<TensorSpec> {
        each_cell!(self, c => c.tensors())
    }
    pub fn ws_dims(&self) -> WsDims {
        each_cell!(self, c => c.ws_dims())
    }
    pub fn reads_tokens(&self) -> bool {
        each_cell!(self, c => c.reads_tokens())
    }
    pub fn sanitize_state<T: Float>(&self, s: &mut [T], batch: usize) {
        each_cell!(self, c => c.sanitize_state(s, batch))
    }
    pub fn param_len(&self) -> usize {
        self.tensors().iter().map(|t| t.len()).sum()
    }
    pub fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        ws.ensure(self.ws_dims(), seq.steps, seq.batch);
        each_cell!(self, c => c.forward(w, seq, ws, y))
    }
    pub fn backward<T: Float>(&self, w: &[T], g: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        each_cell!(self, c => c.backward(w, g, seq, ws, grads))
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
