//! The text summary and the self-contained HTML report of `rnnlens explain`.
//!
//! The model reads the text once, batch 1, from its initial state, dropout off, in a single
//! window of at most [`MAX_TOKENS`] tokens (the pairwise analyses cost `O(T²·H)` time and keep
//! `T²` numbers per layer). The report directory receives `index.html` (inline SVG and CSS, no
//! scripts, no external resources), `summary.txt`, `tokens.json`, and the raw numbers of every
//! figure as CSV/JSON; every file is written atomically.

use super::attention::{self, AttentionAnalysis};
use super::isan::{self, IsanAnalysis};
use super::pca::PcaAnalysis;
use super::ran::{self, RanAnalysis};
use crate::cells::Cell;
use crate::data::checkpoint::write_atomic;
use crate::data::Level;
use crate::model::lm::Lm;
use crate::model::ModelWs;
pub use crate::render::esc;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The longest text `explain` reads, in tokens.
pub const MAX_TOKENS: usize = 2000;
/// The most units `--components` may name.
pub const MAX_COMPONENTS: usize = 8;
/// Tokens drawn in the arc figure (all of them are in the JSON).
pub const ARC_TOKENS: usize = 300;
/// Cells per side of a heat map (longer texts are shown in blocks, each the maximum of its
/// block; the CSV has every value).
pub const HEAT_CELLS: usize = 150;

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// units whose individual weights `w_j^t(m)` are wanted (`--components`)
    pub components: Vec<usize>,
}

/// Run the model over `tokens` (batch 1, from the initial state, no dropout) and return the
/// workspaces: `ws.cell_ws[l]` holds layer `l`'s values, `ws.ys[l]` its outputs.
pub fn forward(lm: &Lm, tokens: &[u32]) -> Result<ModelWs<f32>> {
    if lm.model.config.input_size.is_some() {
        bail!("explain reads language models; this checkpoint is a sequence-task model (it reads vectors, not a text)");
    }
    if tokens.is_empty() {
        bail!("the text is empty: there is nothing to explain");
    }
    if tokens.len() > MAX_TOKENS {
        bail!(
            "the text has {} tokens; explain reads at most {MAX_TOKENS} (its pairwise analyses take O(T²·H) time and T² \
             numbers per layer): shorten the text",
            tokens.len()
        );
    }
    let v = lm.model.vocab_size();
    if let Some(&t) = tokens.iter().find(|&&t| t as usize >= v) {
        bail!("token id {t} is outside the vocabulary of {v}");
    }
    let mut state = lm.model.initial_state::<f32>(1);
    let mut ws = ModelWs::default();
    lm.model.forward(&lm.w, tokens, tokens.len(), 1, &mut state, &mut ws, None);
    Ok(ws)
}

/// A printable label per token (characters: spaces and control characters made visible).
pub fn labels(lm: &Lm, tokens: &[u32]) -> Vec<String> {
    let tok = &lm.tok;
    tokens
        .iter()
        .map(|&id| match tok.level {
            Level::Word => tok.tokens().get(id as usize).cloned().unwrap_or_else(|| "\u{FFFD}".into()),
            Level::Char | Level::Byte => {
                let s = tok.decode(&[id]);
                if tok.level == Level::Byte && s.contains('\u{FFFD}') {
                    let b = tok.decode_bytes(&[id]);
                    return b.iter().map(|x| format!("\\x{x:02x}")).collect();
                }
                s.chars()
                    .map(|c| match c {
                        ' ' => "␣".to_string(),
                        '\n' => "↵".to_string(),
                        '\t' => "⇥".to_string(),
                        c if c.is_control() => format!("\\u{:04x}", c as u32),
                        c => c.to_string(),
                    })
                    .collect()
            }
        })
        .collect()
}

/// Everything `explain` computed for one text.
pub struct Explanation {
    pub cell: String,
    pub layers: usize,
    pub tokens: Vec<u32>,
    pub labels: Vec<String>,
    pub ran: Option<RanAnalysis>,
    pub attention: Option<AttentionAnalysis>,
    pub pca: PcaAnalysis,
    /// the ISAN's analyses, when the model is an ISAN
    pub isan: Option<IsanSection>,
    /// one line per analysis that does not apply, saying why
    pub not_applicable: Vec<String>,
}

/// The ISAN's analyses ([`super::isan`]) with their rendered summary and HTML section.
pub struct IsanSection {
    pub analysis: IsanAnalysis,
    pub summary: String,
    pub html: String,
}

fn isan_section(lm: &Lm, tokens: &[u32]) -> Result<IsanSection> {
    let analysis = isan::analyze(lm, tokens)?;
    let summary = analysis.summary(lm);
    let html = analysis.html(lm);
    Ok(IsanSection { analysis, summary, html })
}

/// Why a cell's state is not a weighted sum of per-step terms (for the weight analyses).
fn no_decomposition(cell: &Cell) -> &'static str {
    match cell {
        Cell::Lstm(_) | Cell::LstmNoOutputGate(_) => {
            "its content c~_t = tanh(W x_t + U h_{t-1}) reads the previous state through a nonlinearity, so c_t is not \
             a weighted sum of terms fixed when each input was read"
        }
        Cell::LstmSimpleContent(_) => {
            "this LSTM ablation keeps the output gate and tanh on c_t, so h_t is not a weighted sum of past contents \
             (rnnlens computes the weights for RAN layers only)"
        }
        Cell::Gru(_) => {
            "its candidate tanh(W x_t + U (r_t ∘ h_{t-1})) reads the previous state through a nonlinearity, so h_t is \
             not a weighted sum of terms fixed when each input was read"
        }
        Cell::Rnn(_) => "a simple RNN applies a nonlinearity to W h_{t-1} at every step; no gates weigh the past inputs",
        Cell::Isan(_) | Cell::Linear(_) => {
            "its state is linear given the input symbols; its decomposition is the ISAN contribution analysis, not gate weights"
        }
        Cell::Ran(_) => "a RAN's weights are not normalized; see the RAN weights instead",
        Cell::Rwa(_) | Cell::Rda(_) => "an RWA/RDA gets the effective attention weights instead",
    }
}

fn cell_kind(cell: &Cell) -> &'static str {
    match cell {
        Cell::Ran(_) => "ran",
        Cell::Lstm(_) => "lstm",
        Cell::Gru(_) => "gru",
        Cell::Rnn(_) => "rnn",
        Cell::Isan(_) => "isan",
        Cell::Linear(_) => "linear",
        Cell::Rwa(_) => "rwa",
        Cell::Rda(_) => "rda",
        Cell::LstmSimpleContent(_) => "lstm-simple-content",
        Cell::LstmNoOutputGate(_) => "lstm-no-output-gate",
    }
}

/// Compute every analysis that applies to `lm`'s cell over `tokens`.
pub fn explain(lm: &Lm, tokens: &[u32], opts: &Options) -> Result<Explanation> {
    if opts.components.len() > MAX_COMPONENTS {
        bail!("--components names {} units; at most {MAX_COMPONENTS} are drawn", opts.components.len());
    }
    let mut comps = opts.components.clone();
    comps.sort_unstable();
    comps.dedup();
    if tokens.len() < 2 {
        bail!("the text has {} token(s); explain needs at least 2", tokens.len());
    }
    let ws = forward(lm, tokens)?;
    let cells = &lm.model.cells;
    let ran = ran::analyze(lm, &ws.cell_ws, &comps)?;
    let attention = attention::analyze(lm, &ws.cell_ws, &comps)?;
    let top = cells.len() - 1;
    let pca = PcaAnalysis::new(top, &ws.ys[top], tokens.len(), cells[top].sizes().output)?;
    let is_isan = matches!(cells[0], Cell::Isan(_));
    let isan = if is_isan { Some(isan_section(lm, tokens)?) } else { None };

    let mut not_applicable = Vec::new();
    let others = |pred: fn(&Cell) -> bool| -> String {
        let mut kinds: Vec<&Cell> = cells.iter().filter(|c| !pred(c)).collect();
        kinds.dedup_by(|a, b| cell_kind(a) == cell_kind(b));
        kinds.iter().map(|c| format!("{}: {}", cell_kind(c), no_decomposition(c))).collect::<Vec<_>>().join("; ")
    };
    let others_att = |pred: fn(&Cell) -> bool| -> String {
        let mut kinds: Vec<&Cell> = cells.iter().filter(|c| !pred(c)).collect();
        kinds.dedup_by(|a, b| cell_kind(a) == cell_kind(b));
        let why = |c: &Cell| match c {
            Cell::Ran(_) => no_decomposition(c),
            _ => "its state is not a running weighted average n_t/d_t of values written at each step",
        };
        kinds.iter().map(|c| format!("{}: {}", cell_kind(c), why(c))).collect::<Vec<_>>().join("; ")
    };
    if ran.is_none() {
        not_applicable.push(format!("RAN weights w_j^t: apply to RAN layers only ({})", others(|c| matches!(c, Cell::Ran(_)))));
    }
    if attention.is_none() {
        not_applicable.push(format!(
            "RWA/RDA effective attention weights: apply to RWA and RDA layers only ({})",
            others_att(|c| matches!(c, Cell::Rwa(_) | Cell::Rda(_)))
        ));
    }
    if ran.is_none() && attention.is_none() && !comps.is_empty() {
        not_applicable.push("per-unit weights (--components): they belong to the RAN/RWA/RDA weights; ignored".to_string());
    }
    if !is_isan {
        not_applicable.push(format!(
            "ISAN contribution analyses: apply to ISAN models only (this model's cell is {})",
            cell_kind(&cells[0])
        ));
    }
    let cell = if lm.model.config.cell_name.is_empty() { cell_kind(&cells[0]).to_string() } else { lm.model.config.cell_name.clone() };
    Ok(Explanation {
        cell,
        layers: cells.len(),
        tokens: tokens.to_vec(),
        labels: labels(lm, tokens),
        ran,
        attention,
        pca,
        isan,
        not_applicable,
    })
}

impl Explanation {
    /// The compact text summary `explain` prints.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "explain: {} model, {} layer{}, {} tokens read in one window from the initial state\n",
            self.cell,
            self.layers,
            if self.layers == 1 { "" } else { "s" },
            self.tokens.len()
        );
        if let Some(r) = &self.ran {
            s.push_str(&r.summary(&self.labels));
        }
        if let Some(a) = &self.attention {
            s.push_str(&a.summary(&self.labels));
        }
        if let Some(i) = &self.isan {
            s.push_str(&i.summary);
            if !i.summary.ends_with('\n') {
                s.push('\n');
            }
        }
        s.push_str(&self.pca.summary());
        if !self.not_applicable.is_empty() {
            s.push_str("Not applicable to this model:\n");
            for n in &self.not_applicable {
                let _ = writeln!(s, "  - {n}");
            }
        }
        s
    }

    /// The whole report page.
    pub fn html(&self) -> String {
        let mut s = String::from(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>rnnlens explain</title>\n<style>\n\
             body { font-family: sans-serif; max-width: 1100px; margin: 1em auto; padding: 0 1em; color: #222; }\n\
             pre { background: #f4f4f4; padding: 0.6em; overflow-x: auto; }\n\
             .fig { overflow-x: auto; margin-bottom: 1em; }\n\
             .text { font-family: monospace; white-space: pre-wrap; background: #f8f8f8; padding: 0.5em; }\n\
             </style>\n</head>\n<body>\n",
        );
        let _ = writeln!(s, "<h1>rnnlens explain: {} model</h1>", esc(&self.cell));
        let _ = writeln!(s, "<p>{} layer(s), {} tokens. The raw numbers of every figure are in the CSV and JSON files beside this page.</p>", self.layers, self.tokens.len());
        let _ = writeln!(s, "<div class=\"text\">{}</div>", esc(&self.labels.join(" ")));
        let _ = writeln!(s, "<h2>Summary</h2>\n<pre>{}</pre>", esc(&self.summary()));
        if let Some(r) = &self.ran {
            s.push_str(&r.html(&self.labels));
        }
        if let Some(a) = &self.attention {
            s.push_str(&a.html(&self.labels));
        }
        if let Some(i) = &self.isan {
            s.push_str(&i.html);
        }
        s.push_str(&self.pca.html());
        if !self.not_applicable.is_empty() {
            s.push_str("<h2>Analyses that do not apply</h2>\n<ul>\n");
            for n in &self.not_applicable {
                let _ = writeln!(s, "<li>{}</li>", esc(n));
            }
            s.push_str("</ul>\n");
        }
        s.push_str("</body>\n</html>\n");
        s
    }

    /// Write `index.html`, `summary.txt`, `tokens.json` and the data files into `dir`.
    pub fn write_report(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        if let Some(r) = &self.ran {
            r.write_data(dir, &self.labels)?;
        }
        if let Some(a) = &self.attention {
            a.write_data(dir, &self.labels)?;
        }
        if let Some(i) = &self.isan {
            i.analysis.write_data(dir)?;
        }
        self.pca.write_data(dir)?;
        let toks = json!({ "ids": self.tokens, "labels": self.labels });
        write_file(&dir.join("tokens.json"), serde_json::to_string(&toks)?.as_bytes())?;
        write_file(&dir.join("summary.txt"), self.summary().as_bytes())?;
        write_file(&dir.join("index.html"), self.html().as_bytes())
    }
}

/// Write one report file atomically.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, bytes).with_context(|| format!("writing {}", path.display()))
}


static SVG_ID: AtomicUsize = AtomicUsize::new(0);

fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// The paper's figure: the tokens in a row, an arc from each token to its most influential
/// predecessor (arrow head at the predecessor). The first [`ARC_TOKENS`] tokens.
pub fn arcs_svg(labels: &[String], preds: &[Option<usize>]) -> String {
    let n = labels.len().min(ARC_TOKENS);
    let mut x = Vec::with_capacity(n);
    let mut acc = 10.0f64;
    for l in &labels[..n] {
        let w = (char_len(l) as f64 * 7.5 + 10.0).max(16.0);
        x.push(acc + w / 2.0);
        acc += w;
    }
    let width = acc + 10.0;
    let height_of = |d: f64| (10.0 + 0.35 * d).min(180.0);
    let mut top = 20.0f64;
    for t in 0..n {
        if let Some(p) = preds[t] {
            top = top.max(height_of(x[t] - x[p]) * 0.75);
        }
    }
    let y0 = top + 15.0;
    let h = y0 + 25.0;
    let id = SVG_ID.fetch_add(1, Ordering::Relaxed);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<div class=\"fig\"><svg width=\"{width:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {width:.0} {h:.0}\" role=\"img\">\n\
         <defs><marker id=\"ah{id}\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto-start-reverse\">\
         <path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#c0392b\"/></marker></defs>"
    );
    for t in 0..n {
        if let Some(p) = preds[t] {
            let hh = height_of(x[t] - x[p]);
            let _ = writeln!(
                s,
                "<path d=\"M {:.1} {:.1} C {:.1} {:.1} {:.1} {:.1} {:.1} {:.1}\" fill=\"none\" stroke=\"#c0392b\" stroke-width=\"1\" marker-end=\"url(#ah{id})\"><title>{} ← {}</title></path>",
                x[t],
                y0 - 12.0,
                x[t],
                y0 - 12.0 - hh,
                x[p],
                y0 - 12.0 - hh,
                x[p],
                y0 - 12.0,
                esc(&labels[t]),
                esc(&labels[p])
            );
        }
    }
    for t in 0..n {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-family=\"monospace\" font-size=\"12\" text-anchor=\"middle\">{}</text>",
            x[t],
            y0 + 2.0,
            esc(&labels[t])
        );
    }
    s.push_str("</svg></div>\n");
    if labels.len() > n {
        let _ = writeln!(s, "<p>(The first {n} of {} tokens; every arrow is in the JSON file.)</p>", labels.len());
    }
    s
}

/// A lower-triangular `[n, n]` heat map of values in `[0, 1]` (white to dark blue), in blocks
/// (each the maximum of its block) when `n` exceeds [`HEAT_CELLS`].
pub fn heatmap_svg(w: &[f32], n: usize, labels: &[String]) -> String {
    let b = n.div_ceil(HEAT_CELLS).max(1);
    let m = n.div_ceil(b);
    let cell = (600 / m.max(1)).clamp(3, 16) as f64;
    let named = b == 1 && m <= 60;
    let margin = if named { 80.0 } else { 40.0 };
    let side = cell * m as f64;
    let (width, height) = (margin + side + 70.0, margin + side + 30.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<div class=\"fig\"><svg width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\">"
    );
    let _ = writeln!(s, "<rect x=\"{margin}\" y=\"{margin}\" width=\"{side}\" height=\"{side}\" fill=\"#ffffff\" stroke=\"#999\"/>");
    for bt in 0..m {
        for bj in 0..=bt {
            let mut v = 0f32;
            for t in bt * b..((bt + 1) * b).min(n) {
                for j in bj * b..((bj + 1) * b).min(t + 1) {
                    v = v.max(w[t * n + j]);
                }
            }
            if v <= 0.004 {
                continue;
            }
            let (xx, yy) = (margin + bj as f64 * cell, margin + bt as f64 * cell);
            let _ = write!(s, "<rect x=\"{xx}\" y=\"{yy}\" width=\"{cell}\" height=\"{cell}\" fill=\"{}\">", color(v as f64));
            if named {
                let _ = write!(s, "<title>t={bt} {} ← j={bj} {}: {v:.3}</title>", esc(&labels[bt]), esc(&labels[bj]));
            }
            s.push_str("</rect>\n");
        }
    }
    if named {
        for (i, l) in labels.iter().enumerate().take(n) {
            let c = margin + (i as f64 + 0.5) * cell;
            let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-family=\"monospace\" font-size=\"10\" text-anchor=\"end\">{}</text>", margin - 3.0, c + 3.0, esc(l));
            let _ = writeln!(
                s,
                "<text x=\"{c:.1}\" y=\"{:.1}\" font-family=\"monospace\" font-size=\"10\" transform=\"rotate(-60 {c:.1} {:.1})\">{}</text>",
                margin - 3.0,
                margin - 3.0,
                esc(l)
            );
        }
    } else {
        let _ = writeln!(s, "<text x=\"{margin}\" y=\"{:.0}\" font-size=\"11\">j (past position) →, blocks of {b}</text>", margin - 8.0);
        let _ = writeln!(s, "<text x=\"12\" y=\"{margin}\" font-size=\"11\" transform=\"rotate(90 12 {margin})\">t (current position) →</text>");
    }
    // Colour scale.
    let lx = margin + side + 15.0;
    for k in 0..10 {
        let v = 1.0 - k as f64 / 9.0;
        let _ = writeln!(s, "<rect x=\"{lx}\" y=\"{:.1}\" width=\"14\" height=\"12\" fill=\"{}\" stroke=\"#ccc\"/>", margin + k as f64 * 12.0, color(v));
    }
    let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"10\">1</text>", lx + 18.0, margin + 10.0);
    let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"10\">0</text>", lx + 18.0, margin + 118.0);
    s.push_str("</svg></div>\n");
    s
}

fn color(v: f64) -> String {
    let v = v.clamp(0.0, 1.0);
    let mix = |a: f64, b: f64| (a + (b - a) * v).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(255.0, 8.0), mix(255.0, 48.0), mix(255.0, 107.0))
}

/// Points `(k+1, values[k])` with a log-scale y axis (values ≤ 0 are left out).
pub fn log_plot_svg(values: &[f64], xlabel: &str, ylabel: &str) -> String {
    let pos: Vec<(usize, f64)> = values.iter().enumerate().filter(|(_, &v)| v > 1e-300).map(|(k, &v)| (k + 1, v)).collect();
    let (w, h, ml, mb, mt, mr) = (640.0, 320.0, 70.0, 45.0, 15.0, 20.0);
    let mut s = String::new();
    let _ = writeln!(s, "<div class=\"fig\"><svg width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\">");
    if pos.is_empty() {
        s.push_str("<text x=\"20\" y=\"40\">no variance</text></svg></div>\n");
        return s;
    }
    let vmax = pos.iter().map(|p| p.1).fold(0.0, f64::max);
    let vmin = pos.iter().map(|p| p.1).fold(f64::INFINITY, f64::min).max(vmax * 1e-16);
    let (d0, d1) = (vmin.log10().floor(), vmax.log10().ceil().max(vmin.log10().floor() + 1.0));
    let n = values.len().max(2);
    let px = |k: usize| ml + (k as f64 - 1.0) / (n as f64 - 1.0) * (w - ml - mr);
    let py = |v: f64| mt + (d1 - v.max(vmin).log10()) / (d1 - d0) * (h - mt - mb);
    let _ = writeln!(s, "<rect x=\"{ml}\" y=\"{mt}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>", w - ml - mr, h - mt - mb);
    let mut d = d0;
    while d <= d1 + 0.5 {
        let y = py(10f64.powf(d));
        let _ = writeln!(s, "<line x1=\"{ml}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/>", w - mr);
        let _ = writeln!(s, "<text x=\"{}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">1e{d}</text>", ml - 5.0, y + 4.0);
        d += 1.0;
    }
    let pts: Vec<String> = pos.iter().map(|&(k, v)| format!("{:.1},{:.1}", px(k), py(v))).collect();
    let _ = writeln!(s, "<polyline points=\"{}\" fill=\"none\" stroke=\"#2c7fb8\" stroke-width=\"1.5\"/>", pts.join(" "));
    if pos.len() <= 200 {
        for &(k, v) in &pos {
            let _ = writeln!(s, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"#2c7fb8\"><title>{k}: {v:.3e}</title></circle>", px(k), py(v));
        }
    }
    for k in [1, n.div_ceil(2), n] {
        let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{k}</text>", px(k), h - mb + 15.0);
    }
    let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">{}</text>", (ml + w - mr) / 2.0, h - 8.0, esc(xlabel));
    let _ = writeln!(s, "<text x=\"14\" y=\"{:.0}\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.0})\">{}</text>", h / 2.0, h / 2.0, esc(ylabel));
    s.push_str("</svg></div>\n");
    s
}
