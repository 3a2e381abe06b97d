//! `rnnlens bench --device gpu`: every shape on the GPU engine (`model::gpu`; the task shapes' models
//! through `GpuLm::for_task`, its loss on the host as `rnnlens task` computes it), timed as the
//! CPU's are (the median of timed steps after warm-up ones), with the rate of the
//! step's GEMMs against the same GEMMs run alone on the device, back to back.

use super::{Mode, Options, Row, Shape};
use crate::kernels::f64::median;
use crate::kernels::gpu::{Gpu, Program};
use crate::kernels::rng::Rng;
use crate::model::gpu::GpuLm;
use crate::model::Init;
use crate::training::TrainConfig;
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::time::Instant;

/// Seconds of `f` (which waits for the device), the median of `steps` after `warmup`.
fn time(warmup: usize, steps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    let mut t = Vec::with_capacity(steps);
    for _ in 0..steps {
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64());
    }
    Ok(median(&mut t))
}

/// Seconds per dispatch of a program of 1,000 small dependent dispatches (each a barrier).
fn dispatch_cost(gpu: &Gpu) -> Result<f64> {
    use crate::kernels::gpu::{op, Arena};
    let arena = Arena::new(gpu, [4, 4, 4, 1024, 4])?;
    let mut p = Program::default();
    let copy = op(gpu, "copy_a")?;
    for i in 0..1000 {
        p.flat(copy.clone(), &[256, (i % 2) * 512, ((i + 1) % 2) * 512], 256);
    }
    let t = time(2, 5, || {
        p.run(gpu, &arena);
        gpu.wait()
    })?;
    Ok(t / 1000.0)
}

pub fn run(opts: &Options) -> Result<Vec<Row>> {
    let gpu = Gpu::shared()?;
    println!("rnnlens {} bench on the GPU engine (wgpu)", env!("CARGO_PKG_VERSION"));
    println!("device: {}", gpu.describe());
    if crate::kernels::precision::current() == crate::kernels::precision::Precision::F16 {
        println!("{}", gpu.f16_note());
    }
    println!(
        "each figure: the median of {} timed steps after {} warm-up steps, each step waited for; train = forward + loss + backward + clipping + Adam, infer = forward + loss; \
         peak = the step's GEMMs alone, back to back on the device",
        opts.steps, opts.warmup
    );
    let mut csv = match &opts.csv {
        Some(p) => {
            let mut f = std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            writeln!(f, "{}", super::CSV_HEADER)?;
            Some((f, p.clone()))
        }
        None => None,
    };
    println!("dispatch cost: {:.1} µs each (1,000 dependent one-workgroup dispatches in one submission)", dispatch_cost(&gpu)? * 1e6);
    println!("{}", super::table_header());
    let mut rows = Vec::new();
    for &shape in &opts.shapes {
        for cell in opts.cells.iter().filter(|c| shape.fits(c)) {
            let (b0, w0) = shape.size();
            let batch = opts.batch.unwrap_or(b0);
            let (mut work, model) = match GpuWork::new(&gpu, shape, cell, batch, opts.window.unwrap_or(w0)) {
                Ok(w) => w,
                Err(e) => {
                    println!("{:<5} {cell:<15} not run: {e:#}", shape.name());
                    continue;
                }
            };
            let window = work.window();
            let (f_fwd, f_bwd) = work.gl().gemm_flops();
            for &mode in &opts.modes {
                let secs = time(opts.warmup, opts.steps, || work.step(mode))?;
                let loss = work.loss()?;
                if !loss.is_finite() {
                    bail!("{} {cell} {}: the loss is {loss} on the GPU", shape.name(), mode.name());
                }
                let flops = if mode == Mode::Train { f_fwd + f_bwd } else { f_fwd };
                let peak = if opts.peak {
                    let mut all = work.gl().forward.gemms.clone();
                    if mode == Mode::Train {
                        all.extend_from_slice(&work.gl().backward.gemms);
                    }
                    let gl = work.gl_mut();
                    let mut alone = Program::gemms_alone(&gpu, &all, Some(gl.scratch))?;
                    let t = time(1, opts.steps.max(3), || {
                        gl.run_program(&mut alone);
                        gl.wait()
                    })?;
                    // The GEMMs alone wrote over the activations: start the next mode from zeros.
                    gl.set_state(&model.initial_state(batch));
                    Some(flops / t / 1e9)
                } else {
                    None
                };
                let row = Row { peak_gflops: peak, ..Row::timed(gpu_implementation(), (shape, cell, mode), (batch, window), secs, flops) };
                println!("{}", row.table_line());
                // Small shapes are bound by dispatches (docs/gpu.md): how many the step has.
                let (fwd, train) = work.gl().dispatches();
                let n = if mode == Mode::Train { train } else { fwd };
                println!("      dispatches: {n} a step, {:.1} a time step", n as f64 / window as f64);
                if let (Mode::Train, GpuWork::Lm { gl, x, y }) = (mode, &mut work) {
                    let d = TrainConfig::default();
                    let [f, b, u, c] = gl.time_parts(x, y, d.lr, d.clipping())?;
                    println!("      parts of a step, each run alone: forward {:.2} ms, backward {:.2} ms, update {:.2} ms, carry {:.2} ms", f * 1e3, b * 1e3, u * 1e3, c * 1e3);
                }
                if let Some((f, p)) = &mut csv {
                    writeln!(f, "{}", row.csv()).with_context(|| format!("writing {}", p.display()))?;
                }
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// One (shape, cell) on the GPU: a language model's window of random tokens, or a task shape's
/// batch (C3's addition, the MNIST shape's) through the task model.
#[allow(clippy::large_enum_variant)] // one per (shape, cell)
enum GpuWork {
    Lm { gl: GpuLm, x: Vec<u32>, y: Vec<u32> },
    Task { gl: GpuLm, b: crate::tasks::Batch, cfg: crate::tasks::TaskConfig, loss: f64 },
}

impl GpuWork {
    /// The work and its model, as the CPU's `Work::new` makes them (the same seeds).
    fn new(gpu: &std::sync::Arc<Gpu>, shape: Shape, cell: &str, batch: usize, window: usize) -> Result<(GpuWork, crate::model::Model)> {
        use crate::tasks::{task_model, TaskConfig};
        let mut rng = Rng::new(super::SEED);
        if let Some((kind, length)) = shape.task() {
            let model = task_model(kind, cell, 250, false)?;
            let need = crate::tasks::memory_need(&model, kind, length, batch, crate::kernels::runtime::Device::Gpu);
            super::check_fits(&model, batch, length, need, "choose a smaller --batch (a task shape's window is the task's length)")?;
            let b = super::task_batch(kind, length, batch, &mut Rng::new(super::SEED + 1000))?;
            let w = model.init_params(Init::Xavier, &mut rng);
            let gl = GpuLm::for_task(gpu.clone(), &model, &w, (b.steps, b.batch), b.scored.len(), true)?;
            return Ok((GpuWork::Task { gl, b, cfg: TaskConfig::default(), loss: f64::NAN }, model));
        }
        let model = shape.model(cell)?;
        let w = model.init_params(Init::Xavier, &mut rng);
        let gl = GpuLm::new(gpu.clone(), &model, &w, window, batch, true, None)?;
        let v = model.vocab_size() as u64;
        let mut tokens = |n: usize| -> Vec<u32> { (0..n).map(|_| rng.below(v) as u32).collect() };
        let (x, y) = (tokens(window * batch), tokens(window * batch));
        Ok((GpuWork::Lm { gl, x, y }, model))
    }

    fn gl(&self) -> &GpuLm {
        match self {
            GpuWork::Lm { gl, .. } | GpuWork::Task { gl, .. } => gl,
        }
    }

    fn gl_mut(&mut self) -> &mut GpuLm {
        match self {
            GpuWork::Lm { gl, .. } | GpuWork::Task { gl, .. } => gl,
        }
    }

    /// Steps a batch runs (a task shape: the task's length).
    fn window(&self) -> usize {
        match self {
            GpuWork::Lm { gl, .. } => gl.steps,
            GpuWork::Task { b, .. } => b.steps,
        }
    }

    /// One step of `mode`, waited for: the trainer's (or `rnnlens task`'s), or the forward
    /// pass and the loss.
    fn step(&mut self, mode: Mode) -> Result<()> {
        match self {
            GpuWork::Lm { gl, x, y } => {
                let d = TrainConfig::default();
                match mode {
                    Mode::Train => gl.train_window(x, y, d.lr, d.clipping())?,
                    Mode::Infer => gl.score_window(x, y)?,
                }
                gl.wait()
            }
            GpuWork::Task { gl, b, cfg, loss } => {
                let train = (mode == Mode::Train).then_some(&*cfg);
                *loss = crate::tasks::gpu_task_batch(gl, crate::tasks::TaskKind::Addition, b, train)?.0;
                gl.wait()
            }
        }
    }

    /// The latest step's mean loss.
    fn loss(&self) -> Result<f64> {
        match self {
            GpuWork::Lm { gl, .. } => Ok(gl.loss_sum()? / (gl.steps * gl.batch) as f64),
            GpuWork::Task { loss, .. } => Ok(*loss),
        }
    }
}

/// The CSV's `impl` of the GPU engine: `rnnlens-gpu`, or `rnnlens-gpu-f16`.
fn gpu_implementation() -> &'static str {
    match crate::kernels::precision::current() {
        crate::kernels::precision::Precision::F16 => "rnnlens-gpu-f16",
        _ => "rnnlens-gpu",
    }
}
