//! The bf16 GEMMs of mixed precision (`kernels::precision`) on AVX512-BF16: `VDPBF16PS`
//! multiplies pairs of bf16 and adds both products to an f32 lane, so one instruction does 32
//! multiply-adds where an f32 FMA does 16, and the operands take half the memory.
//!
//! Layouts (a "pair" is two bf16 of consecutive depths in one `u32`, the even depth in the low
//! half, a missing odd depth zero):
//! - a panel of `B`: for each depth pair, the 16 columns' pairs side by side (64 bytes);
//! - rows of `A`: either rows of pairs at a stride (`rows`: rows stored contiguously along the
//!   depth, converted in place of packing), or slivers of up to 12 rows, for each depth pair
//!   the rows' pairs side by side (`sliver`: `op(A) = Aᵀ`, a weight gradient's `dyᵀ`).
//!
//! Rounding to bf16 is the hardware's (`VCVTNEPS2BF16`: nearest even); products of bf16 are
//! exact in f32 and each element of `C` is the same chain of `VDPBF16PS` over its depth pairs
//! in order (and over depth blocks in order) whatever the split between threads, so a result
//! does not depend on the thread count, as in f32.
//!
//! - [`packed_b`]: the per-step product against a weight packed once ([`super::PackedB`]);
//! - [`gemm`]: the whole-sequence GEMM, blocked as `blocked` is for f32.
//!
//! On a CPU with AMX both hand their blocks to [`super::amx`]'s tiles instead of `VDPBF16PS`
//! (the same panels; a transposed `A` converted to rows, not slivers).

use super::row_block;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows of `C` one kernel call computes: 12 rows of two panels, 24 accumulators.
pub const MR: usize = 12;
/// Columns of a panel: one 512-bit vector of f32 accumulators.
pub const NR: usize = 16;
/// Depths a block of the whole-sequence GEMM covers (even: whole pairs).
const KC: usize = 512;
/// Rows of `A` packed at once by the whole-sequence GEMM (120 × 512 bf16 = 120 KiB, in L2).
const MC: usize = 10 * MR;
/// [`MC`] for the AMX kernel: whole tiles of 16 rows.
const MC_AMX: usize = 8 * super::amx::MR;
/// [`MC_SLIVERS`] for the AMX kernel, whose transposed rows are converted as rows: whole tiles,
/// each depth's row of the source read in runs as long.
const MC_AMX_T: usize = 64 * super::amx::MR;
/// Rows of `op(A) = Aᵀ` packed at once (slivers: a weight gradient's `dyᵀ`): up to 1,020, so
/// that each depth's row of the source (C3's `4H` = 1,000 gate gradients of one time step and
/// batch row) is read as one run of up to 4 KiB; by 120 rows the source was read in pieces of
/// 480 bytes a row (3-4 KiB) apart, which the hardware prefetchers do not follow
/// (docs/benchmarks.md, "The weight gradient's packing in whole rows"). 1,020 × 256 pairs is
/// 1 MiB: from L2 and L3, each sliver is read once a depth block and meets every panel from L1.
const MC_SLIVERS: usize = 85 * MR;
/// A cache line (in pairs) between one sliver and the next: a depth block's slivers are 512
/// depths × 12 rows × 2 bytes = 12 KiB long, a multiple of 4 KiB, so without it every sliver's
/// pair `q`, which packing writes together, would fall in one L1 set (twelve ways for 85 slivers).
const SLIVER_GAP: usize = 16;

/// How many depths (source rows) ahead [`pack_rows`] prefetches (measured against 16 and 32:
/// docs/benchmarks.md, "The weight gradient's packing in whole rows").
const AHEAD_ROWS: usize = 8;

/// How many depth pairs ahead a first pass over a panel prefetches it.
const PANEL_AHEAD: usize = 24;

/// Whether the kernels apply: a CPU with AVX512-BF16 (and the AVX-512 subsets they use).
pub fn applies() -> bool {
    crate::kernels::precision::bf16_supported()
}

/// Whether a product of `T` runs here in bf16: f32 operands, the precision in force bf16
/// (`kernels::precision`), and a CPU with the kernel.
pub fn applies_to<T: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && crate::kernels::precision::current() == crate::kernels::precision::Precision::Bf16
        && applies()
}

/// Depth pairs of a depth `k`.
pub fn pairs(k: usize) -> usize {
    k.div_ceil(2)
}

/// Depth pairs of a depth `k` as the kernels read them: the depth's pairs, and on AMX (`amx`)
/// zero pairs up to whole chunks of 16, in every panel of `B` and row of `A`. The tiles then take
/// every block of more than 16 rows 32 rows at a time, four accumulators in flight (a shorter last
/// chunk needs tiles of its own, and left two: at 250 and 1,800 units every per-step product
/// ran so, at half the rate). A zero pair adds an exact zero to each sum, so the bits are those of
/// the shorter chunk (test `amx_zero_pairs_to_whole_chunks_change_no_bit`).
pub fn depth_pairs(k: usize, amx: bool) -> usize {
    if amx { pairs(k).next_multiple_of(super::amx::KP) } else { pairs(k) }
}

/// Zero pairs `q..qp` of `rows` rows at stride `ls` (AMX's padding, [`depth_pairs`]).
fn zero_tail(dst: &mut [u32], rows: usize, ls: usize, q: usize, qp: usize) {
    if qp > q {
        for r in 0..rows {
            dst[r * ls + q..r * ls + qp].fill(0);
        }
    }
}

/// The stride, in pairs, of rows of `k` depths: whole cache lines, plus one, so that 16 rows
/// never share an L1 set (rows a power of two apart would).
fn row_stride(k: usize) -> usize {
    pairs(k).div_ceil(16) * 16 + 16
}

thread_local! {
    /// This thread's converted rows of A and panels of B, grown to the largest size seen.
    static BUFS: RefCell<(Vec<u32>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

fn grow(v: &mut Vec<u32>, len: usize) {
    if v.len() < len {
        v.resize(len, 0);
    }
}

/// Mask of the first `w ≤ 16` lanes.
fn lanes(w: usize) -> u16 {
    if w >= 16 {
        !0
    } else {
        (1u16 << w) - 1
    }
}

/// `dst[..pairs(n)]` = the pairs of `n` contiguous f32 at `src`.
///
/// # Safety
/// [`applies`]; `src` readable for `n`, `dst` writable for `pairs(n)`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn convert_run(dst: *mut u32, src: *const f32, n: usize) {
    let out = dst as *mut u16;
    let mut i = 0;
    while i < n {
        let m = lanes(n - i);
        let v = _mm512_maskz_loadu_ps(m, src.add(i));
        let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(v));
        _mm256_mask_storeu_epi16(out.add(i) as *mut i16, m, h);
        i += 16;
    }
    if n % 2 == 1 {
        *out.add(n) = 0;
    }
}

/// Sixteen pairs from two vectors of 16 f32: lane `j` holds `(lo[j], hi[j])`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn pair16(lo: __m512, hi: __m512) -> __m512i {
    let l: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(lo));
    let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(hi));
    _mm512_or_si512(_mm512_cvtepu16_epi32(l), _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
}

/// Pack width-`w` blocks (panels of `B`, `w = 16`, or slivers of `A` of `w ≤ 12` rows) from a
/// source contiguous along the width: element `(depth d, j)` at `src[d·ds + j]`. `blocks()`
/// lists each block as `(j0, w, nc, off)`: its columns `j0.. j0 + nc` (the rest of its `w`
/// lanes zero) go to `dst[off..]`, `pairs(kc)` groups of `w`. Depth pair by depth pair across
/// every block, so that the source is read row after row; block after block, each walking
/// `kc` rows at a stride a cache line at a time, stalled on nearly every load (a tenth of an
/// RDA's bf16 step at C3: docs/benchmarks.md, "The weight gradient's packing"), and the rows
/// prefetched [`AHEAD_ROWS`] ahead.
///
/// # Safety
/// [`applies`]; the elements named are readable; `dst` holds every block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn pack_rows<I: Iterator<Item = (usize, usize, usize, usize)>>(dst: *mut u32, kc: usize, src: *const f32, ds: usize, blocks: impl Fn() -> I) {
    for q in 0..pairs(kc) {
        // `hi` is read only when that depth exists (an odd `kc` has no last one).
        let (lo, hi) = (src.add(2 * q * ds), src.wrapping_add((2 * q + 1) * ds));
        let odd = 2 * q + 1 < kc;
        for (j0, w, nc, off) in blocks() {
            let m = lanes(nc);
            // Four depth pairs ahead (C3's weight gradient: 32 KiB), a line for each block's
            // load: the source (100,000 rows there) comes from memory, and the loads waited on
            // it. Prefetching past the source's end is harmless (no fault), hence `wrapping_add`.
            _mm_prefetch::<_MM_HINT_T0>(lo.wrapping_add(AHEAD_ROWS * ds + j0) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(hi.wrapping_add(AHEAD_ROWS * ds + j0) as *const i8);
            let l = _mm512_maskz_loadu_ps(m, lo.add(j0));
            let h = if odd { _mm512_maskz_loadu_ps(m, hi.add(j0)) } else { _mm512_setzero_ps() };
            _mm512_mask_storeu_epi32(dst.add(off + q * w) as *mut i32, lanes(w), pair16(l, h));
        }
    }
}

/// Rows `0..mc` of `op(A) = Aᵀ` converted to pairs as [`convert_run`] converts rows: row `r`
/// at `dst[r·ls..]`, its pair `q` `(src[2q·ds + r], src[(2q + 1)·ds + r])`. Sixteen depth pairs
/// of sixteen rows at a time: each depth's 16 rows are one load (the source is contiguous
/// along the rows), paired, and the 16 × 16 block of pairs is turned by gathers from L1.
///
/// # Safety
/// [`applies`]; `src` readable for `kc` depths at stride `ds` of `mc` rows; `dst` holds `mc`
/// rows of `ls ≥ pairs(kc)`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn convert_transposed(dst: *mut u32, ls: usize, src: *const f32, ds: usize, mc: usize, kc: usize) {
    #[repr(C, align(64))]
    struct Block([u32; 256]);
    let mut t = Block([0; 256]);
    let q = pairs(kc);
    let idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(16));
    for q0 in (0..q).step_by(16) {
        let qn = 16.min(q - q0);
        for r0 in (0..mc).step_by(16) {
            let m = lanes(mc - r0);
            for qq in 0..qn {
                let d = 2 * (q0 + qq);
                let lo = src.add(d * ds + r0);
                // Four blocks of rows ahead along each depth's row (a stream per depth).
                _mm_prefetch::<_MM_HINT_T0>(lo.wrapping_add(64) as *const i8);
                let l = _mm512_maskz_loadu_ps(m, lo);
                let h = if d + 1 < kc {
                    _mm_prefetch::<_MM_HINT_T0>(lo.wrapping_add(ds + 64) as *const i8);
                    _mm512_maskz_loadu_ps(m, lo.add(ds))
                } else {
                    _mm512_setzero_ps()
                };
                _mm512_store_si512(t.0.as_mut_ptr().add(qq * 16) as *mut __m512i, pair16(l, h));
            }
            for r in 0..16.min(mc - r0) {
                let v = _mm512_mask_i32gather_epi32::<4>(_mm512_setzero_si512(), lanes(qn), idx, t.0.as_ptr().add(r) as *const i32);
                _mm512_mask_storeu_epi32(dst.add((r0 + r) * ls + q0) as *mut i32, lanes(qn), v);
            }
        }
    }
}

/// Pack a panel of `B` from a source contiguous along the depth: column `j < nc` is the run
/// `src[j·js ..][..kc]` (the rest zero). Each column is converted to pairs, then the 16
/// columns' pairs are gathered depth pair by depth pair.
///
/// # Safety
/// [`applies`]; the runs are readable; `dst` holds `pairs(kc) · 16`; `tmp` is scratch.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn pack_along(dst: *mut u32, nc: usize, kc: usize, src: *const f32, js: usize, tmp: &mut Vec<u32>) {
    let q = pairs(kc);
    grow(tmp, NR * q);
    for j in 0..NR {
        let row = tmp.as_mut_ptr().add(j * q);
        if j < nc {
            convert_run(row, src.add(j * js), kc);
        } else {
            std::ptr::write_bytes(row, 0, q);
        }
    }
    let idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(q as i32));
    for d in 0..q {
        let v = _mm512_i32gather_epi32::<4>(idx, tmp.as_ptr().add(d) as *const i32);
        _mm512_storeu_si512(dst.add(d * NR) as *mut __m512i, v);
    }
}

/// `mr ≤ 12` rows of `A` times one or two adjacent panels (`two`: the second `pstride` pairs
/// after the first) into `nc ≤ 16` or `≤ 32` columns of `C`, over `q` depth pairs. `A` is a
/// sliver (`PACKED`: for each pair, the `mr` rows' pairs side by side) or rows at stride `lda`
/// pairs. With `prefetch`, the panels are fetched ahead of their loads (a first pass over a
/// panel not in cache: a per-step weight is megabytes).
///
/// Two panels a call because each broadcast of `A` then feeds two `VDPBF16PS`: on a Zen 4 a
/// broadcast from memory takes a slot of the pipes `VDPBF16PS` runs on, and one broadcast per
/// instruction holds the kernel to 73 % of the machine's bf16 limit, two to 100 %
/// (docs/benchmarks.md, "The bf16 kernel: two panels a broadcast").
///
/// # Safety
/// [`applies`]; `a`, `p` hold what is described; `C`'s `mr × nc` block at `ldc` is the
/// caller's alone.
#[allow(clippy::too_many_arguments)]
unsafe fn run(mr: usize, q: usize, (a, lda, packed): (*const u32, usize, bool), (p, pstride, two): (*const u32, usize, bool), c: *mut f32, ldc: usize, nc: usize, acc: bool, prefetch: bool) {
    macro_rules! rows {
        ($($r:literal)*) => {
            match (mr, packed, prefetch, two) {
                $(($r, true, false, true) => micro::<$r, true, false, 2>(q, a, lda, p, pstride, c, ldc, nc, acc),
                  ($r, true, false, false) => micro::<$r, true, false, 1>(q, a, lda, p, pstride, c, ldc, nc, acc),
                  ($r, false, false, true) => micro::<$r, false, false, 2>(q, a, lda, p, pstride, c, ldc, nc, acc),
                  ($r, false, false, false) => micro::<$r, false, false, 1>(q, a, lda, p, pstride, c, ldc, nc, acc),
                  ($r, false, true, true) => micro::<$r, false, true, 2>(q, a, lda, p, pstride, c, ldc, nc, acc),
                  ($r, false, true, false) => micro::<$r, false, true, 1>(q, a, lda, p, pstride, c, ldc, nc, acc),)*
                _ => unreachable!("bf16::run: {mr} rows"),
            }
        };
    }
    // SAFETY: as the caller guarantees.
    unsafe { rows!(1 2 3 4 5 6 7 8 9 10 11 12) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn micro<const R: usize, const PACKED: bool, const PF: bool, const P: usize>(
    q: usize,
    a: *const u32,
    lda: usize,
    p: *const u32,
    pstride: usize,
    c: *mut f32,
    ldc: usize,
    nc: usize,
    acc: bool,
) {
    let mut s = [[_mm512_setzero_ps(); P]; R];
    for r in 0..R {
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc) as *const i8);
        if P == 2 {
            _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + NR) as *const i8);
        }
    }
    for d in 0..q {
        let b: [__m512bh; P] = std::array::from_fn(|j| {
            let pj = p.add(j * pstride);
            if PF {
                // Past the panel's end this names memory that may not exist: a prefetch never
                // faults, and `wrapping_add` keeps the address arithmetic defined.
                _mm_prefetch::<_MM_HINT_T0>(pj.wrapping_add((d + PANEL_AHEAD) * NR) as *const i8);
            }
            std::mem::transmute(_mm512_loadu_si512(pj.add(d * NR) as *const __m512i))
        });
        for (r, sr) in s.iter_mut().enumerate() {
            let av = *a.add(if PACKED { d * R + r } else { r * lda + d });
            let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(av as i32));
            for j in 0..P {
                sr[j] = _mm512_dpbf16_ps(sr[j], av, b[j]);
            }
        }
    }
    for (r, sr) in s.iter().enumerate() {
        for (j, &v) in sr.iter().enumerate() {
            let mask = lanes(nc.saturating_sub(j * NR));
            let cr = c.add(r * ldc + j * NR);
            let v = if acc { _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, cr)) } else { v };
            _mm512_mask_storeu_ps(cr, mask, v);
        }
    }
}

/// `f(p, two)` for the panels `0..np` in pairs (`two`), the last alone when `np` is odd.
fn panel_pairs(np: usize, mut f: impl FnMut(usize, bool)) {
    for p in (0..np).step_by(2) {
        f(p, p + 1 < np);
    }
}

/// Pack `op(B)` (`k × n`, element `(d, j)` at `b[d·ks + j·js]`) into the panels
/// [`packed_b`] reads: `n.div_ceil(16)` panels of `depth_pairs(k, amx) · 16`, panel `p` at
/// `dst[p · depth_pairs(k, amx) · 16..]`.
///
/// # Safety
/// [`applies`]; the elements named are readable; `dst` holds the panels.
pub unsafe fn pack_panels(dst: &mut [u32], n: usize, k: usize, b: *const f32, js: usize, ks: usize, amx: bool) {
    let (q, qp) = (pairs(k), depth_pairs(k, amx));
    let (len, np) = (qp * NR, n.div_ceil(NR));
    assert!(dst.len() >= np * len, "bf16::pack_panels: too short");
    if js == 1 {
        // SAFETY: as the caller guarantees; panel p at p·len holds len.
        unsafe { pack_rows(dst.as_mut_ptr(), k, b, ks, || (0..np).map(|p| (p * NR, NR, NR.min(n - p * NR), p * len))) };
    } else {
        BUFS.with_borrow_mut(|(tmp, _)| {
            for (p, panel) in dst.chunks_exact_mut(len).take(np).enumerate() {
                let (j0, nc) = (p * NR, NR.min(n - p * NR));
                // SAFETY: as the caller guarantees, for columns j0..j0 + nc.
                unsafe { pack_along(panel.as_mut_ptr(), nc, k, b.add(j0 * js), js, tmp) };
            }
        });
    }
    // A panel's depth pairs are its rows of 16 pairs: pad each one's to whole chunks.
    zero_tail(dst, np, len, q * NR, qp * NR);
}

/// `C (+)= A[m, k] · B` on the calling thread, `B` given as `np` panels from
/// [`pack_panels`] of which the first `n` columns are `C`'s. A's rows are converted to pairs
/// first (once for all panels). On AMX (`amx`, as the weight was packed) or AVX512-BF16.
///
/// # Safety
/// [`applies`], and [`super::amx::available`] with `amx`; `a` holds `m` rows of `k` at stride
/// `lda`; `panels` holds `np` panels of depth `k`; `c` has `m` rows of `min(n, 16·np)` at stride `ldc`, this thread's alone.
#[allow(clippy::too_many_arguments)]
pub unsafe fn packed_b(m: usize, k: usize, a: *const f32, lda: usize, panels: *const u32, (np, n): (usize, usize), c: *mut f32, ldc: usize, acc: bool, amx: bool) {
    let (q, qp, ls) = (pairs(k), depth_pairs(k, amx), row_stride(k));
    BUFS.with_borrow_mut(|(_, rows)| {
        grow(rows, m * ls);
        for i in 0..m {
            // SAFETY: row i of A is readable for k, row i of the buffer holds ls ≥ pairs(k).
            unsafe { convert_run(rows.as_mut_ptr().add(i * ls), a.add(i * lda), k) };
        }
        zero_tail(rows, m, ls, q, qp);
        let mut tiles = super::amx::Tiles::new();
        panel_pairs(np, |p, two| {
            let (j0, nc) = (p * NR, (if two { 2 * NR } else { NR }).min(n - p * NR));
            if amx {
                // SAFETY: as below, on a CPU and process with AMX; rows and panels hold qp pairs.
                unsafe { super::amx::rows(&mut tiles, m, qp, (rows.as_ptr(), ls), (panels.add(p * qp * NR), qp * NR, two), c.add(j0), ldc, nc, acc) };
                return;
            }
            let mut i0 = 0;
            while i0 < m {
                let mr = row_block(m - i0, MR);
                // SAFETY: rows i0.. i0 + mr converted above; panels p (and p + 1) < np; C's
                // block is ours.
                unsafe { run(mr, q, (rows.as_ptr().add(i0 * ls), ls, false), (panels.add(p * q * NR), q * NR, two), c.add(i0 * ldc + j0), ldc, nc, acc, i0 == 0) };
                i0 += mr;
            }
        });
    });
}

/// `C[m,n] (+)= op(A)·op(B)` on the calling thread, `op(A)(i, d) = a[i·a_rs + d·a_cs]` and
/// `op(B)(d, j) = b[d·b_rs + j·b_cs]`, one of each pair of strides 1 (row-major storage).
///
/// For each depth block of [`KC`], `op(B)`'s panels are packed, then each block of [`MC`]
/// rows of `op(A)` is converted (rows contiguous along the depth) or packed into slivers
/// (`op(A) = Aᵀ`) and meets every panel.
///
/// # Safety
/// [`applies`]; every element addressed for `i < m`, `j < n`, `d < k` is readable, and `C`'s
/// `m × n` block at stride `ldc` is this thread's alone.
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
    // On AMX, A's rows converted to pairs whatever op(A) (a transposed A is transposed while
    // converted: the tiles read rows); on AVX512-BF16, a transposed A packed into slivers.
    let amx = super::amx::applies();
    let sliver = a_cs != 1 && !amx;
    let mut tiles = super::amx::Tiles::new();
    let mut panels = PANELS.with_borrow_mut(std::mem::take);
    grow(&mut panels, np * depth_pairs(KC.min(k), amx) * NR);
    for p0 in (0..k).step_by(KC) {
        let kc = KC.min(k - p0);
        let (q, qp) = (pairs(kc), depth_pairs(kc, amx));
        let ls = row_stride(kc);
        // SAFETY: depths p0.. p0 + kc and every column are in bounds.
        unsafe { pack_panels(&mut panels, n, kc, b.add(p0 * b_rs), b_cs, b_rs, amx) };
        let acc = acc || p0 > 0;
        let mcb = match (a_cs != 1, amx) {
            (true, true) => MC_AMX_T,
            (true, false) => MC_SLIVERS,
            (false, true) => MC_AMX,
            (false, false) => MC,
        };
        BUFS.with_borrow_mut(|(_, rows)| {
            grow(rows, if sliver { mcb * q + mcb.div_ceil(MR / 2) * SLIVER_GAP } else { mcb * ls });
            for i0 in (0..m).step_by(mcb) {
                let mc = mcb.min(m - i0);
                let src = a.add(i0 * a_rs + p0 * a_cs);
                if sliver {
                    // The sliver of rows r0.. + mr starts after the r0 rows' slivers before it
                    // and their gaps.
                    let slivers = || {
                        std::iter::successors(Some((0, row_block(mc, MR))), move |&(r0, mr)| (r0 + mr < mc).then(|| (r0 + mr, row_block(mc - r0 - mr, MR))))
                            .enumerate()
                            .map(|(i, (r0, mr))| (r0, mr, mr, r0 * q + i * SLIVER_GAP))
                    };
                    // SAFETY: rows i0.. i0 + mc, depths p0.. + kc; the buffer holds MC_SLIVERS · q
                    // and a gap for each of at most mc.div_ceil(MR / 2) slivers (`row_block`: all
                    // but the last one or two have MR rows, those two more than MR / 2 together).
                    unsafe { pack_rows(rows.as_mut_ptr(), kc, src, a_cs, slivers) };
                } else if a_cs != 1 {
                    // SAFETY: rows i0.. i0 + mc, depths p0.. + kc of op(A) = Aᵀ; the buffer
                    // holds mcb rows of ls ≥ pairs(kc).
                    unsafe { convert_transposed(rows.as_mut_ptr(), ls, src, a_cs, mc, kc) };
                } else {
                    for i in 0..mc {
                        // SAFETY: row i0 + i is contiguous for kc depths from p0.
                        unsafe { convert_run(rows.as_mut_ptr().add(i * ls), src.add(i * a_rs), kc) };
                    }
                }
                if amx {
                    zero_tail(rows, mc, ls, q, qp);
                }
                panel_pairs(np, |jp, two| {
                    let (j0, nc) = (jp * NR, (if two { 2 * NR } else { NR }).min(n - jp * NR));
                    let panel = (panels.as_ptr().add(jp * qp * NR), qp * NR, two);
                    let (mut r0, mut off) = (0, 0);
                    if amx {
                        // SAFETY: rows converted above, and panels, hold qp pairs; C's block is this thread's.
                        unsafe { super::amx::rows(&mut tiles, mc, qp, (rows.as_ptr(), ls), panel, c.add(i0 * ldc + j0), ldc, nc, acc) };
                        r0 = mc;
                    }
                    while r0 < mc {
                        let mr = row_block(mc - r0, MR);
                        let ap = if sliver { (rows.as_ptr().add(off), 0, true) } else { (rows.as_ptr().add(r0 * ls), ls, false) };
                        // SAFETY: converted or packed above; C's block is this thread's.
                        unsafe { run(mr, q, ap, panel, c.add((i0 + r0) * ldc + j0), ldc, nc, acc, false) };
                        (r0, off) = (r0 + mr, off + q * mr + if sliver { SLIVER_GAP } else { 0 });
                    }
                });
            }
        });
    }
    PANELS.with_borrow_mut(|p| *p = panels);
}

thread_local! {
    /// This thread's packed panels of B for [`gemm`] (apart from [`BUFS`], which
    /// [`pack_panels`] borrows while they are filled).
    static PANELS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}
