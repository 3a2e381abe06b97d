//! `rnnlens eval` and `rnnlens sample`: what is done with a trained checkpoint. Evaluation
//! decides what to score (a file, or a split of the corpus the run recorded) and how (a model
//! trained with its state reset every window is scored the same way), then scores it with
//! [`crate::model::score`].

pub mod sample;

use crate::model::engine::Engine;
use crate::data::checkpoint;
use crate::data::{self, Level};
use crate::isan_fast::table;
use crate::kernels::runtime::Runtime;
use crate::model::lm::Lm;
use crate::model::run::RunRecord;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// A split of the corpus a run recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Split {
    Valid,
    Test,
}

/// The options of `rnnlens eval`.
#[derive(Clone, Debug, clap::Args)]
pub struct EvalOptions {
    /// Checkpoint directory written by `rnnlens train`
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The split of the corpus the checkpoint was trained on (recorded in trainer.json) to
    /// score [default: test, unless --input is given]
    #[arg(long, value_enum, conflicts_with = "input")]
    pub split: Option<Split>,
    /// Any text file, tokenized as the checkpoint's corpus was [default: none: the --split]
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Parallel streams; 1 is the exact streaming evaluation, more approximate it (each
    /// stream's first token unscored, its state starting from the initial one) [default: 1]
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Window length for carrying the state (does not change the result) [default: 100]
    #[arg(long)]
    pub bptt: Option<usize>,
    /// Start from the initial state every N tokens instead of carrying the state through the
    /// whole text (a measure of its own, named in the output; the papers' is the streaming
    /// one) [default: none: the streaming evaluation]
    #[arg(long, value_name = "N")]
    pub reset_every: Option<usize>,
    /// Write ln p of every scored token to this file, a line each: the number, a tab, the token
    /// (escaped as in vocab.txt) (needs batch size 1)
    /// [default: none]
    #[arg(long)]
    pub per_token: Option<PathBuf>,
    /// Task models (`rnnlens task`): score this many batches of 100 fresh sequences from the
    /// task's generator (the MNIST tasks: every test image of --data instead) [default: 10]
    #[arg(long)]
    pub batches: Option<usize>,
    /// Task models: the seed of the fresh sequences [default: the training seed + 2,000,000,
    /// a stream training never drew from]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Task models of the MNIST tasks: the directory with the IDX files (scripts/mnist.sh)
    /// [default: none]
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub runtime: Runtime,
    #[command(flatten)]
    pub on: crate::kernels::runtime::OnDevice,
    /// isan, isan-nobias, linear: consume the input through a table of the composed affine maps
    /// of the N most frequent words (with their space) of the training split, and report the time
    /// against character stepping and the agreement of the states; a jump skips the predictions
    /// inside a word, so no perplexity is reported [default: none: character stepping]
    #[arg(long, value_name = "N")]
    pub isan_table: Option<usize>,
}

impl EvalOptions {
    /// `eval --checkpoint DIR --split SPLIT` with every other option at its default.
    pub fn of_split(dir: &std::path::Path, split: Split, runtime: Runtime, on: crate::kernels::runtime::OnDevice) -> EvalOptions {
        EvalOptions {
            checkpoint: dir.to_path_buf(),
            split: Some(split),
            input: None,
            batch_size: None,
            bptt: None,
            reset_every: None,
            per_token: None,
            batches: None,
            seed: None,
            data: None,
            runtime,
            on,
            isan_table: None,
        }
    }
}

/// The sequences a task model's evaluation draws per batch (the papers' batch).
pub const TASK_EVAL_BATCH: usize = 100;

/// The flags of `flags` that were given.
fn given<'a>(flags: &[(&'a str, bool)]) -> Vec<&'a str> {
    flags.iter().filter(|(_, g)| *g).map(|(f, _)| *f).collect()
}

/// `eval` of a task model: the task's measure on fresh sequences of its generator.
fn eval_task(o: &EvalOptions) -> Result<String> {
    use crate::tasks::{TaskKind, TaskModel};
    let given = given(&[
        ("--input", o.input.is_some()),
        ("--split", o.split.is_some()),
        ("--per-token", o.per_token.is_some()),
        ("--reset-every", o.reset_every.is_some()),
        ("--isan-table", o.isan_table.is_some()),
        ("--batch-size", o.batch_size.is_some()),
        ("--bptt", o.bptt.is_some()),
    ]);
    if !given.is_empty() {
        bail!("{} is a sequence-task model: it is scored on fresh sequences of its task (--batches, --seed; --data for MNIST), not on a text ({} given: those are for language models)", o.checkpoint.display(), given.join(", "));
    }
    let batches = o.batches.unwrap_or(10);
    if o.on.device != crate::kernels::runtime::Device::Cpu {
        bail!("task models are scored on the CPU: leave out --device");
    }
    let tm = TaskModel::load(&o.checkpoint)?;
    let test = match (&o.data, tm.kind) {
        (Some(dir), TaskKind::SeqMnist | TaskKind::PermutedSeqMnist) => Some(crate::data::idx::load_mnist(dir, "test")?),
        (Some(_), _) => bail!("--data names MNIST images; the {} task draws its own sequences", tm.meta.name),
        _ => None,
    };
    let seed = o.seed.unwrap_or(tm.meta.seed + 2_000_000);
    let (loss, accuracy, n) = tm.evaluate(batches, TASK_EVAL_BATCH, seed, test.as_ref())?;
    let what = match (&test, &o.data) {
        (Some(_), Some(dir)) => format!("{n} test images of {}", dir.display()),
        _ => format!("{n} fresh sequences ({batches} batches of {TASK_EVAL_BATCH}, data seed {seed})"),
    };
    let acc = accuracy.map_or(String::new(), |a| format!(", accuracy {a:.4}"));
    Ok(format!(
        "{} task (length {}), {} trained {} steps: loss {loss:.6}{acc} over {what}\n",
        tm.meta.name,
        tm.meta.length,
        tm.cell(),
        tm.meta.steps_run
    ))
}

/// Evaluate as `o` says and return the report to print (notices go to stderr as they arise).
pub fn run(o: &EvalOptions) -> Result<String> {
    o.runtime.start_on(o.on.device)?;
    o.runtime.run(|| run_in(o))
}

/// [`run`] inside its precision's scope.
fn run_in(o: &EvalOptions) -> Result<String> {
    if crate::tasks::is_task_checkpoint(&o.checkpoint) {
        return eval_task(o);
    }
    let (batch_size, bptt) = (o.batch_size.unwrap_or(1), o.bptt.unwrap_or(100));
    if batch_size == 0 || bptt == 0 {
        bail!("--batch-size and --bptt must be positive");
    }
    if o.per_token.is_some() && batch_size != 1 {
        bail!("--per-token writes the exact streaming evaluation and needs --batch-size 1");
    }
    // loaded first: a folder of another kind says what it is before the flags are weighed
    let lm = Lm::load(&o.checkpoint)?;
    let given = given(&[("--batches", o.batches.is_some()), ("--seed", o.seed.is_some()), ("--data", o.data.is_some())]);
    if !given.is_empty() {
        bail!("{} is a language model: it is scored on a text (--split, --input; --batch-size, --bptt, --reset-every, --per-token), not on fresh task sequences ({} given: those are for task models)", o.checkpoint.display(), given.join(", "));
    }
    let saved = RunRecord::read(&o.checkpoint)?;
    // The tokens to score, and what they are (said with the result).
    let (stream, scored) = match (&o.input, o.split) {
        (Some(path), _) => (data::read_input_file(path, &lm.tok)?, path.display().to_string()),
        (None, split) => {
            let Some(saved) = &saved else {
                bail!("{} records no corpus (no {}); evaluate a file with --input", o.checkpoint.display(), crate::model::run::TRAINER_JSON);
            };
            let corpus = saved.load_corpus(&o.checkpoint, &lm.tok)?;
            match split.unwrap_or(Split::Test) {
                Split::Valid => (corpus.valid, "the valid split".to_string()),
                Split::Test => (corpus.test, "the test split".to_string()),
            }
        }
    };
    if stream.len() < 2 {
        bail!("the input has {} tokens; at least 2 are needed to score one", stream.len());
    }
    if o.reset_every == Some(0) {
        bail!("--reset-every must be at least 1");
    }
    // The streaming evaluation unless a reset was asked for: config.json, model.safetensors and
    // vocab.txt alone determine it (docs/checkpoint.md).
    let (carry, bptt) = match o.reset_every {
        Some(n) => (false, n),
        None => (true, bptt),
    };
    let engine = Engine::open(o.on.device, o.runtime.precision)?;
    if let Some(n) = o.isan_table {
        engine.only_cpu("--isan-table")?;
        if o.per_token.is_some() || !carry {
            bail!("--isan-table follows one state over the whole input: no --per-token, and not for a model trained with state resets");
        }
        let built = table::build_for(&o.checkpoint, &lm, &stream, n)?;
        return table::eval_report(&lm, &built, &stream);
    }
    crate::model::memory::check_scoring(&lm.model, stream.len(), batch_size, bptt, o.per_token.is_some(), "use a smaller --batch-size or --bptt, or a shorter input")?;
    let mut per = o.per_token.as_ref().map(|_| Vec::new());
    let score_with = |carry: bool, bptt: usize, per: Option<&mut Vec<f64>>| engine.score(&lm.model, &lm.w, &stream, batch_size, bptt, carry, per, true);
    let score = score_with(carry, bptt, per.as_mut())?;
    let word = lm.tok.level == Level::Word;
    // How it was measured, where it is not the exact streaming evaluation, and what a model
    // trained with resets loses when its state is carried through a whole text.
    let mut notes = Vec::new();
    if let Some(n) = o.reset_every {
        notes.push(format!("the state reset every {n} tokens, not the streaming evaluation"));
    }
    if batch_size > 1 {
        notes.push(format!("{batch_size} parallel streams: an approximation of the streaming evaluation (--batch-size 1)"));
    }
    // A model trained with its state reset every window can score worse streaming than it was
    // trained to: the readers say so next to the number.
    if let (None, Some(n)) = (o.reset_every, saved.as_ref().and_then(|s| s.reset_every)) {
        let windowed = score_with(false, n, None)?;
        if windowed.mean() < score.mean() {
            notes.push(format!(
                "trained with its state reset every {n} tokens, this model scores worse with the state carried through the text: {} with the reset (--reset-every {n})",
                windowed.describe(word)
            ));
        }
    }
    // What was scored, and at word level how much of it the vocabulary did not know.
    let unk = match lm.tok.unk_id() {
        Some(u) if word => format!(", <unk> {:.2}% of them", 100.0 * stream[1..].iter().filter(|&&t| t == u).count() as f64 / (stream.len() - 1) as f64),
        _ => String::new(),
    };
    if let (Some(path), Some(lp)) = (&o.per_token, per) {
        // `ln p`, a tab, the token it scores (escaped as vocab.txt writes it): tokens 2..N.
        let mut text = String::with_capacity(lp.len() * 16);
        let byte = lm.tok.level == Level::Byte;
        for (v, &id) in lp.iter().zip(&stream[1..]) {
            let tok = lm.tok.tokens().get(id as usize).map_or(String::from("?"), |t| checkpoint::escape_token(t, byte));
            text.push_str(&format!("{v}\t{tok}\n"));
        }
        checkpoint::write_atomic(path, text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    }
    let notes: String = notes.iter().map(|n| format!("  note: {n}\n")).collect();
    Ok(format!("{} over {} tokens (mean NLL {:.5} nats) of {scored}{unk}\n{notes}", score.describe(word), score.tokens, score.mean()))
}
