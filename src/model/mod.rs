//! The language model: embedding → stacked recurrent layers → softmax decoder.
//!
//! Parameters live in one flat vector (see [`Model::slots`]) so that the optimizer, clipping,
//! checkpointing and gradient checks each see one slice. The forward and backward passes are
//! generic over the scalar type so the whole model can be checked in f64.

pub mod engine;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod lm;
pub mod memory;
pub mod run;
pub mod score;
pub mod trace;

use crate::cells::registry::{self, type_learns_own_start, CellOptions};
use crate::cells::{Cell, Grads, InitKind, Seq, Workspace};
use crate::kernels::gemm::{add_bias_rows, add_col_sums, linear, linear_dw, linear_dx};
use crate::kernels::num::{max_lanes, sum_lanes, Float};
use crate::kernels::rng::Rng;
use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::ops::Range;

/// The largest model rnnlens builds (f32 parameters: 4 GiB).
pub const MAX_PARAMS: usize = 1 << 30;

/// One recurrent layer as recorded in `config.json` (`docs/checkpoint.md`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LayerConfig {
    pub cell: String,
    pub input_size: usize,
    pub hidden_size: usize,
    pub projection_size: Option<usize>,
    pub options: Map<String, Value>,
    /// The layer starts a fresh sequence from a learned state `rnn.{l}.initial_state` `[S]`
    /// instead of zeros. Absent (false) in older configs; never written when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learn_initial_state: bool,
}

/// The tensor name (after `rnn.{l}.`) of a model-level learned initial state.
pub const INITIAL_STATE_TENSOR: &str = "initial_state";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TokenizerConfig {
    pub level: String,
    pub normalize: String,
    /// Word level: how typed text is cut into the corpus's words (`"whitespace"`, `"brown"`,
    /// `"ptb"`; `data::Split`). Absent in older configs and at char and byte level, read as
    /// `"whitespace"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
}

/// `config.json`: the keys of the public contract, plus `cell_name` (the command-line name).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModelConfig {
    pub format: String,
    pub format_version: u32,
    pub vocab_size: usize,
    pub tokenizer: TokenizerConfig,
    pub embedding_size: Option<usize>,
    pub layers: Vec<LayerConfig>,
    #[serde(default)]
    pub cell_name: String,
    /// A sequence-task model reads vectors of this width (no embedding; `embedding_size` null)
    /// and its head is `readout.*` with `vocab_size` outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_size: Option<usize>,
}

/// Build the layer configurations of a stack from command-line style arguments.
pub fn layer_configs(
    cell_name: &str,
    input: usize,
    hidden: &[usize],
    projection: Option<usize>,
    opts: CellOptions,
) -> Result<Vec<LayerConfig>> {
    if hidden.is_empty() || hidden.contains(&0) {
        bail!("hidden sizes must be positive, got {hidden:?}");
    }
    if input == 0 {
        bail!("the input (embedding) size must be positive");
    }
    if projection == Some(0) {
        bail!("the projection size must be positive");
    }
    let kind = registry::lookup(cell_name)?;
    let (cell, options) = (kind.cell_type, (kind.options)(&opts)?);
    if projection.is_some() && !kind.projection {
        bail!("an output projection is available for ran-* and lstm cells, not for {cell_name}");
    }
    if kind.reads_tokens && hidden.len() > 1 {
        bail!("{cell_name} reads input symbols, so it can only be a single layer");
    }
    // Cells with their own learned start keep it: the option is for the ones starting from zeros.
    let learn_initial_state = opts.learn_initial_state && !kind.learns_own_start;
    let mut layers = Vec::new();
    let mut d = input;
    for &h in hidden {
        layers.push(LayerConfig {
            learn_initial_state,
            cell: cell.to_string(),
            input_size: d,
            hidden_size: h,
            projection_size: projection,
            options: options.clone(),
        });
        d = projection.unwrap_or(h);
    }
    Ok(layers)
}

impl LayerConfig {
    /// The cell this configuration describes.
    pub fn to_cell(&self) -> Result<Cell> {
        registry::build(&self.cell, self.input_size, self.hidden_size, self.projection_size, &self.options)
    }
}

/// One parameter tensor's place in the flat vector.
#[derive(Clone, Debug)]
pub struct Slot {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
    pub init: InitKind,
}

impl Slot {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len()
    }
}

/// How parameters start.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "scheme")]
pub enum Init {
    /// Every tensor uniform in `[-scale, scale]` (the first RAN paper and Zaremba et al.).
    Uniform { scale: f64 },
    /// Xavier-uniform weights, zero biases, gate biases (forget, discount) at 1 (for an LSTM
    /// the forget rows of `bias_ih`, so the two biases sum to 1).
    Xavier,
}

/// One tensor's starting values under `init`, drawn from `rng` in order (a model's slots here;
/// a single cell's tensors in `rnnlens.torch`, through [`init_cell`]).
pub fn init_tensor(dst: &mut [f32], kind: InitKind, init: Init, rng: &mut Rng) {
    match (init, kind) {
        (_, InitKind::Identity) => {
            let n = (dst.len() as f64).sqrt() as usize;
            dst.fill(0.0);
            for i in 0..n {
                dst[i * n + i] = 1.0;
            }
        }
        (Init::Uniform { scale }, _) => dst.iter_mut().for_each(|x| *x = rng.range(-scale, scale) as f32),
        (Init::Xavier, InitKind::Weight { fan_in, fan_out }) => {
            let a = (6.0 / (fan_in + fan_out) as f64).sqrt();
            dst.iter_mut().for_each(|x| *x = rng.range(-a, a) as f32);
        }
        (Init::Xavier, InitKind::Bias) => dst.fill(0.0),
        (Init::Xavier, InitKind::GateBias) => dst.fill(1.0),
        (Init::Xavier, InitKind::OpenGateRows { gate, gates }) => {
            let n = dst.len() / gates;
            dst.fill(0.0);
            dst[gate * n..(gate + 1) * n].fill(1.0);
        }
    }
}

/// A cell's flat parameters (its tensors in order) as `train` starts a layer of that cell.
pub fn init_cell(cell: &Cell, init: Init, rng: &mut Rng) -> Vec<f32> {
    let mut w = vec![0f32; cell.param_len()];
    let mut at = 0;
    for t in cell.tensors() {
        init_tensor(&mut w[at..at + t.len()], t.init, init, rng);
        at += t.len();
    }
    w
}

/// Dropout probabilities (0 disables each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Dropout {
    /// on the embeddings, between layers and on the top output
    pub p: f64,
    /// on the recurrent input of the gates (always one mask per sequence)
    pub recurrent: f64,
    /// one mask per sequence (variational) instead of a fresh mask per step
    pub variational: bool,
    /// Data-parallel training ([`crate::training::dist`]): `(global rows, first, end)`: the
    /// masks of all the global batch's rows are drawn, in one process's order, and rows
    /// `first..end` kept, so that the ranks' masks are the ones a single process would use.
    #[serde(skip)]
    pub shard: Option<(usize, usize, usize)>,
}

pub struct Model {
    pub config: ModelConfig,
    pub cells: Vec<Cell>,
    pub slots: Vec<Slot>,
    pub n_params: usize,
    emb: Range<usize>,
    layers: Vec<Range<usize>>,
    /// per layer, the model-level learned initial state `[S]` (`LayerConfig.learn_initial_state`)
    layer_s0: Vec<Option<Range<usize>>>,
    dec_w: Range<usize>,
    dec_b: Range<usize>,
    /// width of `xs[0]`: the embedding, the task's input vectors, or 0 (symbols only)
    input_width: usize,
}

impl Model {
    pub fn new(config: ModelConfig) -> Result<Model> {
        if config.format != "rnnlens" {
            bail!("format is \"{}\", expected \"rnnlens\"", config.format);
        }
        if config.format_version != 1 {
            bail!("format_version {} is not supported (this build reads 1)", config.format_version);
        }
        let v = config.vocab_size;
        if v == 0 || v > 1 << 24 {
            bail!("vocab_size {v} is out of range");
        }
        let e = config.embedding_size.unwrap_or(0);
        if e > 1 << 20 || config.input_size.is_some_and(|d| d == 0 || d > 1 << 20) {
            bail!("embedding_size or input_size out of range");
        }
        if config.input_size.is_some() && config.embedding_size.is_some() {
            bail!("a model reads either embedded tokens (embedding_size) or vectors (input_size), not both");
        }
        if config.layers.is_empty() {
            bail!("the model has no layers");
        }
        let mut cells = Vec::new();
        // A cell that switches on the symbol reads the tokens themselves: no embedding.
        let mut d = match (config.embedding_size, config.input_size) {
            (Some(e), _) => e,
            (None, Some(d)) => d,
            (None, None) => v,
        };
        let vectors = config.input_size.is_some();
        for (l, lc) in config.layers.iter().enumerate() {
            let cell = lc.to_cell().with_context(|| format!("layer {l}"))?;
            if lc.learn_initial_state && type_learns_own_start(&lc.cell) {
                bail!("layer {l} ({}) learns its own initial state; learn_initial_state must be false for it", lc.cell);
            }
            if cell.reads_tokens() && l != 0 || !cell.reads_tokens() && l == 0 && config.embedding_size.is_none() && !vectors {
                bail!(
                    "layer {l} ({}) {}",
                    lc.cell,
                    if cell.reads_tokens() {
                        "reads input symbols, so it must be the first layer and embedding_size must be null"
                    } else {
                        "reads vectors, so the model needs an embedding_size"
                    }
                );
            }
            // A symbol-reading first layer of a task model takes the symbols' one-hot width.
            if lc.input_size != d {
                bail!("layer {l} has input_size {}, but its input is {d} wide", lc.input_size);
            }
            d = cell.sizes().output;
            cells.push(cell);
        }
        let mut slots: Vec<Slot> = Vec::new();
        let mut push = |name: String, shape: Vec<usize>, init: InitKind| {
            let offset = slots.last().map_or(0, |s| s.offset + s.len());
            let s = Slot { name, shape, offset, init };
            let r = s.range();
            slots.push(s);
            r
        };
        let emb = if e > 0 {
            push("embedding.weight".into(), vec![v, e], InitKind::Weight { fan_in: e, fan_out: v })
        } else {
            0..0
        };
        let mut layers = Vec::new();
        let mut layer_s0 = Vec::new();
        for (l, (cell, lc)) in cells.iter().zip(&config.layers).enumerate() {
            let ranges: Vec<Range<usize>> =
                cell.tensors().into_iter().map(|t| push(format!("rnn.{l}.{}", t.name), t.shape, t.init)).collect();
            layers.push(ranges.first().map_or(0, |r| r.start)..ranges.last().map_or(0, |r| r.end));
            // Outside the cell's own slice, so that the cells never see it; starts at zero
            // under Xavier, i.e. exactly where the model without it starts.
            layer_s0.push(
                lc.learn_initial_state
                    .then(|| push(format!("rnn.{l}.{INITIAL_STATE_TENSOR}"), vec![cell.sizes().state], InitKind::Bias)),
            );
        }
        let head = if vectors { "readout" } else { "decoder" };
        let dec_w = push(format!("{head}.weight"), vec![v, d], InitKind::Weight { fan_in: d, fan_out: v });
        let dec_b = push(format!("{head}.bias"), vec![v], InitKind::Bias);
        let off = dec_b.end;
        // Refuse, before anything is allocated, a model whose parameters alone need more than
        // 4 GiB (training holds four copies: weights, gradients and Adam's two moments).
        if off > MAX_PARAMS {
            bail!("the model would have {off} parameters; at most {MAX_PARAMS} are supported");
        }
        let input_width = config.input_size.unwrap_or(e);
        Ok(Model { config, cells, slots, n_params: off, emb, layers, layer_s0, dec_w, dec_b, input_width })
    }

    pub fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }
    /// Embedding width, 0 for a model whose first cell reads the symbols themselves.
    fn emb_size(&self) -> usize {
        self.emb.len() / self.vocab_size()
    }
    /// Width of the top layer's output (the head's input).
    pub fn top_width(&self) -> usize {
        self.top_size()
    }
    /// The head (`decoder.*` or `readout.*`) weight and bias ranges in the flat vector.
    pub fn head(&self) -> (Range<usize>, Range<usize>) {
        (self.dec_w.clone(), self.dec_b.clone())
    }
    fn top_size(&self) -> usize {
        self.cells.last().map_or(0, |c| c.sizes().output)
    }

    /// Recurrent parameters (embedding and softmax excluded), the count the papers report.
    pub fn recurrent_params(&self) -> usize {
        self.layers.iter().chain(self.layer_s0.iter().flatten()).map(|r| r.len()).sum()
    }

    pub fn init_params(&self, init: Init, rng: &mut Rng) -> Vec<f32> {
        let mut w = vec![0f32; self.n_params];
        for s in &self.slots {
            init_tensor(&mut w[s.range()], s.init, init, rng);
        }
        w
    }

    /// The state of `batch` rows before the first window: each cell starts from its own initial
    /// state (zeros, or a learned one).
    pub fn initial_state<T: Float>(&self, batch: usize) -> State<T> {
        State { layers: self.cells.iter().map(|c| vec![T::zero(); batch * c.sizes().state]).collect(), fresh: true }
    }

    /// The parameter tensors, by name, from the flat vector.
    pub fn named<'a>(&self, w: &'a [f32]) -> Vec<(&str, &[usize], &'a [f32])> {
        self.slots.iter().map(|s| (s.name.as_str(), s.shape.as_slice(), &w[s.range()])).collect()
    }

    /// Run a window forward: `tokens` is `[T, B]` time-major. Leaves the logits in `ws.logits`
    /// and advances `state` to the final states.
    #[allow(clippy::too_many_arguments)]
    pub fn forward<T: Float>(
        &self,
        w: &[T],
        tokens: &[u32],
        steps: usize,
        batch: usize,
        state: &mut State<T>,
        ws: &mut ModelWs<T>,
        drop: Option<(&Dropout, &mut Rng)>,
    ) {
        self.forward_layers(w, None, tokens, steps, batch, state, ws, drop);
        let (v, n, top) = (self.vocab_size(), steps * batch, self.top_size());
        let top_out = layer_input(&ws.xs, &ws.ys, ws.drop.p > 0.0, self.cells.len());
        linear(n, v, top, top_out, &w[self.dec_w.clone()], &mut ws.logits, false);
        add_bias_rows(n, v, &[&w[self.dec_b.clone()]], &mut ws.logits, v);
    }

    /// The recurrent part of [`Model::forward`]: the input (embedded `tokens`, or the vectors
    /// `x` `[T, B, D]` of a task model) through every layer; the top layer's output (after
    /// dropout) is left in `ws.layer_input(layers)`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_layers<T: Float>(
        &self,
        w: &[T],
        x: Option<&[T]>,
        tokens: &[u32],
        steps: usize,
        batch: usize,
        state: &mut State<T>,
        ws: &mut ModelWs<T>,
        drop: Option<(&Dropout, &mut Rng)>,
    ) {
        let e = self.input_width;
        ws.ensure(self, steps, batch);
        match x {
            Some(x) => ws.xs[0].copy_from_slice(&x[..steps * batch * e]),
            None => {
                // Embedding lookup (none when the first cell reads the symbols themselves).
                let emb = &w[self.emb.clone()];
                if e > 0 {
                    for (row, &tok) in ws.xs[0].chunks_exact_mut(e).zip(tokens) {
                        row.copy_from_slice(&emb[tok as usize * e..(tok as usize + 1) * e]);
                    }
                }
            }
        }
        let (dp, rng) = match drop {
            Some((d, r)) => (*d, Some(r)),
            None => (Dropout::default(), None),
        };
        ws.drop = dp;
        // With few symbols (a character model's 27 against T·B = 6,400 rows) and no dropout on
        // the embedding, the first layer forms its input products once per symbol.
        ws.embedded = x.is_none() && e > 0 && dp.p == 0.0 && 2 * (self.emb.len() / e) <= steps * batch;
        if dp.p > 0.0 || dp.recurrent > 0.0 {
            let rng = rng.expect("dropout needs a generator");
            self.draw_masks(&dp, batch, &mut ws.in_masks, &mut ws.rec_masks, rng);
        }
        if dp.p > 0.0 && e > 0 {
            apply_mask(&mut ws.xs[0], &ws.in_masks[0]);
        }
        for (l, cell) in self.cells.iter().enumerate() {
            let wl = &w[self.layers[l].clone()];
            // A fresh sequence starts from the cell's own state (`s0: None`) unless the model
            // learns one for this layer: then every row starts from that vector.
            let learned = self.layer_s0[l].as_ref().filter(|_| state.fresh);
            match learned {
                Some(r) => ws.s0[l].chunks_exact_mut(r.len()).for_each(|row| row.copy_from_slice(&w[r.clone()])),
                None => ws.s0[l].copy_from_slice(&state.layers[l]),
            }
            let (below, ys) = ws.ys.split_at_mut(l);
            let seq = Seq {
                steps,
                batch,
                x: layer_input(&ws.xs, below, dp.p > 0.0, l),
                tokens: Some(tokens),
                s0: if state.fresh && learned.is_none() { None } else { Some(&ws.s0[l]) },
                mask: if dp.recurrent > 0.0 { Some(&ws.rec_masks[l]) } else { None },
                emb: (l == 0 && ws.embedded).then(|| &w[self.emb.clone()]),
                out_from: if l + 1 == self.cells.len() { ws.top_from } else { 0 },
            };
            cell.forward(wl, &seq, &mut ws.cell_ws[l], &mut ys[0]);
            state.layers[l].copy_from_slice(ws.cell_ws[l].final_state());
            // The next layer's input (or the decoder's) is the output after dropout, a copy
            // only when there is dropout ([`ModelWs::layer_input`]).
            if dp.p > 0.0 {
                let next = &mut ws.xs[l + 1];
                next.copy_from_slice(&ys[0]);
                apply_mask(next, &ws.in_masks[l + 1]);
            }
        }
        ws.fresh = state.fresh;
        state.fresh = false;
    }

    /// Turn `ws.logits` into per-position log-probabilities of `targets`, written to
    /// `ws.nll` (natural-log NLL per position), and return the summed NLL. The logits are
    /// consumed: with `grad` they become `d(mean NLL)/d logits`, otherwise scratch.
    pub fn score<T: Float>(&self, targets: &[u32], ws: &mut ModelWs<T>, grad: bool) -> f64 {
        let v = self.vocab_size();
        let n = targets.len();
        let scale = T::c(1.0 / n as f64);
        ws.logits[..n * v]
            .par_chunks_mut(v)
            .zip(ws.nll[..n].par_iter_mut())
            .zip(targets.par_iter())
            .for_each(|((row, nll), &tgt)| {
                *nll = softmax_xent_row(row, tgt as usize, scale, grad);
            });
        ws.nll[..n].iter().sum()
    }

    /// Draw a window's dropout masks from `rng`, in the order every engine draws them: the
    /// embedding's (`inputs[0]`, `[T·B, E]`), then per layer its recurrent input's (`rec[l]`,
    /// `[B, R]`, one per sequence) and its output's (`inputs[l + 1]`, `[T·B, out]`). Buffers
    /// are sized as [`ModelWs`]'s; a variational mask repeats one `[B, w]` row over the steps.
    pub fn draw_masks<T: Float>(&self, dp: &Dropout, batch: usize, inputs: &mut [Vec<T>], rec: &mut [Vec<T>], rng: &mut Rng) {
        if dp.p > 0.0 && self.input_width > 0 {
            make_mask(&mut inputs[0], dp.p, dp.variational, batch * self.input_width, rng, dp.shard);
        }
        for (l, cell) in self.cells.iter().enumerate() {
            if dp.recurrent > 0.0 {
                let row = rec[l].len();
                make_mask(&mut rec[l], dp.recurrent, true, row, rng, dp.shard);
            }
            if dp.p > 0.0 {
                make_mask(&mut inputs[l + 1], dp.p, dp.variational, batch * cell.sizes().output, rng, dp.shard);
            }
        }
    }

    /// Backward of the latest `forward` + `score(grad = true)`; gradients are added to `g`.
    pub fn backward<T: Float>(&self, w: &[T], g: &mut [T], tokens: &[u32], ws: &mut ModelWs<T>) {
        let v = self.vocab_size();
        let n = ws.steps * ws.batch;
        let top = self.top_size();
        let nl = self.cells.len();
        // Decoder.
        linear_dw(n, v, top, &ws.logits, ws.layer_input(nl), &mut g[self.dec_w.clone()]);
        add_col_sums(n, v, &ws.logits, &mut g[self.dec_b.clone()]);
        linear_dx(n, v, top, &ws.logits, &w[self.dec_w.clone()], &mut ws.dxs[nl], false);
        self.backward_layers(w, g, tokens, ws);
    }

    /// Backward through the layers and the embedding, from the gradient of the top layer's
    /// output in `ws.dxs[layers]`.
    pub fn backward_layers<T: Float>(&self, w: &[T], g: &mut [T], tokens: &[u32], ws: &mut ModelWs<T>) {
        let e = self.emb_size();
        let (steps, batch) = (ws.steps, ws.batch);
        let nl = self.cells.len();
        let dp = ws.drop;
        for l in (0..nl).rev() {
            let cell = &self.cells[l];
            // Through the dropout on this layer's output.
            if dp.p > 0.0 {
                apply_mask(&mut ws.dxs[l + 1], &ws.in_masks[l + 1]);
            }
            let (lo, hi) = ws.dxs.split_at_mut(l + 1);
            let learned = self.layer_s0[l].as_ref().filter(|_| ws.fresh);
            let seq = Seq {
                steps,
                batch,
                x: layer_input(&ws.xs, &ws.ys, dp.p > 0.0, l),
                tokens: Some(tokens),
                s0: if ws.fresh && learned.is_none() { None } else { Some(&ws.s0[l]) },
                mask: if dp.recurrent > 0.0 { Some(&ws.rec_masks[l]) } else { None },
                emb: (l == 0 && ws.embedded).then(|| &w[self.emb.clone()]),
                out_from: if l + 1 == nl { ws.top_from } else { 0 },
            };
            let range = self.layers[l].clone();
            // The bottom layer's input gradient only feeds the embedding (raw inputs, the
            // tasks' sequences, need none); embedded, the cell adds it to the table's gradient.
            let (gl, dx) = if cell.reads_tokens() || (l == 0 && e == 0) {
                (&mut g[range], None)
            } else if l == 0 && ws.embedded {
                let (gl, ge) = disjoint_mut(g, range, self.emb.clone());
                (gl, Some(ge))
            } else {
                (&mut g[range], Some(&mut lo[l][..]))
            };
            let ds0 = learned.map(|_| &mut ws.ds0[l][..]);
            let grads = Grads { dy: &hi[0], ds_final: None, dx, ds0 };
            cell.backward(&w[self.layers[l].clone()], gl, &seq, &mut ws.cell_ws[l], grads);
            // Every row started from the same vector: its gradient is the sum over the rows.
            if let Some(r) = learned {
                let gs = &mut g[r.clone()];
                for row in ws.ds0[l].chunks_exact(r.len()) {
                    gs.iter_mut().zip(row).for_each(|(g, &d)| *g += d);
                }
            }
        }
        if e == 0 || ws.embedded {
            return;
        }
        if dp.p > 0.0 {
            apply_mask(&mut ws.dxs[0], &ws.in_masks[0]);
        }
        let ge = &mut g[self.emb.clone()];
        for (row, &tok) in ws.dxs[0].chunks_exact(e).zip(tokens) {
            for (d, &x) in ge[tok as usize * e..(tok as usize + 1) * e].iter_mut().zip(row) {
                *d += x;
            }
        }
    }
}

/// `(&mut s[a], &mut s[b])` for ranges that do not overlap.
fn disjoint_mut<T>(s: &mut [T], a: Range<usize>, b: Range<usize>) -> (&mut [T], &mut [T]) {
    assert!(a.end <= b.start || b.end <= a.start, "disjoint_mut: {a:?} and {b:?} overlap");
    if a.start < b.start {
        let (lo, hi) = s.split_at_mut(b.start);
        (&mut lo[a], &mut hi[..b.len()])
    } else {
        let (lo, hi) = s.split_at_mut(a.start);
        (&mut hi[..a.len()], &mut lo[b])
    }
}

/// Fill `mask` (`[T, B, D]`) with inverted-dropout values, 0 or `1/(1-p)`: a fresh draw per
/// step, or with `variational` one `[B, D]` draw (`row` = `B·D` values) repeated at every step.
/// With a `shard` (`(global rows, first, end)`, `B = end − first`), each step draws the masks
/// of all the global rows, in order, and keeps rows `first..end`.
fn make_mask<T: Float>(mask: &mut [T], p: f64, variational: bool, row: usize, rng: &mut Rng, shard: Option<(usize, usize, usize)>) {
    let keep = T::c(1.0 / (1.0 - p));
    let n = if variational { row } else { mask.len() };
    let (first, rest) = mask.split_at_mut(n);
    match shard {
        None => {
            for x in first.iter_mut() {
                *x = if rng.uniform() < p { T::zero() } else { keep };
            }
        }
        Some((rows, r0, r1)) => {
            let d = row / (r1 - r0).max(1);
            for step in first.chunks_exact_mut(row) {
                for r in 0..rows {
                    for k in 0..d {
                        let v = if rng.uniform() < p { T::zero() } else { keep };
                        if (r0..r1).contains(&r) {
                            step[(r - r0) * d + k] = v;
                        }
                    }
                }
            }
        }
    }
    for chunk in rest.chunks_exact_mut(n) {
        chunk.copy_from_slice(first);
    }
}

fn apply_mask<T: Float>(x: &mut [T], m: &[T]) {
    x.iter_mut().zip(m).for_each(|(x, &m)| *x *= m);
}

/// The negative log-likelihood of class `target` under the softmax of the logits `row`; with
/// `grad`, `row` is replaced by `scale ·` the gradient of that NLL with respect to the logits
/// (`softmax − one-hot`), else by the unnormalised exponentials.
pub(crate) fn softmax_xent_row<T: Float>(row: &mut [T], target: usize, scale: T, grad: bool) -> f64 {
    let mx = max_lanes(row);
    let z_target = row[target] - mx;
    row.iter_mut().for_each(|x| *x = (*x - mx).exp_fast());
    let sum = sum_lanes(row);
    if grad {
        let inv = scale / sum;
        row.iter_mut().for_each(|x| *x *= inv);
        row[target] -= scale;
    }
    (sum.ln() - z_target).f64()
}

/// The recurrent state carried from one window to the next.
#[derive(Clone, Debug)]
pub struct State<T> {
    /// per layer `[B, S]`
    pub layers: Vec<Vec<T>>,
    /// no window has run yet: the next starts from the cells' own initial states
    pub fresh: bool,
}

/// Everything one window's forward and backward need, allocated once per `(steps, batch)`.
#[derive(Default)]
pub struct ModelWs<T> {
    pub steps: usize,
    pub batch: usize,
    /// `xs[0]` embeddings after dropout; `xs[l+1]` layer `l`'s output after dropout, written
    /// only when there is dropout (read them through [`ModelWs::layer_input`])
    pub xs: Vec<Vec<T>>,
    /// raw layer outputs
    pub ys: Vec<Vec<T>>,
    pub dxs: Vec<Vec<T>>,
    pub s0: Vec<Vec<T>>,
    /// per layer `[B, S]`: the initial-state gradient (used for a learned initial state)
    pub ds0: Vec<Vec<T>>,
    pub in_masks: Vec<Vec<T>>,
    pub rec_masks: Vec<Vec<T>>,
    /// the dropout of the latest forward (all zero when evaluating)
    pub drop: Dropout,
    /// whether the latest forward started from the cells' own initial states
    pub fresh: bool,
    /// whether the first layer of the latest forward read the embedding table itself
    /// (`Seq::emb`) rather than the looked-up rows
    pub embedded: bool,
    pub cell_ws: Vec<Workspace<T>>,
    /// `[T·B, V]` logits, then their gradient
    pub logits: Vec<T>,
    /// `[T·B]` per-position NLL
    pub nll: Vec<f64>,
    /// The first step of the top layer's output that the caller reads ([`Seq::out_from`];
    /// 0, every step, unless the caller sets it: the tasks scored at their last steps). Its
    /// rows before that step are left as they were, and their gradient must be zero.
    pub top_from: usize,
}

/// Layer `l`'s input in the latest forward (the decoder's for `l` = the number of layers): the
/// layer below's output `ys[l - 1]` itself, or with dropout (`dropped`) its masked copy `xs[l]`.
/// Without dropout the copy would be a pass over `T·B·H` values a layer and a step for nothing.
pub(crate) fn layer_input<'a, T>(xs: &'a [Vec<T>], ys: &'a [Vec<T>], dropped: bool, l: usize) -> &'a [T] {
    if l == 0 || dropped {
        &xs[l]
    } else {
        &ys[l - 1]
    }
}

impl<T: Float> ModelWs<T> {
    /// Layer `l`'s input in the latest forward, the decoder's for `l` = the number of layers
    /// (after dropout, where there was any).
    pub fn layer_input(&self, l: usize) -> &[T] {
        layer_input(&self.xs, &self.ys, self.drop.p > 0.0, l)
    }

    pub fn ensure(&mut self, model: &Model, steps: usize, batch: usize) {
        if self.steps == steps && self.batch == batch && self.xs.len() == model.cells.len() + 1 {
            return;
        }
        let n = steps * batch;
        let mut widths = vec![model.input_width];
        widths.extend(model.cells.iter().map(|c| c.sizes().output));
        let z = |k: usize| vec![T::zero(); k];
        self.xs = widths.iter().map(|&w| z(n * w)).collect();
        self.dxs = widths.iter().map(|&w| z(n * w)).collect();
        self.in_masks = widths.iter().map(|&w| z(n * w)).collect();
        self.ys = model.cells.iter().map(|c| z(n * c.sizes().output)).collect();
        self.s0 = model.cells.iter().map(|c| z(batch * c.sizes().state)).collect();
        self.ds0 = self.s0.clone();
        self.rec_masks = model.cells.iter().map(|c| z(batch * c.sizes().rec)).collect();
        self.cell_ws.resize_with(model.cells.len(), Workspace::default);
        self.logits = z(n * model.vocab_size());
        self.nll = vec![0.0; n];
        self.steps = steps;
        self.batch = batch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(cell: &str, projection: Option<usize>) -> Model {
        tiny_with(cell, projection, CellOptions::default())
    }

    fn tiny_with(cell: &str, projection: Option<usize>, opts: CellOptions) -> Model {
        let symbols = registry::reads_tokens(cell);
        let hidden: &[usize] = if symbols { &[4] } else { &[4, 3] };
        let layers = layer_configs(cell, if symbols { 5 } else { 3 }, hidden, projection, opts).unwrap();
        let config = ModelConfig {
            format: "rnnlens".into(),
            format_version: 1,
            vocab_size: 5,
            tokenizer: TokenizerConfig { level: "word".into(), normalize: "none".into(), split: None },
            embedding_size: if symbols { None } else { Some(3) },
            layers,
            cell_name: cell.into(),
            input_size: None,
        };
        Model::new(config).unwrap()
    }

    /// The whole model (embedding, dropout on every path, two layers, decoder, softmax) against
    /// central differences in f64, for every registered cell and option (`registry::variants`).
    #[test]
    fn model_gradients_match_finite_differences() {
        for v in registry::variants() {
            model_gradcheck(&tiny_with(v.name, v.projection, v.opts), &v.to_string());
        }
    }

    /// The gradient of the mean NLL of `targets` after a forward from `state0` (dropout masks from
    /// a fixed seed), asserted against central differences for every parameter.
    fn checked_gradient(
        model: &Model,
        w: &[f64],
        (tokens, targets): (&[u32], &[u32]),
        (steps, batch): (usize, usize),
        state0: &State<f64>,
        drop: &Dropout,
        label: &str,
    ) -> Vec<f64> {
        let loss = |w: &[f64], ws: &mut ModelWs<f64>, grad: bool| {
            let mut st = state0.clone();
            model.forward(w, tokens, steps, batch, &mut st, ws, Some((drop, &mut Rng::new(11))));
            model.score(targets, ws, grad) / targets.len() as f64
        };
        let mut ws = ModelWs::default();
        loss(w, &mut ws, true);
        let mut g = vec![0.0; w.len()];
        model.backward(w, &mut g, tokens, &mut ws);
        let mut ws2 = ModelWs::default();
        for s in &model.slots {
            for k in s.range() {
                let mut wp = w.to_vec();
                wp[k] += 1e-6;
                let lp = loss(&wp, &mut ws2, false);
                wp[k] -= 2e-6;
                let lm = loss(&wp, &mut ws2, false);
                let num = (lp - lm) / 2e-6;
                let ok = (num - g[k]).abs() <= 1e-6 * num.abs().max(g[k].abs()) + 1e-9;
                assert!(ok, "{label} {}[{}]: {} vs {}", s.name, k - s.offset, g[k], num);
            }
        }
        g
    }

    fn model_gradcheck(model: &Model, cell: &str) {
        let mut rng = Rng::new(3);
        let w: Vec<f64> = model.init_params(Init::Uniform { scale: 0.5 }, &mut rng).iter().map(|&x| x as f64).collect();
        let (steps, batch) = (3, 2);
        let tokens = [0u32, 4, 2, 1, 3, 3];
        let targets = [4u32, 2, 1, 3, 3, 0];
        let mut state0 = model.initial_state::<f64>(batch);
        state0.fresh = false;
        for s in state0.layers.iter_mut() {
            s.iter_mut().enumerate().for_each(|(i, x)| *x = 0.1 * i as f64 - 0.2);
        }
        let drop = Dropout { p: 0.3, recurrent: 0.25, variational: true, shard: None };
        let g = checked_gradient(model, &w, (&tokens, &targets), (steps, batch), &state0, &drop, cell);
        assert!(g.iter().filter(|x| x.abs() > 1e-9).count() > g.len() / 2, "{cell}");

        // Without dropout on the embedding and with at least twice as many rows as symbols, the
        // first layer reads the embedding table itself (`Seq::emb`).
        let (steps, batch) = (6, 2);
        let tokens = [0u32, 4, 2, 1, 3, 3, 1, 0, 4, 4, 2, 0];
        let targets = [4u32, 2, 1, 3, 3, 0, 0, 1, 4, 2, 2, 3];
        let mut state0 = model.initial_state::<f64>(batch);
        state0.fresh = false;
        let drop = Dropout { p: 0.0, recurrent: 0.25, variational: true, shard: None };
        checked_gradient(model, &w, (&tokens, &targets), (steps, batch), &state0, &drop, cell);
        let mut ws = ModelWs::default();
        model.forward(&w, &tokens, steps, batch, &mut state0, &mut ws, Some((&drop, &mut Rng::new(11))));
        assert_eq!(ws.embedded, model.emb_size() > 0, "{cell}: the embedded path was not taken");
    }

    /// A learned initial state through the whole model from a fresh state (two layers, the
    /// initial state read by every batch row, dropout on), against central differences in f64.
    #[test]
    fn learned_initial_state_gradients_match_finite_differences() {
        // every registered cell that starts from zeros, and so can learn its start
        for v in registry::variants().into_iter().filter(|v| !registry::learns_own_initial_state(v.name) && v.projection.is_none()) {
            let cell = v.name;
            let opts = CellOptions { learn_initial_state: true, ..v.opts };
            let config = ModelConfig {
                layers: layer_configs(cell, 3, &[4, 3], None, opts).unwrap(),
                ..tiny(cell, None).config
            };
            let model = Model::new(config).unwrap();
            let s0: Vec<&Slot> = model.slots.iter().filter(|s| s.name.ends_with(".initial_state")).collect();
            assert_eq!(s0.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["rnn.0.initial_state", "rnn.1.initial_state"]);
            assert_eq!(s0[0].shape, [model.cells[0].sizes().state]);
            let mut rng = Rng::new(4);
            // Uniform: the learned states start non-zero, so their effect is not trivially absent.
            let w: Vec<f64> = model.init_params(Init::Uniform { scale: 0.5 }, &mut rng).iter().map(|&x| x as f64).collect();
            let (steps, batch) = (3, 3);
            let tokens = [0u32, 4, 2, 1, 3, 3, 2, 0, 1];
            let targets = [4u32, 2, 1, 3, 3, 0, 1, 1, 2];
            let drop = Dropout { p: 0.2, recurrent: 0.25, variational: true, shard: None };
            let state0 = model.initial_state::<f64>(batch);
            let g = checked_gradient(&model, &w, (&tokens, &targets), (steps, batch), &state0, &drop, cell);
            for s in &s0 {
                assert!(g[s.range()].iter().any(|x| x.abs() > 1e-6), "{cell}: no gradient reaches {}", s.name);
            }
            // A carried (not fresh) state is the previous window's: the learned one is not read.
            let (mut g2, mut ws) = (vec![0.0; w.len()], ModelWs::default());
            let mut st = model.initial_state::<f64>(batch);
            st.fresh = false;
            model.forward(&w, &tokens, steps, batch, &mut st, &mut ws, None);
            model.score(&targets, &mut ws, true);
            model.backward(&w, &mut g2, &tokens, &mut ws);
            assert!(s0.iter().all(|s| g2[s.range()].iter().all(|&x| x == 0.0)));
        }
    }

    #[test]
    fn a_learned_initial_state_is_only_for_cells_starting_from_zeros_and_old_configs_load() {
        let opts = CellOptions { learn_initial_state: true, ..Default::default() };
        // The command line leaves the cells with their own learned start as they are...
        for cell in ["rwa", "rda-exp-tanh", "rda-sigmoid-id", "isan", "linear"] {
            let input = if registry::reads_tokens(cell) { 5 } else { 3 };
            let layers = layer_configs(cell, input, &[4], None, opts).unwrap();
            assert!(!layers[0].learn_initial_state, "{cell}");
        }
        // ...and a config asking for one on top of theirs is refused.
        let mut config = tiny("rwa", None).config;
        config.layers[0].learn_initial_state = true;
        let err = Model::new(config).err().unwrap();
        assert!(format!("{err:#}").contains("learns its own initial state"), "{err:#}");
        // Without the option nothing changes: no tensor, no key written; an old config loads.
        let plain = tiny("gru", None);
        assert!(!plain.slots.iter().any(|s| s.name.contains("initial_state")));
        let json = serde_json::to_string(&plain.config).unwrap();
        assert!(!json.contains("learn_initial_state"));
        let back: ModelConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, plain.config);
        let with = layer_configs("gru", 3, &[4], None, opts).unwrap();
        let json = serde_json::to_string(&with[0]).unwrap();
        assert!(json.contains("\"learn_initial_state\":true"));
        // A zero learned state is the zero start: identical outputs.
        let config = ModelConfig { layers: layer_configs("lstm", 3, &[4, 3], None, opts).unwrap(), ..tiny("lstm", None).config };
        let learned = Model::new(config).unwrap();
        let base = tiny("lstm", None);
        assert_eq!(learned.recurrent_params(), base.recurrent_params() + 8 + 6);
        let w = base.init_params(Init::Uniform { scale: 0.5 }, &mut Rng::new(2));
        let mut wl = vec![0f32; learned.n_params];
        for s in &base.slots {
            let t = learned.slots.iter().find(|t| t.name == s.name).unwrap();
            wl[t.range()].copy_from_slice(&w[s.range()]);
        }
        let tokens = [1u32, 2, 3, 4];
        let run = |m: &Model, w: &[f32]| {
            let mut ws = ModelWs::default();
            m.forward(w, &tokens, 2, 2, &mut m.initial_state(2), &mut ws, None);
            ws.logits
        };
        assert_eq!(run(&base, &w), run(&learned, &wl));
    }

    #[test]
    fn xavier_opens_forget_gates_and_identity_is_kept() {
        let mut rng = Rng::new(1);
        let m = tiny("lstm", None);
        let w = m.init_params(Init::Xavier, &mut rng);
        let get = |name: &str| &w[m.slots.iter().find(|s| s.name == name).unwrap().range()];
        assert_eq!(get("rnn.0.bias_ih"), &[0., 0., 0., 0., 1., 1., 1., 1., 0., 0., 0., 0., 0., 0., 0., 0.][..]);
        assert!(get("rnn.0.bias_hh").iter().all(|&x| x == 0.0));
        assert!(get("rnn.1.weight_ih").iter().all(|&x| x.abs() <= (6.0f32 / 7.0).sqrt()));
        let r = tiny("ran-tanh", None);
        let w = r.init_params(Init::Xavier, &mut rng);
        assert!(w[r.slots.iter().find(|s| s.name == "rnn.0.b_f").unwrap().range()].iter().all(|&x| x == 1.0));
        let i = tiny("irnn", None);
        let w = i.init_params(Init::Uniform { scale: 0.1 }, &mut rng);
        let hh = &w[i.slots.iter().find(|s| s.name == "rnn.0.weight_hh").unwrap().range()];
        assert_eq!(hh[0], 1.0);
        assert_eq!(hh[1], 0.0);
        assert_eq!(hh[5], 1.0);
    }

    #[test]
    fn variational_masks_repeat_over_time_and_standard_ones_do_not() {
        let mut rng = Rng::new(5);
        let mut m = vec![0f64; 4 * 50];
        make_mask(&mut m, 0.5, true, 50, &mut rng, None);
        assert!(m.chunks(50).all(|c| c == &m[..50]));
        assert!(m.iter().all(|&x| x == 0.0 || x == 2.0));
        make_mask(&mut m, 0.5, false, 50, &mut rng, None);
        assert!(m.chunks(50).any(|c| c != &m[..50]));
    }
}
