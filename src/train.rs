//! Training a language model: truncated BPTT with the state carried across windows,
//! SGD or Adam, clipping, the papers' learning-rate schedule, validation after every epoch,
//! checkpoints that a resumed run continues bit for bit.

use rayon::prelude::*;
use crate::checkpoint::{self, NamedTensor};
use crate::data::{self, Corpus, DataSpec, Format, Level};
use crate::eval::{batchify, evaluate, Score};
use crate::lm::{tokenizer_config, Lm};
use crate::metrics::{self, Record, LOG_EVERY};
use crate::cells::rda::Attention;
use crate::model::{layer_configs, reads_tokens, CellOptions, Dropout, Init, Model, ModelConfig, ModelWs, State};
use crate::num::Act;
use crate::optim::{clip, scheduled_lr, Optimizer, OptimizerKind};
use crate::cells::ran::RanGates;
use crate::rng::Rng;
use crate::sampled::SampledSoftmax;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Everything that defines a training run. Read from a TOML file (`--config`), overridden by
/// flags, and stored in the checkpoint's `trainer.json` so a resumed run uses the same values.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// corpus path; none = the embedded Brown corpus
    pub data: Option<PathBuf>,
    /// text | ptb | text8 | enwik8 | brown (default: brown without a path, text with one)
    pub format: Option<String>,
    /// char | byte | word (default: word, char for text8, byte for enwik8)
    pub level: Option<String>,
    /// word level: vocabulary size including `<unk>` and `<eos>`
    pub vocab_size: usize,
    pub lowercase: bool,
    pub cell: String,
    /// RAN gates read h (first paper, the default) or c (later paper's equations)
    pub ran_gates: String,
    pub gru_reset_after: bool,
    /// the generic `rda` cell: attention exp | relu | softplus | sigmoid
    pub rda_attention: String,
    /// the generic `rda` cell: hidden function identity | tanh
    pub rda_hidden_fn: String,
    /// the generic `rda` cell: output function identity | tanh
    pub rda_output_fn: String,
    /// start every layer whose cell starts from zeros from a learned state instead
    /// (`rnn.{l}.initial_state`; the cells with their own learned start ignore it)
    pub learn_initial_state: bool,
    /// ignored by cells that read the symbols themselves (isan, linear)
    pub embedding_size: usize,
    pub hidden_size: Vec<usize>,
    pub projection_size: Option<usize>,
    pub batch_size: usize,
    pub bptt: usize,
    /// carry the recurrent state from one window to the next (false: every window starts from
    /// the initial state, in training and validation); unset: the cell's default
    /// ([`crate::model::carries_state_by_default`]), recorded in `trainer.json` when training
    /// starts
    pub carry_state: Option<bool>,
    pub epochs: usize,
    pub max_steps: Option<u64>,
    pub optimizer: String,
    pub lr: f64,
    /// the schedule (SGD and Adam alike): multiply the rate by this once per epoch from
    /// `decay_start` on
    pub lr_decay: f64,
    /// first (1-based) epoch whose rate is decayed
    pub decay_start: usize,
    pub clip_norm: Option<f64>,
    pub clip_value: Option<f64>,
    /// uniform | xavier
    pub init: String,
    /// half-width of the uniform initialisation
    pub init_scale: f64,
    pub dropout: f64,
    pub rec_dropout: f64,
    /// variational (one mask per sequence) | standard (a fresh mask per step)
    pub dropout_kind: String,
    pub seed: u64,
    /// worker threads (default: every core)
    pub threads: Option<usize>,
    pub out: PathBuf,
    /// also checkpoint every N steps (besides every epoch end)
    pub save_every: Option<u64>,
    /// a non-finite loss or gradient: "stop" (the default) or "skip" the batch and halve the
    /// learning rate (at most 10 times in a row)
    pub on_divergence: String,
    pub eval_batch_size: usize,
    /// train with a sampled softmax of this many draws per step (0: the full softmax);
    /// validation always uses the full softmax
    pub sampled_softmax: usize,
    /// tokens to sample at the end of training (0: none)
    pub sample_length: usize,
}

impl Default for TrainConfig {
    /// The main job: a RAN-tanh word-level model of the embedded Brown corpus, a few minutes
    /// on two cores.
    fn default() -> Self {
        TrainConfig {
            data: None,
            format: None,
            level: None,
            vocab_size: 10000,
            lowercase: true,
            cell: "ran-tanh".into(),
            ran_gates: match CellOptions::default().ran_gates {
                RanGates::C => "c".into(),
                RanGates::H => "h".into(),
            },
            gru_reset_after: true,
            rda_attention: "exp".into(),
            rda_hidden_fn: "identity".into(),
            rda_output_fn: "tanh".into(),
            learn_initial_state: false,
            embedding_size: 256,
            hidden_size: vec![256],
            projection_size: None,
            batch_size: 32,
            bptt: 35,
            carry_state: None,
            epochs: 1,
            max_steps: None,
            optimizer: "adam".into(),
            lr: 0.002,
            lr_decay: 1.0,
            decay_start: 1,
            clip_norm: Some(5.0),
            clip_value: None,
            init: "xavier".into(),
            init_scale: 0.1,
            dropout: 0.25,
            rec_dropout: 0.0,
            dropout_kind: "variational".into(),
            seed: 1,
            threads: None,
            out: PathBuf::from("runs/default"),
            save_every: None,
            on_divergence: "stop".into(),
            eval_batch_size: 10,
            sampled_softmax: 0,
            sample_length: 60,
        }
    }
}

impl TrainConfig {
    pub fn from_toml(path: &Path) -> Result<TrainConfig> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("{}: not a valid rnnlens training configuration", path.display()))
    }

    pub fn format(&self) -> Result<Format> {
        match &self.format {
            Some(f) => f.parse(),
            None if self.data.is_some() => Ok(Format::Text),
            None => Ok(Format::Brown),
        }
    }

    pub fn level(&self) -> Result<Level> {
        match &self.level {
            Some(l) => l.parse(),
            None => Ok(match self.format()? {
                Format::Text8 => Level::Char,
                Format::Enwik8 => Level::Byte,
                _ => Level::Word,
            }),
        }
    }

    /// Whether the state is carried across windows: as set, or the cell's default.
    pub fn carry_state(&self) -> bool {
        self.carry_state.unwrap_or_else(|| crate::model::carries_state_by_default(&self.cell))
    }

    pub fn data_spec(&self) -> Result<DataSpec> {
        Ok(DataSpec {
            path: self.data.clone(),
            format: self.format()?,
            level: self.level()?,
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
        let variational = match self.dropout_kind.as_str() {
            "variational" => true,
            "standard" => false,
            o => bail!("dropout_kind must be variational or standard, got '{o}'"),
        };
        Ok(Dropout { p: self.dropout, recurrent: self.rec_dropout, variational })
    }

    pub fn init(&self) -> Result<Init> {
        match self.init.as_str() {
            "uniform" => Ok(Init::Uniform { scale: self.init_scale }),
            "xavier" => Ok(Init::Xavier),
            o => bail!("init must be uniform or xavier, got '{o}'"),
        }
    }

    pub fn cell_options(&self) -> Result<CellOptions> {
        let ran_gates = match self.ran_gates.as_str() {
            "c" => RanGates::C,
            "h" => RanGates::H,
            o => bail!("ran_gates must be c or h, got '{o}'"),
        };
        let rda_attention = Attention::parse(&self.rda_attention)
            .with_context(|| format!("rda_attention must be exp, relu, softplus or sigmoid, got '{}'", self.rda_attention))?;
        let fun = |name: &str, v: &str| match v {
            "identity" => Ok(Act::Identity),
            "tanh" => Ok(Act::Tanh),
            o => Err(anyhow::anyhow!("{name} must be identity or tanh, got '{o}'")),
        };
        Ok(CellOptions {
            ran_gates,
            gru_reset_after: self.gru_reset_after,
            rda_attention,
            rda_hidden_fn: fun("rda_hidden_fn", &self.rda_hidden_fn)?,
            rda_output_fn: fun("rda_output_fn", &self.rda_output_fn)?,
            learn_initial_state: self.learn_initial_state,
        })
    }

    /// The model's layers for a vocabulary of `vocab` symbols.
    pub fn layers(&self, vocab: usize) -> Result<Vec<crate::model::LayerConfig>> {
        let input = if reads_tokens(&self.cell) { vocab } else { self.embedding_size };
        layer_configs(&self.cell, input, &self.hidden_size, self.projection_size, self.cell_options()?)
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
        if !matches!(self.on_divergence.as_str(), "stop" | "skip") {
            bail!("on_divergence must be stop or skip, got '{}'", self.on_divergence);
        }
        self.optimizer.parse::<OptimizerKind>()?;
        self.dropout()?;
        self.init()?;
        self.cell_options()?;
        self.level()?;
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

pub fn set_threads(threads: Option<usize>) -> Result<usize> {
    let n = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if n == 0 {
        bail!("--threads must be at least 1");
    }
    crate::num::flush_denormals();
    // A second call (tests in one process) keeps the first pool; that is fine for them.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .start_handler(|_| crate::num::flush_denormals())
        .build_global();
    Ok(rayon::current_num_threads())
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

/// Train from scratch (`resume = None`) or continue the run saved in `resume`.
pub fn train(cfg: TrainConfig, resume: Option<&Path>, quiet: bool) -> Result<Outcome> {
    let (mut cfg, resumed) = match resume {
        None => (cfg, None),
        Some(dir) => {
            let st: TrainerState = checkpoint::load_json(&dir.join("trainer.json"))?;
            let mut c = st.config.clone();
            // Only the run's length and where it saves may change on resume.
            c.epochs = cfg.epochs;
            c.max_steps = cfg.max_steps;
            c.threads = cfg.threads;
            c.save_every = cfg.save_every;
            c.on_divergence = cfg.on_divergence.clone();
            c.out = cfg.out.clone();
            (c, Some((dir.to_path_buf(), st)))
        }
    };
    cfg.validate()?;
    // The cell's default becomes explicit, so trainer.json says what the run did (and `eval`
    // scores it the same way whatever later defaults are).
    let carry = cfg.carry_state();
    cfg.carry_state = Some(carry);
    let cfg = cfg;
    let threads = set_threads(cfg.threads)?;
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
    let batch = cfg.batch_size;
    let kind: OptimizerKind = cfg.optimizer.parse()?;
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
        None => w = model.init_params(cfg.init()?, &mut rng),
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
        crate::lm::save(
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
                if cfg.on_divergence != "skip" || consecutive_skips >= MAX_CONSECUTIVE_SKIPS {
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
                    eprintln!("epoch {}/{}: window {}/{windows}, {loss_name} {mean:.3}{m}, {tps:.0} tokens/s", st.epoch + 1, cfg.epochs, st.window);
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
