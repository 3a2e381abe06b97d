//! `rnnlens bench`: training and inference throughput of each cell at fixed shapes, and how
//! close the run's GEMMs come to the same GEMMs timed alone (see `docs/benchmarks.md`).
//!
//! A training step is exactly the trainer's (`training::window_gradient` then `Optimizer::step`)
//! or, for the addition task, `rnnlens task addition`'s (`tasks::task_step`); inference is the
//! forward pass and the loss. Inputs are random tokens or task batches from a fixed seed, so no
//! corpus is needed and every run sees the same data.

use crate::kernels::gemm::{self, profile};
use crate::kernels::limits::{bf16_limit_gflops, f32_limit_gflops, Probe};
use crate::model::{layer_configs, Init, Model, ModelConfig, ModelWs, State, TokenizerConfig};
use crate::cells::registry::{self, reads_tokens, CellOptions};
use crate::training::optim::{Optimizer, OptimizerKind};
use crate::kernels::f64::median;
use crate::kernels::rng::Rng;
use crate::kernels::runtime::Device;
use crate::tasks::{self, TaskConfig, TaskKind, TaskWs};
use crate::training::{self, TrainConfig};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[cfg(feature = "gpu")]
mod gpu;

/// The benchmark's shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// character LM: vocabulary 27, embedding 128, one layer of 512, batch 64, window 100
    C1,
    /// word LM: vocabulary 10,000, embedding 256, one layer of 1024, batch 32, window 35
    C2,
    /// the RDA paper's addition task: 2 inputs, 250 units, batch 100, length 1000
    C3,
    /// ISAN character LM: 27 symbols, 216 units, batch 64, window 100
    Isan,
    /// the first RAN paper's large PTB model: vocabulary 10,000, embedding 1500, two layers of
    /// 1500, batch 20, window 35
    Ptb,
    /// the same at batch 128
    Ptb128,
    /// the RDA paper's sequential MNIST (its tables 3 and 4): 1 pixel a step, 250 units, 10
    /// classes, batch 100, length 784
    Mnist,
    /// the first RAN paper's medium PTB model: vocabulary 10,000, embedding 650, two layers of
    /// 650, batch 20, window 35
    Ptb650,
    /// the first RAN paper's Text8 model on Brown characters: 59 symbols, embedding 128, layers
    /// of 1024, 1024 and 2048, batch 128, window 100
    Text8,
    /// the RDA paper's Wikipedia model (its table 7) on Brown characters: 59 symbols, embedding
    /// 64, one layer of 1800, batch 100, window 250
    Wiki,
}

pub const SHAPE_NAMES: &[&str] = &["c1", "c2", "c3", "isan", "ptb", "ptb128", "mnist", "ptb650", "text8", "wiki"];

/// The cells run when `--cells` is not given (each on the shapes it fits, see [`Shape::fits`]).
pub const DEFAULT_CELLS: &[&str] = &["lstm", "gru", "rnn", "ran-tanh", "rwa", "rda-exp-tanh", "rda-sigmoid-id", "isan"];

/// Seed of the random inputs and of the initial weights.
const SEED: u64 = 1;

impl Shape {
    pub fn parse(s: &str) -> Result<Shape> {
        Ok(match s {
            "c1" => Shape::C1,
            "c2" => Shape::C2,
            "c3" => Shape::C3,
            "isan" => Shape::Isan,
            "ptb" => Shape::Ptb,
            "ptb128" => Shape::Ptb128,
            "mnist" => Shape::Mnist,
            "ptb650" => Shape::Ptb650,
            "text8" => Shape::Text8,
            "wiki" => Shape::Wiki,
            _ => bail!("unknown shape '{s}'; the shapes are: {}", SHAPE_NAMES.join(", ")),
        })
    }

    pub fn name(self) -> &'static str {
        SHAPE_NAMES[self as usize]
    }

    /// The shape's own `(batch, window)`; a task shape's window is its task's length.
    pub fn size(self) -> (usize, usize) {
        match self {
            Shape::C1 | Shape::Isan => (64, 100),
            Shape::C2 => (32, 35),
            Shape::C3 => (100, tasks::ADDITION_LEN),
            Shape::Mnist => (100, TaskKind::SeqMnist.default_length()),
            Shape::Ptb | Shape::Ptb650 => (20, 35),
            Shape::Ptb128 => (128, 35),
            Shape::Text8 => (128, 100),
            Shape::Wiki => (100, 250),
        }
    }

    /// A language-model shape's `(vocabulary, embedding, hidden sizes, tokenizer level)`; the
    /// ISAN's reads its symbols (no embedding).
    pub fn lm(self) -> (usize, usize, Vec<usize>, &'static str) {
        match self {
            Shape::C1 => (27, 128, vec![512], "char"),
            Shape::C2 => (10_000, 256, vec![1024], "word"),
            Shape::Ptb | Shape::Ptb128 => (10_000, 1500, vec![1500, 1500], "word"),
            Shape::Ptb650 => (10_000, 650, vec![650, 650], "word"),
            Shape::Text8 => (59, 128, vec![1024, 1024, 2048], "char"),
            Shape::Wiki => (59, 64, vec![1800], "char"),
            Shape::C3 | Shape::Mnist | Shape::Isan => (27, 0, vec![216], "char"),
        }
    }

    /// The language model of this shape for `cell`.
    pub fn model(self, cell: &str) -> Result<Model> {
        let (vocab, emb, hidden, level) = self.lm();
        let symbols = reads_tokens(cell);
        let layers = layer_configs(cell, if symbols { vocab } else { emb }, &hidden, None, CellOptions::default())?;
        Model::new(ModelConfig {
            format: "rnnlens".into(),
            format_version: 1,
            vocab_size: vocab,
            tokenizer: TokenizerConfig { level: level.into(), normalize: "none".into(), split: None },
            embedding_size: (!symbols).then_some(emb),
            layers,
            cell_name: cell.into(),
            input_size: None,
        })
    }

    /// Cells that switch on the input symbol (ISAN) run on the `isan` shape only, and every other
    /// cell on the rest: the language-model shapes have an embedding, the task real inputs.
    pub fn fits(self, cell: &str) -> bool {
        reads_tokens(cell) == (self == Shape::Isan)
    }

    /// A sequence task's shape: its task and length (the window, whatever `--window` says).
    pub fn task(self) -> Option<(TaskKind, usize)> {
        match self {
            Shape::C3 => Some((TaskKind::Addition, tasks::ADDITION_LEN)),
            Shape::Mnist => Some((TaskKind::SeqMnist, TaskKind::SeqMnist.default_length())),
            _ => None,
        }
    }
}

/// A task shape's batch of `batch` sequences, drawn by the task's generator from `rng`. The
/// MNIST shape's images are random pixels and labels: a step's work does not depend on them.
fn task_batch(kind: TaskKind, length: usize, batch: usize, rng: &mut Rng) -> Result<tasks::Batch> {
    if kind != TaskKind::SeqMnist {
        return tasks::generate(kind, length, batch, rng, None, &[], tasks::Markers::Halves);
    }
    let n = 64;
    let pixels: Vec<u8> = (0..n * 784).map(|_| rng.below(256) as u8).collect();
    let labels: Vec<u8> = (0..n).map(|_| rng.below(10) as u8).collect();
    tasks::generate(kind, length, batch, rng, Some((&tasks::Images { pixels: &pixels, labels: &labels }, &[])), &[], tasks::Markers::Halves)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Train,
    Infer,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Infer => "infer",
        }
    }

    /// `train`, `infer` or `both`.
    pub fn parse_list(s: &str) -> Result<Vec<Mode>> {
        Ok(match s {
            "train" => vec![Mode::Train],
            "infer" => vec![Mode::Infer],
            "both" => vec![Mode::Train, Mode::Infer],
            _ => bail!("unknown mode '{s}'; use train, infer or both"),
        })
    }
}

pub struct Options {
    pub shapes: Vec<Shape>,
    pub cells: Vec<String>,
    pub modes: Vec<Mode>,
    /// timed steps (the median is reported)
    pub steps: usize,
    /// untimed steps before them
    pub warmup: usize,
    pub threads: Option<usize>,
    /// override the shapes' batch size (quick checks; the figures are then not comparable)
    pub batch: Option<usize>,
    /// override the language-model shapes' window (c3 keeps the task's length)
    pub window: Option<usize>,
    /// time the recorded GEMM shapes alone for the peak figure
    pub peak: bool,
    pub csv: Option<PathBuf>,
    pub quiet: bool,
    /// the engine timed
    pub device: crate::kernels::runtime::Device,
    /// the precision of the products (the CPU engine)
    pub precision: crate::kernels::precision::Precision,
}

/// One (shape, cell, mode) measurement: a row of the table and of the CSV.
#[derive(Clone, Debug)]
pub struct Row {
    /// `rnnlens` (the CPU engine) or `rnnlens-gpu`
    pub implementation: &'static str,
    pub shape: Shape,
    pub cell: String,
    pub mode: Mode,
    pub threads: usize,
    pub batch: usize,
    pub window: usize,
    pub tokens_per_s: f64,
    pub step_ms_median: f64,
    /// GEMM floating-point operations of one step
    pub gemm_flops: f64,
    pub achieved_gflops: f64,
    /// GFLOP/s of the same GEMM calls, each timed alone (None with `peak` off)
    pub peak_gflops: Option<f64>,
    /// processes training together (`mpirun -np`; `batch` is the global batch)
    pub ranks: usize,
    /// the median step's time summing the gradients over the ranks (training under MPI)
    pub allreduce_ms_median: Option<f64>,
    /// the products' time where they ran, median of the timed steps (CPU engine)
    pub prod_in_step_ms: Option<f64>,
}

pub const CSV_HEADER: &str =
    "impl,shape,cell,mode,threads,batch,window,tokens_per_s,step_ms_median,gemm_gflop_per_step,achieved_gflops,peak_gflops,ranks,allreduce_ms_median,prod_in_step_ms";

impl Row {
    /// A row of `implementation` measured at `secs` a step of `flops` GEMM operations (one
    /// process, no peak figure: the caller adds what it measured of those).
    pub(crate) fn timed(implementation: &'static str, (shape, cell, mode): (Shape, &str, Mode), (batch, window): (usize, usize), secs: f64, flops: f64) -> Row {
        Row {
            implementation,
            shape,
            cell: cell.to_string(),
            mode,
            threads: 0,
            batch,
            window,
            tokens_per_s: (batch * window) as f64 / secs,
            step_ms_median: secs * 1e3,
            gemm_flops: flops,
            achieved_gflops: flops / secs / 1e9,
            peak_gflops: None,
            ranks: 1,
            allreduce_ms_median: None,
            prod_in_step_ms: None,
        }
    }

    pub fn csv(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{:.1},{:.3},{:.4},{:.2},{},{},{},{}",
            self.implementation,
            self.shape.name(),
            self.cell,
            self.mode.name(),
            self.threads,
            self.batch,
            self.window,
            self.tokens_per_s,
            self.step_ms_median,
            self.gemm_flops / 1e9,
            self.achieved_gflops,
            self.peak_gflops.map_or(String::new(), |p| format!("{p:.2}")),
            self.ranks,
            self.allreduce_ms_median.map_or(String::new(), |r| format!("{r:.3}")),
            self.prod_in_step_ms.map_or(String::new(), |r| format!("{r:.3}"))
        )
    }

    pub(crate) fn table_line(&self) -> String {
        // The step's products timed alone, what the step spends beyond them (the cells'
        // pointwise work, the loss, the optimizer, and products slower in place than alone), and
        // the step as a multiple of its products (issue 40's measure: 1.15 is its goal). "in
        // step" is the products' time where they ran (median of the timed steps): beside "prod ms" it
        // says how much of "other ms" is products slower in place, and the step beyond it is
        // the pointwise work, the loss and the optimizer.
        let (peak, pct, prod, rest, ratio) = match self.peak_gflops {
            Some(p) => {
                let prod = self.gemm_flops / p / 1e6;
                let (pct, ratio) = (format!("{:.0}%", 100.0 * self.achieved_gflops / p), format!("{:.2}", self.step_ms_median / prod));
                (format!("{p:.1}"), pct, format!("{prod:.1}"), format!("{:.1}", self.step_ms_median - prod), ratio)
            }
            None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
        };
        let reduce = match self.allreduce_ms_median {
            Some(r) => format!("  all-reduce {r:.2} ms ({:.0}% of the step)", 100.0 * r / self.step_ms_median),
            None => String::new(),
        };
        let in_step = self.prod_in_step_ms.map_or("-".into(), |p| format!("{p:.1}"));
        format!(
            "{:<5} {:<15} {:<5} {:>5} {:>6} {:>11.0} {:>10.2} {:>10.3} {:>9.1} {:>9} {:>6} {:>10} {:>10} {:>10} {:>9}{reduce}",
            self.shape.name(),
            self.cell,
            self.mode.name(),
            self.batch,
            self.window,
            self.tokens_per_s,
            self.step_ms_median,
            self.gemm_flops / 1e9,
            self.achieved_gflops,
            peak,
            pct,
            prod,
            in_step,
            rest,
            ratio
        )
    }
}

pub(crate) fn table_header() -> String {
    format!(
        "{:<5} {:<15} {:<5} {:>5} {:>6} {:>11} {:>10} {:>10} {:>9} {:>9} {:>6} {:>10} {:>10} {:>10} {:>9}",
        "shape", "cell", "mode", "batch", "window", "tokens/s", "step ms", "GFLOP/step", "GFLOP/s", "peak", "%peak", "prod ms", "in step", "other ms", "step/prod"
    )
}

/// The CSV's `impl` of the CPU engine in a precision: `rnnlens` (f32) or `rnnlens-bf16`.
fn implementation(p: crate::kernels::precision::Precision) -> &'static str {
    match p {
        crate::kernels::precision::Precision::F32 => "rnnlens",
        crate::kernels::precision::Precision::Bf16 => "rnnlens-bf16",
        crate::kernels::precision::Precision::F16 => "rnnlens-f16",
    }
}

/// One model at one shape with everything a step needs, allocated once.
struct Work {
    model: Model,
    w: Vec<f32>,
    g: Vec<f32>,
    opt: Optimizer,
    batch: usize,
    window: usize,
    input: Input,
}

#[allow(clippy::large_enum_variant)] // one per (shape, cell), built once and never moved in a loop
enum Input {
    /// a language model: `[T, B]` tokens and their targets, the state carried from step to step
    /// as the trainer carries it across windows
    Lm { x: Vec<u32>, y: Vec<u32>, state: State<f32>, ws: ModelWs<f32>, clipping: (Option<f64>, Option<f64>), lr: f64 },
    /// a task shape: one batch from the task's own generator
    Task { batch: tasks::Batch, ws: TaskWs, cfg: TaskConfig },
}

/// Refuse a shape the machine cannot hold at `--batch`/`--window` before it is allocated, with
/// the estimate of the run it times (`train`'s or `task`'s).
fn check_fits(model: &Model, batch: usize, window: usize, need: u64, fix: &str) -> Result<()> {
    let what = format!("{} parameters and the workspaces of {batch} × {window} steps", model.n_params);
    crate::kernels::runtime::check_fits(&what, need, fix)
}

impl Work {
    fn new(shape: Shape, cell: &str, batch: usize, window: usize) -> Result<Work> {
        let mut rng = Rng::new(SEED);
        let (model, input) = if let Some((kind, length)) = shape.task() {
            let model = tasks::task_model(kind, cell, 250, false)?;
            let need = tasks::memory_need(&model, kind, length, batch, Device::Cpu);
            check_fits(&model, batch, length, need, "choose a smaller --batch (a task shape's window is the task's length)")?;
            let mut data_rng = Rng::new(SEED + 1000);
            // Under MPI `batch` is this rank's share: the whole batch is drawn, its rows kept.
            let dist = training::dist::get();
            let b = task_batch(kind, length, batch * dist.size, &mut data_rng)?;
            let b = if dist.size > 1 { b.rows(batch * dist.rank..batch * (dist.rank + 1)) } else { b };
            (model, Input::Task { batch: b, ws: TaskWs::default(), cfg: TaskConfig::default() })
        } else {
            let model = shape.model(cell)?;
            let cfg = TrainConfig { batch_size: batch, eval_batch_size: batch, bptt: window, ..Default::default() };
            check_fits(&model, batch, window, training::memory::memory_estimate(&model, &cfg), "choose a smaller --batch or --window")?;
            let vocab = model.vocab_size();
            let mut tokens = |n: usize| -> Vec<u32> { (0..n).map(|_| rng.below(vocab as u64) as u32).collect() };
            let (x, y) = (tokens(window * batch), tokens(window * batch));
            let state = model.initial_state(batch);
            // The trainer's default clipping and rate. Dropout is off: it is no GEMM work, and
            // a framework comparison times without it.
            let d = TrainConfig::default();
            (model, Input::Lm { x, y, state, ws: ModelWs::default(), clipping: d.clipping(), lr: d.lr })
        };
        // The trainer's default initialisation.
        let w = model.init_params(Init::Xavier, &mut rng);
        let (g, opt) = (vec![0f32; model.n_params], Optimizer::new(OptimizerKind::Adam, model.n_params));
        let (batch, window) = match &input {
            Input::Task { batch: b, .. } => (b.batch, b.steps),
            Input::Lm { .. } => (batch, window),
        };
        Ok(Work { model, w, g, opt, batch, window, input })
    }

    /// One step; returns the seconds spent summing the gradients over the ranks (0 alone).
    fn step(&mut self, mode: Mode) -> f64 {
        let Work { model, w, g, opt, batch, input, .. } = self;
        let dist = training::dist::get();
        match (input, mode) {
            (Input::Lm { x, y, state, ws, clipping, lr }, Mode::Train) if dist.size > 1 => {
                // As the trainer under MPI: the ranks' gradients summed in rank order, then clipped.
                let (_, norm) = training::window_gradient(model, w, g, (x, y), *batch, state, ws, None, None, (None, None));
                let t = Instant::now();
                dist.mean_f32(g);
                let reduce = t.elapsed().as_secs_f64();
                let norm = norm.map(|_| crate::training::optim::clip(g, clipping.0, clipping.1));
                if norm.is_some_and(f64::is_finite) {
                    opt.step(w, g, *lr);
                }
                return reduce;
            }
            (Input::Lm { x, y, state, ws, clipping, lr }, Mode::Train) => {
                let (_, norm) = training::window_gradient(model, w, g, (x, y), *batch, state, ws, None, None, *clipping);
                // As the trainer: a divergent gradient is not applied (random tokens never get there).
                if norm.is_some_and(f64::is_finite) {
                    opt.step(w, g, *lr);
                }
            }
            (Input::Lm { x, y, state, ws, .. }, Mode::Infer) => {
                model.forward(w, x, x.len() / *batch, *batch, state, ws, None);
                model.score(y, ws, false);
            }
            (Input::Task { batch: b, ws, cfg }, Mode::Train) if dist.size > 1 => {
                // The task's step sums inside; its share of the step is not timed apart.
                tasks::task_step_ranks(TaskKind::Addition, model, w, g, opt, b, ws, cfg);
                return f64::NAN;
            }
            (Input::Task { batch: b, ws, cfg }, Mode::Train) => {
                tasks::task_step(TaskKind::Addition, model, w, g, opt, b, ws, cfg);
            }
            (Input::Task { batch: b, ws, .. }, Mode::Infer) => {
                tasks::task_eval(TaskKind::Addition, model, w, b, ws);
            }
        }
        0.0
    }
}

/// How a product runs alone ([`Alone`]): `gemm::gemm` (blocked, split over the threads by
/// output blocks), `gemm::PackedB::gemm` (the operand packed once, untimed, split by column
/// panels), or, for a product the step ran on each thread beside the others'
/// (`call.per_thread`), every thread running its own such product at once on a shared packed
/// operand, as the time loops do (the wall time over the number of threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    General,
    Split,
    Beside,
}

/// One recorded product's operands, made (and `B` packed) untimed, to run it alone. Plain
/// row-major operands: the recording keeps no transposition flags. Values well inside the
/// normal range, so no denormal slows anything down.
struct Alone {
    call: profile::Call,
    a: Vec<f32>,
    c: Vec<f32>,
    b: Vec<f32>,
    packed: gemm::PackedB<f32>,
    /// `Way::Beside`: each thread its own rows of A and of C, as in a time loop
    a_all: Vec<f32>,
    c_all: Vec<std::sync::Mutex<Vec<f32>>>,
}

impl Alone {
    fn new(call: profile::Call) -> Alone {
        let profile::Call { m, n, k, per_thread } = call;
        let b = vec![0.25f32; k * n];
        let mut packed = gemm::PackedB::default();
        packed.pack(&b, n, false, n, k, 1, 0);
        let threads = if per_thread { rayon::current_num_threads() } else { 0 };
        Alone {
            call,
            a: vec![0.5f32; m * k],
            c: vec![0f32; m * n],
            b,
            packed,
            a_all: vec![0.5f32; threads * m * k],
            c_all: (0..threads).map(|_| std::sync::Mutex::new(vec![0f32; m * n])).collect(),
        }
    }

    /// Run the product `count` times `way` and return the seconds it took. `Way::Beside` runs
    /// `count` spread over the threads (each its own), rounded up to a whole number a thread,
    /// and scales the wall time back to `count`.
    fn run(&mut self, way: Way, count: usize) -> f64 {
        let profile::Call { m, n, k, .. } = self.call;
        let t = Instant::now();
        match way {
            Way::General => (0..count).for_each(|_| gemm::gemm(m, n, k, &self.a, k, false, &self.b, n, false, &mut self.c, n, false)),
            Way::Split => (0..count).for_each(|_| self.packed.gemm(0, m, &self.a, k, &mut self.c, n, false)),
            Way::Beside => {
                let threads = self.c_all.len();
                let reps = count.div_ceil(threads);
                let (packed, a_all, c_all) = (&self.packed, &self.a_all, &self.c_all);
                rayon::broadcast(|ctx| {
                    let i = ctx.index();
                    let mut c = c_all[i].lock().expect("one thread per buffer");
                    for _ in 0..reps {
                        packed.gemm_serial(0, m, &a_all[i * m * k..(i + 1) * m * k], k, &mut c, n, false);
                    }
                });
                return t.elapsed().as_secs_f64() * count as f64 / (reps * threads) as f64;
            }
        }
        t.elapsed().as_secs_f64()
    }

    /// The fastest way this machine runs the product alone on the current pool (the median
    /// of 3 to 20 runs each way): so "peak" is the best this machine gives at the shape, not a figure
    /// the run's own choice of kernel sets. Without `Way::Beside`, a step product timed alone
    /// would pay a split and a join per call that the time loops never pay, and the step would
    /// seem to beat its own GEMMs' limit.
    fn fastest(&mut self) -> Way {
        let mut ways = vec![Way::General, Way::Split];
        // Enough products per broadcast (~60 MFLOP, some 0.3 ms, on each thread) that waking
        // the pool does not count: the ISAN's are a few rows each, C3 RNN's 6 MFLOP
        // (docs/benchmarks.md, "The benchmark's per-thread peak in batches of products").
        let profile::Call { m, n, k, per_thread } = self.call;
        let beside = (30_000_000 / (m * n * k)).max(1) * self.c_all.len();
        if per_thread {
            ways.push(Way::Beside);
        }
        ways.into_iter()
            .map(|way| {
                let count = if way == Way::Beside { beside } else { 1 };
                (way, median_time(|| {
                    self.run(way, count);
                }) / count as f64)
            })
            .min_by(|x, y| x.1.total_cmp(&y.1))
            .expect("two ways at least")
            .0
    }
}

/// The seconds a step's recorded products `gemms` take alone, each shape run its fastest way
/// (`ways`, found once a shape and kept for every cell that calls it) as many times as the
/// step called it; operands made untimed, one shape at a time.
fn products_alone(gemms: &[(profile::Call, u64)], ways: &mut HashMap<profile::Call, Way>) -> f64 {
    gemms
        .iter()
        .filter(|(c, _)| c.m * c.n * c.k > 0)
        .map(|&(c, count)| {
            let mut alone = Alone::new(c);
            let way = *ways.entry(c).or_insert_with(|| alone.fastest());
            alone.run(way, count as usize)
        })
        .sum()
}

/// The median time of `call`, after one untimed call: 3 to 20 calls, as many as fit in 0.2 s.
fn median_time(mut call: impl FnMut()) -> f64 {
    call();
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < 3 || (times.len() < 20 && start.elapsed() < Duration::from_millis(200)) {
        let t = Instant::now();
        call();
        times.push(t.elapsed().as_secs_f64());
    }
    median(&mut times)
}

/// The machine's memory bandwidth in GB/s on the current pool: every thread scaling a buffer of
/// its own, far larger than the caches (128 MiB; 2 GiB in all past four threads), into another (`b = 2a`, STREAM's "scale"), the bytes
/// counted as STREAM counts them (read plus written; the read a write's line costs first is not
/// counted); the best of three runs after one that faults the pages in, about 0.05 s a run.
/// A pointwise pass that moves more bytes a step than this allows is bound by memory whatever
/// its arithmetic (the RWA's and RDA's at C3: docs/benchmarks.md).
pub fn memory_limit_gbs() -> f64 {
    // 128 MiB a buffer (four times a 32 MiB L3), less with more than four threads: 2 GiB in all.
    let threads = rayon::current_num_threads();
    let floats = (1usize << 25).min((1 << 28) / threads.max(1));
    let bufs: Vec<std::sync::Mutex<(Vec<f32>, Vec<f32>)>> = (0..threads).map(|_| Default::default()).collect();
    let pass = || {
        let t = Instant::now();
        rayon::broadcast(|ctx| {
            let mut guard = bufs[ctx.index()].lock().unwrap_or_else(|e| e.into_inner());
            let (a, b) = &mut *guard;
            if a.is_empty() {
                *a = vec![1.0; floats];
                *b = vec![0.0; floats];
            }
            b.iter_mut().zip(a.iter()).for_each(|(o, &x)| *o = 2.0 * x);
            std::hint::black_box(&b[floats / 2]);
        });
        t.elapsed().as_secs_f64()
    };
    pass();
    let secs = (0..3).map(|_| pass()).fold(f64::INFINITY, f64::min);
    (threads * floats * 2 * 4) as f64 / secs / 1e9
}

/// Start the process's peak RSS again from its present RSS (Linux's `/proc/self/clear_refs`;
/// elsewhere nothing, and the peak then includes what was freed).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident set size of this process so far, in bytes (the kernel keeps the maximum, so it
/// never goes down: a figure for one run alone needs a process of its own).
pub fn peak_rss_bytes() -> Option<u64> {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    // Linux reports kibibytes.
    (rc == 0).then(|| usage.ru_maxrss as u64 * 1024)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|m| m.trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The facts a reader needs to compare runs: machine, threads, build, and how steps are timed.
pub fn header(opts: &Options, threads: usize) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rustc = option_env!("RNNLENS_RUSTC_VERSION").filter(|v| !v.is_empty()).unwrap_or("rustc unknown");
    format!(
        "rnnlens {} bench ({rustc})\n\
         cpu: {}, {cores} logical CPUs available, {threads} threads used\n\
         precision: {} (GEMM kernels: {})\n\
         flush-to-zero and denormals-are-zero: on (as in training)\n\
         each figure: the median of {} timed steps, after 1 step recording the GEMM calls and {} warm-up steps (untimed); train = forward + loss + backward + clipping + Adam update, infer = forward + loss\n",
        env!("CARGO_PKG_VERSION"),
        cpu_model(),
        opts.precision.name(),
        crate::kernels::gemm::products(opts.precision),
        opts.steps,
        opts.warmup,
    )
}

/// Run the benchmark: print the header and a table row per (shape, cell, mode) on stdout, write
/// the CSV if asked, and return the rows.
pub fn run(opts: &Options) -> Result<Vec<Row>> {
    if opts.steps == 0 {
        bail!("--steps must be at least 1 (the figures are medians of timed steps)");
    }
    if opts.batch == Some(0) || opts.window == Some(0) {
        bail!("--batch and --window must be positive");
    }
    if opts.modes.is_empty() || opts.shapes.is_empty() || opts.cells.is_empty() {
        bail!("nothing to run: give at least one shape, cell and mode");
    }
    for c in &opts.cells {
        registry::lookup(c)?;
    }
    opts.device.check(opts.precision)?;
    #[cfg(feature = "gpu")]
    if opts.device == crate::kernels::runtime::Device::Gpu {
        // the programs record their products in the precision in effect (f32, or f16)
        return crate::kernels::precision::with(opts.precision, || gpu::run(opts));
    }
    let runs: Vec<(Shape, &str)> = opts
        .shapes
        .iter()
        .flat_map(|&s| opts.cells.iter().filter(move |c| s.fits(c)).map(move |c| (s, c.as_str())))
        .collect();
    if runs.is_empty() {
        bail!("no cell given fits a shape given: symbol-reading cells (isan) run on the isan shape only, the others on c1, c2, c3, ptb, ptb128 and mnist");
    }
    let runtime = crate::kernels::runtime::Runtime { threads: opts.threads, precision: opts.precision };
    let threads = runtime.start_on(opts.device)?;
    runtime.run(|| run_on(opts, &runs, threads))
}

/// [`run`] on the started pool, inside the precision's scope.
fn run_on(opts: &Options, runs: &[(Shape, &str)], threads: usize) -> Result<Vec<Row>> {
    // Under mpirun every rank steps on its rows of each shape's batch; rank 0 reports.
    let dist = training::dist::get();
    if !dist.is_root() {
        return run_quietly(opts, runs, dist.size);
    }
    print!("{}", header(opts, threads));
    if dist.size > 1 {
        println!(
            "ranks: {} (each steps on 1/{} of every batch; a training step sums the gradients in rank order before clipping and the update, as train does)",
            dist.size, dist.size
        );
    }
    if opts.peak {
        match f32_limit_gflops(Probe::BENCH) {
            Some(g) => println!("machine limit: {g:.1} GFLOP/s in f32 (independent FMA chains on every thread: no f32 GEMM can pass it)"),
            None => println!("machine limit: not measured (needs AVX2 and FMA)"),
        }
        match bf16_limit_gflops(Probe::BENCH) {
            Some(g) => println!("machine limit: {g:.1} GFLOP/s in bf16 (independent chains of the bf16 kernel's instruction, {}, on every thread: no bf16 GEMM can pass it)", crate::kernels::precision::bf16_kernel()),
            None => println!("machine limit in bf16: none (no AVX512-BF16)"),
        }
        println!("memory limit: {:.1} GB/s (every thread scaling a buffer of its own into another, bytes read plus written)", memory_limit_gbs());
    }
    let mut csv = match &opts.csv {
        Some(p) => {
            let mut f = std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            writeln!(f, "{CSV_HEADER}").with_context(|| format!("writing {}", p.display()))?;
            Some((f, p))
        }
        None => None,
    };
    println!("{}", table_header());

    let per_run = (1 + opts.warmup + opts.steps) as u64;
    let bar = if opts.quiet { ProgressBar::hidden() } else { ProgressBar::new(runs.len() as u64 * opts.modes.len() as u64 * per_run) };
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} steps [{elapsed_precise}<{eta_precise}] {msg}").expect("valid template"));
    // The fastest way to run each GEMM shape alone, shared by every cell that calls it.
    let mut ways: HashMap<profile::Call, Way> = HashMap::new();
    let mut steps_rss = None;
    let mut rows = Vec::new();
    for (i, &(shape, cell)) in runs.iter().enumerate() {
        let (b0, w0) = shape.size();
        let batch = opts.batch.unwrap_or(b0);
        let window = if shape.task().is_some() { w0 } else { opts.window.unwrap_or(w0) };
        if !batch.is_multiple_of(dist.size) {
            bail!("the batch of {batch} rows ({}) does not divide evenly among the {} ranks", shape.name(), dist.size);
        }
        let mut work = Work::new(shape, cell, batch / dist.size, window).with_context(|| format!("{} {cell}", shape.name()))?;
        let mut measured = Vec::new();
        for &mode in &opts.modes {
            bar.set_message(format!("{} {cell} {}", shape.name(), mode.name()));
            // One recorded step, kept out of the timing (recording takes a lock per GEMM call).
            profile::start();
            work.step(mode);
            let gemms = profile::stop();
            bar.inc(1);
            for _ in 0..opts.warmup {
                work.step(mode);
                bar.inc(1);
            }
            // Grown step by step: collecting a range would reserve `--steps` times at once.
            // With the peak, each timed step is followed by its products run alone, so that
            // both medians come from the same minutes: on a shared host either moves by half
            // between minutes, and their ratio (step/prod) with them when timed apart.
            let (mut reduces, mut times, mut alone, mut in_step) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..opts.steps {
                profile::start_timing();
                let t = Instant::now();
                reduces.push(work.step(mode));
                times.push(t.elapsed().as_secs_f64());
                in_step.push(profile::stop_timing());
                bar.inc(1);
                if opts.peak {
                    // The peak RSS printed is the steps': the operands made to run the
                    // products alone are left out of it.
                    steps_rss = steps_rss.max(peak_rss_bytes());
                    alone.push(products_alone(&gemms, &mut ways));
                    reset_peak_rss();
                }
            }
            let reduce = (dist.size > 1 && mode == Mode::Train && reduces.iter().all(|r| r.is_finite())).then(|| median(&mut reduces));
            let alone = opts.peak.then(|| median(&mut alone));
            measured.push((mode, gemms, median(&mut times), reduce, alone, median(&mut in_step)));
        }
        let (batch, window) = (work.batch * dist.size, work.window);
        drop(work);
        for (mode, gemms, secs, reduce, alone, in_step) in measured {
            // The GEMMs recorded are this rank's; every rank does the same on its rows.
            let flops = profile::flops(&gemms) * dist.size as f64;
            let peak_gflops = alone.map(|alone| flops / alone.max(1e-12) / 1e9);
            let row = Row {
                threads,
                peak_gflops,
                ranks: dist.size,
                allreduce_ms_median: reduce.map(|r| r * 1e3),
                prod_in_step_ms: Some(in_step * 1e3),
                ..Row::timed(implementation(opts.precision), (shape, cell, mode), (batch, window), secs, flops)
            };
            bar.suspend(|| println!("{}", row.table_line()));
            if let Some((f, p)) = &mut csv {
                writeln!(f, "{}", row.csv()).with_context(|| format!("writing {}", p.display()))?;
            }
            rows.push(row);
        }
        if runs.get(i + 1).is_none_or(|next| next.0 != shape) {
            let rss = steps_rss.max(peak_rss_bytes()).map_or("unknown".into(), |b| format!("{:.0} MiB", b as f64 / (1 << 20) as f64));
            bar.suspend(|| println!("peak RSS of the process's steps up to {}: {rss}", shape.name()));
        }
    }
    bar.finish_and_clear();
    if let Some((f, p)) = &mut csv {
        f.flush().with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(rows)
}

/// A rank other than 0: the same steps as rank 0 (each training step meets the others in the
/// gradient sum), nothing printed or written.
fn run_quietly(opts: &Options, runs: &[(Shape, &str)], ranks: usize) -> Result<Vec<Row>> {
    for &(shape, cell) in runs {
        let (b0, w0) = shape.size();
        let batch = opts.batch.unwrap_or(b0);
        let window = opts.window.unwrap_or(w0);
        if !batch.is_multiple_of(ranks) {
            bail!("the batch of {batch} rows ({}) does not divide evenly among the {ranks} ranks", shape.name());
        }
        let mut work = Work::new(shape, cell, batch / ranks, window)?;
        for &mode in &opts.modes {
            for _ in 0..1 + opts.warmup + opts.steps {
                work.step(mode);
            }
        }
    }
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_cells_and_medians() {
        assert_eq!(Shape::parse("c2").unwrap().name(), "c2");
        assert!(Shape::parse("c9").is_err());
        assert!(Shape::Isan.fits("isan") && !Shape::C1.fits("isan") && Shape::C3.fits("lstm") && Shape::Mnist.fits("rwa") && !Shape::Isan.fits("gru"));
        for s in SHAPE_NAMES {
            assert_eq!(Shape::parse(s).unwrap().name(), *s);
        }
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        // Every row has a field for each column of the header.
        let row = Row::timed("rnnlens", (Shape::C1, "gru", Mode::Train), (4, 10), 0.5, 1e9);
        assert_eq!(CSV_HEADER.split(',').count(), 15);
        assert_eq!(row.csv().split(',').count(), 15, "{}", row.csv());
    }

    /// The MNIST shape is the task's: 784 steps of one pixel in [0, 1], a class of ten scored
    /// at the last step of each row, whatever window was asked.
    #[test]
    fn the_mnist_shape_is_a_batch_of_the_sequential_mnist_task() {
        let w = Work::new(Shape::Mnist, "gru", 3, 35).unwrap();
        let Input::Task { batch: b, .. } = &w.input else { panic!("a task shape reads a task batch") };
        assert_eq!((b.steps, b.batch, b.x.len()), (784, 3, 784 * 3));
        assert!(b.x.iter().all(|x| (0.0..=1.0).contains(x)) && b.x.iter().any(|&x| x > 0.0));
        assert_eq!(b.scored, [783 * 3, 783 * 3 + 1, 783 * 3 + 2]);
        assert!(b.classes.len() == 3 && b.classes.iter().all(|&c| c < 10));
        assert_eq!(w.model.vocab_size(), 10);
    }
}
