//! A task run's settings (the RDA paper's set-up, section 6.1) and the model it trains: the
//! cell stack on the task's inputs and a linear readout.

use super::generate::TaskKind;
use crate::cells::registry::{reads_tokens, CellOptions};
use crate::kernels::runtime::Device;
use crate::model::{layer_configs, Model, ModelConfig, TokenizerConfig};
use anyhow::{bail, Result};

/// The RDA paper's training set-up (section 6.1), with the sizes a run may reduce.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    pub hidden: usize,
    pub batch: usize,
    /// optimizer steps at most
    pub steps: usize,
    pub lr: f64,
    /// gradients clipped to [-clip, clip]; 0: not clipped ([`TaskConfig::clip_value`])
    pub clip: f64,
    /// the rwa and rda cells' learned `s0` drawn from N(0, s0_std²); 0: zeros
    pub s0_std: f64,
    /// the GRU's reset and update gate biases at the start (`bias_ih`'s first `2H`)
    pub gru_gate_bias: f64,
    pub seed: u64,
    /// images for the MNIST tasks: (train, test)
    pub mnist: Option<(crate::data::idx::Mnist, crate::data::idx::Mnist)>,
    /// test images scored at the end (MNIST)
    pub test_limit: usize,
    /// the task's length `N` (None: the paper's; see the module doc)
    pub length: Option<usize>,
    /// learned initial state for cells that start from zeros (None: the task's default,
    /// [`TaskKind::default_learn_initial_state`])
    pub learn_initial_state: Option<bool>,
    /// where the model trains
    pub device: Device,
    /// the GRU in PyTorch's form (true) or the papers' (false; `--gru-reset-after`)
    pub gru_reset_after: bool,
    /// where the addition task's markers go (`--addition-markers`)
    pub markers: super::Markers,
    /// MNIST tasks: score the held-out images every this many steps (0: at the end only)
    pub eval_every: usize,
    /// stop once the best held-out accuracy has not improved for this many steps (0: never)
    pub patience: usize,
}

impl TaskConfig {
    pub fn length(&self, kind: TaskKind) -> usize {
        self.length.unwrap_or(kind.default_length())
    }
    pub fn learn_initial_state(&self, kind: TaskKind) -> bool {
        self.learn_initial_state.unwrap_or(kind.default_learn_initial_state())
    }
    /// The value gradients are clipped to, None where they are not.
    pub fn clip_value(&self) -> Option<f64> {
        (self.clip > 0.0).then_some(self.clip)
    }
    /// The model this run trains for `cell` on `kind`.
    pub fn model(&self, kind: TaskKind, cell: &str) -> Result<Model> {
        let opts = CellOptions { learn_initial_state: self.learn_initial_state(kind), gru_reset_after: self.gru_reset_after, ..Default::default() };
        task_model_with(kind, cell, self.hidden, opts)
    }
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig { hidden: 250, batch: 100, steps: 10_000, lr: 0.001, clip: 1.0, s0_std: 0.0, gru_gate_bias: 0.0, seed: 1, mnist: None, test_limit: 10_000, length: None, learn_initial_state: None, device: Device::Cpu, gru_reset_after: true, markers: super::Markers::Halves, eval_every: 0, patience: 0 }
    }
}

/// The paper's measure for each task: loss below (addition) or accuracy reaching a threshold.
pub fn threshold(kind: TaskKind) -> Option<(&'static str, f64)> {
    match kind {
        TaskKind::Addition => Some(("loss <", 0.001)),
        TaskKind::ClassifyLength => Some(("accuracy =", 1.0)),
        TaskKind::Copy => Some(("accuracy >", 0.999)),
        TaskKind::Multicopy => Some(("accuracy >", 0.99)),
        TaskKind::Parentheses => Some(("accuracy >", 0.99)),
        TaskKind::SeqMnist | TaskKind::PermutedSeqMnist => None,
    }
}


/// A task model: the cell stack on the task's input vectors (or symbols), and a readout; with
/// `learn_initial_state`, cells that start from zeros start from a learned state instead.
pub fn task_model(kind: TaskKind, cell: &str, hidden: usize, learn_initial_state: bool) -> Result<Model> {
    task_model_with(kind, cell, hidden, CellOptions { learn_initial_state, ..Default::default() })
}

/// [`task_model`] with the cell's options `opts` (its variant beside its name).
pub fn task_model_with(kind: TaskKind, cell: &str, hidden: usize, opts: CellOptions) -> Result<Model> {
    let spec = kind.spec();
    if reads_tokens(cell) && spec.symbols.is_none() {
        bail!("{cell} switches on input symbols; the {kind:?} task's inputs are real numbers");
    }
    let input = if reads_tokens(cell) { spec.symbols.unwrap_or(spec.input) } else { spec.input };
    let layers = layer_configs(cell, input, &[hidden], None, opts)?;
    Model::new(ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: spec.outputs,
        tokenizer: TokenizerConfig { level: "task".into(), normalize: "none".into(), split: None },
        embedding_size: None,
        layers,
        cell_name: cell.into(),
        input_size: Some(input),
    })
}
