//! The PCA spectrum of hidden states, for every cell: the eigenvalues of the covariance of the
//! top layer's outputs over the text, as fractions of the total variance.
//!
//! With `T` positions and `O` output units the covariance `YᵀY/(T−1)` of the centred outputs
//! has the same nonzero eigenvalues as the Gram matrix `YYᵀ/(T−1)`; we decompose whichever is
//! smaller. Eigenvalues only: Householder reduction to tridiagonal form, then bisection on
//! Sturm sequence counts (robust, and accurate to a few ulps of the largest eigenvalue).

use super::figures;
use crate::kernels::f64::symmetric_eigenvalues;
use crate::kernels::gemm::gemm;
use anyhow::{bail, Result};
use std::fmt::Write as _;
use std::path::Path;

/// Components whose variance is below this fraction of the first one's are rounding, not
/// structure (the covariance is computed in f64 from f32 states).
const NUMERICAL_ZERO: f64 = 1e-10;

#[derive(Clone, Debug)]
pub struct PcaAnalysis {
    pub layer: usize,
    pub units: usize,
    pub steps: usize,
    /// eigenvalues of the covariance, descending (at most `min(T, O)`; negatives from rounding
    /// are clamped to 0)
    pub eigenvalues: Vec<f64>,
}

/// The spectrum of `y` (`[T, O]` row-major, the top layer's outputs).
pub fn spectrum(y: &[f32], steps: usize, units: usize) -> Vec<f64> {
    let (t, o) = (steps, units);
    if t < 2 || o == 0 {
        return Vec::new();
    }
    let mut yc: Vec<f64> = y[..t * o].iter().map(|&v| v as f64).collect();
    for m in 0..o {
        let mean = (0..t).map(|i| yc[i * o + m]).sum::<f64>() / t as f64;
        (0..t).for_each(|i| yc[i * o + m] -= mean);
    }
    let n = o.min(t);
    let mut a = vec![0f64; n * n];
    if o <= t {
        gemm(o, o, t, &yc, o, true, &yc, o, false, &mut a, o, false);
    } else {
        gemm(t, t, o, &yc, o, false, &yc, o, true, &mut a, t, false);
    }
    let scale = 1.0 / (t - 1) as f64;
    a.iter_mut().for_each(|x| *x *= scale);
    // Symmetrise against rounding in the product.
    for i in 0..n {
        for j in 0..i {
            let v = 0.5 * (a[i * n + j] + a[j * n + i]);
            a[i * n + j] = v;
            a[j * n + i] = v;
        }
    }
    let mut ev = symmetric_eigenvalues(&mut a, n);
    ev.iter_mut().for_each(|x| *x = x.max(0.0));
    ev.sort_by(|a, b| b.total_cmp(a));
    ev
}

impl PcaAnalysis {
    /// The spectrum of the top layer's outputs `y` (`[T, O]`).
    pub fn new(layer: usize, y: &[f32], steps: usize, units: usize) -> Result<PcaAnalysis> {
        if steps < 2 {
            bail!("the PCA spectrum needs at least 2 positions, the text has {steps}");
        }
        Ok(PcaAnalysis { layer, units, steps, eigenvalues: spectrum(y, steps, units) })
    }

    pub fn total(&self) -> f64 {
        self.eigenvalues.iter().sum()
    }

    /// Fractions of variance explained, descending.
    pub fn fractions(&self) -> Vec<f64> {
        let tot = self.total();
        self.eigenvalues.iter().map(|&e| if tot > 0.0 { e / tot } else { 0.0 }).collect()
    }

    /// How many leading components explain `q` of the variance.
    pub fn components_for(&self, q: f64) -> usize {
        let mut acc = 0.0;
        for (k, f) in self.fractions().iter().enumerate() {
            acc += f;
            if acc >= q - 1e-12 {
                return k + 1;
            }
        }
        self.eigenvalues.len()
    }

    /// `(Σλ)² / Σλ²`: the effective number of dimensions.
    pub fn participation_ratio(&self) -> f64 {
        let s2: f64 = self.eigenvalues.iter().map(|e| e * e).sum();
        if s2 > 0.0 {
            self.total().powi(2) / s2
        } else {
            0.0
        }
    }

    pub fn summary(&self) -> String {
        let f = self.fractions();
        let first: Vec<String> = f.iter().take(5).map(|x| format!("{:.1}%", 100.0 * x)).collect();
        format!(
            "PCA spectrum of the top layer's outputs (layer {}, {} units, {} positions): first components explain {}; \
             90% of the variance in {} component(s), 99% in {}; participation ratio {:.2}\n",
            self.layer,
            self.units,
            self.steps,
            first.join(", "),
            self.components_for(0.9),
            self.components_for(0.99),
            self.participation_ratio()
        )
    }

    pub fn html(&self) -> String {
        let mut s = String::from("<h2>PCA spectrum of hidden states</h2>\n");
        let _ = writeln!(
            s,
            "<p>Eigenvalues of the covariance of layer {}'s outputs over the text ({} units, {} positions), as the fraction \
             of the variance each principal component explains (log scale). 90% of the variance lies in {} components, \
             99% in {}; participation ratio {:.2}.</p>",
            self.layer,
            self.units,
            self.steps,
            self.components_for(0.9),
            self.components_for(0.99),
            self.participation_ratio()
        );
        // At most min(positions − 1, units) components carry variance; the rest are rounding
        // (about 1e-17 of the total) and would squash the log axis: not drawn, but said.
        let f = self.fractions();
        let shown: Vec<f64> = f.iter().copied().take_while(|&x| x > NUMERICAL_ZERO * f[0]).collect();
        if shown.len() < f.len() {
            let rank = self.units.min(self.steps.saturating_sub(1));
            let _ = writeln!(
                s,
                "<p>The other {} components are at numerical zero (below {NUMERICAL_ZERO:e} of the first: {} positions of {} units                  span at most {rank} dimensions) and are not drawn; pca_spectrum.csv has them all.</p>",
                f.len() - shown.len(),
                self.steps,
                self.units
            );
        }
        s.push_str(&figures::log_plot_svg(&shown, "component", "fraction of variance"));
        s
    }

    /// `pca_spectrum.csv`: component, eigenvalue, fraction, cumulative fraction.
    pub fn write_data(&self, dir: &Path) -> Result<()> {
        let mut s = String::from("component,eigenvalue,fraction,cumulative\n");
        let mut acc = 0.0;
        for (k, (e, f)) in self.eigenvalues.iter().zip(self.fractions()).enumerate() {
            acc += f;
            let _ = writeln!(s, "{},{e},{f},{acc}", k + 1);
        }
        figures::write_file(&dir.join("pca_spectrum.csv"), s.as_bytes())
    }
}
