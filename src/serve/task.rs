//! The explorer over a model `rnnlens task` trained: the page's text is the task's input,
//! typed as `explain --task-input` takes it, or `seed N` for the sequence the task's generator
//! draws from seed N (`explain --example N`). The answer is `explain`'s for the same input:
//! the RAN or RWA/RDA weights over the steps, the states, the PCA, the outputs against the
//! targets. A task model has no corpus, so no search and no κ_word map. (`api.rs` chooses
//! between this and the language model's answers and adds the limits.)

use super::json::{influence_json, pca_json, states_json};
use crate::explain::report;
use crate::tasks::TaskModel;
use anyhow::Result;
use serde_json::{json, Value};

/// What the page shows before any input: the model, its task and how to give it an input.
pub fn model(dir: &std::path::Path, tm: &TaskModel) -> Value {
    let c = &tm.model.config;
    let layers: Vec<Value> = c.layers.iter().map(|l| json!({"cell": l.cell, "hidden": l.hidden_size})).collect();
    json!({
        "checkpoint": dir.display().to_string(),
        "cell": tm.cell(),
        "layers": layers,
        "level": "task",
        "vocab": tm.model.vocab_size(),
        "corpus": null,
        "isan": false,
        "task": {"name": tm.meta.name, "length": tm.meta.length, "steps_run": tm.meta.steps_run, "input": input_hint(tm)},
    })
}

/// How an input of `tm`'s task is written.
fn input_hint(tm: &TaskModel) -> String {
    use crate::tasks::TaskKind::*;
    let typed = match tm.kind {
        Copy | Multicopy => "its symbols, e.g. 12345678_________!_______",
        Parentheses => "brackets and letters, e.g. ([a]{a})a",
        Addition => "values, two of them marked with *, e.g. 0.3 0.7* 0.1 0.5*",
        ClassifyLength => "values, e.g. 0.1 0.5 0.9",
        SeqMnist | PermutedSeqMnist => return "an MNIST image: explain one with rnnlens explain --example N --data DIR".to_string(),
    };
    format!("type {typed}, or seed N for the example the task's generator draws from seed N")
}

/// The analyses of one input of the task, as `explain` computes them, with the states and the
/// output at every step.
pub fn explain(tm: &TaskModel, text: &str, components: &[usize]) -> Result<Value> {
    let text = text.trim();
    let (b, source) = match text.strip_prefix("seed").map(|n| n.trim().parse::<u64>()) {
        Some(Ok(seed)) => (tm.example(seed, None)?, format!("the example drawn from seed {seed}")),
        _ => (tm.parse_input(text)?, "the typed input".to_string()),
    };
    let opts = report::Options { components: components.to_vec(), ..Default::default() };
    let (ex, ws, out) = report::explain_task_with_forward(tm, &b, &source, &opts)?;
    let c = tm.model.vocab_size();
    // Each step's output, and where the task scores it, the target and whether it is right.
    let mut steps: Vec<Value> = (0..b.steps).map(|t| json!({"answer": tm.answer(&out[t * c..(t + 1) * c])})).collect();
    for (k, &t) in b.scored.iter().enumerate() {
        steps[t]["target"] = json!(tm.target(&b, k));
        steps[t]["right"] = json!(tm.is_right(&b, k, &out[t * c..(t + 1) * c]));
    }
    let labels = &ex.labels;
    Ok(json!({
        "cell": ex.cell,
        "layers": ex.layers,
        "labels": labels,
        "word_level": false,
        "task": {"name": tm.meta.name, "source": source, "steps": steps},
        "states": states_json(&tm.model, &ws.ys, b.steps),
        "ran": ex.ran.as_ref().map(|r| influence_json(&r.layers, labels)),
        "attention": ex.attention.as_ref().map(|a| influence_json(&a.layers, labels)),
        "isan": null,
        "pca": pca_json(&ex),
        "summary": ex.summary(),
        "not_applicable": ex.not_applicable,
    }))
}
