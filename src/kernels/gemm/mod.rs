//! Dense kernels shared by every cell: one GEMM entry point and a few row/column reductions.
//!
//! - here: [`gemm`] (the entry point: which kernel, how the output is split over threads) and
//!   the reductions around it (`linear*`, bias rows, column sums);
//! - [`packed`]: packing panels, and [`PackedB`], the per-step product's weight packed once;
//! - `avx2`, `avx512`: the f32 micro-kernels, chosen at run time by what the CPU has (and,
//!   for AVX-512, one 16-column panel a call or two: two on Intel);
//! - `blocked`: the whole-sequence f32 GEMM on those kernels;
//! - [`bf16`]: both GEMMs in mixed precision on AVX512-BF16, where `kernels::precision` says
//!   bf16;
//! - [`profile`]: the shapes a step ran, for the benchmark.
//!
//! Everything is row-major. The GEMM for f32 on AVX2 CPUs is our own blocked kernel (`blocked`,
//! the same 6×16 FMA kernel as the recurrent steps' [`PackedB`]); for f64 and other CPUs it is
//! the `gemm` crate's single-threaded kernel. Either way we split the larger output dimension
//! over the rayon pool ourselves, because at batch-sized `m` the crate's own threading is slower
//! than one thread (docs/benchmarks.md, "Threads split the output"). Splitting the output never splits a
//! dot product, so a result does not depend on the thread count.

use rayon::prelude::*;
use crate::kernels::num::Float;
use crate::kernels::precision;
use std::ops::Range;

pub mod profile;

/// Which f32 kernels this CPU runs, for the benchmark's header.
pub fn kernels() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if avx512::applies::<f32>() && avx512::pairs() {
            return "AVX-512F, two panels a call, for the per-step products and the packed whole-sequence ones, AVX2/FMA for the thin ones";
        }
        if avx512::applies::<f32>() {
            return "AVX-512F for the per-step products and long weight gradients, AVX2/FMA for the other whole-sequence ones";
        }
        if avx2::applies::<f32>() {
            return "AVX2/FMA";
        }
    }
    "the gemm crate's"
}

/// Which kernels run a run's matrix products at `precision` on this CPU now: the benchmark's
/// header, and the line `train` and `task` log, so that a record says which kernel made its bits
/// (bf16 on AMX tiles and on AVX512-BF16 round alike but sum in another order).
pub fn products(precision: precision::Precision) -> &'static str {
    match precision {
        precision::Precision::F32 => kernels(),
        precision::Precision::Bf16 => precision::bf16_kernel(),
        precision::Precision::F16 => "the GPU's, operands rounded to f16, f32 accumulation",
    }
}

/// The log's line naming the kernels of a CPU run at `precision`.
pub fn products_line(precision: precision::Precision) -> String {
    format!("products: {} on {}", precision.name(), products(precision))
}

/// Panels of 16 columns the AVX-512 f32 kernel takes a call on the calling thread: 1 or 2, or
/// 0 for its choice on this CPU (two on Intel). The same bits either way;
/// `examples/packed_gemm.rs` times one against the other.
pub fn force_panels(panels: u8) {
    #[cfg(target_arch = "x86_64")]
    avx512::PANELS.set(panels);
}

/// Below this many multiply-adds a GEMM runs on the calling thread.
const PAR_MIN_FLOPS: usize = 1 << 17;

/// The least rows (or columns, a multiple of 16) of a block of a product given to the `gemm`
/// crate; a larger product is given in eighths (balanced on 2, 4 and 8 threads).
const CRATE_BLOCK: usize = 128;

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
    let _timer = profile::record(m, n, k, false);
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
    // faster; at n ≤ 32 and at k = 1 ours is (docs/benchmarks.md, "Which products stay with
    // the crate").
    // Decided for the whole product, so that every element is computed alike on any number of
    // threads.
    // Our kernels, where one applies: bf16 where the precision says so (every product, on
    // AVX512-BF16), else the blocked f32 kernel.
    #[cfg(target_arch = "x86_64")]
    type Kernel = unsafe fn((usize, usize, usize), (*const f32, usize, usize), (*const f32, usize, usize), *mut f32, usize, bool);
    #[cfg(target_arch = "x86_64")]
    let ours: Option<Kernel> = if bf16::applies_to::<T>() {
        Some(bf16::gemm)
    } else if n >= NR && (ta || n <= 2 * NR || n > IN_PLACE_MAX_N || k < NR) && avx2::applies::<T>() {
        Some(blocked::gemm)
    } else {
        None
    };
    let run = |i0: usize, i1: usize, j0: usize, j1: usize| {
        #[cfg(target_arch = "x86_64")]
        if let Some(kernel) = ours {
            // SAFETY: T is f32 (`applies_to`, `applies`); the asserts above bound every element
            // of the full product, and callers give disjoint (i, j) blocks of C to different
            // threads.
            unsafe {
                kernel(
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
    #[cfg(target_arch = "x86_64")]
    let crate_kernel = ours.is_none();
    #[cfg(not(target_arch = "x86_64"))]
    let crate_kernel = true;
    if m * n * k < PAR_MIN_FLOPS || (threads <= 1 && !crate_kernel) {
        run(0, m, 0, n);
        return;
    }
    // Split the larger output dimension into blocks (n in multiples of 16 so the kernel's
    // vector width is kept whole): one a thread for our kernels, whose every element is the
    // same chain of FMAs wherever a block starts. The crate's blocking of depth and rows
    // follows the size of the product it is given, so its blocks are set by the shape alone
    // whatever the thread count (one thread runs them all): the same bits on any number of
    // threads (docs/benchmarks.md, "The crate's blocks whatever the thread count").
    let split_n = n >= m;
    let (len, align) = if split_n { (n, 16) } else { (m, 4) };
    let per = |parts: usize| len.div_ceil(parts).div_ceil(align) * align;
    let per = if crate_kernel { per(8).max(CRATE_BLOCK) } else { per(threads) };
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
/// The caller's scopes (`kernels::precision::with`, `amx::with`) go with each job.
pub(crate) fn for_each_block(lo: usize, hi: usize, f: &(impl Fn(usize) + Sync)) {
    if hi - lo <= 1 {
        if lo < hi {
            f(lo);
        }
        return;
    }
    let mid = lo + (hi - lo) / 2;
    let s = Scope::here();
    rayon::join(|| s.run(|| for_each_block(lo, mid, f)), || s.run(|| for_each_block(mid, hi, f)));
}

/// The scopes a product is computed in, carried from the thread that starts it to the pool's.
#[derive(Clone, Copy)]
struct Scope {
    precision: precision::Precision,
    #[cfg(target_arch = "x86_64")]
    amx: bool,
}

impl Scope {
    fn here() -> Self {
        Scope {
            precision: precision::current(),
            #[cfg(target_arch = "x86_64")]
            amx: amx::enabled(),
        }
    }

    fn run<R>(self, f: impl FnOnce() -> R) -> R {
        #[cfg(target_arch = "x86_64")]
        let f = || amx::with(self.amx, f);
        precision::with(self.precision, f)
    }
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
    add_col_sums_strided(m, (n, n), dy, db)
}

/// [`add_col_sums`] of the first `n` columns of rows `ld` apart.
pub fn add_col_sums_strided<T: Float>(m: usize, (n, ld): (usize, usize), dy: &[T], db: &mut [T]) {
    assert!(n <= ld && (m == 0 || dy.len() >= (m - 1) * ld + n) && db.len() >= n, "add_col_sums: sizes");
    let out = PtrMut(db.as_mut_ptr());
    for_column_blocks(m, n, |j0, j1| {
        // SAFETY: blocks own disjoint columns j0..j1 < n of db.
        let db = unsafe { std::slice::from_raw_parts_mut(out.get().add(j0), j1 - j0) };
        for i in 0..m {
            db.iter_mut().zip(&dy[i * ld + j0..i * ld + j1]).for_each(|(d, &g)| *d += g);
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
    linear_dw_db_strided(m, (n, n), k, dy, x, dw, dbs)
}

/// [`linear_dw_db`] of the first `n` columns of `dy`'s rows, `ld` apart (the RDA's `u` block,
/// the first of its pre-activations' gradient row).
pub fn linear_dw_db_strided<T: Float>(m: usize, (n, ld): (usize, usize), k: usize, dy: &[T], x: &[T], dw: &mut [T], dbs: &mut [&mut [T]]) {
    if k > THIN {
        gemm(n, k, m, dy, ld, true, x, k, false, dw, k, true);
        for db in dbs.iter_mut() {
            add_col_sums_strided(m, (n, ld), dy, db);
        }
        return;
    }
    if m == 0 || n == 0 {
        return;
    }
    assert!(n <= ld && dy.len() >= (m - 1) * ld + n && x.len() >= m * k && dw.len() >= n * k, "linear_dw_db: sizes");
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
            1 => thin_block::<T, 1>((m, ld), cols, dy, x, dw, db),
            2 => thin_block::<T, 2>((m, ld), cols, dy, x, dw, db),
            3 => thin_block::<T, 3>((m, ld), cols, dy, x, dw, db),
            4 => thin_block::<T, 4>((m, ld), cols, dy, x, dw, db),
            5 => thin_block::<T, 5>((m, ld), cols, dy, x, dw, db),
            6 => thin_block::<T, 6>((m, ld), cols, dy, x, dw, db),
            7 => thin_block::<T, 7>((m, ld), cols, dy, x, dw, db),
            _ => thin_block::<T, 8>((m, ld), cols, dy, x, dw, db),
        }
    });
}

/// [`linear_dw_db`] for the columns `cols` of `dy` (`m` rows `ld` apart) and an input of `K`
/// features: `dw` is those columns' rows of dW, `db` those columns of each bias. The rows go
/// by in blocks of `ROWS`, the columns in groups of `COLS` whose `K + 1` sums stay in L1.
fn thin_block<T: Float, const K: usize>((m, ld): (usize, usize), cols: Range<usize>, dy: &[T], x: &[T], dw: &mut [T], db: &mut [&mut [T]]) {
    const ROWS: usize = 256;
    const COLS: usize = 256;
    let mut acc = [[T::zero(); COLS]; K];
    let mut sum = [T::zero(); COLS];
    for r0 in (0..m).step_by(ROWS) {
        for c0 in cols.clone().step_by(COLS) {
            let w = COLS.min(cols.end - c0);
            acc.iter_mut().for_each(|a| a.fill(T::zero()));
            sum.fill(T::zero());
            for i in r0..(r0 + ROWS).min(m) {
                // The rows are runs of `w` a stride `ld` apart (C3's GRU: 1 KB of every 3 KB),
                // which the hardware prefetchers lose; the pass waited on memory at a fifth of
                // its speed (docs/benchmarks.md, "The thin input's weight gradient").
                prefetch_run(dy.as_ptr().wrapping_add((i + AHEAD_ROWS) * ld + c0), w);
                let g = &dy[i * ld + c0..i * ld + c0 + w];
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

/// Rows ahead that a pass over rows a stride apart prefetches ([`prefetch_run`]).
const AHEAD_ROWS: usize = 8;

/// Ask for the cache lines of `len` elements from `p` (a row some iterations ahead): a hint,
/// harmless past the end of the data (no fault), hence a pointer from `wrapping_add`.
#[inline(always)]
fn prefetch_run<T>(p: *const T, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let step = (64 / std::mem::size_of::<T>()).max(1);
        for i in (0..len).step_by(step) {
            // SAFETY: a prefetch reads nothing and faults on no address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(i) as *const i8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
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
/// threads when there are many (C2's decoder's 1120 rows of 10,000 logits; docs/benchmarks.md,
/// "Bias rows shared between threads").
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


pub mod packed;
pub use packed::PackedB;
use packed::{copy_run, pack_panel, row_block, IN_PLACE_MAX_N, MR, NR};

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(target_arch = "x86_64")]
mod blocked;

#[cfg(target_arch = "x86_64")]
pub mod bf16;

#[cfg(target_arch = "x86_64")]
pub mod amx;


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
        let pools = [1, 2].map(|t| rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap());
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
                    for pool in &pools {
                        let mut c = vec![1.0; m * (n + 2)];
                        pool.install(|| p.gemm(which, m, &a, k + 3, &mut c, n + 2, true));
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
        // Every row-block height of the AVX-512 kernel, one panel a call (1–16 rows, 17–34 in
        // blocks) and two (1–14, 15–34 in blocks), with rows read in place (stride k + 3) and
        // packed first (stride 1024 puts every row in one L1 set), a ragged last panel (37
        // columns: a pair and a panel of 5; 29: a pair whose second panel has 13),
        // overwrite and accumulate: the same bits as the AVX2 kernel, and each the f64 product
        // within rounding. Without AVX-512 every run takes the AVX2 kernel.
        let k = 50;
        for n in [37, 29] {
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
                        // (AVX2 in place of AVX-512, panels a call)
                        let run = |(off, panels): (bool, u8)| {
                            avx512::OFF.set(off);
                            force_panels(panels);
                            let mut c = vec![0.5f32; m * n];
                            p.gemm_serial(0, m, &a32, lda, &mut c, n, acc);
                            avx512::OFF.set(false);
                            force_panels(0);
                            c
                        };
                        let narrow = run((true, 0));
                        for panels in [1, 2] {
                            let wide = run((false, panels));
                            assert!(wide == narrow, "{m}x{n} rows, stride {lda}, acc {acc}, {panels} panels: the kernels' bits differ");
                            let base = if acc { 0.5 } else { 0.0 };
                            for (i, (&got, &w)) in wide.iter().zip(&want).enumerate() {
                                assert!((got as f64 - base - w).abs() < 1e-4 * (1.0 + w.abs()), "{m}x{n}x{k} stride {lda} [{i}]: {got} vs {w}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn whole_sequence_products_give_the_same_bits_on_one_panel_and_two() {
        // The blocked GEMM on the calling thread, where the choice is set: a long weight
        // gradient (`Aᵀ·B` over a depth of 4,100: past the 16 depth blocks that take the
        // AVX-512 kernel either way, a ragged last block) and products of the untransposed
        // A that one panel a call leaves to the AVX2 kernel and two give the AVX-512 one
        // (300 columns: packed rows; `A·Wᵀ` and `A·W`), with slivers of 16, 14 and 6 rows
        // and ragged ones, a pair and a ragged panel: the same bits, within rounding of f64.
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        for (m, n, k, ta, tb) in [(131, 45, 4100, true, false), (131, 300, 300, false, true), (131, 300, 300, false, false)] {
            let a: Vec<f64> = (0..m * k).map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0).collect();
            let b: Vec<f64> = (0..k * n).map(|i| ((i * 53 % 97) as f64) / 48.0 - 1.0).collect();
            let (a32, b32): (Vec<f32>, Vec<f32>) = (a.iter().map(|&v| v as f32).collect(), b.iter().map(|&v| v as f32).collect());
            let want = naive(m, n, k, &a, ta, &b, tb);
            let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
            let run = |panels: u8| {
                one.install(|| {
                    force_panels(panels);
                    let mut c = vec![0f32; m * n];
                    gemm(m, n, k, &a32, lda, ta, &b32, ldb, tb, &mut c, n, false);
                    force_panels(0);
                    c
                })
            };
            let (c1, c2) = (run(1), run(2));
            assert!(c1 == c2, "{m}x{n}x{k} ta={ta} tb={tb}: one panel and two: the bits differ");
            for (i, (&got, &w)) in c2.iter().zip(&want).enumerate() {
                assert!((got as f64 - w).abs() < 1e-3 * (1.0 + w.abs()), "{m}x{n}x{k} ta={ta} tb={tb} [{i}]: {got} vs {w}");
            }
        }
    }

    #[test]
    fn f32_gemm_matches_f64_across_blocks_and_threads() {
        // The f32 path runs the blocked kernel where the CPU has AVX2: shapes that cross the
        // depth block (256), the row block (120; 128 for the AVX-512 kernel, which takes the
        // transposed A of depth 4096 and more) and leave ragged slivers and panels; every
        // transposition; overwrite and accumulate; bit-identical on one, two and three threads
        // (pools of their own: the global pool's size is the machine's).
        let pools: Vec<_> = (1..=3).map(|t| rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap()).collect();
        for &(m, n, k) in &[(1, 1, 1), (7, 17, 300), (130, 33, 520), (250, 40, 64), (64, 300, 129), (150, 37, 4100), (300, 100, 64), (100, 200, 40)] {
            let a: Vec<f64> = (0..m * k).map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0).collect();
            let b: Vec<f64> = (0..k * n).map(|i| ((i * 53 % 97) as f64) / 48.0 - 1.0).collect();
            let (a32, b32): (Vec<f32>, Vec<f32>) = (a.iter().map(|&v| v as f32).collect(), b.iter().map(|&v| v as f32).collect());
            for ta in [false, true] {
                for tb in [false, true] {
                    let want = naive(m, n, k, &a, ta, &b, tb);
                    let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
                    for acc in [false, true] {
                        let on = |pool: &rayon::ThreadPool| {
                            let mut c = vec![0.5f32; m * n];
                            pool.install(|| gemm(m, n, k, &a32, lda, ta, &b32, ldb, tb, &mut c, n, acc));
                            c
                        };
                        let one = on(&pools[0]);
                        for (t, pool) in pools.iter().enumerate().skip(1) {
                            assert_eq!(one, on(pool), "{m}x{n}x{k} ta={ta} tb={tb}: {} threads changed the bits", t + 1);
                        }
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

    /// `x` rounded to bf16, to nearest even, as `VCVTNEPS2BF16` does (for the normal numbers
    /// the tests use).
    fn round_bf16(x: f64) -> f64 {
        let b = (x as f32).to_bits();
        f32::from_bits((b + 0x7fff + ((b >> 16) & 1)) & 0xffff_0000) as f64
    }

    /// The bf16 tests are ignored unless asked for (they need the instructions): asked for on a
    /// CPU without them, they fail rather than pass.
    #[cfg(target_arch = "x86_64")]
    fn assert_bf16_here() {
        assert!(bf16::applies(), "this CPU has no AVX512-BF16: the bf16 kernels cannot run here");
    }

    /// The bf16 kernels this CPU runs: AMX (`true`) where it has it, and AVX512-BF16.
    #[cfg(target_arch = "x86_64")]
    fn bf16_kernels() -> Vec<bool> {
        if amx::available() { vec![true, false] } else { vec![false] }
    }

    /// `f` in bf16 on AMX (`on`, where the CPU has it) or AVX512-BF16.
    #[cfg(target_arch = "x86_64")]
    fn in_bf16<R>(on: bool, f: impl FnOnce() -> R) -> R {
        amx::with(on, || crate::kernels::precision::with(crate::kernels::precision::Precision::Bf16, f))
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore = "needs AVX512-BF16 (avx512_bf16 in /proc/cpuinfo); .ci/run runs it with --ignored where the CPU has it"]
    fn bf16_gemm_is_the_product_of_rounded_operands_in_f32() {
        // Mixed precision: the product of the bf16-rounded operands, accumulated in f32 (so
        // within f32 rounding of the f64 product of the rounded values: 2e-5 of the sum of
        // |terms|), and within bf16's rounding of the f32 product (8e-3 of it). Shapes cross
        // the depth block (512, and an odd depth), the row blocks (120, and 1,020 for slivers of
        // a transposed A) and leave ragged slivers and panels; every transposition; overwrite and
        // accumulate; the same bits on one and two threads.
        assert_bf16_here();
        // Pools of their own: the global pool's size is the machine's.
        let (single, pool) = (rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap(), rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap());
        for &(m, n, k) in &[(1, 1, 1), (7, 17, 301), (130, 33, 1100), (250, 40, 64), (64, 300, 129), (20, 2048, 512), (1031, 19, 530)] {
            let a: Vec<f64> = (0..m * k).map(|i| ((i * 37 % 101) as f64) / 50.3 - 1.0).collect();
            let b: Vec<f64> = (0..k * n).map(|i| ((i * 53 % 97) as f64) / 48.7 - 1.0).collect();
            let (ar, br): (Vec<f64>, Vec<f64>) = (a.iter().map(|&v| round_bf16(v)).collect(), b.iter().map(|&v| round_bf16(v)).collect());
            let abs: (Vec<f64>, Vec<f64>) = (a.iter().map(|v| v.abs()).collect(), b.iter().map(|v| v.abs()).collect());
            for ta in [false, true] {
                for tb in [false, true] {
                    // The operands as stored: transposed copies where op() transposes.
                    let store = |x: &[f64], r: usize, c: usize, t: bool| -> Vec<f64> { if t { (0..r * c).map(|i| x[(i % r) * c + i / r]).collect() } else { x.to_vec() } };
                    let (sa, sb) = (store(&a, m, k, ta), store(&b, k, n, tb));
                    let (sa32, sb32): (Vec<f32>, Vec<f32>) = (sa.iter().map(|&v| v as f32).collect(), sb.iter().map(|&v| v as f32).collect());
                    let want = naive(m, n, k, &ar, false, &br, false);
                    let mag = naive(m, n, k, &abs.0, false, &abs.1, false);
                    let exact = naive(m, n, k, &a, false, &b, false);
                    let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
                    for (acc, on) in [false, true].into_iter().flat_map(|acc| bf16_kernels().into_iter().map(move |on| (acc, on))) {
                        let mut one = vec![0.5f32; m * n];
                        single.install(|| in_bf16(on, || gemm(m, n, k, &sa32, lda, ta, &sb32, ldb, tb, &mut one, n, acc)));
                        let mut two = vec![0.5f32; m * n];
                        pool.install(|| in_bf16(on, || gemm(m, n, k, &sa32, lda, ta, &sb32, ldb, tb, &mut two, n, acc)));
                        assert_eq!(one, two, "{m}x{n}x{k} ta={ta} tb={tb} amx={on}: thread count changed the bits");
                        let base = if acc { 0.5 } else { 0.0 };
                        for i in 0..m * n {
                            let got = one[i] as f64 - base;
                            assert!((got - want[i]).abs() <= 2e-5 * mag[i] + 1e-7, "{m}x{n}x{k} ta={ta} tb={tb} acc={acc} amx={on} [{i}]: {got} vs {}", want[i]);
                            assert!((got - exact[i]).abs() <= 8e-3 * mag[i] + 1e-7, "{m}x{n}x{k} [{i}]: {got} vs f32 {}", exact[i]);
                        }
                    }
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore = "needs AVX512-BF16 (avx512_bf16 in /proc/cpuinfo); .ci/run runs it with --ignored where the CPU has it"]
    fn bf16_packed_gemm_is_the_product_of_rounded_operands() {
        // The per-step product packed in bf16 (the precision in force at packing decides):
        // every row-block height (1-34 rows), two matrices side by side (the ISAN's), both
        // layouts of the weight, rows at a stride, a ragged panel, an odd depth and an even
        // one; on the calling thread and split over the pool, the same bits; the f32 packing
        // of the same weight does not change with it.
        assert_bf16_here();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let n = 37;
        // An odd depth (AMX: a chunk of 16 pairs and a shorter one) and whole chunks (AMX: up to
        // 32 rows a block).
        for k in [51, 64] {
            let b: Vec<f64> = (0..2 * k * n).map(|i| ((i * 53 % 97) as f64) / 48.7 - 1.0).collect();
            let br: Vec<f64> = b.iter().map(|&v| round_bf16(v)).collect();
            let babs: Vec<f64> = b.iter().map(|v| v.abs()).collect();
            let b32: Vec<f32> = b.iter().map(|&v| v as f32).collect();
            for (tb, on) in [false, true].into_iter().flat_map(|tb| bf16_kernels().into_iter().map(move |on| (tb, on))) {
                let mut p = PackedB::default();
                // The kernel in force at packing decides, on every thread.
                in_bf16(on, || p.pack(&b32, if tb { k } else { n }, tb, n, k, 2, k * n));
                assert!(p.is_bf16(), "packed for bf16");
                for m in 1..=34 {
                    let lda = k + 3;
                    let a: Vec<f64> = (0..m * lda).map(|i| if i % lda < k { ((i * 37 % 101) as f64) / 50.3 - 1.0 } else { f64::NAN }).collect();
                    let a_tight: Vec<f64> = (0..m).flat_map(|i| a[i * lda..i * lda + k].to_vec()).collect();
                    let ar: Vec<f64> = a_tight.iter().map(|&v| round_bf16(v)).collect();
                    let aabs: Vec<f64> = a_tight.iter().map(|v| v.abs()).collect();
                    let a32: Vec<f32> = a.iter().map(|&v| v as f32).collect();
                    for which in 0..2 {
                        let want = naive(m, n, k, &ar, false, &br[which * k * n..], tb);
                        let mag = naive(m, n, k, &aabs, false, &babs[which * k * n..], tb);
                        let mut serial = vec![0.5f32; m * n];
                        p.gemm_serial(which, m, &a32, lda, &mut serial, n, true);
                        let mut split = vec![0.5f32; m * n];
                        pool.install(|| p.gemm(which, m, &a32, lda, &mut split, n, true));
                        assert_eq!(serial, split, "{m} rows, matrix {which}, tb {tb}: the split changed the bits");
                        for i in 0..m * n {
                            let got = serial[i] as f64 - 0.5;
                            assert!((got - want[i]).abs() <= 2e-5 * mag[i] + 1e-6, "{m} rows tb {tb} amx {on} #{which} [{i}]: {got} vs {}", want[i]);
                        }
                    }
                }
            }
        }
        let k = 51;
        let b32: Vec<f32> = (0..2 * k * n).map(|i| (((i * 53 % 97) as f64) / 48.7 - 1.0) as f32).collect();
        let mut f = PackedB::default();
        f.pack(&b32, n, false, n, k, 2, k * n);
        assert!(!f.is_bf16(), "packed for f32 outside the bf16 scope");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore = "needs AVX512-BF16 (avx512_bf16 in /proc/cpuinfo); .ci/run runs it with --ignored where the CPU has it"]
    fn bf16_scope_reaches_the_pools_threads_and_ends() {
        // A product split over two threads inside a bf16 scope runs bf16 on both (its bits
        // equal the one-thread bf16 product and differ from f32), and the scope ends with
        // its closure.
        assert_bf16_here();
        use crate::kernels::precision::{current, with, Precision};
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let (m, n, k) = (64, 512, 300);
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32) / 50.3 - 1.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 53 % 97) as f32) / 48.7 - 1.0).collect();
        let prod = |p: Precision, threads: usize| {
            let mut c = vec![0f32; m * n];
            let mut run = || with(p, || gemm(m, n, k, &a, k, false, &b, n, false, &mut c, n, false));
            if threads == 2 { pool.install(run) } else { run() }
            c
        };
        let half = prod(Precision::Bf16, 2);
        assert!(half == prod(Precision::Bf16, 1), "bf16 split over the pool differs from one thread");
        assert!(half != prod(Precision::F32, 2), "bf16 gave the f32 bits");
        assert_eq!(current(), Precision::F32, "the scope ended");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore = "needs AMX (amx_bf16 in /proc/cpuinfo); .ci/run runs it with --ignored where the CPU has it"]
    fn amx_scope_reaches_the_pools_threads_and_the_packing() {
        // With AMX on a CPU that has it, the bf16 products run on the tiles: their bits differ
        // from AVX512-BF16's (the sums are taken in another order), a whole-sequence product
        // split over two threads inside `amx::with(false)` gives the one-thread AVX512-BF16
        // bits (the scope went with the blocks), and a weight packed inside it keeps
        // AVX512-BF16 when its product runs outside.
        assert_bf16_here();
        assert!(amx::available(), "this CPU has no AMX (or Linux refused the tiles): the AMX kernel cannot run here");
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let (m, n, k) = (64, 512, 300);
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32) / 50.3 - 1.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 53 % 97) as f32) / 48.7 - 1.0).collect();
        for ta in [false, true] {
            let prod = |on: bool, threads: usize| {
                let mut c = vec![0f32; m * n];
                let mut run = || in_bf16(on, || gemm(m, n, k, &a, if ta { m } else { k }, ta, &b, n, false, &mut c, n, false));
                if threads == 2 { pool.install(run) } else { run() }
                c
            };
            let avx = prod(false, 2);
            assert!(avx == prod(false, 1), "ta={ta}: AVX512-BF16 split over the pool differs from one thread (the scope did not reach it)");
            assert!(avx != prod(true, 2), "ta={ta}: AMX gave AVX512-BF16's bits");
        }
        let mut p = PackedB::default();
        in_bf16(false, || p.pack(&b, n, false, n, k, 1, 0));
        let (mut off, mut on) = (vec![0f32; m * n], vec![0f32; m * n]);
        in_bf16(true, || p.gemm(0, m, &a, k, &mut on, n, false));
        in_bf16(false, || p.gemm(0, m, &a, k, &mut off, n, false));
        assert_eq!(on, off, "the kernel in force at packing decides the per-step product");
        let mut q = PackedB::default();
        in_bf16(true, || q.pack(&b, n, false, n, k, 1, 0));
        in_bf16(false, || q.gemm(0, m, &a, k, &mut on, n, false));
        assert!(on != off, "a weight packed with AMX on ran on AVX512-BF16");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore = "needs AMX (amx_bf16 in /proc/cpuinfo); .ci/run runs it with --ignored where the CPU has it"]
    fn amx_zero_pairs_to_whole_chunks_change_no_bit() {
        // The tiles' products as `bf16::depth_pairs` lays them out (a depth's pairs padded with
        // zero pairs to whole chunks of 16, so that blocks take 32 rows and four accumulators)
        // give the bits of the unpadded depth with its shorter last chunk: every row count
        // around the 16- and 32-row blocks, one and two panels, ragged columns, overwrite and
        // accumulate, the per-step depths of 250 and 1,000 units (125 and 500 pairs).
        assert!(amx::available(), "this CPU has no AMX (or Linux refused the tiles): the AMX kernel cannot run here");
        // bf16 pairs of values in about ±2 (a bf16 is the top half of an f32's bits).
        let pair = |i: usize| {
            let h = |j: usize| ((((j * 2654435761) % 1999) as f32) / 500.0 - 2.0).to_bits() >> 16;
            h(2 * i) | (h(2 * i + 1) << 16)
        };
        for q in [1usize, 7, 13, 16, 20, 125, 500] {
            let qp = q.next_multiple_of(16);
            let ls = qp + 16;
            for m in [1, 5, 16, 17, 31, 32, 45, 100] {
                let a: Vec<u32> = (0..m * ls).map(|i| if i % ls < q { pair(i) } else { 0 }).collect();
                for (two, nc) in [(false, 16), (false, 9), (true, 32), (true, 21)] {
                    // Panels as stored: q rows of 16 pairs, then (padded) zero rows to qp.
                    let panels = |depth: usize| -> Vec<u32> { (0..2 * depth * 16).map(|i| if (i / 16) % depth < q { pair(7 + (i / 16) % depth * 16 + i % 16 + i / (depth * 16) * 99991) } else { 0 }).collect() };
                    let (short, padded) = (panels(q), panels(qp));
                    for acc in [false, true] {
                        let run = |depth: usize, p: &[u32]| {
                            let mut c: Vec<f32> = (0..m * 40).map(|i| i as f32 / 7.0).collect();
                            let mut tiles = amx::Tiles::new();
                            // SAFETY: AMX is here (asserted); A holds m rows of `depth` ≤ ls pairs,
                            // the panels two of `depth` pairs, C m rows of 40 ≥ nc.
                            unsafe { amx::rows(&mut tiles, m, depth, (a.as_ptr(), ls), (p.as_ptr(), depth * 16, two), c.as_mut_ptr(), 40, nc, acc) };
                            c
                        };
                        assert_eq!(run(q, &short), run(qp, &padded), "{m} rows, {q} pairs, two {two}, {nc} columns, acc {acc}");
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
