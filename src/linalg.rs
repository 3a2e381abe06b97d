//! Dense kernels shared by every cell: one GEMM entry point and a few row/column reductions.
//!
//! Everything is row-major. The GEMM is the `gemm` crate's single-threaded kernel; we split the
//! larger output dimension over the rayon pool ourselves, because at batch-sized `m` the crate's
//! own threading is slower than one thread (see `shared/notes/cpu-performance.md`). Splitting the
//! output never splits a dot product, so a result does not depend on the thread count.

use crate::num::Float;

/// Counting of the GEMM work done, for the benchmark's achieved-GFLOP/s figure.
///
/// Off by default: then the only cost is one relaxed atomic load per GEMM call. When on, every
/// call records its shape `(m, n, k)` so that the benchmark can time the same shapes alone.
pub mod profile {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    static ON: AtomicBool = AtomicBool::new(false);
    static SHAPES: Mutex<BTreeMap<(usize, usize, usize), u64>> = Mutex::new(BTreeMap::new());

    /// Start recording (and clear what was recorded before).
    pub fn start() {
        SHAPES.lock().unwrap().clear();
        ON.store(true, Ordering::Relaxed);
    }

    /// Stop recording and return every `(m, n, k)` shape called with its number of calls.
    pub fn stop() -> Vec<((usize, usize, usize), u64)> {
        ON.store(false, Ordering::Relaxed);
        std::mem::take(&mut *SHAPES.lock().unwrap()).into_iter().collect()
    }

    #[inline]
    pub(super) fn record(m: usize, n: usize, k: usize) {
        if ON.load(Ordering::Relaxed) {
            *SHAPES.lock().unwrap().entry((m, n, k)).or_insert(0) += 1;
        }
    }

    /// Floating-point operations (a multiply-add counts two) of the recorded calls.
    pub fn flops(shapes: &[((usize, usize, usize), u64)]) -> f64 {
        shapes.iter().map(|&((m, n, k), c)| 2.0 * m as f64 * n as f64 * k as f64 * c as f64).sum()
    }
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
    profile::record(m, n, k);
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

    let run = |i0: usize, i1: usize, j0: usize, j1: usize| {
        // SAFETY: the asserts above bound every element of the full product, and callers give
        // disjoint (i, j) blocks of C to different threads.
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
    let blocks: Vec<(usize, usize)> = (0..threads)
        .map(|t| (t * per, ((t + 1) * per).min(len)))
        .filter(|(s, e)| s < e)
        .collect();
    rayon::scope(|s| {
        for &(s0, s1) in &blocks[1..] {
            s.spawn(move |_| {
                if split_n {
                    run(0, m, s0, s1)
                } else {
                    run(s0, s1, 0, n)
                }
            });
        }
        let (s0, s1) = blocks[0];
        if split_n {
            run(0, m, s0, s1)
        } else {
            run(s0, s1, 0, n)
        }
    });
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

/// `db[n] += Σ_rows dy[m,n]`.
pub fn add_col_sums<T: Float>(m: usize, n: usize, dy: &[T], db: &mut [T]) {
    for row in dy[..m * n].chunks_exact(n) {
        for (d, &g) in db.iter_mut().zip(row) {
            *d += g;
        }
    }
}

/// `y[m,n] += b[n]` on every row.
pub fn add_bias_rows<T: Float>(m: usize, n: usize, b: &[T], y: &mut [T]) {
    for row in y[..m * n].chunks_exact_mut(n) {
        for (v, &bb) in row.iter_mut().zip(b) {
            *v += bb;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
