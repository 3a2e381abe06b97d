//! Training a language model: truncated BPTT with the state carried across windows,
//! SGD or Adam, clipping, the papers' learning-rate schedule, validation after every epoch,
//! checkpoints that a resumed run continues bit for bit.

pub mod config;
pub mod dist;
pub mod memory;
pub mod metrics;
pub mod optim;
mod run;
pub mod rundir;
pub mod sampled;
mod windows;
#[cfg(feature = "gpu")]
mod windows_gpu;

pub use config::{DropoutKind, InitScheme, OnDivergence, TrainConfig, RESUMABLE};
pub use rundir::{check_out, resume_config, EpochRecord, TrainerState};

use rayon::prelude::*;
use crate::data::checkpoint::NamedTensor;
use crate::data::{self, Corpus, Level};
use crate::model::engine::Engine;
use crate::model::score::{batchify, Score};
use crate::model::lm::{tokenizer_config, Lm};
use metrics::{Record, LOG_EVERY};
use crate::model::{Dropout, Model, ModelConfig, ModelWs, State};
use crate::cells::registry::reads_tokens;
use optim::{clip, scheduled_lr, Optimizer, OptimizerKind};
use crate::kernels::rng::Rng;
use sampled::SampledSoftmax;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::ops::ControlFlow;
use std::time::Instant;

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
            "the validation loss at step {step} is {m:.1} nats per token, far above a uniform guess's {:.2}: training diverged; nothing was written, {} (try a lower --lr)",
            diverged_above - DIVERGED_NATS,
            rundir::kept(out)
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
    // Zeroed by the pool, not the calling thread while the pool waits (docs/benchmarks.md,
    // "Gradient zeroed by the pool").
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

/// What the trainer tells its caller as it goes ([`train_observed`]).
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// After every optimizer step (or skipped batch): the window's mean loss (NaN if skipped)
    /// and the rate it used.
    Step { step: u64, epoch: usize, window: usize, windows: usize, loss: f64, lr: f64 },
    /// After every validation: the mean NLL per token of the valid split.
    Valid { step: u64, epoch: usize, nll: f64 },
}

/// A run stopped by its observer: nothing was written since the last checkpoint.
#[derive(Debug)]
pub struct Stopped {
    pub step: u64,
    pub kept: String,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "training stopped at step {} by its caller; {}", self.step, self.kept)
    }
}

impl std::error::Error for Stopped {}

/// Train a new run or continue a saved one (see [`Start`]).
pub fn train(cfg: TrainConfig, start: Start, quiet: bool) -> Result<Outcome> {
    train_observed(cfg, start, quiet, &mut |_| ControlFlow::Continue(()))
}

/// The validation every reader's way, the state carried through the split, and for a run
/// trained from the initial state every window (`!carry`) also that way: the first is the
/// run's figure; the second decides divergence, since a state that runs away over a whole
/// split is how the model reads long texts, not its training diverging (the run says so at
/// its end).
fn validate_run(engine: &Engine, (model, w, valid): (&Model, &[f32], &[u32]), cfg: &TrainConfig, carry: bool, quiet: bool) -> Result<(Score, Option<Score>)> {
    let streaming = validate(engine, model, w, valid, cfg, true, quiet)?;
    let windowed = if carry { None } else { Some(validate(engine, model, w, valid, cfg, false, quiet)?) };
    Ok((streaming, windowed))
}

/// The validation score of `w` (synced first) on the run's device: computed by rank 0 and
/// sent to the others (all of them, alone).
fn validate(engine: &Engine, model: &Model, w: &[f32], valid: &[u32], cfg: &TrainConfig, carry: bool, quiet: bool) -> Result<Score> {
    let d = dist::get();
    let mut v = [0.0, 0.0];
    if d.is_root() {
        let s = engine.score(model, w, valid, cfg.eval_batch_size, cfg.bptt, carry, None, !quiet)?;
        v = [s.nll, s.tokens as f64];
    }
    d.broadcast_f64(&mut v);
    Ok(Score { nll: v[0], tokens: v[1] as usize })
}

/// [`train`], telling `observe` of every step and validation; when it answers `Break` the run
/// stops there with the error [`Stopped`], its last checkpoint as it was (a caller's Ctrl-C, or
/// a notebook's own stopping rule).
pub fn train_observed(cfg: TrainConfig, start: Start, quiet: bool, observe: &mut dyn FnMut(&Progress) -> ControlFlow<()>) -> Result<Outcome> {
    let runtime = cfg.runtime;
    runtime.run(|| train_in(cfg, start, quiet, observe))
}

/// The run's settings, checked: a fresh run's output directory free (or to be replaced), a
/// resumed run's saved state with only resumable settings changed; the cell's default state
/// policy made explicit, so trainer.json says what the run did (and `eval` scores it the same
/// way whatever later defaults are).
fn settle(mut cfg: TrainConfig, start: Start) -> Result<(TrainConfig, Option<(std::path::PathBuf, TrainerState)>)> {
    cfg.validate()?;
    let resumed = match start {
        Start::New | Start::Replace => {
            check_out(&cfg.out, matches!(start, Start::Replace))?;
            None
        }
        Start::Resume(dir) => {
            let st = rundir::load_resumable(dir)?;
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
    cfg.carry_state = Some(cfg.carry_state());
    Ok((cfg, resumed))
}

/// The corpus, each split long enough for a batch, said with its sizes.
fn load_data(cfg: &TrainConfig, say: &dyn Fn(String)) -> Result<Corpus> {
    let t_load = Instant::now();
    let corpus: Corpus = data::load_corpus(&cfg.data_spec()?)?;
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
    Ok(corpus)
}

/// The model the settings describe for this corpus, its memory checked against the machine's
/// (and a warning where it is far larger than its data).
fn build_model(cfg: &TrainConfig, corpus: &Corpus, quiet: bool) -> Result<Model> {
    let model_of = |cfg: &TrainConfig| -> Result<Model> {
        Model::new(ModelConfig {
            format: "rnnlens".into(),
            format_version: 1,
            vocab_size: corpus.tokenizer.vocab_size(),
            tokenizer: tokenizer_config(&corpus.tokenizer),
            embedding_size: if reads_tokens(&cfg.cell) { None } else { Some(cfg.embedding_size) },
            layers: cfg.layers(corpus.tokenizer.vocab_size())?,
            cell_name: cfg.cell.clone(),
            input_size: None,
        })
    };
    let model = match model_of(cfg) {
        Ok(model) => model,
        // A size no matrix can hold: said with the memory it would need and the size that fits.
        Err(_) if model_of(&TrainConfig { hidden_size: vec![1; cfg.hidden_size.len()], ..cfg.clone() }).is_ok() => {
            return Err(memory::too_large(cfg, None, &model_of));
        }
        Err(e) => return Err(e),
    };
    if memory::check_memory(&model, cfg).is_err() {
        return Err(memory::too_large(cfg, Some(&model), &model_of));
    }
    let word_level = corpus.tokenizer.level == Level::Word;
    if let Some(warning) = memory::beyond_data(&model, cfg, corpus.train.len(), word_level).filter(|_| !quiet) {
        eprintln!("{warning}");
    }
    Ok(model)
}

/// The counters of a run that has not trained yet.
fn fresh_state(cfg: &TrainConfig) -> TrainerState {
    TrainerState {
        config: cfg.clone(),
        epoch: 0,
        window: 0,
        step: 0,
        epoch_nll: 0.0,
        epoch_tokens: 0,
        rng_seed: cfg.seed,
        rng_pos: String::new(),
        optimizer_steps: 0,
        loss_scale: None,
        history: Vec::new(),
        finished: false,
        lr_scale: 1.0,
        skipped: 0,
        tokens: 0,
        seconds: 0.0,
        log_nll: 0.0,
        log_tokens: 0,
    }
}

/// [`train_observed`] inside its precision's scope.
fn train_in(cfg: TrainConfig, start: Start, quiet: bool, observe: &mut dyn FnMut(&Progress) -> ControlFlow<()>) -> Result<Outcome> {
    let mut run = run::Run::start(cfg, start, quiet)?;
    while run.going() {
        run.epoch(observe)?;
    }
    run.finish(observe)
}

/// Why a window's result cannot be applied (`None` where it can): a finite gradient with a
/// loss far above a uniform guess (naming the layer whose output grew the most), a non-finite
/// gradient (naming its tensor where the gradient is on the host), or a non-finite loss
/// (naming the first layer whose output went non-finite, else the logits).
fn diagnose_window(model: &Model, (nll, mean_loss, norm): (f64, f64, Option<f64>), diverged_above: f64, on_host: bool, g: &[f32], ws: &ModelWs<f32>) -> Option<String> {
    match norm {
        Some(norm) if norm.is_finite() && mean_loss <= diverged_above => None,
        Some(norm) if norm.is_finite() => {
            let peak = |l: usize| ws.ys.get(l).map_or(0f32, |y| y.iter().fold(0f32, |m, v| m.max(v.abs())));
            let (l, y) = (0..model.cells.len()).map(|l| (l, peak(l))).fold((0, 0f32), |a, b| if b.1 > a.1 { b } else { a });
            Some(format!(
                "the training loss reached {mean_loss:.1} nats per token, far above a uniform guess's {:.2} (ln of the vocabulary size), with outputs of layer {l} ({}) up to {y:.3e}: training diverged",
                diverged_above - DIVERGED_NATS,
                model.config.layers[l].cell
            ))
        }
        Some(_) if !on_host => Some("the gradient became non-finite".to_string()),
        Some(_) => {
            let bad = model.slots.iter().find(|s| g[s.range()].iter().any(|x| !x.is_finite()));
            Some(format!("the gradient of {} became non-finite", bad.map_or("a parameter", |s| s.name.as_str())))
        }
        None => {
            let layer = (0..model.cells.len()).find(|&l| ws.ys.get(l).is_some_and(|y| y.iter().any(|x| !x.is_finite())));
            Some(match layer {
                Some(l) => format!("the training loss became {nll}: the output of layer {l} ({}) is non-finite", model.config.layers[l].cell),
                None => format!("the training loss became {nll}: the logits overflowed"),
            })
        }
    }
}

/// The saved run in `dir` where it stopped, checked against the model and vocabulary the data
/// gives now: its weights, and (into `opt` and `state`) its optimizer's moments and this
/// rank's rows of the carried state; then its generator, counters and history. Says where it
/// resumes and what changed since (device, precision).
#[allow(clippy::type_complexity)]
fn resume_saved(
    (dir, saved): (&Path, &rundir::TrainerState),
    cfg: &TrainConfig,
    model: &Model,
    tokenizer: &data::Tokenizer,
    (opt, state): (&mut Optimizer, &mut State<f32>),
    batch: usize,
    say: &dyn Fn(String),
) -> Result<(Vec<f32>, Rng, rundir::TrainerState, Vec<Record>)> {
    let lm = Lm::load(dir)?;
    if lm.tok.tokens() != tokenizer.tokens() {
        bail!("{}: the vocabulary differs from the one the data gives now; was the corpus changed?", dir.display());
    }
    let mut saved_config = lm.model.config.clone();
    // a run started before `tokenizer.split` existed: its corpus gives the rule now
    saved_config.tokenizer.split = saved_config.tokenizer.split.or_else(|| model.config.tokenizer.split.clone());
    if saved_config != model.config {
        bail!("{}: config.json does not match trainer.json's configuration", dir.display());
    }
    let w = lm.w;
    let mut expected = Vec::new();
    if cfg.optimizer == OptimizerKind::Adam {
        expected.push(("optimizer.m".to_string(), vec![model.n_params]));
        expected.push(("optimizer.v".to_string(), vec![model.n_params]));
    }
    // Every rank's rows were saved.
    for (l, cell) in model.cells.iter().enumerate() {
        expected.push((format!("state.{l}"), vec![batch, cell.sizes().state]));
    }
    let mut data = rundir::load_tensors(dir, &expected)?.into_iter();
    if cfg.optimizer == OptimizerKind::Adam {
        opt.m = data.next().unwrap_or_default();
        opt.v = data.next().unwrap_or_default();
    }
    // The saved state holds every row; this rank keeps its own.
    for (s, cell) in state.layers.iter_mut().zip(&model.cells) {
        *s = dist::get().own_rows(&data.next().unwrap_or_default(), &cell.state_blocks(), batch);
    }
    state.fresh = saved.window == 0;
    opt.t = saved.optimizer_steps;
    opt.loss_scale = saved.loss_scale;
    let pos: u128 = saved.rng_pos.parse().with_context(|| format!("{}: bad rng_pos", dir.join(rundir::TRAINER_JSON).display()))?;
    let rng = Rng::restore(saved.rng_seed, pos);
    let mut st = saved.clone();
    st.config = cfg.clone();
    st.finished = false;
    if st.tokens == 0 {
        // A checkpoint from before the counter: every step took one window.
        st.tokens = st.step * (cfg.bptt * batch) as u64;
    }
    let mut records = metrics::read(dir)?;
    // Written with the checkpoint, so nothing lies past it; keep it that way regardless.
    records.retain(|r| r.step() <= st.step);
    say(format!("resuming {} at epoch {}, step {}", dir.display(), st.epoch + 1, st.step));
    if saved.config.on != cfg.on {
        say(format!("the run trained on the {} until now and goes on on the {}", saved.config.on.device.name(), cfg.on.device.name()));
    }
    let (from, to) = (saved.config.runtime.precision, cfg.runtime.precision);
    if from != to {
        say(format!("the run trained in {} until now and goes on in {} (metrics.jsonl records where)", from.name(), to.name()));
        records.push(Record::Precision { step: st.step, epoch: st.epoch + 1, tokens: st.tokens, seconds: records.last().map_or(0.0, |r| r.seconds()), from, to });
    }
    if let Some(m) = cfg.max_steps.filter(|&m| st.step >= m) {
        say(format!("the run has reached its --max-steps {m}; give a larger --max-steps to go on"));
    } else if st.epoch >= cfg.epochs {
        say(format!("the run has trained its {} epochs; give a larger --epochs to go on", cfg.epochs));
    }
    Ok((w, rng, st, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::runtime::Runtime;

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

    /// An observer sees every step and validation in order, and a `Break` stops the run there
    /// with `Stopped`, keeping what was saved before: nothing before the first epoch's end, the
    /// whole first epoch after its validation.
    #[test]
    fn an_observer_sees_every_step_and_can_stop_the_run() {
        let tmp = tempfile::tempdir().unwrap();
        let text: String = (0..400).map(|i| format!("line {} of the {} text\n", i % 17, ["first", "second", "third"][i % 3])).collect();
        let data = tmp.path().join("text.txt");
        std::fs::write(&data, text).unwrap();
        let cfg = |out: &str| TrainConfig {
            data: Some(data.clone()),
            level: Some(Level::Char),
            cell: "gru".into(),
            hidden_size: vec![8],
            embedding_size: 4,
            batch_size: 4,
            bptt: 10,
            epochs: 2,
            sample_length: 0,
            out: tmp.path().join(out),
            runtime: Runtime { threads: Some(1), ..Runtime::default() },
            ..Default::default()
        };
        let mut seen = Vec::new();
        let err = train_observed(cfg("a"), Start::New, true, &mut |p| {
            seen.push(*p);
            if matches!(p, Progress::Step { step: 5, .. }) { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        })
        .err()
        .expect("stopped");
        let stopped = err.downcast_ref::<Stopped>().expect("a Stopped error");
        assert_eq!(stopped.step, 5);
        assert!(stopped.to_string().contains("no checkpoint had been saved"), "{stopped}");
        assert!(!tmp.path().join("a").join("trainer.json").exists());
        assert_eq!(seen.iter().map(|p| match p { Progress::Step { step, .. } => *step, _ => 0 }).collect::<Vec<_>>(), (1..=5).collect::<Vec<_>>());

        let mut steps = 0;
        let err = train_observed(cfg("b"), Start::New, true, &mut |p| match p {
            Progress::Step { .. } => {
                steps += 1;
                ControlFlow::Continue(())
            }
            Progress::Valid { epoch, nll, .. } => {
                assert_eq!(*epoch, 1);
                assert!(nll.is_finite());
                ControlFlow::Break(())
            }
        })
        .err()
        .expect("stopped");
        assert!(err.to_string().contains("is intact"), "{err}");
        let saved = rundir::load_state(&tmp.path().join("b")).unwrap();
        assert_eq!((saved.epoch, saved.step), (1, steps));
    }

    #[test]
    fn unigram_baseline_is_the_add_one_cross_entropy() {
        // counts with add-one: [3, 2, 1] over 6 → p = 1/2, 1/3, 1/6
        let s = unigram_score(&[0, 0, 1], &[2, 0, 1], 3);
        assert_eq!(s.tokens, 2);
        assert!((s.nll - (2f64.ln() + 3f64.ln())).abs() < 1e-12);
    }
}
