//! `rnnlens bench --device gpu`: the language-model shapes on the GPU engine (`model::gpu`),
//! timed as the CPU's are (the median of timed steps after warm-up ones), with the rate of the
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
        if matches!(shape, Shape::C3 | Shape::Isan) {
            println!("{:<5} (not on the GPU yet: the task model and the ISAN stay on the CPU)", shape.name());
            continue;
        }
        for cell in opts.cells.iter().filter(|c| shape.fits(c)) {
            let model = shape.model(cell)?;
            let (b0, w0) = shape.size();
            let (batch, window) = (opts.batch.unwrap_or(b0), opts.window.unwrap_or(w0));
            let mut rng = Rng::new(super::SEED);
            let w = model.init_params(Init::Xavier, &mut rng);
            let mut gl = match GpuLm::new(gpu.clone(), &model, &w, window, batch, true, None) {
                Ok(g) => g,
                Err(e) => {
                    println!("{:<5} {cell:<15} not run: {e:#}", shape.name());
                    continue;
                }
            };
            let v = model.vocab_size() as u64;
            let mut tokens = |n: usize| -> Vec<u32> { (0..n).map(|_| rng.below(v) as u32).collect() };
            let (x, y) = (tokens(window * batch), tokens(window * batch));
            let d = TrainConfig::default();
            let (f_fwd, f_bwd) = gl.gemm_flops();
            for &mode in &opts.modes {
                let secs = match mode {
                    Mode::Train => time(opts.warmup, opts.steps, || {
                        gl.train_window(&x, &y, d.lr, (d.clip_norm, d.clip_value))?;
                        gl.wait()
                    })?,
                    Mode::Infer => time(opts.warmup, opts.steps, || {
                        gl.score_window(&x, &y)?;
                        gl.wait()
                    })?,
                };
                let loss = gl.loss_sum()? / (window * batch) as f64;
                if !loss.is_finite() {
                    bail!("{} {cell} {}: the loss is {loss} on the GPU", shape.name(), mode.name());
                }
                let flops = if mode == Mode::Train { f_fwd + f_bwd } else { f_fwd };
                let peak = if opts.peak {
                    let mut all = gl.forward.gemms.clone();
                    if mode == Mode::Train {
                        all.extend_from_slice(&gl.backward.gemms);
                    }
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
                let row = Row { peak_gflops: peak, ..Row::timed("rnnlens-gpu", (shape, cell, mode), (batch, window), secs, flops) };
                println!("{}", row.table_line());
                if mode == Mode::Train {
                    let [f, b, u, c] = gl.time_parts(&x, &y, d.lr, (d.clip_norm, d.clip_value))?;
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
