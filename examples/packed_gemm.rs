//! Per-step recurrent GEMM: the weight packed once (`linalg::PackedB`) against the general
//! `linalg::gemm`, which repacks it on every call. Prints GFLOP/s at the benchmark's shapes,
//! the two timed alternately so that machine noise hits both alike.
//!
//! First it measures the machine's FMA limit: independent 8-wide FMA chains on every thread.
//!
//!     cargo run --release --example packed_gemm [THREADS]
use rnnlens::linalg::{gemm, PackedB};
use std::time::Instant;

/// 12 independent FMA chains of 8 floats: enough in flight to fill both FMA pipes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(0.0); 12];
    let (a, b) = (_mm256_set1_ps(std::hint::black_box(1.000_000_1)), _mm256_set1_ps(std::hint::black_box(0.999_999_9)));
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_ps(*v, a, b);
        }
    }
    let mut out = [0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), acc.iter().fold(_mm256_setzero_ps(), |s, &v| _mm256_add_ps(s, v)));
    out[0]
}

fn main() {
    let threads = std::env::args().nth(1).map_or(2, |s| s.parse().expect("THREADS"));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("fma") {
        let iters = 100_000_000;
        let t = Instant::now();
        pool.broadcast(|_| std::hint::black_box(unsafe { fma_chains(iters) }));
        let flops = (threads * iters * 12 * 16) as f64;
        println!("FMA limit on {threads} threads: {:.1} GFLOP/s", flops / t.elapsed().as_secs_f64() / 1e9);
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
        let reps = (4e8 / fl).max(3.0) as usize;
        let (mut g, mut q) = (0f64, 0f64);
        pool.install(|| {
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..reps {
                    gemm(m, n, k, &a, k, false, &w, k, true, &mut c, n, false);
                }
                g = g.max(fl * reps as f64 / t.elapsed().as_secs_f64() / 1e9);
                let t = Instant::now();
                for _ in 0..reps {
                    p.gemm(0, m, &a, k, &mut c, n, false);
                }
                q = q.max(fl * reps as f64 / t.elapsed().as_secs_f64() / 1e9);
            }
        });
        println!("{:>18} {g:>8.1} {q:>8.1} {:>8.2}", format!("{m}x{n}x{k}"), q / g);
    }
    whole_sequence(&pool);
}

/// Whole-sequence GEMMs (the gemm crate only): input projections, weight gradients, input
/// gradients of C1 (LSTM), C2 (LSTM, decoder) and C3.
fn whole_sequence(pool: &rayon::ThreadPool) {
    use rnnlens::linalg::{linear, linear_dw, linear_dx};
    println!("{:>28} {:>8}", "whole-sequence", "gemm");
    // (name, m, n, k): linear = x[m,k]·Wᵀ[k,n]; dw = dyᵀ[n,m]·x[m,k]; dx = dy[m,n]·W[n,k]
    for &(name, m, n, k) in &[
        ("c1 proj", 6400, 2048, 128),
        ("c1 dW_hh", 6400, 2048, 512),
        ("c1 dx", 6400, 2048, 128),
        ("c2 dec", 1120, 10000, 1024),
        ("c2 dec dW", 1120, 10000, 1024),
        ("c2 dec dx", 1120, 10000, 1024),
        ("c3 proj", 100000, 1000, 2),
        ("c3 dW_hh", 100000, 1000, 250),
    ] {
        let x: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.01).collect();
        let w: Vec<f32> = (0..n * k).map(|i| (i % 7) as f32 * 0.01).collect();
        let dy: Vec<f32> = (0..m * n).map(|i| (i % 5) as f32 * 0.01).collect();
        let (mut y, mut dw, mut dx) = (vec![0f32; m * n], vec![0f32; n * k], vec![0f32; m * k]);
        let fl = 2.0 * (m * n * k) as f64;
        let reps = (2e9 / fl).max(2.0) as usize;
        let mut best = 0f64;
        pool.install(|| {
            for _ in 0..3 {
                let t = Instant::now();
                for _ in 0..reps {
                    if name.ends_with("dW") || name.ends_with("dW_hh") {
                        linear_dw(m, n, k, &dy, &x, &mut dw);
                    } else if name.ends_with("dx") {
                        linear_dx(m, n, k, &dy, &w, &mut dx, false);
                    } else {
                        linear(m, n, k, &x, &w, &mut y, false);
                    }
                }
                best = best.max(fl * reps as f64 / t.elapsed().as_secs_f64() / 1e9);
            }
        });
        println!("{:>28} {best:>8.1}", format!("{name} {m}x{n}x{k}"));
    }
}
