//! Dense kernels shared by every cell: one GEMM entry point and a few row/column reductions.
//!
//! Everything is row-major. The GEMM for f32 on AVX2 CPUs is our own blocked kernel (`blocked`,
//! the same 6×16 FMA kernel as the recurrent steps' [`PackedB`]); for f64 and other CPUs it is
//! the `gemm` crate's single-threaded kernel. Either way we split the larger output dimension
//! over the rayon pool ourselves, because at batch-sized `m` the crate's own threading is slower
//! than one thread (see `shared/notes/cpu-performance.md`). Splitting the output never splits a
//! dot product, so a result does not depend on the thread count.

use rayon::prelude::*;
use crate::kernels::num::Float;
use std::ops::Range;

/// Counting of the GEMM work done, for the benchmark's achieved-GFLOP/s figure.
///
/// Off by default: then the only cost is one relaxed atomic load per GEMM call. When on, every
/// call records its shape so that the benchmark can time the same shapes alone, the way the
/// step ran them.
pub mod profile {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    /// One GEMM shape `C[m,n] = A[m,k] · B[k,n]` as a step called it. `per_thread` marks a
    /// product run on one thread while every other thread runs its own (the time loops' step
    /// products, `PackedB::gemm_serial` on each thread's batch rows); the others were split over
    /// the pool by the GEMM itself.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub struct Call {
        pub m: usize,
        pub n: usize,
        pub k: usize,
        pub per_thread: bool,
    }

    static ON: AtomicBool = AtomicBool::new(false);
    static CALLS: Mutex<BTreeMap<Call, u64>> = Mutex::new(BTreeMap::new());

    /// Start recording (and clear what was recorded before).
    pub fn start() {
        CALLS.lock().unwrap().clear();
        ON.store(true, Ordering::Relaxed);
    }

    /// Stop recording and return every shape called with its number of calls.
    pub fn stop() -> Vec<(Call, u64)> {
        ON.store(false, Ordering::Relaxed);
        std::mem::take(&mut *CALLS.lock().unwrap()).into_iter().collect()
    }

    #[inline]
    pub(super) fn record(m: usize, n: usize, k: usize, per_thread: bool) {
        if ON.load(Ordering::Relaxed) {
            *CALLS.lock().unwrap().entry(Call { m, n, k, per_thread }).or_insert(0) += 1;
        }
    }

    /// Floating-point operations (a multiply-add counts two) of the recorded calls.
    pub fn flops(calls: &[(Call, u64)]) -> f64 {
        calls.iter().map(|&(c, count)| 2.0 * c.m as f64 * c.n as f64 * c.k as f64 * count as f64).sum()
    }
}

/// Which f32 kernels this CPU runs, for the benchmark's header.
pub fn kernels() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if avx512::applies::<f32>() {
            return "AVX-512F for the per-step products and long weight gradients, AVX2/FMA for the other whole-sequence ones";
        }
        if avx2::applies::<f32>() {
            return "AVX2/FMA";
        }
    }
    "the gemm crate's"
}

/// Below this many multiply-adds a GEMM runs on the calling thread.
const PAR_MIN_FLOPS: usize = 1 << 17;

#[derive(Clone, Copy)]
struct Ptr<T>(*const T);
unsafe impl<T> Send for Ptr<T> {}
unsafe impl<T> Sync for Ptr<T> {}
#[derive(Clone, Copy)]
struct PtrMut<T>(*mut T);
unsafe impl<T> Send for PtrMut<T> {}
unsafe impl<T> Sync for PtrMut<T> {}
impl<T> Ptr<T> {
    // A method (not field access) so closures capture the Send wrapper, not the raw pointer.
    fn get(self) -> *const T {
        self.0
    }
}
impl<T> PtrMut<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// `C[m,n] (+)= op(A)[m,k] · op(B)[k,n]`.
///
/// `A` is stored `m×k` with row stride `lda`, or `k×m` when `ta` (so `op(A) = Aᵀ`); the same for
/// `B` with `tb`. With `acc` the product is added to `C`, otherwise `C` is overwritten.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    lda: usize,
    ta: bool,
    b: &[T],
    ldb: usize,
    tb: bool,
    c: &mut [T],
    ldc: usize,
    acc: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    profile::record(m, n, k, false);
    if k == 0 {
        if !acc {
            for i in 0..m {
                c[i * ldc..i * ldc + n].fill(T::zero());
            }
        }
        return;
    }
    let (ar, ac) = if ta { (k, m) } else { (m, k) };
    let (br, bc) = if tb { (n, k) } else { (k, n) };
    assert!(lda >= ac && a.len() >= (ar - 1) * lda + ac, "gemm: A too short");
    assert!(ldb >= bc && b.len() >= (br - 1) * ldb + bc, "gemm: B too short");
    assert!(ldc >= n && c.len() >= (m - 1) * ldc + n, "gemm: C too short");
    // Strides as (row, column) of op(A), op(B).
    let (a_rs, a_cs) = if ta { (1, lda) } else { (lda, 1) };
    let (b_rs, b_cs) = if tb { (1, ldb) } else { (ldb, 1) };
    let (ap, bp, cp) = (Ptr(a.as_ptr()), Ptr(b.as_ptr()), PtrMut(c.as_mut_ptr()));

    // Our kernel computes 16 columns at a time: thinner products (C3's 2-input weight
    // gradient) stay with the crate. So do products whose A our kernel would read in place
    // (`op(A) = A`) at 32 < n ≤ 256 and depth k ≥ 16, where the crate's kernel is as fast or
    // faster (the packed_gemm example, two runs each, ours against the crate: 6400 × n × 2048
    // at n = 48, 128, 160, 192 0.75–0.89; 1120 × 256 × 1024 0.93; a decoder 6400 × n × 512
    // (Bᵀ) at n = 64 and 100 0.84–0.90; C2's input gradients 1120 × 256 × 3072 and 4096,
    // C1's per-symbol 27 × 128 × 2048 and the ISAN's 6400 × 216 × 27 0.96–1.01; at n = 27 and
    // 32 ours 0.96–1.22, and at k = 1 ten times the crate's speed). An embedding's input
    // gradient under dropout is such a product: C1 LSTM training with dropout 0.25 on the
    // embedding 1.008× (median of 8 alternated rounds, 6 faster), GRU 1.005× (5 of 6).
    // Decided for the whole product, so that every element is computed alike on any number of
    // threads.
    #[cfg(target_arch = "x86_64")]
    let own = n >= NR && (ta || n <= 2 * NR || n > IN_PLACE_MAX_N || k < NR) && avx2::applies::<T>();
    let run = |i0: usize, i1: usize, j0: usize, j1: usize| {
        #[cfg(target_arch = "x86_64")]
        if own {
            // SAFETY: T is f32 (`applies`); the asserts above bound every element of the full
            // product, and callers give disjoint (i, j) blocks of C to different threads.
            unsafe {
                blocked::gemm(
                    (i1 - i0, j1 - j0, k),
                    (ap.get().add(i0 * a_rs) as *const f32, a_rs, a_cs),
                    (bp.get().add(j0 * b_cs) as *const f32, b_rs, b_cs),
                    cp.get().add(i0 * ldc + j0) as *mut f32,
                    ldc,
                    acc,
                )
            };
            return;
        }
        // SAFETY: as above.
        unsafe {
            gemm::gemm(
                i1 - i0,
                j1 - j0,
                k,
                cp.get().add(i0 * ldc + j0),
                1,
                ldc as isize,
                acc,
                ap.get().add(i0 * a_rs),
                a_cs as isize,
                a_rs as isize,
                bp.get().add(j0 * b_cs),
                b_cs as isize,
                b_rs as isize,
                T::one(),
                T::one(),
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    };

    let threads = rayon::current_num_threads();
    if threads <= 1 || m * n * k < PAR_MIN_FLOPS {
        run(0, m, 0, n);
        return;
    }
    // Split the larger output dimension into one block per thread (n in multiples of 16 so the
    // kernel's vector width is kept whole).
    let split_n = n >= m;
    let (len, align) = if split_n { (n, 16) } else { (m, 4) };
    let per = len.div_ceil(threads).div_ceil(align) * align;
    for_each_block(0, len.div_ceil(per), &|t| {
        let (s0, s1) = (t * per, ((t + 1) * per).min(len));
        if split_n {
            run(0, m, s0, s1)
        } else {
            run(s0, s1, 0, n)
        }
    });
}

/// `f(i)` for every block `lo ≤ i < hi`, spread over the rayon pool by recursive halving.
/// `rayon::join` keeps its jobs on the stack, so a parallel GEMM allocates nothing (the time
/// loops of the cells call it every step).
pub(crate) fn for_each_block(lo: usize, hi: usize, f: &(impl Fn(usize) + Sync)) {
    if hi - lo <= 1 {
        if lo < hi {
            f(lo);
        }
        return;
    }
    let mid = lo + (hi - lo) / 2;
    rayon::join(|| for_each_block(lo, mid, f), || for_each_block(mid, hi, f));
}

/// `y[m,n] (+)= x[m,k] · Wᵀ` for a weight stored `[n, k]` as PyTorch's `Linear` (`[out, in]`).
pub fn linear<T: Float>(m: usize, n: usize, k: usize, x: &[T], w: &[T], y: &mut [T], acc: bool) {
    gemm(m, n, k, x, k, false, w, k, true, y, n, acc);
}

/// `dx[m,k] (+)= dy[m,n] · W` : the input gradient of [`linear`].
pub fn linear_dx<T: Float>(m: usize, n: usize, k: usize, dy: &[T], w: &[T], dx: &mut [T], acc: bool) {
    gemm(m, k, n, dy, n, false, w, k, false, dx, k, acc);
}

/// `dW[n,k] += dyᵀ · x` over all `m` rows: the weight gradient of [`linear`], one GEMM for a
/// whole sequence.
pub fn linear_dw<T: Float>(m: usize, n: usize, k: usize, dy: &[T], x: &[T], dw: &mut [T]) {
    gemm(n, k, m, dy, n, true, x, k, false, dw, k, true);
}

/// `db[n] += Σ_rows dy[m,n]`. Each thread sums its own columns over the rows in order, so the
/// result does not depend on the thread count.
pub fn add_col_sums<T: Float>(m: usize, n: usize, dy: &[T], db: &mut [T]) {
    assert!(dy.len() >= m * n && db.len() >= n, "add_col_sums: sizes");
    let out = PtrMut(db.as_mut_ptr());
    for_column_blocks(m, n, |j0, j1| {
        // SAFETY: blocks own disjoint columns j0..j1 < n of db.
        let db = unsafe { std::slice::from_raw_parts_mut(out.get().add(j0), j1 - j0) };
        for row in dy[..m * n].chunks_exact(n) {
            db.iter_mut().zip(&row[j0..j1]).for_each(|(d, &g)| *d += g);
        }
    });
}

/// Inputs at most this wide take [`linear_dw_db`]'s single pass; wider ones a GEMM.
pub const THIN: usize = 8;

/// [`linear_dw`] and the bias gradients that go with it: `dW[n,k] += dyᵀ · x` and, for every
/// `db` in `dbs`, `db[n] += Σ_rows dy`.
///
/// For inputs of a few features (`k ≤ THIN`: C3's two per step) this is one pass over `dy`
/// (400 MB on C3's LSTM), split by columns between the threads, instead of a thin GEMM and a
/// pass per bias; each element sums the rows in order in blocks of 256, each block's sum then
/// added to the gradient, whatever the split. Wider inputs take the GEMM and
/// [`add_col_sums`].
pub fn linear_dw_db<T: Float>(m: usize, n: usize, k: usize, dy: &[T], x: &[T], dw: &mut [T], dbs: &mut [&mut [T]]) {
    if k > THIN {
        linear_dw(m, n, k, dy, x, dw);
        for db in dbs.iter_mut() {
            add_col_sums(m, n, dy, db);
        }
        return;
    }
    if m == 0 || n == 0 {
        return;
    }
    assert!(dy.len() >= m * n && x.len() >= m * k && dw.len() >= n * k, "linear_dw_db: sizes");
    assert!(dbs.len() <= 2 && dbs.iter().all(|db| db.len() >= n), "linear_dw_db: at most two biases of n");
    let out = PtrMut(dw.as_mut_ptr());
    let mut biases = [PtrMut(std::ptr::null_mut::<T>()); 2];
    for (b, db) in biases.iter_mut().zip(dbs.iter_mut()) {
        *b = PtrMut(db.as_mut_ptr());
    }
    let nb = dbs.len();
    for_column_blocks(m, n, |j0, j1| {
        // SAFETY: blocks own disjoint columns j0..j1 < n, i.e. rows of dw and elements of
        // every bias.
        let (dw, mut db) = unsafe {
            let part = |p: PtrMut<T>| std::slice::from_raw_parts_mut(p.get().add(j0), j1 - j0);
            (std::slice::from_raw_parts_mut(out.get().add(j0 * k), (j1 - j0) * k), biases.map(part))
        };
        let (db, cols) = (&mut db[..nb], j0..j1);
        match k {
            1 => thin_block::<T, 1>(n, cols, &dy[..m * n], x, dw, db),
            2 => thin_block::<T, 2>(n, cols, &dy[..m * n], x, dw, db),
            3 => thin_block::<T, 3>(n, cols, &dy[..m * n], x, dw, db),
            4 => thin_block::<T, 4>(n, cols, &dy[..m * n], x, dw, db),
            5 => thin_block::<T, 5>(n, cols, &dy[..m * n], x, dw, db),
            6 => thin_block::<T, 6>(n, cols, &dy[..m * n], x, dw, db),
            7 => thin_block::<T, 7>(n, cols, &dy[..m * n], x, dw, db),
            _ => thin_block::<T, 8>(n, cols, &dy[..m * n], x, dw, db),
        }
    });
}

/// [`linear_dw_db`] for the columns `cols` of `dy` (rows of stride `n`) and an input of `K`
/// features: `dw` is those columns' rows of dW, `db` those columns of each bias. The rows go
/// by in blocks of `ROWS`, the columns in groups of `COLS` whose `K + 1` sums stay in L1.
fn thin_block<T: Float, const K: usize>(n: usize, cols: Range<usize>, dy: &[T], x: &[T], dw: &mut [T], db: &mut [&mut [T]]) {
    const ROWS: usize = 256;
    const COLS: usize = 256;
    let m = dy.len() / n;
    let mut acc = [[T::zero(); COLS]; K];
    let mut sum = [T::zero(); COLS];
    for r0 in (0..m).step_by(ROWS) {
        for c0 in cols.clone().step_by(COLS) {
            let w = COLS.min(cols.end - c0);
            acc.iter_mut().for_each(|a| a.fill(T::zero()));
            sum.fill(T::zero());
            for i in r0..(r0 + ROWS).min(m) {
                let g = &dy[i * n + c0..i * n + c0 + w];
                let xi: [T; K] = std::array::from_fn(|c| x[i * K + c]);
                for (j, &gv) in g.iter().enumerate() {
                    for c in 0..K {
                        acc[c][j] += gv * xi[c];
                    }
                    sum[j] += gv;
                }
            }
            let off = c0 - cols.start;
            for j in 0..w {
                for c in 0..K {
                    dw[(off + j) * K + c] += acc[c][j];
                }
                for b in db.iter_mut() {
                    b[off + j] += sum[j];
                }
            }
        }
    }
}

/// `f(j0, j1)` on one range of the `n` columns of an `m × n` pass per thread (whole blocks
/// of 16 columns; one range when the pass is small).
pub(crate) fn for_column_blocks(m: usize, n: usize, f: impl Fn(usize, usize) + Sync) {
    let threads = rayon::current_num_threads();
    if threads <= 1 || m * n < PAR_MIN_FLOPS || n < 2 * NR {
        return f(0, n);
    }
    let per = n.div_ceil(threads).div_ceil(NR) * NR;
    for_each_block(0, n.div_ceil(per), &|t| f(t * per, ((t + 1) * per).min(n)));
}

/// `row[j] += b[j]` for each bias `b` in `biases`, in that order.
pub fn add_bias_row<T: Float>(row: &mut [T], biases: &[&[T]]) {
    let n = row.len();
    for b in biases {
        row.iter_mut().zip(&b[..n]).for_each(|(v, &bb)| *v += bb);
    }
}

/// [`add_bias_row`] on rows `i < m` of `y` (`n` wide at stride `ldy`): one pass over the rows
/// however many biases (C3's input projections are 400 MB), the rows shared between the
/// threads when there are many (C2's decoder: 1120 rows of 10,000 logits, 4.5 ms on one thread).
pub fn add_bias_rows<T: Float>(m: usize, n: usize, biases: &[&[T]], y: &mut [T], ldy: usize) {
    if m == 0 || n == 0 || biases.is_empty() {
        return;
    }
    assert!(ldy >= n && y.len() >= (m - 1) * ldy + n, "add_bias_rows: y too short");
    let add = |rows: &mut [T]| rows.chunks_mut(ldy).for_each(|row| add_bias_row(&mut row[..n], biases));
    let y = &mut y[..(m - 1) * ldy + n];
    if m * n < PAR_MIN_FLOPS {
        return add(y);
    }
    let rows = (PAR_MIN_FLOPS / n).max(1);
    y.par_chunks_mut(rows * ldy).for_each(add);
}

/// Output columns per packed panel: two AVX2 vectors of f32.
const NR: usize = 16;
/// Rows of `C` one kernel call computes (6 × 16 accumulators fit the 16 vector registers).
const MR: usize = 6;
/// Up to this many columns of `C` (16 panels) the blocked GEMM reads rows of `A` stored
/// contiguously in place instead of packing them; [`gemm`] hands most such products to the
/// crate.
const IN_PLACE_MAX_N: usize = 16 * NR;

/// Rows of the next kernel call when `left` rows remain, for a kernel of at most `mr` rows:
/// blocks of `mr`, but the last two blocks share what remains evenly, so that no call runs a
/// thin, latency-bound block (32 rows go 6, 6, 6, 6, 4, 4 rather than 6, 6, 6, 6, 6, 2: a
/// 2-row block keeps only four FMA chains in flight, too few to fill both FMA pipes).
fn row_block(left: usize, mr: usize) -> usize {
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
unsafe fn pack_panel<T: Float>(dst: &mut [T], w: usize, nc: usize, kc: usize, src: *const T, j_stride: usize, k_stride: usize) {
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
unsafe fn copy_run<T: Copy>(dst: &mut [T], src: *const T) {
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
/// repacks the weight on every call (measured: 44 % of an LSTM training step went to the
/// `gemm` crate's packing at batch 64). Here the weight is packed once into panels of `NR`
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
}

impl<T: Float> PackedB<T> {
    fn panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    fn block_len(&self) -> usize {
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
        let len = self.block_len();
        self.data.resize(len * count, T::zero());
        if n == 0 || k == 0 || count == 0 {
            return;
        }
        // (column, depth) strides of op(B).
        let (js, ks) = if tb { (ldb, 1) } else { (1, ldb) };
        assert!(b.len() > (count - 1) * stride + (n - 1) * js + (k - 1) * ks, "PackedB: B too short");
        // Panels in parallel: a recurrent weight is packed once per window and direction, on the
        // calling thread, which is outside the pool: C2's LSTM (16 MB, transposed, twice a step)
        // kept the main thread busy ~7 ms a step while both pool threads waited (perf, samples
        // per thread). Whole steps stayed within the noise (0.97-1.06× in alternated sets).
        let np = self.panels();
        let src = Ptr(b.as_ptr());
        self.data.par_chunks_exact_mut(k * NR).with_min_len(16).enumerate().for_each(|(q, panel)| {
            let (c, p) = (q / np, q % np);
            let (j0, nc) = (p * NR, NR.min(n - p * NR));
            // SAFETY: the assert above bounds every element of every matrix.
            unsafe { pack_panel(panel, NR, nc, k, src.get().add(c * stride + j0 * js), js, ks) };
        });
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
        profile::record(m, n, k, !parallel);
        let len = self.block_len();
        let packed = &self.data[which * len..(which + 1) * len];
        let np = self.panels();
        let cp = PtrMut(c.as_mut_ptr());
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
                        // blocks find it in L2. C2's LSTM step shapes on one thread, four runs
                        // of 7 alternations: 16×4096×1024 34–49 → 48–56, 16×1024×4096 38–44 →
                        // 45–62 GFLOP/s.
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
        let threads = rayon::current_num_threads();
        if !parallel || threads <= 1 || m * n * k < PAR_MIN_FLOPS || np < 2 {
            run(0, np);
            return;
        }
        let per = np.div_ceil(threads);
        for_each_block(0, np.div_ceil(per), &|t| run(t * per, ((t + 1) * per).min(np)));
    }
}

/// The f32 kernel written with AVX2/FMA intrinsics, chosen at run time when the CPU has them.
#[cfg(target_arch = "x86_64")]
mod avx2 {
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
        // 45 MB, in memory, not cache) overlap the FMAs instead of stalling the stores after them.
        // Timed alone, 9 alternated rounds on two threads: C2's decoder product 1.10× in a busy
        // minute of the machine, 1.00× in a quiet one; the other C2 products 0.99–1.02×.
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
}

/// The f32 kernel written with AVX-512 intrinsics for the per-step products of [`PackedB`]
/// (and the long weight gradients of `blocked`), chosen at run time when the CPU has AVX-512F.
///
/// A 16-column panel is one 512-bit vector, so 32 registers hold up to 16 rows of
/// accumulators against AVX2's 6: each panel is read once for 16 rows of the batch instead of
/// three times (6, 5, 5), from memory once and then from L2. Rows of `A` whose stride crowds
/// L1's sets are packed first (depth-major, up to 16 side by side): read in place, 16 rows a
/// power-of-two stride apart (C2's `[h_t]` rows are 4 KiB apart) fall in one L1 set and evict
/// each other; other rows are read in place. Timed on a
/// Zen 4 (whose 512-bit FMAs run at the same FLOP rate as 256-bit ones), two threads of 16
/// rows each: C2's LSTM step products 4096 × 1024 158–174 → 196–216 GFLOP/s and 1024 × 4096
/// 148–170 → 181–189 against the AVX2 kernel.
///
/// Each element of `C` is the same chain of FMAs over `k` in order as in the AVX2 kernel, so
/// the results are identical to it, bit for bit.
#[cfg(target_arch = "x86_64")]
mod avx512 {
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
            let packed = collide(lda, m.min(MR));
            if packed {
                if rows.len() < m * k {
                    rows.resize(m * k, 0.0);
                }
                let mut i0 = 0;
                while i0 < m {
                    let mr = row_block(m - i0, MR);
                    // SAFETY: rows i0.. i0 + mr of A, k each, are readable.
                    unsafe { pack_panel(&mut rows[i0 * k..(i0 + mr) * k], mr, mr, k, a.add(i0 * lda), lda, 1) };
                    i0 += mr;
                }
            }
            for p in 0..np {
                let (j0, nc) = (p * NR, NR.min(n - p * NR));
                // SAFETY: panel p < np.
                let panel = unsafe { panels.add(p * k * NR) };
                let mut i0 = 0;
                while i0 < m {
                    let mr = row_block(m - i0, MR);
                    // SAFETY: the sliver (or rows in place) and panel hold `mr × k` and
                    // `k × 16`; C's block lies in this thread's rows and columns. The first
                    // block of rows meets the panel in memory (a recurrent weight is
                    // megabytes) and prefetches it.
                    unsafe {
                        let ap = if packed { rows.as_ptr().add(i0 * k) } else { a.add(i0 * lda) };
                        run(mr, k, (ap, lda, packed), panel, c.add(i0 * ldc + j0), ldc, nc, acc, i0 == 0)
                    };
                    i0 += mr;
                }
            }
        });
    }

    /// Whether `rows` rows of f32 at stride `lda` crowd L1's sets: more than 4 of them in one
    /// of the 64 sets of 64-byte lines (a 32 KiB, 8-way L1), where they evict each other and
    /// the panel's lines. Rows that do are packed first; others are read in place (packing
    /// C3's 50 × 1000 gradient rows each step cost more than it saved: 1000 × 250 products
    /// 197 packed against 210–224 GFLOP/s in place).
    fn collide(lda: usize, rows: usize) -> bool {
        let mut count = [0u8; 64];
        (0..rows).any(|r| {
            let set = &mut count[(r * lda * 4 / 64) % 64];
            *set += 1;
            *set > 4
        })
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
        macro_rules! rows {
            ($($r:literal)*) => {
                match (mr, packed, prefetch) {
                    $(($r, true, true) => micro::<$r, true, true>(k, a, lda, p, c, ldc, nc, acc),
                      ($r, true, false) => micro::<$r, true, false>(k, a, lda, p, c, ldc, nc, acc),
                      ($r, false, true) => micro::<$r, false, true>(k, a, lda, p, c, ldc, nc, acc),
                      ($r, false, false) => micro::<$r, false, false>(k, a, lda, p, c, ldc, nc, acc),)*
                    _ => unreachable!("avx512::run: {mr} rows"),
                }
            };
        }
        // SAFETY: as the caller guarantees.
        unsafe { rows!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16) }
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
}

/// The whole-sequence f32 GEMM (input projections, weight and input gradients, the decoder),
/// blocked as GotoBLAS does, on the AVX2/FMA kernel (and the AVX-512 one for long weight
/// gradients where the CPU has it, in slivers of 16 rows).
///
/// For each depth block of `KC`, `op(B)` is packed into `KC × 16` panels; for each `MC` rows
/// of `op(A)`, those rows are packed into slivers of up to 6 rows (kk-major); then every panel
/// meets every sliver. A panel (16 KiB) and a sliver (6 KiB) share L1, the packed rows (up to
/// 120 KiB) stay in L2. Against the `gemm` crate (AVX2 path) on two threads, at the shapes
/// `cargo run --release --example packed_gemm` times (two runs): C1's input projection
/// 1.16–1.18×, C2's decoder weight gradient 1.10–1.19×, the rest 0.87–1.11× (C3's recurrent
/// weight gradient 0.91–0.92×); what decided it was whole training steps, timed alternately
/// against the crate: C1 LSTM 10.5k → 12.6k tokens/s, RAN 18.3k → 20.1k (medians of three).
/// f64 (the gradient checks) and CPUs without AVX2 keep the crate.
///
/// Each element of `C` is the sum over depth blocks, in order, of a dot product over the block
/// in order: the same for any split of `C` between threads.
#[cfg(target_arch = "x86_64")]
mod blocked {
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
        // them (measured once, best of two: C1's input gradient 6400×128×2048 118 against 107
        // GFLOP/s packed; the projections with n ≥ 2048 ran about 15 % faster packed, likely
        // because their rows' power-of-two strides meet in the same L1 sets). [`super::gemm`]
        // gives most such products (32 < n ≤ 256) to the crate, whose kernel is faster there.
        let direct = a_cs == 1 && n <= IN_PLACE_MAX_N;
        // Long weight gradients (`op(A) = Aᵀ` over a deep sum) run the 16-row AVX-512 kernel
        // where the CPU has it. Whole training steps, the rule on against off, alternated:
        // C3's 1000 × 253 × 100,000 LSTM weight gradient 281 → 263 ms (median of 12 steps),
        // C3 training GRU 1.010×, RAN 1.006×, RWA 1.069×, RDA 1.034×, LSTM 1.026× (4 of 4);
        // at C1's depth 6,400 the same (66.8 against 66.2 ms); slower on C2's shallow products
        // (depth 1,120: the decoder's weight gradient 107 → 110 ms, its input gradient
        // 110 → 116 with every packed product wide), and on none of them was the reason found.
        let wide = !direct && a_rs == 1 && k >= 16 * KC && avx512::applies::<f32>();
        let (mr_max, mc_max) = if wide { (avx512::MR, 8 * avx512::MR) } else { (MR, MC) };
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
                    for (jp, panel) in pb.chunks_exact(kc * NR).take(np).enumerate() {
                        let (j0, nc) = (jp * NR, NR.min(n - jp * NR));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark times a time loop's per-thread products the way the loop runs them, so the
    /// recording must tell them from the products the GEMM splits itself. (Other tests may run
    /// GEMMs while this one records; none at this shape.)
    #[test]
    fn profile_tells_per_thread_products_from_split_ones() {
        // A shape no other test uses: tests run side by side in one process.
        let (m, n, k) = (7, 19, 23);
        let (a, w) = (vec![1f32; m * k], vec![1f32; n * k]);
        let mut c = vec![0f32; m * n];
        let mut p = PackedB::default();
        p.pack_linear(&w, n, k);
        profile::start();
        p.gemm_serial(0, m, &a, k, &mut c, n, false);
        p.gemm(0, m, &a, k, &mut c, n, false);
        linear(m, n, k, &a, &w, &mut c, false);
        let calls = profile::stop();
        let shape = |per_thread| profile::Call { m, n, k, per_thread };
        let count = |per_thread| calls.iter().find(|(c, _)| *c == shape(per_thread)).map_or(0, |x| x.1);
        assert_eq!((count(true), count(false)), (1, 2), "{calls:?}");
        assert_eq!(profile::flops(&[(shape(true), 1), (shape(false), 2)]), (3 * 2 * m * n * k) as f64);
    }

    fn naive(m: usize, n: usize, k: usize, a: &[f64], ta: bool, b: &[f64], tb: bool) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..k {
                    let av = if ta { a[p * m + i] } else { a[i * k + p] };
                    let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                    s += av * bv;
                }
                c[i * n + j] = s;
            }
        }
        c
    }

    #[test]
    fn packed_gemm_matches_naive_for_every_edge_and_thread_count() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for &(m, n, k) in &[(1, 1, 1), (7, 17, 5), (13, 33, 40), (64, 100, 30), (2, 300, 500)] {
            let a: Vec<f64> = (0..m * (k + 3)).map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0).collect();
            let b: Vec<f64> = (0..2 * k * n).map(|i| ((i * 53 % 97) as f64) / 48.0 - 1.0).collect();
            for tb in [false, true] {
                let mut p = PackedB::default();
                p.pack(&b, if tb { k } else { n }, tb, n, k, 2, k * n);
                for which in 0..2 {
                    // A with a row stride wider than k, C with one wider than n.
                    let a_tight: Vec<f64> = (0..m).flat_map(|i| a[i * (k + 3)..i * (k + 3) + k].to_vec()).collect();
                    let want = naive(m, n, k, &a_tight, false, &b[which * k * n..], tb);
                    for threads in [1, 2] {
                        let mut c = vec![1.0; m * (n + 2)];
                        if threads == 1 {
                            p.gemm(which, m, &a, k + 3, &mut c, n + 2, true)
                        } else {
                            pool.install(|| p.gemm(which, m, &a, k + 3, &mut c, n + 2, true))
                        }
                        for i in 0..m {
                            for j in 0..n {
                                let (got, w) = (c[i * (n + 2) + j], want[i * n + j] + 1.0);
                                assert!((got - w).abs() < 1e-9, "{m}x{n}x{k} tb {tb} #{which} ({i},{j}): {got} vs {w}");
                            }
                            assert_eq!(&c[i * (n + 2) + n..i * (n + 2) + n + 2], &[1.0, 1.0], "wrote past a row");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bias_rows_are_added_to_every_row_once_on_any_thread_count() {
        // Large enough to be shared between threads, with a row count no chunk divides evenly;
        // two biases, rows contiguous and at a stride past their width (whose gaps stay).
        let (m, n) = (2 * PAR_MIN_FLOPS / 1000 + 7, 1000);
        let b: Vec<f32> = (0..n).map(|j| j as f32).collect();
        let b2: Vec<f32> = vec![0.5; n];
        for ldy in [n, n + 5] {
            for threads in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let mut y: Vec<f32> = (0..m * ldy + 3).map(|i| (i / ldy) as f32 * 1e4).collect();
                pool.install(|| add_bias_rows(m, n, &[&b, &b2], &mut y, ldy));
                for (i, &v) in y.iter().enumerate() {
                    let (r, j) = (i / ldy, i % ldy);
                    let want = r as f32 * 1e4 + if r < m && j < n { j as f32 + 0.5 } else { 0.0 };
                    assert_eq!(v, want, "element {i} (stride {ldy}) on {threads} threads");
                }
            }
        }
    }

    #[test]
    fn weight_and_bias_gradients_match_naive_in_one_pass_and_any_split() {
        // Thin inputs (k ≤ THIN) take the single pass, wider ones the GEMM; rows past a block
        // of 256, columns past a group of 256 and a thread's range; both biases receive the
        // same sums on top of what they held; nothing happens without rows.
        let pools: Vec<_> = [1, 2, 3].map(|t| rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap()).into();
        for &(m, n, k) in &[(0, 5, 2), (1, 1, 1), (300, 70, 2), (600, 250, 8), (40, 50, 9), (1100, 129, 1), (300, 700, 3)] {
            let dy: Vec<f64> = (0..m * n).map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0).collect();
            let x: Vec<f64> = (0..m * k).map(|i| ((i * 53 % 97) as f64) / 48.0 - 1.0).collect();
            let want_dw = naive(n, k, m, &dy, true, &x, false);
            let want_db: Vec<f64> = (0..n).map(|j| (0..m).map(|i| dy[i * n + j]).sum()).collect();
            let mut bits = None;
            for pool in &pools {
                let (mut dw, mut b0, mut b1) = (vec![0.5; n * k], vec![1.0; n], vec![-2.0; n]);
                pool.install(|| linear_dw_db(m, n, k, &dy, &x, &mut dw, &mut [&mut b0[..], &mut b1[..]]));
                for (i, (&g, &w)) in dw.iter().zip(&want_dw).enumerate() {
                    assert!((g - 0.5 - w).abs() < 1e-9, "{m}x{n}x{k} dw[{i}]: {g} vs {}", w + 0.5);
                }
                for j in 0..n {
                    assert!((b0[j] - 1.0 - want_db[j]).abs() < 1e-9 && (b1[j] + 2.0 - want_db[j]).abs() < 1e-9, "{m}x{n}x{k} db[{j}]");
                }
                // f32: the same bits on every thread count.
                let (dy32, x32): (Vec<f32>, Vec<f32>) = (dy.iter().map(|&v| v as f32).collect(), x.iter().map(|&v| v as f32).collect());
                let (mut dw32, mut db32) = (vec![0f32; n * k], vec![0f32; n]);
                pool.install(|| linear_dw_db(m, n, k, &dy32, &x32, &mut dw32, &mut [&mut db32[..]]));
                let got = (dw32, db32);
                match &bits {
                    None => bits = Some(got),
                    Some(b) => assert!(*b == got, "{m}x{n}x{k}: f32 bits differ with {} threads", pool.current_num_threads()),
                }
            }
        }
    }

    #[test]
    fn packed_gemm_f32_kernel_matches_f64() {
        // The f32 path takes the AVX2/FMA kernel (AVX-512 where the CPU has it): row-block
        // heights 1–6 and 11–16 and a ragged last panel, against the f64 product, A's rows at a stride wider
        // than k.
        for &(m, n, k) in &[(1, 16, 3), (11, 37, 50), (64, 200, 129), (13, 300, 70)] {
            let lda = k + 3;
            let a: Vec<f64> = (0..m * lda).map(|i| if i % lda < k { ((i * 37 % 101) as f64) / 50.0 - 1.0 } else { f64::NAN }).collect();
            let b: Vec<f64> = (0..k * n).map(|i| ((i * 53 % 97) as f64) / 48.0 - 1.0).collect();
            let a_tight: Vec<f64> = (0..m).flat_map(|i| a[i * lda..i * lda + k].to_vec()).collect();
            let want = naive(m, n, k, &a_tight, false, &b, true);
            let (a32, b32): (Vec<f32>, Vec<f32>) = (a.iter().map(|&v| v as f32).collect(), b.iter().map(|&v| v as f32).collect());
            let mut p = PackedB::default();
            p.pack_linear(&b32, n, k);
            // Both entry points: split over the pool's panels, and on the calling thread alone
            // (what the cells' time loops call).
            for serial in [false, true] {
                let mut c = vec![0.5f32; m * n];
                if serial {
                    p.gemm_serial(0, m, &a32, lda, &mut c, n, true);
                } else {
                    p.gemm(0, m, &a32, lda, &mut c, n, true);
                }
                for (i, (&got, &w)) in c.iter().zip(&want).enumerate() {
                    assert!((got as f64 - 0.5 - w).abs() < 1e-4 * (1.0 + w.abs()), "{m}x{n}x{k} serial {serial} [{i}]: {got} vs {w}");
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn packed_gemm_kernels_give_the_same_bits() {
        // Every row-block height of the 16-row AVX-512 kernel (1–16, and 17–34 rows in
        // blocks), with rows read in place (stride k + 3) and packed first (stride 1024 puts
        // every row in one L1 set), a ragged last panel, overwrite and accumulate: the same
        // bits as the AVX2 kernel, and both the f64 product within rounding. Without AVX-512
        // both runs take the AVX2 kernel.
        let (n, k) = (37, 50);
        let b: Vec<f64> = (0..k * n).map(|i| ((i * 53 % 97) as f64) / 48.0 - 1.0).collect();
        let b32: Vec<f32> = b.iter().map(|&v| v as f32).collect();
        let mut p = PackedB::default();
        p.pack_linear(&b32, n, k);
        for m in 1..=34 {
            for lda in [k + 3, 1024] {
                let a: Vec<f64> = (0..m * lda).map(|i| if i % lda < k { ((i * 37 % 101) as f64) / 50.0 - 1.0 } else { f64::NAN }).collect();
                let a_tight: Vec<f64> = (0..m).flat_map(|i| a[i * lda..i * lda + k].to_vec()).collect();
                let want = naive(m, n, k, &a_tight, false, &b, true);
                let a32: Vec<f32> = a.iter().map(|&v| v as f32).collect();
                for acc in [false, true] {
                    let run = |off: bool| {
                        avx512::OFF.set(off);
                        let mut c = vec![0.5f32; m * n];
                        p.gemm_serial(0, m, &a32, lda, &mut c, n, acc);
                        avx512::OFF.set(false);
                        c
                    };
                    let (wide, narrow) = (run(false), run(true));
                    assert!(wide == narrow, "{m} rows, stride {lda}, acc {acc}: the kernels' bits differ");
                    let base = if acc { 0.5 } else { 0.0 };
                    for (i, (&got, &w)) in wide.iter().zip(&want).enumerate() {
                        assert!((got as f64 - base - w).abs() < 1e-4 * (1.0 + w.abs()), "{m}x{n}x{k} stride {lda} [{i}]: {got} vs {w}");
                    }
                }
            }
        }
    }

    #[test]
    fn f32_gemm_matches_f64_across_blocks_and_threads() {
        // The f32 path runs the blocked kernel where the CPU has AVX2: shapes that cross the
        // depth block (256), the row block (120; 128 for the AVX-512 kernel, which takes the
        // transposed A of depth 4096 and more) and leave ragged slivers and panels; every
        // transposition; overwrite and accumulate; bit-identical on one and two threads.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for &(m, n, k) in &[(1, 1, 1), (7, 17, 300), (130, 33, 520), (250, 40, 64), (64, 300, 129), (150, 37, 4100)] {
            let a: Vec<f64> = (0..m * k).map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0).collect();
            let b: Vec<f64> = (0..k * n).map(|i| ((i * 53 % 97) as f64) / 48.0 - 1.0).collect();
            let (a32, b32): (Vec<f32>, Vec<f32>) = (a.iter().map(|&v| v as f32).collect(), b.iter().map(|&v| v as f32).collect());
            for ta in [false, true] {
                for tb in [false, true] {
                    let want = naive(m, n, k, &a, ta, &b, tb);
                    let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
                    for acc in [false, true] {
                        let mut one = vec![0.5f32; m * n];
                        gemm(m, n, k, &a32, lda, ta, &b32, ldb, tb, &mut one, n, acc);
                        let mut two = vec![0.5f32; m * n];
                        pool.install(|| gemm(m, n, k, &a32, lda, ta, &b32, ldb, tb, &mut two, n, acc));
                        assert_eq!(one, two, "{m}x{n}x{k} ta={ta} tb={tb}: thread count changed the bits");
                        let base = if acc { 0.5 } else { 0.0 };
                        for (i, (&got, &w)) in one.iter().zip(&want).enumerate() {
                            let tol = 1e-4 * (1.0 + w.abs()) * (k as f64).sqrt();
                            assert!((got as f64 - base - w).abs() < tol, "{m}x{n}x{k} ta={ta} tb={tb} acc={acc} [{i}]: {got} vs {w}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn gemm_matches_naive_in_all_transpositions_and_splits() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for &(m, n, k) in &[(3, 5, 7), (70, 90, 40), (130, 20, 64), (1, 300, 500)] {
            let a: Vec<f64> = (0..m * k).map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0).collect();
            let b: Vec<f64> = (0..k * n).map(|i| ((i * 53 % 97) as f64) / 48.0 - 1.0).collect();
            for ta in [false, true] {
                for tb in [false, true] {
                    let want = naive(m, n, k, &a, ta, &b, tb);
                    let lda = if ta { m } else { k };
                    let ldb = if tb { k } else { n };
                    let mut c = vec![1.0; m * n];
                    pool.install(|| gemm(m, n, k, &a, lda, ta, &b, ldb, tb, &mut c, n, true));
                    for (x, y) in c.iter().zip(&want) {
                        assert!((x - 1.0 - y).abs() < 1e-9, "{m}x{n}x{k} ta={ta} tb={tb}");
                    }
                    gemm(m, n, k, &a, lda, ta, &b, ldb, tb, &mut c, n, false);
                    for (x, y) in c.iter().zip(&want) {
                        assert!((x - y).abs() < 1e-9);
                    }
                }
            }
        }
    }
}
