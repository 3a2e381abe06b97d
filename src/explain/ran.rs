//! The RAN's weights over past content layers (Lee, Levy, Zettlemoyer, section 2.2 and 5).
//!
//! Unrolling `c_t = i_t ∘ c~_t + f_t ∘ c_{t-1}` gives
//!
//! ```text
//! c_t = Σ_{j ≤ t} w_j^t ∘ c~_j  +  (Π_{k ≤ t} f_k) ∘ c_0,      w_j^t = i_j ∘ Π_{k=j+1..t} f_k
//! ```
//!
//! for every variant of the cell (tanh or identity output, gates reading `c` or `h`, with or
//! without an output projection: none of them changes this recurrence; only what the gates
//! read differs). `c_0` is the state before the text (`explain` always starts fresh: zero, so
//! the last term vanishes, unless the model learns its initial state, `rnn.{l}.initial_state`).
//!
//! **Computation.** For each position `t` we walk `j = t, t-1, …, 0` keeping the running
//! products `P(m) = Π_{k=j+1..t} f_k(m)` in f64, so each row costs `O(t·H)` and the whole
//! lower triangle `O(T²·H)` (T is capped at [`super::figures::MAX_TOKENS`]). Every factor is a
//! sigmoid in `[0, 1]`, so the products only shrink: nothing can overflow, and an underflow to
//! 0 is the correctly rounded value of a weight below 1e-308. The gates and contents are the
//! f32 values the forward pass used (read from the layer's workspace), widened to f64; the
//! same pass reconstructs `c_t` and compares it with the forward's state.
//!
//! `v_t = argmax_{j ≤ t} max_m w_j^t(m)` is equation (8) of the paper; since it includes
//! `j = t` (the word itself, whose weight is `i_t`), we also keep the most influential *strict*
//! predecessor (`j < t`), which is what the paper's figure draws as arrows.

use super::figures;
use crate::render::esc;
use crate::cells::{Cell, Workspace};
use crate::model::Model;
use anyhow::{Context, Result};
use rayon::prelude::*;
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;

/// Influence weights of one layer over one text: the RAN's `w_j^t`, or the effective
/// attention weights of an RWA/RDA (see [`super::attention`]).
#[derive(Clone, Debug)]
pub struct Influence {
    pub layer: usize,
    /// the cell's short name (ran, rwa, rda)
    pub cell: String,
    pub hidden: usize,
    pub steps: usize,
    /// `[T, T]` row-major: `max_m w_j^t(m)` at `(t, j)`, 0 above the diagonal
    pub max_w: Vec<f32>,
    /// `[T, T]` row-major: the mean over units of `w_j^t(m)` (the heat map: the maximum is
    /// near 1 almost everywhere, since some unit nearly always keeps a token)
    pub mean_w: Vec<f32>,
    /// `v_t` of equation (8): the `j ≤ t` with the largest `max_m w_j^t(m)`
    pub arrows: Vec<usize>,
    /// the most influential strict predecessor `j < t` (none at `t = 0`)
    pub predecessors: Vec<Option<usize>>,
    /// `max_m` of the weight on the initial state at each `t` (0 from a zero initial state)
    pub init_max: Vec<f64>,
    /// requested units: `(m, [T, T] weights w_j^t(m))`
    pub components: Vec<(usize, Vec<f32>)>,
    /// `‖Σ_j w_j^t ∘ c~_j (+ init) − c_t‖ / ‖c_t‖` over the whole text (Frobenius), against the
    /// forward pass's state (for the RWA/RDA: against `n_t / d_t`)
    pub rel_error: f64,
    /// the largest per-position relative error `‖rec_t − c_t‖ / ‖c_t‖` (positions whose state
    /// is not tiny)
    pub max_step_error: f64,
    /// RWA/RDA only: the largest `|Σ_j w_j^t(m) + init − 1|` over `t` and units
    pub max_sum_error: Option<f64>,
}

/// One row `t` of an influence computation.
pub(crate) struct Row {
    pub max_w: Vec<f32>,
    pub mean_w: Vec<f32>,
    pub init_max: f64,
    pub comps: Vec<Vec<f32>>,
    pub err2: f64,
    pub ref2: f64,
    pub sum_err: f64,
}

impl Influence {
    /// Assemble the rows (each `t + 1` long) into the full analysis.
    pub(crate) fn from_rows(layer: usize, cell: &str, hidden: usize, comps: &[usize], rows: Vec<Row>, sums: bool) -> Influence {
        let n = rows.len();
        let mut max_w = vec![0f32; n * n];
        let mut mean_w = vec![0f32; n * n];
        let mut components: Vec<(usize, Vec<f32>)> = comps.iter().map(|&m| (m, vec![0f32; n * n])).collect();
        let mut arrows = Vec::with_capacity(n);
        let mut predecessors = Vec::with_capacity(n);
        let mut init_max = Vec::with_capacity(n);
        let (mut e2, mut r2, mut step_err, mut sum_err) = (0f64, 0f64, 0f64, 0f64);
        let mut r2_max = 0f64;
        for r in &rows {
            r2_max = r2_max.max(r.ref2);
        }
        for (t, r) in rows.into_iter().enumerate() {
            max_w[t * n..t * n + t + 1].copy_from_slice(&r.max_w);
            mean_w[t * n..t * n + t + 1].copy_from_slice(&r.mean_w);
            for (k, c) in r.comps.iter().enumerate() {
                components[k].1[t * n..t * n + t + 1].copy_from_slice(c);
            }
            // The first maximum wins ties (the earliest position).
            let argmax = |xs: &[f32]| {
                let mut best = 0;
                for (j, &x) in xs.iter().enumerate() {
                    if x > xs[best] {
                        best = j;
                    }
                }
                best
            };
            arrows.push(argmax(&r.max_w));
            predecessors.push(if t == 0 { None } else { Some(argmax(&r.max_w[..t])) });
            init_max.push(r.init_max);
            e2 += r.err2;
            r2 += r.ref2;
            // Per-step errors only where the state is not negligible against the text's largest.
            if r.ref2 > 1e-12 * r2_max && r.ref2 > 0.0 {
                step_err = step_err.max((r.err2 / r.ref2).sqrt());
            }
            sum_err = sum_err.max(r.sum_err);
        }
        let rel_error = if r2 > 0.0 { (e2 / r2).sqrt() } else { e2.sqrt() };
        Influence {
            layer,
            cell: cell.to_string(),
            hidden,
            steps: n,
            max_w,
            mean_w,
            arrows,
            predecessors,
            init_max,
            components,
            rel_error,
            max_step_error: step_err,
            max_sum_error: sums.then_some(sum_err),
        }
    }

    /// `max_m w_j^t(m)`.
    pub fn at(&self, t: usize, j: usize) -> f32 {
        self.max_w[t * self.steps + j]
    }

    /// Mean distance `t − p_t` to the most influential predecessor.
    pub fn mean_distance(&self) -> f64 {
        let d: Vec<f64> = self.predecessors.iter().enumerate().filter_map(|(t, p)| p.map(|p| (t - p) as f64)).collect();
        if d.is_empty() {
            0.0
        } else {
            d.iter().sum::<f64>() / d.len() as f64
        }
    }

    /// Fraction of positions whose `v_t` (equation 8) is the position itself.
    pub fn self_fraction(&self) -> f64 {
        let n = self.arrows.iter().enumerate().filter(|&(t, &v)| v == t).count();
        n as f64 / self.steps.max(1) as f64
    }

    /// A few summary lines (indented by two spaces).
    pub fn summary(&self, labels: &[String], what: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "  layer {} ({}, {} units, {} positions): {what} reconstruction error {:.2e} relative (worst position {:.2e})",
            self.layer, self.cell, self.hidden, self.steps, self.rel_error, self.max_step_error
        );
        if let Some(e) = self.max_sum_error {
            let _ = writeln!(s, "    weights sum to 1 per unit within {e:.2e}");
        }
        let _ = writeln!(
            s,
            "    v_t = t (the current input itself wins) at {:.0}% of positions; mean distance to the most influential predecessor {:.2}",
            100.0 * self.self_fraction(),
            self.mean_distance()
        );
        // The first few arrows, as the paper's figure lists them.
        let shown = self.steps.min(12);
        let mut line = String::from("    predecessors:");
        for t in 1..shown {
            if let Some(p) = self.predecessors[t] {
                let _ = write!(line, " {}←{}", short(&labels[t]), short(&labels[p]));
            }
        }
        if self.steps > shown {
            line.push_str(" …");
        }
        s.push_str(&line);
        s.push('\n');
        s
    }

    /// SVG figures: the arcs over the text, the heat map and the requested components.
    pub fn html(&self, labels: &[String]) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "<h3>Layer {} ({}, {} units)</h3>", self.layer, esc(&self.cell), self.hidden);
        let _ = writeln!(
            s,
            "<p>Reconstruction error {:.2e} relative (worst position {:.2e}){}.</p>",
            self.rel_error,
            self.max_step_error,
            self.max_sum_error.map_or(String::new(), |e| format!("; the weights sum to 1 per unit within {e:.1e}"))
        );
        s.push_str("<p>Each arc joins a token to its most influential predecessor (the largest component of w<sub>j</sub><sup>t</sup> over j &lt; t).</p>\n");
        s.push_str(&figures::arcs_svg(labels, &self.predecessors));
        s.push_str(
            "<p>Heat map of the mean over units of w<sub>j</sub><sup>t</sup>(m): rows t (the current token), columns j (the \
             past token), the colours scaled to the largest value shown. (The maximum over units, which the arrows follow, \
             is near 1 almost everywhere: some unit nearly always keeps a token.)</p>\n",
        );
        s.push_str(&figures::heatmap_svg(&self.mean_w, self.steps, labels));
        for (m, w) in &self.components {
            let _ = writeln!(s, "<p>Unit {m}: w<sub>j</sub><sup>t</sup>({m}).</p>");
            s.push_str(&figures::heatmap_svg(w, self.steps, labels));
        }
        s
    }

    /// The arrows of every position with the layer's checks: `{prefix}_layer{l}_arrows.json`,
    /// and what the explorer shows for the same text.
    pub fn arrows_json(&self, labels: &[String]) -> serde_json::Value {
        let arrows: Vec<_> = (0..self.steps)
            .map(|t| {
                let v = self.arrows[t];
                let p = self.predecessors[t];
                json!({
                    "t": t,
                    "token": labels[t],
                    "v": v,
                    "v_token": labels[v],
                    "v_weight": self.at(t, v),
                    "predecessor": p,
                    "predecessor_token": p.map(|p| labels[p].clone()),
                    "predecessor_weight": p.map(|p| self.at(t, p)),
                    "initial_state_weight": self.init_max[t],
                })
            })
            .collect();
        json!({
            "layer": self.layer,
            "cell": self.cell,
            "hidden": self.hidden,
            "reconstruction_relative_error": self.rel_error,
            "worst_position_relative_error": self.max_step_error,
            "max_sum_error": self.max_sum_error,
            "arrows": arrows,
        })
    }

    /// `{prefix}_layer{l}_weights.csv` (the maximum over units), `{prefix}_layer{l}_mean_weights.csv`
    /// (the heat map), `{prefix}_layer{l}_arrows.json`, and a CSV per requested unit.
    pub fn write_data(&self, dir: &Path, prefix: &str, labels: &[String]) -> Result<()> {
        let l = self.layer;
        figures::write_file(&dir.join(format!("{prefix}_layer{l}_weights.csv")), matrix_csv(&self.max_w, self.steps).as_bytes())?;
        figures::write_file(&dir.join(format!("{prefix}_layer{l}_mean_weights.csv")), matrix_csv(&self.mean_w, self.steps).as_bytes())?;
        for (m, w) in &self.components {
            figures::write_file(&dir.join(format!("{prefix}_layer{l}_unit{m}.csv")), matrix_csv(w, self.steps).as_bytes())?;
        }
        let doc = self.arrows_json(labels);
        figures::write_file(&dir.join(format!("{prefix}_layer{l}_arrows.json")), serde_json::to_string_pretty(&doc)?.as_bytes())
    }
}

/// A dense `[n, n]` matrix as CSV, one row per `t`.
fn matrix_csv(w: &[f32], n: usize) -> String {
    let mut s = String::with_capacity(n * n * 4);
    s.push_str("t\\j");
    for j in 0..n {
        let _ = write!(s, ",{j}");
    }
    s.push('\n');
    for t in 0..n {
        let _ = write!(s, "{t}");
        for &x in &w[t * n..(t + 1) * n] {
            if x == 0.0 {
                s.push_str(",0");
            } else {
                let _ = write!(s, ",{x}");
            }
        }
        s.push('\n');
    }
    s
}

fn short(s: &str) -> String {
    let c: Vec<char> = s.chars().collect();
    if c.len() > 12 {
        c[..11].iter().collect::<String>() + "…"
    } else {
        s.to_string()
    }
}

/// The RAN weights of every layer that is a RAN.
#[derive(Clone, Debug)]
pub struct RanAnalysis {
    pub layers: Vec<Influence>,
}

/// Compute the weights of one RAN layer from its workspace after a batch-1 forward: the gates
/// and the content as the cell traces them (`Recurrent::trace`), the initial state from `st`.
pub fn layer_weights(layer: usize, cell: &Cell, ws: &Workspace<f32>, comps: &[usize]) -> Influence {
    let (h, n) = (cell.sizes().hidden, ws.steps);
    assert_eq!(ws.batch, 1, "the analyses read a batch-1 forward");
    let traces = cell.trace(ws);
    let named = |name: &str| &traces.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("the RAN traces {name}")).values;
    let (content, gates_i, gates_f) = (named("content"), named("i"), named("f"));
    let xp = |t: usize| &content[t * h..(t + 1) * h];
    let gi = |t: usize| &gates_i[t * h..(t + 1) * h];
    let gf = |t: usize| &gates_f[t * h..(t + 1) * h];
    let st = |t: usize| &ws.st[t * h..(t + 1) * h];
    let c0 = st(0);
    let rows: Vec<Row> = (0..n)
        .into_par_iter()
        .map(|t| {
            let mut p = vec![1f64; h];
            let mut rec = vec![0f64; h];
            let mut row = vec![0f32; t + 1];
            let mut mean = vec![0f32; t + 1];
            let mut crow: Vec<Vec<f32>> = comps.iter().map(|_| vec![0f32; t + 1]).collect();
            for j in (0..=t).rev() {
                let (i, f, ct) = (gi(j), gf(j), xp(j));
                for (k, &m) in comps.iter().enumerate() {
                    crow[k][j] = (i[m] as f64 * p[m]) as f32;
                }
                let (mut mx, mut sum) = (0f64, 0f64);
                for m in 0..h {
                    let w = i[m] as f64 * p[m];
                    rec[m] += w * ct[m] as f64;
                    mx = mx.max(w);
                    sum += w;
                    p[m] *= f[m] as f64;
                }
                row[j] = mx as f32;
                mean[j] = (sum / h as f64) as f32;
            }
            // The initial state's term: (Π_{k ≤ t} f_k) ∘ c_0.
            let mut init_max = 0f64;
            for m in 0..h {
                if c0[m] != 0.0 {
                    rec[m] += p[m] * c0[m] as f64;
                    init_max = init_max.max(p[m]);
                }
            }
            let c = st(t + 1);
            let err2: f64 = rec.iter().zip(c).map(|(&r, &c)| (r - c as f64).powi(2)).sum();
            let ref2: f64 = c.iter().map(|&c| (c as f64).powi(2)).sum();
            Row { max_w: row, mean_w: mean, init_max, comps: crow, err2, ref2, sum_err: 0.0 }
        })
        .collect();
    Influence::from_rows(layer, "ran", h, comps, rows, false)
}

/// The weights of every RAN layer of `model` over the input of the latest batch-1 forward in
/// `cell_ws` (one workspace per layer). `None` when no layer is a RAN.
pub fn analyze(model: &Model, cell_ws: &[Workspace<f32>], comps: &[usize]) -> Result<Option<RanAnalysis>> {
    let mut layers = Vec::new();
    for (l, cell) in model.cells.iter().enumerate() {
        if let Cell::Ran(r) = cell {
            check_components(comps, r.hidden).with_context(|| format!("layer {l}"))?;
            layers.push(layer_weights(l, cell, &cell_ws[l], comps));
        }
    }
    Ok((!layers.is_empty()).then_some(RanAnalysis { layers }))
}

/// Refuse unit indices outside the layer.
pub(crate) fn check_components(comps: &[usize], hidden: usize) -> Result<()> {
    if let Some(&m) = comps.iter().find(|&&m| m >= hidden) {
        anyhow::bail!("--components: unit {m} does not exist (the layer has {hidden} units, numbered from 0)");
    }
    Ok(())
}

impl RanAnalysis {
    pub fn summary(&self, labels: &[String]) -> String {
        let mut s = String::from("RAN weights w_j^t = i_j ∘ Π_{k=j+1..t} f_k (Lee, Levy & Zettlemoyer, sections 2.2 and 5):\n");
        for l in &self.layers {
            s.push_str(&l.summary(labels, "c_t"));
        }
        s
    }

    pub fn html(&self, labels: &[String]) -> String {
        let mut s = String::from("<h2>RAN weights over past content layers</h2>\n");
        s.push_str(
            "<p>Each state is a component-wise weighted sum of the content layers read so far: \
             c<sub>t</sub> = Σ<sub>j≤t</sub> w<sub>j</sub><sup>t</sup> ∘ c̃<sub>j</sub>, with \
             w<sub>j</sub><sup>t</sup> = i<sub>j</sub> ∘ Π<sub>k=j+1..t</sub> f<sub>k</sub> \
             (Lee, Levy &amp; Zettlemoyer, sections 2.2 and 5). The reconstruction error compares this sum, \
             computed in double precision, with the forward pass's c<sub>t</sub>.</p>\n",
        );
        for l in &self.layers {
            s.push_str(&l.html(labels));
        }
        s
    }

    pub fn write_data(&self, dir: &Path, labels: &[String]) -> Result<()> {
        for l in &self.layers {
            l.write_data(dir, "ran", labels)?;
        }
        Ok(())
    }
}
