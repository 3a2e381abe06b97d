//! The language model on the GPU: embedding → stacked cells → decoder → softmax cross-entropy,
//! its backward, gradient clipping and the optimizer, all on the device, in the flat parameter
//! layout of the CPU engine (so weights move between the two as they are, and a checkpoint does
//! not know where it was trained). A window is four recorded programs submitted in order
//! (forward, backward, update, state carry); nothing is read back inside them.
//!
//! Dropout masks are drawn on the host by `Model::draw_masks`, the CPU engine's own draws in its
//! order, and uploaded each window: a run draws the same masks on either device.
//!
//! A task model (`tasks::task_model`: real inputs or symbols, a readout at the scored positions)
//! runs through [`GpuLm::for_task`]: the same layers, its readout's outputs read back for the
//! task's loss on the host (`tasks::task_loss`, the CPU's own), their gradient written back.
//!
//! The sampled softmax (`training::sampled`) draws its candidates on the host, from the run's
//! generator as the CPU engine does; the device gathers their decoder rows and scores every
//! position against them (`GpuLm::sampled`, `set_candidates`). The candidates are padded to
//! the most a step can have, so that one recorded program serves every step.

use crate::kernels::precision::LossScale;
use super::{Dropout, Model, State};
use crate::kernels::rng::Rng;
use crate::cells::gpu::{GpuCell, LayerBufs};
use crate::kernels::gpu::{op, Arena, Buf, Gemm, Gpu, Program};
use anyhow::{bail, Result};

/// Where the model's buffers sit in `A` and `I`.
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// the decoder's outputs `[T·B, V]`, or a task's readout `[S, C]` (then its gradient)
    logits: usize,
    nll: usize,
    parts: usize,
    norm: usize,
    /// in `I`: tokens, targets, the symbols' starts (`V + 1`), positions by symbol
    tokens: usize,
    targets: usize,
    starts: usize,
    positions: usize,
}

/// What sits on top of the layers.
#[derive(Clone, Copy, Debug)]
enum Head {
    /// the decoder at every position and its softmax cross-entropy (whose slot's parameters
    /// change per call)
    Lm { xent_slot: usize, cols: usize },
    /// the sampled softmax against at most `cmax` candidates (their ids in `I` at `cand`, their
    /// bias corrections in `A` at `adj`)
    Sampled { xent_slot: usize, cmax: usize, cand: usize, adj: usize },
    /// a task's readout at `scored` positions: their indices in `I`, the inputs `[T·B, D]` in
    /// `A` (`D` = `input`, 0 for a cell that reads the symbols)
    Task { scored: usize, indices: usize, x: usize, input: usize },
}

/// Where the buffers above the layers sit, for [`Top::forward`] and [`Top::backward`]: the top
/// layer's output and its gradient `[n, top]`, the decoder (its weight and bias offsets in
/// `W`), the logits and the per-position NLL, the targets (in `I`); a task's scored rows
/// `(S, rows, their gradient)`, or a sampled softmax's candidates `(C, rows, biases,
/// corrections)`, whose indices or ids are at `indices` in `I`.
struct Top {
    n: usize,
    top: usize,
    v: usize,
    y: usize,
    dy: usize,
    dec: (usize, usize),
    logits: usize,
    nll: usize,
    targets: usize,
    rows: Option<(usize, usize, usize)>,
    cand: Option<(usize, usize, usize, usize)>,
    indices: usize,
}

impl Top {
    /// Record the decoder (or a task's readout) and the cross-entropy; the language model's
    /// head, or `None` for a task's (whose loss the host computes).
    fn forward(&self, gpu: &Gpu, fwd: &mut Program) -> Result<Option<Head>> {
        let (n, top, v, (dw, db), logits) = (self.n, self.top, self.v, self.dec, self.logits);
        // The decoder's (or readout's) input: every position, or a task's scored ones.
        let (rows, m) = match self.rows {
            Some((s, rows, _)) => {
                fwd.flat(op(gpu, "rows_gather")?, &[u(s), u(top), u(self.indices), u(self.y), u(rows)], s * top);
                (rows, s)
            }
            None => (self.y, n),
        };
        let cols = match self.cand {
            Some((c, cw, cb, adj)) => {
                // The candidates' decoder rows and biases, then every position against them.
                fwd.flat(op(gpu, "cand_gather")?, &[u(c), u(top), u(self.indices), u(adj), u(dw), u(db), u(cw), u(cb)], c * (top + 1));
                fwd.gemm(gpu, Gemm { m, n: c, k: top, a: (Buf::A, rows, top), ta: false, b: (Buf::A, cw, top), tb: true, c: (Buf::A, logits, c), accumulate: false, bias: [None; 2] })?;
                fwd.flat(op(gpu, "bias_rows_a")?, &[u(n), u(c), u(logits), u(cb)], n * c);
                c
            }
            None => {
                fwd.gemm(gpu, Gemm { m, n: v, k: top, a: (Buf::A, rows, top), ta: false, b: (Buf::W, dw, top), tb: true, c: (Buf::A, logits, v), accumulate: false, bias: [Some(db), None] })?;
                v
            }
        };
        if self.rows.is_some() {
            return Ok(None);
        }
        let xent = [u(n), u(cols), u(logits), u(self.targets), u(self.nll), (1.0f32 / n as f32).to_bits(), 1];
        let xent_slot = fwd.dispatch(op(gpu, "softmax_xent")?, &xent, crate::kernels::gpu::grid(n));
        Ok(Some(match self.cand {
            Some((cmax, _, _, adj)) => Head::Sampled { xent_slot, cmax, cand: self.indices, adj },
            None => Head::Lm { xent_slot, cols },
        }))
    }

    /// Record the backward of [`Top::forward`] from the logits' gradient: the decoder's
    /// gradients added to `G`, the top layer's output gradient written.
    fn backward(&self, gpu: &Gpu, bwd: &mut Program) -> Result<()> {
        let (n, top, v, (dw, db), logits) = (self.n, self.top, self.v, self.dec, self.logits);
        if let Some((c, cw, _, _)) = self.cand {
            // ∂L/∂h from the candidates' rows, then their rows' gradients written over them and
            // added, with the biases', at their classes.
            bwd.gemm(gpu, Gemm { m: n, n: top, k: c, a: (Buf::A, logits, c), ta: false, b: (Buf::A, cw, top), tb: false, c: (Buf::A, self.dy, top), accumulate: false, bias: [None; 2] })?;
            bwd.gemm(gpu, Gemm { m: c, n: top, k: n, a: (Buf::A, logits, c), ta: true, b: (Buf::A, self.y, top), tb: false, c: (Buf::A, cw, top), accumulate: false, bias: [None; 2] })?;
            bwd.flat(op(gpu, "cand_scatter")?, &[u(c), u(top), u(self.indices), u(cw), u(dw), u(db), u(n), u(logits)], c * (top + 1));
            return Ok(());
        }
        let (m, rows, drows) = match self.rows {
            Some((s, rows, drows)) => (s, rows, drows),
            None => (n, self.y, self.dy),
        };
        bwd.gemm(gpu, Gemm { m: v, n: top, k: m, a: (Buf::A, logits, v), ta: true, b: (Buf::A, rows, top), tb: false, c: (Buf::G, dw, top), accumulate: true, bias: [None; 2] })?;
        bwd.dispatch(op(gpu, "colsum")?, &[u(m), u(v), u(logits), u(v), u(db), 0, 0], [u(v.div_ceil(64)), 1, 1]);
        bwd.gemm(gpu, Gemm { m, n: top, k: v, a: (Buf::A, logits, v), ta: false, b: (Buf::W, dw, top), tb: false, c: (Buf::A, drows, top), accumulate: false, bias: [None; 2] })?;
        if let Some((s, _, drows)) = self.rows {
            // Positions that are not scored get no gradient from the readout.
            bwd.clear(Buf::A, self.dy, n * top);
            bwd.flat(op(gpu, "rows_scatter")?, &[u(s), u(top), u(self.indices), u(drows), u(self.dy)], s * top);
        }
        Ok(())
    }
}

/// The programs that move the layers' state: the carry (the final states become the next
/// window's initial ones) and a fresh start (the cells with their own initial state write it,
/// the rest start from the zeros written before, and the layers note that the window starts
/// fresh).
fn state_programs(gpu: &Gpu, model: &Model, layers: &[(GpuCell, LayerBufs)], steps: usize, batch: usize) -> Result<(Program, Program)> {
    let mut carry = Program::default();
    for (gc, lb) in layers {
        let ns = batch * gc.state;
        carry.flat(op(gpu, "copy_a")?, &[u(ns), u(lb.st + steps * ns), u(lb.st)], ns);
        carry.clear(Buf::A, lb.fresh, 1);
    }
    let mut fresh = Program::default();
    for (l, (gc, lb)) in layers.iter().enumerate() {
        match &model.layer_s0[l] {
            Some(s0) => {
                fresh.flat(op(gpu, "rows_from_w")?, &[u(batch), u(gc.state), u(s0.start), u(lb.st)], batch * gc.state);
            }
            None => gc.fresh(gpu, &mut fresh, lb, batch)?,
        }
    }
    Ok((carry, fresh))
}

pub struct GpuLm {
    pub gpu: std::sync::Arc<Gpu>,
    arena: Arena,
    pub steps: usize,
    pub batch: usize,
    vocab: usize,
    emb: usize,
    n_params: usize,
    layers: Vec<(GpuCell, LayerBufs)>,
    at: Layout,
    /// where the split GEMMs' partial products go in `A`
    pub scratch: usize,
    /// the run's dropout, where its masks sit in `A`, and the host's buffers they are drawn in
    dropout: Dropout,
    in_masks: Vec<Option<usize>>,
    rec_masks: Vec<Option<usize>>,
    host_masks: (Vec<Vec<f32>>, Vec<Vec<f32>>),
    pub forward: Program,
    pub backward: Program,
    clip: Program,
    update: Program,
    carry: Program,
    fresh: Program,
    head: Head,
    /// symbols a first layer reading them can meet (the vocabulary, or a task's input symbols)
    symbols: usize,
    /// the slots whose parameters change per call: the clipping's two, the update's
    sumsq_slot: usize,
    clip_slot: usize,
    update_slot: usize,
    /// Adam (else plain SGD), as `training::optim::Optimizer`
    adam: bool,
    /// updates taken (Adam's bias correction)
    pub t: u64,
    /// the products in f16 with the loss scaled (`--precision f16`), its state after the norm
    half: bool,
}

/// f16's loss scale at the start of a run, and the steps without an overflow after which it
/// doubles (PyTorch's GradScaler's defaults).
pub const LOSS_SCALE: (f32, u32) = (65536.0, 2000);

fn u(x: usize) -> u32 {
    x as u32
}

impl GpuLm {
    /// Put `model` with weights `w` on `gpu` for windows of `steps × batch` tokens; the state
    /// starts from zeros, as a fresh CPU state does.
    /// `dropout`: the run's rates (masks then come from [`GpuLm::set_masks`] every window).
    pub fn new(gpu: std::sync::Arc<Gpu>, model: &Model, w: &[f32], steps: usize, batch: usize, adam: bool, dropout: Option<Dropout>) -> Result<GpuLm> {
        if model.config.input_size.is_some() {
            bail!("a task model runs on the GPU through GpuLm::for_task");
        }
        GpuLm::build(gpu, model, w, (steps, batch), adam, dropout, None, None)
    }

    /// [`GpuLm::new`] for training with a sampled softmax of at most `cmax` candidates a step
    /// (`SampledSoftmax::max_candidates`), drawn by the host before each window
    /// ([`GpuLm::set_candidates`]); the targets given to the window are then their columns
    /// among the candidates (`SampledSoftmax::target_columns`), and its loss the sampled loss.
    #[allow(clippy::too_many_arguments)]
    pub fn sampled(gpu: std::sync::Arc<Gpu>, model: &Model, w: &[f32], steps: usize, batch: usize, adam: bool, dropout: Option<Dropout>, cmax: usize) -> Result<GpuLm> {
        if model.config.input_size.is_some() {
            bail!("a task model has no sampled softmax");
        }
        GpuLm::build(gpu, model, w, (steps, batch), adam, dropout, None, Some(cmax.clamp(1, model.vocab_size())))
    }

    /// Put a task model (`tasks::task_model`) on `gpu` for batches of at most `steps` steps
    /// of `batch` sequences scored at `scored` positions each, trained with Adam (`adam`) or
    /// only evaluated; every batch starts from the cells' own starts.
    pub fn for_task(gpu: std::sync::Arc<Gpu>, model: &Model, w: &[f32], (steps, batch): (usize, usize), scored: usize, adam: bool) -> Result<GpuLm> {
        if model.config.input_size.is_none() {
            bail!("GpuLm::for_task takes a task model; a language model runs through GpuLm::new");
        }
        GpuLm::build(gpu, model, w, (steps, batch), adam, None, Some(scored), None)
    }

    /// [`GpuLm::new`], [`GpuLm::sampled`] and [`GpuLm::for_task`]: a task's readout at
    /// `scored` positions on top of the layers where that is given, the language model's
    /// decoder otherwise, against `sampled` candidates at most where those are given.
    #[allow(clippy::too_many_arguments)]
    fn build(gpu: std::sync::Arc<Gpu>, model: &Model, w: &[f32], (steps, batch): (usize, usize), adam: bool, dropout: Option<Dropout>, scored: Option<usize>, sampled: Option<usize>) -> Result<GpuLm> {
        let (v, e, n) = (model.vocab_size(), model.emb_size(), steps * batch);
        let reads_symbols = model.cells.first().is_some_and(|c| c.reads_tokens());
        // A task's inputs: real vectors, or symbols (of which `input_size` there are).
        let input = model.config.input_size.unwrap_or(0);
        let symbols = if scored.is_some() { input } else { v };
        let x_width = if scored.is_some() && !reads_symbols { input } else { e };
        let mut a = 0usize;
        let mut take = |len: usize| -> usize {
            let at = a;
            a += len;
            at
        };
        let (x0, dx0) = (take(n * x_width), take(n * e));
        let dp = dropout.unwrap_or_default();
        // The masks, where the rates draw them: the inputs' [T·B, w] (the embedding's, then
        // each layer's output), each layer's recurrent [B, R].
        let mut in_masks = vec![(dp.p > 0.0).then(|| take(n * e))];
        let mut rec_masks = Vec::new();
        let mut layers = Vec::new();
        let mut below = (x0, dx0);
        // Where `upload` puts the window's tokens, and the positions of each symbol, in `I`.
        let (tokens_at, starts_at, positions_at) = (0, 2 * n, 2 * n + symbols + 1);
        for (l, cell) in model.cells.iter().enumerate() {
            let gc = cell.gpu_cell()?;
            let [xp, st, rin, dr, ds, rp, act, fresh] = gc.ws_lens(steps, batch);
            let (y, dy) = (take(n * gc.out), take(n * gc.out));
            in_masks.push((dp.p > 0.0).then(|| take(n * gc.out)));
            rec_masks.push((dp.recurrent > 0.0).then(|| take(batch * gc.rin)));
            // A cell that reads the symbols themselves (the first layer of a model without an
            // embedding) gathers its rows by the window's tokens.
            let reads = gc.gather.is_some() || gc.switched.is_some();
            let symbols = (reads && l == 0).then_some((tokens_at, starts_at, positions_at, symbols));
            if reads && l > 0 {
                bail!("layer {l} reads symbols; only the first layer of a model can");
            }
            let lb = LayerBufs {
                symbols,
                params: model.layers[l].start,
                x: below.0,
                y,
                dy,
                // The inputs below the first layer have a gradient only as an embedding's.
                dx: (l > 0 || e > 0).then_some(below.1),
                xp: take(xp),
                st: take(st),
                rin: take(rin),
                dr: take(dr),
                ds: take(ds),
                rp: take(rp),
                rec_mask: rec_masks[l],
                act: take(act),
                fresh: take(fresh),
            };
            below = (y, dy);
            layers.push((gc, lb));
        }
        let top = model.top_size();
        let np = model.n_params;
        // The task's readout rows (gathered, then their gradient) and outputs; the decoder's.
        let (rows, drows) = (take(scored.unwrap_or(0) * top), take(scored.unwrap_or(0) * top));
        // A sampled softmax's candidates: their decoder rows (then the rows' gradients), biases
        // with their corrections, and the corrections.
        let cmax = sampled.unwrap_or(0);
        let (cand_w, cand_b, cand_adj) = (take(cmax * top), take(cmax), take(cmax));
        let logits_len = scored.unwrap_or(n) * sampled.unwrap_or(v);
        let logits = take(logits_len);
        // Adjacent, for `loss_and_norm`'s one read.
        let nll = take(if scored.is_some() { 0 } else { n });
        let parts = take(np.div_ceil(4096));
        // the norm and the clipping's scale; f16's loss scaling's state after them (`ops.wgsl`)
        let norm = take(6);
        let half = crate::kernels::precision::current() == crate::kernels::precision::Precision::F16;
        let at = Layout { logits, nll, parts, norm, tokens: tokens_at, targets: n, starts: starts_at, positions: positions_at };
        let indices = positions_at + n;
        // The split GEMMs' partial products go last in A, sized once the programs are recorded.
        let scratch = a;

        // Forward: the embedding, the layers, the decoder and the cross-entropy.
        let mut fwd = Program::new(Some(scratch));
        let masked = |m: Option<usize>| [u(m.unwrap_or(0)), m.is_some() as u32];
        let [m0, m0_on] = masked(in_masks[0]);
        if e > 0 {
            fwd.flat(op(&gpu, "embed_gather")?, &[u(n), u(e), u(at.tokens), u(model.emb.start), u(x0), m0, m0_on], n * e);
        }
        for (l, (gc, lb)) in layers.iter().enumerate() {
            gc.forward(&gpu, &mut fwd, lb, steps, batch)?;
            // Dropout on the output, in place: the cells never read their outputs back.
            if let Some(m) = in_masks[l + 1] {
                fwd.flat(op(&gpu, "mul_a")?, &[u(n * gc.out), u(lb.y), u(m)], n * gc.out);
            }
        }
        let top_at = Top {
            n,
            top,
            v,
            y: layers.last().map(|(_, lb)| lb.y).unwrap_or(x0),
            dy: layers.last().map(|(_, lb)| lb.dy).unwrap_or(dx0),
            dec: (model.dec_w.start, model.dec_b.start),
            logits,
            nll,
            targets: at.targets,
            rows: scored.map(|s| (s, rows, drows)),
            cand: sampled.map(|c| (c, cand_w, cand_b, cand_adj)),
            indices,
        };
        let head = match top_at.forward(&gpu, &mut fwd)? {
            Some(h) => h,
            None => Head::Task { scored: scored.unwrap_or(0), indices, x: x0, input: x_width },
        };

        // Backward: the decoder, the layers from the top, the embedding.
        let mut bwd = Program::new(Some(scratch));
        bwd.clear(Buf::G, 0, np);
        if half {
            bwd.flat(op(&gpu, "loss_scale_a")?, &[u(logits_len), u(logits), u(norm)], logits_len);
        }
        top_at.backward(&gpu, &mut bwd)?;
        for (l, (gc, lb)) in layers.iter().enumerate().rev() {
            if let Some(m) = in_masks[l + 1] {
                bwd.flat(op(&gpu, "mul_a")?, &[u(n * gc.out), u(lb.dy), u(m)], n * gc.out);
            }
            gc.backward(&gpu, &mut bwd, lb, steps, batch)?;
            // `ds` now holds ∂L/∂st[0]: a learned initial state gets it when the window began there.
            if let Some(s0) = &model.layer_s0[l] {
                bwd.flat(op(&gpu, "rows_sum_if")?, &[u(batch), u(gc.state), u(lb.ds), u(s0.start), u(lb.fresh)], gc.state);
            }
        }
        if e > 0 {
            bwd.flat(op(&gpu, "embed_scatter")?, &[u(v), u(e), u(at.starts), u(at.positions), u(model.emb.start), u(dx0), m0, m0_on], v * e);
        }
        if half {
            bwd.flat(op(&gpu, "loss_unscale_g")?, &[u(np), u(norm)], np);
        }

        // Clipping as optim::clip (the values, then the norm and its scale), then the
        // optimizer's step, two programs so that a trainer can look at the norm between them.
        let mut clip = Program::default();
        let sumsq_slot = clip.dispatch(op(&gpu, "sumsq")?, &[u(np), u(parts), 0], crate::kernels::gpu::grid(np.div_ceil(4096)));
        let clip_slot = clip.dispatch(op(&gpu, "clip_scale")?, &[u(np.div_ceil(4096)), u(parts), u(norm), 0], [1, 1, 1]);
        if half {
            clip.dispatch(op(&gpu, "loss_scale_step")?, &[u(norm), LOSS_SCALE.1], [1, 1, 1]);
        }
        let mut upd = Program::default();
        let update_slot = upd.flat(op(&gpu, "update")?, &[u(np), u(norm), 0, 0, 0, 0, 0], np);
        let (carry, fresh) = state_programs(&gpu, model, &layers, steps, batch)?;
        let a = scratch + fwd.scratch_used.max(bwd.scratch_used);
        let opt_len = if adam { 2 * np } else { 0 };
        let arena = Arena::new(&gpu, [np as u64, np as u64, opt_len as u64, a as u64, (3 * n + symbols + 1 + scored.unwrap_or(0) + cmax) as u64])?;
        arena.write(&gpu, Buf::W, 0, w);
        let (vocab, n_params) = (v, np);
        let mut lm = GpuLm { gpu, arena, steps, batch, vocab, emb: e, n_params, layers, at, scratch, forward: fwd, backward: bwd, clip, update: upd, carry, fresh, dropout: dp, in_masks, rec_masks, host_masks: (Vec::new(), Vec::new()), head, symbols, sumsq_slot, clip_slot, update_slot, adam, t: 0, half };
        lm.set_loss_scale(LossScale { scale: LOSS_SCALE.0, steps: 0, skipped: 0 });
        // The cells' own starts (zeros, or a learned state) for the first window.
        lm.set_state(&model.initial_state(batch));
        Ok(lm)
    }

    /// Draw the next window's dropout masks from `rng` as the CPU engine draws them
    /// (`Model::draw_masks`) and upload them; nothing without dropout.
    pub fn set_masks(&mut self, model: &Model, rng: &mut Rng) {
        let dp = self.dropout;
        if dp.p == 0.0 && dp.recurrent == 0.0 {
            return;
        }
        let n = self.steps * self.batch;
        let (ins, recs) = &mut self.host_masks;
        if ins.is_empty() {
            *ins = std::iter::once(model.emb_size()).chain(model.cells.iter().map(|c| c.sizes().output)).map(|w| vec![0f32; n * w]).collect();
            *recs = model.cells.iter().map(|c| vec![0f32; self.batch * c.sizes().rec]).collect();
        }
        model.draw_masks(&dp, self.batch, ins, recs, rng);
        for (at, m) in self.in_masks.iter().zip(ins.iter()).chain(self.rec_masks.iter().zip(recs.iter())) {
            if let Some(at) = at {
                self.arena.write(&self.gpu, Buf::A, *at as u64, m);
            }
        }
    }

    /// Upload a window's tokens and targets (`[T, B]` time-major), and for training the
    /// positions of each symbol, in order, for the embedding's gradient.
    fn upload(&mut self, x: &[u32], y: &[u32], positions: bool) -> Result<()> {
        let n = self.steps * self.batch;
        if x.len() != n || y.len() != n {
            bail!("a GPU window holds {n} tokens ({} steps of {}), not {}", self.steps, self.batch, x.len());
        }
        if let Some(bad) = x.iter().chain(y).find(|&&t| t as usize >= self.vocab) {
            bail!("token id {bad} is out of the vocabulary ({} symbols)", self.vocab);
        }
        self.arena.write(&self.gpu, Buf::I, self.at.targets as u64, y);
        self.write_symbols(x, positions);
        Ok(())
    }

    /// Write the window's symbols (checked by the caller to be below `self.symbols`), and with
    /// `positions` the positions of each symbol, in order, for the gradients gathered by symbol.
    fn write_symbols(&self, x: &[u32], positions: bool) {
        let (g, a) = (&self.gpu, &self.arena);
        a.write(g, Buf::I, self.at.tokens as u64, x);
        if positions {
            let mut starts = vec![0u32; self.symbols + 1];
            x.iter().for_each(|&t| starts[t as usize + 1] += 1);
            for i in 0..self.symbols {
                starts[i + 1] += starts[i];
            }
            let mut next = starts.clone();
            let mut pos = vec![0u32; x.len()];
            for (i, &t) in x.iter().enumerate() {
                pos[next[t as usize] as usize] = i as u32;
                next[t as usize] += 1;
            }
            a.write(g, Buf::I, self.at.starts as u64, &starts);
            a.write(g, Buf::I, self.at.positions as u64, &pos);
        }
    }

    fn set_grad(&mut self, grad: bool) {
        let (xent_slot, cols) = match self.head {
            Head::Lm { xent_slot, cols } => (xent_slot, cols),
            Head::Sampled { xent_slot, cmax, .. } => (xent_slot, cmax),
            Head::Task { .. } => return,
        };
        let n = self.steps * self.batch;
        let xent = [u(n), u(cols), u(self.at.logits), u(self.at.targets), u(self.at.nll), (1.0f32 / n as f32).to_bits(), grad as u32];
        self.forward.set_params(&self.gpu, xent_slot, &xent);
    }

    /// The candidates of the next window of a sampled softmax (`SampledSoftmax::prepare`: the
    /// classes, targets first, and each one's bias correction), padded to the most there can be.
    pub fn set_candidates(&mut self, classes: &[u32], adj: &[f64]) -> Result<()> {
        let Head::Sampled { cmax, cand, adj: adj_at, .. } = self.head else { bail!("set_candidates needs a model made by GpuLm::sampled") };
        if classes.len() > cmax || adj.len() != classes.len() || classes.iter().any(|&c| c as usize >= self.vocab) {
            bail!("{} sampled candidates for at most {cmax} of {} classes", classes.len(), self.vocab);
        }
        let mut ids = classes.to_vec();
        ids.resize(cmax, u32::MAX);
        let mut a: Vec<f32> = adj.iter().map(|&x| x as f32).collect();
        a.resize(cmax, 0.0);
        self.arena.write(&self.gpu, Buf::I, cand as u64, &ids);
        self.arena.write(&self.gpu, Buf::A, adj_at as u64, &a);
        Ok(())
    }

    /// Score a window (the state carried on); the per-position NLL stays on the device until
    /// [`GpuLm::nll`] or [`GpuLm::loss_sum`] reads it.
    pub fn score_window(&mut self, x: &[u32], y: &[u32]) -> Result<()> {
        self.upload(x, y, false)?;
        self.set_grad(false);
        self.forward.run(&self.gpu, &self.arena);
        self.carry.run(&self.gpu, &self.arena);
        Ok(())
    }

    /// The gradient of a window's mean NLL, left in `G` (the state carried on).
    pub fn gradient_window(&mut self, x: &[u32], y: &[u32]) -> Result<()> {
        self.upload(x, y, true)?;
        self.set_grad(true);
        self.forward.run(&self.gpu, &self.arena);
        self.backward.run(&self.gpu, &self.arena);
        self.carry.run(&self.gpu, &self.arena);
        Ok(())
    }

    /// One training step on a window: [`GpuLm::gradient_norm`], then [`GpuLm::apply_update`].
    pub fn train_window(&mut self, x: &[u32], y: &[u32], lr: f64, clip: (Option<f64>, Option<f64>)) -> Result<()> {
        self.gradient_norm(x, y, clip)?;
        self.apply_update(lr);
        Ok(())
    }

    /// A window's gradient, clipped as `optim::clip` clips (the values, then the global norm),
    /// the state carried on; [`GpuLm::grad_norm`] then reads the norm before the rescaling.
    pub fn gradient_norm(&mut self, x: &[u32], y: &[u32], (clip_norm, clip_value): (Option<f64>, Option<f64>)) -> Result<()> {
        self.upload(x, y, true)?;
        self.set_grad(true);
        let np = self.n_params;
        let (parts, norm) = (self.at.parts, self.at.norm);
        self.clip.set_params(&self.gpu, self.sumsq_slot, &[u(np), u(parts), (clip_value.unwrap_or(0.0) as f32).to_bits()]);
        self.clip.set_params(&self.gpu, self.clip_slot, &[u(np.div_ceil(4096)), u(parts), u(norm), (clip_norm.unwrap_or(0.0) as f32).to_bits()]);
        self.forward.run(&self.gpu, &self.arena);
        self.backward.run(&self.gpu, &self.arena);
        self.clip.run(&self.gpu, &self.arena);
        self.carry.run(&self.gpu, &self.arena);
        Ok(())
    }

    /// The optimizer's step with the latest clipped gradient (nothing moves if its norm is not
    /// finite); counts the update as `Optimizer::step` does.
    pub fn apply_update(&mut self, lr: f64) {
        self.t += 1;
        let (b1, b2) = (0.9f64, 0.999f64);
        let (step, eps, sgd) = match self.adam {
            false => (lr as f32, 0.0, 1),
            true => {
                // As Optimizer::step: the bias corrections folded into the step and ε.
                let c1 = 1.0 - b1.powf(self.t as f64);
                let c2 = 1.0 - b2.powf(self.t as f64);
                ((lr * c2.sqrt() / c1) as f32, 1e-8f32 * c2.sqrt() as f32, 0)
            }
        };
        let prm = [u(self.n_params), u(self.at.norm), step.to_bits(), eps.to_bits(), (b1 as f32).to_bits(), (b2 as f32).to_bits(), sgd];
        self.update.set_params(&self.gpu, self.update_slot, &prm);
        self.update.run(&self.gpu, &self.arena);
    }

    /// A task batch through the model from the cells' own starts, its readout's outputs at
    /// the scored positions read back (`[S, C]`). `x` is `[T', B, D]` (real inputs; none for
    /// a cell reading `tokens`, `[T', B]`) with `T'` at most the model's steps: the steps after
    /// `T'` read zeros, which change no scored position (each is scored at or before its
    /// sequence's end, and nothing flows back in time from an unscored step).
    pub fn task_forward(&mut self, x: &[f32], tokens: &[u32], scored: &[usize]) -> Result<Vec<f32>> {
        let Head::Task { scored: s, indices, x: x_at, input } = self.head else { bail!("task_forward needs a task model (GpuLm::for_task)") };
        let (nt, nb) = (self.steps, self.batch);
        let steps = if input > 0 { x.len() / (nb * input) } else { tokens.len() / nb };
        if steps == 0 || steps > nt || (input > 0 && x.len() != steps * nb * input) || (input == 0 && tokens.len() != steps * nb) {
            bail!("a task batch of {} inputs does not fit the GPU model's {nt} steps of {nb} sequences", x.len().max(tokens.len()));
        }
        if scored.len() != s || scored.iter().any(|&p| p >= steps * nb) {
            bail!("a task batch scored at {} positions, where the GPU model was made for {s} within {} steps", scored.len(), steps);
        }
        if input > 0 {
            let mut padded = x.to_vec();
            padded.resize(nt * nb * input, 0.0);
            self.arena.write(&self.gpu, Buf::A, x_at as u64, &padded);
        } else {
            if let Some(bad) = tokens.iter().find(|&&t| t as usize >= self.symbols) {
                bail!("input symbol {bad} is beyond the model's {} symbols", self.symbols);
            }
            let mut padded = tokens.to_vec();
            padded.resize(nt * nb, 0);
            self.write_symbols(&padded, self.adam);
        }
        let idx: Vec<u32> = scored.iter().map(|&p| p as u32).collect();
        self.arena.write(&self.gpu, Buf::I, indices as u64, &idx);
        self.set_state(&State { layers: vec![Vec::new(); self.layers.len()], fresh: true });
        self.forward.run(&self.gpu, &self.arena);
        self.arena.read(&self.gpu, Buf::A, self.at.logits as u64, (s * self.vocab) as u64)
    }

    /// After [`GpuLm::task_forward`], from `d_out` (the gradient of the loss with respect to
    /// the readout's outputs, `[S, C]`): the parameters' gradient, each value clipped to
    /// `±clip_value` (where one is given), then the optimizer's step at `lr`, as
    /// `tasks::task_step` takes it.
    pub fn task_update(&mut self, d_out: &[f32], clip_value: Option<f64>, lr: f64) -> Result<()> {
        self.task_update_with(d_out, clip_value)?;
        self.apply_update(lr);
        Ok(())
    }

    /// The readout's gradient in, backward, and the gradient's norm (its values clipped to
    /// `[-clip, clip]` first where one is given).
    fn task_update_with(&mut self, d_out: &[f32], clip_value: Option<f64>) -> Result<()> {
        let Head::Task { scored: s, .. } = self.head else { bail!("a task step needs a task model (GpuLm::for_task)") };
        if d_out.len() != s * self.vocab {
            bail!("the readout's gradient has {} values, not {}", d_out.len(), s * self.vocab);
        }
        self.arena.write(&self.gpu, Buf::A, self.at.logits as u64, d_out);
        let np = self.n_params;
        let (parts, norm) = (self.at.parts, self.at.norm);
        self.clip.set_params(&self.gpu, self.sumsq_slot, &[u(np), u(parts), (clip_value.unwrap_or(0.0) as f32).to_bits()]);
        self.clip.set_params(&self.gpu, self.clip_slot, &[u(np.div_ceil(4096)), u(parts), u(norm), 0]);
        self.backward.run(&self.gpu, &self.arena);
        self.clip.run(&self.gpu, &self.arena);
        Ok(())
    }

    /// [`GpuLm::task_update`] without the clipping and the update: the gradient of the batch's
    /// mean loss left in `G` (and its norm where the update looks for one), for a caller that
    /// makes the update's gradient itself (a rank under MPI) and then gives it back with
    /// [`GpuLm::set_grads`] before [`GpuLm::apply_update`].
    pub fn task_gradient(&mut self, d_out: &[f32]) -> Result<()> {
        self.task_update_with(d_out, None)
    }

    /// Seconds of each part of one training step run and waited for alone: forward (with the
    /// loss), backward, clipping with the update, and the state carry.
    pub fn time_parts(&mut self, x: &[u32], y: &[u32], lr: f64, clip: (Option<f64>, Option<f64>)) -> Result<[f64; 4]> {
        self.train_window(x, y, lr, clip)?; // sets the parameters of every slot
        self.wait()?;
        let mut out = [0.0; 4];
        for (i, ps) in [vec![&mut self.forward], vec![&mut self.backward], vec![&mut self.clip, &mut self.update], vec![&mut self.carry]].into_iter().enumerate() {
            let t = std::time::Instant::now();
            for p in ps {
                p.run(&self.gpu, &self.arena);
            }
            self.gpu.wait()?;
            out[i] = t.elapsed().as_secs_f64();
        }
        Ok(out)
    }

    /// Whether the products are in f16 with the loss scaled (`--precision f16`).
    pub fn half(&self) -> bool {
        self.half
    }

    /// f16's loss scale, the steps since it last changed and those it skipped (waits for the
    /// device; the counts are kept as f32 there, exact to 2^24 steps).
    pub fn loss_scale(&self) -> Result<LossScale> {
        let s: Vec<f32> = self.arena.read(&self.gpu, Buf::A, self.at.norm as u64 + 2, 4)?;
        Ok(LossScale { scale: s[0], steps: s[1] as u32, skipped: s[3] as u64 })
    }

    /// Set f16's loss scale and its counts (a resumed run's).
    pub fn set_loss_scale(&mut self, s: LossScale) {
        self.arena.write(&self.gpu, Buf::A, self.at.norm as u64 + 2, &[s.scale, s.steps as f32, 0.0, s.skipped as f32]);
    }

    /// Wait for everything submitted.
    pub fn wait(&self) -> Result<()> {
        self.gpu.wait()
    }

    /// The latest window's NLL per position (natural log).
    pub fn nll(&self) -> Result<Vec<f32>> {
        self.arena.read(&self.gpu, Buf::A, self.at.nll as u64, (self.steps * self.batch) as u64)
    }

    /// The logits of the latest window's last position (`[V]`; the scores of
    /// [`GpuLm::score_window`] leave them as they are).
    pub fn last_logits(&self) -> Result<Vec<f32>> {
        let n = self.steps * self.batch;
        self.arena.read(&self.gpu, Buf::A, (self.at.logits + (n - 1) * self.vocab) as u64, self.vocab as u64)
    }

    /// The latest window's summed NLL, in f64 as the CPU sums it.
    pub fn loss_sum(&self) -> Result<f64> {
        Ok(self.nll()?.iter().map(|&x| x as f64).sum())
    }

    /// The latest window's summed NLL and its gradient's norm before clipping (the CPU's
    /// `clip` return value), in one read-back: the NLL, the norm's partial sums and the norm
    /// are adjacent in `A`. In f16, -1 for a step whose products overflowed at the loss scale
    /// (the scale halved, the update skipped); Adam's count still takes it (`apply_update`
    /// does not wait for the device to know), a small departure from PyTorch's GradScaler.
    pub fn loss_and_norm(&self) -> Result<(f64, f64)> {
        let (n, at) = (self.steps * self.batch, self.at);
        let v: Vec<f32> = self.arena.read(&self.gpu, Buf::A, at.nll as u64, (at.norm + 1 - at.nll) as u64)?;
        Ok((v[..n].iter().map(|&x| x as f64).sum(), v[at.norm - at.nll] as f64))
    }

    pub fn params(&self) -> Result<Vec<f32>> {
        self.arena.read(&self.gpu, Buf::W, 0, self.n_params as u64)
    }

    /// Replace the parameters (the optimizer's moments stay).
    pub fn set_params(&mut self, w: &[f32]) {
        self.arena.write(&self.gpu, Buf::W, 0, &w[..self.n_params]);
    }

    pub fn grads(&self) -> Result<Vec<f32>> {
        self.arena.read(&self.gpu, Buf::G, 0, self.n_params as u64)
    }

    /// Replace the gradient the next [`GpuLm::apply_update`] applies (the ranks' mean under
    /// mpirun, clipped on the host).
    pub fn set_grads(&mut self, g: &[f32]) {
        self.arena.write(&self.gpu, Buf::G, 0, &g[..self.n_params]);
    }

    /// Adam's moments `(m, v)` (empty for SGD).
    pub fn moments(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        if !self.adam {
            return Ok((Vec::new(), Vec::new()));
        }
        let np = self.n_params as u64;
        Ok((self.arena.read(&self.gpu, Buf::O, 0, np)?, self.arena.read(&self.gpu, Buf::O, np, np)?))
    }

    /// Start from an optimizer's saved moments and update count.
    pub fn set_moments(&mut self, m: &[f32], v: &[f32], t: u64) {
        if self.adam && m.len() == self.n_params && v.len() == self.n_params {
            self.arena.write(&self.gpu, Buf::O, 0, m);
            self.arena.write(&self.gpu, Buf::O, self.n_params as u64, v);
        }
        self.t = t;
    }

    /// The state the next window starts from, as the CPU keeps it (`[B, S]` per layer).
    pub fn state(&self) -> Result<State<f32>> {
        let layers = self.layers.iter().map(|(gc, lb)| self.arena.read(&self.gpu, Buf::A, lb.st as u64, (self.batch * gc.state) as u64)).collect::<Result<_>>()?;
        Ok(State { layers, fresh: false })
    }

    /// Start the next window from `s`; a fresh state is each cell's own start (zeros, or what
    /// a cell with a learned start makes of its parameters, which then get its gradient).
    pub fn set_state(&mut self, s: &State<f32>) {
        for ((gc, lb), st) in self.layers.iter().zip(&s.layers) {
            let ns = self.batch * gc.state;
            if s.fresh {
                self.arena.write(&self.gpu, Buf::A, lb.st as u64, &vec![0f32; ns]);
            } else {
                self.arena.write(&self.gpu, Buf::A, lb.st as u64, &st[..ns]);
            }
            self.arena.write(&self.gpu, Buf::A, lb.fresh as u64, &[if s.fresh { 1f32 } else { 0.0 }]);
        }
        if s.fresh {
            self.fresh.run(&self.gpu, &self.arena);
        }
    }

    /// Elements of each buffer (`W`, `G`, `O`, `A`, `I`).
    pub fn buffer_lens(&self) -> [u64; 5] {
        self.arena.lens
    }

    /// The embedding width.
    pub fn embedding_size(&self) -> usize {
        self.emb
    }

    /// Floating-point operations of the GEMMs of one training step (forward and backward).
    pub fn gemm_flops(&self) -> (f64, f64) {
        let f = |p: &Program| p.gemms.iter().map(|(g, _)| 2.0 * g.m as f64 * g.n as f64 * g.k as f64).sum::<f64>();
        (f(&self.forward), f(&self.backward))
    }

    /// Dispatches of a window: its forward and loss, and a training step (forward, backward,
    /// clipping and the update).
    pub fn dispatches(&self) -> (usize, usize) {
        let f = self.forward.dispatches();
        (f, f + self.backward.dispatches() + self.clip.dispatches() + self.update.dispatches())
    }

    /// Run a program built by [`Program::gemms_alone`] on this model's buffers.
    pub fn run_program(&self, p: &mut Program) {
        p.run(&self.gpu, &self.arena);
    }
}

/// [`super::score::evaluate`] on the GPU: the same windows in the same order (the last one
/// shorter, on a second copy of the model sized for it, the state handed over), each window's
/// NLL read back and summed in f64 as the CPU sums it.
#[allow(clippy::too_many_arguments)]
pub fn evaluate(
    gpu: std::sync::Arc<Gpu>,
    model: &Model,
    w: &[f32],
    stream: &[u32],
    batch: usize,
    bptt: usize,
    carry: bool,
    mut per_token: Option<&mut Vec<f64>>,
    progress: bool,
) -> Result<super::score::Score> {
    let batch = batch.max(1);
    let mut data = Vec::new();
    let len = super::score::batchify(stream, batch, &mut data);
    let bar = super::score::eval_bar(progress, len.saturating_sub(1).div_ceil(bptt), "evaluating on the GPU");
    let mut score = super::score::Score::default();
    // One model for the full windows, one for a shorter last window.
    let mut lms: Vec<GpuLm> = Vec::new();
    let fresh = model.initial_state::<f32>(batch);
    for (i, t) in super::score::windows(len, bptt) {
        let (x, y) = (&data[i * batch..(i + t) * batch], &data[(i + 1) * batch..(i + 1 + t) * batch]);
        if lms.last().is_none_or(|lm| lm.steps != t) {
            let mut lm = GpuLm::new(gpu.clone(), model, w, t, batch, false, None)?;
            match lms.last() {
                Some(prev) if carry => lm.set_state(&prev.state()?),
                _ => lm.set_state(&fresh),
            }
            lms.push(lm);
        }
        let lm = lms.last_mut().expect("made above");
        if !carry {
            lm.set_state(&fresh);
        }
        lm.score_window(x, y)?;
        let nll = lm.nll()?;
        score.nll += nll.iter().map(|&v| v as f64).sum::<f64>();
        score.tokens += y.len();
        if let Some(out) = per_token.as_deref_mut() {
            out.extend(nll.iter().map(|&v| -(v as f64)));
        }
        bar.inc(1);
    }
    bar.finish();
    Ok(score)
}
