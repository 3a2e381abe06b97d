//! Composed-affine inference for the ISAN (Foerster et al., sections 4.3 and 6.2.2).
//!
//! Every ISAN step `h → W_x h + b_x` is affine, so a whole string `s = c1..cn` is one affine map
//! `h → A_s h + b_s` with `A_s = W_cn ⋯ W_c1` and `b_s` accumulated. A table of the composed maps
//! of frequent strings (here: the most frequent words with their trailing space) lets the state
//! jump over a word in one `H²` matrix-vector product instead of `n` of them. The states at the
//! jump boundaries are those of character stepping (up to rounding); the states inside a word,
//! and so the predictions of its characters, are skipped.
//!
//! The same holds for the linear RNN (`h → W h + b_x`, one `W` for every symbol), whose readout
//! nonlinearity acts only on the output, never on the state.

use crate::cells::Cell;
use crate::data::Tokenizer;
use crate::kernels::gemm::{gemm, linear};
use crate::model::lm::Lm;
use crate::model::Model;
use crate::kernels::num::Act;
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Table entries longer than this many tokens are not worth their `H²` floats.
const MAX_ENTRY_LEN: usize = 32;

/// The per-symbol affine maps of a single-layer ISAN or linear RNN, in f32 as the model runs.
#[derive(Clone, Debug)]
pub struct AffineMaps {
    pub symbols: usize,
    pub hidden: usize,
    /// `[K, H, H]` row-major `[out, in]`, or one `[H, H]` shared by every symbol (linear RNN)
    w: Vec<f32>,
    shared: bool,
    /// `[K, H]`, zeros for isan-nobias
    b: Vec<f32>,
    /// the learned initial state
    pub h0: Vec<f32>,
    /// what the cell outputs from its state (identity, or tanh for linear-tanh)
    pub readout: Act,
}

impl AffineMaps {
    pub fn from_lm(lm: &Lm) -> Result<AffineMaps> {
        AffineMaps::from_model(&lm.model, &lm.w)
    }

    /// The maps of `model`, or an error if its recurrence is not a single input-switched affine
    /// layer (only then is the state update of a string one affine map independent of the state).
    pub fn from_model(model: &Model, w: &[f32]) -> Result<AffineMaps> {
        let get = |name: &str| -> Result<Vec<f32>> {
            let s = model.slots.iter().find(|s| s.name == name).with_context(|| format!("the model has no tensor {name}"))?;
            Ok(w[s.range()].to_vec())
        };
        let (k, h) = match model.cells.as_slice() {
            [Cell::Isan(c)] => (c.symbols, c.hidden),
            [Cell::Linear(c)] => (c.symbols, c.hidden),
            _ => bail!(
                "composed affine maps need a single-layer isan, isan-nobias or linear model, whose state update is \
                 affine and independent of the state; this model is {} with {} layer(s)",
                if model.config.cell_name.is_empty() { model.config.layers[0].cell.as_str() } else { model.config.cell_name.as_str() },
                model.cells.len()
            ),
        };
        let maps = match &model.cells[0] {
            Cell::Isan(c) => AffineMaps {
                symbols: k,
                hidden: h,
                w: get("rnn.0.W_x")?,
                shared: false,
                b: if c.biases { get("rnn.0.b_x")? } else { vec![0.0; k * h] },
                h0: get("rnn.0.h0")?,
                readout: Act::Identity,
            },
            Cell::Linear(c) => AffineMaps {
                symbols: k,
                hidden: h,
                w: get("rnn.0.W")?,
                shared: true,
                b: get("rnn.0.b_x")?,
                h0: get("rnn.0.h0")?,
                readout: c.readout,
            },
            _ => unreachable!(),
        };
        Ok(maps)
    }

    pub fn w(&self, k: u32) -> &[f32] {
        let hh = self.hidden * self.hidden;
        let k = if self.shared { 0 } else { k as usize };
        &self.w[k * hh..(k + 1) * hh]
    }

    pub fn b(&self, k: u32) -> &[f32] {
        &self.b[k as usize * self.hidden..(k as usize + 1) * self.hidden]
    }

    /// `out = W_k h + b_k`: one character step.
    pub fn step(&self, k: u32, h: &[f32], out: &mut [f32]) {
        apply(self.hidden, self.w(k), self.b(k), h, out);
    }

    /// `(A, b) ← (W_k A, W_k b + b_k)`: append symbol `k` to a composed map (`tmp` is `H²` scratch).
    pub fn append(&self, k: u32, a: &mut [f32], b: &mut [f32], tmp: &mut [f32]) {
        let h = self.hidden;
        gemm(h, h, h, self.w(k), h, false, a, h, false, tmp, h, false);
        a.copy_from_slice(tmp);
        let prev = b.to_vec();
        self.step(k, &prev, b);
    }

    /// The composed map `(A_s, b_s)` of `tokens` (`A` row-major `[out, in]`).
    pub fn compose(&self, tokens: &[u32]) -> (Vec<f32>, Vec<f32>) {
        let h = self.hidden;
        let mut a = vec![0.0; h * h];
        for i in 0..h {
            a[i * h + i] = 1.0;
        }
        let mut b = vec![0.0; h];
        let mut tmp = vec![0.0; h * h];
        for &k in tokens {
            self.append(k, &mut a, &mut b, &mut tmp);
        }
        (a, b)
    }
}

/// `out = A h + b`, the same kernel for a character step and a table jump, so that their timings
/// compare the number and size of the products rather than two implementations. A row-by-row dot
/// product: at one row the GEMM call's setup costs more than the arithmetic at small `H`.
pub fn apply(hidden: usize, a: &[f32], b: &[f32], h: &[f32], out: &mut [f32]) {
    for ((row, o), &c) in a.chunks_exact(hidden).zip(out.iter_mut()).zip(b) {
        *o = dot(row, h) + c;
    }
}

/// Eight independent partial sums, so that the compiler can vectorise the loop.
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len() / 8 * 8;
    let mut acc = [0f32; 8];
    for (p, q) in x[..n].chunks_exact(8).zip(y[..n].chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += p[i] * q[i];
        }
    }
    let tail: f32 = x[n..].iter().zip(&y[n..]).map(|(p, q)| p * q).sum();
    acc.iter().sum::<f32>() + tail
}

/// Whether token `id` is whitespace (a word separator at char or byte level).
fn is_space(tok: &Tokenizer, id: u32) -> bool {
    tok.tokens().get(id as usize).is_some_and(|t| !t.is_empty() && t.trim().is_empty())
}

/// The `n` most frequent words of `text` that are followed by a space, each with that space:
/// maximal runs of non-whitespace tokens, then the `" "` token. Ties go to the lexicographically
/// smaller token sequence, so the table does not depend on hashing.
pub fn frequent_words(tok: &Tokenizer, text: &[u32], n: usize) -> Result<Vec<Vec<u32>>> {
    let Some(space) = tok.id(" ").filter(|_| tok.level != crate::data::Level::Word) else {
        bail!("the table holds words followed by a space token; this {}-level vocabulary has none", tok.level);
    };
    let mut counts: HashMap<&[u32], usize> = HashMap::new();
    let mut start = 0;
    for (i, &x) in text.iter().enumerate() {
        if is_space(tok, x) {
            if x == space && i > start && i - start < MAX_ENTRY_LEN {
                *counts.entry(&text[start..=i]).or_default() += 1;
            }
            start = i + 1;
        }
    }
    let mut words: Vec<(&[u32], usize)> = counts.into_iter().collect();
    words.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    Ok(words.into_iter().take(n).map(|(w, _)| w.to_vec()).collect())
}

const NONE: u32 = u32::MAX;

/// A lookup table of composed maps, matched greedily (longest entry first) through a trie.
pub struct IsanTable {
    pub maps: AffineMaps,
    /// the entries' token strings
    pub strings: Vec<Vec<u32>>,
    /// entry `e` occupies `[A (H²) | b (H)]` at `e·(H²+H)`
    composed: Vec<f32>,
    /// `next[node·K + k]`: the child of `node` along symbol `k` (the root is node 0)
    next: Vec<u32>,
    /// the entry ending at each node
    entry: Vec<u32>,
}

/// How the input was consumed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Consumed {
    /// table jumps, and the tokens they covered
    pub jumps: usize,
    pub jumped_tokens: usize,
    /// single character steps (no entry matched)
    pub steps: usize,
}

impl IsanTable {
    /// Compose the maps of `strings`. Entries sharing a prefix share its composition (a DFS over
    /// the trie), so building costs one `H³` product per trie node rather than per character.
    pub fn new(maps: AffineMaps, strings: Vec<Vec<u32>>) -> Result<IsanTable> {
        let (k, h) = (maps.symbols, maps.hidden);
        let mut next = vec![NONE; k];
        let mut entry = vec![NONE];
        for (e, s) in strings.iter().enumerate() {
            if s.is_empty() {
                bail!("empty table entry");
            }
            let mut node = 0;
            for &x in s {
                if x as usize >= k {
                    bail!("table entry symbol {x} out of range (K = {k})");
                }
                if next[node * k + x as usize] == NONE {
                    next[node * k + x as usize] = entry.len() as u32;
                    entry.push(NONE);
                    next.extend(std::iter::repeat_n(NONE, k));
                }
                node = next[node * k + x as usize] as usize;
            }
            entry[node] = e as u32;
        }
        let per = h * h + h;
        let mut composed = vec![0.0f32; strings.len() * per];
        // DFS with one (A, b) per depth: the stack holds (node, depth).
        let depth_max = strings.iter().map(Vec::len).max().unwrap_or(0);
        let mut a_stack = vec![0.0f32; (depth_max + 1) * h * h];
        let mut b_stack = vec![0.0f32; (depth_max + 1) * h];
        for i in 0..h {
            a_stack[i * h + i] = 1.0;
        }
        let mut tmp = vec![0.0f32; h * h];
        let mut todo: Vec<(usize, u32, usize)> = (0..k).rev().filter(|&x| next[x] != NONE).map(|x| (0, x as u32, 1)).collect();
        while let Some((parent, x, d)) = todo.pop() {
            let node = next[parent * k + x as usize] as usize;
            let (lo, hi) = a_stack.split_at_mut(d * h * h);
            let a = &mut hi[..h * h];
            a.copy_from_slice(&lo[(d - 1) * h * h..]);
            let (lo, hi) = b_stack.split_at_mut(d * h);
            let b = &mut hi[..h];
            b.copy_from_slice(&lo[(d - 1) * h..]);
            maps.append(x, a, b, &mut tmp);
            if entry[node] != NONE {
                let dst = &mut composed[entry[node] as usize * per..][..per];
                dst[..h * h].copy_from_slice(a);
                dst[h * h..].copy_from_slice(b);
            }
            todo.extend((0..k).rev().filter(|&y| next[node * k + y] != NONE).map(|y| (node, y as u32, d + 1)));
        }
        Ok(IsanTable { maps, strings, composed, next, entry })
    }

    /// The table of the `n` most frequent words (with their trailing space) of `text`.
    pub fn from_text(lm: &Lm, text: &[u32], n: usize) -> Result<IsanTable> {
        let maps = AffineMaps::from_lm(lm)?;
        let words = if n == 0 { Vec::new() } else { frequent_words(&lm.tok, text, n)? };
        IsanTable::new(maps, words)
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }

    /// Bytes per entry: `(H² + H)` f32 values.
    pub fn entry_bytes(&self) -> usize {
        entry_bytes(self.maps.hidden)
    }

    /// The longest entry that `tokens` starts with: `(entry, length)`.
    pub fn longest_match(&self, tokens: &[u32]) -> Option<(usize, usize)> {
        let k = self.maps.symbols;
        let (mut node, mut best) = (0usize, None);
        for (i, &x) in tokens.iter().enumerate() {
            match self.next.get(node * k + x as usize) {
                Some(&c) if c != NONE && (x as usize) < k => node = c as usize,
                _ => break,
            }
            if self.entry[node] != NONE {
                best = Some((self.entry[node] as usize, i + 1));
            }
        }
        best
    }

    /// One greedy move at position `i`: the longest matching entry in one jump, otherwise one
    /// character step. Writes the new state to `out` and returns the tokens consumed and whether
    /// it was a jump.
    pub fn advance(&self, tokens: &[u32], i: usize, h: &[f32], out: &mut [f32]) -> (usize, bool) {
        let hid = self.maps.hidden;
        match self.longest_match(&tokens[i..]) {
            Some((e, len)) => {
                let m = &self.composed[e * (hid * hid + hid)..(e + 1) * (hid * hid + hid)];
                apply(hid, &m[..hid * hid], &m[hid * hid..], h, out);
                (len, true)
            }
            None => {
                self.maps.step(tokens[i], h, out);
                (1, false)
            }
        }
    }

    /// Advance `h` over `tokens` greedily (see [`IsanTable::advance`]). `at(i, h)` sees the state
    /// after the first `i` tokens at every position reached (after each jump and each step).
    pub fn consume(&self, tokens: &[u32], h: &mut Vec<f32>, mut at: impl FnMut(usize, &[f32])) -> Consumed {
        let mut out = vec![0.0f32; self.maps.hidden];
        let mut c = Consumed::default();
        let mut i = 0;
        while i < tokens.len() {
            let (len, jump) = self.advance(tokens, i, h, &mut out);
            if jump {
                c.jumps += 1;
                c.jumped_tokens += len;
            } else {
                c.steps += 1;
            }
            i += len;
            std::mem::swap(h, &mut out);
            at(i, h);
        }
        c
    }
}

/// Bytes of one table entry at hidden size `h`: `A_s` and `b_s` in f32.
pub fn entry_bytes(h: usize) -> usize {
    (h * h + h) * std::mem::size_of::<f32>()
}

/// A table with where its words came from and how long composing it took.
pub struct Built {
    pub table: IsanTable,
    pub source: String,
    pub seconds: f64,
}

/// The table of the `n` most frequent words of the training split recorded in the checkpoint
/// `dir` (so that the table does not depend on the text it reads), or of `fallback` where the
/// checkpoint records no corpus. Refuses a model that is not one affine layer before loading
/// anything.
pub fn build_for(dir: &Path, lm: &Lm, fallback: &[u32], n: usize) -> Result<Built> {
    let maps = AffineMaps::from_lm(lm)?;
    let saved = if n > 0 { crate::model::run::RunRecord::read(dir)? } else { None };
    let (train, source) = if let Some(saved) = saved {
        (saved.load_corpus(dir, &lm.tok)?.train, "the training split".to_string())
    } else {
        (fallback.to_vec(), "the text given (the checkpoint records no corpus)".to_string())
    };
    let t0 = Instant::now();
    let words = if n == 0 { Vec::new() } else { frequent_words(&lm.tok, &train, n)? };
    let table = IsanTable::new(maps, words)?;
    Ok(Built { table, source, seconds: t0.elapsed().as_secs_f64() })
}

/// `max_i |a_i − b_i| / max_i |b_i|`.
pub fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    let scale = b.iter().fold(0f64, |m, &x| m.max((x as f64).abs())).max(1e-30);
    a.iter().zip(b).fold(0f64, |m, (&x, &y)| m.max((x as f64 - y as f64).abs())) / scale
}

/// Timings of one input consumed both ways.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    pub consumed: Consumed,
    /// seconds through the table, and by character stepping with the same kernel
    pub t_table: f64,
    pub t_step: f64,
    /// with `check`: the largest relative difference of the two methods' states where the table
    /// reaches a position
    pub max_rel: f64,
}

impl Consumed {
    pub fn describe(&self, tokens: usize) -> String {
        format!(
            "input: {tokens} tokens; through the table: {} jumps covering {} tokens ({:.1}%) and {} single steps, {} state \
             updates instead of {tokens}",
            self.jumps,
            self.jumped_tokens,
            100.0 * self.jumped_tokens as f64 / tokens.max(1) as f64,
            self.steps,
            self.jumps + self.steps
        )
    }
}

/// Consume `stream` through the table and by stepping, each timed alone; with `check`, a third
/// pass follows both in lockstep and compares the states at every position the table reaches.
pub fn measure(table: &IsanTable, stream: &[u32], check: bool) -> Measured {
    let maps = &table.maps;
    let t0 = Instant::now();
    let mut s = maps.h0.clone();
    let consumed = table.consume(stream, &mut s, |_, _| {});
    let t_table = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let (mut hs, mut tmp) = (maps.h0.clone(), vec![0.0f32; maps.hidden]);
    for &x in stream {
        maps.step(x, &hs, &mut tmp);
        std::mem::swap(&mut hs, &mut tmp);
    }
    let t_step = t0.elapsed().as_secs_f64();
    let mut max_rel = 0f64;
    if check {
        let (mut s, mut done) = (maps.h0.clone(), 0);
        hs.copy_from_slice(&maps.h0);
        table.consume(stream, &mut s, |i, st| {
            for &x in &stream[done..i] {
                maps.step(x, &hs, &mut tmp);
                std::mem::swap(&mut hs, &mut tmp);
            }
            done = i;
            max_rel = max_rel.max(rel_diff(st, &hs));
        });
    }
    Measured { consumed, t_table, t_step, max_rel }
}

/// `rnnlens eval --isan-table N`: consume `stream` through the table and by character stepping
/// in the same run, and report the times, the jumps, the agreement of the states where both
/// methods have one, and the NLL of the tokens that follow those positions only (a jump skips the
/// predictions inside a word, so the text's perplexity is not available this way).
pub fn eval_report(lm: &Lm, built: &Built, stream: &[u32]) -> Result<String> {
    let mut r = String::new();
    let table = &built.table;
    let maps = &table.maps;
    let (h, v) = (maps.hidden, lm.model.vocab_size());
    let mb = |b: usize| b as f64 / 1e6;
    writeln!(
        r,
        "isan table: {} entries (the most frequent words followed by a space, counted over {}), {} bytes each \
         (H²+H = {} f32), {:.1} MB in all; composed in {:.2} s",
        table.len(),
        built.source,
        table.entry_bytes(),
        h * h + h,
        mb(table.len() * table.entry_bytes()),
        built.seconds
    )?;

    let Measured { consumed: c, t_table, t_step, max_rel: _ } = measure(table, stream, false);
    let reached = c.jumps + c.steps;
    writeln!(r, "{}", c.describe(stream.len()))?;
    writeln!(
        r,
        "time to consume the input: table {t_table:.3} s, character stepping {t_step:.3} s (the same matrix-vector \
         kernel): speed-up {:.2}×",
        t_step / t_table
    )?;

    // The model's own forward (batch 1, the path plain `eval` takes) gives the reference states;
    // the table is followed alongside it, window by window, so nothing of size T·H is kept.
    let t0 = Instant::now();
    let model = &lm.model;
    let (dw, db) = model.head();
    let (dw, db) = (&lm.w[dw], &lm.w[db]);
    let mut st = model.initial_state::<f32>(1);
    let mut ws = crate::model::ModelWs::default();
    let (mut s, mut out, mut y_tab, mut logits) = (maps.h0.clone(), vec![0f32; h], vec![0f32; h], vec![0f32; v]);
    let (mut i, mut max_rel, mut nll, mut scored) = (0, 0f64, 0f64, 0usize);
    const WIN: usize = 256;
    for (wi, chunk) in stream.chunks(WIN).enumerate() {
        let (w0, w1) = (wi * WIN, wi * WIN + chunk.len());
        model.forward_layers(&lm.w, None, chunk, chunk.len(), 1, &mut st, &mut ws, None);
        // Every move that ends inside this window (a jump ending later is taken in a later one).
        while i < stream.len() && i + move_len(table, stream, i) <= w1 {
            let (len, _) = table.advance(stream, i, &s, &mut out);
            std::mem::swap(&mut s, &mut out);
            i += len;
            y_tab.iter_mut().zip(&s).for_each(|(o, &x)| *o = maps.readout.f(x));
            let t = i - 1 - w0;
            max_rel = max_rel.max(rel_diff(&y_tab, &ws.ys[0][t * h..(t + 1) * h]));
            if i < stream.len() {
                // The next token's NLL from the table's state (the decoder reads the cell output).
                linear(1, v, h, &y_tab, dw, &mut logits, false);
                logits.iter_mut().zip(db).for_each(|(l, &b)| *l += b);
                let mx = logits.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(l as f64));
                let z: f64 = logits.iter().map(|&l| (l as f64 - mx).exp()).sum();
                nll += z.ln() - (logits[stream[i] as usize] as f64 - mx);
                scored += 1;
            }
        }
    }
    let t_model = t0.elapsed().as_secs_f64();
    writeln!(
        r,
        "states at the {reached} positions both reach: max relative difference {max_rel:.2e} against the model's own \
         forward (batch 1; {t_model:.3} s for that forward with the comparison and scoring)"
    )?;
    writeln!(
        r,
        "scored {scored} of the {} predictable tokens: only the token right after each reached position (after a jump, the \
         first character of the next word); mean NLL {:.4} nats on that subset. This is NOT the text's perplexity: the in-word \
         predictions a jump skips are never computed.",
        stream.len().saturating_sub(1),
        nll / scored.max(1) as f64
    )?;
    Ok(r)
}

/// Tokens the next greedy move from `i` consumes.
fn move_len(table: &IsanTable, tokens: &[u32], i: usize) -> usize {
    table.longest_match(&tokens[i..]).map_or(1, |m| m.1)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{layer_configs, Init, ModelConfig, TokenizerConfig};
    use crate::cells::registry::CellOptions;
    use crate::kernels::rng::Rng;

    /// A small random single-layer model of `cell` over `k` symbols (weights small enough that
    /// the recurrence contracts, as a trained one roughly does).
    pub(crate) fn tiny_lm(cell: &str, k: usize, h: usize, seed: u64) -> (Model, Vec<f32>) {
        let symbols = crate::cells::registry::reads_tokens(cell);
        let layers = layer_configs(cell, if symbols { k } else { 3 }, &[h], None, CellOptions::default()).unwrap();
        let config = ModelConfig {
            format: "rnnlens".into(),
            format_version: 1,
            vocab_size: k,
            tokenizer: TokenizerConfig { level: "char".into(), normalize: "none".into(), split: None },
            embedding_size: if symbols { None } else { Some(3) },
            layers,
            cell_name: cell.into(),
            input_size: None,
        };
        let model = Model::new(config).unwrap();
        let w = model.init_params(Init::Uniform { scale: 0.3 }, &mut Rng::new(seed));
        (model, w)
    }

    const TEXT: &str = "the cat sat on the mat, and the dog ate the hat of the cat.\nthen the end ";

    fn tiny_char_lm(cell: &str, h: usize) -> Lm {
        let tok = Tokenizer::fit_char(&[TEXT], false).unwrap();
        let (model, w) = tiny_lm(cell, tok.vocab_size(), h, 5);
        Lm { model, w, tok }
    }

    /// The model's own forward (batch 1): the cell output after every token.
    fn model_outputs(lm: &Lm, tokens: &[u32]) -> Vec<f32> {
        let mut st = lm.model.initial_state::<f32>(1);
        let mut ws = crate::model::ModelWs::default();
        lm.model.forward_layers(&lm.w, None, tokens, tokens.len(), 1, &mut st, &mut ws, None);
        ws.ys[0].clone()
    }

    #[test]
    fn table_states_equal_character_stepping_at_every_boundary() {
        for cell in ["isan", "isan-nobias", "linear-tanh"] {
            let lm = tiny_char_lm(cell, 9);
            let h = 9;
            // Overlapping entries (the longest wins); words in the table and out of it; a table
            // word not followed by its space ("cat.").
            let strings: Vec<Vec<u32>> = ["the ", "cat ", "the cat "].iter().map(|w| lm.tok.encode(w).unwrap()).collect();
            let table = IsanTable::new(AffineMaps::from_lm(&lm).unwrap(), strings).unwrap();
            let text = "the dog and the cat sat on the cat.\nthe end the ";
            let tokens = lm.tok.encode(text).unwrap();
            let want = model_outputs(&lm, &tokens);
            let mut s = table.maps.h0.clone();
            let mut reached = Vec::new();
            let c = table.consume(&tokens, &mut s, |i, st| {
                let y: Vec<f32> = st.iter().map(|&x| table.maps.readout.f(x)).collect();
                let d = rel_diff(&y, &want[(i - 1) * h..i * h]);
                assert!(d < 1e-4, "{cell}: position {i}: relative difference {d}");
                reached.push(i);
            });
            // "the ", "the cat ", "the ", "the ", "the "
            assert_eq!((c.jumps, c.jumped_tokens), (5, 24), "{cell}");
            assert_eq!(c.steps, tokens.len() - 24);
            assert_eq!(*reached.last().unwrap(), tokens.len());
            // "the " is jumped over: no position inside it is reached.
            assert!(!reached.contains(&1) && reached.contains(&4));
        }
    }

    #[test]
    fn an_empty_table_is_plain_stepping() {
        let lm = tiny_char_lm("isan", 6);
        let tokens = lm.tok.encode(TEXT).unwrap();
        let table = IsanTable::from_text(&lm, &tokens, 0).unwrap();
        assert!(table.is_empty());
        let mut s = table.maps.h0.clone();
        let mut step = table.maps.h0.clone();
        let mut tmp = vec![0.0; 6];
        let c = table.consume(&tokens, &mut s, |i, st| {
            table.maps.step(tokens[i - 1], &step, &mut tmp);
            std::mem::swap(&mut step, &mut tmp);
            assert_eq!(st, &step[..]);
        });
        assert_eq!(c, Consumed { jumps: 0, jumped_tokens: 0, steps: tokens.len() });
    }

    #[test]
    fn composed_map_of_a_string_is_the_product_of_its_steps() {
        let (model, w) = tiny_lm("isan", 4, 5, 2);
        let m = AffineMaps::from_model(&model, &w).unwrap();
        let s = [3u32, 0, 2, 2, 1];
        let (a, b) = m.compose(&s);
        let mut stepped = m.h0.clone();
        let mut tmp = vec![0.0; 5];
        for &x in &s {
            m.step(x, &stepped, &mut tmp);
            std::mem::swap(&mut stepped, &mut tmp);
        }
        apply(5, &a, &b, &m.h0, &mut tmp);
        assert!(rel_diff(&tmp, &stepped) < 1e-5);
    }

    #[test]
    fn models_that_are_not_one_affine_layer_are_refused() {
        for cell in ["lstm", "ran-tanh", "gru"] {
            let (model, w) = tiny_lm(cell, 5, 4, 1);
            let e = AffineMaps::from_model(&model, &w).unwrap_err().to_string();
            assert!(e.contains("single-layer isan") && e.contains(cell), "{cell}: {e}");
        }
    }

    #[test]
    fn frequent_words_carry_their_space() {
        let lm = tiny_char_lm("isan", 4);
        let words = frequent_words(&lm.tok, &lm.tok.encode(TEXT).unwrap(), 3).unwrap();
        assert_eq!(words.len(), 3);
        assert_eq!(lm.tok.decode(&words[0]), "the ");
        assert!(words.iter().all(|w| lm.tok.decode(w).ends_with(' ')));
    }

    #[test]
    fn word_level_vocabularies_have_no_words_with_a_space() {
        let tok = Tokenizer::fit_word("the cat the dog\n", 10, false).unwrap();
        let e = frequent_words(&tok, &[0, 1], 5).unwrap_err().to_string();
        assert!(e.contains("space"), "{e}");
    }
}
