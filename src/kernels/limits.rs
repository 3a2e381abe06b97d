//! The arithmetic limits of this CPU's vector units, as independent chains of one instruction
//! measure them: `bench` reports them as the machine's limits, and a run in bf16 checks with
//! them that bf16 products are faster than f32 ones here at all (on an Intel Xeon where the
//! products run on `VDPBF16PS`, Emerald Rapids without AMX, it runs at half the f32 FMAs' rate
//! and bf16 trains slower than f32: docs/benchmarks.md; on AMX tiles, many times faster).

use std::sync::OnceLock;
#[cfg(target_arch = "x86_64")]
use std::time::Instant;

/// This CPU's bf16 multiply-add rate (`VDPBF16PS`) over its f32 one (the wider of its 8- and
/// 16-wide FMAs), on the calling thread: about 2 on a Zen 4 or Zen 5, 0.5 on an Emerald Rapids.
/// Measured once a process (under 10 ms, best of three short runs each), `None` without
/// AVX512-BF16.
pub fn bf16_over_f32_rate() -> Option<f64> {
    static RATE: OnceLock<Option<f64>> = OnceLock::new();
    *RATE.get_or_init(measure_bf16_over_f32)
}

fn measure_bf16_over_f32() -> Option<f64> {
    Some(bf16_limit_gflops(Probe::QUICK)? / f32_limit_gflops(Probe::QUICK)?)
}

/// How long and where a limit is probed: `bench`'s on every thread of the pool, about 0.1 s a
/// run; a bf16 run's start on its calling thread, a fraction of a millisecond a run.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    iters: usize,
    every_thread: bool,
}

impl Probe {
    pub const BENCH: Probe = Probe { iters: 50_000_000, every_thread: true };
    const QUICK: Probe = Probe { iters: 200_000, every_thread: false };

    /// GFLOP/s of `chains` (`flops` operations an instruction, a multiply-add counting two):
    /// the best of three runs.
    ///
    /// # Safety
    /// The CPU has the features `chains` is compiled for.
    #[cfg(target_arch = "x86_64")]
    unsafe fn best_gflops(self, chains: unsafe fn(usize) -> f32, flops: usize) -> f64 {
        let run = || std::hint::black_box(unsafe { chains(self.iters) });
        let threads = if self.every_thread { rayon::current_num_threads() } else { 1 };
        let secs = (0..3)
            .map(|_| {
                let t = Instant::now();
                if self.every_thread {
                    rayon::broadcast(|_| run());
                } else {
                    run();
                }
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        (threads * self.iters * FMA_CHAINS * flops) as f64 / secs / 1e9
    }
}

/// The machine's f32 arithmetic limit in GFLOP/s: independent chains of 8-wide f32 FMAs (a
/// multiply-add counts two), enough of them in flight to keep both FMA pipes busy, and of
/// 16-wide ones where the CPU has AVX-512F (the kernels use them there: on a CPU with 512-bit
/// pipes they double the limit, on one that splits them in two, as Zen 4 does, they match
/// it); the best of three runs of each. No GEMM can go faster, so achieved / this is the
/// distance to the machine itself. `None` without AVX2 and FMA.
pub fn f32_limit_gflops(probe: Probe) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA were detected, AVX-512F below.
        let mut limit = unsafe { probe.best_gflops(fma_chains, 16) };
        if is_x86_feature_detected!("avx512f") {
            limit = limit.max(unsafe { probe.best_gflops(fma_chains_512, 32) });
        }
        return Some(limit);
    }
    let _ = probe;
    None
}

/// The machine's bf16 limit in GFLOP/s, as [`f32_limit_gflops`] measures the f32 one:
/// independent chains of the instruction the bf16 products run on here, AMX's `TDPBF16PS`
/// (16 × 16 × 32 multiply-adds each) or `VDPBF16PS` (32). `None` without AVX512-BF16.
pub fn bf16_limit_gflops(probe: Probe) -> Option<f64> {
    if !crate::kernels::precision::bf16_supported() {
        return None;
    }
    // SAFETY: AMX (with the tiles granted) or AVX512-BF16 was detected.
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::gemm::amx::applies() {
        // A tile instruction takes 16 cycles where a vector one takes one: a 16th of the rounds.
        let probe = Probe { iters: (probe.iters / 16).max(1), ..probe };
        return Some(unsafe { probe.best_gflops(crate::kernels::gemm::amx::chains, 2 * 16 * 16 * 32) });
    }
    #[cfg(target_arch = "x86_64")]
    return Some(unsafe { probe.best_gflops(dpbf16_chains, 64) });
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// Say once a process, on stderr, where bf16 products are not faster than f32 ones on this CPU
/// (a run asked for bf16 to go faster; it computes in bf16 all the same).
pub fn note_if_bf16_is_slower() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        if let Some(note) = bf16_over_f32_rate().and_then(bf16_rate_note) {
            eprintln!("{note}");
        }
    });
}

/// What a bf16 run says where its products are not faster than f32 ones (`rate`: this CPU's
/// [`bf16_over_f32_rate`]); nothing where they are.
pub fn bf16_rate_note(rate: f64) -> Option<String> {
    (rate < 1.0).then(|| {
        format!(
            "note: on this CPU bf16 multiply-adds run at {rate:.2}x the rate of f32 ones (measured just now), \
             so --precision bf16 is slower than f32 here, not faster (docs/benchmarks.md)"
        )
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn dpbf16_chains(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_set1_ps(0.0); FMA_CHAINS];
    let a: __m512bh = std::mem::transmute(_mm512_set1_epi32(std::hint::black_box(0x3f80_3f80)));
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_dpbf16_ps(*v, a, a);
        }
    }
    _mm512_reduce_add_ps(acc.iter().fold(_mm512_setzero_ps(), |s, &v| _mm512_add_ps(s, v)))
}

/// Independent FMA chains: with a 4-cycle latency and two pipes, 8 keep the pipes full; 12
/// leave a margin.
#[cfg(target_arch = "x86_64")]
const FMA_CHAINS: usize = 12;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(0.0); FMA_CHAINS];
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_chains_512(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_set1_ps(0.0); FMA_CHAINS];
    let (a, b) = (_mm512_set1_ps(std::hint::black_box(1.000_000_1)), _mm512_set1_ps(std::hint::black_box(0.999_999_9)));
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_fmadd_ps(*v, a, b);
        }
    }
    _mm512_reduce_add_ps(acc.iter().fold(_mm512_setzero_ps(), |s, &v| _mm512_add_ps(s, v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_is_given_only_where_bf16_is_the_slower() {
        let note = bf16_rate_note(0.5).expect("a note at half the rate");
        assert!(note.contains("0.50x") && note.contains("slower"), "{note}");
        assert_eq!(bf16_rate_note(1.9), None);
        assert_eq!(bf16_rate_note(1.0), None);
    }

    #[test]
    fn the_rate_is_measured_where_the_cpu_has_bf16() {
        match bf16_over_f32_rate() {
            None => assert!(!crate::kernels::precision::bf16_supported()),
            // Every CPU measured so far lies between 0.4 (Emerald Rapids, VDPBF16PS) and 2.5
            // (Zen 5), or near 16 on AMX tiles (Sapphire Rapids on).
            Some(r) => assert!(r.is_finite() && r > 0.1 && r < 64.0, "rate {r}"),
        }
        assert_eq!(bf16_over_f32_rate(), bf16_over_f32_rate(), "measured once a process");
    }
}
