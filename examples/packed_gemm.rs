//! Per-step recurrent GEMM: the weight packed once (`linalg::PackedB`) against the general
//! `linalg::gemm`, which repacks it on every call. Prints GFLOP/s at the benchmark's shapes,
//! the two timed alternately so that machine noise hits both alike.
//!
//! First it measures the machine's FMA limit (`kernels::limits::f32_limit_gflops`): independent 8-wide
//! FMA chains on every thread.
//!
//! Last, on a CPU with AVX-512F, the f32 kernel taking two 16-column panels a call against
//! one (`kernels::gemm::force_panels`), on one thread: the same bits, and the speed that
//! decides which a CPU kind runs (docs/benchmarks.md, "Two panels a call on an Intel").
//!
//!     cargo run --release --example packed_gemm [THREADS]
//!     cargo run --release --example packed_gemm 1 amx     # the bf16 table alone
use rnnlens::kernels::gemm::{force_panels, gemm, PackedB};
use std::time::Instant;

fn main() {
    let threads = std::env::args().nth(1).map_or(2, |s| s.parse().expect("THREADS"));
    if std::env::args().nth(2).as_deref() == Some("amx") {
        return amx();
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    match pool.install(|| rnnlens::kernels::limits::f32_limit_gflops(rnnlens::kernels::limits::Probe::BENCH)) {
        Some(g) => println!("FMA limit on {threads} threads: {g:.1} GFLOP/s"),
        None => println!("FMA limit: not measured (needs AVX2 and FMA)"),
    }
    println!("threads {threads}; GFLOP/s, best of 5 rounds");
    println!("{:>18} {:>8} {:>8} {:>8}", "m x n x k (Wᵀ)", "gemm", "packed", "ratio");
    // (batch, outputs, inputs): C1 LSTM forward and backward, C2 LSTM, C3 LSTM, ISAN; then
    // the same with half the batch, what each of two threads runs inside a cell's time loop.
    let full = [(64, 2048, 512), (64, 512, 2048), (32, 4096, 1024), (32, 1024, 4096), (100, 1000, 250), (100, 250, 1000), (64, 216, 216), (3, 216, 216)];
    let half = full.iter().filter(|s| s.0 > 3).map(|&(m, n, k)| (m / 2, n, k));
    for (m, n, k) in full.into_iter().chain(half) {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.01).collect();
        let w: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.01).collect();
        let mut c = vec![0f32; m * n];
        let mut p = PackedB::default();
        p.pack(&w, k, true, n, k, 1, 0);
        let fl = 2.0 * (m * n * k) as f64;
        let (g, q) = best_alternating(
            &pool,
            fl,
            (4e8 / fl).max(3.0) as usize,
            5,
            &mut c,
            &mut |c| gemm(m, n, k, &a, k, false, &w, k, true, c, n, false),
            &mut |c| p.gemm(0, m, &a, k, c, n, false),
        );
        println!("{:>18} {g:>8.1} {q:>8.1} {:>8.2}", format!("{m}x{n}x{k}"), q / g);
    }
    whole_sequence(&pool);
    if is_x86_feature_detected!("avx512f") {
        panels();
    }
    if rnnlens::kernels::gemm::bf16::applies() {
        amx();
    }
}

/// The bf16 products on AMX against AVX512-BF16 (`kernels::gemm::amx::with`), on one
/// thread, in f32 GFLOP-equivalents (2 per multiply-add); the f32 kernel beside them, all
/// three timed in turn. Shapes as [`panels`], less C2's largest, and the per-step products of the
/// RDA paper's Table 7 (1,800 units) and of the first RAN paper's medium model (650).
fn amx() {
    use rnnlens::kernels::gemm::amx;
    use rnnlens::kernels::precision::{with, Precision};
    if !amx::available() {
        println!("bf16: no AMX on this CPU (or the kernel refused the tiles): AVX512-BF16 only");
        return;
    }
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    println!("{:>32} {:>8} {:>8} {:>8} {:>9} {:>9}", "bf16, one thread", "f32", "avx512", "amx", "amx/avx", "amx/f32");
    let shapes = [
        (64, 2048, 512, 0),
        (32, 2048, 512, 0),
        (64, 512, 2048, 0),
        (100, 1000, 250, 0),
        (100, 250, 1000, 0),
        (100, 7200, 1800, 0),
        (100, 1800, 7200, 0),
        (20, 2600, 650, 0),
        (20, 650, 2600, 0),
        (6400, 2048, 128, 2),
        (6400, 512, 2048, 3),
        (2048, 512, 6400, 1),
        (2048, 128, 6400, 1),
        (1120, 4096, 256, 2),
    ];
    for (m, n, k, how) in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.01).collect();
        let w: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.01).collect();
        // The weight packed in each precision and for each kernel (the scope in force at
        // packing decides).
        let packed = |prec, on| {
            let mut p = PackedB::default();
            amx::with(on, || with(prec, || p.pack(&w, k, true, n, k, 1, 0)));
            p
        };
        let (p32, avx, tiles) = (packed(Precision::F32, false), packed(Precision::Bf16, false), packed(Precision::Bf16, true));
        let run = |prec: Precision, on: bool, c: &mut [f32]| {
            amx::with(on, || with(prec, || match how {
                0 => match (prec, on) {
                    (Precision::F32, _) => &p32,
                    (_, false) => &avx,
                    _ => &tiles,
                }
                .gemm_serial(0, m, &a, k, c, n, false),
                1 => gemm(m, n, k, &a, m, true, &w, n, false, c, n, false),
                2 => gemm(m, n, k, &a, k, false, &w, k, true, c, n, false),
                _ => gemm(m, n, k, &a, k, false, &w, n, false, c, n, false),
            }))
        };
        let mut c = vec![0f32; m * n];
        let fl = 2.0 * (m * n * k) as f64;
        let reps = (4e8 / fl).max(2.0) as usize;
        let (f, v) = best_alternating(&one, fl, reps, 5, &mut c, &mut |c| run(Precision::F32, true, c), &mut |c| run(Precision::Bf16, false, c));
        let (_, x) = best_alternating(&one, fl, reps, 5, &mut c, &mut |c| run(Precision::F32, true, c), &mut |c| run(Precision::Bf16, true, c));
        let what = ["step", "Aᵀ·B", "A·Wᵀ", "A·W"][how];
        println!("{:>32} {f:>8.1} {v:>8.1} {x:>8.1} {:>9.2} {:>9.2}", format!("{m}x{n}x{k} {what}"), x / v, x / f);
    }
}

/// One panel a call against two, on one thread, at per-step shapes (C3's LSTM forward and
/// backward, its two-thread halves, C3's RNN, C1's LSTM) and whole-sequence ones (C3's
/// `dW_hh` over a quarter of its depth; C1's `dW_hh` and input projection; C2's input
/// projection, decoder, decoder weight gradient and the decoder's input gradient).
fn panels() {
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    println!("{:>32} {:>8} {:>8} {:>8}", "f32 AVX-512, one thread", "1 panel", "2 panels", "ratio");
    // (m, n, k, how): 0 a per-step product, 1 a weight gradient (`Aᵀ·B` as `linear_dw`
    // calls it), 2 an input projection or decoder (`A·Wᵀ` as `linear`), 3 an input gradient
    // (`A·W` as `linear_dx`); whole-sequence ones are `gemm`'s blocked kernel, which with
    // one panel takes the AVX-512 kernel only for long weight gradients.
    let shapes = [
        (100, 1000, 250, 0),
        (100, 250, 1000, 0),
        (50, 1000, 250, 0),
        (50, 250, 1000, 0),
        (100, 250, 250, 0),
        (64, 2048, 512, 0),
        (1000, 250, 25600, 1),
        (2048, 512, 6400, 1),
        (6400, 2048, 128, 2),
        (1120, 4096, 256, 2),
        (1120, 10000, 1024, 2),
        (10000, 1024, 1120, 1),
        (1120, 1024, 10000, 3),
    ];
    for (m, n, k, how) in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.01).collect();
        let w: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.01).collect();
        let mut p = PackedB::default();
        if how == 0 {
            p.pack(&w, k, true, n, k, 1, 0);
        }
        let run = |panels: u8, c: &mut [f32]| {
            force_panels(panels);
            match how {
                0 => p.gemm_serial(0, m, &a, k, c, n, false),
                1 => gemm(m, n, k, &a, m, true, &w, n, false, c, n, false),
                2 => gemm(m, n, k, &a, k, false, &w, k, true, c, n, false),
                _ => gemm(m, n, k, &a, k, false, &w, n, false, c, n, false),
            }
        };
        let (mut c1, mut c2) = (vec![0f32; m * n], vec![0f32; m * n]);
        one.install(|| (run(1, &mut c1), run(2, &mut c2)));
        assert!(c1.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()), "{m}x{n}x{k}: the kernels' bits differ");
        let fl = 2.0 * (m * n * k) as f64;
        let (g1, g2) = best_alternating(&one, fl, (4e8 / fl).max(2.0) as usize, 9, &mut c1, &mut |c| run(1, c), &mut |c| run(2, c));
        let what = ["step", "Aᵀ·B", "A·Wᵀ", "A·W"][how];
        println!("{:>32} {g1:>8.1} {g2:>8.1} {:>8.2}", format!("{m}x{n}x{k} {what}"), g2 / g1);
    }
    one.install(|| force_panels(0));
}

/// Whole-sequence GEMMs: `linalg::gemm` (our blocked kernel for f32) against the `gemm` crate
/// called the way `linalg::gemm` called it before (single-threaded, the larger output side
/// split over the pool), timed alternately: input projections, weight gradients and input
/// gradients of C1 (LSTM), C2 (LSTM and decoder) and C3.
fn whole_sequence(pool: &rayon::ThreadPool) {
    println!("{:>32} {:>8} {:>8} {:>8}", "whole-sequence (op(A)·op(B))", "crate", "ours", "ratio");
    // (name, m, n, k, A transposed, B transposed) as linalg::{linear, linear_dw, linear_dx} call it.
    for &(name, m, n, k, ta, tb) in &[
        ("c1 proj", 6400, 2048, 128, false, true),
        ("c1 dW_hh", 2048, 512, 6400, true, false),
        ("c1 dW_ih", 2048, 128, 6400, true, false),
        ("c1 dx", 6400, 128, 2048, false, false),
        ("c2 proj", 1120, 4096, 256, false, true),
        ("c2 dec", 1120, 10000, 1024, false, true),
        ("c2 dec dW", 10000, 1024, 1120, true, false),
        ("c2 dec dx", 1120, 1024, 10000, false, false),
        ("c3 dW_hh", 1000, 250, 100000, true, false),
    ] {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.01).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.01).collect();
        let mut c = vec![0f32; m * n];
        let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
        let fl = 2.0 * (m * n * k) as f64;
        let (ours, theirs) = best_alternating(
            pool,
            fl,
            (2e9 / fl).max(2.0) as usize,
            3,
            &mut c,
            &mut |c| gemm(m, n, k, &a, lda, ta, &b, ldb, tb, c, n, false),
            &mut |c| crate_gemm(m, n, k, &a, lda, ta, &b, ldb, tb, c),
        );
        println!("{:>32} {theirs:>8.1} {ours:>8.1} {:>8.2}", format!("{name} {m}x{n}x{k}"), ours / theirs);
    }
}

/// Best GFLOP/s of `f` and of `g` (each doing `fl` FLOPs into `c`) over `rounds` rounds on the
/// pool, each round timing `reps` calls of one, then of the other, so that the machine's drift
/// hits both alike.
#[allow(clippy::too_many_arguments)]
fn best_alternating(
    pool: &rayon::ThreadPool,
    fl: f64,
    reps: usize,
    rounds: usize,
    c: &mut [f32],
    f: &mut (dyn FnMut(&mut [f32]) + Send),
    g: &mut (dyn FnMut(&mut [f32]) + Send),
) -> (f64, f64) {
    let mut best = [0f64; 2];
    pool.install(|| {
        for _ in 0..rounds {
            for (i, b) in best.iter_mut().enumerate() {
                let t = Instant::now();
                for _ in 0..reps {
                    if i == 0 { f(c) } else { g(c) }
                }
                *b = b.max(fl * reps as f64 / t.elapsed().as_secs_f64() / 1e9);
            }
        }
    });
    (best[0], best[1])
}

/// `C = op(A)·op(B)` by the `gemm` crate, one single-threaded call per half of the larger side.
#[allow(clippy::too_many_arguments)]
fn crate_gemm(m: usize, n: usize, k: usize, a: &[f32], lda: usize, ta: bool, b: &[f32], ldb: usize, tb: bool, c: &mut [f32]) {
    let (a_rs, a_cs) = if ta { (1, lda) } else { (lda, 1) };
    let (b_rs, b_cs) = if tb { (1, ldb) } else { (ldb, 1) };
    let threads = rayon::current_num_threads();
    let split_n = n >= m;
    let len = if split_n { n } else { m };
    let per = len.div_ceil(threads).div_ceil(16) * 16;
    let (ap, bp, cp) = (a.as_ptr() as usize, b.as_ptr() as usize, c.as_mut_ptr() as usize);
    rayon::scope(|s| {
        for t in 0..len.div_ceil(per) {
            let (s0, s1) = (t * per, ((t + 1) * per).min(len));
            let (i0, i1, j0, j1) = if split_n { (0, m, s0, s1) } else { (s0, s1, 0, n) };
            s.spawn(move |_| unsafe {
                // SAFETY: the blocks of C are disjoint and every index stays inside the slices.
                gemm::gemm(
                    i1 - i0,
                    j1 - j0,
                    k,
                    (cp as *mut f32).add(i0 * n + j0),
                    1,
                    n as isize,
                    false,
                    (ap as *const f32).add(i0 * a_rs),
                    a_cs as isize,
                    a_rs as isize,
                    (bp as *const f32).add(j0 * b_cs),
                    b_cs as isize,
                    b_rs as isize,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            });
        }
    });
}
