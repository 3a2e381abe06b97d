//! The f32 kernel written with AVX2/FMA intrinsics, chosen at run time when the CPU has them.

use super::NR;
use std::any::TypeId;
use std::arch::x86_64::*;

/// Whether the kernel applies: f32 operands on a CPU with AVX2 and FMA.
pub fn applies<T: 'static>() -> bool {
    TypeId::of::<T>() == TypeId::of::<f32>() && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// `mr ≤ 6` rows of `A` times one packed panel into `nc ≤ 16` columns of `C`. `A` is either
/// `mr` rows of `k` at stride `lda` (`packed` false) or a packed sliver: for each `kk`, the
/// `mr` values of that column side by side (`packed` true; `lda` is then unused). With
/// `prefetch` (rows in place only) the panel is fetched ahead of its loads: for a first pass
/// over a panel that is not in cache.
///
/// # Safety
/// [`applies`] holds, `a` holds `mr × k` values as described, `p` holds `k × 16`, and `c`
/// has `mr` rows of `nc` at stride `ldc`, none of them written by anyone else meanwhile.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run(mr: usize, k: usize, a: *const f32, lda: usize, packed: bool, p: *const f32, c: *mut f32, ldc: usize, nc: usize, acc: bool, prefetch: bool) {
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows<const PACKED: bool, const PF: bool>(mr: usize, k: usize, a: *const f32, lda: usize, p: *const f32, c: *mut f32, ldc: usize, nc: usize, acc: bool) {
        // SAFETY: as the caller of `run` guarantees.
        unsafe {
            match mr {
                6 => micro::<6, PACKED, PF>(k, a, lda, p, c, ldc, nc, acc),
                5 => micro::<5, PACKED, PF>(k, a, lda, p, c, ldc, nc, acc),
                4 => micro::<4, PACKED, PF>(k, a, lda, p, c, ldc, nc, acc),
                3 => micro::<3, PACKED, PF>(k, a, lda, p, c, ldc, nc, acc),
                2 => micro::<2, PACKED, PF>(k, a, lda, p, c, ldc, nc, acc),
                _ => micro::<1, PACKED, PF>(k, a, lda, p, c, ldc, nc, acc),
            }
        }
    }
    // SAFETY: as the caller guarantees.
    unsafe {
        match (packed, prefetch) {
            (false, false) => rows::<false, false>(mr, k, a, lda, p, c, ldc, nc, acc),
            (false, true) => rows::<false, true>(mr, k, a, lda, p, c, ldc, nc, acc),
            (true, _) => rows::<true, false>(mr, k, a, lda, p, c, ldc, nc, acc),
        }
    }
}

/// [`super::pack_panel`] when `src` is contiguous along `kk` (`k_stride` 1), for `w ≤ 16`:
/// `dst[kk·w + j] = src[j·js + kk]` for `j < nc`, zero for `nc ≤ j < w`. Blocks of 8 rows
/// by 8 depths are loaded as 8 vectors and transposed with unpacks and shuffles, so the
/// stores are vectors too instead of one float each.
///
/// # Safety
/// [`applies`] holds; `dst` holds `kc × w`; `src` rows `j < nc` are readable for `kc`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn transpose_panel(dst: *mut f32, w: usize, nc: usize, kc: usize, src: *const f32, js: usize) {
    assert!(w <= NR, "transpose_panel: width {w}");
    let kc8 = kc / 8 * 8;
    // SAFETY: every read is of a row j < nc at a depth < kc, every write inside kc × w.
    unsafe {
        for j0 in (0..w).step_by(8) {
            let (rows, width) = (nc.saturating_sub(j0).min(8), (w - j0).min(8));
            for kk in (0..kc8).step_by(8) {
                let mut r = [_mm256_setzero_ps(); 8];
                for (j, v) in r.iter_mut().enumerate().take(rows) {
                    *v = _mm256_loadu_ps(src.add((j0 + j) * js + kk));
                }
                let r = transpose8(r);
                for (i, v) in r.iter().enumerate() {
                    let out = dst.add((kk + i) * w + j0);
                    if width == 8 {
                        _mm256_storeu_ps(out, *v);
                    } else if width == 6 {
                        // Four floats, then two.
                        _mm_storeu_ps(out, _mm256_castps256_ps128(*v));
                        _mm_storel_pd(out.add(4) as *mut f64, _mm_castps_pd(_mm256_extractf128_ps::<1>(*v)));
                    } else {
                        let mut tmp = [0f32; 8];
                        _mm256_storeu_ps(tmp.as_mut_ptr(), *v);
                        std::ptr::copy_nonoverlapping(tmp.as_ptr(), out, width);
                    }
                }
            }
            for kk in kc8..kc {
                for j in 0..width {
                    *dst.add(kk * w + j0 + j) = if j < rows { *src.add((j0 + j) * js + kk) } else { 0.0 };
                }
            }
        }
    }
}

/// Rows `r[j] = (a_j0 … a_j7)` to columns: the result's vector `i` is `(a_0i … a_7i)`.
#[target_feature(enable = "avx2,fma")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    // Per 128-bit lane, columns 0–3 (low lane) and 4–7 (high lane) of rows 0–3 and 4–7.
    let c0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let c1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let c2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let c3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let c4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let c5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let c6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let c7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(c0, c4),
        _mm256_permute2f128_ps::<0x20>(c1, c5),
        _mm256_permute2f128_ps::<0x20>(c2, c6),
        _mm256_permute2f128_ps::<0x20>(c3, c7),
        _mm256_permute2f128_ps::<0x31>(c0, c4),
        _mm256_permute2f128_ps::<0x31>(c1, c5),
        _mm256_permute2f128_ps::<0x31>(c2, c6),
        _mm256_permute2f128_ps::<0x31>(c3, c7),
    ]
}

/// How far ahead (in floats: 32 depths of a panel) a first pass over a panel prefetches it.
const PANEL_AHEAD: usize = 32 * NR;

/// `R` rows of `A` (rows at stride `lda`, or a packed sliver) times one `k × 16` panel into
/// `C` (`nc ≤ 16` columns written). With `PF`, the panel is prefetched `PANEL_AHEAD` floats
/// ahead of the loads.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn micro<const R: usize, const PACKED: bool, const PF: bool>(k: usize, a: *const f32, lda: usize, p: *const f32, c: *mut f32, ldc: usize, nc: usize, acc: bool) {
    let mut s0 = [_mm256_setzero_ps(); R];
    let mut s1 = [_mm256_setzero_ps(); R];
    // The block of C is written (and with `acc` first read) after the loop; fetch its lines
    // now, so that the misses (a whole-sequence C is megabytes: C2's logits are
    // 45 MB, in memory, not cache) overlap the FMAs instead of stalling the stores after them
    // (docs/benchmarks.md, "C's lines fetched before the FMAs").
    for r in 0..R {
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + nc - 1) as *const i8);
    }
    // One depth: the panel's two vectors times `R` broadcast values of A.
    macro_rules! depth {
        ($kk:expr) => {{
            let kk = $kk;
            if PF {
                // Past the panel's end this names memory that may not exist: a prefetch
                // never faults, and `wrapping_add` keeps the address arithmetic defined.
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(kk * NR + PANEL_AHEAD) as *const i8);
            }
            let b0 = _mm256_loadu_ps(p.add(kk * NR));
            let b1 = _mm256_loadu_ps(p.add(kk * NR + 8));
            for r in 0..R {
                let av = _mm256_broadcast_ss(&*a.add(if PACKED { kk * R + r } else { r * lda + kk }));
                s0[r] = _mm256_fmadd_ps(av, b0, s0[r]);
                s1[r] = _mm256_fmadd_ps(av, b1, s1[r]);
            }
        }};
    }
    // Four depths per turn of the loop, so its counter and branch come a quarter as often.
    let mut kk = 0;
    while kk + 4 <= k {
        depth!(kk);
        depth!(kk + 1);
        depth!(kk + 2);
        depth!(kk + 3);
        kk += 4;
    }
    while kk < k {
        depth!(kk);
        kk += 1;
    }
    for r in 0..R {
        let cr = c.add(r * ldc);
        if nc == NR {
            if acc {
                s0[r] = _mm256_add_ps(s0[r], _mm256_loadu_ps(cr));
                s1[r] = _mm256_add_ps(s1[r], _mm256_loadu_ps(cr.add(8)));
            }
            _mm256_storeu_ps(cr, s0[r]);
            _mm256_storeu_ps(cr.add(8), s1[r]);
        } else {
            let mut tmp = [0f32; NR];
            _mm256_storeu_ps(tmp.as_mut_ptr(), s0[r]);
            _mm256_storeu_ps(tmp.as_mut_ptr().add(8), s1[r]);
            for (j, &v) in tmp[..nc].iter().enumerate() {
                *cr.add(j) = if acc { *cr.add(j) + v } else { v };
            }
        }
    }
}
