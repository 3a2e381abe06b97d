//! Small dense f64 helpers for the analyses and the benchmark: vectors and matrices as
//! slices and `Vec<Vec<f64>>`, softmax and NLL, correlation, the median, inversion, and the
//! symmetric eigenproblem (values alone by Householder tridiagonalisation and bisection for
//! the large covariance matrices of PCA; values with vectors by Jacobi rotations for the small
//! Gram matrices of the ISAN's word embedding, where the vectors are wanted).

use anyhow::{bail, Result};

/// `out = M u` for a row-major `M` with `cols` columns.
pub fn matvec(m: &[f64], cols: usize, u: &[f64], out: &mut [f64]) {
    for (o, row) in out.iter_mut().zip(m.chunks_exact(cols)) {
        *o = row.iter().zip(u).map(|(a, b)| a * b).sum();
    }
}

/// Gram–Schmidt: `u` less its projections on the orthonormal vectors `basis`, taken twice (the
/// second pass removes what rounding left of the first).
pub fn orthogonalize(u: &mut [f64], basis: &[Vec<f64>]) {
    for _ in 0..2 {
        for q in basis {
            let d: f64 = u.iter().zip(q).map(|(a, b)| a * b).sum();
            u.iter_mut().zip(q).for_each(|(a, b)| *a -= d * b);
        }
    }
}

pub fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

pub fn log_softmax(l: &[f64]) -> Vec<f64> {
    let mx = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = mx + l.iter().map(|x| (x - mx).exp()).sum::<f64>().ln();
    l.iter().map(|x| x - lse).collect()
}

pub fn softmax(l: &[f64]) -> Vec<f64> {
    log_softmax(l).into_iter().map(f64::exp).collect()
}

/// Natural-log cross-entropy of `target` under `logits`.
pub fn nll(logits: &[f64], target: u32) -> f64 {
    (-log_softmax(logits)[target as usize]).max(0.0)
}

/// Pearson correlation; NaN with fewer than two points or no variance.
pub fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    if n < 2 {
        return f64::NAN;
    }
    let (ma, mb) = (
        a[..n].iter().sum::<f64>() / n as f64,
        b[..n].iter().sum::<f64>() / n as f64,
    );
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let (x, y) = (a[i] - ma, b[i] - mb);
        sab += x * y;
        saa += x * x;
        sbb += y * y;
    }
    if saa == 0.0 || sbb == 0.0 {
        return f64::NAN;
    }
    sab / (saa * sbb).sqrt()
}

pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// The `n` largest entries of `l` as `(symbol, value)`, largest first.
pub fn top_n(l: &[f64], n: usize) -> Vec<(u32, f64)> {
    let mut idx: Vec<u32> = (0..l.len() as u32).collect();
    idx.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
    idx.into_iter()
        .take(n)
        .map(|i| (i, l[i as usize]))
        .collect()
}

/// The inverse of a square matrix (Gauss–Jordan with partial pivoting).
pub fn invert(m: &[Vec<f64>]) -> Result<Vec<Vec<f64>>> {
    let n = m.len();
    let mut a: Vec<Vec<f64>> = m
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = r.clone();
            row.extend((0..n).map(|j| if i == j { 1.0 } else { 0.0 }));
            row
        })
        .collect();
    let scale = m
        .iter()
        .flatten()
        .fold(0.0f64, |x, y| x.max(y.abs()))
        .max(f64::MIN_POSITIVE);
    for c in 0..n {
        let piv = (c..n)
            .max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))
            .unwrap();
        if a[piv][c].abs() <= 1e-13 * scale {
            bail!("the matrix is singular");
        }
        a.swap(c, piv);
        let d = a[c][c];
        a[c].iter_mut().for_each(|x| *x /= d);
        let pr = a[c].clone();
        for (i, row) in a.iter_mut().enumerate() {
            if i != c && row[c] != 0.0 {
                let f = row[c];
                row.iter_mut().zip(&pr).for_each(|(x, y)| *x -= f * y);
            }
        }
    }
    Ok(a.into_iter().map(|r| r[n..].to_vec()).collect())
}

pub fn matmul(a: &[Vec<f64>], b: &[Vec<f64>]) -> Vec<Vec<f64>> {
    a.iter()
        .map(|r| {
            (0..b[0].len())
                .map(|j| r.iter().zip(b).map(|(x, br)| x * br[j]).sum())
                .collect()
        })
        .collect()
}

/// Eigenvalues and eigenvectors (columns: `vecs[i][j]` is component `i` of vector `j`) of a
/// symmetric matrix, by cyclic Jacobi rotations.
// A rotation updates columns (then rows) p and q of every row r: written with the indices of
// the formula, as the textbooks give it, rather than as zipped iterators.
#[allow(clippy::needless_range_loop)]
pub fn jacobi_eigen(mut a: Vec<Vec<f64>>) -> (Vec<f64>, Vec<Vec<f64>>) {
    let k = a.len();
    let mut q: Vec<Vec<f64>> = (0..k)
        .map(|i| (0..k).map(|j| if i == j { 1.0 } else { 0.0 }).collect())
        .collect();
    let scale: f64 = a.iter().flatten().map(|x| x * x).sum::<f64>().sqrt();
    for _ in 0..100 {
        let off: f64 = (0..k)
            .flat_map(|i| (0..k).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum::<f64>()
            .sqrt();
        if off <= 1e-15 * scale || off == 0.0 {
            break;
        }
        for pi in 0..k {
            for qi in pi + 1..k {
                let apq = a[pi][qi];
                if apq == 0.0 {
                    continue;
                }
                let theta = (a[qi][qi] - a[pi][pi]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for r in 0..k {
                    let (x, y) = (a[r][pi], a[r][qi]);
                    a[r][pi] = c * x - s * y;
                    a[r][qi] = s * x + c * y;
                }
                for r in 0..k {
                    let (x, y) = (a[pi][r], a[qi][r]);
                    a[pi][r] = c * x - s * y;
                    a[qi][r] = s * x + c * y;
                }
                for r in 0..k {
                    let (x, y) = (q[r][pi], q[r][qi]);
                    q[r][pi] = c * x - s * y;
                    q[r][qi] = s * x + c * y;
                }
            }
        }
    }
    ((0..k).map(|i| a[i][i]).collect(), q)
}

/// Eigenvalues of the symmetric `n×n` matrix `a` (destroyed), ascending.
pub fn symmetric_eigenvalues(a: &mut [f64], n: usize) -> Vec<f64> {
    if n == 0 {
        return Vec::new();
    }
    // Householder: zero column k below the subdiagonal, for k = 0..n-2.
    let mut v = vec![0f64; n];
    let mut p = vec![0f64; n];
    for k in 0..n.saturating_sub(2) {
        let r = k + 1;
        let norm = (r..n).map(|i| a[i * n + k].powi(2)).sum::<f64>().sqrt();
        if norm == 0.0 {
            continue;
        }
        let x0 = a[r * n + k];
        let alpha = if x0 > 0.0 { -norm } else { norm };
        for i in r..n {
            v[i] = a[i * n + k];
        }
        v[r] -= alpha;
        let vv: f64 = (r..n).map(|i| v[i] * v[i]).sum();
        if vv == 0.0 {
            continue;
        }
        let beta = 2.0 / vv;
        // p = β S v over the trailing block S = a[r.., r..].
        for i in r..n {
            p[i] = beta * (r..n).map(|j| a[i * n + j] * v[j]).sum::<f64>();
        }
        let kk = 0.5 * beta * (r..n).map(|i| p[i] * v[i]).sum::<f64>();
        for i in r..n {
            p[i] -= kk * v[i];
        }
        for i in r..n {
            for j in r..n {
                a[i * n + j] -= v[i] * p[j] + p[i] * v[j];
            }
        }
        a[r * n + k] = alpha;
        a[k * n + r] = alpha;
        for i in r + 1..n {
            a[i * n + k] = 0.0;
            a[k * n + i] = 0.0;
        }
    }
    let d: Vec<f64> = (0..n).map(|i| a[i * n + i]).collect();
    let e2: Vec<f64> = (0..n - 1).map(|i| a[(i + 1) * n + i].powi(2)).collect();
    // Gershgorin bounds.
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for i in 0..n {
        let r = if i > 0 { e2[i - 1].sqrt() } else { 0.0 } + if i + 1 < n { e2[i].sqrt() } else { 0.0 };
        lo = lo.min(d[i] - r);
        hi = hi.max(d[i] + r);
    }
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let tiny = f64::MIN_POSITIVE.sqrt() * span.max(1.0);
    // Number of eigenvalues below x.
    let count = |x: f64| {
        let mut c = 0;
        let mut q = d[0] - x;
        if q < 0.0 {
            c += 1;
        }
        for i in 1..n {
            let qq = if q == 0.0 { tiny } else { q };
            q = d[i] - x - e2[i - 1] / qq;
            if q < 0.0 {
                c += 1;
            }
        }
        c
    };
    (0..n)
        .map(|k| {
            // The k-th smallest: the smallest x with count(x) > k.
            let (mut a, mut b) = (lo - 1e-12 * span, hi + 1e-12 * span);
            for _ in 0..200 {
                let mid = 0.5 * (a + b);
                if mid <= a || mid >= b {
                    break;
                }
                if count(mid) > k {
                    b = mid;
                } else {
                    a = mid;
                }
            }
            0.5 * (a + b)
        })
        .collect()
}
