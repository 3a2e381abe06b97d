//! The whole-sequence f32 GEMM (input projections, weight and input gradients, the decoder),
//! blocked as GotoBLAS does, on the AVX2/FMA kernel (and the AVX-512 one for long weight
//! gradients where the CPU has it, in slivers of 16 rows; on a CPU taking two panels a call,
//! Intel's, the two-panel AVX-512 kernel for every product whose rows it packs, in slivers of
//! 14).
//!
//! For each depth block of `KC`, `op(B)` is packed into `KC × 16` panels; for each `MC` rows
//! of `op(A)`, those rows are packed into slivers of up to 6 rows (kk-major); then every panel
//! meets every sliver. A panel (16 KiB) and a sliver (6 KiB) share L1, the packed rows (up to
//! 120 KiB) stay in L2. It trains faster than the `gemm` crate's kernel on the same products
//! (docs/benchmarks.md, "Our blocked GEMM instead of the crate's"). f64 (the gradient checks)
//! and CPUs without AVX2 keep the crate.
//!
//! Each element of `C` is the sum over depth blocks, in order, of a dot product over the block
//! in order: the same for any split of `C` between threads.

use super::{avx2, avx512, copy_run, pack_panel, row_block, IN_PLACE_MAX_N, MR, NR};
use std::cell::RefCell;

const KC: usize = 256;
const MC: usize = 20 * MR;

thread_local! {
    /// This thread's packed rows of A and panels of B, grown to the largest size seen.
    static PACKS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `C[m,n] (+)= op(A)·op(B)` on the calling thread, where `op(A)(i, p) = a[i·a_rs + p·a_cs]`
/// and `op(B)(p, j) = b[p·b_rs + j·b_cs]`.
///
/// # Safety
/// [`avx2::applies`] holds for f32; every element addressed above for `i < m`, `j < n`,
/// `p < k` is readable, and `C`'s `m × n` block at stride `ldc` is this thread's alone.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    (m, n, k): (usize, usize, usize),
    (a, a_rs, a_cs): (*const f32, usize, usize),
    (b, b_rs, b_cs): (*const f32, usize, usize),
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    let np = n.div_ceil(NR);
    // Packing a block of A costs a pass over it and pays when many panels reuse it: at
    // n ≤ 256 (16 panels) rows stored contiguously are read in place, as PackedB reads
    // them; wider products pack (docs/benchmarks.md, "Rows of A read in place up to 16
    // panels"). [`super::gemm`] gives most such products (32 < n ≤ 256) to the crate, whose
    // kernel is faster there.
    let direct = a_cs == 1 && n <= IN_PLACE_MAX_N;
    // Long weight gradients (`op(A) = Aᵀ` over a deep sum) run the 16-row AVX-512 kernel
    // where the CPU has it: faster at C3's depth of 100,000, the same at C1's 6,400, slower
    // on C2's shallow products, for no reason found (docs/benchmarks.md, "Long weight
    // gradients on the 16-row AVX-512 kernel"; a Zen 4). Where the CPU takes two panels a
    // call (`avx512::pairs`, Intel: two 512-bit FMA ports, where the 8-wide AVX2 kernel runs
    // at half the rate) every packed product does (docs/benchmarks.md, "Two panels a call on
    // an Intel").
    let pairs = avx512::applies::<f32>() && avx512::pairs();
    let wide = !direct && avx512::applies::<f32>() && ((a_rs == 1 && k >= 16 * KC) || pairs);
    let pair = wide && np >= 2 && pairs;
    let (mr_max, mc_max) = if wide { (avx512::rows_per_call(pair), 8 * avx512::rows_per_call(pair)) } else { (MR, MC) };
    PACKS.with_borrow_mut(|(pa, pb)| {
        grow(pa, mc_max * KC.min(k));
        grow(pb, np * NR * KC.min(k));
        for p0 in (0..k).step_by(KC) {
            let kc = KC.min(k - p0);
            for (jp, panel) in pb.chunks_exact_mut(kc * NR).take(np).enumerate() {
                let (j0, nc) = (jp * NR, NR.min(n - jp * NR));
                // SAFETY: p0 + kk < k and j0 + jj < n, in bounds as the caller guarantees.
                unsafe { pack_panel(panel, NR, nc, kc, b.add(p0 * b_rs + j0 * b_cs), b_cs, b_rs) };
            }
            // Later depth blocks add to what the earlier ones left in C.
            let acc = acc || p0 > 0;
            for i0 in (0..m).step_by(mc_max) {
                let mc = mc_max.min(m - i0);
                // Rows read in place (`direct`) need no packing.
                if !direct && a_rs == 1 {
                    // SAFETY: i0 + r < m and p0 + kk < k.
                    unsafe { pack_rows_by_depth(pa, (mc, mr_max), kc, a.add(i0 + p0 * a_cs), a_cs) };
                } else if !direct {
                    let (mut r0, mut off) = (0, 0);
                    while r0 < mc {
                        let mr = row_block(mc - r0, mr_max);
                        // SAFETY: i0 + r0 + r < m and p0 + kk < k.
                        unsafe { pack_panel(&mut pa[off..off + kc * mr], mr, mr, kc, a.add((i0 + r0) * a_rs + p0 * a_cs), a_rs, a_cs) };
                        (r0, off) = (r0 + mr, off + kc * mr);
                    }
                }
                for (jp, two, nc) in avx512::panel_calls(np, n, pair) {
                    let j0 = jp * NR;
                    let panel = &pb[jp * kc * NR..(jp + 1 + two as usize) * kc * NR];
                    let (mut r0, mut off) = (0, 0);
                    while r0 < mc {
                        let mr = row_block(mc - r0, mr_max);
                        // SAFETY: the sliver and panel were packed above with these sizes;
                        // C's rows i0 + r0.. and columns j0.. lie in this thread's block.
                        unsafe {
                            let cp = c.add((i0 + r0) * ldc + j0);
                            if direct {
                                let ap = a.add((i0 + r0) * a_rs + p0);
                                avx2::run(mr, kc, ap, a_rs, false, panel.as_ptr(), cp, ldc, nc, acc, false);
                            } else if two {
                                avx512::run2(mr, kc, (pa.as_ptr().add(off), 0, true), panel.as_ptr(), cp, ldc, nc, acc, false);
                            } else if wide {
                                avx512::run(mr, kc, (pa.as_ptr().add(off), 0, true), panel.as_ptr(), cp, ldc, nc, acc, false);
                            } else {
                                avx2::run(mr, kc, pa.as_ptr().add(off), 0, true, panel.as_ptr(), cp, ldc, nc, acc, false);
                            }
                        }
                        (r0, off) = (r0 + mr, off + kc * mr);
                    }
                }
            }
        }
    });
}

/// The slivers of `mc` rows of `op(A)` over `kc` depths, as the loop over [`pack_panel`]
/// in [`gemm`] lays them out, when those rows lie side by side in memory (`op(A) = Aᵀ`,
/// e.g. a weight gradient's `dyᵀ`): one sweep along each depth's `mc` contiguous values,
/// scattered to the slivers, with the depth a few steps ahead prefetched. Packing sliver by
/// sliver instead reads 6 values from each of `kc` rows a page or more apart, so every row
/// starts a cache miss no prefetcher follows (C3's LSTM: the 400 MB `dxpᵀ` of its
/// recurrent weight gradient, packing 16 % of that product's time).
///
/// # Safety
/// `src[r + kk·ks]` is readable for `r < mc`, `kk < kc`.
unsafe fn pack_rows_by_depth(dst: &mut [f32], (mc, mr_max): (usize, usize), kc: usize, src: *const f32, ks: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    const AHEAD: usize = 24;
    for kk in 0..kc {
        // SAFETY (all): in bounds as the caller guarantees; the prefetch only when it is.
        let row = unsafe { src.add(kk * ks) };
        if kk + AHEAD < kc {
            for line in (0..mc).step_by(16) {
                unsafe { _mm_prefetch::<_MM_HINT_T0>(row.add(AHEAD * ks + line) as *const i8) };
            }
            unsafe { _mm_prefetch::<_MM_HINT_T0>(row.add(AHEAD * ks + mc - 1) as *const i8) };
        }
        let (mut r0, mut off) = (0, 0);
        while r0 < mc {
            let mr = row_block(mc - r0, mr_max);
            unsafe { copy_run(&mut dst[off + kk * mr..off + (kk + 1) * mr], row.add(r0)) };
            (r0, off) = (r0 + mr, off + kc * mr);
        }
    }
}

fn grow(v: &mut Vec<f32>, len: usize) {
    if v.len() < len {
        v.resize(len, 0.0);
    }
}
