//! Packing: the panels of `B` (and slivers of `A`) that every f32 kernel reads, and
//! [`PackedB`], the per-step recurrent product's weight packed once per sequence with its
//! portable kernel (`micro`; the AVX2 and AVX-512 kernels take over where the CPU has them).

use super::{for_each_block, profile, Ptr, PtrMut, PAR_MIN_FLOPS};
#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512, bf16};
use crate::kernels::num::Float;
use rayon::prelude::*;

/// Output columns per packed panel: two AVX2 vectors of f32.
pub(super) const NR: usize = 16;
/// Rows of `C` one kernel call computes (6 × 16 accumulators fit the 16 vector registers).
pub(super) const MR: usize = 6;
/// Up to this many columns of `C` (16 panels) the blocked GEMM reads rows of `A` stored
/// contiguously in place instead of packing them; [`gemm`] hands most such products to the
/// crate.
pub(super) const IN_PLACE_MAX_N: usize = 16 * NR;

/// Rows of the next kernel call when `left` rows remain, for a kernel of at most `mr` rows:
/// blocks of `mr`, but the last two blocks share what remains evenly, so that no call runs a
/// thin, latency-bound block (32 rows go 6, 6, 6, 6, 4, 4 rather than 6, 6, 6, 6, 6, 2: a
/// 2-row block keeps only four FMA chains in flight, too few to fill both FMA pipes).
pub(super) fn row_block(left: usize, mr: usize) -> usize {
    if left > mr && left < 2 * mr {
        left.div_ceil(2)
    } else {
        mr.min(left)
    }
}

/// `dst[kk·w + j] = src[j·j_stride + kk·k_stride]` for `j < nc`, zero for `nc ≤ j < w`,
/// `kk < kc`: a panel of B (`w = 16` columns; [`PackedB`], `blocked`) or a sliver of A (`w` its
/// rows; `blocked`). The loop runs along whichever side is contiguous in `src`, so that it
/// compiles to vector copies; when that is `kk` (a transpose: PyTorch-layout weights, rows of
/// A), f32 on AVX2 transposes blocks of 8 × 8 in registers.
///
/// # Safety
/// Every `src` element named above is readable.
pub(super) unsafe fn pack_panel<T: Float>(dst: &mut [T], w: usize, nc: usize, kc: usize, src: *const T, j_stride: usize, k_stride: usize) {
    // SAFETY: the runs built here are those elements.
    unsafe {
        if j_stride == 1 {
            for (kk, row) in dst.chunks_exact_mut(w).take(kc).enumerate() {
                copy_run(&mut row[..nc], src.add(kk * k_stride));
                row[nc..].fill(T::zero());
            }
        } else {
            #[cfg(target_arch = "x86_64")]
            if k_stride == 1 && w <= NR && avx2::applies::<T>() {
                // SAFETY: T is f32; `dst` holds `kc × w` (a panel or sliver of this size).
                avx2::transpose_panel(dst.as_mut_ptr() as *mut f32, w, nc, kc, src as *const f32, j_stride);
                return;
            }
            for j in 0..w {
                if j < nc {
                    let run = std::slice::from_raw_parts(src.add(j * j_stride), (kc - 1) * k_stride + 1);
                    for (kk, &v) in run.iter().step_by(k_stride).enumerate() {
                        dst[kk * w + j] = v;
                    }
                } else {
                    dst.iter_mut().skip(j).step_by(w).take(kc).for_each(|v| *v = T::zero());
                }
            }
        }
    }
}

/// `dst = src[..dst.len()]` for the runs of [`pack_panel`]: a sliver's 1–6 rows or a panel's
/// 16 columns are copied by moves of a length known at compile time, which the compiler
/// inlines; a `copy_from_slice` of a run this short is a call to `memmove` per run (in C3's LSTM
/// training, packing its transposed weight gradient's rows: `memmove` 7.5 % of the step before,
/// the packing 5.4 % after, most of it now the reads of the 400 MB source).
///
/// # Safety
/// `src` is readable for `dst.len()` elements.
#[inline(always)]
pub(super) unsafe fn copy_run<T: Copy>(dst: &mut [T], src: *const T) {
    #[inline(always)]
    unsafe fn fixed<T: Copy, const N: usize>(dst: &mut [T], src: *const T) {
        // SAFETY: `dst.len() == N` (the caller's match) and `src` readable for it.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), N) }
    }
    // SAFETY: as the caller guarantees.
    unsafe {
        match dst.len() {
            NR => fixed::<T, NR>(dst, src),
            6 => fixed::<T, 6>(dst, src),
            5 => fixed::<T, 5>(dst, src),
            4 => fixed::<T, 4>(dst, src),
            3 => fixed::<T, 3>(dst, src),
            2 => fixed::<T, 2>(dst, src),
            n => std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), n),
        }
    }
}

/// The fixed operand of the per-step recurrent GEMM, packed once per sequence.
///
/// Every time step multiplies a small batch of rows by the same weight matrix. A general GEMM
/// repacks the weight on every call, which at batch sizes dominates the step
/// (docs/benchmarks.md, "The recurrent weight packed once"). Here the weight is packed once into panels of `NR`
/// output columns (`k × NR` floats, contiguous, zero-padded at the right edge), and each
/// step's product reads the panels directly. `count` matrices of the same shape can be packed
/// side by side (the ISAN's one matrix per symbol).
///
/// Each element of `C` is one dot product over `k` in a fixed order, computed by one thread,
/// so the result does not depend on the number of threads.
#[derive(Clone, Debug, Default)]
pub struct PackedB<T> {
    n: usize,
    k: usize,
    count: usize,
    data: Vec<T>,
    /// Packed for the bf16 kernel (the precision in force when packed was bf16): the panels
    /// are in `half`, `data` is empty.
    bf16: bool,
    /// Packed while AMX was on (`amx::applies`): its products run on AMX, on every thread.
    amx: bool,
    half: Vec<u32>,
}

impl<T: Float> PackedB<T> {
    fn panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    /// Elements (f32) or pairs (bf16) of one packed matrix.
    fn block_len(&self) -> usize {
        #[cfg(target_arch = "x86_64")]
        if self.bf16 {
            return self.panels() * bf16::depth_pairs(self.k, self.amx) * bf16::NR;
        }
        self.panels() * self.k * NR
    }

    /// Pack `op(B)` (`k × n`) for products `A[m,k] · op(B)`: `B` is stored `[n, k]` with row
    /// stride `ldb` when `tb` (a PyTorch-layout weight, `y = x Wᵀ`), else `[k, n]`. With
    /// `count > 1`, matrix `i` starts at `b[i * stride]`. Reallocates only when the size grows.
    #[allow(clippy::too_many_arguments)]
    pub fn pack(&mut self, b: &[T], ldb: usize, tb: bool, n: usize, k: usize, count: usize, stride: usize) {
        self.n = n;
        self.k = k;
        self.count = count;
        #[cfg(target_arch = "x86_64")]
        {
            self.bf16 = bf16::applies_to::<T>();
            self.amx = self.bf16 && super::amx::applies();
        }
        let len = self.block_len();
        if self.bf16 {
            self.data.clear();
            self.half.resize(len * count, 0);
        } else {
            self.half.clear();
            self.data.resize(len * count, T::zero());
        }
        if n == 0 || k == 0 || count == 0 {
            return;
        }
        // (column, depth) strides of op(B).
        let (js, ks) = if tb { (ldb, 1) } else { (1, ldb) };
        assert!(b.len() > (count - 1) * stride + (n - 1) * js + (k - 1) * ks, "PackedB: B too short");
        #[cfg(target_arch = "x86_64")]
        if self.bf16 {
            let (np, amx) = (self.panels(), self.amx);
            let src = Ptr(b.as_ptr() as *const f32);
            self.half.par_chunks_exact_mut(len / np).with_min_len(16).enumerate().for_each(|(q, panel)| {
                let (c, p) = (q / np, q % np);
                let (j0, nc) = (p * NR, NR.min(n - p * NR));
                // SAFETY: T is f32 (`applies_to`); the assert above bounds every element.
                unsafe { bf16::pack_panels(panel, nc, k, src.get().add(c * stride + j0 * js), js, ks, amx) };
            });
            return;
        }
        // Panels in parallel: a recurrent weight is packed once per window and direction, and
        // on the calling thread alone the pool threads wait for it (docs/benchmarks.md,
        // "Panels packed in parallel").
        let np = self.panels();
        let src = Ptr(b.as_ptr());
        self.data.par_chunks_exact_mut(k * NR).with_min_len(16).enumerate().for_each(|(q, panel)| {
            let (c, p) = (q / np, q % np);
            let (j0, nc) = (p * NR, NR.min(n - p * NR));
            // SAFETY: the assert above bounds every element of every matrix.
            unsafe { pack_panel(panel, NR, nc, k, src.get().add(c * stride + j0 * js), js, ks) };
        });
    }

    /// Whether it was packed for the bf16 kernel.
    pub fn is_bf16(&self) -> bool {
        self.bf16
    }

    /// Pack a `[n, k]` weight for the steps of [`linear`]`(m, n, k, x, w, y, acc)`.
    pub fn pack_linear(&mut self, w: &[T], n: usize, k: usize) {
        self.pack(w, k, true, n, k, 1, 0);
    }

    /// Pack a `[n, k]` weight for the steps of [`linear_dx`]`(m, n, k, dy, w, dx, acc)`.
    pub fn pack_linear_dx(&mut self, w: &[T], n: usize, k: usize) {
        self.pack(w, k, false, k, n, 1, 0);
    }

    /// `C[m,n] (+)= A[m,k] · op(B)` with the packed matrix `which` (0 unless `count > 1`).
    /// `A` is row-major with row stride `lda`, `C` with `ldc`.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(&self, which: usize, m: usize, a: &[T], lda: usize, c: &mut [T], ldc: usize, acc: bool) {
        self.gemm_in(true, which, m, a, lda, c, ldc, acc)
    }

    /// [`PackedB::gemm`] on the calling thread alone, for callers that already split their
    /// work between threads (a per-call split would wake the pool for a tiny product).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_serial(&self, which: usize, m: usize, a: &[T], lda: usize, c: &mut [T], ldc: usize, acc: bool) {
        self.gemm_in(false, which, m, a, lda, c, ldc, acc)
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm_in(&self, parallel: bool, which: usize, m: usize, a: &[T], lda: usize, c: &mut [T], ldc: usize, acc: bool) {
        let (n, k) = (self.n, self.k);
        if m == 0 || n == 0 {
            return;
        }
        assert!(which < self.count, "PackedB: matrix {which} of {}", self.count);
        assert!(lda >= k && a.len() >= (m - 1) * lda + k, "PackedB: A too short");
        assert!(ldc >= n && c.len() >= (m - 1) * ldc + n, "PackedB: C too short");
        let _timer = profile::record(m, n, k, !parallel);
        let len = self.block_len();
        let np = self.panels();
        let cp = PtrMut(c.as_mut_ptr());
        #[cfg(target_arch = "x86_64")]
        if self.bf16 {
            let half = &self.half[which * len..(which + 1) * len];
            let plen = len / np;
            let run = |p0: usize, p1: usize| {
                // SAFETY: packed for the bf16 kernel, so it applies and T is f32; A and C are
                // bounded by the asserts above and panels are split between threads.
                unsafe { bf16::packed_b(m, k, a.as_ptr() as *const f32, lda, half[p0 * plen..].as_ptr(), (p1 - p0, n - p0 * NR), cp.get().add(p0 * NR) as *mut f32, ldc, acc, self.amx) };
            };
            return split_panels(parallel, m * n * k, np, &run);
        }
        let packed = &self.data[which * len..(which + 1) * len];
        let run = |p0: usize, p1: usize| {
            #[cfg(target_arch = "x86_64")]
            if avx512::applies::<T>() {
                // SAFETY: T is f32 (`applies`); A and C are bounded by the asserts above and
                // panels are split between threads, so no element of C is written twice.
                unsafe { avx512::packed_b(m, k, a.as_ptr() as *const f32, lda, packed[p0 * k * NR..].as_ptr() as *const f32, (p1 - p0, n - p0 * NR), cp.get().add(p0 * NR) as *mut f32, ldc, acc) };
                return;
            }
            for p in p0..p1 {
                let panel = &packed[p * k * NR..(p + 1) * k * NR];
                let j0 = p * NR;
                let nc = NR.min(n - j0);
                let mut i0 = 0;
                while i0 < m {
                    let mr = row_block(m - i0, MR);
                    // SAFETY: rows i0..i0+mr and columns j0..j0+nc lie inside C (asserted above)
                    // and panels are split between threads, so no element is written twice.
                    let cblock = |r: usize| unsafe {
                        std::slice::from_raw_parts_mut(cp.get().add((i0 + r) * ldc + j0), nc)
                    };
                    let arows = &a[i0 * lda..];
                    #[cfg(target_arch = "x86_64")]
                    if avx2::applies::<T>() {
                        let (ap, pp) = (arows.as_ptr() as *const f32, panel.as_ptr() as *const f32);
                        // SAFETY: T is f32; the kernel reads `mr` rows of `k` from `arows` and
                        // `k × NR` from the panel, in bounds by the asserts, and writes C's
                        // block, which is this thread's alone (as above).
                        // The first block of rows meets the panel in memory (a recurrent weight
                        // is megabytes: C2's LSTM 16 MB, past L2 and much of L3) and prefetches
                        // it, which the hardware does not across the panel's pages; the later
                        // blocks find it in L2 (docs/benchmarks.md, "The first row block
                        // prefetches the panel").
                        unsafe { avx2::run(mr, k, ap, lda, false, pp, cp.get().add(i0 * ldc + j0) as *mut f32, ldc, nc, acc, i0 == 0) };
                        i0 += mr;
                        continue;
                    }
                    match mr {
                        6 => micro::<T, 6>(k, arows, lda, panel, cblock, acc),
                        5 => micro::<T, 5>(k, arows, lda, panel, cblock, acc),
                        4 => micro::<T, 4>(k, arows, lda, panel, cblock, acc),
                        3 => micro::<T, 3>(k, arows, lda, panel, cblock, acc),
                        2 => micro::<T, 2>(k, arows, lda, panel, cblock, acc),
                        _ => micro::<T, 1>(k, arows, lda, panel, cblock, acc),
                    }
                    i0 += mr;
                }
            }
        };
        split_panels(parallel, m * n * k, np, &run)
    }
}

/// `run(p0, p1)` over the `np` panels: on the calling thread, or (`parallel` and a product of
/// `flops` worth it) one range of panels per thread.
fn split_panels(parallel: bool, flops: usize, np: usize, run: &(impl Fn(usize, usize) + Sync)) {
    let threads = rayon::current_num_threads();
    if !parallel || threads <= 1 || flops < PAR_MIN_FLOPS || np < 2 {
        return run(0, np);
    }
    let per = np.div_ceil(threads);
    for_each_block(0, np.div_ceil(per), &|t| run(t * per, ((t + 1) * per).min(np)));
}

/// `R × NR` block of `C`: `R` rows of `A` (from `a`, stride `lda`) times one packed panel.
/// Plain loops over fixed-size arrays; with AVX2+FMA enabled the compiler keeps the `R × NR`
/// accumulators in registers and turns the inner loop into broadcasts and FMAs.
#[inline(always)]
fn micro<'c, T: Float + 'c, const R: usize>(
    k: usize,
    a: &[T],
    lda: usize,
    panel: &[T],
    mut cblock: impl FnMut(usize) -> &'c mut [T],
    acc: bool,
) {
    let mut sum = [[T::zero(); NR]; R];
    let rows: [&[T]; R] = std::array::from_fn(|r| &a[r * lda..r * lda + k]);
    for (kk, b) in panel.chunks_exact(NR).enumerate().take(k) {
        let b: &[T; NR] = b.try_into().unwrap();
        for r in 0..R {
            let av = rows[r][kk];
            for j in 0..NR {
                sum[r][j] = av.mul_add(b[j], sum[r][j]);
            }
        }
    }
    for (r, srow) in sum.iter().enumerate() {
        let crow = cblock(r);
        if acc {
            crow.iter_mut().zip(srow).for_each(|(c, &v)| *c += v);
        } else {
            crow.iter_mut().zip(srow).for_each(|(c, &v)| *c = v);
        }
    }
}
