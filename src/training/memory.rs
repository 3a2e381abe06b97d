//! What a configuration will need, said before anything large is allocated: the memory of a
//! training run against what the machine has, and a model's size against its data.

use super::config::TrainConfig;
use super::optim::OptimizerKind;
use crate::model::{Model};
use crate::cells::registry::reads_tokens;
use crate::kernels::runtime::check_fits;
use crate::model::memory::forward_bytes;
use anyhow::Result;

/// Parameters per training token above which `train` warns that the model is far beyond its
/// data (an LSTM of 5.6 M parameters on Brown's 1.1 M words has 5; a word-level ISAN, 160).
const PARAMS_PER_TOKEN_WARNING: f64 = 50.0;

/// Bytes a training run of `model` holds at its peak, estimated before anything is allocated:
/// the weights, their gradient and the optimizer's moments, three times over (writing a
/// checkpoint copies and encodes them); the forward workspaces over a window
/// (`model::memory::forward_bytes`: each layer's tape, the logits and their gradient); a tenth
/// more. docs/benchmarks.md compares it with a measured peak.
pub fn memory_estimate(model: &Model, cfg: &TrainConfig) -> u64 {
    let moments = if cfg.optimizer == OptimizerKind::Adam { 2 } else { 0 };
    let rows = (cfg.bptt * cfg.batch_size.max(cfg.eval_batch_size)) as u64;
    let bytes = 4 * 3 * model.n_params as u64 * (2 + moments) + forward_bytes(model, rows);
    bytes + bytes / 10
}

/// Refuse a configuration whose estimated memory the machine does not have, saying both.
pub fn check_memory(model: &Model, cfg: &TrainConfig) -> Result<()> {
    let need = memory_estimate(model, cfg);
    check_fits(
        &format!(
            "this configuration ({} parameters with their gradient and optimizer state, and the workspaces of {} × {} steps)",
            model.n_params,
            cfg.batch_size.max(cfg.eval_batch_size),
            cfg.bptt
        ),
        need,
        "choose a smaller --hidden-size, --vocab-size, --batch-size or --bptt",
    )
}

/// The error for a configuration too large for this machine: what it needs (`model`'s
/// estimate, or for a model too large to build, a lower bound from its largest matrix, its
/// gradient and moments), what is available, and the largest hidden size (every layer at most
/// that) whose model `model_of` builds and the machine holds.
pub fn too_large(cfg: &TrainConfig, model: Option<&Model>, model_of: &dyn Fn(&TrainConfig) -> Result<Model>) -> anyhow::Error {
    let at = |h: usize| TrainConfig { hidden_size: cfg.hidden_size.iter().map(|&x| x.min(h)).collect(), ..cfg.clone() };
    let fits = |h: usize| model_of(&at(h)).is_ok_and(|m| check_memory(&m, &at(h)).is_ok());
    let widest = cfg.hidden_size.iter().copied().max().unwrap_or(1);
    // the largest fitting width, by bisection (fits(lo) holds, fits(hi) does not)
    let (mut lo, mut hi) = (0, widest);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) { lo = mid } else { hi = mid }
    }
    let moments = if cfg.optimizer == OptimizerKind::Adam { 2 } else { 0 };
    let need = match model {
        Some(m) => format!("about {}", crate::kernels::runtime::size(memory_estimate(m, cfg))),
        None => {
            // the largest matrix (4 gates' rows of the widest input) with its gradient and moments
            let d = cfg.embedding_size.max(widest).max(cfg.projection_size.unwrap_or(0)) as u64;
            format!("at least {}", crate::kernels::runtime::size((4 * widest as u64 * d).saturating_mul(4 * (2 + moments))))
        }
    };
    let available = crate::kernels::runtime::available_memory().map_or("this machine does not say how much memory it has".into(), |b| format!("{} are available", crate::kernels::runtime::size(b)));
    let largest = if lo == 0 { "no --hidden-size fits at these settings: a smaller --vocab-size, --batch-size or --bptt".to_string() } else { format!("the largest --hidden-size that fits is {lo}") };
    anyhow::anyhow!(
        "a {} model of {} units {}needs {need} (its weights, their gradient and optimizer state, and the workspaces of {} × {} steps), and {available}: {largest}",
        cfg.cell,
        cfg.hidden_size.iter().map(|h| h.to_string()).collect::<Vec<_>>().join(" + "),
        model.map_or(String::new(), |m| format!("({} parameters) ", m.n_params)),
        cfg.batch_size.max(cfg.eval_batch_size),
        cfg.bptt
    )
}

/// A warning, with its fix, for a model of more than [`PARAMS_PER_TOKEN_WARNING`] parameters
/// per training token; `None` for one its data can train.
pub fn beyond_data(model: &Model, cfg: &TrainConfig, train_tokens: usize, word_level: bool) -> Option<String> {
    let ratio = model.n_params as f64 / train_tokens.max(1) as f64;
    if ratio <= PARAMS_PER_TOKEN_WARNING {
        return None;
    }
    let why = if reads_tokens(&cfg.cell) && word_level {
        format!("; {} holds an H×H matrix for every symbol, at word level one per word: --level char is the ISAN paper's setting", cfg.cell)
    } else {
        "; a smaller --hidden-size or --vocab-size, or more data, fits it".to_string()
    };
    Some(format!(
        "warning: {} parameters for {train_tokens} training tokens ({ratio:.0} per token): the model can memorise its data rather than learn from it{why}",
        model.n_params
    ))
}
