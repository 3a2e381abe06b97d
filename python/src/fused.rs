//! One recurrent layer run by rnnlens's fused CPU kernels for `rnnlens.torch` (its
//! `engine="rnnlens"`): the whole sequence's forward in one call, and the backward of that
//! forward in another, as a `torch.autograd.Function` needs them. Arrays come in and go out
//! as numpy views of torch's CPU tensors (no copy); the interpreter is released while the
//! kernels run, on rnnlens's own worker pool.
//!
//! A forward that autograd will differentiate keeps its workspace (the activations every step
//! wrote) in a [`Tape`]; the backward reads it and gives it back to the layer's pool, so a
//! training loop allocates its workspaces once, not every step.

use crate::{compute, err};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArray3, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArray3, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rnnlens::cells::registry::build;
use rnnlens::cells::{Cell, Grads, Seq, Workspace};
use rnnlens::kernels::precision::Precision;
use rnnlens::kernels::rng::Rng;
use rnnlens::model::{init_cell, Init};
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};

/// Workspaces a layer keeps for reuse (more are made while more forwards await their
/// backward, and dropped when they come back to a full pool).
const POOL: usize = 2;

type Pool = Arc<Mutex<Vec<Workspace<f32>>>>;

/// One layer of a `config.json` (`cell`, `input_size`, `hidden_size`, `projection_size`,
/// `options`) with the fused kernels of its cell.
#[pyclass(frozen, module = "rnnlens._rnnlens")]
pub struct FusedLayer {
    cell: Cell,
    pool: Pool,
}

/// What a forward kept for its backward: the workspace and the shape it ran.
#[pyclass(frozen, module = "rnnlens._rnnlens")]
pub struct Tape {
    ws: Mutex<Option<Workspace<f32>>>,
    pool: Pool,
    steps: usize,
    batch: usize,
    precision: Precision,
}

impl Drop for Tape {
    fn drop(&mut self) {
        let ws = self.ws.get_mut().ok().and_then(|w| w.take());
        give_back(&self.pool, ws);
    }
}

fn give_back(pool: &Pool, ws: Option<Workspace<f32>>) {
    if let (Some(ws), Ok(mut p)) = (ws, pool.lock()) {
        if p.len() < POOL {
            p.push(ws);
        }
    }
}

fn bad(msg: String) -> PyErr {
    PyValueError::new_err(msg)
}

fn slice<'a, T: numpy::Element>(a: &'a PyReadonlyArray1<'_, T>, what: &str) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| bad(format!("{what} must be contiguous")))
}

/// The inputs of one call, checked against the layer: `[T, B, D]` vectors or `[T, B]` symbols,
/// and an optional `[B, S]` state.
struct Inputs<'a> {
    steps: usize,
    batch: usize,
    x: &'a [f32],
    tokens: Option<&'a [u32]>,
    /// in the cell's layout (its state blocks one after the other)
    s0: Option<Vec<f32>>,
}

/// A state `[B, S]` whose rows hold the cell's blocks side by side (PyTorch's view, an LSTM's
/// `[y | c]` per row) laid out as the cell keeps it: each block `[B, w]` whole, one after the
/// other; `back` the other way.
fn relayout(s: &[f32], batch: usize, blocks: &[usize], back: bool) -> Vec<f32> {
    if blocks.len() < 2 {
        return s.to_vec();
    }
    let width: usize = blocks.iter().sum();
    let mut out = vec![0f32; s.len()];
    let mut at = 0;
    for &w in blocks {
        for b in 0..batch {
            let (row, blk) = (b * width + at, batch * at + b * w);
            let (from, to) = if back { (blk, row) } else { (row, blk) };
            out[to..to + w].copy_from_slice(&s[from..from + w]);
        }
        at += w;
    }
    out
}

impl FusedLayer {
    fn inputs<'a>(
        &self,
        w: &'a [f32],
        x: &'a Option<PyReadonlyArray3<'_, f32>>,
        tokens: &'a Option<PyReadonlyArray2<'_, u32>>,
        s0: &'a Option<PyReadonlyArray2<'_, f32>>,
    ) -> PyResult<Inputs<'a>> {
        let sz = self.cell.sizes();
        if w.len() != self.cell.param_len() {
            return Err(bad(format!("the flat parameters hold {} values; this {} layer has {}", w.len(), self.cell.type_name(), self.cell.param_len())));
        }
        let (steps, batch, xs, toks) = if self.cell.reads_tokens() {
            let t = tokens.as_ref().ok_or_else(|| bad(format!("a {} layer reads symbols: give token ids [T, B]", self.cell.type_name())))?;
            let s = t.as_slice().map_err(|_| bad("the token ids must be contiguous".into()))?;
            if let Some(&k) = s.iter().find(|&&k| k as usize >= sz.input) {
                return Err(bad(format!("token id {k} is out of range: the layer has {} symbols (ids 0..{})", sz.input, sz.input - 1)));
            }
            (t.shape()[0], t.shape()[1], &[][..], Some(s))
        } else {
            let a = x.as_ref().ok_or_else(|| bad(format!("a {} layer reads vectors: give x [T, B, {}]", self.cell.type_name(), sz.input)))?;
            let sh = a.shape();
            if sh[2] != sz.input {
                return Err(bad(format!("x is [{}, {}, {}]: its last dimension must be the layer's input_size, {}", sh[0], sh[1], sh[2], sz.input)));
            }
            let s = a.as_slice().map_err(|_| bad("x must be contiguous".into()))?;
            if s.iter().any(|v| !v.is_finite()) {
                return Err(bad("x holds NaN or infinite values".into()));
            }
            (sh[0], sh[1], s, None)
        };
        if steps == 0 || batch == 0 {
            return Err(bad(format!("the sequence is empty ({steps} steps of {batch} rows): give at least one step of one row")));
        }
        let s0 = match s0 {
            None => None,
            Some(a) => {
                if a.shape() != [batch, sz.state] {
                    return Err(bad(format!("the state is {:?}: this layer's is [B, S] = [{batch}, {}]", a.shape(), sz.state)));
                }
                let s = a.as_slice().map_err(|_| bad("the state must be contiguous".into()))?;
                if s.iter().any(|v| v.is_nan()) {
                    return Err(bad("the state holds NaN values".into()));
                }
                Some(relayout(s, batch, &self.cell.state_blocks(), false))
            }
        };
        Ok(Inputs { steps, batch, x: xs, tokens: toks, s0 })
    }
}

fn seq<'a>(i: &'a Inputs<'a>) -> Seq<'a, f32> {
    Seq { steps: i.steps, batch: i.batch, x: i.x, tokens: i.tokens, s0: i.s0.as_deref(), mask: None, emb: None, out_from: 0 }
}

#[pymethods]
impl FusedLayer {
    #[new]
    fn new(layer_json: &str) -> PyResult<Self> {
        let l: Map<String, Value> = serde_json::from_str(layer_json).map_err(|e| bad(format!("the layer's description: {e}")))?;
        let size = |k: &str| l.get(k).and_then(Value::as_u64).map(|v| v as usize);
        let (Some(cell), Some(d), Some(h)) = (l.get("cell").and_then(Value::as_str), size("input_size"), size("hidden_size")) else {
            return Err(bad("a layer needs \"cell\", \"input_size\" and \"hidden_size\"".into()));
        };
        let empty = Map::new();
        let opts = l.get("options").and_then(Value::as_object).unwrap_or(&empty);
        let cell = build(cell, d, h, size("projection_size"), opts).map_err(err)?;
        Ok(FusedLayer { cell, pool: Arc::default() })
    }

    /// `(name, shape)` of each tensor, in the order of the flat parameters.
    fn tensors(&self) -> Vec<(String, Vec<usize>)> {
        self.cell.tensors().into_iter().map(|t| (t.name, t.shape)).collect()
    }

    /// `(input, hidden, output, state)` widths.
    fn sizes(&self) -> (usize, usize, usize, usize) {
        let s = self.cell.sizes();
        (s.input, s.hidden, s.output, s.state)
    }

    fn reads_tokens(&self) -> bool {
        self.cell.reads_tokens()
    }

    /// The flat parameters as `rnnlens train` starts such a layer (Xavier-uniform weights, zero
    /// biases, forget and discount biases at 1, an IRNN's identity), drawn from `seed`.
    fn init<'py>(&self, py: Python<'py>, seed: u64) -> Bound<'py, PyArray1<f32>> {
        init_cell(&self.cell, Init::Xavier, &mut Rng::new(seed)).into_pyarray(py)
    }

    /// The outputs `[T, B, O]` and the final state `[B, S]`, and with `keep` the [`Tape`] its
    /// backward needs.
    #[pyo3(signature = (w, x, tokens, s0, precision, keep))]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn forward<'py>(
        &self,
        py: Python<'py>,
        w: PyReadonlyArray1<'py, f32>,
        x: Option<PyReadonlyArray3<'py, f32>>,
        tokens: Option<PyReadonlyArray2<'py, u32>>,
        s0: Option<PyReadonlyArray2<'py, f32>>,
        precision: &str,
        keep: bool,
    ) -> PyResult<(Bound<'py, PyArray3<f32>>, Bound<'py, PyArray2<f32>>, Option<Tape>)> {
        let precision = Precision::parse(precision).map_err(err)?;
        precision.check().map_err(err)?;
        let w = slice(&w, "the flat parameters")?;
        let i = self.inputs(w, &x, &tokens, &s0)?;
        let ws_in = self.pool.lock().ok().and_then(|mut p| p.pop()).unwrap_or_default();
        let (steps, batch, o) = (i.steps, i.batch, self.cell.sizes().output);
        let cell = &self.cell;
        let (y, s, ws) = compute(py, precision, move || {
            let mut ws = ws_in;
            let mut y = vec![0f32; steps * batch * o];
            cell.forward(w, &seq(&i), &mut ws, &mut y);
            let s = relayout(ws.final_state(), batch, &cell.state_blocks(), true);
            Ok((y, s, ws))
        })?;
        let tape = if keep {
            Some(Tape { ws: Mutex::new(Some(ws)), pool: self.pool.clone(), steps, batch, precision })
        } else {
            give_back(&self.pool, Some(ws));
            None
        };
        let y = y.into_pyarray(py).reshape([steps, batch, o])?;
        let s = s.into_pyarray(py).reshape([batch, self.cell.sizes().state])?;
        Ok((y, s, tape))
    }

    /// The gradients of the forward `tape` recorded, given the same inputs: the flat
    /// parameters' (the learned initial state's included when `s0` was None), and the input's
    /// and the initial state's when asked for.
    #[pyo3(signature = (tape, w, x, tokens, s0, dy, ds_final, need_dx, need_ds0))]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn backward<'py>(
        &self,
        py: Python<'py>,
        tape: &Tape,
        w: PyReadonlyArray1<'py, f32>,
        x: Option<PyReadonlyArray3<'py, f32>>,
        tokens: Option<PyReadonlyArray2<'py, u32>>,
        s0: Option<PyReadonlyArray2<'py, f32>>,
        dy: PyReadonlyArray3<'py, f32>,
        ds_final: Option<PyReadonlyArray2<'py, f32>>,
        need_dx: bool,
        need_ds0: bool,
    ) -> PyResult<(Bound<'py, PyArray1<f32>>, Option<Bound<'py, PyArray3<f32>>>, Option<Bound<'py, PyArray2<f32>>>)> {
        let w = slice(&w, "the flat parameters")?;
        let i = self.inputs(w, &x, &tokens, &s0)?;
        let sz = self.cell.sizes();
        if (i.steps, i.batch) != (tape.steps, tape.batch) {
            return Err(bad("the backward's inputs are not the forward's".into()));
        }
        if dy.shape() != [i.steps, i.batch, sz.output] {
            return Err(bad(format!("the output gradient is {:?}; the outputs are [{}, {}, {}]", dy.shape(), i.steps, i.batch, sz.output)));
        }
        let dy = dy.as_slice().map_err(|_| bad("the output gradient must be contiguous".into()))?;
        let ds_final = match &ds_final {
            Some(a) if a.shape() == [i.batch, sz.state] => {
                let s = a.as_slice().map_err(|_| bad("the state gradient must be contiguous".into()))?;
                Some(relayout(s, i.batch, &self.cell.state_blocks(), false))
            }
            Some(a) => return Err(bad(format!("the final state's gradient is {:?}; the state is [{}, {}]", a.shape(), i.batch, sz.state))),
            None => None,
        };
        let Some(ws_in) = tape.ws.lock().ok().and_then(|mut w| w.take()) else {
            return Err(bad("this forward's backward ran already: the rnnlens engine keeps one backward per forward (no retain_graph)".into()));
        };
        let need_dx = need_dx && !self.cell.reads_tokens();
        let need_ds0 = need_ds0 && i.s0.is_some();
        let (cell, (steps, batch)) = (&self.cell, (i.steps, i.batch));
        let (g, dx, ds0, ws) = compute(py, tape.precision, move || {
            let mut ws = ws_in;
            let mut g = vec![0f32; w.len()];
            let mut dx = if need_dx { vec![0f32; i.x.len()] } else { Vec::new() };
            let mut ds0 = if need_ds0 { vec![0f32; batch * sz.state] } else { Vec::new() };
            let grads = Grads { dy, ds_final: ds_final.as_deref(), dx: need_dx.then_some(&mut dx[..]), ds0: need_ds0.then_some(&mut ds0[..]) };
            cell.backward(w, &mut g, &seq(&i), &mut ws, grads);
            let ds0 = if need_ds0 { relayout(&ds0, batch, &cell.state_blocks(), true) } else { ds0 };
            Ok((g, dx, ds0, ws))
        })?;
        give_back(&self.pool, Some(ws));
        let dx = if need_dx { Some(dx.into_pyarray(py).reshape([steps, batch, sz.input])?) } else { None };
        let ds0 = if need_ds0 { Some(ds0.into_pyarray(py).reshape([batch, sz.state])?) } else { None };
        Ok((g.into_pyarray(py), dx, ds0))
    }

    fn __repr__(&self) -> String {
        format!("FusedLayer({:?})", self.cell)
    }
}

/// Whether this CPU has the bf16 kernel (AVX512-BF16) that mixed precision needs.
#[pyfunction]
pub fn bf16_supported() -> bool {
    rnnlens::kernels::precision::bf16_supported()
}
