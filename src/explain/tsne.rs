//! t-SNE (van der Maaten & Hinton, 2008): a two-dimensional map of a few hundred vectors in
//! which neighbours stay neighbours, for the ISAN paper's figure 6 (the words' κ_word).
//!
//! Exact, `O(n²)` per iteration: the explorer maps at most a few hundred words, where the exact
//! gradient costs milliseconds and a Barnes-Hut approximation would buy nothing.
//!
//! 1. For each point `i`, the precision `β_i` that gives the conditional distribution
//!    `p_{j|i} ∝ exp(−β_i ‖x_i − x_j‖²)` the chosen perplexity `exp(H(P_i))` (bisection on `β`).
//! 2. `p_ij = (p_{j|i} + p_{i|j}) / 2n`.
//! 3. Gradient descent on `KL(P‖Q)` with `q_ij ∝ (1 + ‖y_i − y_j‖²)⁻¹`:
//!    `∂/∂y_i = 4 Σ_j (p_ij − q_ij)(y_i − y_j)(1 + ‖y_i − y_j‖²)⁻¹`, with the usual schedule
//!    (P exaggerated ×12 for the first 250 iterations, momentum 0.5 then 0.8, per-coordinate
//!    gains). Deterministic for a given seed.

use crate::kernels::rng::Rng;

/// The map of `x` (`n` vectors of one length) into the plane; `perplexity` is clamped to what
/// `n` allows.
pub fn tsne(x: &[Vec<f64>], perplexity: f64, iterations: usize, seed: u64) -> Vec<[f64; 2]> {
    let n = x.len();
    if n < 2 {
        return vec![[0.0, 0.0]; n];
    }
    let d2: Vec<f64> = (0..n * n).map(|k| x[k / n].iter().zip(&x[k % n]).map(|(a, b)| (a - b) * (a - b)).sum()).collect();
    let perp = perplexity.clamp(1.0, ((n - 1) as f64 / 3.0).max(1.0));
    let target = perp.ln();
    let mut p = vec![0f64; n * n];
    for i in 0..n {
        let row = &d2[i * n..(i + 1) * n];
        // Distances relative to the nearest, so that exp() never underflows for every j.
        let dmin = (0..n).filter(|&j| j != i).map(|j| row[j]).fold(f64::INFINITY, f64::min);
        let (mut lo, mut hi, mut beta) = (0.0f64, f64::INFINITY, 1.0f64);
        let scale = row.iter().copied().fold(0.0, f64::max).max(1e-300);
        beta /= scale;
        for _ in 0..100 {
            let mut sum = 0.0;
            let mut hsum = 0.0;
            for j in (0..n).filter(|&j| j != i) {
                let e = (-(row[j] - dmin) * beta).exp();
                sum += e;
                hsum += e * (row[j] - dmin);
            }
            // H = ln Σ + β·E[d − dmin]
            let h = sum.ln() + beta * hsum / sum;
            for j in (0..n).filter(|&j| j != i) {
                p[i * n + j] = (-(row[j] - dmin) * beta).exp() / sum;
            }
            if (h - target).abs() < 1e-6 {
                break;
            }
            if h > target {
                lo = beta;
                beta = if hi.is_finite() { (beta + hi) / 2.0 } else { beta * 2.0 };
            } else {
                hi = beta;
                beta = (beta + lo) / 2.0;
            }
        }
    }
    let mut pij = vec![0f64; n * n];
    for i in 0..n {
        for j in 0..n {
            if i != j {
                pij[i * n + j] = ((p[i * n + j] + p[j * n + i]) / (2.0 * n as f64)).max(1e-12);
            }
        }
    }
    let mut rng = Rng::new(seed);
    let mut y: Vec<[f64; 2]> = (0..n).map(|_| [rng.range(-1e-4, 1e-4), rng.range(-1e-4, 1e-4)]).collect();
    let mut vel = vec![[0f64; 2]; n];
    let mut gains = vec![[1f64; 2]; n];
    let rate = (n as f64 / 12.0).max(50.0);
    let mut num = vec![0f64; n * n];
    for it in 0..iterations {
        let exag = if it < 250 { 12.0 } else { 1.0 };
        let momentum = if it < 250 { 0.5 } else { 0.8 };
        let mut zsum = 0.0;
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    let (dx, dy) = (y[i][0] - y[j][0], y[i][1] - y[j][1]);
                    let q = 1.0 / (1.0 + dx * dx + dy * dy);
                    num[i * n + j] = q;
                    zsum += q;
                }
            }
        }
        for i in 0..n {
            let mut g = [0f64; 2];
            for j in (0..n).filter(|&j| j != i) {
                let q = num[i * n + j];
                let m = (exag * pij[i * n + j] - q / zsum) * q;
                g[0] += 4.0 * m * (y[i][0] - y[j][0]);
                g[1] += 4.0 * m * (y[i][1] - y[j][1]);
            }
            for c in 0..2 {
                gains[i][c] = if (g[c] > 0.0) != (vel[i][c] > 0.0) { gains[i][c] + 0.2 } else { (gains[i][c] * 0.8).max(0.01) };
                vel[i][c] = momentum * vel[i][c] - rate * gains[i][c] * g[c];
            }
        }
        for i in 0..n {
            y[i][0] += vel[i][0];
            y[i][1] += vel[i][1];
        }
        // Centred, so the map does not drift.
        let (mx, my) = (y.iter().map(|v| v[0]).sum::<f64>() / n as f64, y.iter().map(|v| v[1]).sum::<f64>() / n as f64);
        y.iter_mut().for_each(|v| {
            v[0] -= mx;
            v[1] -= my;
        });
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separated_clusters_stay_apart_and_the_map_is_reproducible() {
        // Three tight clusters of ten points in 5 dimensions, far apart.
        let mut rng = Rng::new(7);
        let centres = [[0.0; 5], [10.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 10.0, 0.0, 0.0]];
        let x: Vec<Vec<f64>> = (0..30).map(|k| centres[k / 10].iter().map(|c| c + rng.range(-0.5, 0.5)).collect()).collect();
        let y = tsne(&x, 5.0, 500, 1);
        let d = |a: usize, b: usize| ((y[a][0] - y[b][0]).powi(2) + (y[a][1] - y[b][1]).powi(2)).sqrt();
        // Every point is nearer to every point of its own cluster than to any of another.
        for a in 0..30 {
            let own = (0..30).filter(|&b| b / 10 == a / 10 && b != a).map(|b| d(a, b)).fold(0.0, f64::max);
            let other = (0..30).filter(|&b| b / 10 != a / 10).map(|b| d(a, b)).fold(f64::INFINITY, f64::min);
            assert!(own < other, "point {a}: farthest own {own}, nearest other {other}");
        }
        assert_eq!(y, tsne(&x, 5.0, 500, 1));
    }
}
