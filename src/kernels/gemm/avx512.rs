//! The f32 kernel written with AVX-512 intrinsics for the per-step products of [`PackedB`]
//! (and the long weight gradients of `blocked`), chosen at run time when the CPU has AVX-512F.
//!
//! A 16-column panel is one 512-bit vector, so 32 registers hold up to 16 rows of
//! accumulators against AVX2's 6: each panel is read once for 16 rows of the batch instead of
//! three times (6, 5, 5), from memory once and then from L2. Rows of `A` whose stride crowds
//! L1's sets are packed first (depth-major, up to 16 side by side): read in place, 16 rows a
//! power-of-two stride apart (C2's `[h_t]` rows are 4 KiB apart) fall in one L1 set and evict
//! each other; other rows are read in place. It is faster than the AVX2 kernel even on a Zen 4,
//! whose 512-bit FMAs run at the same FLOP rate as 256-bit ones (docs/benchmarks.md, "The
//! 16-row AVX-512 per-step kernel"). On Intel CPUs a call covers two panels (`micro2`, 14
//! rows × 32 columns), which feeds their two 512-bit FMA ports (`pairs`).
//!
//! Each element of `C` is the same chain of FMAs over `k` in order as in the AVX2 kernel, so
//! the results are identical to it, bit for bit.

use super::{pack_panel, row_block, NR};
use std::any::TypeId;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows of `C` one kernel call computes: 16 accumulators of 16 columns.
pub const MR: usize = 16;

/// Whether the kernel applies: f32 operands on a CPU with AVX-512F.
pub fn applies<T: 'static>() -> bool {
    #[cfg(test)]
    if OFF.get() {
        return false;
    }
    TypeId::of::<T>() == TypeId::of::<f32>() && is_x86_feature_detected!("avx512f")
}

#[cfg(test)]
thread_local! {
    /// Set by a test to run this thread's products on the AVX2 kernel.
    pub static OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

thread_local! {
    /// This thread's packed rows of A, grown to the largest size seen.
    static ROWS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `C (+)= A[m, k] · B` on the calling thread, `B` given as `np` consecutive packed
/// `k × 16` panels ([`super::PackedB`]) of which the first `n` columns are `C`'s (the last
/// panel may be partial).
///
/// # Safety
/// [`applies`] holds; `a` holds `m` rows of `k` at stride `lda`; `panels` holds `np`
/// panels; `c` has `m` rows of `min(n, 16·np)` at stride `ldc`, this thread's alone.
#[allow(clippy::too_many_arguments)]
pub unsafe fn packed_b(m: usize, k: usize, a: *const f32, lda: usize, panels: *const f32, (np, n): (usize, usize), c: *mut f32, ldc: usize, acc: bool) {
    ROWS.with_borrow_mut(|rows| {
        // Two panels a call take blocks of up to 14 rows; packed slivers follow the blocks.
        let pair = pairs() && np >= 2;
        let mr_max = rows_per_call(pair);
        let packed = collide(lda, m.min(mr_max));
        if packed {
            if rows.len() < m * k {
                rows.resize(m * k, 0.0);
            }
            let mut i0 = 0;
            while i0 < m {
                let mr = row_block(m - i0, mr_max);
                // SAFETY: rows i0.. i0 + mr of A, k each, are readable.
                unsafe { pack_panel(&mut rows[i0 * k..(i0 + mr) * k], mr, mr, k, a.add(i0 * lda), lda, 1) };
                i0 += mr;
            }
        }
        for (p, two, nc) in panel_calls(np, n, pair) {
            let j0 = p * NR;
            // SAFETY: panel p (and p + 1 with `two`) < np.
            let panel = unsafe { panels.add(p * k * NR) };
            let mut i0 = 0;
            while i0 < m {
                let mr = row_block(m - i0, mr_max);
                // SAFETY: the sliver (or rows in place) and panels hold `mr × k` and
                // `k × 16` each; C's block lies in this thread's rows and columns. The first
                // block of rows meets the panels in memory (a recurrent weight is
                // megabytes) and prefetches them.
                unsafe {
                    let ap = (if packed { rows.as_ptr().add(i0 * k) } else { a.add(i0 * lda) }, lda, packed);
                    let cb = c.add(i0 * ldc + j0);
                    if two {
                        run2(mr, k, ap, panel, cb, ldc, nc, acc, i0 == 0)
                    } else {
                        run(mr, k, ap, panel, cb, ldc, nc, acc, i0 == 0)
                    }
                };
                i0 += mr;
            }
        }
    });
}

/// The kernel calls over `np` panels of a product `n` columns wide: `(first panel, two, nc)`,
/// two panels a call while two remain where `pair` says so, then one; `nc` is the call's
/// columns of `C` (with `two`, more than 16: the first panel whole).
pub fn panel_calls(np: usize, n: usize, pair: bool) -> impl Iterator<Item = (usize, bool, usize)> {
    let call = move |p: usize| {
        let two = pair && p + 1 < np;
        (p, two, (if two { 2 * NR } else { NR }).min(n - p * NR))
    };
    std::iter::successors((np > 0).then(|| call(0)), move |&(p, two, _)| {
        let next = p + 1 + two as usize;
        (next < np).then(|| call(next))
    })
}

/// Rows of `C` a call computes: [`MR2`] with two panels a call, else [`MR`].
pub fn rows_per_call(pair: bool) -> usize {
    if pair { MR2 } else { MR }
}

/// Whether `rows` rows of f32 at stride `lda` crowd L1's sets: more than 4 of them in one
/// of the 64 sets of 64-byte lines (a 32 KiB, 8-way L1), where they evict each other and
/// the panel's lines. Rows that do are packed first; others are read in place, since packing
/// C3's 50 × 1000 gradient rows each step cost more than it saved (docs/benchmarks.md, "Rows
/// packed only where they crowd L1").
fn collide(lda: usize, rows: usize) -> bool {
    let mut count = [0u8; 64];
    (0..rows).any(|r| {
        let set = &mut count[(r * lda * 4 / 64) % 64];
        *set += 1;
        *set > 4
    })
}

/// `kernel::<R, PACKED, PREFETCH>(args)` for the `(R, PACKED, PREFETCH)` given at run time,
/// `R` one of the listed row counts.
macro_rules! by_rows {
    ($kernel:ident, $sel:expr, $args:tt, $($r:literal)*) => {
        match $sel {
            $(($r, true, true) => by_rows!(@call $kernel, $r, true, true, $args),
              ($r, true, false) => by_rows!(@call $kernel, $r, true, false, $args),
              ($r, false, true) => by_rows!(@call $kernel, $r, false, true, $args),
              ($r, false, false) => by_rows!(@call $kernel, $r, false, false, $args),)*
            (mr, _, _) => unreachable!("avx512::{}: {mr} rows", stringify!($kernel)),
        }
    };
    (@call $kernel:ident, $r:literal, $pk:literal, $pf:literal, ($($arg:expr),*)) => {
        $kernel::<$r, $pk, $pf>($($arg),*)
    };
}

/// `mr ≤ 16` rows of `A` times one `k × 16` panel into `nc ≤ 16` columns of `C`. `A` is
/// `(a, lda, packed)`: a packed sliver (for each depth, the `mr` values side by side;
/// `lda` unused) or `mr` rows of `k` at stride `lda`. With `prefetch`, the panel is
/// fetched ahead of its loads.
///
/// # Safety
/// As [`packed_b`], for one block of rows, one panel and its block of `C`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run(mr: usize, k: usize, (a, lda, packed): (*const f32, usize, bool), p: *const f32, c: *mut f32, ldc: usize, nc: usize, acc: bool, prefetch: bool) {
    // SAFETY: as the caller guarantees.
    unsafe { by_rows!(micro, (mr, packed, prefetch), (k, a, lda, p, c, ldc, nc, acc), 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16) }
}

/// Rows of `C` a two-panel call computes: 2 × 14 accumulators, the two panels' vectors and
/// a broadcast fill 31 of the 32 registers.
pub const MR2: usize = 14;

thread_local! {
    /// Panels a call on this thread: 0 as [`pairs`] decides for the CPU, 1 or 2 forced (the
    /// tests, and `examples/packed_gemm.rs`, which times the two kernels against each other).
    pub static PANELS: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Whether the products run two panels a call ([`micro2`]): on Intel CPUs, where it is
/// 1.1–1.6× the one-panel kernel at the cells' shapes on one thread (docs/benchmarks.md, "Two
/// panels a call on an Intel"). A Zen 4's 512-bit FMAs run at half an Intel's rate, and the
/// one-panel kernel was measured there and on a Zen 5; they keep it until a session on one
/// measures this.
pub fn pairs() -> bool {
    match PANELS.get() {
        1 => false,
        2 => true,
        _ => {
            static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            *INTEL.get_or_init(|| {
                let v = __cpuid(0);
                [v.ebx, v.edx, v.ecx].iter().flat_map(|r| r.to_le_bytes()).eq(*b"GenuineIntel")
            })
        }
    }
}

/// [`run`] over two consecutive panels (`p` and `p + k·16`) into `nc ≤ 32` columns of `C`,
/// the first 16 of them whole. Each broadcast of `A` feeds two FMAs, so a step of `k` loads
/// 16 values for 28 FMAs where [`micro`] loads 17 for 16: an Intel's two 512-bit FMA ports
/// are then fed without waiting on loads. Each element of `C` is the same chain as in
/// [`micro`], so the bits are the same.
///
/// # Safety
/// As [`run`], for two panels.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run2(mr: usize, k: usize, (a, lda, packed): (*const f32, usize, bool), p: *const f32, c: *mut f32, ldc: usize, nc: usize, acc: bool, prefetch: bool) {
    // SAFETY: as the caller guarantees.
    unsafe { by_rows!(micro2, (mr, packed, prefetch), (k, a, lda, p, c, ldc, nc, acc), 1 2 3 4 5 6 7 8 9 10 11 12 13 14) }
}

#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn micro2<const R: usize, const PACKED: bool, const PF: bool>(k: usize, a: *const f32, lda: usize, p: *const f32, c: *mut f32, ldc: usize, nc: usize, acc: bool) {
    let (mut s, mut t) = ([_mm512_setzero_ps(); R], [_mm512_setzero_ps(); R]);
    let q = p.add(k * NR);
    for r in 0..R {
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + NR) as *const i8);
    }
    for kk in 0..k {
        if PF {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(kk * NR + PANEL_AHEAD) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(q.wrapping_add(kk * NR + PANEL_AHEAD) as *const i8);
        }
        let b = _mm512_loadu_ps(p.add(kk * NR));
        let e = _mm512_loadu_ps(q.add(kk * NR));
        for r in 0..R {
            let av = _mm512_set1_ps(*a.add(if PACKED { kk * R + r } else { r * lda + kk }));
            s[r] = _mm512_fmadd_ps(av, b, s[r]);
            t[r] = _mm512_fmadd_ps(av, e, t[r]);
        }
    }
    let mask: __mmask16 = if nc >= 2 * NR { !0 } else { (1u16 << (nc - NR)) - 1 };
    for r in 0..R {
        let cr = c.add(r * ldc);
        let v = if acc { _mm512_add_ps(s[r], _mm512_loadu_ps(cr)) } else { s[r] };
        _mm512_storeu_ps(cr, v);
        let cr = cr.add(NR);
        let v = if acc { _mm512_add_ps(t[r], _mm512_maskz_loadu_ps(mask, cr)) } else { t[r] };
        _mm512_mask_storeu_ps(cr, mask, v);
    }
}

/// How far ahead (in floats: 32 depths of a panel) a first pass over a panel prefetches it.
const PANEL_AHEAD: usize = 32 * NR;

#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn micro<const R: usize, const PACKED: bool, const PF: bool>(k: usize, a: *const f32, lda: usize, p: *const f32, c: *mut f32, ldc: usize, nc: usize, acc: bool) {
    let mut s = [_mm512_setzero_ps(); R];
    // C's block is written (and with `acc` first read) after the loop: fetch it now.
    for r in 0..R {
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc) as *const i8);
    }
    for kk in 0..k {
        if PF {
            // Past the panel's end this names memory that may not exist: a prefetch never
            // faults, and `wrapping_add` keeps the address arithmetic defined.
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(kk * NR + PANEL_AHEAD) as *const i8);
        }
        let b = _mm512_loadu_ps(p.add(kk * NR));
        for (r, sr) in s.iter_mut().enumerate() {
            let av = *a.add(if PACKED { kk * R + r } else { r * lda + kk });
            *sr = _mm512_fmadd_ps(_mm512_set1_ps(av), b, *sr);
        }
    }
    // Columns nc.. of a partial panel are not C's: masked out.
    let mask: __mmask16 = if nc == NR { !0 } else { (1u16 << nc) - 1 };
    for (r, &sr) in s.iter().enumerate() {
        let cr = c.add(r * ldc);
        let v = if acc { _mm512_add_ps(sr, _mm512_maskz_loadu_ps(mask, cr)) } else { sr };
        _mm512_mask_storeu_ps(cr, mask, v);
    }
}
