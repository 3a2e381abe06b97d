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

mod basis;
mod stats;
mod text;

pub use basis::{affine_expansion, readout_basis, readout_basis_dynamics, truncated_logits};
use basis::{expansion, readout_basis_of};
use stats::{corpus_stats, word_embedding};
pub use stats::word_kappas;
use super::figures::*;
use crate::kernels::f64::*;
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
        Self::of(&lm.model, &lm.w)
    }

    /// The weights of a one-layer ISAN `m` with parameters `w`, a language model's or a task
    /// model's (whose readout is its head).
    pub fn of(m: &crate::model::Model, w: &[f32]) -> Result<IsanWeights> {
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
                .map(|s| w[s.range()].iter().map(|&x| x as f64).collect())
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
        let (hw, hb) = m.head();
        let w_ro: Vec<f64> = w[hw].iter().map(|&x| x as f64).collect();
        let b_ro: Vec<f64> = w[hb].iter().map(|&x| x as f64).collect();
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

    /// The readout at position `i` of `tokens` split into its exact parts:
    /// `(b_ro, κ_{h0}^i, [κ_0^i, …, κ_i^i])` with `κ_j^i = W_ro W_{x_i} ··· W_{x_{j+1}} b_{x_j}`,
    /// computed backwards as rows `R = W_ro W_{x_i} ··· W_{x_{j+1}}` (`V` rows of `H`).
    pub fn contributions(&self, tokens: &[u32], i: usize) -> (Vec<f64>, Vec<f64>, Vec<Vec<f64>>) {
        let (h, v) = (self.hidden, self.vocab);
        let mut r = self.w_ro.clone();
        let mut kappa = vec![Vec::new(); i + 1];
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        for j in (0..=i).rev() {
            let x = tokens[j];
            kappa[j] = r.chunks_exact(h).map(|row| dot(row, self.b(x))).collect();
            // R ← R W_x: each row times W_x (row-major [H, H]).
            let w = self.w(x);
            let mut next = vec![0.0; v * h];
            for (row, out) in r.chunks_exact(h).zip(next.chunks_exact_mut(h)) {
                for (k, &rk) in row.iter().enumerate() {
                    out.iter_mut().zip(&w[k * h..(k + 1) * h]).for_each(|(o, &wv)| *o += rk * wv);
                }
            }
            r = next;
        }
        let k_h0 = r.chunks_exact(h).map(|row| dot(row, &self.h0)).collect();
        (self.b_ro.clone(), k_h0, kappa)
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
    /// the text the unigram and bigram distributions are counted on, and its length in tokens
    pub distributions_of: String,
    pub distribution_tokens: usize,
    /// empirical unigram distribution of that text
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
    analyze_counting_on(lm, tokens, opts, None)
}

/// The text the symbol statistics are counted on (the unigram and bigram distributions that
/// Figs. 7 and 9 set the biases and the readout against) where it is not the explained text:
/// the paper counts them on the training data (`explain --distributions train`).
#[derive(Clone, Copy, Debug)]
pub struct StatsText<'a> {
    /// what the text is, as the summary and the report name it
    pub name: &'a str,
    pub tokens: &'a [u32],
}

/// [`analyze_with`], the symbol statistics counted on `stats` (the explained text without it).
pub fn analyze_counting_on(lm: &Lm, tokens: &[u32], opts: Options, stats: Option<StatsText>) -> Result<IsanAnalysis> {
    let p = IsanWeights::from_lm(lm)?;
    check_tokens(&p, tokens)?;
    if tokens.is_empty() {
        bail!("the ISAN analyses need a non-empty text");
    }
    let stats = stats.unwrap_or(StatsText { name: "the explained text", tokens });
    check_tokens(&p, stats.tokens)?;
    if stats.tokens.len() < 2 {
        bail!("the symbol statistics need at least 2 tokens of {} ({} given)", stats.name, stats.tokens.len());
    }
    let (h, v, n) = (p.hidden, p.vocab, tokens.len());
    let win = window_kappas(&p, tokens, opts.window);
    let spans = spans(lm, &win.tokens);
    let (word_kappa, word_norms) = word_contributions(&spans, &win.kappa, v);
    let counterfactuals = counterfactuals(&spans, &win.logits[win.tokens.len() - 1], &word_kappa, opts.top);
    // Corpus statistics.
    let ns = n.min(opts.max_stat_tokens.max(1)).min((STAT_VALUES / v).max(100));
    let (decay, history_ce, full_ce, by_word_pos) = corpus_stats(lm, &p, &tokens[..ns], opts.max_lag);
    let dist = distributions(&p, stats.tokens);
    let bias = bias_analysis(&p, &dist);
    let (expansions, readout_basis, readout_dynamics) = expansions(lm, &p, &win.tokens);
    let emb = word_embedding(lm, &p, &tokens[..n.min(opts.max_stat_tokens.max(1))]);
    Ok(IsanAnalysis {
        options: opts,
        vocab: v,
        hidden: h,
        biases: p.biases,
        n_tokens: n,
        window_start: win.start,
        window: win.tokens,
        b_ro: p.b_ro.clone(),
        kappa_before: win.kappa_before,
        kappa: win.kappa,
        logits: win.logits,
        forward_logits: win.forward_logits,
        spans,
        word_kappa,
        word_norms,
        counterfactuals,
        decay,
        history_ce,
        full_ce,
        stat_tokens: ns,
        by_word_pos,
        distributions_of: stats.name.to_string(),
        distribution_tokens: stats.tokens.len(),
        unigram: dist.unigram,
        softmax_b_ro: dist.softmax_b_ro,
        unigram_corr: dist.unigram_corr,
        unigram_log_corr: dist.unigram_log_corr,
        bigram: dist.bigram,
        readout_rank: bias.readout_rank,
        bias_split: bias.split,
        bias_corr: bias.corr,
        bias_cosine: bias.cosine,
        expansions,
        readout_basis,
        readout_dynamics,
        word_embedding: emb.words,
        word_embedding_variance: emb.variance,
        word_embedding_axes: emb.axes,
        word_embedding_kappa: emb.kappa,
    })
}

/// The detailed window: its tokens (the last `W` of the text), and per position `κ` of what
/// precedes the window, every `κ_s^t` inside it, the logits they sum to, and the logits of a
/// direct forward pass (to check the identity against).
struct Window {
    start: usize,
    tokens: Vec<u32>,
    kappa_before: Vec<Vec<f64>>,
    kappa: Vec<Vec<Vec<f64>>>,
    logits: Vec<Vec<f64>>,
    forward_logits: Vec<Vec<f64>>,
}

/// [`Window`] of at most `window` tokens, fewer for a large vocabulary (the window holds W²/2
/// vectors of V).
fn window_kappas(p: &IsanWeights, tokens: &[u32], window: usize) -> Window {
    let (h, v, n) = (p.hidden, p.vocab, tokens.len());
    let wlen = window.max(1).min(n).min(((2 * WINDOW_VALUES / v) as f64).sqrt().max(2.0) as usize);
    let start = n - wlen;
    let win = tokens[start..].to_vec();
    // h ← W_x h + b_x
    let step = |x: u32, u: &mut Vec<f64>, tmp: &mut [f64]| {
        p.apply(x, u, tmp);
        u.iter_mut().zip(tmp.iter()).zip(p.b(x)).for_each(|((a, &t), &b)| *a = t + b);
    };
    // The state before the window, exactly.
    let mut tmp = vec![0.0; h];
    let mut prefix = p.h0.clone();
    for &x in &tokens[..start] {
        step(x, &mut prefix, &mut tmp);
    }
    // Direct forward through the window, and the prefix propagated without new biases.
    let mut hstate = prefix.clone();
    let mut before_state = prefix;
    let mut kappa_before = Vec::with_capacity(wlen);
    let mut forward_logits = Vec::with_capacity(wlen);
    for &x in &win {
        step(x, &mut hstate, &mut tmp);
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
        let mut u = p.b(win[s]).to_vec();
        for t in s..wlen {
            if t > s {
                p.apply(win[t], &u, &mut tmp);
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
    Window { start, tokens: win, kappa_before, kappa, logits, forward_logits }
}

/// The window's words (maximal runs of non-separator symbols; every token at word level) and
/// separators, in order.
fn spans(lm: &Lm, window: &[u32]) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    for (t, &x) in window.iter().enumerate() {
        let sep = is_separator(lm, x);
        let text = lm.tok.decode(&[x]);
        match spans.last_mut() {
            Some(sp) if !sep && !sp.separator && lm.tok.level != Level::Word && sp.end == t => {
                sp.end = t + 1;
                sp.text.push_str(&text);
            }
            _ => spans.push(Span { start: t, end: t + 1, text, separator: sep }),
        }
    }
    spans
}

/// `κ_word` of each span at the last position, and `‖κ_word^t‖` of each span at every
/// position `t` (0 for a span after `t`).
fn word_contributions(spans: &[Span], kappa: &[Vec<Vec<f64>>], v: usize) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let sum = |ks: &[Vec<f64>]| {
        let mut k = vec![0.0; v];
        for x in ks {
            k.iter_mut().zip(x).for_each(|(a, b)| *a += b);
        }
        k
    };
    let last = kappa.len() - 1;
    let word_kappa = spans.iter().map(|sp| sum(&kappa[last][sp.start..sp.end])).collect();
    let word_norms = (0..kappa.len())
        .map(|t| spans.iter().map(|sp| if sp.start > t { 0.0 } else { norm(&sum(&kappa[t][sp.start..sp.end.min(t + 1)])) }).collect())
        .collect();
    (word_kappa, word_norms)
}

/// The final logits with each word's `κ_word` removed: the probability left to the original
/// top prediction, and the new `top` predictions.
fn counterfactuals(spans: &[Span], logits: &[f64], word_kappa: &[Vec<f64>], top: usize) -> Vec<Counterfactual> {
    let orig_top = top_n(logits, 1)[0].0;
    spans
        .iter()
        .enumerate()
        .filter(|(_, sp)| !sp.separator)
        .map(|(i, _)| {
            let l: Vec<f64> = logits.iter().zip(&word_kappa[i]).map(|(a, b)| a - b).collect();
            let pr = softmax(&l);
            Counterfactual { span: i, p_original_top: pr[orig_top as usize], top: top_n(&pr, top), logits: l }
        })
        .collect()
}

/// The text's symbol distributions against the model's: `softmax(b_ro)` against the unigram
/// distribution, `softmax(W_ro b_x + b_ro)` against the bigram distribution `P(·|x)` of the
/// most frequent preceding symbols.
struct Distributions {
    unigram: Vec<f64>,
    /// each symbol's count in the text
    counts: Vec<f64>,
    softmax_b_ro: Vec<f64>,
    unigram_corr: f64,
    unigram_log_corr: f64,
    bigram: Vec<BigramFit>,
}

fn distributions(p: &IsanWeights, tokens: &[u32]) -> Distributions {
    let (v, n) = (p.vocab, tokens.len());
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
        &present.iter().map(|&j| softmax_b_ro[j].ln()).collect::<Vec<_>>(),
        &present.iter().map(|&j| uni[j].ln()).collect::<Vec<_>>(),
    );
    let mut groups: Vec<&[(u32, u32)]> = pairs.chunk_by(|a, b| a.0 == b.0).collect();
    // The most frequent preceding symbols first, at most MAX_BIGRAM_ROWS of them.
    groups.sort_by(|a, b| b.len().cmp(&a.len()).then(a[0].0.cmp(&b[0].0)));
    groups.truncate(MAX_BIGRAM_ROWS);
    groups.sort_by_key(|g| g[0].0);
    let bigram = groups
        .into_iter()
        .map(|g| {
            let x = g[0].0 as usize;
            let c = g.len() as f64;
            let mut cond = vec![0.0; v];
            for &(_, y) in g {
                cond[y as usize] += 1.0 / c;
            }
            let model = softmax(&p.logits(p.b(x as u32)));
            BigramFit { symbol: x as u32, count: c as usize, corr_model: pearson(&model, &cond), corr_unigram: pearson(&uni, &cond) }
        })
        .collect();
    Distributions { unigram: uni, counts, softmax_b_ro, unigram_corr, unigram_log_corr, bigram }
}

/// Each symbol's bias split into its part in the readout's row space and the rest: the norms,
/// their correlation with the unigram log-probability, and the cosine distances of each part.
struct BiasAnalysis {
    readout_rank: usize,
    split: Vec<BiasSplit>,
    corr: [f64; 3],
    cosine: [Vec<Vec<f64>>; 3],
}

fn bias_analysis(p: &IsanWeights, dist: &Distributions) -> BiasAnalysis {
    let (h, v) = (p.hidden, p.vocab);
    // An orthonormal basis of the row space of W_ro.
    let mut basis: Vec<Vec<f64>> = Vec::new();
    let scale = p.w_ro.iter().fold(0.0f64, |a, &b| a.max(b.abs())).max(f64::MIN_POSITIVE);
    for r in p.w_ro.chunks_exact(h) {
        let mut u = r.to_vec();
        orthogonalize(&mut u, &basis);
        let nu = norm(&u);
        if nu > 1e-9 * scale * (h as f64).sqrt() && basis.len() < h {
            u.iter_mut().for_each(|a| *a /= nu);
            basis.push(u);
        }
    }
    let mut split = Vec::new();
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
            let lu = if x < v && dist.counts[x] > 0.0 { dist.unigram[x].ln() } else { f64::NEG_INFINITY };
            split.push(BiasSplit { symbol: x as u32, norm: norm(b), norm_parallel: norm(&par), norm_perp: norm(&perp), log_unigram: lu });
        }
    }
    let seen: Vec<&BiasSplit> = split.iter().filter(|b| b.log_unigram.is_finite()).collect();
    let lu: Vec<f64> = seen.iter().map(|b| b.log_unigram).collect();
    let of = |f: fn(&BiasSplit) -> f64| pearson(&seen.iter().map(|b| f(b)).collect::<Vec<_>>(), &lu);
    let corr = [of(|b| b.norm), of(|b| b.norm_parallel), of(|b| b.norm_perp)];
    if p.symbols > MAX_COSINE_SYMBOLS {
        parts = Default::default();
    }
    let cosine = parts.map(|vs| {
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
    BiasAnalysis { readout_rank: basis.len(), split, corr, cosine }
}

/// The affine-to-linear expansion (eq. 7) of the window's last symbol and of its first
/// separator, the readout basis (eq. 9, where it exists) and those symbols' dynamics in it
/// (eq. 10).
#[allow(clippy::type_complexity)]
fn expansions(lm: &Lm, p: &IsanWeights, window: &[u32]) -> (Vec<(u32, Vec<Vec<f64>>)>, Option<Vec<Vec<f64>>>, Vec<(u32, Vec<Vec<f64>>)>) {
    let last = window[window.len() - 1];
    let mut syms = vec![last];
    if let Some(s) = window.iter().copied().find(|&x| is_separator(lm, x)) {
        if s != last {
            syms.push(s);
        }
    }
    let expansions: Vec<(u32, Vec<Vec<f64>>)> = syms.into_iter().map(|s| (s, expansion(p, s))).collect();
    let rb = readout_basis_of(p).ok();
    let inv = rb.as_ref().and_then(|b| invert(b).ok());
    let dynamics = match (&rb, &inv) {
        (Some(b), Some(bi)) => expansions.iter().map(|(s, m)| (*s, matmul(&matmul(b, m), bi))).collect(),
        _ => Vec::new(),
    };
    (expansions, if inv.is_some() { rb } else { None }, dynamics)
}
