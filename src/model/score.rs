//! Scoring a token stream: perplexity, bits per character, per-token log-probabilities.

use super::{Model, ModelWs};

/// A mean loss per token above this (perplexity e^50 ≈ 5·10^21, far past any vocabulary's
/// uniform guess) is reported as an overflow, not as a number.
pub const OVERFLOWED_NATS: f64 = 50.0;

/// Summed negative log-likelihood (natural log) over the tokens scored.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Score {
    pub nll: f64,
    pub tokens: usize,
}

impl Score {
    pub fn mean(&self) -> f64 {
        self.nll / self.tokens.max(1) as f64
    }
    pub fn perplexity(&self) -> f64 {
        self.mean().exp()
    }
    pub fn bpc(&self) -> f64 {
        self.mean() / std::f64::consts::LN_2
    }
    /// The measure the papers report for this tokenization level. A mean loss beyond
    /// [`OVERFLOWED_NATS`] per token is no perplexity anyone can read (a diverged model's runs
    /// to hundreds of digits): it is said as such.
    pub fn describe(&self, word_level: bool) -> String {
        let m = self.mean();
        // NaN is "overflowed" too
        if m.is_nan() || m > OVERFLOWED_NATS {
            return format!("perplexity overflowed: a mean NLL of {m:.1} nats per token (beyond e^{OVERFLOWED_NATS:.0}); the model diverged");
        }
        if word_level {
            format!("perplexity {:.2}", self.perplexity())
        } else {
            format!("{:.4} bits per character (perplexity {:.3})", self.bpc(), self.perplexity())
        }
    }
}

/// Lay a stream out as `batch` parallel columns (column `b` is the `b`-th contiguous slice),
/// time-major: `out[i * batch + b] = stream[b * len + i]`. The tail that does not fill every
/// column is dropped; returns the column length.
pub fn batchify(stream: &[u32], batch: usize, out: &mut Vec<u32>) -> usize {
    let len = stream.len() / batch;
    out.clear();
    out.resize(len * batch, 0);
    for b in 0..batch {
        for i in 0..len {
            out[i * batch + b] = stream[b * len + i];
        }
    }
    len
}

/// The windows of an evaluation of a column of `len` tokens: `(start, steps)`, `bptt` steps
/// each but a shorter last one, predicting tokens `start + 1 ..= start + steps`.
pub(crate) fn windows(len: usize, bptt: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.saturating_sub(1)).step_by(bptt.max(1)).map(move |i| (i, bptt.min(len - 1 - i)))
}

/// The progress of an evaluation of `windows` windows (none for a short one).
pub(crate) fn eval_bar(progress: bool, windows: usize, what: &str) -> crate::kernels::runtime::Progress {
    crate::kernels::runtime::Progress::new(progress && windows > 20, windows as u64, what, "windows")
}

/// Score `stream` with dropout off, carrying the state across windows of `bptt` steps. With
/// `batch == 1` this is the exact streaming evaluation of the checkpoint spec: tokens 2..N are
/// scored given everything before them; with `batch > 1` each of the `batch` columns is
/// scored the same way (its first token unscored, a remainder of `N mod batch` tokens dropped).
/// `per_token`, if given, receives `ln p` of each scored token in stream order (batch 1 only).
/// Without `carry`, every window of `bptt` tokens starts from the initial state (for models
/// trained that way); the tokens early in a window then see less context.
#[allow(clippy::too_many_arguments)]
pub fn evaluate(
    model: &Model,
    w: &[f32],
    stream: &[u32],
    batch: usize,
    bptt: usize,
    carry: bool,
    mut per_token: Option<&mut Vec<f64>>,
    progress: bool,
) -> Score {
    let mut data = Vec::new();
    let len = batchify(stream, batch.max(1), &mut data);
    let batch = batch.max(1);
    let mut ws = ModelWs::default();
    let mut state = model.initial_state::<f32>(batch);
    let mut score = Score::default();
    let bar = eval_bar(progress, len.saturating_sub(1).div_ceil(bptt), "evaluating");
    for (i, t) in windows(len, bptt) {
        // A caller that asked to stop (Python's Ctrl-C) discards the partial score.
        if crate::kernels::runtime::interrupted() {
            break;
        }
        let x = &data[i * batch..(i + t) * batch];
        let y = &data[(i + 1) * batch..(i + 1 + t) * batch];
        if !carry {
            state = model.initial_state(batch);
        }
        model.forward(w, x, t, batch, &mut state, &mut ws, None);
        score.nll += model.score(y, &mut ws, false);
        score.tokens += y.len();
        if let Some(out) = per_token.as_deref_mut() {
            out.extend(ws.nll[..y.len()].iter().map(|&n| -n));
        }
        bar.inc(1);
    }
    bar.finish();
    score
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflowed_perplexity_is_said_as_such() {
        let ok = Score { nll: 46.0, tokens: 10 };
        assert!(ok.describe(true).starts_with("perplexity 99.48"), "{}", ok.describe(true));
        for nll in [1e4, f64::INFINITY, f64::NAN] {
            let d = Score { nll, tokens: 10 }.describe(true);
            assert!(d.contains("overflowed") && d.contains("diverged"), "{d}");
            assert!(Score { nll, tokens: 10 }.describe(false).contains("overflowed"));
        }
    }
}
