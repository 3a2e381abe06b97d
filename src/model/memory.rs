//! What reading a text with a model will need, estimated before anything large is allocated,
//! so that a size a user can ask for (a text's length, a batch, a sample, a corpus's states)
//! ends in a clear error with the estimate (`runtime::check_fits`) rather than an abort.

use super::Model;
use crate::kernels::runtime::check_fits;
use anyhow::Result;

/// Values per unit, position and row that bound every cell's forward workspace (its tape of
/// gates and states).
const TAPE_PER_UNIT: u64 = 12;
/// Traced quantities per layer that bound every cell's `trace` (the output, then at most five
/// of the cell's own: RAN c, i, f, content, h; LSTM c, i, f, g, o; RDA n, d, m, h, γ).
const TRACED_PER_LAYER: u64 = 6;

/// Bytes of the forward workspaces over `rows` positions (a batch times a window): every
/// layer's tape and the logits with their softmax.
pub fn forward_bytes(model: &Model, rows: u64) -> u64 {
    let per_row: u64 = model
        .cells
        .iter()
        .map(|c| {
            let s = c.sizes();
            TAPE_PER_UNIT * s.hidden.max(s.input).max(s.output) as u64
        })
        .sum::<u64>()
        + 2 * model.vocab_size() as u64;
    4u64.saturating_mul(rows).saturating_mul(per_row)
}

/// Bytes of every layer's states over `tokens` positions (`trace::states`), f32.
pub fn states_bytes(model: &Model, tokens: u64) -> u64 {
    let width: u64 = model.cells.iter().map(|c| c.sizes().hidden.max(c.sizes().output) as u64).sum();
    (4 * TRACED_PER_LAYER * width).saturating_mul(tokens)
}

/// Refuse to score `tokens` tokens in `batch` streams of windows of `bptt` (with a per-token
/// list when `per_token`) where the machine lacks the memory: the stream and its batched copy,
/// the per-token log-probabilities, the workspaces. `fix` says what to change.
pub fn check_scoring(model: &Model, tokens: usize, batch: usize, bptt: usize, per_token: bool, fix: &str) -> Result<()> {
    let t = tokens as u64;
    let bytes = (8 * t)
        .saturating_add(if per_token { 8 * t } else { 0 })
        .saturating_add(forward_bytes(model, (batch as u64).saturating_mul(bptt as u64)));
    check_fits(&format!("scoring {tokens} tokens in {batch} stream(s) of windows of {bptt}"), bytes, fix)
}

/// Refuse to keep the states of `tokens` positions where the machine lacks the memory.
pub fn check_states(model: &Model, tokens: usize, what: &str, fix: &str) -> Result<()> {
    check_fits(&format!("{what} of {tokens} tokens"), states_bytes(model, tokens as u64), fix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{layer_configs, ModelConfig, TokenizerConfig};

    fn model(hidden: usize, vocab: usize) -> Model {
        let layers = layer_configs("lstm", 16, &[hidden], None, Default::default()).unwrap();
        Model::new(ModelConfig {
            format: "rnnlens".into(),
            format_version: 1,
            vocab_size: vocab,
            tokenizer: TokenizerConfig { level: "word".into(), normalize: "none".into(), split: None },
            embedding_size: Some(16),
            layers,
            cell_name: "lstm".into(),
            input_size: None,
        })
        .unwrap()
    }

    #[test]
    fn estimates_grow_with_every_size_and_refuse_the_absurd() {
        let m = model(32, 100);
        assert_eq!(forward_bytes(&m, 10), 4 * 10 * (12 * 32 + 200));
        assert_eq!(states_bytes(&m, 10), 4 * 6 * 32 * 10);
        assert!(forward_bytes(&model(64, 100), 10) > forward_bytes(&m, 10));
        assert!(check_scoring(&m, 1000, 1, 100, true, "").is_ok());
        if crate::kernels::runtime::available_memory().is_some() {
            let e = check_scoring(&m, 1000, 1 << 40, 100, false, "use a smaller --batch-size").unwrap_err().to_string();
            assert!(e.contains("needs about") && e.contains("GiB") && e.contains("smaller --batch-size"), "{e}");
            let e = check_states(&m, usize::MAX / 2, "the states", "a shorter text").unwrap_err().to_string();
            assert!(e.starts_with("the states of"), "{e}");
        }
    }
}
