//! Drawing text from a trained model.

use crate::data::Level;
use crate::isan_fast::table::IsanTable;
use crate::model::engine::Engine;
use crate::model::lm::Lm;
use crate::kernels::rng::Rng;
use anyhow::{bail, Result};

/// Feed `prime` from the initial state, then draw `length` tokens with probabilities
/// `∝ exp(β · logit)` (`β` the inverse temperature: 1 samples the model, larger is greedier).
/// Returns the generated tokens (the prime excluded).
pub fn sample(lm: &Lm, prime: &str, length: usize, inverse_temperature: f64, seed: u64) -> Result<Vec<u32>> {
    sample_with(lm, prime, length, inverse_temperature, seed, None, &Engine::cpu())
}

/// [`sample`], with the prime (all but its last token) consumed through a table of composed
/// affine maps when one is given: the state is the same, reached in fewer steps.
pub fn sample_with(
    lm: &Lm,
    prime: &str,
    length: usize,
    inverse_temperature: f64,
    seed: u64,
    table: Option<&IsanTable>,
    engine: &Engine,
) -> Result<Vec<u32>> {
    if table.is_some() {
        engine.only_cpu("--isan-table")?;
    }
    if !inverse_temperature.is_finite() || inverse_temperature < 0.0 {
        bail!("the inverse temperature must be a finite number ≥ 0, got {inverse_temperature}");
    }
    let mut ids = if prime.is_empty() { Vec::new() } else { lm.tok.encode(prime)? };
    if lm.tok.level == Level::Word && !prime.ends_with('\n') && ids.last().copied() == lm.tok.eos_id() {
        // encode() ends every line with <eos>; a prime without a final newline continues its line.
        ids.pop();
    }
    if ids.is_empty() {
        ids.push(start_token(lm));
    }
    let model = &lm.model;
    let mut state = model.initial_state::<f32>(1);
    let mut rng = Rng::new(seed);
    let mut fed = &ids[..];
    if let Some(table) = table {
        // The last token goes through the model, which then gives the first logits.
        let (head, last) = ids.split_at(ids.len() - 1);
        let mut h = table.maps.h0.clone();
        table.consume(head, &mut h, |_, _| {});
        if !head.is_empty() {
            state.layers[0].copy_from_slice(&h);
            state.fresh = false;
        }
        fed = last;
    }
    // The prime goes through in one window.
    crate::kernels::runtime::check_fits(
        &format!("reading a prime of {} tokens", fed.len()),
        crate::model::memory::forward_bytes(model, fed.len() as u64),
        "give a shorter prime",
    )?;
    let mut step = engine.stepper(model, &lm.w, state)?;
    let mut logits = vec![0f64; model.vocab_size()];
    step(fed, &mut logits)?;
    // The ids and their text, each token at most the longest in the vocabulary and a space.
    let longest = lm.tok.tokens().iter().map(|t| t.len()).max().unwrap_or(1) as u64 + 1;
    let bytes = (length as u64).saturating_mul(4 + longest);
    crate::kernels::runtime::check_fits(&format!("sampling {length} tokens"), bytes, "ask for a smaller length")?;
    let mut out = Vec::with_capacity(length);
    for i in 0..length {
        if i % 64 == 0 && crate::kernels::runtime::interrupted() {
            bail!("interrupted");
        }
        let next = draw(&logits, inverse_temperature, &mut rng);
        out.push(next);
        step(&[next], &mut logits)?;
    }
    Ok(out)
}

/// The token a generation with no prime starts from: a line end where the vocabulary has one.
fn start_token(lm: &Lm) -> u32 {
    let line_end = if lm.tok.level == Level::Word { lm.tok.eos_id() } else { lm.tok.id("\n") };
    line_end.or_else(|| lm.tok.id(" ")).unwrap_or(0)
}

fn draw(logits: &[f64], beta: f64, rng: &mut Rng) -> u32 {
    let mx = logits.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
    if beta == 0.0 {
        return rng.below(logits.len() as u64) as u32;
    }
    let weights: Vec<f64> = logits.iter().map(|&l| (beta * (l - mx)).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut u = rng.uniform() * total;
    for (i, &p) in weights.iter().enumerate() {
        if u < p {
            return i as u32;
        }
        u -= p;
    }
    // Rounding left `u` past the last weight: the largest logit is the only sane answer.
    logits.iter().enumerate().fold((0, f64::NEG_INFINITY), |a, (i, &l)| if l > a.1 { (i, l) } else { a }).0 as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draw_follows_the_tempered_distribution() {
        let mut rng = Rng::new(1);
        let logits = [0.0, (3.0f64).ln()];
        let n = 20000;
        let ones = (0..n).filter(|_| draw(&logits, 1.0, &mut rng) == 1).count();
        assert!((ones as f64 / n as f64 - 0.75).abs() < 0.02);
        let ones = (0..n).filter(|_| draw(&logits, 2.0, &mut rng) == 1).count();
        assert!((ones as f64 / n as f64 - 0.9).abs() < 0.02);
    }

    #[test]
    fn a_table_primed_sample_equals_the_plain_one() {
        let tok = crate::data::Tokenizer::fit_char(&["the cat and the hat "], false).unwrap();
        let (model, w) = crate::isan_fast::table::tests::tiny_lm("isan", tok.vocab_size(), 8, 3);
        let lm = Lm { model, w, tok };
        let prime = "the cat and the hat the";
        let table = IsanTable::from_text(&lm, &lm.tok.encode(prime).unwrap(), 3).unwrap();
        let plain = sample(&lm, prime, 40, 1.0, 7).unwrap();
        assert_eq!(plain, sample_with(&lm, prime, 40, 1.0, 7, Some(&table), &Engine::cpu()).unwrap());
    }
}
