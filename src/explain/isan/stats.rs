//! Statistics over the text: the words' embedding by their contributions, the decay of
//! `E‖κ‖` with the lag, and cross-entropies by history length and position in the word.

use super::*;


pub(crate) struct WordEmbedding {
    pub(crate) words: Vec<(String, usize, f64, f64)>,
    pub(crate) variance: [f64; 2],
    pub(crate) axes: Vec<Vec<f64>>,
    pub(crate) kappa: Vec<Vec<f64>>,
}

/// Words (maximal runs of non-separators; every token at word level) as `(start, end)` ranges.
pub(crate) fn word_ranges(lm: &Lm, tokens: &[u32]) -> Vec<(usize, usize)> {
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

/// The mean `κ_word` (taken at the position right after the word) of each of the `max_words`
/// most frequent words of `tokens` seen at least twice: `(word, count, κ_word)`, most frequent
/// first. The explain report embeds them by PCA; the explorer maps them by t-SNE.
pub fn word_kappas(lm: &Lm, p: &IsanWeights, tokens: &[u32], max_words: usize) -> Vec<(String, usize, Vec<f64>)> {
    let (h, v, n) = (p.hidden, p.vocab, tokens.len());
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
    freq.truncate(max_words);
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
    freq.iter().zip(sums).map(|(w, k)| (w.0.to_string(), w.1, k)).collect()
}

/// The κ_word embedding of the most frequent words of `tokens` (see `IsanAnalysis`).
pub(crate) fn word_embedding(lm: &Lm, p: &IsanWeights, tokens: &[u32]) -> WordEmbedding {
    let v = p.vocab;
    let mut out = WordEmbedding {
        words: Vec::new(),
        variance: [0.0; 2],
        axes: Vec::new(),
        kappa: Vec::new(),
    };
    let words = word_kappas(lm, p, tokens, MAX_EMBED_WORDS);
    if words.len() < 3 {
        return out;
    }
    let k = words.len();
    let freq: Vec<(&str, usize)> = words.iter().map(|w| (w.0.as_str(), w.1)).collect();
    let sums: Vec<Vec<f64>> = words.iter().map(|w| w.2.clone()).collect();
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

pub(crate) type Stats = (
    Vec<(usize, f64, usize)>,
    Vec<(usize, f64)>,
    f64,
    Vec<WordPosCe>,
);

/// The sum in index order. Rayon's own `sum` splits the work where threads steal it, so its
/// order of additions, and with it the last bits of a float sum, can change from run to run;
/// the report and the Python reader of one checkpoint must print the same figures.
fn ordered_sum(xs: &[f64]) -> f64 {
    xs.iter().sum()
}

/// Decay, history-length cross-entropy and cross-entropy by position in the word over `st`.
pub(crate) fn corpus_stats(lm: &Lm, p: &IsanWeights, st: &[u32], max_lag: usize) -> Stats {
    let (h, v, n) = (p.hidden, p.vocab, st.len());
    let npred = n.saturating_sub(1);
    let mean_ce = |acc: &[Vec<f64>]| -> f64 {
        if npred == 0 {
            return f64::NAN;
        }
        let each: Vec<f64> = (0..npred)
            .into_par_iter()
            .map(|i| nll(&acc[i], st[i + 1]))
            .collect();
        ordered_sum(&each) / npred as f64
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
        let norms: Vec<f64> = kap[..m * v].par_chunks(v).map(norm).collect();
        let total = ordered_sum(&norms);
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
