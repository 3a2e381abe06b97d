//! Training a language model: truncated BPTT with the state carried across windows,
//! SGD or Adam, clipping, the papers' learning-rate schedule, validation after every epoch,
//! checkpoints that a resumed run continues bit for bit.

pub mod bench;
pub mod metrics;
pub mod optim;
pub mod sampled;

use rayon::prelude::*;
use crate::data::checkpoint::{self, NamedTensor};
use crate::data::{self, Corpus, DataSpec, Format, Level};
use crate::eval::{batchify, evaluate, Score};
use crate::model::lm::{tokenizer_config, Lm};
use metrics::{Record, LOG_EVERY};
use crate::kernels::runtime::Runtime;
use crate::model::{layer_configs, reads_tokens, CellOptions, CELL_NAMES, Dropout, Init, Model, ModelConfig, ModelWs, State};
use optim::{clip, scheduled_lr, Optimizer, OptimizerKind};
use crate::kernels::rng::Rng;
use sampled::SampledSoftmax;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Everything that defines a training run, declared once: each field is a `train` flag (its
/// doc comment is the flag's help, its attribute the default), a key of a TOML configuration
/// (`--config`), and a key of the checkpoint's `trainer.json`, so a resumed run uses the same
/// values. [`RESUMABLE`] names the few a resumed run may change.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
#[serde(default)]
pub struct TrainConfig {
    /// Corpus file or directory [default: the embedded Brown corpus]
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// How the corpus is laid out [default: brown without --data, text with it]
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// What one token is [default: word; char for text8, byte for enwik8]
    #[arg(long, value_enum)]
    pub level: Option<Level>,
    /// Word level: vocabulary size, <unk> and <eos> included
    #[arg(long, default_value_t = 10000)]
    pub vocab_size: usize,
    /// Lowercase the text before tokenizing
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true)]
    pub lowercase: bool,
    /// The recurrent cell
    #[arg(long, default_value = "ran-tanh", value_parser = clap::builder::PossibleValuesParser::new(CELL_NAMES))]
    pub cell: String,
    #[command(flatten)]
    #[serde(flatten)]
    pub cell_options: CellOptions,
    /// Embedding size (not used by isan and linear, which switch on the symbol)
    #[arg(long, default_value_t = 256)]
    pub embedding_size: usize,
    /// Hidden sizes of the stacked layers, e.g. 650,650
    #[arg(long, value_delimiter = ',', default_values_t = [256])]
    #[serde(deserialize_with = "one_or_many")]
    pub hidden_size: Vec<usize>,
    /// Output projection size (ran-*, lstm) [default: none]
    #[arg(long)]
    pub projection_size: Option<usize>,
    /// Sequences per batch (rows the training stream is cut into)
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Truncated BPTT window length
    #[arg(long, default_value_t = 35)]
    pub bptt: usize,
    /// Carry the state across windows (false: every window starts from the initial state, in
    /// training and validation) [default: false for ran-tanh and ran-identity (docs/lm.md),
    /// true for every other cell; recorded in trainer.json]
    #[arg(long, action = clap::ArgAction::Set)]
    pub carry_state: Option<bool>,
    /// Passes over the training split
    #[arg(long, default_value_t = 1)]
    pub epochs: usize,
    /// Stop after this many optimizer steps in all, counted over every part of a resumed run
    /// [default: none]
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// SGD, or Adam (β₁ 0.9, β₂ 0.999, ε 1e-8)
    #[arg(long, value_enum, default_value_t = OptimizerKind::Adam)]
    pub optimizer: OptimizerKind,
    /// Learning rate
    #[arg(long, default_value_t = 0.002)]
    pub lr: f64,
    /// Multiply the rate (SGD or Adam) by this every epoch from --decay-start on
    #[arg(long, default_value_t = 1.0)]
    pub lr_decay: f64,
    /// The first (1-based) epoch whose rate is decayed
    #[arg(long, default_value_t = 1)]
    pub decay_start: usize,
    /// Rescale gradients whose global norm exceeds this
    #[arg(long, default_value = "5")]
    pub clip_norm: Option<f64>,
    /// Clip every gradient value to [-X, X] [default: none]
    #[arg(long, value_name = "X")]
    pub clip_value: Option<f64>,
    /// How the weights start: uniform in [-init-scale, init-scale], or Xavier with gate biases at 1
    #[arg(long, value_enum, default_value_t = InitScheme::Xavier)]
    pub init: InitScheme,
    /// Half-width of the uniform initialisation
    #[arg(long, default_value_t = 0.1)]
    pub init_scale: f64,
    /// Dropout on embeddings, between layers and on the output
    #[arg(long, default_value_t = 0.25)]
    pub dropout: f64,
    /// Dropout on the recurrent input of the gates (one mask per sequence)
    #[arg(long, default_value_t = 0.0)]
    pub rec_dropout: f64,
    /// One dropout mask per sequence (variational) or a fresh one per step (standard)
    #[arg(long, value_enum, default_value_t = DropoutKind::Variational)]
    pub dropout_kind: DropoutKind,
    /// Seed of the initialisation, the dropout masks and the sampled softmax's draws
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    #[serde(flatten)]
    pub runtime: Runtime,
    /// Checkpoint directory
    #[arg(long, default_value = "runs/default")]
    pub out: PathBuf,
    /// Also checkpoint every N steps (besides every epoch's end) [default: none]
    #[arg(long, value_name = "N")]
    pub save_every: Option<u64>,
    /// On a non-finite loss or gradient: stop (keeping the last checkpoint), or skip the batch
    /// and halve the learning rate (at most 10 times in a row)
    #[arg(long, value_enum, default_value_t = OnDivergence::Stop)]
    pub on_divergence: OnDivergence,
    /// Parallel streams of the validation
    #[arg(long, default_value_t = 10)]
    pub eval_batch_size: usize,
    /// Train with a sampled softmax: the batch's targets plus K classes drawn per step from the
    /// training data's unigram distribution (0: the full softmax). Training only: the reported
    /// training loss is then the sampled loss, not the NLL; validation, eval and sampling always
    /// use the full softmax
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub sampled_softmax: usize,
    /// Tokens to sample at the end (0: none)
    #[arg(long, default_value_t = 60)]
    pub sample_length: usize,
}

/// The settings a resumed run may change: how long it goes on, where and how often it saves,
/// how it runs, and what it does on divergence. Any other value given with `--resume` must
/// equal the saved one.
pub const RESUMABLE: &[&str] = &["epochs", "max_steps", "threads", "out", "save_every", "on_divergence", "sample_length"];

/// How the weights start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum InitScheme {
    Uniform,
    Xavier,
}

/// One dropout mask per sequence, or a fresh one per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DropoutKind {
    Variational,
    Standard,
}

/// What a non-finite or diverged batch does to the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OnDivergence {
    Stop,
    Skip,
}

/// `hidden_size = 16` means `[16]`, as `--hidden-size 16` does.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(usize),
        Many(Vec<usize>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(n) => vec![n],
        OneOrMany::Many(v) => v,
    })
}

impl Default for TrainConfig {
    /// The main job: a RAN-tanh word-level model of the embedded Brown corpus, a few minutes
    /// on two cores (the defaults are the flags').
    fn default() -> Self {
        crate::kernels::runtime::defaults()
    }
}

impl TrainConfig {
    /// A TOML configuration: any of the keys (the flags' names with `_`), the rest defaults.
    pub fn from_toml(path: &Path) -> Result<TrainConfig> {
        let table = Self::toml_table(path)?;
        Self::from_value(serde_json::to_value(&table)?)
            .with_context(|| format!("{}: not a valid rnnlens training configuration", path.display()))
    }

    /// The keys a TOML file sets, checked against the configuration's keys.
    pub fn toml_table(path: &Path) -> Result<toml::Table> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read config file {}", path.display()))?;
        let table: toml::Table = text.parse().with_context(|| format!("{}: not a valid TOML file", path.display()))?;
        let known = Self::keys();
        let unknown: Vec<&String> = table.keys().filter(|k| !known.contains(k)).collect();
        if !unknown.is_empty() {
            bail!(
                "{}: unknown setting{} {}; the settings are: {}",
                path.display(),
                if unknown.len() > 1 { "s" } else { "" },
                unknown.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", "),
                known.join(", ")
            );
        }
        Ok(table)
    }

    /// Every setting's name, as TOML and trainer.json spell it.
    pub fn keys() -> Vec<String> {
        match serde_json::to_value(TrainConfig::default()) {
            Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// The configuration a JSON object describes (missing keys: the defaults).
    pub fn from_value(v: serde_json::Value) -> Result<TrainConfig> {
        if let serde_json::Value::Object(m) = &v {
            let known = Self::keys();
            if let Some(k) = m.keys().find(|k| !known.contains(k)) {
                bail!("unknown setting '{k}'");
            }
        }
        Ok(serde_json::from_value(v)?)
    }

    /// The settings of `self` whose values differ from `saved`'s and that a resumed run may
    /// not change (flag spelling).
    pub fn unresumable_changes(&self, saved: &TrainConfig) -> Vec<String> {
        let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) = (serde_json::to_value(self), serde_json::to_value(saved)) else {
            return vec!["(unreadable configuration)".into()];
        };
        a.iter()
            .filter(|(k, v)| !RESUMABLE.contains(&k.as_str()) && b.get(*k) != Some(*v))
            .map(|(k, _)| format!("--{}", k.replace('_', "-")))
            .collect()
    }

    pub fn format(&self) -> Format {
        match self.format {
            Some(f) => f,
            None if self.data.is_some() => Format::Text,
            None => Format::Brown,
        }
    }

    pub fn level(&self) -> Level {
        match self.level {
            Some(l) => l,
            None => match self.format() {
                Format::Text8 => Level::Char,
                Format::Enwik8 => Level::Byte,
                _ => Level::Word,
            },
        }
    }

    /// Whether the state is carried across windows: as set, or the cell's default.
    pub fn carry_state(&self) -> bool {
        self.carry_state.unwrap_or_else(|| crate::model::carries_state_by_default(&self.cell))
    }

    pub fn data_spec(&self) -> Result<DataSpec> {
        Ok(DataSpec {
            path: self.data.clone(),
            format: self.format(),
            level: self.level(),
            vocab_size: self.vocab_size,
            lowercase: self.lowercase,
        })
    }

    pub fn dropout(&self) -> Result<Dropout> {
        for (name, p) in [("dropout", self.dropout), ("rec_dropout", self.rec_dropout)] {
            if !(0.0..1.0).contains(&p) {
                bail!("{name} must be in [0, 1), got {p}");
            }
        }
        Ok(Dropout { p: self.dropout, recurrent: self.rec_dropout, variational: self.dropout_kind == DropoutKind::Variational })
    }

    pub fn init(&self) -> Init {
        match self.init {
            InitScheme::Uniform => Init::Uniform { scale: self.init_scale },
            InitScheme::Xavier => Init::Xavier,
        }
    }

    /// The model's layers for a vocabulary of `vocab` symbols.
    pub fn layers(&self, vocab: usize) -> Result<Vec<crate::model::LayerConfig>> {
        let input = if reads_tokens(&self.cell) { vocab } else { self.embedding_size };
        layer_configs(&self.cell, input, &self.hidden_size, self.projection_size, self.cell_options)
    }

    /// Reject values no run can use, before any data is read.
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 || self.bptt == 0 || self.eval_batch_size == 0 {
            bail!("batch_size, bptt and eval_batch_size must be positive");
        }
        if self.embedding_size == 0 {
            bail!("embedding_size must be positive");
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            bail!("lr must be a positive number, got {}", self.lr);
        }
        if !(self.lr_decay > 0.0 && self.lr_decay <= 1.0) {
            bail!("lr_decay must be in (0, 1], got {}", self.lr_decay);
        }
        if self.clip_norm.is_some_and(|c| !(c > 0.0 && c.is_finite())) || self.clip_value.is_some_and(|c| !(c > 0.0 && c.is_finite())) {
            bail!("clipping thresholds must be positive finite numbers");
        }
        if !(self.init_scale > 0.0 && self.init_scale.is_finite()) {
            bail!("init_scale must be a positive finite number, got {}", self.init_scale);
        }
        if self.save_every == Some(0) {
            bail!("save_every must be positive");
        }
        if self.epochs == 0 {
            bail!("epochs must be at least 1");
        }
        self.dropout()?;
        self.layers(2)?;
        Ok(())
    }
}

/// One line of the training history, kept in `trainer.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EpochRecord {
    pub epoch: usize,
    pub step: u64,
    /// the mean training NLL, or with `sampled_softmax` the mean sampled loss (not an NLL)
    pub train_nll: f64,
    pub valid_nll: f64,
    pub valid_tokens: usize,
    pub lr: f64,
    pub seconds: f64,
}

/// Where a run stands: `trainer.json` (the tensors are in `trainer.safetensors`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainerState {
    pub config: TrainConfig,
    /// 0-based epoch in progress and the next window within it
    pub epoch: usize,
    pub window: usize,
    pub step: u64,
    /// the epoch's running training loss so far (so a resumed epoch reports the same mean)
    pub epoch_nll: f64,
    pub epoch_tokens: u64,
    pub rng_seed: u64,
    /// the generator's word position, as a decimal string (it is a 128-bit number)
    pub rng_pos: String,
    pub optimizer_steps: u64,
    pub history: Vec<EpochRecord>,
    pub finished: bool,
    /// the learning rate's factor after skipped divergent batches (`--on-divergence skip`)
    #[serde(default = "one")]
    pub lr_scale: f64,
    /// batches skipped so far
    #[serde(default)]
    pub skipped: u64,
    /// training tokens consumed so far (skipped windows included), over every part of the run
    #[serde(default)]
    pub tokens: u64,
    /// the run's wall time so far (validation and checkpoints included), over every part
    #[serde(default)]
    pub seconds: f64,
    /// the loss summed over the steps since the last training report of `metrics.jsonl`, and
    /// their tokens (so that a resumed run reports the same means)
    #[serde(default)]
    pub log_nll: f64,
    #[serde(default)]
    pub log_tokens: u64,
}

fn one() -> f64 {
    1.0
}

/// Divergent batches in a row after which `--on-divergence skip` gives up.
const MAX_CONSECUTIVE_SKIPS: usize = 10;

/// A mean loss per token more than this many nats above `ln V` (a uniform guess; an untrained
/// model starts there) is taken as divergence: the model is then worse than guessing by a
/// factor of e^10 ≈ 22,000 in perplexity.
pub const DIVERGED_NATS: f64 = 10.0;

/// Stop, without saving, where validation shows a diverged model (a non-finite or huge loss).
fn check_valid(valid: &Score, diverged_above: f64, step: u64, out: &Path) -> Result<()> {
    let m = valid.mean();
    if !m.is_finite() || m > diverged_above {
        bail!(
            "the validation loss at step {step} is {m:.1} nats per token, far above a uniform guess's {:.2}: training diverged; nothing was written, the last checkpoint in {} is intact (try a lower --lr)",
            diverged_above - DIVERGED_NATS,
            out.display()
        );
    }
    Ok(())
}

/// Parameters per training token above which `train` warns that the model is far beyond its
/// data (an LSTM of 5.6 M parameters on Brown's 1.1 M words has 5; a word-level ISAN, 160).
const PARAMS_PER_TOKEN_WARNING: f64 = 50.0;

/// Bytes a training run of `model` holds at its peak, estimated before anything is allocated:
/// the weights, their gradient and the optimizer's moments, three times over (writing a
/// checkpoint copies and encodes them); each layer's tape over a window (twelve values per
/// unit, step and row bound every cell's); the logits and their gradient; a tenth more.
/// docs/benchmarks.md compares it with a measured peak.
pub fn memory_estimate(model: &Model, cfg: &TrainConfig) -> u64 {
    let moments = if cfg.optimizer == OptimizerKind::Adam { 2 } else { 0 };
    let rows = (cfg.bptt * cfg.batch_size.max(cfg.eval_batch_size)) as u64;
    let per_row: u64 = model
        .cells
        .iter()
        .map(|c| {
            let s = c.sizes();
            12 * s.hidden.max(s.input).max(s.output) as u64
        })
        .sum();
    let logits = 2 * model.vocab_size() as u64;
    let bytes = 4 * (3 * model.n_params as u64 * (2 + moments) + rows * (per_row + logits));
    bytes + bytes / 10
}

/// The memory the system can give without swapping (`MemAvailable`), if it says.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Refuse a configuration whose estimated memory the machine does not have, saying both.
fn check_memory(model: &Model, cfg: &TrainConfig) -> Result<()> {
    let need = memory_estimate(model, cfg);
    if let Some(free) = available_memory().filter(|&free| need > free) {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        bail!(
            "this configuration needs about {:.1} GiB ({} parameters with their gradient and optimizer state, and the workspaces of {} × {} steps), and {:.1} GiB are available: choose a smaller --hidden-size, --vocab-size, --batch-size or --bptt",
            gib(need),
            model.n_params,
            cfg.batch_size.max(cfg.eval_batch_size),
            cfg.bptt,
            gib(free)
        );
    }
    Ok(())
}

/// What a run ends with.
pub struct Outcome {
    pub lm: Lm,
    pub valid: Score,
    pub unigram: Score,
    pub history: Vec<EpochRecord>,
}

/// Cross-entropy of an add-one unigram model of the training split on `stream`: the baseline
/// every language model must beat.
pub fn unigram_score(train: &[u32], stream: &[u32], vocab: usize) -> Score {
    let mut counts = vec![1.0f64; vocab];
    for &t in train {
        counts[t as usize] += 1.0;
    }
    let total: f64 = counts.iter().sum();
    let nll = stream.iter().skip(1).map(|&t| (total / counts[t as usize]).ln()).sum();
    Score { nll, tokens: stream.len().saturating_sub(1) }
}


/// The loss and gradient of one window as training takes them: forward `x` (`[T, B]`, with
/// `drop`), the summed NLL of the targets `y` (with `sampled`, the sampled loss over the
/// targets and the candidates drawn from `drop`'s generator), and, only when that is finite, the backward pass
/// into `g` (overwritten) and clipping to `(clip_norm, clip_value)`. Returns the NLL and the
/// gradient's global norm before clipping, `None` when the loss was not finite (then `g` is
/// stale). The optimizer step is the caller's, so it can refuse a divergent gradient first.
#[allow(clippy::too_many_arguments)]
pub fn window_gradient(
    model: &Model,
    w: &[f32],
    g: &mut [f32],
    (x, y): (&[u32], &[u32]),
    batch: usize,
    state: &mut State<f32>,
    ws: &mut ModelWs<f32>,
    drop: Option<(&Dropout, &mut Rng)>,
    mut sampled: Option<&mut SampledSoftmax<f32>>,
    (clip_norm, clip_value): (Option<f64>, Option<f64>),
) -> (f64, Option<f64>) {
    let steps = x.len() / batch;
    let nll = match &mut sampled {
        None => {
            model.forward(w, x, steps, batch, state, ws, drop);
            model.score(y, ws, true)
        }
        Some(s) => {
            // The candidates are drawn from the run's generator after the dropout masks, so a
            // resumed run (which restores the generator's position) draws the same ones.
            let (d, rng) = drop.expect("a sampled softmax draws from the run's generator");
            model.forward_layers(w, None, x, steps, batch, state, ws, Some((d, &mut *rng)));
            s.score(model, w, y, ws, rng)
        }
    };
    if !nll.is_finite() {
        return (nll, None);
    }
    // Zeroed by the pool: C2's 72 MB took the calling thread 2-4 ms a step with the pool idle.
    g.par_chunks_mut(1 << 16).for_each(|c| c.fill(0.0));
    match &mut sampled {
        None => model.backward(w, g, x, ws),
        Some(s) => s.backward(model, w, g, x, ws),
    }
    (nll, Some(clip(g, clip_norm, clip_value)))
}

/// How a run begins.
#[derive(Clone, Copy, Debug)]
pub enum Start<'a> {
    /// A new run; `out` must not hold a checkpoint already.
    New,
    /// A new run that replaces the checkpoint in `out` (`--overwrite`).
    Replace,
    /// Continue the run saved in this directory. The configuration passed along must be the
    /// saved one ([`resume_config`]) with at most the [`RESUMABLE`] settings changed.
    Resume(&'a Path),
}

/// The configuration of the run saved in `dir`, saving back into `dir`.
pub fn resume_config(dir: &Path) -> Result<TrainConfig> {
    let st: TrainerState = checkpoint::load_json(&dir.join("trainer.json"))?;
    Ok(TrainConfig { out: dir.to_path_buf(), ..st.config })
}

/// Refuse to train into `out` when that would replace another run's checkpoint (unless
/// `replace`) or delete files that are not a checkpoint's; checked before any work is done.
pub fn check_out(out: &Path, replace: bool) -> Result<()> {
    checkpoint::check_replaceable(out)?;
    if !replace && out.join("config.json").exists() {
        let what = checkpoint::load_json::<TrainerState>(&out.join("trainer.json"))
            .map(|st| format!(" (a {} run at step {})", st.config.cell, st.step))
            .unwrap_or_default();
        bail!(
            "{} holds a checkpoint{what}: continue it with --resume {}, replace it with --overwrite, or choose another --out",
            out.display(),
            out.display()
        );
    }
    Ok(())
}

/// Train a new run or continue a saved one (see [`Start`]).
pub fn train(cfg: TrainConfig, start: Start, quiet: bool) -> Result<Outcome> {
    let mut cfg = cfg;
    cfg.validate()?;
    let resumed = match start {
        Start::New | Start::Replace => {
            check_out(&cfg.out, matches!(start, Start::Replace))?;
            None
        }
        Start::Resume(dir) => {
            let st: TrainerState = checkpoint::load_json(&dir.join("trainer.json"))?;
            let changed = cfg.unresumable_changes(&st.config);
            if !changed.is_empty() {
                bail!(
                    "--resume continues the saved run as it was configured; it cannot change {} (only {} may change)",
                    changed.join(", "),
                    RESUMABLE.iter().map(|k| format!("--{}", k.replace('_', "-"))).collect::<Vec<_>>().join(", ")
                );
            }
            if cfg.out != dir {
                check_out(&cfg.out, false)?;
            }
            Some((dir.to_path_buf(), st))
        }
    };
    // The cell's default becomes explicit, so trainer.json says what the run did (and `eval`
    // scores it the same way whatever later defaults are).
    let carry = cfg.carry_state();
    cfg.carry_state = Some(carry);
    let cfg = cfg;
    let threads = cfg.runtime.start()?;
    let say = |s: String| {
        if !quiet {
            eprintln!("{s}");
        }
    };

    let t_load = Instant::now();
    let corpus: Corpus = data::load_corpus(&cfg.data_spec()?)?;
    let word_level = corpus.tokenizer.level == Level::Word;
    for (name, split) in [("train", &corpus.train), ("valid", &corpus.valid)] {
        data::check_split_len(name, split.len(), if name == "train" { cfg.batch_size } else { 1 }, cfg.bptt)?;
    }
    say(format!(
        "data: {} ({} level, vocabulary {}): {} train / {} valid / {} test tokens, read in {:.1}s",
        corpus.source,
        corpus.tokenizer.level,
        corpus.tokenizer.vocab_size(),
        corpus.train.len(),
        corpus.valid.len(),
        corpus.test.len(),
        t_load.elapsed().as_secs_f64()
    ));

    let config = ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: corpus.tokenizer.vocab_size(),
        tokenizer: tokenizer_config(&corpus.tokenizer),
        embedding_size: if reads_tokens(&cfg.cell) { None } else { Some(cfg.embedding_size) },
        layers: cfg.layers(corpus.tokenizer.vocab_size())?,
        cell_name: cfg.cell.clone(),
        input_size: None,
    };
    let model = Model::new(config)?;
    check_memory(&model, &cfg)?;
    let ratio = model.n_params as f64 / corpus.train.len().max(1) as f64;
    if ratio > PARAMS_PER_TOKEN_WARNING && !quiet {
        let why = if reads_tokens(&cfg.cell) && word_level {
            format!(
                "; {} holds an H×H matrix for every symbol, at word level one per word: --level char is the ISAN paper's setting",
                cfg.cell
            )
        } else {
            "; a smaller --hidden-size or --vocab-size, or more data, fits it".to_string()
        };
        eprintln!(
            "warning: {} parameters for {} training tokens ({ratio:.0} per token): the model can memorise its data rather than learn from it{why}",
            model.n_params,
            corpus.train.len()
        );
    }
    let batch = cfg.batch_size;
    let kind = cfg.optimizer;
    let drop = cfg.dropout()?;

    // Fresh start or the saved run.
    let mut rng = Rng::new(cfg.seed);
    let mut w;
    let mut opt = Optimizer::new(kind, model.n_params);
    let mut state = model.initial_state::<f32>(batch);
    let mut st = TrainerState {
        config: cfg.clone(),
        epoch: 0,
        window: 0,
        step: 0,
        epoch_nll: 0.0,
        epoch_tokens: 0,
        rng_seed: cfg.seed,
        rng_pos: String::new(),
        optimizer_steps: 0,
        history: Vec::new(),
        finished: false,
        lr_scale: 1.0,
        skipped: 0,
        tokens: 0,
        seconds: 0.0,
        log_nll: 0.0,
        log_tokens: 0,
    };
    // The history so far: empty for a fresh run; a resumed run's, as its checkpoint saved it.
    let mut records: Vec<Record> = Vec::new();
    match &resumed {
        None => w = model.init_params(cfg.init(), &mut rng),
        Some((dir, saved)) => {
            let lm = Lm::load(dir)?;
            if lm.tok.tokens() != corpus.tokenizer.tokens() {
                bail!("{}: the vocabulary differs from the one the data gives now; was the corpus changed?", dir.display());
            }
            if lm.model.config != model.config {
                bail!("{}: config.json does not match trainer.json's configuration", dir.display());
            }
            w = lm.w;
            let tensors = checkpoint::load_safetensors(&dir.join("trainer.safetensors"))?;
            let mut expected = Vec::new();
            if kind == OptimizerKind::Adam {
                expected.push(("optimizer.m".to_string(), vec![model.n_params]));
                expected.push(("optimizer.v".to_string(), vec![model.n_params]));
            }
            for (l, s) in state.layers.iter().enumerate() {
                expected.push((format!("state.{l}"), vec![batch, s.len() / batch]));
            }
            let mut data = checkpoint::expect_tensors(&tensors, &expected)
                .with_context(|| format!("{}", dir.join("trainer.safetensors").display()))?
                .into_iter();
            if kind == OptimizerKind::Adam {
                opt.m = data.next().unwrap_or_default();
                opt.v = data.next().unwrap_or_default();
            }
            for s in state.layers.iter_mut() {
                *s = data.next().unwrap_or_default();
            }
            state.fresh = saved.window == 0;
            opt.t = saved.optimizer_steps;
            let pos: u128 = saved.rng_pos.parse().with_context(|| format!("{}: bad rng_pos", dir.join("trainer.json").display()))?;
            rng = Rng::restore(saved.rng_seed, pos);
            st = saved.clone();
            st.config = cfg.clone();
            st.finished = false;
            if st.tokens == 0 {
                // A checkpoint from before the counter: every step took one window.
                st.tokens = st.step * (cfg.bptt * batch) as u64;
            }
            records = metrics::read(dir)?;
            // Written with the checkpoint, so nothing lies past it; keep it that way regardless.
            records.retain(|r| r.step() <= st.step);
            say(format!("resuming {} at epoch {}, step {}", dir.display(), st.epoch + 1, st.step));
            if let Some(m) = cfg.max_steps.filter(|&m| st.step >= m) {
                say(format!("the run has reached its --max-steps {m}; give a larger --max-steps to go on"));
            } else if st.epoch >= cfg.epochs {
                say(format!("the run has trained its {} epochs; give a larger --epochs to go on", cfg.epochs));
            }
        }
    }
    let lm_tok = corpus.tokenizer.clone();

    say(format!(
        "model: {} {:?}, {}, {} recurrent / {} total parameters; {} threads",
        cfg.cell,
        cfg.hidden_size,
        match model.config.embedding_size {
            Some(e) => format!("embedding {e}"),
            None => "no embedding (switches on the symbol)".to_string(),
        },
        model.recurrent_params(),
        model.n_params,
        threads
    ));
    let unigram = unigram_score(&corpus.train, &corpus.valid, model.vocab_size());
    say(format!("baseline: add-one unigram model on valid: {}", unigram.describe(word_level)));

    let mut data = Vec::new();
    let len = batchify(&corpus.train, batch, &mut data);
    let windows = (len - 1) / cfg.bptt;
    let mut g = vec![0f32; model.n_params];
    let mut ws = ModelWs::default();
    let mut sampled = (cfg.sampled_softmax > 0).then(|| {
        SampledSoftmax::new(cfg.sampled_softmax, &corpus.train, model.vocab_size(), cfg.bptt * batch, model.top_width())
    });
    // The sampled loss estimates the NLL with a bias: say which one is reported.
    let is_sampled = sampled.is_some();
    let loss_name = if is_sampled { "sampled loss" } else { "loss" };
    let describe_train = |nll: f64, tokens: u64| match is_sampled {
        true => format!("sampled loss {:.3}", nll / tokens.max(1) as f64),
        false => Score { nll, tokens: tokens as usize }.describe(word_level),
    };
    if is_sampled {
        say(format!(
            "sampled softmax: {} draws per step from the unigram distribution beside the batch's targets; the training loss shown is the sampled loss, validation uses the full softmax",
            cfg.sampled_softmax
        ));
    }
    let tokens_per_window = (cfg.bptt * batch) as f64;

    let title = format!(
        "{} {:?}, {}: {}",
        cfg.cell,
        cfg.hidden_size,
        cfg.out.file_name().map_or(String::new(), |n| n.to_string_lossy().to_string()),
        if word_level { "word level" } else { "character level" }
    );
    let save = |dir: &Path, w: &[f32], st: &TrainerState, opt: &Optimizer, state: &State<f32>, rng: &Rng, records: &[Record]| -> Result<()> {
        if let Some(s) = model.slots.iter().find(|s| w[s.range()].iter().any(|x| !x.is_finite())) {
            bail!("refusing to save: {} holds non-finite values; the last checkpoint in {} is intact", s.name, dir.display());
        }
        let mut st = st.clone();
        let (seed, pos) = rng.position();
        st.rng_seed = seed;
        st.rng_pos = pos.to_string();
        st.optimizer_steps = opt.t;
        let mut tensors = Vec::new();
        if opt.kind == OptimizerKind::Adam {
            tensors.push(NamedTensor::new("optimizer.m", vec![opt.m.len()], opt.m.clone()));
            tensors.push(NamedTensor::new("optimizer.v", vec![opt.v.len()], opt.v.clone()));
        }
        for (l, s) in state.layers.iter().enumerate() {
            tensors.push(NamedTensor::new(format!("state.{l}"), vec![batch, s.len() / batch], s.clone()));
        }
        // The model, the trainer state and the history are written as one unit (see
        // `save_dir_atomic`), so a resumed run continues the history exactly where it stopped.
        let trainer_tensors = checkpoint::encode_safetensors(&tensors)?;
        let trainer_json = checkpoint::encode_json(&st)?;
        let curves = metrics::run_svg(&title, records, word_level).into_bytes();
        crate::model::lm::save(
            dir,
            &model,
            w,
            &lm_tok,
            &[
                ("trainer.safetensors", trainer_tensors),
                ("trainer.json", trainer_json),
                (metrics::METRICS_FILE, metrics::to_jsonl(records)),
                (metrics::CURVES_FILE, curves),
            ],
        )
    };

    let max_steps = cfg.max_steps.unwrap_or(u64::MAX);
    let t_run = Instant::now();
    let wall0 = st.seconds;
    let wall = || wall0 + t_run.elapsed().as_secs_f64();
    let start_step = st.step;
    // A mean loss per token this far above a uniform guess's ln V is divergence, not learning.
    let diverged_above = (model.vocab_size() as f64).ln() + DIVERGED_NATS;
    let mut valid = Score::default();
    // The training report of the steps since the last one (none if there were none); `lr` is
    // the epoch's rate before any halving by skipped batches.
    let report = |st: &mut TrainerState, records: &mut Vec<Record>, lr: f64, seconds: f64| {
        let lr = lr * st.lr_scale;
        if st.log_tokens > 0 {
            let loss = st.log_nll / st.log_tokens as f64;
            records.push(Record::Train { step: st.step, epoch: st.epoch + 1, tokens: st.tokens, seconds: metrics::round_ms(seconds), loss, lr, sampled: is_sampled });
        }
        st.log_nll = 0.0;
        st.log_tokens = 0;
    };
    'epochs: while st.epoch < cfg.epochs && !st.finished {
        let lr = scheduled_lr(cfg.lr, cfg.lr_decay, cfg.decay_start, st.epoch);
        if st.window == 0 {
            state = model.initial_state(batch);
            st.epoch_nll = 0.0;
            st.epoch_tokens = 0;
        }
        let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(windows as u64) };
        bar.set_style(
            ProgressStyle::with_template("epoch {prefix} {bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}")
                .expect("valid template"),
        );
        bar.set_prefix(format!("{}/{}", st.epoch + 1, cfg.epochs));
        bar.set_position(st.window as u64);
        let t_epoch = Instant::now();
        let mut t_report = Instant::now();
        let mut consecutive_skips = 0;
        let first_window = st.window;
        while st.window < windows {
            if st.step >= max_steps {
                st.finished = true;
                bar.finish_and_clear();
                break 'epochs;
            }
            let i = st.window * cfg.bptt;
            let x = &data[i * batch..(i + cfg.bptt) * batch];
            let y = &data[(i + 1) * batch..(i + 1 + cfg.bptt) * batch];
            if !carry {
                state = model.initial_state(batch);
            }
            let (nll, norm) = window_gradient(
                &model,
                &w,
                &mut g,
                (x, y),
                batch,
                &mut state,
                &mut ws,
                Some((&drop, &mut rng)),
                sampled.as_mut(),
                (cfg.clip_norm, cfg.clip_value),
            );
            let mean_loss = nll / y.len() as f64;
            let diverged = match norm {
                Some(norm) if norm.is_finite() && mean_loss <= diverged_above => None,
                Some(norm) if norm.is_finite() => {
                    // Name the layer whose output grew the most.
                    let peak = |l: usize| ws.ys[l].iter().fold(0f32, |m, v| m.max(v.abs()));
                    let (l, y) = (0..model.cells.len()).map(|l| (l, peak(l))).fold((0, 0f32), |a, b| if b.1 > a.1 { b } else { a });
                    Some(format!(
                        "the training loss reached {mean_loss:.1} nats per token, far above a uniform guess's {:.2} (ln of the vocabulary size), with outputs of layer {l} ({}) up to {y:.3e}: training diverged",
                        diverged_above - DIVERGED_NATS,
                        model.config.layers[l].cell
                    ))
                }
                Some(_) => {
                    let bad = model.slots.iter().find(|s| g[s.range()].iter().any(|x| !x.is_finite()));
                    Some(format!("the gradient of {} became non-finite", bad.map_or("a parameter", |s| s.name.as_str())))
                }
                None => {
                    // Name the first layer whose output went non-finite (else the logits did).
                    let layer = (0..model.cells.len()).find(|&l| ws.ys[l].iter().any(|x| !x.is_finite()));
                    Some(match layer {
                        Some(l) => format!(
                            "the training loss became {nll}: the output of layer {l} ({}) is non-finite",
                            model.config.layers[l].cell
                        ),
                        None => format!("the training loss became {nll}: the logits overflowed"),
                    })
                }
            };
            if let Some(what) = diverged {
                let at = format!("at step {} (epoch {}, window {})", st.step + 1, st.epoch + 1, st.window + 1);
                if cfg.on_divergence == OnDivergence::Stop || consecutive_skips >= MAX_CONSECUTIVE_SKIPS {
                    bail!(
                        "{what} {at}; no weights were changed and nothing was written: the last checkpoint in {} is intact (try a lower --lr, clipping, or --on-divergence skip)",
                        cfg.out.display()
                    );
                }
                // Skip the batch, halve the rate, and start the next window from a clean state.
                consecutive_skips += 1;
                st.lr_scale *= 0.5;
                st.skipped += 1;
                state = model.initial_state(batch);
                eprintln!("warning: {what} {at}; batch skipped, learning rate now {:.3e}", lr * st.lr_scale);
                st.step += 1;
                st.window += 1;
                st.tokens += y.len() as u64;
                if st.step.is_multiple_of(LOG_EVERY) {
                    report(&mut st, &mut records, lr, wall());
                }
                bar.inc(1);
                continue;
            }
            consecutive_skips = 0;
            opt.step(&mut w, &g, lr * st.lr_scale);
            st.step += 1;
            st.window += 1;
            st.epoch_nll += nll;
            st.epoch_tokens += y.len() as u64;
            st.tokens += y.len() as u64;
            st.log_nll += nll;
            st.log_tokens += y.len() as u64;
            if st.step.is_multiple_of(LOG_EVERY) {
                report(&mut st, &mut records, lr, wall());
            }
            bar.inc(1);
            if st.window.is_multiple_of(10) || st.window == windows {
                let secs = t_epoch.elapsed().as_secs_f64();
                let tps = (st.window - first_window) as f64 * tokens_per_window / secs.max(1e-9);
                let mean = st.epoch_nll / st.epoch_tokens as f64;
                let m = match (is_sampled, word_level) {
                    (true, _) => String::new(),
                    (false, true) => format!(" (ppl {:.1})", mean.exp()),
                    (false, false) => format!(" (bpc {:.3})", mean / std::f64::consts::LN_2),
                };
                bar.set_message(format!("{loss_name} {mean:.3}{m}, {tps:.0} tokens/s"));
                // Without a terminal the bar is hidden: report progress as lines instead.
                if !quiet && bar.is_hidden() && t_report.elapsed().as_secs() >= 30 {
                    let eta = bar.eta().as_secs();
                    eprintln!(
                        "epoch {}/{}: window {}/{windows}, {loss_name} {mean:.3}{m}, {tps:.0} tokens/s, epoch ends in {}:{:02}:{:02}",
                        st.epoch + 1,
                        cfg.epochs,
                        st.window,
                        eta / 3600,
                        eta / 60 % 60,
                        eta % 60
                    );
                    t_report = Instant::now();
                }
            }
            if cfg.save_every.is_some_and(|k| st.step.is_multiple_of(k)) && st.window < windows {
                st.seconds = wall();
                save(&cfg.out, &w, &st, &opt, &state, &rng, &records)?;
            }
        }
        bar.finish_and_clear();
        report(&mut st, &mut records, lr, wall());
        let secs = t_epoch.elapsed().as_secs_f64();
        let t_valid = Instant::now();
        valid = evaluate(&model, &w, &corpus.valid, cfg.eval_batch_size, cfg.bptt, carry, None, !quiet);
        check_valid(&valid, diverged_above, st.step, &cfg.out)?;
        let train_mean = st.epoch_nll / st.epoch_tokens.max(1) as f64;
        let train_desc = describe_train(st.epoch_nll, st.epoch_tokens);
        say(format!(
            "epoch {}/{}: train {}, valid {} ({} tokens), lr {lr:.3e}, {:.0} tokens/s, {:.0}s (+{:.0}s validation)",
            st.epoch + 1,
            cfg.epochs,
            train_desc,
            valid.describe(word_level),
            valid.tokens,
            (st.window - first_window) as f64 * tokens_per_window / secs.max(1e-9),
            secs,
            t_valid.elapsed().as_secs_f64()
        ));
        st.history.push(EpochRecord {
            epoch: st.epoch + 1,
            step: st.step,
            train_nll: train_mean,
            valid_nll: valid.mean(),
            valid_tokens: valid.tokens,
            lr,
            seconds: secs,
        });
        records.push(Record::valid(st.step, st.epoch + 1, st.tokens, wall(), valid.mean(), word_level));
        st.epoch += 1;
        st.window = 0;
        st.epoch_nll = 0.0;
        st.epoch_tokens = 0;
        state = model.initial_state(batch);
        st.seconds = wall();
        save(&cfg.out, &w, &st, &opt, &state, &rng, &records)?;
    }
    if st.finished {
        // Stopped by --max-steps inside an epoch: measure what was reached and save it.
        let secs = t_run.elapsed().as_secs_f64();
        let trained = st.step - start_step;
        let lr = scheduled_lr(cfg.lr, cfg.lr_decay, cfg.decay_start, st.epoch);
        report(&mut st, &mut records, lr, wall());
        valid = evaluate(&model, &w, &corpus.valid, cfg.eval_batch_size, cfg.bptt, carry, None, !quiet);
        check_valid(&valid, diverged_above, st.step, &cfg.out)?;
        // A run resumed where it had already stopped measures the same point again: once is enough.
        if !records.iter().any(|r| matches!(r, Record::Valid { step, .. } if *step == st.step)) {
            records.push(Record::valid(st.step, st.epoch + 1, st.tokens, wall(), valid.mean(), word_level));
        }
        say(format!(
            "stopped after {} steps (epoch {}, window {}/{}): train {} (this epoch so far), valid {} ({} tokens); {:.0} tokens/s over {trained} steps",
            st.step,
            st.epoch + 1,
            st.window,
            windows,
            describe_train(st.epoch_nll, st.epoch_tokens),
            valid.describe(word_level),
            valid.tokens,
            trained as f64 * tokens_per_window / secs.max(1e-9),
        ));
        st.seconds = wall();
        save(&cfg.out, &w, &st, &opt, &state, &rng, &records)?;
    } else if valid.tokens == 0 {
        valid = evaluate(&model, &w, &corpus.valid, cfg.eval_batch_size, cfg.bptt, carry, None, !quiet);
    }
    say(format!("checkpoint: {} ({:.0}s in all)", cfg.out.display(), t_run.elapsed().as_secs_f64()));
    Ok(Outcome { lm: Lm { model, w, tok: corpus.tokenizer }, valid, unigram, history: st.history })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_paper_configs_parse_and_validate() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "toml") {
                let c = TrainConfig::from_toml(&p).unwrap();
                c.validate().unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
                n += 1;
            }
        }
        assert!(n >= 5);
    }

    #[test]
    fn unigram_baseline_is_the_add_one_cross_entropy() {
        // counts with add-one: [3, 2, 1] over 6 → p = 1/2, 1/3, 1/6
        let s = unigram_score(&[0, 0, 1], &[2, 0, 1], 3);
        assert_eq!(s.tokens, 2);
        assert!((s.nll - (2f64.ln() + 3f64.ln())).abs() < 1e-12);
    }
}
