//! Training a cell on a task: the model (cells and a linear readout), the loss at the scored
//! positions, the training loop with its test evaluations, and the trained model's checkpoint.

use super::generate::{generate, permutation, Images, TaskKind, TASK_NAMES};
use super::keep::{Point, TaskCheckpointConfig, TaskMeta, TaskResult};
use crate::kernels::rng::Rng;
use crate::training::Stopped;
use anyhow::{bail, Result};
use std::ops::ControlFlow;
use super::config::{threshold, TaskConfig};
use super::step::{CpuSteps, Steps};
use crate::model::{Init, Model};
use crate::kernels::runtime::Device;
use crate::model::engine::Engine;



fn met(kind: TaskKind, p: &Point) -> bool {
    match threshold(kind) {
        Some(("loss <", t)) => p.loss < t,
        Some(("accuracy =", t)) => p.accuracy.is_some_and(|a| a >= t),
        Some((_, t)) => p.accuracy.is_some_and(|a| a > t),
        None => false,
    }
}

/// Train `cell` on `kind` with the paper's set-up, recording the learning curve at every step;
/// stops early once the paper's threshold is met, or where `progress` answers `Break` (the
/// error is then [`crate::training::Stopped`]).
pub fn run_task(kind: TaskKind, cell: &str, cfg: &TaskConfig, progress: impl FnMut(&Point) -> ControlFlow<()>) -> Result<TaskResult> {
    run_task_kept(kind, cell, cfg, None, progress)
}

/// Where a run is kept ([`super::keep`]): its cell's checkpoint directory, saved every `every`
/// steps (0: never during the run), and the saved run it continues, if any.
pub struct Keep<'a> {
    pub dir: &'a std::path::Path,
    pub every: usize,
    pub from: Option<super::keep::Saved>,
}

/// [`run_task`], saving the run every `keep.every` steps in `keep.dir`, or continuing the run
/// saved there: the same bits as an uninterrupted run at the same thread count and precision.
pub fn run_task_kept(kind: TaskKind, cell: &str, cfg: &TaskConfig, keep: Option<Keep>, mut progress: impl FnMut(&Point) -> ControlFlow<()>) -> Result<TaskResult> {
    let t0 = std::time::Instant::now();
    let length = cfg.length(kind);
    kind.check_length(length)?;
    let model = cfg.model(kind, cell)?;
    check_memory(&model, kind, length, cfg)?;
    let dist = crate::training::dist::get();
    if !cfg.batch.is_multiple_of(dist.size) {
        bail!("the batch of {} rows does not divide evenly among the {} ranks; give a --batch-size that does", cfg.batch, dist.size);
    }
    let engine = Engine::open(cfg.device, crate::kernels::precision::current())?;
    let mut result = TaskResult {
        task: format!("{kind:?}"),
        cell: cell.into(),
        steps_to_threshold: None,
        test_accuracy: None,
        evals: Vec::new(),
        early_stop: None,
        curve: Vec::new(),
        seconds: 0.0,
        weights: Vec::new(),
        end: None,
    };
    let (mut keep, from) = match keep {
        Some(Keep { dir, every, from }) => (Some((dir, every)), from),
        None => (None, None),
    };
    // Identical data for every cell: the batches come from their own generator.
    let (mut trainer, mut data_rng, before) = match from {
        Some(saved) => {
            let data_rng = saved.data_rng()?;
            let p = &saved.progress;
            (result.curve, result.seconds, result.evals) = (p.curve.clone(), p.seconds, p.evals.clone());
            let mut e = open_steps(&engine, &model, saved.w)?;
            e.set_moments(saved.m, saved.v, p.optimizer_steps);
            if let Some(s) = p.loss_scale {
                e.set_loss_scale(s);
            }
            (e, data_rng, p.seconds)
        }
        None => {
            let mut w = model.init_params(Init::Xavier, &mut Rng::new(cfg.seed));
            init_overrides(&model, &mut w, cfg)?;
            (open_steps(&engine, &model, w)?, Rng::new(cfg.seed.wrapping_add(1000)), 0.0)
        }
    };
    if !dist.is_root() {
        keep = None;
    }
    let perm = match kind {
        TaskKind::PermutedSeqMnist => permutation(cfg.seed, length),
        _ => Vec::new(),
    };
    let train_images = cfg.mnist.as_ref().map(|(tr, _)| Images { pixels: &tr.images, labels: &tr.labels });
    let seconds = |t0: std::time::Instant| before + t0.elapsed().as_secs_f64();
    for step in result.curve.len() + 1..=cfg.steps {
        // Every rank draws the whole batch (the same data as one process) and trains its rows.
        let b = generate(kind, length, cfg.batch, &mut data_rng, train_images.as_ref().map(|i| (i, &[][..])), &perm, cfg.markers)?;
        let (loss, accuracy) = trainer.step(kind, &model, &b, cfg)?;
        if !loss.is_finite() {
            bail!("{cell} on {kind:?}: the loss became {loss} at step {step}");
        }
        let p = Point { step, loss, accuracy };
        if progress(&p).is_break() {
            let kept = match keep {
                Some((dir, _)) if dir.join(super::keep::PROGRESS_JSON).exists() => format!("{cell} on {kind:?} continues from its last save in {} with --resume", dir.display()),
                _ => format!("{cell} on {kind:?} was not saved"),
            };
            return Err(Stopped { step: step as u64, kept }.into());
        }
        result.curve.push(p);
        if met(kind, &p) {
            result.steps_to_threshold = Some(step);
            break;
        }
        if let Some((_, test)) = cfg.mnist.as_ref().filter(|_| cfg.eval_every > 0 && step % cfg.eval_every == 0) {
            result.evals.push((step, held_out(&mut trainer, kind, &model, cfg, test, length, &perm)?));
            if out_of_patience(&result.evals, cfg.patience) {
                result.early_stop = Some(step);
                break;
            }
        }
        if let Some((dir, _)) = keep.filter(|&(_, every)| every > 0 && step % every == 0 && step < cfg.steps) {
            let (w, m, v, t) = trainer.snapshot()?;
            result.seconds = seconds(t0);
            let progress = super::keep::TaskProgress {
                cell: cell.into(),
                step,
                data_seed: data_rng.position().0,
                data_pos: data_rng.position().1.to_string(),
                optimizer_steps: t,
                loss_scale: trainer.loss_scale()?,
                curve: result.curve.clone(),
                evals: result.evals.clone(),
                early_stop: None,
                seconds: result.seconds,
                steps_to_threshold: None,
                test_accuracy: None,
                finished: false,
            };
            write_task_dir(dir, kind, cell, cfg, &w, step, &super::keep::extra_files(&progress, Some((&m, &v)))?)?;
        }
    }
    // A kept run that ended at its cap keeps where it stood, before the test draws anything:
    // continued to a larger cap it goes on as a run given that cap from the start.
    if keep.is_some() && result.steps_to_threshold.is_none() && result.early_stop.is_none() {
        let (_, m, v, optimizer_steps) = trainer.snapshot()?;
        result.end = Some(super::keep::EndState { m, v, optimizer_steps, data: data_rng.position(), loss_scale: trainer.loss_scale()? });
    }
    if let Some((_, test)) = &cfg.mnist {
        // The final model's score: the last held-out evaluation where it was taken at the end.
        result.test_accuracy = Some(match result.evals.last() {
            Some(&(step, accuracy)) if step == result.curve.len() => accuracy,
            _ => held_out(&mut trainer, kind, &model, cfg, test, length, &perm)?,
        });
    }
    result.seconds = seconds(t0);
    result.weights = trainer.weights()?;
    Ok(result)
}

/// Refuse a task run whose estimated memory ([`memory_need`]) the machine does not have, before
/// anything large is allocated: a `--length` or `--batch-size` a user can type would otherwise
/// end in an abort, and take a Python interpreter with it.
/// Refuse a run of `model` that this machine cannot hold, with the estimate and what to change.
pub(crate) fn check_memory(model: &Model, kind: TaskKind, length: usize, cfg: &TaskConfig) -> Result<()> {
    crate::kernels::runtime::check_fits(
        &format!(
            "the task ({} parameters with their gradient and Adam's moments, a batch of {} sequences of {length} steps and its workspaces)",
            model.n_params, cfg.batch
        ),
        memory_need(model, kind, length, cfg.batch, cfg.device),
        "choose a smaller --length, --batch-size or --hidden-size",
    )
}

/// The accuracy on `cfg.test_limit` held-out images (all of them, or that many spread evenly
/// over the set: the npm digits are stored class by class, so the first N would be a few
/// classes), scored in batches of `cfg.batch`. The generator reads the images it is given: no
/// random draw, so the training data that follows is the same as without the evaluation.
fn held_out(trainer: &mut Box<dyn Steps>, kind: TaskKind, model: &Model, cfg: &TaskConfig, test: &crate::data::idx::Mnist, length: usize, perm: &[usize]) -> Result<f64> {
    let images = Images { pixels: &test.images, labels: &test.labels };
    let total = test.labels.len();
    let n = total.min(cfg.test_limit);
    let (mut right, mut start, mut unused) = (0.0, 0, Rng::new(0));
    while start < n {
        let idx: Vec<usize> = (start..(start + cfg.batch).min(n)).map(|i| i * total / n).collect();
        let b = generate(kind, length, idx.len(), &mut unused, Some((&images, &idx)), perm, cfg.markers)?;
        let (_, acc) = trainer.eval(kind, model, &b)?;
        right += acc.unwrap_or(0.0) * idx.len() as f64;
        start += idx.len();
    }
    Ok(right / n.max(1) as f64)
}

/// Whether the best of the held-out evaluations `(step, accuracy)` lies `patience` steps or more
/// behind the latest (never with `patience` 0; the first of equal bests counts).
fn out_of_patience(evals: &[(usize, f64)], patience: usize) -> bool {
    let (Some(&(last, _)), true) = (evals.last(), patience > 0) else { return false };
    super::keep::best_eval(evals).is_some_and(|(best, _)| last - best >= patience)
}

/// Bytes a task run of `model` holds at its peak, estimated before anything is allocated: the
/// weights, their gradient and Adam's two moments; a batch's inputs and targets; on the CPU the
/// workspaces over the batch's `T·B` positions, twice `forward_bytes` (each layer's tape and the
/// readout's outputs, then the backward's own: at the paper's sizes the peaks measured 0.8-1.9
/// times one `forward_bytes`, docs/benchmarks.md); a tenth more. A GPU run keeps its workspaces
/// on the device, whose own limits are checked when its buffers are made.
pub fn memory_need(model: &Model, kind: TaskKind, length: usize, batch: usize, device: Device) -> u64 {
    let spec = kind.spec();
    let rows = (length as u64).saturating_mul(batch as u64);
    // x, a symbol, and at most one scored position (index, class, values) per position
    let inputs = rows.saturating_mul(4 * (spec.input + spec.outputs) as u64 + 16);
    let workspaces = match device {
        Device::Cpu => crate::model::memory::forward_bytes(model, rows).saturating_mul(2),
        _ => 0,
    };
    let need = (16 * model.n_params as u64).saturating_add(inputs).saturating_add(workspaces);
    need.saturating_add(need / 10)
}


/// The steps of `model` with weights `w` on `engine`'s device.
/// Where the task's options change the initialisation: a learned initial state (the rwa/rda
/// layers' `s0`, or the model's `initial_state`) drawn from N(0, s0_std²) (as the RWA authors'
/// code starts its `s0`), and the GRU's reset and
/// update gate biases (`bias_ih`'s first 2H) at `gru_gate_bias` (as TensorFlow's GRUCell starts
/// them). The draws come from a generator of their own, so that the other weights keep theirs.
fn init_overrides(model: &Model, w: &mut [f32], cfg: &TaskConfig) -> Result<()> {
    check_init(model, cfg)?;
    let mut rng = Rng::new(cfg.seed ^ 0x5330_5330);
    for slot in &model.slots {
        if cfg.s0_std > 0.0 && learned_start(&slot.name) {
            w[slot.range()].iter_mut().for_each(|x| *x = (cfg.s0_std * rng.normal()) as f32);
        }
        if cfg.gru_gate_bias != 0.0 && slot.name.ends_with(".bias_ih") {
            let gates = 2 * slot.len() / 3;
            w[slot.range()][..gates].fill(cfg.gru_gate_bias as f32);
        }
    }
    Ok(())
}

/// A learned initial state's slot: the rwa/rda cells' own `s0`, or the model's
/// `initial_state` (`--learn-initial-state`).
fn learned_start(slot: &str) -> bool {
    slot.ends_with(".s0") || slot.ends_with(&format!(".{}", crate::model::INITIAL_STATE_TENSOR))
}

/// The cell has what the initialisation options change (before anything is written).
pub(crate) fn check_init(model: &Model, cfg: &TaskConfig) -> Result<()> {
    let cell = &model.config.cell_name;
    if cfg.s0_std > 0.0 && !model.slots.iter().any(|s| learned_start(&s.name)) {
        bail!("--s0-std draws a learned initial state (the rwa and rda cells' s0, or the one --learn-initial-state adds); this {cell} has none");
    }
    if cfg.gru_gate_bias != 0.0 && cell != "gru" {
        bail!("--gru-gate-bias sets the GRU's gate biases; {cell} is not a GRU");
    }
    Ok(())
}

fn open_steps(engine: &Engine, model: &Model, w: Vec<f32>) -> Result<Box<dyn Steps>> {
    #[cfg(feature = "gpu")]
    if let Some(gpu) = engine.gpu() {
        return Ok(Box::new(super::step_gpu::GpuSteps::new(gpu.clone(), model, w)?));
    }
    let _ = engine; // the CPU's needs nothing of it
    Ok(Box::new(CpuSteps::new(model, w)))
}

/// Write the model a run trained as a checkpoint directory (config.json with a `task` key,
/// model.safetensors; `vocab.txt` names the outputs), with `extra` files beside it.
pub fn save_task_model(dir: &std::path::Path, kind: TaskKind, r: &TaskResult, cfg: &TaskConfig, extra: &[(&str, Vec<u8>)]) -> Result<()> {
    write_task_dir(dir, kind, &r.cell, cfg, &r.weights, r.curve.len(), extra)
}

/// The checkpoint directory of `cell`'s task model with weights `w` after `steps_run` steps.
fn write_task_dir(dir: &std::path::Path, kind: TaskKind, cell: &str, cfg: &TaskConfig, w: &[f32], steps_run: usize, extra: &[(&str, Vec<u8>)]) -> Result<()> {
    let length = cfg.length(kind);
    let model = cfg.model(kind, cell)?;
    if w.len() != model.n_params {
        bail!("no trained weights to save for {cell}");
    }
    let tensors: Vec<crate::data::checkpoint::NamedTensor> = model
        .named(w)
        .into_iter()
        .map(|(name, shape, data)| crate::data::checkpoint::NamedTensor::new(name, shape.to_vec(), data.to_vec()))
        .collect();
    let config = TaskCheckpointConfig {
        model: &model.config,
        task: TaskMeta {
            name: TASK_NAMES[kind as usize].to_string(),
            length,
            seed: cfg.seed,
            steps_run,
            permutation: (kind == TaskKind::PermutedSeqMnist).then(|| permutation(cfg.seed, length)),
            markers: cfg.markers,
        },
    };
    let outputs: Vec<String> = (0..kind.spec().outputs).map(|i| format!("output{i}")).collect();
    crate::data::checkpoint::save_model_dir(dir, &config, &tensors, &outputs, false, extra)
}

#[cfg(test)]
mod run_tests {
    use super::*;
    use crate::tasks::task_model;

    #[test]
    fn a_gru_learns_short_parentheses_counting_and_isan_reads_symbols() {
        let cfg = TaskConfig { hidden: 24, batch: 16, steps: 150, lr: 0.01, ..Default::default() };
        let r = run_task(TaskKind::Parentheses, "gru", &cfg, |_| ControlFlow::Continue(())).unwrap();
        let first = r.curve.first().unwrap().loss;
        let last = r.curve.last().unwrap().loss;
        assert!(last < 0.5 * first, "loss {first} -> {last}");
        let r = run_task(TaskKind::Parentheses, "isan", &cfg, |_| ControlFlow::Continue(())).unwrap();
        assert!(r.curve.last().unwrap().loss < r.curve.first().unwrap().loss);
        assert!(run_task(TaskKind::Addition, "isan", &cfg, |_| ControlFlow::Continue(())).is_err());
    }

    #[test]
    fn a_task_the_machine_cannot_hold_is_refused_before_it_allocates() {
        assert!(crate::kernels::runtime::available_memory().is_some(), "the machine says its available memory (/proc/meminfo)");
        // 100 sequences of 10^9 steps: 400 GB of inputs alone, where the run used to abort in
        // the allocator (and take a Python interpreter with it).
        let cfg = TaskConfig { hidden: 8, batch: 100, steps: 1, length: Some(1_000_000_000), ..Default::default() };
        let e = run_task(TaskKind::Copy, "gru", &cfg, |_| ControlFlow::Continue(())).unwrap_err().to_string();
        assert!(e.contains("needs about") && e.contains("GiB") && e.contains("smaller --length"), "{e}");
        // The same for a batch no machine holds; a run the machine holds goes on.
        let big = TaskConfig { hidden: 8, batch: 1 << 40, steps: 1, length: Some(40), ..Default::default() };
        assert!(run_task(TaskKind::Addition, "lstm", &big, |_| ControlFlow::Continue(())).unwrap_err().to_string().contains("needs about"));
        let small = TaskConfig { hidden: 8, batch: 4, steps: 2, length: Some(40), ..Default::default() };
        assert_eq!(run_task(TaskKind::Addition, "lstm", &small, |_| ControlFlow::Continue(())).unwrap().curve.len(), 2);
    }

    #[test]
    fn a_run_stopped_and_resumed_from_its_last_save_gives_the_same_bits() {
        for (kind, cell) in [(TaskKind::ClassifyLength, "lstm"), (TaskKind::Parentheses, "isan"), (TaskKind::Multicopy, "rda-exp-tanh")] {
            let cfg = TaskConfig { hidden: 8, batch: 6, steps: 37, length: Some(40), ..Default::default() };
            let whole = run_task(kind, cell, &cfg, |_| ControlFlow::Continue(())).unwrap();
            assert!(whole.curve.len() > 14, "{kind:?}: the run ends before the stop");
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join(cell);
            // Stopped at step 14 (as by Ctrl-C): the save at step 10 is what is left.
            let keep = Keep { dir: &dir, every: 5, from: None };
            let e = run_task_kept(kind, cell, &cfg, Some(keep), |p| if p.step == 14 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }).unwrap_err();
            assert!(e.to_string().contains("continues from its last save"), "{e}");
            let model = task_model(kind, cell, cfg.hidden, cfg.learn_initial_state(kind)).unwrap();
            let names: Vec<(String, Vec<usize>)> = model.slots.iter().map(|s| (s.name.clone(), s.shape.clone())).collect();
            let saved = super::super::keep::load(&dir, &names, cell).unwrap().unwrap();
            assert_eq!((saved.progress.step, saved.progress.finished), (10, false), "{kind:?}");
            let keep = Keep { dir: &dir, every: 5, from: Some(saved) };
            let resumed = run_task_kept(kind, cell, &cfg, Some(keep), |p| {
                assert!(p.step > 10, "step {} trained again", p.step);
                ControlFlow::Continue(())
            })
            .unwrap();
            assert_eq!(resumed.curve, whole.curve, "{kind:?} {cell}");
            assert!(resumed.weights.iter().zip(&whole.weights).all(|(a, b)| a.to_bits() == b.to_bits()), "{kind:?} {cell}");
        }
    }

    #[test]
    fn the_authors_set_ups_draw_s0_open_the_grus_gates_and_clip_0_clips_nothing() {
        let run = |cell: &str, cfg: &TaskConfig| run_task(TaskKind::Addition, cell, cfg, |_| ControlFlow::Continue(())).map(|r| r.weights);
        // One step at a rate too small to move a weight: the weights are where they started.
        let base = TaskConfig { hidden: 200, batch: 4, steps: 1, length: Some(20), lr: 1e-12, ..Default::default() };
        let zero = run("rwa", &base).unwrap();
        let drawn = run("rwa", &TaskConfig { s0_std: 2.0, ..base.clone() }).unwrap();
        let model = task_model(TaskKind::Addition, "rwa", 200, false).unwrap();
        let s0 = model.slots.iter().find(|s| s.name == "rnn.0.s0").unwrap().range();
        assert!(zero[s0.clone()].iter().all(|x| x.abs() < 1e-9), "s0 starts at 0 by default");
        let n = s0.len() as f64;
        let mean = drawn[s0.clone()].iter().map(|&x| x as f64).sum::<f64>() / n;
        let sd = (drawn[s0.clone()].iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        // 200 draws of N(0, 4): the mean within 3 of its standard errors (0.14), the spread within 15 %.
        assert!(mean.abs() < 0.45 && (1.7..2.3).contains(&sd), "s0 drawn with mean {mean}, sd {sd}");
        // The other weights keep their draws (apart from the step's 1e-12).
        let moved = zero.iter().zip(&drawn).enumerate().filter(|(i, _)| !s0.contains(i)).map(|(_, (a, b))| (a - b).abs()).fold(0f32, f32::max);
        assert!(moved < 1e-10, "another weight moved by {moved}");
        assert!(run("gru", &TaskConfig { s0_std: 1.0, ..base.clone() }).unwrap_err().to_string().contains("gru has none"));
        // A GRU with a learned initial state has one to draw.
        let g = run("gru", &TaskConfig { s0_std: 1.0, learn_initial_state: Some(true), ..base.clone() }).unwrap();
        let gm = task_model(TaskKind::Addition, "gru", 200, true).unwrap();
        let r = gm.slots.iter().find(|s| s.name == "rnn.0.initial_state").unwrap().range();
        let sd = (g[r.clone()].iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / r.len() as f64).sqrt();
        assert!((0.85..1.15).contains(&sd), "the GRU's initial state drawn with sd {sd}");
        // Clipping off is clipping at infinity; clipping hard changes the steps.
        let cfg = TaskConfig { hidden: 8, batch: 4, steps: 3, length: Some(20), lr: 0.01, ..Default::default() };
        let off = run("rwa", &TaskConfig { clip: 0.0, ..cfg.clone() }).unwrap();
        let huge = run("rwa", &TaskConfig { clip: 1e30, ..cfg.clone() }).unwrap();
        let hard = run("rwa", &TaskConfig { clip: 1e-6, ..cfg.clone() }).unwrap();
        assert!(off.iter().zip(&huge).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(off.iter().zip(&hard).any(|(a, b)| a != b));
        // TensorFlow's GRU start: the reset and update rows of bias_ih at 1, the candidate's at 0.
        let tf = run("gru", &TaskConfig { gru_gate_bias: 1.0, ..base.clone() }).unwrap();
        let gru = task_model(TaskKind::Addition, "gru", 200, false).unwrap();
        let b = gru.slots.iter().find(|s| s.name == "rnn.0.bias_ih").unwrap().range();
        assert!(tf[b.start..b.start + 400].iter().all(|x| (x - 1.0).abs() < 1e-9) && tf[b.start + 400..b.end].iter().all(|x| x.abs() < 1e-9));
        assert!(run("lstm", &TaskConfig { gru_gate_bias: 1.0, ..base.clone() }).unwrap_err().to_string().contains("lstm is not a GRU"));
    }

    #[test]
    fn classify_length_learns_the_initial_state_by_default() {
        let has = |m: &Model| m.slots.iter().any(|s| s.name == "rnn.0.initial_state");
        let cfg = TaskConfig::default();
        for (kind, cell, want) in [
            (TaskKind::ClassifyLength, "gru", true),
            (TaskKind::ClassifyLength, "lstm", true),
            (TaskKind::ClassifyLength, "rwa", false), // its own s0 instead
            (TaskKind::Addition, "gru", false),
        ] {
            let m = task_model(kind, cell, 8, cfg.learn_initial_state(kind)).unwrap();
            assert_eq!(has(&m), want, "{kind:?} {cell}");
        }
        let cfg = TaskConfig { learn_initial_state: Some(false), ..cfg };
        assert!(!has(&task_model(TaskKind::ClassifyLength, "gru", 8, cfg.learn_initial_state(TaskKind::ClassifyLength)).unwrap()));
        // A short run trains through it.
        let cfg = TaskConfig { hidden: 8, batch: 8, steps: 3, length: Some(12), ..Default::default() };
        let r = run_task(TaskKind::ClassifyLength, "lstm", &cfg, |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(r.curve.len(), 3);
        assert!(r.curve.iter().all(|p| p.loss.is_finite()));
    }

    #[test]
    fn a_permuted_mnist_model_is_saved_with_its_permutation() {
        let mk = |n: usize| crate::data::idx::Mnist {
            images: (0..n * 784).map(|i| (i * 7 % 256) as u8).collect(),
            labels: (0..n).map(|i| (i % 10) as u8).collect(),
            rows: 28,
            cols: 28,
        };
        let cfg = TaskConfig { hidden: 4, batch: 3, steps: 2, length: Some(49), seed: 5, mnist: Some((mk(6), mk(4))), ..Default::default() };
        let r = run_task(TaskKind::PermutedSeqMnist, "gru", &cfg, |_| ControlFlow::Continue(())).unwrap();
        assert!(r.test_accuracy.is_some());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gru");
        save_task_model(&path, TaskKind::PermutedSeqMnist, &r, &cfg, &[]).unwrap();
        let (config, tensors, vocab) =
            crate::data::checkpoint::load_model_dir::<serde_json::Value>(&path, |_| false).unwrap();
        assert_eq!(vocab.len(), 10);
        let want: Vec<serde_json::Value> = permutation(5, 49).into_iter().map(|p| p.into()).collect();
        assert_eq!(config["task"]["permutation"].as_array().unwrap(), &want);
        assert_eq!(config["task"]["length"], 49);
        assert_eq!(config["input_size"], 1);
        let n: usize = tensors.iter().map(|t| t.data.len()).sum();
        assert_eq!(n, r.weights.len());
        let model = task_model(TaskKind::PermutedSeqMnist, "gru", 4, false).unwrap();
        for t in &tensors {
            let (_, _, data) = model.named(&r.weights).into_iter().find(|(name, _, _)| *name == t.name).unwrap();
            assert_eq!(&t.data[..], data, "{}", t.name);
        }
    }

    #[test]
    fn held_out_evaluations_stop_a_run_by_patience_and_leave_its_training_unchanged() {
        let mk = |n: usize, salt: usize| crate::data::idx::Mnist {
            images: (0..n * 784).map(|i| ((i * 7 + salt * 13) % 256) as u8).collect(),
            labels: (0..n).map(|i| ((i + salt) % 10) as u8).collect(),
            rows: 28,
            cols: 28,
        };
        let base = TaskConfig { hidden: 4, batch: 3, steps: 12, length: Some(49), seed: 5, mnist: Some((mk(12, 0), mk(6, 1))), ..Default::default() };
        let go = |cfg: &TaskConfig| run_task(TaskKind::SeqMnist, "gru", cfg, |_| ControlFlow::Continue(())).unwrap();
        let plain = go(&base);
        let watched = go(&TaskConfig { eval_every: 2, ..base.clone() });
        // Evaluating draws nothing from the data: the same training, step for step.
        assert_eq!(watched.curve.iter().map(|p| p.loss).collect::<Vec<_>>(), plain.curve.iter().map(|p| p.loss).collect::<Vec<_>>());
        assert_eq!(watched.evals.iter().map(|e| e.0).collect::<Vec<_>>(), vec![2, 4, 6, 8, 10, 12]);
        assert!(watched.evals.iter().all(|e| (0.0..=1.0).contains(&e.1)) && watched.early_stop.is_none());
        // The last evaluation is the final model's: the end's test score.
        assert_eq!(watched.evals.last().unwrap().1, watched.test_accuracy.unwrap());
        // The rule itself: stop once the best lies `patience` steps behind the latest.
        assert!(!out_of_patience(&[(2, 0.5), (4, 0.6)], 2));
        assert!(out_of_patience(&[(2, 0.5), (4, 0.6), (6, 0.6)], 2), "an equal accuracy is no improvement");
        assert!(!out_of_patience(&[(2, 0.5), (4, 0.4)], 0), "patience 0: never");
        let stopped = go(&TaskConfig { eval_every: 2, patience: 2, ..base.clone() });
        let s = stopped.early_stop.expect("a run this small stops improving within 12 steps");
        assert_eq!(stopped.curve.len(), s);
        assert!(out_of_patience(&stopped.evals, 2) && !out_of_patience(&stopped.evals[..stopped.evals.len() - 1], 2));
        // Stopped at step 7 and resumed from the save at step 5: the evaluations go on as in
        // one run (those before the save kept, none repeated).
        let cfg = TaskConfig { eval_every: 2, ..base.clone() };
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gru");
        let keep = Keep { dir: &dir, every: 5, from: None };
        assert!(run_task_kept(TaskKind::SeqMnist, "gru", &cfg, Some(keep), |p| if p.step == 7 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }).is_err());
        let model = task_model(TaskKind::SeqMnist, "gru", cfg.hidden, cfg.learn_initial_state(TaskKind::SeqMnist)).unwrap();
        let names: Vec<(String, Vec<usize>)> = model.slots.iter().map(|s| (s.name.clone(), s.shape.clone())).collect();
        let saved = super::super::keep::load(&dir, &names, "gru").unwrap().unwrap();
        assert_eq!(saved.progress.evals.len(), 2);
        let resumed = run_task_kept(TaskKind::SeqMnist, "gru", &cfg, Some(Keep { dir: &dir, every: 5, from: Some(saved) }), |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(resumed.evals, watched.evals);
    }
}
