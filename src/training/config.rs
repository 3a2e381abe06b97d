//! The options of a training run, declared once for the command line, TOML files and the
//! checkpoint's `trainer.json`.

use super::optim::OptimizerKind;
use crate::data::{DataSpec, Format, Level};
use crate::kernels::runtime::{OnDevice, Runtime};
use crate::model::{layer_configs, Dropout, Init};
use crate::cells::registry::{self, reads_tokens, CellOptions};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    #[arg(long, default_value = "ran-tanh", value_parser = clap::builder::PossibleValuesParser::new(registry::names()))]
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
    /// Carry the state across windows (false: every training window starts from the initial
    /// state; validation then reads the split both streaming, as eval does, and window by
    /// window) [default: false for ran-identity, and for ran-tanh unless
    /// --rec-dropout is on (docs/lm.md); true for every other cell; recorded in trainer.json]
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
    /// Rescale gradients whose global norm exceeds this (0: not rescaled, for a value clip alone)
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
    #[command(flatten)]
    #[serde(flatten)]
    pub on: OnDevice,
    /// Checkpoint directory
    #[arg(long, default_value = "runs/default")]
    pub out: PathBuf,
    /// Also checkpoint every N steps (besides every epoch's end) [default: none]
    #[arg(long, value_name = "N")]
    pub save_every: Option<u64>,
    /// Also validate every N optimizer steps inside an epoch, for the curves (0: only at each
    /// epoch's end) [default: about five points a run, every fifth of its steps; none from 5
    /// epochs on, whose epoch ends give them]
    #[arg(long, value_name = "N")]
    pub valid_every: Option<u64>,
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
pub const RESUMABLE: &[&str] = &["epochs", "max_steps", "threads", "precision", "device", "out", "save_every", "valid_every", "on_divergence", "sample_length"];

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
    let v = serde_json::Value::deserialize(d)?;
    let size = |x: &serde_json::Value| x.as_u64().filter(|&n| n > 0).map(|n| n as usize);
    let sizes = match &v {
        serde_json::Value::Array(xs) if !xs.is_empty() => xs.iter().map(size).collect::<Option<Vec<usize>>>(),
        x => size(x).map(|n| vec![n]),
    };
    sizes.ok_or_else(|| serde::de::Error::custom(format!("expected a positive whole number or a list of them (e.g. 256, or [650, 650]), got {v}")))
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
        // TOML has nan and inf, which JSON (the configuration's next form) turns into null.
        if let Some((k, v)) = table.iter().find(|(_, v)| v.as_float().is_some_and(|x| !x.is_finite())) {
            bail!("{}: {k} = {v} is not a finite number", path.display());
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

    /// The configuration a JSON object describes (missing keys: the defaults). An unknown key
    /// is refused with the known ones listed; a value of the wrong kind, naming its setting.
    pub fn from_value(v: serde_json::Value) -> Result<TrainConfig> {
        if let serde_json::Value::Object(m) = &v {
            let mut known = Self::keys();
            if let Some(k) = m.keys().find(|k| !known.contains(k)) {
                known.sort();
                bail!("unknown setting '{k}'; the settings are: {}", known.join(", "));
            }
            // The first setting whose value does not read, alone over the defaults: serde's own
            // message does not say which it was.
            for (k, x) in m {
                let mut one = serde_json::to_value(TrainConfig::default())?;
                one[k] = x.clone();
                if let Err(e) = serde_json::from_value::<TrainConfig>(one) {
                    bail!("setting '{k}' = {x}: {e}");
                }
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

    /// The steps between validations inside an epoch of `windows` steps (None: only at epoch
    /// ends): `--valid-every`, or about five points a run (each validation of the embedded
    /// Brown corpus costs about 3 % of its epoch, measured by the main job).
    pub fn valid_every_steps(&self, windows: usize) -> Option<u64> {
        let every = match self.valid_every {
            Some(n) => n,
            None if self.epochs >= 5 => 0,
            None => {
                let steps = (self.epochs as u64).saturating_mul(windows as u64).min(self.max_steps.unwrap_or(u64::MAX));
                steps.div_ceil(5)
            }
        };
        (every > 0).then_some(every)
    }

    pub fn format(&self) -> Format {
        Format::or_default(self.format, self.data.is_some())
    }

    pub fn level(&self) -> Level {
        Level::or_default(self.level, self.format())
    }

    /// Whether the state is carried across windows: as set, or the cell's default.
    pub fn carry_state(&self) -> bool {
        self.carry_state.unwrap_or_else(|| crate::cells::registry::carries_state_by_default(&self.cell, self.rec_dropout))
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
        Ok(Dropout { p: self.dropout, recurrent: self.rec_dropout, variational: self.dropout_kind == DropoutKind::Variational, shard: None })
    }

    /// The gradient clipping a step applies: (the global norm, the value), `None` for none
    /// (a norm of 0 turns the norm's off: the RDA paper clips values alone).
    pub fn clipping(&self) -> (Option<f64>, Option<f64>) {
        (self.clip_norm.filter(|&c| c > 0.0), self.clip_value)
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
        self.on.device.check(self.runtime.precision)?;
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
        if self.clip_norm.is_some_and(|c| !(c >= 0.0 && c.is_finite())) {
            bail!("clip_norm must be a finite number >= 0 (0: no norm clipping), got {}", self.clip_norm.unwrap_or_default());
        }
        if self.clip_value.is_some_and(|c| !(c > 0.0 && c.is_finite())) {
            bail!("clip_value must be a positive finite number, got {}", self.clip_value.unwrap_or_default());
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

