//! `rnnlens task`: its options, and a run of them: each cell trained on the task, its model
//! saved, the comparison's table, curves and plot written.

use super::{curves_csv, curves_svg, keep, run_task_kept, save_task_model, table, Point, TaskConfig, TaskKind, TaskResult};
use crate::cells::registry;
use crate::data::checkpoint;
use crate::kernels::num::DenormalsFlushed;
use crate::kernels::runtime::Runtime;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::ops::ControlFlow;
use std::path::PathBuf;

/// The options of `rnnlens task`, declared once for the command line and for Python
/// (`rnnlens.task(name, **options)`: the same names).
#[derive(Clone, Debug, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskOptions {
    /// addition | classify-length | seq-mnist | permuted-seq-mnist | copy | multicopy | parentheses
    /// (none with --resume, which reads it from the run)
    #[arg(required_unless_present = "resume", default_value = "", hide_default_value = true)]
    pub name: String,
    /// The cell to train (as for train --cell)
    #[arg(long, default_value = "gru", conflicts_with = "compare")]
    pub cell: String,
    /// Train several cells on identical data and seeds and print one table, e.g. gru,lstm,rwa
    /// [default: none: --cell alone]
    #[arg(long, value_delimiter = ',')]
    pub compare: Option<Vec<String>>,
    /// Units per cell (the paper: 250)
    #[arg(long, default_value_t = 250)]
    pub hidden_size: usize,
    /// Sequences per batch (the paper: 100)
    #[arg(long, default_value_t = 100)]
    pub batch_size: usize,
    /// Optimizer steps at most (training stops earlier at the paper's threshold)
    #[arg(long, default_value_t = 10000)]
    pub steps: usize,
    /// Task length N instead of the paper's, to run at a reduced scale. addition: T = N
    /// (paper 1000); classify-length: lengths uniform in 1..=N, class L > N/2 (paper 1000);
    /// copy: T = N, i.e. 10 symbols, then blanks with the recall symbol anywhere that leaves room
    /// for the 10 outputs right after it (paper 120, N >= 21); multicopy: T = N in N/20
    /// segments of 20 steps (paper 1000, a multiple of 20); parentheses: T = N (paper 100); the MNIST tasks: 784 (paper), 196 or
    /// 49 (the image averaged over 2×2 or 4×4 pixel blocks) [default: the paper's]
    #[arg(long)]
    pub length: Option<usize>,
    /// Start cells that otherwise start from zeros (lstm, gru, rnn, irnn, ran-*, the LSTM
    /// ablations) from a learned initial state, as the paper does for classify-length (its
    /// default there; `--learn-initial-state false` turns it off). isan, linear, rwa and rda
    /// learn their own and ignore it [default: true for classify-length, false otherwise]
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub learn_initial_state: Option<bool>,
    /// The GRU in PyTorch's form, the reset gate applied after the recurrent product (true), or
    /// the papers' form, before it (false)
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true)]
    pub gru_reset_after: bool,
    /// The GRU's reset and update gate biases start at this value instead of 0 (TensorFlow's
    /// GRUCell starts them at 1)
    #[arg(long, default_value_t = 0.0)]
    pub gru_gate_bias: f64,
    /// The addition task's two markers: one in each half (rnnlens's reading of the paper's "all
    /// zeros except for two ones"), or anywhere at two distinct steps (the RWA authors' generator)
    #[arg(long, value_enum, default_value_t = crate::tasks::Markers::Halves)]
    pub addition_markers: crate::tasks::Markers,
    /// Adam's learning rate
    #[arg(long, default_value_t = 0.001)]
    pub lr: f64,
    /// Every gradient value clipped to [-CLIP, CLIP] (the paper: 1); 0 turns clipping off, as
    /// the RWA authors' code for these tasks has it
    #[arg(long, default_value_t = 1.0)]
    pub clip: f64,
    /// A learned initial state (the rwa and rda cells' s0, or the one --learn-initial-state
    /// adds) drawn from N(0, S0_STD²) instead of starting at 0 (the paper's rule for biases); the
    /// RWA authors' code draws its s0 with 1
    #[arg(long, default_value_t = 0.0)]
    pub s0_std: f64,
    /// Seed of the data, the initialisation and the shuffling
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory with the MNIST or Fashion-MNIST IDX files (needed by the MNIST tasks)
    /// [default: none]
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Test images scored at the end of an MNIST task (fewer than the set holds: spread evenly
    /// over it)
    #[arg(long, default_value_t = 10000)]
    pub test_images: usize,
    /// MNIST tasks: score the held-out images (--test-images of them) every N steps as well,
    /// each evaluation a point of the run's held-out curve (0: once, at the end)
    #[arg(long, default_value_t = 0)]
    pub eval_every: usize,
    /// MNIST tasks with --eval-every: stop once the best held-out accuracy has not improved for
    /// N steps (0: run to --steps)
    #[arg(long, default_value_t = 0)]
    pub patience: usize,
    /// Where the table (CSV), the learning curves (CSV), their plot (SVG) and each trained
    /// model (a checkpoint directory per cell, with the task and, for permuted-seq-mnist, its
    /// permutation in config.json) go
    #[arg(long, default_value = "runs/task")]
    pub out: PathBuf,
    /// Save each cell's model and training state every N steps (0: only at its end), so that
    /// a killed run continues with --resume
    #[arg(long, default_value_t = 100)]
    pub save_every: usize,
    /// Continue the run saved in DIR (its options as they were; --threads may be given again)
    /// from each cell's last save: the same result as an uninterrupted run [default: none]
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Start again in an --out that holds an earlier task run, replacing its cells' models
    #[arg(long)]
    pub overwrite: bool,
    #[command(flatten)]
    pub runtime: Runtime,
    #[command(flatten)]
    #[serde(rename = "device", with = "crate::kernels::runtime::device_name")]
    pub on: crate::kernels::runtime::OnDevice,
}

impl Default for TaskOptions {
    /// The command line's defaults (the task itself has none: `addition` stands in for it).
    fn default() -> Self {
        use clap::{Args, FromArgMatches};
        let cmd = Self::augment_args(clap::Command::new("task").no_binary_name(true));
        let m = cmd.try_get_matches_from(["addition"]).expect("every option has a default");
        Self::from_arg_matches(&m).expect("the declared defaults parse")
    }
}

/// Run `rnnlens task` as `a` says: train each cell on the task, save each trained model in
/// `OUT/CELL`, write the table, the curves (CSV) and their plot, and return the table to print
/// with the results. `given` names the options the caller set (flags, Python's keys): with
/// `resume`, those the saved run may change ([`keep::RESUMABLE`]) apply and any other must
/// equal its saved value. `observe` hears every cell's every step; a `Break` stops the
/// comparison ([`crate::training::Stopped`]).
pub fn run(a: &TaskOptions, given: &[String], quiet: bool, observe: &mut dyn FnMut(&str, &Point) -> ControlFlow<()>) -> Result<(String, Vec<TaskResult>)> {
    let resumed;
    let a = match &a.resume {
        Some(dir) => {
            resumed = keep::resume_options(dir, a, given)?;
            &resumed
        }
        None => a,
    };
    a.on.device.check(a.runtime.precision)?;
    a.runtime.run(|| run_in(a, quiet, observe))
}

/// [`run`] inside its precision's scope.
fn run_in(a: &TaskOptions, quiet: bool, observe: &mut dyn FnMut(&str, &Point) -> ControlFlow<()>) -> Result<(String, Vec<TaskResult>)> {
    let threads = a.runtime.start_pool()?;
    // Under mpirun every rank trains its rows; rank 0 alone speaks and writes.
    let root = crate::training::dist::get().is_root();
    let quiet = quiet || !root;
    // As the command line computes, also where the caller is not ours (Python).
    let _flushed = DenormalsFlushed::new();
    let kind: TaskKind = a.name.parse()?;
    let cells = a.compare.clone().unwrap_or_else(|| vec![a.cell.clone()]);
    for c in &cells {
        registry::lookup(c)?;
    }
    let cfg = task_config(a, kind)?;
    let length = cfg.length(kind);
    kind.check_length(length)?;
    check_cells(a, kind, &cells, &cfg, root, length)?;
    if !quiet {
        announce(a, kind, &cells, &cfg, threads);
    }
    // Written again on a resume: a raised --steps is the run's cap from now on.
    if root {
        std::fs::create_dir_all(&a.out).with_context(|| format!("cannot create {}", a.out.display()))?;
        let saved = TaskOptions { runtime: Runtime { threads: Some(threads), ..a.runtime }, resume: None, overwrite: false, ..a.clone() };
        checkpoint::write_atomic(&a.out.join(keep::TASK_JSON), &checkpoint::encode_json(&saved)?)?;
    }
    let mut results = Vec::new();
    for cell in &cells {
        results.push(train_cell(a, kind, cell, &cfg, quiet, root, observe)?);
    }
    let text = table(kind, &results, cfg.steps, length);
    if root {
        write_comparison(a, kind, &cfg, &results, quiet)?;
    }
    Ok((if root { text } else { String::new() }, results))
}

/// The task's configuration from the options, every option checked first (before any data is
/// read), the MNIST images read where the task needs them.
fn task_config(a: &TaskOptions, kind: TaskKind) -> Result<TaskConfig> {
    if a.hidden_size == 0 || a.batch_size == 0 || a.steps == 0 {
        bail!("--hidden-size, --batch-size and --steps must be positive");
    }
    if !(a.lr > 0.0 && a.lr.is_finite()) {
        bail!("--lr must be a positive number, got {}", a.lr);
    }
    if !(a.clip >= 0.0 && a.clip.is_finite()) {
        bail!("--clip must be a number >= 0 (0: no clipping), got {}", a.clip);
    }
    if !a.gru_gate_bias.is_finite() {
        bail!("--gru-gate-bias must be a finite number, got {}", a.gru_gate_bias);
    }
    if !(a.s0_std >= 0.0 && a.s0_std.is_finite()) {
        bail!("--s0-std must be a number >= 0, got {}", a.s0_std);
    }
    let is_mnist = matches!(kind, TaskKind::SeqMnist | TaskKind::PermutedSeqMnist);
    if (a.eval_every > 0 || a.patience > 0) && !is_mnist {
        bail!("--eval-every and --patience score the held-out images of the MNIST tasks; the {} task has none", a.name);
    }
    if a.patience > 0 && a.eval_every == 0 {
        bail!("--patience counts the steps since the best held-out evaluation: give --eval-every too");
    }
    if !a.addition_markers.is_default() && kind != TaskKind::Addition {
        bail!("--addition-markers lays out the addition task's markers; the {} task has none", a.name);
    }
    let mnist = if is_mnist {
        let dir = a.data.clone().context("the MNIST tasks need --data DIR holding the IDX files (MNIST, or Fashion-MNIST from Debian's dataset-fashion-mnist package under /usr/share/datasets/fashion-mnist/)")?;
        Some((crate::data::idx::load_mnist(&dir, "train")?, crate::data::idx::load_mnist(&dir, "test")?))
    } else {
        None
    };
    Ok(TaskConfig {
        hidden: a.hidden_size,
        batch: a.batch_size,
        steps: a.steps,
        lr: a.lr,
        clip: a.clip,
        s0_std: a.s0_std,
        gru_gate_bias: a.gru_gate_bias,
        seed: a.seed,
        mnist,
        test_limit: a.test_images,
        eval_every: a.eval_every,
        patience: a.patience,
        length: a.length,
        learn_initial_state: a.learn_initial_state,
        device: a.on.device,
        gru_reset_after: a.gru_reset_after,
        markers: a.addition_markers,
    })
}

/// Refuse, before anything is written, an --out that holds another run (unless --overwrite or
/// --resume), a cell directory there holding other files, a resumed cell past the new --steps,
/// and a model this machine cannot hold.
fn check_cells(a: &TaskOptions, kind: TaskKind, cells: &[String], cfg: &TaskConfig, root: bool, length: usize) -> Result<()> {
    // A resumed run's options are its task.json's, `resume` naming its directory (`out`).
    let resuming = a.resume.is_some();
    if root && !resuming {
        keep::check_fresh(&a.out, a.overwrite)?;
    }
    for cell in cells {
        checkpoint::check_replaceable(&a.out.join(cell))?;
        if let Some(n) = keep::steps_run(&a.out.join(cell))?.filter(|&n| resuming && n > cfg.steps) {
            bail!("{cell} has run {n} steps already: --steps {} is fewer; give at least {n}", cfg.steps);
        }
        let model = cfg.model(kind, cell)?;
        super::train::check_init(&model, cfg)?;
        super::train::check_memory(&model, kind, length, cfg)?;
    }
    Ok(())
}

/// The run's set-up in one line (and where the CPU's products run), before training.
fn announce(a: &TaskOptions, kind: TaskKind, cells: &[String], cfg: &TaskConfig, threads: usize) {
    // The cells that learn their own initial state (RWA/RDA's s0, ISAN's h0) do so whatever
    // the option says; the others start from zeros or from the learned state it adds.
    let own: Vec<&str> = cells.iter().map(String::as_str).filter(|c| registry::learns_own_initial_state(c)).collect();
    let others = cells.len() - own.len();
    let start = match (others, own.is_empty(), cfg.learn_initial_state(kind)) {
        (0, _, _) => format!("{} {} initial state", own.join(", "), if own.len() == 1 { "learns its own" } else { "learn their own" }),
        (_, true, true) => "learned initial state".to_string(),
        (_, true, false) => "zero initial state".to_string(),
        (_, false, l) => format!("{} initial state ({} learn their own)", if l { "learned" } else { "zero" }, own.join(", ")),
    };
    eprintln!(
        "task {}: length {}, {} units, batch {}, Adam {}, {}, at most {} steps, {start}{}, {}",
        a.name,
        cfg.length(kind),
        cfg.hidden,
        cfg.batch,
        cfg.lr,
        if cfg.clip > 0.0 { format!("gradients clipped to [-{0}, {0}]", cfg.clip) } else { "gradients not clipped".into() },
        cfg.steps,
        if cfg.s0_std > 0.0 { format!(" (drawn from N(0, {}²))", cfg.s0_std) } else { String::new() },
        match a.on.device {
            crate::kernels::runtime::Device::Cpu => format!("{threads} thread{}, flush-to-zero on", if threads == 1 { "" } else { "s" }),
            crate::kernels::runtime::Device::Gpu => "on the GPU".to_string(),
        }
    );
    if a.on.device == crate::kernels::runtime::Device::Cpu {
        eprintln!("{}", crate::kernels::gemm::products_line(crate::kernels::precision::current()));
    }
}

/// Train one cell (continuing from its last save on a resume; read back if it had finished),
/// with a progress bar, or a line every 30 s without a terminal; rank 0 saves its model.
fn train_cell(
    a: &TaskOptions,
    kind: TaskKind,
    cell: &str,
    cfg: &TaskConfig,
    quiet: bool,
    root: bool,
    observe: &mut dyn FnMut(&str, &Point) -> ControlFlow<()>,
) -> Result<TaskResult> {
    let dir = a.out.join(cell);
    let model = cfg.model(kind, cell)?;
    let names: Vec<(String, Vec<usize>)> = model.slots.iter().map(|s| (s.name.clone(), s.shape.clone())).collect();
    let mut saved = if a.resume.is_some() { keep::load(&dir, &names, cell)? } else { None };
    if let Some(s) = saved.as_ref().filter(|s| s.done_at(cfg.steps)) {
        if !quiet {
            let why = s.progress.steps_to_threshold.map_or(format!("its cap of {} steps reached; --steps N continues it", s.progress.step), |n| format!("the threshold met at step {n}"));
            eprintln!("{cell}: finished earlier ({why}), read from {}", dir.display());
        }
        return Ok(saved.expect("checked").result(format!("{kind:?}")));
    }
    if let Some(s) = saved.as_mut().filter(|s| s.progress.finished) {
        // Ended at a lower cap: it goes on from where its last step left it.
        if s.m.is_empty() {
            bail!(
                "{cell} ended at its cap of {} steps, saved without its optimizer's state (by an rnnlens before 2026-12): it cannot continue as one run; start again with --overwrite --steps {}",
                s.progress.step,
                cfg.steps
            );
        }
        (s.progress.finished, s.progress.test_accuracy) = (false, None);
    }
    if let (Some(s), false) = (&saved, quiet) {
        eprintln!("{cell}: continuing from step {} saved in {}", s.progress.step, dir.display());
    }
    let bar = indicatif::ProgressBar::new(cfg.steps as u64);
    bar.set_style(indicatif::ProgressStyle::with_template("{prefix:>16} {bar:30} {pos}/{len} [{elapsed}<{eta}] {msg}").expect("valid template"));
    bar.set_prefix(cell.to_string());
    if quiet {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let first = saved.as_ref().map_or(0, |s| s.progress.step);
    bar.set_position(first as u64);
    let keep = super::Keep { dir: &dir, every: a.save_every, from: saved };
    let (t_start, mut t_report) = (std::time::Instant::now(), std::time::Instant::now());
    let r = run_task_kept(kind, cell, cfg, Some(keep), |p| {
        bar.inc(1);
        let acc = p.accuracy.map_or(String::new(), |x| format!(", accuracy {x:.4}"));
        bar.set_message(format!("loss {:.5}{acc}", p.loss));
        // Without a terminal the bar is hidden: progress as a line every 30 s instead.
        if !quiet && bar.is_hidden() && t_report.elapsed().as_secs() >= 30 {
            let per = t_start.elapsed().as_secs_f64() / (p.step - first) as f64;
            let left = (per * (cfg.steps - p.step) as f64) as u64;
            eprintln!("{cell}: step {}/{}, loss {:.5}{acc}, {per:.2} s a step, at most {}:{:02}:{:02} left", p.step, cfg.steps, p.loss, left / 3600, left / 60 % 60, left % 60);
            t_report = std::time::Instant::now();
        }
        observe(cell, p)
    })?;
    bar.finish_and_clear();
    if root {
        let test = r.test_accuracy.map_or(String::new(), |a| format!(", test accuracy {a:.4}"));
        if !quiet {
            eprintln!("{cell}: {} steps in {:.1}s{test}", r.curve.len(), r.seconds);
        }
        let moments = r.end.as_ref().map(|e| (&e.m[..], &e.v[..]));
        save_task_model(&dir, kind, &r, cfg, &keep::extra_files(&keep::finished_progress(&r), moments)?)?;
        if !quiet {
            eprintln!("saved the trained {cell} in {}", dir.display());
        }
    }
    Ok(r)
}

/// The comparison's files in --out: the table (CSV), every cell's curve (CSV) and their plot.
fn write_comparison(a: &TaskOptions, kind: TaskKind, cfg: &TaskConfig, results: &[TaskResult], quiet: bool) -> Result<()> {
    let (length, learned) = (cfg.length(kind), cfg.learn_initial_state(kind));
    let mut csv = String::from("cell,length,learned_initial_state,max_steps,steps_to_threshold,test_accuracy,steps_run,final_loss,final_accuracy,seconds\n");
    for r in results {
        let own = registry::learns_own_initial_state(&r.cell);
        csv.push_str(&format!(
            "{},{length},{},{},{},{},{},{},{},{:.2}\n",
            r.cell,
            learned || own,
            cfg.steps,
            r.steps_to_threshold.map_or(String::new(), |n| n.to_string()),
            r.test_accuracy.map_or(String::new(), |x| x.to_string()),
            r.curve.len(),
            r.curve.last().map_or(f64::NAN, |p| p.loss),
            r.curve.last().and_then(|p| p.accuracy).map_or(String::new(), |x| x.to_string()),
            r.seconds
        ));
    }
    checkpoint::write_atomic(&a.out.join("table.csv"), csv.as_bytes())?;
    checkpoint::write_atomic(&a.out.join("curves.csv"), curves_csv(results).as_bytes())?;
    checkpoint::write_atomic(&a.out.join("curves.svg"), curves_svg(kind, results).as_bytes())?;
    if !quiet {
        eprintln!("wrote {}/table.csv, curves.csv, curves.svg", a.out.display());
    }
    Ok(())
}
