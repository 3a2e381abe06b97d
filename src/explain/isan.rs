//! The ISAN's analyses (Foerster et al., sections 4–5), computed in f64 from the f32 weights.
//!
//! Notation, 0-based: the text is `x_0 … x_{n-1}`; `h_i = W_{x_i} h_{i-1} + b_{x_i}` with
//! `h_{-1} = h0`; the logits `l_i = W_ro h_i + b_ro` predict `x_{i+1}`. Because the network is
//! affine, the logits split exactly into one contribution per past symbol:
//!
//! ```text
//! l_i = b_ro + κ_{h0}^i + Σ_{j=0..i} κ_j^i,   κ_j^i = W_ro W_{x_i} ··· W_{x_{j+1}} b_{x_j},
//!                                            κ_{h0}^i = W_ro W_{x_i} ··· W_{x_0} h0.
//! ```
//! The *lag* of `κ_j^i` is `i − j`. Everything here follows from this identity:
//!
//! - the detailed window (the last [`Options::window`] tokens): every `κ_j^i` inside it, and the
//!   whole history before it as one exact term; the stacked figure of the final position with
//!   its softmax panel;
//! - words (maximal runs of non-separator symbols; a separator is a whitespace symbol at char or
//!   byte level, every token is a word at word level): `κ_word` summed over a word's symbols, the
//!   separators' contributions kept apart, and the counterfactual of removing one word's κ from
//!   the final logits;
//! - over the text (its first [`Options::max_stat_tokens`] tokens): `E‖κ_j^i‖` against the lag,
//!   the cross-entropy when only the `k` most recent contributions (plus `b_ro`) are kept, and
//!   the cross-entropy by position in the word with all κ, with only the separators' κ and
//!   without them;
//! - `softmax(b_ro)` against the unigram distribution of the text, `softmax(W_ro b_x + b_ro)`
//!   against its bigram distribution `P(·|x)`;
//! - the readout basis: `b_x = b_∥ + b_⊥`, `b_∥` in the row space of `W_ro`; the correlation of
//!   each part's norm with the unigram log-probability;
//! - the affine-to-linear expansion `W' = [[W_x, b_x], [0, 1]]` (eq. 7) of any symbol.

use crate::cells::Cell;
use crate::data::checkpoint::write_atomic;
use crate::data::Level;
use crate::kernels::gemm::linear;
use crate::model::lm::Lm;
use crate::render::esc;
use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;

/// The window is shortened so that its `κ_s^t` hold at most this many values.
const WINDOW_VALUES: usize = 4_000_000;
/// The corpus statistics use at most this many values per `[tokens, V]` buffer.
const STAT_VALUES: usize = 8_000_000;
/// The bigram comparison covers at most this many (the most frequent) preceding symbols.
const MAX_BIGRAM_ROWS: usize = 1000;
/// The cosine-distance matrices are left out above this many symbols.
const MAX_COSINE_SYMBOLS: usize = 512;
/// A scatter plot shows at most this many points (those with the largest x).
const MAX_SCATTER: usize = 1500;
/// The κ_word embedding covers at most this many (the most frequent) words.
const MAX_EMBED_WORDS: usize = 50;

/// Sizes of the analyses (the detailed window and the statistics are further bounded for large
/// vocabularies: the window to about `sqrt(8·10⁶ / V)` tokens, the statistics to `8·10⁶ / V`).
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// the detailed window: the last this many tokens of the text
    pub window: usize,
    /// the largest lag of the decay curve and of the history-length cross-entropy
    pub max_lag: usize,
    /// corpus statistics use at most this many tokens from the start of the text
    pub max_stat_tokens: usize,
    /// predictions listed before and after each counterfactual
    pub top: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            window: 48,
            max_lag: 40,
            max_stat_tokens: 4000,
            top: 3,
        }
    }
}

/// The ISAN's parameters in f64.
pub struct IsanWeights {
    pub symbols: usize,
    pub hidden: usize,
    pub vocab: usize,
    /// `[K, H, H]`, `W_x[k]` is `[out, in]`
    pub w_x: Vec<f64>,
    /// `[K, H]`, zeros for isan-nobias
    pub b_x: Vec<f64>,
    pub biases: bool,
    pub h0: Vec<f64>,
    /// `[V, H]`
    pub w_ro: Vec<f64>,
    pub b_ro: Vec<f64>,
}

impl IsanWeights {
    /// The weights of `lm`, or an error if it is not a one-layer ISAN reading its symbols.
    pub fn from_lm(lm: &Lm) -> Result<IsanWeights> {
        let m = &lm.model;
        let isan = match m.cells.as_slice() {
            [Cell::Isan(c)] => c.clone(),
            _ => bail!(
                "the ISAN analyses need a one-layer isan model; this one is {}",
                m.config.cell_name
            ),
        };
        let get = |name: &str| -> Option<Vec<f64>> {
            m.slots
                .iter()
                .find(|s| s.name == name)
                .map(|s| lm.w[s.range()].iter().map(|&x| x as f64).collect())
        };
        let need =
            |name: &str| get(name).with_context(|| format!("the model has no tensor {name}"));
        let (k, h, v) = (isan.symbols, isan.hidden, m.vocab_size());
        let w_x = need("rnn.0.W_x")?;
        let b_x = if isan.biases {
            need("rnn.0.b_x")?
        } else {
            vec![0.0; k * h]
        };
        let h0 = need("rnn.0.h0")?;
        let w_ro = need("decoder.weight")?;
        let b_ro = need("decoder.bias")?;
        if w_x.len() != k * h * h
            || b_x.len() != k * h
            || h0.len() != h
            || w_ro.len() != v * h
            || b_ro.len() != v
        {
            bail!("the ISAN's tensors do not have the expected sizes");
        }
        Ok(IsanWeights {
            symbols: k,
            hidden: h,
            vocab: v,
            w_x,
            b_x,
            biases: isan.biases,
            h0,
            w_ro,
            b_ro,
        })
    }

    fn w(&self, k: u32) -> &[f64] {
        let hh = self.hidden * self.hidden;
        &self.w_x[k as usize * hh..(k as usize + 1) * hh]
    }
    fn b(&self, k: u32) -> &[f64] {
        &self.b_x[k as usize * self.hidden..(k as usize + 1) * self.hidden]
    }
    /// `W_k u`
    fn apply(&self, k: u32, u: &[f64], out: &mut [f64]) {
        matvec(self.w(k), self.hidden, u, out);
    }
    /// `W_ro u`
    fn readout(&self, u: &[f64], out: &mut [f64]) {
        matvec(&self.w_ro, self.hidden, u, out);
    }
    /// `W_ro u + b_ro`
    fn logits(&self, u: &[f64]) -> Vec<f64> {
        let mut l = vec![0.0; self.vocab];
        self.readout(u, &mut l);
        l.iter_mut().zip(&self.b_ro).for_each(|(a, b)| *a += b);
        l
    }
}

/// `out = M u` for a row-major `M` with `cols` columns.
fn matvec(m: &[f64], cols: usize, u: &[f64], out: &mut [f64]) {
    for (o, row) in out.iter_mut().zip(m.chunks_exact(cols)) {
        *o = row.iter().zip(u).map(|(a, b)| a * b).sum();
    }
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

fn log_softmax(l: &[f64]) -> Vec<f64> {
    let mx = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = mx + l.iter().map(|x| (x - mx).exp()).sum::<f64>().ln();
    l.iter().map(|x| x - lse).collect()
}

fn softmax(l: &[f64]) -> Vec<f64> {
    log_softmax(l).into_iter().map(f64::exp).collect()
}

/// Natural-log cross-entropy of `target` under `logits`.
fn nll(logits: &[f64], target: u32) -> f64 {
    (-log_softmax(logits)[target as usize]).max(0.0)
}

/// Pearson correlation; NaN with fewer than two points or no variance.
pub fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    if n < 2 {
        return f64::NAN;
    }
    let (ma, mb) = (
        a[..n].iter().sum::<f64>() / n as f64,
        b[..n].iter().sum::<f64>() / n as f64,
    );
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let (x, y) = (a[i] - ma, b[i] - mb);
        sab += x * y;
        saa += x * x;
        sbb += y * y;
    }
    if saa == 0.0 || sbb == 0.0 {
        return f64::NAN;
    }
    sab / (saa * sbb).sqrt()
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// The `n` largest entries of `l` as `(symbol, value)`, largest first.
fn top_n(l: &[f64], n: usize) -> Vec<(u32, f64)> {
    let mut idx: Vec<u32> = (0..l.len() as u32).collect();
    idx.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
    idx.into_iter()
        .take(n)
        .map(|i| (i, l[i as usize]))
        .collect()
}

/// One word (or separator) of the detailed window: window positions `start..end`.
#[derive(Clone, Debug)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub text: String,
    pub separator: bool,
}

/// The final prediction with one word's contributions removed.
#[derive(Clone, Debug)]
pub struct Counterfactual {
    /// index into [`IsanAnalysis::spans`]
    pub span: usize,
    /// `l − κ_word`
    pub logits: Vec<f64>,
    /// top predictions `(symbol, probability)` without the word
    pub top: Vec<(u32, f64)>,
    /// the probability the full model's top prediction keeps without the word
    pub p_original_top: f64,
}

/// The median cross-entropy (nats) of the predictions of the `pos`-th symbol of a word.
#[derive(Clone, Debug)]
pub struct WordPosCe {
    pub pos: usize,
    pub count: usize,
    pub all: f64,
    pub separators_only: f64,
    pub without_separators: f64,
}

/// A model distribution against an empirical one.
#[derive(Clone, Debug)]
pub struct BigramFit {
    pub symbol: u32,
    pub count: usize,
    /// corr(softmax(W_ro b_x + b_ro), P(·|x))
    pub corr_model: f64,
    /// corr(P(·), P(·|x)), the unigram baseline
    pub corr_unigram: f64,
}

/// One symbol's bias in the readout basis.
#[derive(Clone, Debug)]
pub struct BiasSplit {
    pub symbol: u32,
    pub norm: f64,
    pub norm_parallel: f64,
    pub norm_perp: f64,
    /// ln of the symbol's frequency in the text (−∞ if absent)
    pub log_unigram: f64,
}

pub struct IsanAnalysis {
    pub options: Options,
    pub vocab: usize,
    pub hidden: usize,
    pub biases: bool,
    pub n_tokens: usize,
    /// the detailed window: `tokens[window_start..]`
    pub window_start: usize,
    pub window: Vec<u32>,
    pub b_ro: Vec<f64>,
    /// `[W][V]`: the contribution of all that precedes the window (h0 and earlier symbols) to
    /// the logits at each window position (`κ_{h0}` when the window starts the text)
    pub kappa_before: Vec<Vec<f64>>,
    /// `kappa[t][s]` (`s ≤ t`, window positions): `κ_s^t`, `V` values
    pub kappa: Vec<Vec<Vec<f64>>>,
    /// `[W][V]`: `b_ro + kappa_before[t] + Σ_s kappa[t][s]`
    pub logits: Vec<Vec<f64>>,
    /// `[W][V]`: the logits of the direct f64 forward pass (for the identity check)
    pub forward_logits: Vec<Vec<f64>>,
    /// words and separators of the window, in order
    pub spans: Vec<Span>,
    /// `[spans][V]`: `κ_word` of each span at the final position
    pub word_kappa: Vec<Vec<f64>>,
    /// `word_norms[t][w]`: `‖κ_word^t‖` (0 for a span after `t`)
    pub word_norms: Vec<Vec<f64>>,
    /// the final logits with each word (not separator) removed
    pub counterfactuals: Vec<Counterfactual>,
    /// `(lag, E‖κ_j^i‖, number of pairs)`
    pub decay: Vec<(usize, f64, usize)>,
    /// `(k, mean cross-entropy in nats)`, keeping `b_ro` and the `k` most recent contributions
    /// (h0 counts as the oldest one)
    pub history_ce: Vec<(usize, f64)>,
    /// the mean cross-entropy with every contribution
    pub full_ce: f64,
    /// tokens the corpus statistics used
    pub stat_tokens: usize,
    pub by_word_pos: Vec<WordPosCe>,
    /// empirical unigram distribution of the text
    pub unigram: Vec<f64>,
    /// softmax(b_ro)
    pub softmax_b_ro: Vec<f64>,
    pub unigram_corr: f64,
    pub unigram_log_corr: f64,
    pub bigram: Vec<BigramFit>,
    /// readout-basis split (empty for isan-nobias)
    pub readout_rank: usize,
    pub bias_split: Vec<BiasSplit>,
    /// correlations with the unigram log-probability of ‖b‖, ‖b_∥‖, ‖b_⊥‖
    pub bias_corr: [f64; 3],
    /// `[K][K]` cosine distances (1 − cos) between the biases `b_x`, their parts `b_∥` and `b_⊥`
    /// (empty for isan-nobias; NaN where a vector is zero)
    pub bias_cosine: [Vec<Vec<f64>>; 3],
    /// the expansions `W'` of the final symbol and (if any) the first separator symbol
    pub expansions: Vec<(u32, Vec<Vec<f64>>)>,
    /// the readout basis `W'_ro` (eq. 9), when it exists (`V ≤ H + 1`)
    pub readout_basis: Option<Vec<Vec<f64>>>,
    /// the same symbols' dynamics in the readout basis (eq. 10), when it exists
    pub readout_dynamics: Vec<(u32, Vec<Vec<f64>>)>,
    /// The κ_word embedding (over the first `max_stat_tokens` tokens of the text): for each of
    /// the most frequent words (seen at least twice, at most `MAX_EMBED_WORDS`), the word, its
    /// count, and its mean `κ_word` (taken at the position right after the word) centred and
    /// projected onto the first two principal components; empty when fewer than 3 words qualify.
    pub word_embedding: Vec<(String, usize, f64, f64)>,
    /// the fractions of the variance explained by the two principal components
    pub word_embedding_variance: [f64; 2],
    /// `[2][V]`: the two principal directions (unit vectors; zero where a component is degenerate)
    pub word_embedding_axes: Vec<Vec<f64>>,
    /// `[words][V]`: the mean `κ_word` of each embedded word, before centring
    pub word_embedding_kappa: Vec<Vec<f64>>,
}

/// Whether `id` separates words (a whitespace symbol at char or byte level).
fn is_separator(lm: &Lm, id: u32) -> bool {
    lm.tok.level != Level::Word
        && lm
            .tok
            .tokens()
            .get(id as usize)
            .is_some_and(|t| !t.is_empty() && t.trim().is_empty())
}

/// The affine-to-linear expansion (eq. 7) `W' = [[W_x, b_x], [0, 1]]`, `(H+1) × (H+1)`, of
/// `symbol`, so that `W' [h; 1] = [W_x h + b_x; 1]`.
pub fn affine_expansion(lm: &Lm, symbol: u32) -> Result<Vec<Vec<f64>>> {
    let p = IsanWeights::from_lm(lm)?;
    if symbol as usize >= p.symbols {
        bail!(
            "symbol {symbol} is out of range (the ISAN has {} symbols)",
            p.symbols
        );
    }
    Ok(expansion(&p, symbol))
}

fn expansion(p: &IsanWeights, symbol: u32) -> Vec<Vec<f64>> {
    let h = p.hidden;
    let (w, b) = (p.w(symbol), p.b(symbol));
    let mut m: Vec<Vec<f64>> = (0..h)
        .map(|r| {
            let mut row = w[r * h..(r + 1) * h].to_vec();
            row.push(b[r]);
            row
        })
        .collect();
    let mut last = vec![0.0; h + 1];
    last[h] = 1.0;
    m.push(last);
    m
}

/// The readout basis of the expanded state `[h; 1]` (eq. 9): the `V` rows of `[W_ro, b_ro]`
/// followed by an orthonormal basis `O` of their orthogonal complement (the null space of the
/// expanded readout), `(H+1) × (H+1)`. In this basis the first `V` coordinates of `[h; 1]` are
/// the logits. An error if `V > H + 1` or the rows are linearly dependent (no basis then).
pub fn readout_basis(lm: &Lm) -> Result<Vec<Vec<f64>>> {
    readout_basis_of(&IsanWeights::from_lm(lm)?)
}

fn readout_basis_of(p: &IsanWeights) -> Result<Vec<Vec<f64>>> {
    let (h, v) = (p.hidden, p.vocab);
    let d = h + 1;
    if v > d {
        bail!("the readout basis needs V ≤ H + 1 (V = {v}, H = {h})");
    }
    let rows: Vec<Vec<f64>> = (0..v)
        .map(|j| {
            let mut r = p.w_ro[j * h..(j + 1) * h].to_vec();
            r.push(p.b_ro[j]);
            r
        })
        .collect();
    let mut q: Vec<Vec<f64>> = Vec::new();
    let orth = |u: &mut Vec<f64>, q: &[Vec<f64>]| {
        for _ in 0..2 {
            for e in q {
                let c: f64 = u.iter().zip(e).map(|(a, b)| a * b).sum();
                u.iter_mut().zip(e).for_each(|(a, b)| *a -= c * b);
            }
        }
    };
    for r in &rows {
        let mut u = r.clone();
        orth(&mut u, &q);
        let nu = norm(&u);
        if nu <= 1e-9 * norm(r).max(f64::MIN_POSITIVE) {
            bail!("the rows of [W_ro, b_ro] are linearly dependent: no readout basis");
        }
        u.iter_mut().for_each(|a| *a /= nu);
        q.push(u);
    }
    let mut basis = rows;
    for i in 0..d {
        if basis.len() == d {
            break;
        }
        let mut u = vec![0.0; d];
        u[i] = 1.0;
        orth(&mut u, &q);
        let nu = norm(&u);
        if nu > 1e-6 {
            u.iter_mut().for_each(|a| *a /= nu);
            q.push(u.clone());
            basis.push(u);
        }
    }
    Ok(basis)
}

/// The inverse of a square matrix (Gauss–Jordan with partial pivoting).
fn invert(m: &[Vec<f64>]) -> Result<Vec<Vec<f64>>> {
    let n = m.len();
    let mut a: Vec<Vec<f64>> = m
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = r.clone();
            row.extend((0..n).map(|j| if i == j { 1.0 } else { 0.0 }));
            row
        })
        .collect();
    let scale = m
        .iter()
        .flatten()
        .fold(0.0f64, |x, y| x.max(y.abs()))
        .max(f64::MIN_POSITIVE);
    for c in 0..n {
        let piv = (c..n)
            .max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))
            .unwrap();
        if a[piv][c].abs() <= 1e-13 * scale {
            bail!("the matrix is singular");
        }
        a.swap(c, piv);
        let d = a[c][c];
        a[c].iter_mut().for_each(|x| *x /= d);
        let pr = a[c].clone();
        for (i, row) in a.iter_mut().enumerate() {
            if i != c && row[c] != 0.0 {
                let f = row[c];
                row.iter_mut().zip(&pr).for_each(|(x, y)| *x -= f * y);
            }
        }
    }
    Ok(a.into_iter().map(|r| r[n..].to_vec()).collect())
}

fn matmul(a: &[Vec<f64>], b: &[Vec<f64>]) -> Vec<Vec<f64>> {
    a.iter()
        .map(|r| {
            (0..b[0].len())
                .map(|j| r.iter().zip(b).map(|(x, br)| x * br[j]).sum())
                .collect()
        })
        .collect()
}

/// The dynamics of `symbol` in the readout basis (eq. 10): `W'_ro W' (W'_ro)^{-1}`, so that
/// it maps the readout coordinates of `[h; 1]` to those of `[W_x h + b_x; 1]`.
pub fn readout_basis_dynamics(lm: &Lm, symbol: u32) -> Result<Vec<Vec<f64>>> {
    let p = IsanWeights::from_lm(lm)?;
    if symbol as usize >= p.symbols {
        bail!(
            "symbol {symbol} is out of range (the ISAN has {} symbols)",
            p.symbols
        );
    }
    let b = readout_basis_of(&p)?;
    Ok(matmul(&matmul(&b, &expansion(&p, symbol)), &invert(&b)?))
}

/// The logits at each position when only the `k` most recent contributions (plus `b_ro`) are
/// kept: `b_ro + Σ_{j > i−k} κ_j^i`, plus `κ_{h0}^i` when `k > i + 1`. `[n][V]`.
pub fn truncated_logits(lm: &Lm, tokens: &[u32], k: usize) -> Result<Vec<Vec<f64>>> {
    let p = IsanWeights::from_lm(lm)?;
    check_tokens(&p, tokens)?;
    let h = p.hidden;
    let mut out = Vec::with_capacity(tokens.len());
    let mut tmp = vec![0.0; h];
    for i in 0..tokens.len() {
        let lo = (i + 1).saturating_sub(k);
        let mut u = if k > i + 1 {
            p.h0.clone()
        } else {
            vec![0.0; h]
        };
        for &x in &tokens[lo..=i] {
            p.apply(x, &u, &mut tmp);
            u.iter_mut()
                .zip(&tmp)
                .zip(p.b(x))
                .for_each(|((a, &t), &b)| *a = t + b);
        }
        out.push(p.logits(&u));
    }
    Ok(out)
}

fn check_tokens(p: &IsanWeights, tokens: &[u32]) -> Result<()> {
    if let Some(&x) = tokens.iter().find(|&&x| x as usize >= p.symbols) {
        bail!(
            "token id {x} is out of range (the ISAN has {} symbols)",
            p.symbols
        );
    }
    Ok(())
}

pub fn analyze(lm: &Lm, tokens: &[u32]) -> Result<IsanAnalysis> {
    analyze_with(lm, tokens, Options::default())
}

pub fn analyze_with(lm: &Lm, tokens: &[u32], opts: Options) -> Result<IsanAnalysis> {
    let p = IsanWeights::from_lm(lm)?;
    check_tokens(&p, tokens)?;
    if tokens.is_empty() {
        bail!("the ISAN analyses need a non-empty text");
    }
    let (h, v, n) = (p.hidden, p.vocab, tokens.len());
    // Memory bounds for large vocabularies (word level): the window holds W²/2 vectors of V.
    let wlen = opts
        .window
        .max(1)
        .min(n)
        .min(((2 * WINDOW_VALUES / v) as f64).sqrt().max(2.0) as usize);
    let ws = n - wlen;
    let window = tokens[ws..].to_vec();

    // The state before the window, exactly.
    let mut tmp = vec![0.0; h];
    let mut prefix = p.h0.clone();
    for &x in &tokens[..ws] {
        p.apply(x, &prefix, &mut tmp);
        prefix
            .iter_mut()
            .zip(&tmp)
            .zip(p.b(x))
            .for_each(|((a, &t), &b)| *a = t + b);
    }
    // Direct forward through the window and the propagated prefix.
    let mut hstate = prefix.clone();
    let mut before_state = prefix;
    let mut kappa_before = Vec::with_capacity(wlen);
    let mut forward_logits = Vec::with_capacity(wlen);
    for &x in &window {
        p.apply(x, &hstate, &mut tmp);
        hstate
            .iter_mut()
            .zip(&tmp)
            .zip(p.b(x))
            .for_each(|((a, &t), &b)| *a = t + b);
        forward_logits.push(p.logits(&hstate));
        p.apply(x, &before_state, &mut tmp);
        before_state.copy_from_slice(&tmp);
        let mut k = vec![0.0; v];
        p.readout(&before_state, &mut k);
        kappa_before.push(k);
    }
    // κ_s^t inside the window: propagate each source's bias forward.
    let mut kappa: Vec<Vec<Vec<f64>>> = (0..wlen).map(|t| Vec::with_capacity(t + 1)).collect();
    for s in 0..wlen {
        let mut u = p.b(window[s]).to_vec();
        for t in s..wlen {
            if t > s {
                p.apply(window[t], &u, &mut tmp);
                u.copy_from_slice(&tmp);
            }
            let mut k = vec![0.0; v];
            p.readout(&u, &mut k);
            kappa[t].push(k);
        }
    }
    let logits: Vec<Vec<f64>> = (0..wlen)
        .map(|t| {
            let mut l = p.b_ro.clone();
            for (j, a) in l.iter_mut().enumerate() {
                *a += kappa_before[t][j] + kappa[t].iter().map(|k| k[j]).sum::<f64>();
            }
            l
        })
        .collect();

    // Words and separators.
    let mut spans: Vec<Span> = Vec::new();
    for (t, &x) in window.iter().enumerate() {
        let sep = is_separator(lm, x);
        let text = lm.tok.decode(&[x]);
        match spans.last_mut() {
            Some(sp) if !sep && !sp.separator && lm.tok.level != Level::Word && sp.end == t => {
                sp.end = t + 1;
                sp.text.push_str(&text);
            }
            _ => spans.push(Span {
                start: t,
                end: t + 1,
                text,
                separator: sep,
            }),
        }
    }
    let last = wlen - 1;
    let word_kappa: Vec<Vec<f64>> = spans
        .iter()
        .map(|sp| {
            let mut k = vec![0.0; v];
            for ks in &kappa[last][sp.start..sp.end] {
                k.iter_mut().zip(ks).for_each(|(a, b)| *a += b);
            }
            k
        })
        .collect();
    let word_norms: Vec<Vec<f64>> = (0..wlen)
        .map(|t| {
            spans
                .iter()
                .map(|sp| {
                    if sp.start > t {
                        return 0.0;
                    }
                    let mut k = vec![0.0; v];
                    for ks in &kappa[t][sp.start..sp.end.min(t + 1)] {
                        k.iter_mut().zip(ks).for_each(|(a, b)| *a += b);
                    }
                    norm(&k)
                })
                .collect()
        })
        .collect();
    let orig_top = top_n(&logits[last], 1)[0].0;
    let counterfactuals: Vec<Counterfactual> = spans
        .iter()
        .enumerate()
        .filter(|(_, sp)| !sp.separator)
        .map(|(i, _)| {
            let l: Vec<f64> = logits[last]
                .iter()
                .zip(&word_kappa[i])
                .map(|(a, b)| a - b)
                .collect();
            let pr = softmax(&l);
            let top = top_n(&pr, opts.top);
            Counterfactual {
                span: i,
                p_original_top: pr[orig_top as usize],
                logits: l,
                top,
            }
        })
        .collect();

    // Corpus statistics.
    let ns = n
        .min(opts.max_stat_tokens.max(1))
        .min((STAT_VALUES / v).max(100));
    let st = &tokens[..ns];
    let (decay, history_ce, full_ce, by_word_pos) = corpus_stats(lm, &p, st, opts.max_lag);

    // Unigram / bigram.
    let mut uni = vec![0.0; v];
    for &x in tokens {
        uni[x as usize] += 1.0;
    }
    // Bigram counts as sorted (x, y) pairs: a dense V × V table is too large at word level.
    let mut pairs: Vec<(u32, u32)> = tokens.windows(2).map(|w| (w[0], w[1])).collect();
    pairs.sort_unstable();
    let counts = uni.clone();
    uni.iter_mut().for_each(|c| *c /= n as f64);
    let softmax_b_ro = softmax(&p.b_ro);
    let unigram_corr = pearson(&softmax_b_ro, &uni);
    let present: Vec<usize> = (0..v).filter(|&j| uni[j] > 0.0).collect();
    let unigram_log_corr = pearson(
        &present
            .iter()
            .map(|&j| softmax_b_ro[j].ln())
            .collect::<Vec<_>>(),
        &present.iter().map(|&j| uni[j].ln()).collect::<Vec<_>>(),
    );
    let mut groups: Vec<&[(u32, u32)]> = pairs.chunk_by(|a, b| a.0 == b.0).collect();
    // The most frequent preceding symbols first, at most MAX_BIGRAM_ROWS of them.
    groups.sort_by(|a, b| b.len().cmp(&a.len()).then(a[0].0.cmp(&b[0].0)));
    groups.truncate(MAX_BIGRAM_ROWS);
    groups.sort_by_key(|g| g[0].0);
    let mut bigram = Vec::new();
    for g in groups {
        let x = g[0].0 as usize;
        let c = g.len() as f64;
        let mut cond = vec![0.0; v];
        for &(_, y) in g {
            cond[y as usize] += 1.0 / c;
        }
        let model = softmax(&p.logits(p.b(x as u32)));
        bigram.push(BigramFit {
            symbol: x as u32,
            count: c as usize,
            corr_model: pearson(&model, &cond),
            corr_unigram: pearson(&uni, &cond),
        });
    }

    // Readout basis: an orthonormal basis of the row space of W_ro (Gram–Schmidt, twice).
    let mut basis: Vec<Vec<f64>> = Vec::new();
    let scale = p
        .w_ro
        .iter()
        .fold(0.0f64, |a, &b| a.max(b.abs()))
        .max(f64::MIN_POSITIVE);
    for r in p.w_ro.chunks_exact(h) {
        let mut u = r.to_vec();
        for _ in 0..2 {
            for q in &basis {
                let d: f64 = u.iter().zip(q).map(|(a, b)| a * b).sum();
                u.iter_mut().zip(q).for_each(|(a, b)| *a -= d * b);
            }
        }
        let nu = norm(&u);
        if nu > 1e-9 * scale * (h as f64).sqrt() && basis.len() < h {
            u.iter_mut().for_each(|a| *a /= nu);
            basis.push(u);
        }
    }
    let mut bias_split = Vec::new();
    let mut parts: [Vec<Vec<f64>>; 3] = Default::default();
    if p.biases {
        for x in 0..p.symbols {
            let b = p.b(x as u32);
            let mut par = vec![0.0; h];
            for q in &basis {
                let d: f64 = b.iter().zip(q).map(|(a, c)| a * c).sum();
                par.iter_mut().zip(q).for_each(|(a, c)| *a += d * c);
            }
            let perp: Vec<f64> = b.iter().zip(&par).map(|(a, c)| a - c).collect();
            parts[0].push(b.to_vec());
            parts[1].push(par.clone());
            parts[2].push(perp.clone());
            let lu = if x < v && counts[x] > 0.0 {
                uni[x].ln()
            } else {
                f64::NEG_INFINITY
            };
            bias_split.push(BiasSplit {
                symbol: x as u32,
                norm: norm(b),
                norm_parallel: norm(&par),
                norm_perp: norm(&perp),
                log_unigram: lu,
            });
        }
    }
    let seen: Vec<&BiasSplit> = bias_split
        .iter()
        .filter(|b| b.log_unigram.is_finite())
        .collect();
    let lu: Vec<f64> = seen.iter().map(|b| b.log_unigram).collect();
    let bias_corr = [
        pearson(&seen.iter().map(|b| b.norm).collect::<Vec<_>>(), &lu),
        pearson(
            &seen.iter().map(|b| b.norm_parallel).collect::<Vec<_>>(),
            &lu,
        ),
        pearson(&seen.iter().map(|b| b.norm_perp).collect::<Vec<_>>(), &lu),
    ];

    if p.symbols > MAX_COSINE_SYMBOLS {
        parts = Default::default();
    }
    let bias_cosine = parts.map(|vs| {
        vs.iter()
            .map(|a| {
                vs.iter()
                    .map(|b| {
                        let (na, nb) = (norm(a), norm(b));
                        if na == 0.0 || nb == 0.0 {
                            return f64::NAN;
                        }
                        1.0 - a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>() / (na * nb)
                    })
                    .collect()
            })
            .collect()
    });
    let mut exp_syms = vec![window[last]];
    if let Some(s) = window.iter().copied().find(|&x| is_separator(lm, x)) {
        if s != window[last] {
            exp_syms.push(s);
        }
    }
    let expansions: Vec<(u32, Vec<Vec<f64>>)> = exp_syms
        .into_iter()
        .map(|s| (s, expansion(&p, s)))
        .collect();
    let emb = word_embedding(lm, &p, &tokens[..n.min(opts.max_stat_tokens.max(1))]);
    let rb = readout_basis_of(&p).ok();
    let inv = rb.as_ref().and_then(|b| invert(b).ok());
    let readout_dynamics = match (&rb, &inv) {
        (Some(b), Some(bi)) => expansions
            .iter()
            .map(|(s, m)| (*s, matmul(&matmul(b, m), bi)))
            .collect(),
        _ => Vec::new(),
    };

    Ok(IsanAnalysis {
        options: opts,
        vocab: v,
        hidden: h,
        biases: p.biases,
        n_tokens: n,
        window_start: ws,
        window,
        b_ro: p.b_ro.clone(),
        kappa_before,
        kappa,
        logits,
        forward_logits,
        spans,
        word_kappa,
        word_norms,
        counterfactuals,
        decay,
        history_ce,
        full_ce,
        stat_tokens: ns,
        by_word_pos,
        unigram: uni,
        softmax_b_ro,
        unigram_corr,
        unigram_log_corr,
        bigram,
        readout_rank: basis.len(),
        bias_split,
        bias_corr,
        bias_cosine,
        expansions,
        readout_basis: if inv.is_some() { rb } else { None },
        readout_dynamics,
        word_embedding: emb.words,
        word_embedding_variance: emb.variance,
        word_embedding_axes: emb.axes,
        word_embedding_kappa: emb.kappa,
    })
}

struct WordEmbedding {
    words: Vec<(String, usize, f64, f64)>,
    variance: [f64; 2],
    axes: Vec<Vec<f64>>,
    kappa: Vec<Vec<f64>>,
}

/// Words (maximal runs of non-separators; every token at word level) as `(start, end)` ranges.
fn word_ranges(lm: &Lm, tokens: &[u32]) -> Vec<(usize, usize)> {
    let mut r: Vec<(usize, usize)> = Vec::new();
    for (t, &x) in tokens.iter().enumerate() {
        if is_separator(lm, x) {
            continue;
        }
        match r.last_mut() {
            Some(w) if lm.tok.level != Level::Word && w.1 == t => w.1 = t + 1,
            _ => r.push((t, t + 1)),
        }
    }
    r
}

/// The κ_word embedding of the most frequent words of `tokens` (see `IsanAnalysis`).
fn word_embedding(lm: &Lm, p: &IsanWeights, tokens: &[u32]) -> WordEmbedding {
    let (h, v, n) = (p.hidden, p.vocab, tokens.len());
    let mut out = WordEmbedding {
        words: Vec::new(),
        variance: [0.0; 2],
        axes: Vec::new(),
        kappa: Vec::new(),
    };
    // Occurrences followed by a position (an occurrence at the very end is skipped).
    let occ: Vec<(usize, usize, String)> = word_ranges(lm, tokens)
        .into_iter()
        .filter(|&(_, e)| e < n)
        .map(|(s, e)| (s, e, lm.tok.decode(&tokens[s..e])))
        .collect();
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for o in &occ {
        *counts.entry(o.2.as_str()).or_default() += 1;
    }
    let mut freq: Vec<(&str, usize)> = counts.into_iter().filter(|c| c.1 >= 2).collect();
    freq.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    freq.truncate(MAX_EMBED_WORDS);
    if freq.len() < 3 {
        return out;
    }
    let index: std::collections::HashMap<&str, usize> =
        freq.iter().enumerate().map(|(i, w)| (w.0, i)).collect();
    let k = freq.len();
    let mut sums = vec![vec![0.0; v]; k];
    let (mut u, mut tmp, mut kv) = (vec![0.0; h], vec![0.0; h], vec![0.0; v]);
    for (s, e, w) in &occ {
        let Some(&i) = index.get(w.as_str()) else {
            continue;
        };
        // Σ_{s ≤ j < e} of b(x_j) propagated through x_{j+1} … x_e, then the readout.
        u.iter_mut().for_each(|a| *a = 0.0);
        for (t, &tok) in tokens.iter().enumerate().take(*e + 1).skip(*s) {
            if t > *s {
                p.apply(tok, &u, &mut tmp);
                u.copy_from_slice(&tmp);
            }
            if t < *e {
                u.iter_mut().zip(p.b(tok)).for_each(|(a, b)| *a += b);
            }
        }
        p.readout(&u, &mut kv);
        sums[i].iter_mut().zip(&kv).for_each(|(a, b)| *a += b);
    }
    for (i, sm) in sums.iter_mut().enumerate() {
        let c = freq[i].1 as f64;
        sm.iter_mut().for_each(|a| *a /= c);
    }
    let mut mean = vec![0.0; v];
    for sm in &sums {
        mean.iter_mut()
            .zip(sm)
            .for_each(|(a, b)| *a += b / k as f64);
    }
    let x: Vec<Vec<f64>> = sums
        .iter()
        .map(|sm| sm.iter().zip(&mean).map(|(a, b)| a - b).collect())
        .collect();
    // The Gram matrix of the centred vectors shares its non-zero eigenvalues with X^T X.
    let gram: Vec<Vec<f64>> = x
        .iter()
        .map(|a| {
            x.iter()
                .map(|b| a.iter().zip(b).map(|(p, q)| p * q).sum())
                .collect()
        })
        .collect();
    let total: f64 = (0..k).map(|i| gram[i][i]).sum();
    let (vals, vecs) = jacobi_eigen(gram);
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| vals[b].total_cmp(&vals[a]));
    let mut scores = vec![[0.0f64; 2]; k];
    for c in 0..2 {
        let j = order[c];
        let lam = vals[j].max(0.0);
        let mut axis = vec![0.0; v];
        if total > 0.0 && lam > 1e-12 * total {
            out.variance[c] = lam / total;
            let sl = lam.sqrt();
            for (i, xi) in x.iter().enumerate() {
                let e = vecs[i][j];
                axis.iter_mut().zip(xi).for_each(|(a, b)| *a += e * b / sl);
            }
            for (i, xi) in x.iter().enumerate() {
                scores[i][c] = xi.iter().zip(&axis).map(|(a, b)| a * b).sum();
            }
        }
        out.axes.push(axis);
    }
    out.words = freq
        .iter()
        .zip(&scores)
        .map(|(w, s)| (w.0.to_string(), w.1, s[0], s[1]))
        .collect();
    out.kappa = sums;
    out
}

/// Eigenvalues and eigenvectors (columns: `vecs[i][j]` is component `i` of vector `j`) of a
/// symmetric matrix, by cyclic Jacobi rotations.
// A rotation updates columns (then rows) p and q of every row r: written with the indices of
// the formula, as the textbooks give it, rather than as zipped iterators.
#[allow(clippy::needless_range_loop)]
fn jacobi_eigen(mut a: Vec<Vec<f64>>) -> (Vec<f64>, Vec<Vec<f64>>) {
    let k = a.len();
    let mut q: Vec<Vec<f64>> = (0..k)
        .map(|i| (0..k).map(|j| if i == j { 1.0 } else { 0.0 }).collect())
        .collect();
    let scale: f64 = a.iter().flatten().map(|x| x * x).sum::<f64>().sqrt();
    for _ in 0..100 {
        let off: f64 = (0..k)
            .flat_map(|i| (0..k).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum::<f64>()
            .sqrt();
        if off <= 1e-15 * scale || off == 0.0 {
            break;
        }
        for pi in 0..k {
            for qi in pi + 1..k {
                let apq = a[pi][qi];
                if apq == 0.0 {
                    continue;
                }
                let theta = (a[qi][qi] - a[pi][pi]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for r in 0..k {
                    let (x, y) = (a[r][pi], a[r][qi]);
                    a[r][pi] = c * x - s * y;
                    a[r][qi] = s * x + c * y;
                }
                for r in 0..k {
                    let (x, y) = (a[pi][r], a[qi][r]);
                    a[pi][r] = c * x - s * y;
                    a[qi][r] = s * x + c * y;
                }
                for r in 0..k {
                    let (x, y) = (q[r][pi], q[r][qi]);
                    q[r][pi] = c * x - s * y;
                    q[r][qi] = s * x + c * y;
                }
            }
        }
    }
    ((0..k).map(|i| a[i][i]).collect(), q)
}

type Stats = (
    Vec<(usize, f64, usize)>,
    Vec<(usize, f64)>,
    f64,
    Vec<WordPosCe>,
);

/// Decay, history-length cross-entropy and cross-entropy by position in the word over `st`.
fn corpus_stats(lm: &Lm, p: &IsanWeights, st: &[u32], max_lag: usize) -> Stats {
    let (h, v, n) = (p.hidden, p.vocab, st.len());
    let npred = n.saturating_sub(1);
    let mean_ce = |acc: &[Vec<f64>]| -> f64 {
        if npred == 0 {
            return f64::NAN;
        }
        (0..npred)
            .into_par_iter()
            .map(|i| nll(&acc[i], st[i + 1]))
            .sum::<f64>()
            / npred as f64
    };
    // Exact states: full, separators' part, and the h0 part.
    let mut full = Vec::with_capacity(n);
    let mut sep = Vec::with_capacity(n);
    let mut g = Vec::with_capacity(n);
    let (mut hf, mut hs, mut hg) = (p.h0.clone(), vec![0.0; h], p.h0.clone());
    let mut tmp = vec![0.0; h];
    for &x in st {
        let is_sep = is_separator(lm, x);
        p.apply(x, &hf, &mut tmp);
        hf.iter_mut()
            .zip(&tmp)
            .zip(p.b(x))
            .for_each(|((a, &t), &b)| *a = t + b);
        p.apply(x, &hs, &mut tmp);
        hs.iter_mut()
            .zip(&tmp)
            .zip(p.b(x))
            .for_each(|((a, &t), &b)| *a = t + if is_sep { b } else { 0.0 });
        p.apply(x, &hg, &mut tmp);
        hg.copy_from_slice(&tmp);
        full.push(p.logits(&hf));
        let mut k = vec![0.0; v];
        p.readout(&hs, &mut k);
        sep.push(k);
        let mut k = vec![0.0; v];
        p.readout(&hg, &mut k);
        g.push(k);
    }
    let full_ce = mean_ce(&full);

    // Lag by lag: u_j = W_{x_{j+d}} ··· W_{x_{j+1}} b_{x_j}; acc_i gains κ_{i−d}^i. Each lag is
    // one GEMM per symbol (the sources whose next symbol is k) and one readout GEMM.
    let mut u: Vec<f64> = st.iter().flat_map(|&x| p.b(x).iter().copied()).collect();
    let mut acc: Vec<Vec<f64>> = vec![p.b_ro.clone(); n];
    let mut decay = Vec::new();
    let mut history_ce = vec![(0, mean_ce(&acc))];
    let mut kap = vec![0.0; n * v];
    let (mut gin, mut gout) = (Vec::new(), Vec::new());
    let mut by_sym: Vec<Vec<usize>> = vec![Vec::new(); p.symbols];
    for d in 0..=max_lag.min(n.saturating_sub(1)) {
        let m = n - d; // sources j = 0..m
        if d > 0 {
            by_sym.iter_mut().for_each(Vec::clear);
            for j in 0..m {
                by_sym[st[j + d] as usize].push(j);
            }
            for (k, js) in by_sym.iter().enumerate() {
                if js.is_empty() {
                    continue;
                }
                gin.clear();
                for &j in js {
                    gin.extend_from_slice(&u[j * h..(j + 1) * h]);
                }
                gout.resize(js.len() * h, 0.0);
                linear(js.len(), h, h, &gin, p.w(k as u32), &mut gout, false);
                for (r, &j) in js.iter().enumerate() {
                    u[j * h..(j + 1) * h].copy_from_slice(&gout[r * h..(r + 1) * h]);
                }
            }
        }
        linear(m, v, h, &u[..m * h], &p.w_ro, &mut kap[..m * v], false);
        let total: f64 = kap[..m * v].par_chunks(v).map(norm).sum();
        decay.push((d, total / m as f64, m));
        acc[d..]
            .par_iter_mut()
            .zip(kap[..m * v].par_chunks(v))
            .for_each(|(a, k)| {
                a.iter_mut().zip(k).for_each(|(x, y)| *x += y);
            });
        // h0 is the oldest contribution of position d − 1.
        if d >= 1 {
            let i = d - 1;
            acc[i].iter_mut().zip(&g[i]).for_each(|(a, b)| *a += b);
        }
        history_ce.push((d + 1, mean_ce(&acc)));
    }

    // Cross-entropy by position in the word (char and byte level).
    let mut by_word_pos = Vec::new();
    if lm.tok.level != Level::Word && npred > 0 {
        const MAXPOS: usize = 12;
        let mut buckets: Vec<[Vec<f64>; 3]> = (0..=MAXPOS).map(|_| Default::default()).collect();
        let mut pos = 0usize;
        for i in 0..npred {
            pos = if is_separator(lm, st[i]) { 0 } else { pos + 1 };
            let b = &mut buckets[pos.min(MAXPOS)];
            let tgt = st[i + 1];
            b[0].push(nll(&full[i], tgt));
            let only: Vec<f64> = p.b_ro.iter().zip(&sep[i]).map(|(a, c)| a + c).collect();
            b[1].push(nll(&only, tgt));
            let without: Vec<f64> = full[i].iter().zip(&sep[i]).map(|(a, c)| a - c).collect();
            b[2].push(nll(&without, tgt));
        }
        for (pos, mut b) in buckets.into_iter().enumerate() {
            if b[0].is_empty() {
                continue;
            }
            by_word_pos.push(WordPosCe {
                pos,
                count: b[0].len(),
                all: median(&mut b[0]),
                separators_only: median(&mut b[1]),
                without_separators: median(&mut b[2]),
            });
        }
    }
    (decay, history_ce, full_ce, by_word_pos)
}

// -------------------------------------------------------------------------------------------
// Output
// -------------------------------------------------------------------------------------------

fn sym(lm: &Lm, x: u32) -> String {
    let s = lm.tok.decode(&[x]);
    match s.as_str() {
        " " => "␣".into(),
        "\n" => "⏎".into(),
        "\t" => "⇥".into(),
        _ => s,
    }
}


fn bits(nats: f64) -> f64 {
    nats / std::f64::consts::LN_2
}

fn fmt_top(lm: &Lm, t: &[(u32, f64)]) -> String {
    t.iter()
        .map(|&(x, pr)| format!("'{}' {:.3}", sym(lm, x), pr))
        .collect::<Vec<_>>()
        .join(", ")
}

impl IsanAnalysis {
    /// The largest relative difference between the decomposed logits and the direct forward.
    pub fn identity_error(&self) -> f64 {
        let mut e = 0.0f64;
        for (a, b) in self.logits.iter().zip(&self.forward_logits) {
            let s = b.iter().fold(1e-12f64, |m, x| m.max(x.abs()));
            for (x, y) in a.iter().zip(b) {
                e = e.max((x - y).abs() / s);
            }
        }
        e
    }

    pub fn summary(&self, lm: &Lm) -> String {
        let mut o = String::new();
        let last = self.window.len() - 1;
        let _ = writeln!(
            o,
            "ISAN analyses: H = {}, V = {}{}; text of {} tokens, window of the last {}",
            self.hidden,
            self.vocab,
            if self.biases { "" } else { " (no biases)" },
            self.n_tokens,
            self.window.len()
        );
        let _ = writeln!(
            o,
            "  logits = b_ro + Σ κ: largest relative error {:.1e}",
            self.identity_error()
        );
        let p = softmax(&self.logits[last]);
        let _ = writeln!(
            o,
            "  after \"{}\": top {}",
            lm.tok.decode(&self.window).replace('\n', "⏎"),
            fmt_top(lm, &top_n(&p, self.options.top))
        );
        let mut ranked: Vec<usize> = (0..self.spans.len()).collect();
        ranked.sort_by(|&a, &b| norm(&self.word_kappa[b]).total_cmp(&norm(&self.word_kappa[a])));
        let words: Vec<String> = ranked
            .iter()
            .take(6)
            .map(|&i| {
                format!(
                    "'{}' {:.2}",
                    self.spans[i].text.replace(' ', "␣").replace('\n', "⏎"),
                    norm(&self.word_kappa[i])
                )
            })
            .collect();
        let _ = writeln!(o, "  ‖κ_word‖ at the last position: {}", words.join(", "));
        if self.word_embedding.is_empty() {
            let _ = writeln!(
                o,
                "  κ_word embedding: skipped (fewer than 3 words occur at least twice)"
            );
        } else {
            let e = &self.word_embedding;
            let mut pairs: Vec<(f64, usize, usize)> = Vec::new();
            for i in 0..e.len() {
                for j in i + 1..e.len() {
                    pairs.push(((e[i].2 - e[j].2).hypot(e[i].3 - e[j].3), i, j));
                }
            }
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let show = |w: &str| w.replace(' ', "␣").replace('\n', "⏎");
            let near: Vec<String> = pairs
                .iter()
                .take(2)
                .map(|&(_, i, j)| format!("{}–{}", show(&e[i].0), show(&e[j].0)))
                .collect();
            let _ = writeln!(
                o,
                "  κ_word embedding of {} frequent words: PC1 {:.1}%, PC2 {:.1}%; nearest pairs: {}",
                e.len(),
                100.0 * self.word_embedding_variance[0],
                100.0 * self.word_embedding_variance[1],
                near.join(", ")
            );
        }
        for cf in self.counterfactuals.iter().rev().take(4) {
            let _ = writeln!(
                o,
                "  without '{}': top {} (the original top keeps p = {:.3})",
                self.spans[cf.span].text,
                fmt_top(lm, &cf.top),
                cf.p_original_top
            );
        }
        let dec: Vec<String> = self
            .decay
            .iter()
            .filter(|d| [0, 1, 2, 5, 10, 20, 40].contains(&d.0))
            .map(|d| format!("{}:{:.3}", d.0, d.1))
            .collect();
        let _ = writeln!(
            o,
            "  E‖κ‖ by lag (over {} tokens): {}",
            self.stat_tokens,
            dec.join(" ")
        );
        let hist: Vec<String> = self
            .history_ce
            .iter()
            .enumerate()
            .filter(|(i, d)| {
                [0, 1, 2, 3, 5, 10, 20].contains(&d.0) || *i + 1 == self.history_ce.len()
            })
            .map(|(_, d)| d)
            .map(|d| format!("{}:{:.2}", d.0, bits(d.1)))
            .collect();
        let _ = writeln!(
            o,
            "  bits/token keeping k contributions: {}  all: {:.3}",
            hist.join(" "),
            bits(self.full_ce)
        );
        if !self.by_word_pos.is_empty() {
            let w: Vec<String> = self
                .by_word_pos
                .iter()
                .take(8)
                .map(|w| {
                    format!(
                        "{}:{:.2}/{:.2}/{:.2}",
                        w.pos,
                        bits(w.all),
                        bits(w.separators_only),
                        bits(w.without_separators)
                    )
                })
                .collect();
            let _ = writeln!(
                o,
                "  median bits by position in word (all/separators only/without): {}",
                w.join(" ")
            );
        }
        let _ = writeln!(
            o,
            "  softmax(b_ro) vs unigram: r = {:.3} (log r = {:.3})",
            self.unigram_corr, self.unigram_log_corr
        );
        if !self.bigram.is_empty() {
            let (mut a, mut b, mut wsum) = (0.0, 0.0, 0.0);
            for f in self
                .bigram
                .iter()
                .filter(|f| f.corr_model.is_finite() && f.corr_unigram.is_finite())
            {
                let c = f.count as f64;
                a += c * f.corr_model;
                b += c * f.corr_unigram;
                wsum += c;
            }
            if wsum > 0.0 {
                let _ = writeln!(
                    o,
                    "  softmax(W_ro b_x + b_ro) vs P(·|x): mean r = {:.3} (unigram vs P(·|x): {:.3})",
                    a / wsum,
                    b / wsum
                );
            }
        }
        if self.biases {
            let _ = writeln!(
                o,
                "  readout basis (rank {}): corr with ln P(x) of ‖b_x‖ {:.3}, ‖b_∥‖ {:.3}, ‖b_⊥‖ {:.3}",
                self.readout_rank, self.bias_corr[0], self.bias_corr[1], self.bias_corr[2]
            );
        }
        o
    }

    pub fn html(&self, lm: &Lm) -> String {
        let mut o = String::new();
        let last = self.window.len() - 1;
        o.push_str("<section class=\"isan\">\n<h2>ISAN: contributions κ</h2>\n");
        let _ = writeln!(
            o,
            "<p>The logits are exactly <code>b_ro + Σ κ</code> (largest relative error {:.1e}). \
             Window: <code>{}</code>.</p>",
            self.identity_error(),
            esc(&lm.tok.decode(&self.window))
        );
        // Stacked κ of the final position with its softmax panel.
        let p = softmax(&self.logits[last]);
        let mut rows: Vec<u32> = top_n(&p, 24).into_iter().map(|t| t.0).collect();
        rows.sort();
        let mut cols: Vec<(String, Vec<f64>)> = vec![("b_ro".into(), self.b_ro.clone())];
        cols.push((
            if self.window_start == 0 {
                "h0".into()
            } else {
                "…".into()
            },
            self.kappa_before[last].clone(),
        ));
        for (s, &x) in self.window.iter().enumerate() {
            cols.push((sym(lm, x), self.kappa[last][s].clone()));
        }
        cols.push(("Σ".into(), self.logits[last].clone()));
        let _ = writeln!(o, "<h3>κ_s^t at the last position, and the softmax</h3>");
        o.push_str(&heatmap_with_softmax(lm, &cols, &rows, &p));
        // ‖κ_s^t‖ over the window.
        let names: Vec<String> = self.window.iter().map(|&x| sym(lm, x)).collect();
        let m: Vec<Vec<f64>> = (0..self.window.len())
            .map(|t| {
                (0..self.window.len())
                    .map(|s| {
                        if s <= t {
                            norm(&self.kappa[t][s])
                        } else {
                            f64::NAN
                        }
                    })
                    .collect()
            })
            .collect();
        let _ = writeln!(o, "<h3>‖κ_s^t‖ (row t, column s)</h3>");
        o.push_str(&norm_matrix(&names, &names, &m, None));
        // Words.
        let wn: Vec<String> = self
            .spans
            .iter()
            .map(|s| s.text.replace(' ', "␣").replace('\n', "⏎"))
            .collect();
        let _ = writeln!(o, "<h3>‖κ_word^t‖ (row t, column word)</h3>");
        o.push_str(&norm_matrix(&names, &wn, &self.word_norms, None));
        let _ = writeln!(o, "<h3>Removing a word's contribution</h3>\n<table><tr><th>without</th><th>top predictions</th><th>p(original top)</th></tr>");
        let _ = writeln!(
            o,
            "<tr><td>(nothing)</td><td>{}</td><td>{:.3}</td></tr>",
            esc(&fmt_top(lm, &top_n(&p, self.options.top))),
            top_n(&p, 1)[0].1
        );
        for cf in &self.counterfactuals {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{:.3}</td></tr>",
                esc(&self.spans[cf.span].text),
                esc(&fmt_top(lm, &cf.top)),
                cf.p_original_top
            );
        }
        o.push_str("</table>\n");
        // Decay and history.
        let _ = writeln!(
            o,
            "<h3>E‖κ_s^t‖ against t − s ({} tokens)</h3>",
            self.stat_tokens
        );
        let pts: Vec<(f64, f64)> = self
            .decay
            .iter()
            .filter(|d| d.1 > 0.0)
            .map(|d| (d.0 as f64, d.1.log10()))
            .collect();
        o.push_str(&line_plot(&[("E‖κ‖", &pts, "#c33")], "t − s", "log10 E‖κ‖"));
        let _ = writeln!(
            o,
            "<h3>Cross-entropy keeping the k most recent contributions</h3>"
        );
        let pts: Vec<(f64, f64)> = self
            .history_ce
            .iter()
            .map(|d| (d.0 as f64, bits(d.1)))
            .collect();
        let full = vec![
            (0.0, bits(self.full_ce)),
            (
                self.history_ce.last().map_or(1.0, |d| d.0 as f64),
                bits(self.full_ce),
            ),
        ];
        o.push_str(&line_plot(
            &[("kept k", &pts, "#36c"), ("all", &full, "#999")],
            "k",
            "bits/token",
        ));
        if !self.by_word_pos.is_empty() {
            let _ = writeln!(o, "<h3>Median cross-entropy by position in the word</h3>");
            let a: Vec<(f64, f64)> = self
                .by_word_pos
                .iter()
                .map(|w| (w.pos as f64, bits(w.all)))
                .collect();
            let b: Vec<(f64, f64)> = self
                .by_word_pos
                .iter()
                .map(|w| (w.pos as f64, bits(w.separators_only)))
                .collect();
            let c: Vec<(f64, f64)> = self
                .by_word_pos
                .iter()
                .map(|w| (w.pos as f64, bits(w.without_separators)))
                .collect();
            o.push_str(&line_plot(
                &[
                    ("all κ", &a, "#c33"),
                    ("separators' κ only", &b, "#3a3"),
                    ("without separators' κ", &c, "#36c"),
                ],
                "position in word",
                "bits",
            ));
        }
        let _ = writeln!(
            o,
            "<h3>softmax(b_ro) against the unigram distribution (r = {:.3})</h3>",
            self.unigram_corr
        );
        let pts: Vec<(f64, f64)> = self
            .unigram
            .iter()
            .zip(&self.softmax_b_ro)
            .map(|(&a, &b)| (a, b))
            .collect();
        o.push_str(&scatter(&pts, "P(x)", "softmax(b_ro)"));
        if self.biases && !self.bias_split.is_empty() {
            let _ = writeln!(
                o,
                "<h3>Bias norms against ln P(x): ‖b‖ r = {:.3}, ‖b_∥‖ r = {:.3}, ‖b_⊥‖ r = {:.3}</h3>",
                self.bias_corr[0], self.bias_corr[1], self.bias_corr[2]
            );
            let seen: Vec<&BiasSplit> = self
                .bias_split
                .iter()
                .filter(|b| b.log_unigram.is_finite())
                .collect();
            for (name, f) in [("‖b_∥‖", 1usize), ("‖b_⊥‖", 2)] {
                let pts: Vec<(f64, f64)> = seen
                    .iter()
                    .map(|b| {
                        (
                            b.log_unigram,
                            if f == 1 { b.norm_parallel } else { b.norm_perp },
                        )
                    })
                    .collect();
                o.push_str(&scatter(&pts, "ln P(x)", name));
            }
        }
        if !self.bias_cosine[0].is_empty() {
            let names: Vec<String> = (0..self.bias_cosine[0].len() as u32)
                .map(|x| sym(lm, x))
                .collect();
            for (title, m) in ["b_x", "b_∥ (readout space)", "b_⊥ (orthogonal complement)"]
                .iter()
                .zip(&self.bias_cosine)
            {
                let _ = writeln!(
                    o,
                    "<h3>Cosine distance between the biases: {title} (white 0, black 2)</h3>"
                );
                o.push_str(&norm_matrix(&names, &names, m, Some(2.0)));
            }
        }
        if !self.bigram.is_empty() {
            let _ = writeln!(
                o,
                "<h3>Per symbol x: corr(softmax(W_ro b_x + b_ro), P(·|x)) (y) against corr(P(·), P(·|x)) (x)</h3>"
            );
            let pts: Vec<(f64, f64)> = self
                .bigram
                .iter()
                .map(|b| (b.corr_unigram, b.corr_model))
                .collect();
            o.push_str(&scatter(&pts, "unigram vs bigram r", "model vs bigram r"));
        }
        if !self.word_embedding.is_empty() {
            let _ = writeln!(
                o,
                "<h3>κ_word embedding of the {} most frequent words (mean κ_word after the word, PCA: PC1 {:.1}%, PC2 {:.1}% of the variance)</h3>",
                self.word_embedding.len(),
                100.0 * self.word_embedding_variance[0],
                100.0 * self.word_embedding_variance[1]
            );
            o.push_str(&labelled_scatter(&self.word_embedding, "PC1", "PC2"));
        }
        o.push_str("</section>\n");
        o
    }

    pub fn write_data(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let last = self.window.len() - 1;
        // κ of the final position: one row per source.
        let mut s = String::from("source,position");
        for j in 0..self.vocab {
            let _ = write!(s, ",v{j}");
        }
        s.push('\n');
        let row = |s: &mut String, name: &str, pos: &str, k: &[f64]| {
            let _ = write!(s, "{name},{pos}");
            for x in k {
                let _ = write!(s, ",{x:e}");
            }
            s.push('\n');
        };
        row(&mut s, "b_ro", "", &self.b_ro);
        row(&mut s, "before", "", &self.kappa_before[last]);
        for (i, &x) in self.window.iter().enumerate() {
            row(
                &mut s,
                &format!("tok{x}"),
                &(self.window_start + i).to_string(),
                &self.kappa[last][i],
            );
        }
        row(&mut s, "logits", "", &self.logits[last]);
        write_atomic(&dir.join("isan_kappa_last.csv"), s.as_bytes())?;
        let mut s = String::from("lag,mean_norm,pairs\n");
        for d in &self.decay {
            let _ = writeln!(s, "{},{:e},{}", d.0, d.1, d.2);
        }
        write_atomic(&dir.join("isan_decay.csv"), s.as_bytes())?;
        let mut s = String::from("k,ce_nats\n");
        for d in &self.history_ce {
            let _ = writeln!(s, "{},{:e}", d.0, d.1);
        }
        let _ = writeln!(s, "all,{:e}", self.full_ce);
        write_atomic(&dir.join("isan_history_ce.csv"), s.as_bytes())?;
        let mut s =
            String::from("pos,count,median_all,median_separators_only,median_without_separators\n");
        for w in &self.by_word_pos {
            let _ = writeln!(
                s,
                "{},{},{:e},{:e},{:e}",
                w.pos, w.count, w.all, w.separators_only, w.without_separators
            );
        }
        write_atomic(&dir.join("isan_word_position_ce.csv"), s.as_bytes())?;
        let mut s = String::from("symbol,unigram,softmax_b_ro,norm_b,norm_parallel,norm_perp\n");
        for j in 0..self.vocab {
            let b = self.bias_split.get(j);
            let _ = writeln!(
                s,
                "{j},{:e},{:e},{},{},{}",
                self.unigram[j],
                self.softmax_b_ro[j],
                b.map_or(String::new(), |b| format!("{:e}", b.norm)),
                b.map_or(String::new(), |b| format!("{:e}", b.norm_parallel)),
                b.map_or(String::new(), |b| format!("{:e}", b.norm_perp))
            );
        }
        write_atomic(&dir.join("isan_unigram_bias.csv"), s.as_bytes())?;
        if !self.word_embedding.is_empty() {
            let mut s = String::from("word,count,pc1,pc2\n");
            for (w, c, x, y) in &self.word_embedding {
                let w = if w.contains([',', '"', '\n', '\r']) {
                    format!("\"{}\"", w.replace('"', "\"\""))
                } else {
                    w.clone()
                };
                let _ = writeln!(s, "{w},{c},{x:e},{y:e}");
            }
            write_atomic(&dir.join("isan_word_embedding.csv"), s.as_bytes())?;
        }
        let summary = json!({
            "window_start": self.window_start,
            "window": self.window,
            "identity_error": self.identity_error(),
            "spans": self.spans.iter().map(|s| json!({"start": s.start, "end": s.end, "text": s.text, "separator": s.separator})).collect::<Vec<_>>(),
            "word_kappa_last": self.word_kappa,
            "counterfactuals": self.counterfactuals.iter().map(|c| json!({"span": c.span, "top": c.top, "p_original_top": c.p_original_top, "logits": c.logits})).collect::<Vec<_>>(),
            "unigram_corr": self.unigram_corr,
            "unigram_log_corr": self.unigram_log_corr,
            "bigram": self.bigram.iter().map(|b| json!({"symbol": b.symbol, "count": b.count, "corr_model": b.corr_model, "corr_unigram": b.corr_unigram})).collect::<Vec<_>>(),
            "readout_rank": self.readout_rank,
            "bias_corr": {"norm": self.bias_corr[0], "parallel": self.bias_corr[1], "perp": self.bias_corr[2]},
        });
        write_atomic(
            &dir.join("isan_summary.json"),
            serde_json::to_string_pretty(&summary)?.as_bytes(),
        )?;
        let names = ["b", "b_parallel", "b_perp"];
        for (name, m) in names.iter().zip(&self.bias_cosine) {
            if m.is_empty() {
                continue;
            }
            let mut s = String::new();
            for r in m {
                let cells: Vec<String> = r.iter().map(|x| format!("{x:e}")).collect();
                let _ = writeln!(s, "{}", cells.join(","));
            }
            write_atomic(&dir.join(format!("isan_cosine_{name}.csv")), s.as_bytes())?;
        }
        for (x, m) in &self.expansions {
            let rd = self
                .readout_dynamics
                .iter()
                .find(|r| r.0 == *x)
                .map(|r| &r.1);
            let j = json!({"symbol": x, "W_prime": m, "readout_basis": self.readout_basis, "W_prime_in_readout_basis": rd});
            write_atomic(
                &dir.join(format!("isan_affine_{x}.json")),
                serde_json::to_string(&j)?.as_bytes(),
            )?;
        }
        Ok(())
    }
}

// -------------------------------------------------------------------------------------------
// SVG
// -------------------------------------------------------------------------------------------

fn color(x: f64, m: f64) -> String {
    if !x.is_finite() {
        return "#fff".into();
    }
    let a = (x / m.max(1e-12)).clamp(-1.0, 1.0);
    let (r, g, b) = if a >= 0.0 {
        (255.0, 255.0 * (1.0 - a), 255.0 * (1.0 - a))
    } else {
        (255.0 * (1.0 + a), 255.0 * (1.0 + a), 255.0)
    };
    format!("rgb({},{},{})", r as u8, g as u8, b as u8)
}

/// Columns = sources (each a V-vector), rows = the chosen symbols; then the softmax bars.
fn heatmap_with_softmax(lm: &Lm, cols: &[(String, Vec<f64>)], rows: &[u32], p: &[f64]) -> String {
    let (cw, rh, left, top) = (14.0, 12.0, 30.0, 20.0);
    let bar = 120.0;
    let width = left + cw * cols.len() as f64 + 20.0 + bar + 60.0;
    let height = top + rh * rows.len() as f64 + 10.0;
    let m = cols[1..cols.len() - 1]
        .iter()
        .flat_map(|c| rows.iter().map(move |&r| c.1[r as usize].abs()))
        .fold(0.0, f64::max);
    let mut o = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-size=\"9\" font-family=\"monospace\">\n");
    for (c, (name, _)) in cols.iter().enumerate() {
        let x = left + cw * c as f64;
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            x + cw / 2.0,
            top - 6.0,
            esc(name)
        );
    }
    let pm = rows.iter().map(|&r| p[r as usize]).fold(1e-12, f64::max);
    for (ri, &r) in rows.iter().enumerate() {
        let y = top + rh * ri as f64;
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 4.0,
            y + rh - 2.0,
            esc(&sym(lm, r))
        );
        for (c, (name, v)) in cols.iter().enumerate() {
            let x = left + cw * c as f64;
            let _ = writeln!(
                o,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{cw}\" height=\"{rh}\" fill=\"{}\"><title>{} → {}: {:.4}</title></rect>",
                color(v[r as usize], m),
                esc(name),
                esc(&sym(lm, r)),
                v[r as usize]
            );
        }
        let bx = left + cw * cols.len() as f64 + 20.0;
        let w = bar * p[r as usize] / pm;
        let _ = writeln!(
            o,
            "<rect x=\"{bx:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"#555\"/><text x=\"{:.1}\" y=\"{:.1}\">{:.3}</text>",
            y + 1.0,
            rh - 2.0,
            bx + w + 3.0,
            y + rh - 2.0,
            p[r as usize]
        );
    }
    o.push_str("</svg>\n");
    o
}

/// A matrix of non-negative values (NaN: blank), grey scale.
fn norm_matrix(rows: &[String], cols: &[String], m: &[Vec<f64>], max: Option<f64>) -> String {
    let (c, left, top) = (10.0, 24.0, 14.0);
    let width = left + c * cols.len() as f64 + 4.0;
    let height = top + c * rows.len() as f64 + 4.0;
    let mx = max.unwrap_or_else(|| {
        m.iter()
            .flatten()
            .filter(|x| x.is_finite())
            .fold(1e-12f64, |a, &b| a.max(b))
    });
    let mut o = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-size=\"8\" font-family=\"monospace\">\n");
    for (j, name) in cols.iter().enumerate() {
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            left + c * j as f64 + c / 2.0,
            top - 4.0,
            esc(&name.chars().take(1).collect::<String>())
        );
    }
    for (i, name) in rows.iter().enumerate() {
        let y = top + c * i as f64;
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 3.0,
            y + c - 2.0,
            esc(name)
        );
        for (j, &v) in m[i].iter().enumerate() {
            if !v.is_finite() {
                continue;
            }
            let g = (255.0 * (1.0 - (v / mx).clamp(0.0, 1.0))) as u8;
            let _ = writeln!(
                o,
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{c}\" height=\"{c}\" fill=\"rgb({g},{g},{g})\"><title>{}: {v:.4}</title></rect>",
                left + c * j as f64,
                esc(&cols[j])
            );
        }
    }
    o.push_str("</svg>\n");
    o
}

fn bounds(pts: impl Iterator<Item = (f64, f64)>) -> (f64, f64, f64, f64) {
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for (x, y) in pts.filter(|p| p.0.is_finite() && p.1.is_finite()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        return (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    (x0, x1, y0, y1)
}

const PW: f64 = 360.0;
const PH: f64 = 200.0;
const PL: f64 = 50.0;
const PB: f64 = 30.0;

fn axes(o: &mut String, b: (f64, f64, f64, f64), xl: &str, yl: &str) {
    let _ = writeln!(
        o,
        "<line x1=\"{PL}\" y1=\"{PH}\" x2=\"{:.0}\" y2=\"{PH}\" stroke=\"#000\"/><line x1=\"{PL}\" y1=\"10\" x2=\"{PL}\" y2=\"{PH}\" stroke=\"#000\"/>",
        PL + PW
    );
    let _ = writeln!(o, "<text x=\"{PL}\" y=\"{:.0}\">{:.3}</text><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{:.3}</text>", PH + 12.0, b.0, PL + PW, PH + 12.0, b.1);
    let _ = writeln!(o, "<text x=\"{:.0}\" y=\"{PH}\" text-anchor=\"end\">{:.3}</text><text x=\"{:.0}\" y=\"16\" text-anchor=\"end\">{:.3}</text>", PL - 3.0, b.2, PL - 3.0, b.3);
    let _ = writeln!(
        o,
        "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\">{}</text>",
        PL + PW / 2.0,
        PH + PB - 4.0,
        esc(xl)
    );
    let _ = writeln!(o, "<text x=\"12\" y=\"{:.0}\" transform=\"rotate(-90 12 {:.0})\" text-anchor=\"middle\">{}</text>", PH / 2.0, PH / 2.0, esc(yl));
}

fn px(b: (f64, f64, f64, f64), x: f64, y: f64) -> (f64, f64) {
    (
        PL + PW * (x - b.0) / (b.1 - b.0),
        PH - (PH - 10.0) * (y - b.2) / (b.3 - b.2),
    )
}

/// One line of a plot: its name, its points, its colour.
type Series<'a> = (&'a str, &'a [(f64, f64)], &'a str);

fn line_plot(series: &[Series], xl: &str, yl: &str) -> String {
    let b = bounds(series.iter().flat_map(|s| s.1.iter().copied()));
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" font-size=\"10\" font-family=\"sans-serif\">\n",
        PL + PW + 170.0,
        PH + PB
    );
    axes(&mut o, b, xl, yl);
    for (k, (name, pts, col)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(x, y)| {
                let (a, c) = px(b, x, y);
                format!("{a:.1},{c:.1}")
            })
            .collect();
        let _ = writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{col}\" stroke-width=\"1.5\" points=\"{}\"/>",
            path.join(" ")
        );
        let _ = writeln!(
            o,
            "<text x=\"{:.0}\" y=\"{:.0}\" fill=\"{col}\">{}</text>",
            PL + PW + 8.0,
            20.0 + 14.0 * k as f64,
            esc(name)
        );
    }
    o.push_str("</svg>\n");
    o
}

fn scatter(pts: &[(f64, f64)], xl: &str, yl: &str) -> String {
    let mut pts: Vec<(f64, f64)> = pts
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    if pts.len() > MAX_SCATTER {
        pts.sort_by(|a, b| b.0.total_cmp(&a.0));
        pts.truncate(MAX_SCATTER);
    }
    let pts = &pts[..];
    let b = bounds(pts.iter().copied());
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" font-size=\"10\" font-family=\"sans-serif\">\n",
        PL + PW + 10.0,
        PH + PB
    );
    axes(&mut o, b, xl, yl);
    for &(x, y) in pts.iter().filter(|p| p.0.is_finite() && p.1.is_finite()) {
        let (a, c) = px(b, x, y);
        let _ = writeln!(
            o,
            "<circle cx=\"{a:.1}\" cy=\"{c:.1}\" r=\"2.5\" fill=\"#36c\"/>"
        );
    }
    o.push_str("</svg>\n");
    o
}

/// A scatter plot of labelled points `(label, _, x, y)`, the label next to each point.
fn labelled_scatter(pts: &[(String, usize, f64, f64)], xl: &str, yl: &str) -> String {
    let pts: Vec<&(String, usize, f64, f64)> = pts
        .iter()
        .filter(|p| p.2.is_finite() && p.3.is_finite())
        .collect();
    let b = bounds(pts.iter().map(|p| (p.2, p.3)));
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" font-size=\"10\" font-family=\"sans-serif\">\n",
        PL + PW + 60.0,
        PH + PB
    );
    axes(&mut o, b, xl, yl);
    for p in pts {
        let (a, c) = px(b, p.2, p.3);
        let _ = writeln!(
            o,
            "<circle cx=\"{a:.1}\" cy=\"{c:.1}\" r=\"2.5\" fill=\"#36c\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            a + 4.0,
            c - 3.0,
            esc(&p.0)
        );
    }
    o.push_str("</svg>\n");
    o
}
