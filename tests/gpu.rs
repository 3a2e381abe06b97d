//! The GPU engine against the CPU engine, on whatever adapter wgpu finds (in CI, Mesa's
//! lavapipe: Vulkan on the CPU, installed by .ci/run). For every cell the GPU runs, over random
//! shapes (odd sizes, batch 1, one step, two layers), the loss, every parameter's gradient and
//! the carried state agree with the CPU path; training follows the CPU's loss curve.
//!
//! Tolerance: float32 on both sides, with different summation orders (tiled GEMMs, tree
//! reductions) and different `exp`/`tanh`: the loss within 2e-5 relative, each gradient tensor
//! within 2e-4 of its largest CPU element (plus 1e-7), each state element within 2e-5.

use rnnlens::cells::registry::{reads_tokens, CellOptions};
use rnnlens::cells::ran::RanGates;
use rnnlens::kernels::gpu::Gpu;
use rnnlens::kernels::rng::Rng;
use rnnlens::model::gpu::GpuLm;
use rnnlens::model::{layer_configs, Init, Model, ModelConfig, ModelWs, TokenizerConfig};
use rnnlens::training::optim::{Optimizer, OptimizerKind};
use std::sync::{Arc, OnceLock};

/// One device for every test: opening one per model exhausted the NVIDIA driver's Vulkan
/// devices on an H200 after some sixty (the first device run, docs/gpu.md).
fn gpu() -> Arc<Gpu> {
    static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| Arc::new(Gpu::open().expect("a GPU adapter (CI installs lavapipe)"))).clone()
}

/// `gru-papers` is the GRU in the papers' form (`--gru-reset-after false`); `ran-*-nocb` a RAN
/// without its content bias (`--ran-content-bias false`).
fn model(cell: &str, vocab: usize, emb: usize, hidden: &[usize], gates: RanGates) -> Model {
    let opts = CellOptions { ran_gates: gates, ..CellOptions::default() };
    match cell {
        "gru-papers" => model_with("gru", vocab, emb, hidden, CellOptions { gru_reset_after: false, ..opts }),
        "ran-tanh-nocb" | "ran-identity-nocb" => model_with(cell.trim_end_matches("-nocb"), vocab, emb, hidden, CellOptions { ran_content_bias: false, ..opts }),
        // an output projection narrower than the state (PyTorch's proj_size)
        "lstm-proj" | "ran-tanh-proj" | "ran-identity-proj" => {
            projected(cell.trim_end_matches("-proj"), vocab, emb, hidden, Some(hidden[0].div_ceil(2)), opts)
        }
        _ => model_with(cell, vocab, emb, hidden, opts),
    }
}

fn model_with(cell: &str, vocab: usize, emb: usize, hidden: &[usize], opts: CellOptions) -> Model {
    projected(cell, vocab, emb, hidden, None, opts)
}

fn projected(cell: &str, vocab: usize, emb: usize, hidden: &[usize], projection: Option<usize>, opts: CellOptions) -> Model {
    // a symbol-reading cell is a model's only layer
    let hidden = if reads_tokens(cell) { &hidden[..1] } else { hidden };
    Model::new(ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: vocab,
        tokenizer: TokenizerConfig { level: "char".into(), normalize: "none".into(), split: None },
        // a cell reading the symbols themselves has no embedding: its input is the vocabulary
        embedding_size: (!reads_tokens(cell)).then_some(emb),
        layers: layer_configs(cell, if reads_tokens(cell) { vocab } else { emb }, hidden, projection, opts).unwrap(),
        cell_name: cell.into(),
        input_size: None,
    })
    .unwrap()
}

fn tokens(rng: &mut Rng, n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(vocab as u64) as u32).collect()
}

/// The GPU window's loss within 2e-5 (relative) of the CPU's `nll`, and every parameter
/// tensor's gradient within 2e-4 of the CPU's `g` largest element; returns each tensor's
/// largest CPU gradient, by name, for further checks.
fn assert_window_matches(what: &str, m: &Model, gl: &GpuLm, g: &[f32], nll: f64) -> Vec<(String, f32)> {
    let gpu_nll = gl.loss_sum().unwrap();
    assert!((gpu_nll - nll).abs() <= 2e-5 * nll.abs(), "{what}: loss {gpu_nll} on the GPU, {nll} on the CPU");
    let gg = gl.grads().unwrap();
    m.slots
        .iter()
        .map(|s| {
            let (a, c) = (&gg[s.range()], &g[s.range()]);
            let scale = c.iter().fold(0f32, |mx, x| mx.max(x.abs()));
            let worst = a.iter().zip(c).map(|(a, c)| (a - c).abs()).fold(0f32, f32::max);
            assert!(worst <= 2e-4 * scale + 1e-7, "{what}: gradient of {} off by {worst} (largest {scale})", s.name);
            (s.name.clone(), scale)
        })
        .collect()
}

/// The cells (and RAN gate choices) the GPU engine runs.
const CELLS: &[(&str, RanGates)] = &[
    ("lstm", RanGates::H),
    ("ran-tanh", RanGates::H),
    ("ran-tanh", RanGates::C),
    ("ran-identity", RanGates::H),
    ("ran-identity", RanGates::C),
    ("ran-tanh-nocb", RanGates::H),
    ("ran-identity-nocb", RanGates::C),
    ("rnn", RanGates::H),
    ("irnn", RanGates::H),
    ("gru", RanGates::H),
    ("rwa", RanGates::H),
    ("rda-exp-tanh", RanGates::H),
    ("rda-sigmoid-id", RanGates::H),
    ("lstm-simple-content", RanGates::H),
    ("lstm-no-output-gate", RanGates::H),
    ("gru-papers", RanGates::H),
    ("lstm-proj", RanGates::H),
    ("ran-tanh-proj", RanGates::H),
    ("ran-identity-proj", RanGates::C),
    ("linear", RanGates::H),
    ("linear-tanh", RanGates::H),
    ("isan", RanGates::H),
    ("isan-nobias", RanGates::H),
];

/// Every RDA variant: each attention function with each hidden and output function.
fn rda_variants() -> Vec<(String, CellOptions)> {
    use rnnlens::cells::rda::Attention;
    use rnnlens::kernels::num::Act;
    let mut v = Vec::new();
    for att in [Attention::Exp, Attention::Sigmoid, Attention::Relu, Attention::Softplus] {
        for fh in [Act::Identity, Act::Tanh] {
            for fo in [Act::Identity, Act::Tanh] {
                let o = CellOptions { rda_attention: att, rda_hidden_fn: fh, rda_output_fn: fo, ..CellOptions::default() };
                v.push((format!("rda {} {} {}", att.name(), fh.name(), fo.name()), o));
            }
        }
    }
    v
}

#[test]
fn every_rda_variant_matches_the_cpu() {
    for (what, opts) in rda_variants() {
        for (v, e, hidden, b, t) in [(11usize, 5usize, vec![7usize], 3usize, 6usize), (7, 3, vec![5, 4], 1, 1)] {
            let m = model_with("rda", v, e, &hidden, opts);
            let mut rng = Rng::new(3);
            let mut w = m.init_params(Init::Xavier, &mut rng);
            // Larger weights, and s0 away from zero, so that references move and relus go silent.
            w.iter_mut().for_each(|x| *x = 2.0 * *x + 0.05 * (rng.uniform() as f32 - 0.5));
            let mut gl = GpuLm::new(gpu(), &m, &w, t, b, true, None).unwrap();
            let (mut state, mut ws) = (m.initial_state::<f32>(b), ModelWs::default());
            for window in 0..2 {
                let (x, y) = (tokens(&mut rng, t * b, v), tokens(&mut rng, t * b, v));
                let mut g = vec![0f32; m.n_params];
                let (nll, _) = rnnlens::training::window_gradient(&m, &w, &mut g, (&x, &y), b, &mut state, &mut ws, None, None, (None, None));
                gl.gradient_window(&x, &y).unwrap();
                assert_window_matches(&format!("{what}, H {hidden:?}, window {window}"), &m, &gl, &g, nll);
                let gs = gl.state().unwrap();
                for (l, (a, c)) in gs.layers.iter().zip(&state.layers).enumerate() {
                    let worst = a.iter().zip(c).map(|(a, c)| (a - c).abs()).fold(0f32, f32::max);
                    assert!(worst <= 2e-5 * c.iter().fold(1f32, |mx, x| mx.max(x.abs())), "{what}, window {window}: layer {l}'s state off by {worst}");
                }
            }
        }
    }
}

#[test]
fn gradients_losses_and_states_match_the_cpu() {
    let gpu_name = gpu().describe();
    eprintln!("adapter: {gpu_name}");
    // (vocab, embedding, hidden sizes, batch, steps)
    // the last shape's products are split along K forward (K = 130) and backward, and the
    // pointwise kernels finish them (`fold_split`)
    let shapes: &[(usize, usize, &[usize], usize, usize)] = &[(11, 5, &[7], 3, 4), (7, 3, &[5], 1, 1), (13, 9, &[6, 5], 2, 6), (9, 4, &[33], 5, 3), (9, 4, &[130], 3, 3)];
    let mut checked = 0;
    for &(cell, gates) in CELLS {
        for (si, &(v, e, hidden, b, t)) in shapes.iter().enumerate() {
            let what = format!("{cell} gates {gates:?}, shape {si} (V {v}, E {e}, H {hidden:?}, B {b}, T {t})");
            let m = model(cell, v, e, hidden, gates);
            let mut rng = Rng::new(7 + si as u64);
            let mut w = m.init_params(Init::Xavier, &mut rng);
            // Larger weights than Xavier's, so that gates saturate and states grow.
            w.iter_mut().for_each(|x| *x *= 2.0);
            if reads_tokens(cell) {
                // Biases and h0 start at zero: the state of a cell without an input matrix would
                // stay zero, and its matrices' gradients with it.
                w.iter_mut().for_each(|x| *x += 0.2 * (rng.uniform() as f32 - 0.5));
            }
            let mut cpu_state = m.initial_state::<f32>(b);
            let mut ws = ModelWs::default();
            let mut gl = GpuLm::new(gpu(), &m, &w, t, b, true, None).unwrap();
            // Two windows: the second starts from the carried state.
            for window in 0..2 {
                let (x, y) = (tokens(&mut rng, t * b, v), tokens(&mut rng, t * b, v));
                let mut g = vec![0f32; m.n_params];
                let (nll, _) = rnnlens::training::window_gradient(&m, &w, &mut g, (&x, &y), b, &mut cpu_state, &mut ws, None, None, (None, None));
                gl.gradient_window(&x, &y).unwrap();
                assert_window_matches(&format!("{what}, H {hidden:?}, window {window}"), &m, &gl, &g, nll);
                let gs = gl.state().unwrap();
                for (l, (a, c)) in gs.layers.iter().zip(&cpu_state.layers).enumerate() {
                    let worst = a.iter().zip(c).map(|(a, c)| (a - c).abs()).fold(0f32, f32::max);
                    assert!(worst <= 2e-5 * c.iter().fold(1f32, |mx, x| mx.max(x.abs())), "{what}, window {window}: layer {l}'s state off by {worst}");
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, CELLS.len() * shapes.len() * 2);
}

/// A recurrent product split along K is finished by the pointwise kernel that reads it: a
/// time step of a 130-unit LSTM (K split forward and backward) is two dispatches forward (the
/// product, `fwd`) and two more backward (`bwd`, the product), where a separate reduction
/// made it three and three.
#[test]
fn a_split_recurrent_product_is_finished_by_the_cells_kernel() {
    let m = model("lstm", 9, 4, &[130], RanGates::H);
    let w = m.init_params(Init::Xavier, &mut Rng::new(1));
    let count = |t: usize| GpuLm::new(gpu(), &m, &w, t, 3, true, None).unwrap().dispatches();
    let ((f5, t5), (f6, t6)) = (count(5), count(6));
    assert_eq!((f6 - f5, t6 - t5), (2, 4), "dispatches a time step (forward, training)");
}

#[test]
fn two_hundred_training_steps_follow_the_cpu_loss_curve() {
    for &(cell, gates) in &[("lstm", RanGates::H), ("ran-tanh", RanGates::H), ("gru", RanGates::H), ("rda-exp-tanh", RanGates::H)] {
        let (v, e, b, t) = (12, 8, 4, 10);
        let m = model(cell, v, e, &[16], gates);
        let mut rng = Rng::new(3);
        let w0 = m.init_params(Init::Xavier, &mut rng);
        // A learnable stream: each symbol mostly followed by the next one.
        let stream: Vec<u32> = (0..(200 * t + 1) * b).map(|i| if rng.below(5) == 0 { rng.below(v as u64) as u32 } else { (i % v) as u32 }).collect();
        let window = |k: usize| -> (Vec<u32>, Vec<u32>) {
            let at = |s: usize, bi: usize| stream[bi * (200 * t + 1) + k * t + s];
            let x = (0..t).flat_map(|s| (0..b).map(move |bi| (s, bi))).map(|(s, bi)| at(s, bi)).collect();
            let y = (0..t).flat_map(|s| (0..b).map(move |bi| (s, bi))).map(|(s, bi)| at(s + 1, bi)).collect();
            (x, y)
        };
        let (mut w, mut opt, mut state, mut ws) = (w0.clone(), Optimizer::new(OptimizerKind::Adam, m.n_params), m.initial_state::<f32>(b), ModelWs::default());
        let mut gl = GpuLm::new(gpu(), &m, &w0, t, b, true, None).unwrap();
        let (mut cpu, mut gpu) = (Vec::new(), Vec::new());
        for k in 0..200 {
            let (x, y) = window(k);
            let mut g = vec![0f32; m.n_params];
            let (nll, norm) = rnnlens::training::window_gradient(&m, &w, &mut g, (&x, &y), b, &mut state, &mut ws, None, None, (Some(5.0), None));
            if norm.is_some_and(f64::is_finite) {
                opt.step(&mut w, &g, 0.01);
            }
            gl.train_window(&x, &y, 0.01, (Some(5.0), None)).unwrap();
            cpu.push(nll / (t * b) as f64);
            gpu.push(gl.loss_sum().unwrap() / (t * b) as f64);
        }
        let mean_gap = cpu.iter().zip(&gpu).map(|(c, g)| (c - g).abs() / c).sum::<f64>() / 200.0;
        let tail = |v: &[f64]| v[180..].iter().sum::<f64>() / 20.0;
        eprintln!("{cell}: first loss {:.4} / {:.4}, last 20 {:.4} / {:.4} (CPU / GPU), mean relative gap {mean_gap:.2e}", cpu[0], gpu[0], tail(&cpu), tail(&gpu));
        assert!(tail(&cpu) < 0.8 * cpu[0], "{cell}: the CPU run did not learn ({} -> {})", cpu[0], tail(&cpu));
        assert!(mean_gap < 2e-3, "{cell}: the GPU's loss curve strays from the CPU's by {mean_gap:.2e} on average");
        assert!((tail(&gpu) - tail(&cpu)).abs() < 0.01 * tail(&cpu), "{cell}: final losses {} (GPU) and {} (CPU)", tail(&gpu), tail(&cpu));
        let wg = gl.params().unwrap();
        let worst = wg.iter().zip(&w).map(|(a, c)| (a - c).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-2, "{cell}: weights after 200 steps differ by up to {worst}");
    }
}

#[test]
fn gemm_matches_a_float64_reference_in_every_layout() {
    use rnnlens::kernels::gpu::{Arena, Buf, Gemm, Program};
    let g = gpu();
    let mut rng = Rng::new(11);
    let (mut checked, mut splits) = (0, 0);
    let shapes = [(1, 1, 1), (70, 130, 33), (5, 200, 17), (129, 65, 64), (64, 64, 16), (5, 70, 1000), (64, 64, 2048), (257, 130, 9), (128, 256, 24)];
    // both kernels on every shape: the 64 x 64 tiles (split K where it applies) and the 128 x 128
    for (tile, &(m, n, k)) in [64, 128].into_iter().flat_map(|t| shapes.iter().map(move |s| (t, s))) {
        for ta in [false, true] {
            for tb in [false, true] {
                for accumulate in [false, true] {
                    let r = |rng: &mut Rng, len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform() as f32 * 2.0 - 1.0).collect() };
                    let (a, b, c0, bias) = (r(&mut rng, m * k), r(&mut rng, k * n), r(&mut rng, m * n), r(&mut rng, n));
                    // A at offset 3 of A's buffer, B after it, C in G, the bias in W.
                    let (ao, bo) = (3, 3 + m * k);
                    // Room after the operands for the partial products of a split K.
                    let scratch = 3 + m * k + k * n;
                    let arena = Arena::new(&g, [n as u64, (m * n) as u64, 0, (scratch + 16 * m * n) as u64, 0]).unwrap();
                    arena.write(&g, Buf::A, ao as u64, &a);
                    arena.write(&g, Buf::A, bo as u64, &b);
                    arena.write(&g, Buf::G, 0, &c0);
                    arena.write(&g, Buf::W, 0, &bias);
                    let mut p = Program::new(Some(scratch));
                    p.tile = Some(tile);
                    let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
                    p.gemm(&g, Gemm { m, n, k, a: (Buf::A, ao, lda), ta, b: (Buf::A, bo, ldb), tb, c: (Buf::G, 0, n), accumulate, bias: [Some(0), None] }).unwrap();
                    assert!(p.scratch_used <= 16 * m * n);
                    if tile == 64 && rnnlens::kernels::gpu::k_splits(m, n, k) > 1 {
                        splits += 1;
                    }
                    p.run(&g, &arena);
                    let got: Vec<f32> = arena.read(&g, Buf::G, 0, (m * n) as u64).unwrap();
                    for i in 0..m {
                        for j in 0..n {
                            let mut want = bias[j] as f64 + if accumulate { c0[i * n + j] as f64 } else { 0.0 };
                            for l in 0..k {
                                let av = if ta { a[l * m + i] } else { a[i * k + l] };
                                let bv = if tb { b[j * k + l] } else { b[l * n + j] };
                                want += av as f64 * bv as f64;
                            }
                            let e = (got[i * n + j] as f64 - want).abs();
                            assert!(e <= 1e-5 * (k as f64).sqrt() + 1e-6, "tile {tile} m {m} n {n} k {k} ta {ta} tb {tb} acc {accumulate}: C[{i},{j}] = {} against {want}", got[i * n + j]);
                        }
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * shapes.len() * 8);
    assert!(splits >= 16, "the split-K path ran for {splits} products only");
    // by shape: the big tile where 128 x 128 tiles fill most of the GPU (the PTB shapes' input
    // projection, 700 x 2600), the small one for a recurrent step (20 x 2600)
    assert_eq!(rnnlens::kernels::gpu::gemm_tile(700, 2600), 128);
    assert_eq!(rnnlens::kernels::gpu::gemm_tile(256, 1024), 64);
    assert_eq!(rnnlens::kernels::gpu::gemm_tile(20, 2600), 64);
}

/// `--precision f16`: both kernels read their operands rounded to f16 and sum in f32, which is
/// the f64 product of the f16-rounded operands within f32's summation error; and rounding
/// happens (the result strays from the f32 operands' product by f16's rounding, not f32's).
#[test]
fn the_f16_gemm_multiplies_operands_rounded_to_f16_with_f32_sums() {
    use half::f16;
    use rnnlens::kernels::gpu::{Arena, Buf, Gemm, Program};
    let g = gpu();
    let mut rng = Rng::new(12);
    let (mut worst_f16, mut worst_f32) = (0f64, 0f64);
    for (tile, (m, n, k)) in [64, 128].into_iter().flat_map(|t| [(70, 130, 33), (5, 70, 1000), (129, 65, 64)].into_iter().map(move |s| (t, s))) {
        for (ta, tb) in [(false, false), (true, false), (false, true)] {
            let r = |rng: &mut Rng, len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform() as f32 * 2.0 - 1.0).collect() };
            let (a, b) = (r(&mut rng, m * k), r(&mut rng, k * n));
            let arena = Arena::new(&g, [0, (m * n) as u64, 0, (m * k + k * n + 16 * m * n) as u64, 0]).unwrap();
            arena.write(&g, Buf::A, 0, &a);
            arena.write(&g, Buf::A, (m * k) as u64, &b);
            let mut p = Program::new(Some(m * k + k * n));
            (p.tile, p.half) = (Some(tile), true);
            let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
            p.gemm(&g, Gemm { m, n, k, a: (Buf::A, 0, lda), ta, b: (Buf::A, m * k, ldb), tb, c: (Buf::G, 0, n), accumulate: false, bias: [None; 2] }).unwrap();
            p.run(&g, &arena);
            let got: Vec<f32> = arena.read(&g, Buf::G, 0, (m * n) as u64).unwrap();
            let h = |x: f32| f16::from_f32(x).to_f64();
            for i in 0..m {
                for j in 0..n {
                    let (mut want, mut plain) = (0f64, 0f64);
                    for l in 0..k {
                        let av = if ta { a[l * m + i] } else { a[i * k + l] };
                        let bv = if tb { b[j * k + l] } else { b[l * n + j] };
                        want += h(av) * h(bv);
                        plain += av as f64 * bv as f64;
                    }
                    let e = (got[i * n + j] as f64 - want).abs();
                    assert!(e <= 1e-5 * (k as f64).sqrt() + 1e-6, "tile {tile} m {m} n {n} k {k} ta {ta} tb {tb}: C[{i},{j}] = {} against {want} from f16 operands", got[i * n + j]);
                    worst_f16 = worst_f16.max(e);
                    worst_f32 = worst_f32.max((got[i * n + j] as f64 - plain).abs());
                }
            }
        }
    }
    eprintln!("f16 GEMM: worst distance to the f16 operands' product {worst_f16:.2e}, to the f32 operands' {worst_f32:.2e}");
    assert!(worst_f32 > 1e-3, "the operands were not rounded to f16: the product is within {worst_f32:.2e} of the f32 operands'");
}

/// The tensor-core GEMM (`gemm_coop.wgsl`) runs only on an adapter with cooperative matrices,
/// which lavapipe has not: here naga (the compiler wgpu uses) parses and validates its module
/// with those capabilities and translates it to SPIR-V, for each pair of buffers the model
/// compiles it for, so that a device run does not meet a kernel that fails to compile.
#[test]
fn the_tensor_core_gemm_compiles_to_spirv() {
    // wgpu's own naga (its WGSL front end and SPIR-V back end, as the Vulkan backend uses them)
    use wgpu::naga;
    use naga::valid::{Capabilities, ValidationFlags, Validator};
    use rnnlens::kernels::gpu::gemm_coop_module;
    for (a, b, c) in [("A", "W", "A"), ("A", "A", "G"), ("W", "A", "A"), ("A", "A", "A")] {
        let src = gemm_coop_module(a, b, c);
        let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{a}{b}{c}: {}", e.emit_to_string(&src)));
        let caps = Capabilities::COOPERATIVE_MATRIX | Capabilities::SHADER_FLOAT16 | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        let info = Validator::new(ValidationFlags::all(), caps).validate(&module).unwrap_or_else(|e| panic!("{a}{b}{c}: {}", e.emit_to_string(&src)));
        let spv = naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None).unwrap();
        assert!(spv.len() > 100 && module.entry_points.iter().any(|e| e.name == "gemm_coop"));
        // without the capabilities the same module is refused: the check above is not vacuous
        assert!(Validator::new(ValidationFlags::all(), caps - Capabilities::COOPERATIVE_MATRIX).validate(&module).is_err());
    }
}

/// The tensor-core GEMM against the f32 kernels rounding their operands to f16 (the same
/// products, summed in another order) in every layout, with both bias rows and accumulation,
/// at sizes that are not multiples of its tiles.
#[test]
#[ignore = "needs an adapter with cooperative matrices of 16 x 16 x 16 f16 (tensor cores): lavapipe has none; scripts/gpu-device-check.sh runs it on a lent GPU"]
fn the_tensor_core_gemm_matches_the_f16_rounding_kernels() {
    use rnnlens::kernels::gpu::{Arena, Buf, Gemm, Program};
    let g = gpu();
    assert!(g.coop_f16, "the adapter {} has no cooperative matrices of 16 x 16 x 16 f16 (coop_matrix: {})", g.describe(), g.coop_matrix);
    let mut rng = Rng::new(13);
    for (m, n, k) in [(70, 130, 33), (5, 70, 1000), (129, 65, 64), (700, 2600, 650)] {
        for (ta, tb, accumulate) in [(false, false, false), (true, false, true), (false, true, false), (true, true, true)] {
            let r = |rng: &mut Rng, len: usize| -> Vec<f32> { (0..len).map(|_| rng.uniform() as f32 * 2.0 - 1.0).collect() };
            let (a, b, c0, bias) = (r(&mut rng, m * k), r(&mut rng, k * n), r(&mut rng, m * n), r(&mut rng, 2 * n));
            let run = |coop: bool| -> Vec<f32> {
                let arena = Arena::new(&g, [(2 * n) as u64, (m * n) as u64, 0, (m * k + k * n + 16 * m * n) as u64, 0]).unwrap();
                arena.write(&g, Buf::A, 0, &a);
                arena.write(&g, Buf::A, (m * k) as u64, &b);
                arena.write(&g, Buf::G, 0, &c0);
                arena.write(&g, Buf::W, 0, &bias);
                let mut p = Program::new(Some(m * k + k * n));
                (p.half, p.coop) = (true, coop);
                let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
                p.gemm(&g, Gemm { m, n, k, a: (Buf::A, 0, lda), ta, b: (Buf::A, m * k, ldb), tb, c: (Buf::G, 0, n), accumulate, bias: [Some(0), Some(n)] }).unwrap();
                p.run(&g, &arena);
                arena.read(&g, Buf::G, 0, (m * n) as u64).unwrap()
            };
            let (tensor, rounded) = (run(true), run(false));
            let worst = tensor.iter().zip(&rounded).map(|(x, y)| (x - y).abs() as f64).fold(0f64, f64::max);
            eprintln!("coop GEMM m {m} n {n} k {k} ta {ta} tb {tb}: worst difference {worst:.2e}");
            assert!(worst <= 1e-5 * (k as f64).sqrt() + 1e-5, "m {m} n {n} k {k} ta {ta} tb {tb} acc {accumulate}: the tensor cores' product differs by {worst:.2e}");
        }
    }
}

/// f16 training on the device (`--precision f16`): the products' operands in f16, the loss
/// scaled by 2^16 and each gradient unscaled before the clipping. It follows the f32 run's
/// loss curve within f16's rounding; a scale that overflows f16 skips the step (nothing moves,
/// the norm reads infinite) and halves.
#[test]
fn f16_training_follows_f32_and_an_overflow_halves_the_loss_scale() {
    use rnnlens::kernels::precision::{with, LossScale, Precision};
    let (v, e, b, t, steps) = (12, 8, 4, 10, 120);
    let m = model("lstm", v, e, &[16], RanGates::H);
    let mut rng = Rng::new(5);
    let w0 = m.init_params(Init::Xavier, &mut rng);
    let stream: Vec<u32> = (0..(steps * t + 1) * b).map(|i| if rng.below(5) == 0 { rng.below(v as u64) as u32 } else { (i % v) as u32 }).collect();
    let window = |k: usize| -> (Vec<u32>, Vec<u32>) {
        let at = |s: usize, bi: usize| stream[bi * (steps * t + 1) + k * t + s];
        let x = (0..t).flat_map(|s| (0..b).map(move |bi| (s, bi))).map(|(s, bi)| at(s, bi)).collect();
        let y = (0..t).flat_map(|s| (0..b).map(move |bi| (s, bi))).map(|(s, bi)| at(s + 1, bi)).collect();
        (x, y)
    };
    let curve = |p: Precision| -> (Vec<f64>, GpuLm) {
        let mut gl = with(p, || GpuLm::new(gpu(), &m, &w0, t, b, true, None)).unwrap();
        assert_eq!(gl.half(), p == Precision::F16);
        let losses = (0..steps)
            .map(|k| {
                let (x, y) = window(k);
                gl.train_window(&x, &y, 0.01, (Some(5.0), None)).unwrap();
                gl.loss_sum().unwrap() / (t * b) as f64
            })
            .collect();
        (losses, gl)
    };
    let (f32s, _) = curve(Precision::F32);
    let (f16s, mut gl) = curve(Precision::F16);
    let gap = f32s.iter().zip(&f16s).map(|(a, h)| (a - h).abs() / a).fold(0f64, f64::max);
    eprintln!("f16: first loss {:.4} / {:.4}, last {:.4} / {:.4} (f32 / f16), worst relative gap {gap:.2e}", f32s[0], f16s[0], f32s[steps - 1], f16s[steps - 1]);
    assert!(f16s[steps - 1] < 0.8 * f16s[0], "the f16 run did not learn ({} -> {})", f16s[0], f16s[steps - 1]);
    assert!(gap > 0.0 && gap < 0.02, "the f16 run's losses stray from the f32 run's by up to {gap:.2e}");
    // No overflow at this size: the scale stayed and counted every step.
    assert_eq!(gl.loss_scale().unwrap(), LossScale { scale: 65536.0, steps: steps as u32, skipped: 0 });
    // A scale of 2^24 makes the loss's gradient overflow f16 in the decoder's products.
    gl.set_loss_scale(LossScale { scale: 16777216.0, steps: 7, skipped: 2 });
    let before = gl.params().unwrap();
    let (x, y) = window(0);
    gl.train_window(&x, &y, 0.01, (Some(5.0), None)).unwrap();
    let (_, norm) = gl.loss_and_norm().unwrap();
    assert_eq!(norm, -1.0, "an overflowed step's norm reads as the mark -1");
    assert_eq!(gl.params().unwrap(), before, "an overflowed step moves no weight");
    assert_eq!(gl.loss_scale().unwrap(), LossScale { scale: 8388608.0, steps: 0, skipped: 3 }, "an overflow halves the scale, restarts its count and counts a skipped step");
    gl.train_window(&x, &y, 0.01, (Some(5.0), None)).unwrap();
    assert!(gl.params().unwrap() != before || gl.loss_scale().unwrap().scale < 8388608.0, "a step after the overflow moves the weights or halves the scale again");
}

/// Under mpirun each rank opens its own adapter of the best kind where there are several (rank
/// r the (r mod n)-th), every rank the one where there is one; outside mpirun the best.
#[test]
fn each_rank_on_a_machine_takes_its_own_gpu() {
    use rnnlens::kernels::gpu::adapter_for;
    // two discrete GPUs, then lavapipe (ranked 0, 0, 4)
    let two = [0u8, 0, 4];
    assert_eq!((0..5).map(|r| adapter_for(&two, Some(r))).collect::<Vec<_>>(), [0, 1, 0, 1, 0]);
    assert_eq!(adapter_for(&two, None), 0);
    // lavapipe alone: every rank shares it
    assert_eq!((0..3).map(|r| adapter_for(&[4], Some(r))).collect::<Vec<_>>(), [0, 0, 0]);
    assert_eq!(adapter_for(&[], Some(2)), 0);
}

/// The GEMM's kernels run without wgpu's added bounds checks; what keeps them inside their
/// buffers is the check before a program's first run, which must refuse a product whose
/// operand ends past its buffer.
#[test]
#[should_panic(expected = "reaches element")]
fn a_gemm_reaching_past_its_buffer_is_refused_before_it_runs() {
    use rnnlens::kernels::gpu::{Arena, Buf, Gemm, Program};
    let g = gpu();
    // A is 4 x 8 at offset 0 and B 8 x 4 right after it: 64 elements; the buffer holds 63
    let arena = Arena::new(&g, [0, 16, 0, 63, 0]).unwrap();
    let mut p = Program::new(None);
    p.gemm(&g, Gemm { m: 4, n: 4, k: 8, a: (Buf::A, 0, 8), ta: false, b: (Buf::A, 32, 4), tb: false, c: (Buf::G, 0, 4), accumulate: false, bias: [None; 2] }).unwrap();
    p.run(&g, &arena);
}

#[test]
fn dropout_draws_the_cpu_masks_and_gives_its_gradients() {
    use rnnlens::model::Dropout;
    for (cell, gates) in [("lstm", RanGates::H), ("ran-tanh", RanGates::C), ("rnn", RanGates::H), ("gru", RanGates::H), ("rda-sigmoid-id", RanGates::H), ("lstm-simple-content", RanGates::H), ("lstm-no-output-gate", RanGates::H), ("gru-papers", RanGates::H), ("lstm-proj", RanGates::H), ("ran-tanh-proj", RanGates::H)] {
        for variational in [true, false] {
            let (v, e, b, t) = (9, 5, 3, 4);
            let m = model(cell, v, e, &[7, 6], gates);
            let mut rng = Rng::new(5);
            let w = m.init_params(Init::Xavier, &mut rng);
            let drop = Dropout { p: 0.3, recurrent: 0.25, variational, shard: None };
            let (x, y) = (tokens(&mut rng, t * b, v), tokens(&mut rng, t * b, v));
            let (mut cpu_rng, mut gpu_rng) = (Rng::new(17), Rng::new(17));
            let (mut state, mut ws, mut g) = (m.initial_state::<f32>(b), ModelWs::default(), vec![0f32; m.n_params]);
            let (nll, _) = rnnlens::training::window_gradient(&m, &w, &mut g, (&x, &y), b, &mut state, &mut ws, Some((&drop, &mut cpu_rng)), None, (None, None));
            let mut gl = GpuLm::new(gpu(), &m, &w, t, b, true, Some(drop)).unwrap();
            gl.set_masks(&m, &mut gpu_rng);
            gl.gradient_window(&x, &y).unwrap();
            let what = format!("{cell}, variational {variational}");
            assert_eq!(cpu_rng.position(), gpu_rng.position(), "{what}: the generators drew differently");
            assert_window_matches(&what, &m, &gl, &g, nll);
        }
    }
}

#[test]
fn a_learned_initial_state_gives_the_cpus_losses_and_gradients() {
    // Three windows: from the learned state, carried from the first, from the learned state
    // again; its gradient only where a window began there.
    // (with a projection: the RAN's first recurrent input is W_proj g(c_{-1}), whose gradient
    // reaches the learned state only through it)
    for &(cell, gates, proj) in &[("lstm", RanGates::H, None), ("gru", RanGates::H, None), ("ran-tanh", RanGates::C, None), ("rnn", RanGates::H, None), ("ran-tanh", RanGates::H, Some(4)), ("lstm", RanGates::H, Some(4))] {
        for (v, e, hidden, b, t) in [(11usize, 5usize, vec![7usize], 3usize, 4usize), (9, 4, vec![6, 5], 2, 3)] {
            let what = format!("{cell}, projection {proj:?}, H {hidden:?}");
            let m = projected(cell, v, e, &hidden, proj, CellOptions { ran_gates: gates, learn_initial_state: true, ..CellOptions::default() });
            assert!(m.slots.iter().any(|s| s.name.ends_with(".initial_state")), "{what}");
            let mut rng = Rng::new(5);
            let mut w = m.init_params(Init::Xavier, &mut rng);
            // a learned state away from zero
            w.iter_mut().for_each(|x| *x = 1.5 * *x + 0.2 * (rng.uniform() as f32 - 0.5));
            let mut gl = GpuLm::new(gpu(), &m, &w, t, b, true, None).unwrap();
            let (mut state, mut ws) = (m.initial_state::<f32>(b), ModelWs::default());
            for window in 0..3 {
                if window == 2 {
                    state = m.initial_state(b);
                    gl.set_state(&state);
                }
                let (x, y) = (tokens(&mut rng, t * b, v), tokens(&mut rng, t * b, v));
                let mut g = vec![0f32; m.n_params];
                let (nll, _) = rnnlens::training::window_gradient(&m, &w, &mut g, (&x, &y), b, &mut state, &mut ws, None, None, (None, None));
                gl.gradient_window(&x, &y).unwrap();
                for (name, scale) in assert_window_matches(&format!("{what}, window {window}"), &m, &gl, &g, nll) {
                    if name.ends_with(".initial_state") {
                        assert_eq!(scale == 0.0, window == 1, "{what}, window {window}: {name} gets a gradient only from a fresh window");
                    }
                }
            }
        }
    }
}

/// A task model trains on the GPU as on the CPU (`rnnlens task --device gpu`): every kind of
/// readout (squared error at the last step, classes at each sequence's own last step of a
/// batch of mixed lengths, every step scored), real inputs and symbols (the ISAN), a learned
/// initial state (classify-length's default), and an MNIST test whose last batch is shorter.
/// Each step's loss within 1e-5 relative, the accuracies equal, the trained weights within
/// 2e-5 of the largest (one bias excepted, below).
#[test]
fn task_models_train_on_the_gpu_as_on_the_cpu() {
    use rnnlens::kernels::runtime::Device;
    use rnnlens::tasks::{run_task, TaskConfig, TaskKind};
    use std::ops::ControlFlow;
    let _ = gpu(); // the process's device, opened as the other tests open it
    let mk = |n: usize| rnnlens::data::idx::Mnist {
        images: (0..n * 784).map(|i| ((i * 7 + i / 784 * 31) % 256) as u8).collect(),
        labels: (0..n).map(|i| (i % 10) as u8).collect(),
        rows: 28,
        cols: 28,
    };
    for (kind, cell, length) in [
        (TaskKind::Addition, "gru", 30),
        (TaskKind::ClassifyLength, "lstm", 25),
        (TaskKind::Parentheses, "isan", 20),
        (TaskKind::Copy, "rda-exp-tanh", 24),
        (TaskKind::Multicopy, "ran-tanh", 40),
        (TaskKind::SeqMnist, "rwa", 49),
    ] {
        let mnist = (kind == TaskKind::SeqMnist).then(|| (mk(12), mk(7)));
        let cfg = TaskConfig { hidden: 11, batch: 5, steps: 12, lr: 0.01, length: Some(length), mnist, test_limit: 7, ..Default::default() };
        let run = |device| run_task(kind, cell, &TaskConfig { device, ..cfg.clone() }, |_| ControlFlow::Continue(())).unwrap();
        let what = format!("{kind:?} {cell}");
        task_gradient_matches(kind, cell, &cfg, &what);
        let (c, g) = (run(Device::Cpu), run(Device::Gpu));
        assert_eq!(c.curve.len(), g.curve.len(), "{what}");
        for (p, q) in c.curve.iter().zip(&g.curve) {
            assert!((p.loss - q.loss).abs() <= 1e-5 * p.loss.abs().max(1e-3), "{what} step {}: loss {} on the CPU, {} on the GPU", p.step, p.loss, q.loss);
            assert_eq!(p.accuracy, q.accuracy, "{what} step {}", p.step);
        }
        assert!(c.curve.last().unwrap().loss != c.curve[0].loss, "{what}: the run did not move");
        assert_eq!(c.test_accuracy, g.test_accuracy, "{what}");
        // Per tensor, but for the attention's bias `b_a` of the RWA and RDA: its gradient is
        // zero up to rounding (a shift of every a_t cancels in n_t / d_t but for the learned
        // start), and Adam turns rounding noise of either sign into steps of `lr` (measured:
        // 1.3e-3 of the largest weight apart after 12 steps, every other tensor within 1e-6).
        let scale = c.weights.iter().fold(0f32, |a, &x| a.max(x.abs()));
        let m = rnnlens::tasks::task_model(kind, cell, cfg.hidden, cfg.learn_initial_state(kind)).unwrap();
        for slot in m.slots.iter().filter(|s| !s.name.ends_with(".b_a")) {
            let r = slot.range();
            let worst = c.weights[r.clone()].iter().zip(&g.weights[r]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(worst <= 2e-5 * scale, "{what}: {} differs by {worst} (largest weight {scale})", slot.name);
        }
    }
}

/// A task run on the GPU stopped partway and continued from its last save (`task --resume`)
/// ends with the weights and the curve of the uninterrupted GPU run, bit for bit: the weights
/// and Adam's moments go to the device as they were read back.
#[test]
fn a_gpu_task_run_resumed_from_its_last_save_gives_the_same_bits() {
    use rnnlens::kernels::precision::{with, Precision};
    let _ = gpu();
    // in f16 the loss scale and its count go on from the save too
    for p in [Precision::F32, Precision::F16] {
        with(p, || a_task_run_resumed_gives_the_same_bits(p));
    }
}

fn a_task_run_resumed_gives_the_same_bits(p: rnnlens::kernels::precision::Precision) {
    use rnnlens::kernels::runtime::Device;
    use rnnlens::tasks::{keep, run_task, run_task_kept, task_model, Keep, TaskConfig, TaskKind};
    use std::ops::ControlFlow;
    let (kind, cell) = (TaskKind::Copy, "rda-exp-tanh");
    let cfg = TaskConfig { hidden: 9, batch: 4, steps: 20, lr: 0.01, length: Some(24), device: Device::Gpu, ..Default::default() };
    let whole = run_task(kind, cell, &cfg, |_| ControlFlow::Continue(())).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(cell);
    let stop = |p: &rnnlens::tasks::Point| if p.step == 13 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) };
    assert!(run_task_kept(kind, cell, &cfg, Some(Keep { dir: &dir, every: 5, from: None }), stop).is_err());
    let m = task_model(kind, cell, cfg.hidden, cfg.learn_initial_state(kind)).unwrap();
    let names: Vec<(String, Vec<usize>)> = m.slots.iter().map(|s| (s.name.clone(), s.shape.clone())).collect();
    let saved = keep::load(&dir, &names, cell).unwrap().unwrap();
    assert_eq!(saved.progress.step, 10);
    let scale = (p == rnnlens::kernels::precision::Precision::F16).then_some(rnnlens::kernels::precision::LossScale { scale: 65536.0, steps: 10, skipped: 0 });
    assert_eq!(saved.progress.loss_scale, scale, "the save keeps f16's loss scale and its count");
    let resumed = run_task_kept(kind, cell, &cfg, Some(Keep { dir: &dir, every: 5, from: Some(saved) }), |_| ControlFlow::Continue(())).unwrap();
    assert_eq!(resumed.curve, whole.curve, "{p:?}");
    assert!(resumed.weights.iter().zip(&whole.weights).all(|(a, b)| a.to_bits() == b.to_bits()), "the resumed GPU run's weights differ ({p:?})");
}

/// One batch's gradient (clipped to ±1, as a task step clips it) on both devices, each tensor
/// within 2e-4 of its largest CPU element: Adam's steps hide a gradient's scale, so the
/// training curves alone would not.
fn task_gradient_matches(kind: rnnlens::tasks::TaskKind, cell: &str, cfg: &rnnlens::tasks::TaskConfig, what: &str) {
    use rnnlens::tasks::{generate, permutation, task_gradient, task_loss, task_model, Images, TaskWs};
    let length = cfg.length(kind);
    let model = task_model(kind, cell, cfg.hidden, cfg.learn_initial_state(kind)).unwrap();
    let w = model.init_params(Init::Uniform { scale: 0.3 }, &mut Rng::new(9));
    let images = cfg.mnist.as_ref().map(|(tr, _)| Images { pixels: &tr.images, labels: &tr.labels });
    let b = generate(kind, length, cfg.batch, &mut Rng::new(4), images.as_ref().map(|i| (i, &[][..])), &permutation(1, length), rnnlens::tasks::Markers::Halves).unwrap();
    let mut gc = vec![0f32; model.n_params];
    task_gradient(kind, &model, &w, &mut gc, &b, &mut TaskWs::default());
    rnnlens::training::optim::clip(&mut gc, None, Some(1.0));
    let mut gl = GpuLm::for_task(gpu(), &model, &w, (length, cfg.batch), b.scored.len(), true).unwrap();
    let mut out = gl.task_forward(&b.x, &b.tokens, &b.scored).unwrap();
    task_loss(kind, &b, &mut out, true);
    gl.task_update(&out, Some(1.0), 0.0).unwrap();
    let gg = gl.grads().unwrap();
    for slot in &model.slots {
        let r = slot.range();
        let scale = gc[r.clone()].iter().fold(0f32, |a, &x| a.max(x.abs()));
        let worst = gc[r.clone()].iter().zip(&gg[r]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= 2e-4 * scale + 1e-7, "{what}: the gradient of {} differs by {worst} (largest {scale})", slot.name);
    }
    assert!(gc.iter().any(|&x| x.abs() > 1e-3), "{what}: no gradient to compare");
}

/// The sampled softmax on the GPU (`train --sampled-softmax K --device gpu`): a vocabulary of
/// 60 against windows of 12 positions and 9 draws, so that most classes are neither targets
/// nor drawn, with dropout drawn before the candidates from the same generator. Over three
/// windows the candidates are the CPU's, the sampled loss and every gradient within the
/// tolerances above (the decoder's gradient only at the candidates' rows, on both sides), and
/// the generators end at the same position.
#[test]
fn the_sampled_softmax_matches_the_cpu() {
    use rnnlens::model::Dropout;
    use rnnlens::training::sampled::SampledSoftmax;
    for cell in ["lstm", "ran-tanh", "rwa"] {
        let (v, e, b, t, k) = (60, 6, 3, 4, 9);
        let m = model(cell, v, e, &[8, 7], RanGates::H);
        let mut rng = Rng::new(21);
        let w = m.init_params(Init::Xavier, &mut rng);
        let train: Vec<u32> = tokens(&mut rng, 500, v).into_iter().map(|x| x % 25).collect(); // a skewed proposal
        let drop = Dropout { p: 0.2, recurrent: 0.1, variational: true, shard: None };
        let (mut cpu_ss, mut gpu_ss) = (SampledSoftmax::<f32>::new(k, &train, v, t * b, 7), SampledSoftmax::<f32>::new(k, &train, v, t * b, 7));
        let mut gl = GpuLm::sampled(gpu(), &m, &w, t, b, true, Some(drop), cpu_ss.max_candidates()).unwrap();
        let (mut cpu_rng, mut gpu_rng) = (Rng::new(5), Rng::new(5));
        let mut cpu_state = m.initial_state::<f32>(b);
        let mut ws = ModelWs::default();
        for window in 0..3 {
            let (x, y) = (tokens(&mut rng, t * b, v), tokens(&mut rng, t * b, v));
            let mut g = vec![0f32; m.n_params];
            let (nll, _) = rnnlens::training::window_gradient(&m, &w, &mut g, (&x, &y), b, &mut cpu_state, &mut ws, Some((&drop, &mut cpu_rng)), Some(&mut cpu_ss), (None, None));
            gl.set_masks(&m, &mut gpu_rng);
            gpu_ss.prepare(&y, &mut gpu_rng);
            assert_eq!(gpu_ss.candidates(), cpu_ss.candidates(), "{cell} window {window}: the candidates differ");
            assert!(gpu_ss.candidates().len() > 12 && gpu_ss.candidates().len() < v, "{cell}: {} candidates", gpu_ss.candidates().len());
            gl.set_candidates(gpu_ss.candidates(), gpu_ss.corrections()).unwrap();
            gl.gradient_window(&x, gpu_ss.target_columns()).unwrap();
            assert_window_matches(&format!("{cell} sampled, window {window}"), &m, &gl, &g, nll);
            assert_eq!(gpu_rng.clone().uniform(), cpu_rng.clone().uniform(), "{cell}: the generators part");
        }
    }
}
