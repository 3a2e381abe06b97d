//! The `rnnlens` command line.

use anyhow::{bail, Context, Result};
use clap::builder::PossibleValuesParser;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use rnnlens::data::checkpoint;
use rnnlens::data::{self, Level};
use rnnlens::eval::EvalOptions;
use rnnlens::explain::report::Distributions;
use rnnlens::tasks::TaskOptions;
use rnnlens::isan_fast::table;
use rnnlens::model::engine::Engine;
use rnnlens::model::lm::Lm;
use rnnlens::model::{layer_configs};
use rnnlens::cells::registry::{self, reads_tokens, CellOptions};
use rnnlens::kernels::runtime::Runtime;
use rnnlens::training::{self, Start, TrainConfig};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "rnnlens", version, infer_long_args = true, about = "Train, evaluate and look inside recurrent language models: RAN, ISAN, RWA, RDA beside LSTM, GRU and simple RNNs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once
enum Command {
    /// Train a language model. With no arguments: a RAN-tanh word model of the embedded Brown
    /// corpus (a few minutes), saved to runs/default.
    Train(TrainArgs),
    /// Perplexity (word level) or bits per character of a checkpoint on a split or a file.
    Eval(EvalOptions),
    /// Generate text from a checkpoint.
    Sample(SampleArgs),
    /// Count the parameters of a configuration (recurrent ones as the papers count them).
    Params(ParamsArgs),
    /// Look inside a checkpoint on a text: RAN weights and influence arrows, RWA/RDA effective
    /// attention weights, ISAN analyses, PCA spectrum of hidden states (whichever apply).
    Explain(ExplainArgs),
    /// Train cells on a sequence task of the RDA and ISAN papers (addition, classify-length,
    /// seq-mnist, permuted-seq-mnist, copy, multicopy, parentheses) and report the paper's measure.
    Task(TaskOptions),
    /// Draw the training curves of several runs in one SVG and print a table of their final
    /// figures (from each run directory's metrics.jsonl).
    Curves(CurvesArgs),
    /// A local web application to look inside a checkpoint: type a text and see its predictions,
    /// states and the cell's analyses live; search a corpus for a state pattern; the ISAN's
    /// κ_word map; the runs' curves side by side.
    #[cfg(feature = "serve")]
    Serve(rnnlens::serve::ServeArgs),
    /// Measure training and inference throughput (tokens/s) and GEMM efficiency of the cells
    /// at fixed shapes on random data (see docs/benchmarks.md); takes minutes in full.
    Bench(BenchArgs),
}

#[derive(Args)]
struct CurvesArgs {
    /// Run directories written by `rnnlens train`
    #[arg(required = true, value_name = "RUN")]
    runs: Vec<PathBuf>,
    /// The SVG to write [default: curves.svg, which must not exist yet; a file named here is replaced]
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct BenchArgs {
    /// Shapes: c1 (char LM, 512 units), c2 (word LM, 10k words, 1024 units), c3 (addition
    /// task, length 1000), isan (ISAN char LM, 216 units), ptb and ptb128 (the large PTB model,
    /// 2x1500, batch 20 or 128), mnist (sequential MNIST, 1 pixel a step, length 784, 250 units),
    /// ptb650 (the medium PTB model, 2x650), text8 (the first RAN paper's Text8 model, 1024,
    /// 1024, 2048), wiki (the RDA paper's Wikipedia model, 1800 units, window 250)
    #[arg(long, value_delimiter = ',', default_value = "c1,c2,c3,isan")]
    shapes: Vec<String>,
    /// Cells [default: lstm, gru, rnn, ran-tanh, rwa, rda-exp-tanh, rda-sigmoid-id on c1, c2,
    /// c3, and isan on the isan shape]
    #[arg(long, value_delimiter = ',')]
    cells: Option<Vec<String>>,
    /// Timed steps per figure (the median is reported)
    #[arg(long, default_value_t = 5)]
    steps: usize,
    /// Untimed steps before them
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    #[command(flatten)]
    runtime: Runtime,
    /// train | infer | both
    #[arg(long, default_value = "both")]
    mode: String,
    /// Write the results as CSV to this file [default: none]
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Override every shape's batch size (quick checks only: the figures are then not
    /// comparable) [default: the shape's]
    #[arg(long)]
    batch: Option<usize>,
    /// Override the language-model shapes' window (c3 and mnist keep their task's length)
    /// [default: the shape's]
    #[arg(long)]
    window: Option<usize>,
    /// Skip timing the GEMM shapes alone and the machine's FMA limit (no peak figure; saves time)
    #[arg(long)]
    no_peak: bool,
    /// No progress bar
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    on: rnnlens::kernels::runtime::OnDevice,
}


#[derive(Args)]
struct TrainArgs {
    /// TOML file with any of the settings below, named as the flags with `_` (flags given here
    /// override it) [default: none: the defaults shown]
    #[arg(long)]
    config: Option<PathBuf>,
    /// Continue the run saved in this checkpoint directory. Only --epochs, --max-steps,
    /// --threads, --out, --save-every, --on-divergence and --sample-length may change; any other
    /// setting given must equal the saved one [default: none: a new run]
    #[arg(long, conflicts_with = "overwrite")]
    resume: Option<PathBuf>,
    /// Replace the checkpoint that --out holds (without this flag, train refuses to)
    #[arg(long)]
    overwrite: bool,
    #[command(flatten)]
    settings: TrainConfig,
    /// No progress bars or reports on stderr
    #[arg(long)]
    quiet: bool,
}

impl TrainArgs {
    /// The run's configuration: the defaults (or, with --resume, the saved run's), then the
    /// TOML file's keys, then the flags given on the command line (`m` tells which were).
    fn config(&self, m: &ArgMatches) -> Result<TrainConfig> {
        let mut cfg = match &self.resume {
            Some(dir) => to_object(&training::resume_config(dir)?)?,
            None => to_object(&TrainConfig::default())?,
        };
        if let Some(path) = &self.config {
            for (k, v) in TrainConfig::toml_table(path)? {
                // A resumed run saves where it was saved unless --out says otherwise.
                if !(self.resume.is_some() && k == "out") {
                    cfg.insert(k, serde_json::to_value(v)?);
                }
            }
        }
        let flags = to_object(&self.settings)?;
        for k in TrainConfig::keys() {
            if m.value_source(&k) == Some(ValueSource::CommandLine) {
                // A number JSON cannot hold (NaN, inf) comes out as null.
                if flags[&k].is_null() {
                    bail!("--{}: not a finite number", k.replace('_', "-"));
                }
                cfg.insert(k.clone(), flags[&k].clone());
            }
        }
        TrainConfig::from_value(serde_json::Value::Object(cfg))
    }
}

fn to_object<T: serde::Serialize>(v: &T) -> Result<serde_json::Map<String, serde_json::Value>> {
    match serde_json::to_value(v)? {
        serde_json::Value::Object(m) => Ok(m),
        _ => bail!("a configuration is a table of settings"),
    }
}

#[derive(Args)]
struct SampleArgs {
    /// Checkpoint directory written by `rnnlens train`
    #[arg(long)]
    checkpoint: PathBuf,
    /// Text to condition on
    #[arg(long, default_value = "")]
    prime: String,
    /// β in p ∝ exp(β·logit): 1 samples the model, 1.5 or 2 are greedier (as in the ISAN paper)
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    inverse_temperature: f64,
    /// Tokens to generate
    #[arg(long, default_value_t = 200)]
    length: usize,
    /// Seed of the draws
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// isan, isan-nobias, linear: consume the prime through a table of the composed affine maps
    /// of the N most frequent words (with their space) of the training split [default: none:
    /// character stepping]
    #[arg(long, value_name = "N")]
    isan_table: Option<usize>,
    #[command(flatten)]
    runtime: Runtime,
    #[command(flatten)]
    on: rnnlens::kernels::runtime::OnDevice,
}

#[derive(Args)]
struct ExplainArgs {
    /// Checkpoint directory
    #[arg(long)]
    checkpoint: PathBuf,
    /// The text to read (at most 2000 tokens) [default: none: give this or --input]
    #[arg(long, conflicts_with = "input")]
    text: Option<String>,
    /// Read the text from this file instead [default: none: give this or --text]
    #[arg(long)]
    input: Option<PathBuf>,
    /// Read the first 2000 tokens of this split of the corpus the model was trained on (held-out
    /// text, as `eval --split` scores it) [default: none: give this, --text or --input]
    #[arg(long, value_enum, conflicts_with_all = ["text", "input"])]
    split: Option<rnnlens::eval::Split>,
    /// Write an HTML report (index.html with SVG figures) and the raw numbers into this directory
    /// [default: none: the summary on stdout only]
    #[arg(long)]
    report: Option<PathBuf>,
    /// Units whose individual weights w_j^t(m) to show, e.g. 3,17 [default: none]
    #[arg(long, value_delimiter = ',')]
    components: Vec<usize>,
    /// An ISAN's unigram and bigram distributions (set against its biases and readout): counted
    /// on the explained text, or on the training split of the corpus the model was trained on,
    /// as the ISAN paper counts them
    #[arg(long, value_enum, default_value_t = Distributions::Text)]
    distributions: Distributions,
    /// Task models: explain the sequence the task's generator draws from this seed (the MNIST
    /// tasks: test image N of --data) [default: none: give this or --task-input]
    #[arg(long, value_name = "SEED", conflicts_with_all = ["text", "input", "task_input"])]
    example: Option<u64>,
    /// Task models: the sequence to explain, typed: the task's symbols (copy, multicopy
    /// `_12345678!`; parentheses `()[]{}a`) or its values (addition `0.3 0.7* 0.1 0.5*`, a `*`
    /// marking the two to add; classify-length `0.2 0.9 ...`) [default: none]
    #[arg(long, value_name = "INPUT", conflicts_with_all = ["text", "input"])]
    task_input: Option<String>,
    /// Task models of the MNIST tasks: the directory with the IDX files [default: none]
    #[arg(long)]
    data: Option<PathBuf>,
    #[command(flatten)]
    runtime: Runtime,
}

#[derive(Args)]
struct ParamsArgs {
    /// The cell, as for train --cell
    #[arg(long, value_parser = PossibleValuesParser::new(registry::names()))]
    cell: String,
    /// Width of the layer input (the embedding size); isan and linear read symbols and take
    /// --vocab-size instead [default: none; every other cell needs it]
    #[arg(long)]
    input_size: Option<usize>,
    /// Hidden sizes of the stacked layers, e.g. 650,650
    #[arg(long, value_delimiter = ',', required = true)]
    hidden_size: Vec<usize>,
    /// Output projection size (ran-*, lstm) [default: none]
    #[arg(long)]
    projection_size: Option<usize>,
    /// Also count the embedding (V × input) and the softmax decoder of a vocabulary this size
    /// [default: none: the recurrent layers only]
    #[arg(long)]
    vocab_size: Option<usize>,
    #[command(flatten)]
    cell_options: CellOptions,
    /// Print one JSON object
    #[arg(long)]
    json: bool,
}

/// Large blocks on transparent huge pages (see `rnnlens::kernels::alloc`).
#[global_allocator]
static ALLOC: rnnlens::kernels::alloc::HugePages = rnnlens::kernels::alloc::HugePages;

fn main() -> ExitCode {
    // Built with AVX2/FMA enabled (.cargo/config.toml): say so instead of dying on SIGILL.
    #[cfg(all(target_arch = "x86_64", target_feature = "avx2", target_feature = "fma"))]
    if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")) {
        eprintln!("error: this rnnlens was built for CPUs with AVX2 and FMA (x86-64-v3), which this CPU lacks; delete .cargo/config.toml and rebuild");
        return ExitCode::FAILURE;
    }
    // Output piped into a reader that stops early (`rnnlens bench | head`) ends the process
    // quietly, as a Unix tool does, instead of panicking in `println!` on the closed pipe.
    #[cfg(unix)]
    // SAFETY: restoring a signal's default disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Under mpirun: join the job before anything runs (docs/distributed.md).
    #[cfg(feature = "mpi")]
    if let Err(e) = rnnlens::training::dist::init() {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    #[cfg(not(feature = "mpi"))]
    if rnnlens::training::dist::launched_by_mpi() && std::env::var("OMPI_COMM_WORLD_SIZE").is_ok_and(|n| n != "1") {
        eprintln!("error: this rnnlens was built without MPI, so its ranks would each train alone; build it with `cargo build --release --features mpi`");
        return ExitCode::FAILURE;
    }
    // A negative number is a value (that the option then refuses, naming it and what it takes),
    // not an unknown flag: `--hidden-size -5` used to say "unexpected argument '-5'".
    let matches = Cli::command().mut_subcommands(|c| c.allow_negative_numbers(true)).try_get_matches().unwrap_or_else(|e| {
        // clap's word for a count given a sign or a fraction, said as what the option takes
        let text = e.render().to_string();
        if e.kind() == clap::error::ErrorKind::ValueValidation && text.contains("invalid digit found in string") {
            eprint!("{}", text.replace("invalid digit found in string", "a whole number (0, 1, 2, ...) is expected"));
            std::process::exit(2);
        }
        e.exit()
    });
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let code = match run(cli, &matches) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    };
    rnnlens::training::dist::finalize();
    code
}

fn run(cli: Cli, m: &ArgMatches) -> Result<()> {
    match cli.command {
        Command::Train(a) => cmd_train(a, m.subcommand_matches("train").context("train's arguments")?),
        Command::Eval(a) => cmd_eval(a),
        Command::Sample(a) => cmd_sample(a),
        Command::Params(a) => cmd_params(a),
        Command::Explain(a) => cmd_explain(a),
        Command::Task(a) => cmd_task(a, m.subcommand_matches("task").context("task's arguments")?),
        Command::Bench(a) => cmd_bench(a),
        Command::Curves(a) => cmd_curves(a),
        #[cfg(feature = "serve")]
        Command::Serve(a) => rnnlens::serve::run(&a),
    }
}

fn cmd_train(a: TrainArgs, m: &ArgMatches) -> Result<()> {
    let cfg = a.config(m)?;
    let start = match (&a.resume, a.overwrite) {
        (Some(dir), _) => Start::Resume(dir),
        (None, true) => Start::Replace,
        (None, false) => Start::New,
    };
    let out = training::train(cfg.clone(), start, a.quiet)?;
    if !training::dist::get().is_root() {
        return Ok(());
    }
    let word = out.lm.tok.level == Level::Word;
    if cfg.eval_batch_size > 1 {
        // Training validates in parallel streams (each one's first token unscored, its state
        // starting from the initial one): close to the exact figure, not equal to it. The
        // exact one is eval's: one stream through the whole split.
        println!(
            "validation: {} over {} tokens ({} parallel streams, as training validates: an approximation of the exact figure below)",
            out.valid.describe(word),
            out.valid.tokens,
            cfg.eval_batch_size
        );
        let exact = rnnlens::eval::run(&rnnlens::eval::EvalOptions::of_split(&cfg.out, rnnlens::eval::Split::Valid, cfg.runtime, cfg.on))?;
        println!("validation, exact (one stream, as `rnnlens eval --split valid` gives it): {}", exact.trim_end());
    } else {
        println!("validation: {} over {} tokens", out.valid.describe(word), out.valid.tokens);
    }
    println!("unigram baseline: {}", out.unigram.describe(word));
    println!("checkpoint: {}", cfg.out.display());
    if cfg.sample_length > 0 {
        let ids = rnnlens::eval::sample::sample(&out.lm, "", cfg.sample_length, 1.0, cfg.seed)?;
        println!("sample: {}", out.lm.tok.decode(&ids).trim_end());
    }
    Ok(())
}

fn cmd_eval(o: EvalOptions) -> Result<()> {
    print!("{}", rnnlens::eval::run(&o)?);
    Ok(())
}

fn cmd_sample(a: SampleArgs) -> Result<()> {
    a.runtime.start_on(a.on.device)?;
    a.runtime.run(|| sample_in(&a))
}

fn sample_in(a: &SampleArgs) -> Result<()> {
    if a.length == 0 {
        bail!("--length 0 samples nothing; give the number of tokens to generate");
    }
    let engine = Engine::open(a.on.device, a.runtime.precision)?;
    if a.isan_table.is_some() {
        engine.only_cpu("--isan-table")?;
    }
    let lm = Lm::load(&a.checkpoint)?;
    let table = match a.isan_table {
        Some(n) => Some(table::build_for(&a.checkpoint, &lm, &lm.tok.encode(&a.prime)?, n)?.table),
        None => None,
    };
    let ids = rnnlens::eval::sample::sample_with(&lm, &a.prime, a.length, a.inverse_temperature, a.seed, table.as_ref(), &engine)?;
    let sep = if lm.tok.level == Level::Word && !a.prime.is_empty() && !a.prime.ends_with(char::is_whitespace) { " " } else { "" };
    println!("{}{sep}{}", a.prime, lm.tok.decode(&ids));
    Ok(())
}

fn cmd_params(a: ParamsArgs) -> Result<()> {
    let opts = CellOptions { learn_initial_state: false, ..a.cell_options };
    let symbols = reads_tokens(&a.cell);
    let input = match (symbols, a.input_size, a.vocab_size) {
        (true, _, Some(v)) => v,
        (true, _, None) => bail!("{} switches on the input symbol: give --vocab-size", a.cell),
        (false, Some(d), _) => d,
        (false, None, _) => bail!("give --input-size (the embedding size)"),
    };
    let layers = layer_configs(&a.cell, input, &a.hidden_size, a.projection_size, opts)?;
    let mut recurrent = 0;
    let mut top = 0;
    for l in &layers {
        let cell = l.to_cell()?;
        recurrent += cell.param_len();
        top = cell.sizes().output;
    }
    let (embedding, decoder) = match a.vocab_size {
        Some(v) => (if symbols { 0 } else { v * input }, v * top + v),
        None => (0, 0),
    };
    let total = recurrent + embedding + decoder;
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "recurrent": recurrent, "embedding": embedding, "decoder": decoder, "total": total })
        );
    } else {
        println!("recurrent {}", group(recurrent));
        if a.vocab_size.is_some() {
            println!("embedding {}", group(embedding));
            println!("decoder   {}", group(decoder));
        }
        println!("total     {}", group(total));
    }
    Ok(())
}

/// 1234567 → "1,234,567"
fn group(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn cmd_explain(a: ExplainArgs) -> Result<()> {
    a.runtime.start()?;
    a.runtime.run(|| explain_in(&a))
}

fn explain_in(a: &ExplainArgs) -> Result<()> {
    use rnnlens::explain::report;
    let mut opts = report::Options { components: a.components.clone(), ..Default::default() };
    let ex = if rnnlens::tasks::is_task_checkpoint(&a.checkpoint) {
        if a.distributions == Distributions::Train {
            bail!("--distributions train counts a language model's training split; {} is a sequence-task model", a.checkpoint.display());
        }
        let tm = rnnlens::tasks::TaskModel::load(&a.checkpoint)?;
        let test = a.data.as_ref().map(|d| data::idx::load_mnist(d, "test")).transpose()?;
        let (b, source) = match (a.example, &a.task_input) {
            (Some(seed), _) => (tm.example(seed, test.as_ref())?, format!("the example drawn from seed {seed}")),
            (None, Some(text)) => (tm.parse_input(text)?, "the typed input".to_string()),
            _ => bail!("{} is a sequence-task model: give the sequence with --example SEED (one the task's generator draws) or --task-input \"...\"", a.checkpoint.display()),
        };
        report::explain_task(&tm, &b, &source, &opts)?
    } else {
        // loaded first: a folder of another kind says what it is before the flags are weighed
        let lm = Lm::load(&a.checkpoint)?;
        if a.example.is_some() || a.task_input.is_some() {
            bail!("--example and --task-input are for task models (rnnlens task); {} is a language model: give --text or --input", a.checkpoint.display());
        }
        let tokens = match (&a.text, &a.input, a.split) {
            (Some(text), None, None) => lm.tok.encode(text).context("cannot tokenize --text")?,
            (None, Some(path), None) => data::read_input_file(path, &lm.tok)?,
            (None, None, Some(split)) => split_start(&a.checkpoint, &lm, split)?,
            _ => bail!("give the text to explain with --text \"...\", --input FILE or --split valid|test"),
        };
        opts.distributions = a.distributions.counted_on(&lm, &a.checkpoint).context("--distributions train")?;
        report::explain(&lm, &tokens, &opts)?
    };
    // Write the report first, so that a closed stdout (`| head`) cannot leave it unwritten.
    if let Some(dir) = &a.report {
        ex.write_report(dir)?;
    }
    let mut text = ex.summary();
    if let Some(dir) = &a.report {
        text.push_str(&format!("report: {}\n", dir.join("index.html").display()));
    }
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(())
}

/// The first [`MAX_TOKENS`](rnnlens::explain::report::MAX_TOKENS) tokens of a split of the
/// corpus the checkpoint recorded.
fn split_start(dir: &std::path::Path, lm: &Lm, split: rnnlens::eval::Split) -> Result<Vec<u32>> {
    let Some(saved) = rnnlens::model::run::RunRecord::read(dir)? else {
        bail!("{} records no corpus (no {}); explain a file with --input", dir.display(), rnnlens::model::run::TRAINER_JSON);
    };
    let corpus = saved.load_corpus(dir, &lm.tok)?;
    let mut tokens = match split {
        rnnlens::eval::Split::Valid => corpus.valid,
        rnnlens::eval::Split::Test => corpus.test,
    };
    tokens.truncate(rnnlens::explain::report::MAX_TOKENS);
    Ok(tokens)
}

fn cmd_task(a: TaskOptions, m: &ArgMatches) -> Result<()> {
    // The caller's thread flushes denormals as the library's pool does (the other commands
    // start it the same way). A resumed run starts its pool with the saved thread count
    // (`tasks::run`): started here at every core, it would not repeat the run's bits.
    if a.resume.is_none() || a.runtime.threads.is_some() {
        a.runtime.start_on(a.on.device)?;
    }
    let given = rnnlens::tasks::keep::given_options(|k| m.value_source(k) == Some(ValueSource::CommandLine));
    let (table, _) = rnnlens::tasks::run(&a, &given, false, &mut |_, _| std::ops::ControlFlow::Continue(()))?;
    print!("{table}");
    Ok(())
}

fn cmd_curves(a: CurvesArgs) -> Result<()> {
    use rnnlens::training::metrics::{self, Run};
    let out = match &a.out {
        Some(p) => p.clone(),
        None => {
            let p = PathBuf::from("curves.svg");
            if p.exists() {
                bail!("curves.svg exists here; name the picture with --out FILE (a file named by --out is replaced)");
            }
            p
        }
    };
    // Label each run by its directory's name, or by the whole path where two names agree.
    let name = |p: &PathBuf| p.file_name().map_or(p.display().to_string(), |n| n.to_string_lossy().to_string());
    let runs = a
        .runs
        .iter()
        .map(|p| {
            let unique = a.runs.iter().filter(|q| name(q) == name(p)).count() == 1;
            Run::load(p, if unique { name(p) } else { p.display().to_string() })
        })
        .collect::<Result<Vec<_>>>()?;
    checkpoint::write_atomic(&out, metrics::compare_svg(&runs).as_bytes()).with_context(|| format!("writing {}", out.display()))?;
    print!("{}", metrics::compare_table(&runs));
    eprintln!("curves: {}", out.display());
    Ok(())
}

fn cmd_bench(a: BenchArgs) -> Result<()> {
    use rnnlens::bench::{self, Mode, Shape};
    let shapes = a.shapes.iter().map(|s| Shape::parse(s)).collect::<Result<Vec<_>>>()?;
    let cells = a.cells.unwrap_or_else(|| bench::DEFAULT_CELLS.iter().map(|c| c.to_string()).collect());
    let opts = bench::Options {
        shapes,
        cells,
        modes: Mode::parse_list(&a.mode)?,
        steps: a.steps,
        warmup: a.warmup,
        threads: a.runtime.threads,
        batch: a.batch,
        window: a.window,
        peak: !a.no_peak,
        csv: a.csv,
        quiet: a.quiet,
        device: a.on.device,
        precision: a.runtime.precision,
    };
    bench::run(&opts)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option of every subcommand says what it does, and every one that takes an optional
    /// value shows what happens without it (clap's `[default: ...]` or its own).
    #[test]
    fn every_option_has_a_description_and_shows_its_default() {
        let mut missing = Vec::new();
        let mut cli = Cli::command();
        cli.build();
        for sub in cli.get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                let name = format!("{} {}", sub.get_name(), arg.get_long().map_or(id.to_string(), |l| format!("--{l}")));
                if help.trim().is_empty() {
                    missing.push(format!("{name}: no description"));
                }
                let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
                let shows_default = !arg.get_default_values().is_empty() || help.contains("[default:");
                if takes_value && !arg.is_required_set() && !arg.is_positional() && !shows_default {
                    missing.push(format!("{name}: no default shown"));
                }
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
