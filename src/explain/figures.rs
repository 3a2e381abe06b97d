//! The figures of explain's report as standalone SVG: the RAN's arcs and heat map, log-scale
//! spectra, the ISAN's matrices, line plots and scatters; token labels and the atomic write of
//! report files. Escaping is `crate::render::esc`, the one for every layer.

use crate::data::checkpoint::write_atomic;
use crate::data::Level;
use crate::model::lm::Lm;
use crate::render::esc;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A scatter plot shows at most this many points (those with the largest x).
pub const MAX_SCATTER: usize = 1500;
/// Cells per side of a heat map (longer texts are shown in blocks, each the maximum of its
/// block; the CSV has every value).
pub const HEAT_CELLS: usize = 150;

/// Tokens drawn in the arc figure (all of them are in the JSON).
pub const ARC_TOKENS: usize = 300;

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

/// Write one report file atomically.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, bytes).with_context(|| format!("writing {}", path.display()))
}


pub static SVG_ID: AtomicUsize = AtomicUsize::new(0);

pub fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// The widest line of [`arcs_svg`], in pixels: the report's column (1100 px less its padding),
/// so that the page never scrolls sideways.
const ARC_LINE_WIDTH: f64 = 1040.0;

/// The paper's figure: the tokens in a row, an arc from each token to its most influential
/// predecessor (arrow head at the predecessor). The first [`ARC_TOKENS`] tokens, in lines of
/// at most [`ARC_LINE_WIDTH`]; an arc whose predecessor is on an earlier line runs dashed to
/// the line's start (its tooltip names both).
pub fn arcs_svg(labels: &[String], preds: &[Option<usize>]) -> String {
    let n = labels.len().min(ARC_TOKENS);
    let widths: Vec<f64> = labels[..n].iter().map(|l| (char_len(l) as f64 * 7.5 + 10.0).max(16.0)).collect();
    let mut s = String::new();
    let (mut start, mut acc) = (0, 0.0);
    for t in 0..=n {
        if t == n || (acc + widths[t] > ARC_LINE_WIDTH - 20.0 && t > start) {
            s.push_str(&arc_line(labels, preds, &widths, start..t));
            (start, acc) = (t, 0.0);
        }
        if t < n {
            acc += widths[t];
        }
    }
    if labels.len() > n {
        let _ = writeln!(s, "<p>(The first {n} of {} tokens; every arrow is in the JSON file.)</p>", labels.len());
    }
    s
}

/// One line of [`arcs_svg`]: the tokens `line` and the arcs that end on them.
fn arc_line(labels: &[String], preds: &[Option<usize>], widths: &[f64], line: std::ops::Range<usize>) -> String {
    let mut x = vec![0.0; line.end];
    let mut acc = 10.0f64;
    for t in line.clone() {
        x[t] = acc + widths[t] / 2.0;
        acc += widths[t];
    }
    let width = acc + 10.0;
    // where an arc from t lands: its predecessor, or this line's start for one on an earlier line
    let to = |p: usize| if p >= line.start { x[p] } else { 3.0 };
    let height_of = |d: f64| (10.0 + 0.35 * d).min(180.0);
    let mut top = 20.0f64;
    for t in line.clone() {
        if let Some(p) = preds[t] {
            top = top.max(height_of(x[t] - to(p)) * 0.75);
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
    for t in line.clone() {
        if let Some(p) = preds[t] {
            let hh = height_of(x[t] - to(p));
            let (dash, note) = if p < line.start { (" stroke-dasharray=\"4 3\"", " (on an earlier line)") } else { ("", "") };
            let _ = writeln!(
                s,
                "<path d=\"M {:.1} {:.1} C {:.1} {:.1} {:.1} {:.1} {:.1} {:.1}\" fill=\"none\" stroke=\"#c0392b\" stroke-width=\"1\"{dash} marker-end=\"url(#ah{id})\"><title>{} ← {} (position {p}){note}</title></path>",
                x[t],
                y0 - 12.0,
                x[t],
                y0 - 12.0 - hh,
                to(p),
                y0 - 12.0 - hh,
                to(p),
                y0 - 12.0,
                esc(&labels[t]),
                esc(&labels[p])
            );
        }
    }
    for t in line {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-family=\"monospace\" font-size=\"12\" text-anchor=\"middle\">{}</text>",
            x[t],
            y0 + 2.0,
            esc(&labels[t])
        );
    }
    s.push_str("</svg></div>\n");
    s
}

/// A lower-triangular `[n, n]` heat map of non-negative values, white to dark blue scaled to
/// the largest value (the colour scale says which), in blocks (each the maximum of its block)
/// when `n` exceeds [`HEAT_CELLS`]. Tokens label the rows and columns: every token when they
/// fit, else the first token of every few blocks, with its position.
pub fn heatmap_svg(w: &[f32], n: usize, labels: &[String]) -> String {
    let b = n.div_ceil(HEAT_CELLS).max(1);
    let m = n.div_ceil(b);
    let cell = (600 / m.max(1)).clamp(3, 16) as f64;
    let named = b == 1 && m <= 60;
    let margin = 90.0;
    let side = cell * m as f64;
    let (width, height) = (margin + side + 80.0, margin + side + 30.0);
    let mut blocks = vec![0f32; m * m];
    for bt in 0..m {
        for bj in 0..=bt {
            let mut v = 0f32;
            for t in bt * b..((bt + 1) * b).min(n) {
                for j in bj * b..((bj + 1) * b).min(t + 1) {
                    v = v.max(w[t * n + j]);
                }
            }
            blocks[bt * m + bj] = v;
        }
    }
    let top = blocks.iter().copied().fold(0f32, f32::max);
    let scale = if top > 0.0 { top } else { 1.0 };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<div class=\"fig\"><svg width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\">"
    );
    let _ = writeln!(s, "<rect x=\"{margin}\" y=\"{margin}\" width=\"{side}\" height=\"{side}\" fill=\"#ffffff\" stroke=\"#999\"/>");
    for bt in 0..m {
        for bj in 0..=bt {
            let v = blocks[bt * m + bj];
            if v <= 0.004 * scale {
                continue;
            }
            let (xx, yy) = (margin + bj as f64 * cell, margin + bt as f64 * cell);
            let _ = write!(s, "<rect x=\"{xx}\" y=\"{yy}\" width=\"{cell}\" height=\"{cell}\" fill=\"{}\">", blues((v / scale) as f64));
            if named {
                let _ = write!(s, "<title>t={bt} {} ← j={bj} {}: {v:.3}</title>", esc(&labels[bt]), esc(&labels[bj]));
            } else {
                let _ = write!(s, "<title>t={}..{} ← j={}..{}: {v:.3}</title>", bt * b, ((bt + 1) * b).min(n) - 1, bj * b, ((bj + 1) * b).min(n) - 1);
            }
            s.push_str("</rect>\n");
        }
    }
    // Labels: every row when they fit, else about 25 of them.
    let every = if named { 1 } else { m.div_ceil(25) };
    for k in (0..m).step_by(every) {
        let pos = k * b;
        let text = if named { labels[pos].clone() } else { format!("{pos} {}", labels[pos]) };
        let text: String = text.chars().take(14).collect();
        let c = margin + (k as f64 + 0.5) * cell;
        let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" font-family=\"monospace\" font-size=\"10\" text-anchor=\"end\">{}</text>", margin - 3.0, c + 3.0, esc(&text));
        let _ = writeln!(
            s,
            "<text x=\"{c:.1}\" y=\"{:.1}\" font-family=\"monospace\" font-size=\"10\" transform=\"rotate(-60 {c:.1} {:.1})\">{}</text>",
            margin - 3.0,
            margin - 3.0,
            esc(&text)
        );
    }
    if !named {
        let _ = writeln!(s, "<text x=\"4\" y=\"{:.0}\" font-size=\"10\">blocks of {b} tokens</text>", height - 8.0);
    }
    let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"10\">j (past) →</text>", margin + side - 50.0, margin + side + 14.0);
    let _ = writeln!(s, "<text x=\"4\" y=\"{:.0}\" font-size=\"10\">↓ t (current)</text>", margin - 8.0);
    // Colour scale, from the largest value shown down to 0.
    let lx = margin + side + 15.0;
    for k in 0..10 {
        let v = 1.0 - k as f64 / 9.0;
        let _ = writeln!(s, "<rect x=\"{lx}\" y=\"{:.1}\" width=\"14\" height=\"12\" fill=\"{}\" stroke=\"#ccc\"/>", margin + k as f64 * 12.0, blues(v));
    }
    let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"10\">{}</text>", lx + 18.0, margin + 10.0, short_num(scale as f64));
    let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"10\">0</text>", lx + 18.0, margin + 118.0);
    s.push_str("</svg></div>\n");
    s
}

/// A number in at most about five characters (a scale's label).
pub fn short_num(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 0.01 && x.abs() < 1e4 {
        format!("{}", (x * 1000.0).round() / 1000.0)
    } else {
        format!("{x:.1e}")
    }
}

pub fn blues(v: f64) -> String {
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
    // Gridlines at exact decades (not clamped as the points are, which put the lowest label
    // on top of the next).
    let py_decade = |d: f64| mt + (d1 - d) / (d1 - d0) * (h - mt - mb);
    let mut d = d0;
    while d <= d1 + 0.5 {
        let y = py_decade(d);
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

// -------------------------------------------------------------------------------------------
// SVG
// -------------------------------------------------------------------------------------------

pub fn diverging(x: f64, m: f64) -> String {
    if !x.is_finite() {
        return "#fff".into();
    }
    let a = (x / m.max(1e-12)).clamp(-1.0, 1.0);
    let (r, g, b) = if a >= 0.0 {
        (255.0, 255.0 * (1.0 - a), 255.0 * (1.0 - a))
    } else {
        (255.0 * (1.0 + a), 255.0 * (1.0 + a), 255.0)
    };
    format!("rgb({},{},{})", r as u8, g as u8, b as u8)
}

/// Column labels of a heat map: upright where each is one character, else turned 60° (read
/// upwards) so that whole words fit over narrow columns; returns the SVG and the height they take.
pub(crate) fn column_labels(cols: &[String], left: f64, c: f64, top: f64) -> (String, f64) {
    let longest = cols.iter().map(|n| char_len(n)).max().unwrap_or(1);
    let mut o = String::new();
    if longest <= 1 {
        for (j, name) in cols.iter().enumerate() {
            let _ = writeln!(o, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>", left + c * j as f64 + c / 2.0, top - 4.0, esc(name));
        }
        return (o, 0.0);
    }
    let rise = 7.0 * longest.min(16) as f64 * 0.87;
    for (j, name) in cols.iter().enumerate() {
        let (x, y) = (left + c * j as f64 + c / 2.0 + 3.0, top + rise - 4.0);
        let short: String = name.chars().take(16).collect();
        let _ = writeln!(o, "<text x=\"{x:.1}\" y=\"{y:.1}\" transform=\"rotate(-60 {x:.1} {y:.1})\">{}</text>", esc(&short));
    }
    (o, rise)
}

/// A matrix of non-negative values (NaN: blank), grey scale, in cells large enough to read at
/// the report's width (its 48-token window: 768 px).
pub fn norm_matrix(rows: &[String], cols: &[String], m: &[Vec<f64>], max: Option<f64>) -> String {
    let (c, left) = (16.0, 40.0);
    let (labels, rise) = column_labels(cols, left, c, 18.0);
    let top = 18.0 + rise;
    let width = (left + c * cols.len() as f64 + 4.0).max(left + 240.0);
    let height = top + c * rows.len() as f64 + 34.0;
    let mx = max.unwrap_or_else(|| {
        m.iter()
            .flatten()
            .filter(|x| x.is_finite())
            .fold(1e-12f64, |a, &b| a.max(b))
    });
    let mut o = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-size=\"12\" font-family=\"monospace\">\n");
    o.push_str(&labels);
    for (i, name) in rows.iter().enumerate() {
        let y = top + c * i as f64;
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 4.0,
            y + c - 3.0,
            esc(name)
        );
        for (j, &v) in m[i].iter().enumerate() {
            if !v.is_finite() {
                continue;
            }
            let g = (255.0 * (1.0 - (v / mx).clamp(0.0, 1.0))) as u8;
            let _ = writeln!(
                o,
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{c}\" height=\"{c}\" fill=\"rgb({g},{g},{g})\"><title>{}: {v:.4}</title></rect>",
                left + c * j as f64,
                esc(&cols[j])
            );
        }
    }
    // Grey scale, 0 to the largest value.
    let sy = top + c * rows.len() as f64 + 10.0;
    for k in 0..10 {
        let g = (255.0 * (1.0 - k as f64 / 9.0)) as u8;
        let _ = writeln!(o, "<rect x=\"{:.1}\" y=\"{sy:.1}\" width=\"14\" height=\"12\" fill=\"rgb({g},{g},{g})\" stroke=\"#ccc\"/>", left + 14.0 * k as f64);
    }
    let _ = writeln!(o, "<text x=\"{:.1}\" y=\"{:.1}\">0 … {}</text>", left + 146.0, sy + 11.0, short_num(mx));
    o.push_str("</svg>\n");
    o
}

pub fn bounds(pts: impl Iterator<Item = (f64, f64)>) -> (f64, f64, f64, f64) {
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for (x, y) in pts.filter(|p| p.0.is_finite() && p.1.is_finite()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        return (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    (x0, x1, y0, y1)
}

pub const PW: f64 = 360.0;
pub const PH: f64 = 200.0;
pub const PL: f64 = 50.0;
pub const PB: f64 = 30.0;

pub fn axes(o: &mut String, b: (f64, f64, f64, f64), xl: &str, yl: &str) {
    let _ = writeln!(
        o,
        "<line x1=\"{PL}\" y1=\"{PH}\" x2=\"{:.0}\" y2=\"{PH}\" stroke=\"#000\"/><line x1=\"{PL}\" y1=\"10\" x2=\"{PL}\" y2=\"{PH}\" stroke=\"#000\"/>",
        PL + PW
    );
    let _ = writeln!(o, "<text x=\"{PL}\" y=\"{:.0}\">{:.3}</text><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{:.3}</text>", PH + 12.0, b.0, PL + PW, PH + 12.0, b.1);
    let _ = writeln!(o, "<text x=\"{:.0}\" y=\"{PH}\" text-anchor=\"end\">{:.3}</text><text x=\"{:.0}\" y=\"16\" text-anchor=\"end\">{:.3}</text>", PL - 3.0, b.2, PL - 3.0, b.3);
    let _ = writeln!(
        o,
        "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\">{}</text>",
        PL + PW / 2.0,
        PH + PB - 4.0,
        esc(xl)
    );
    let _ = writeln!(o, "<text x=\"12\" y=\"{:.0}\" transform=\"rotate(-90 12 {:.0})\" text-anchor=\"middle\">{}</text>", PH / 2.0, PH / 2.0, esc(yl));
}

pub fn px(b: (f64, f64, f64, f64), x: f64, y: f64) -> (f64, f64) {
    (
        PL + PW * (x - b.0) / (b.1 - b.0),
        PH - (PH - 10.0) * (y - b.2) / (b.3 - b.2),
    )
}

/// One line of a plot: its name, its points, its colour.
pub type Series<'a> = (&'a str, &'a [(f64, f64)], &'a str);

pub fn line_plot(series: &[Series], xl: &str, yl: &str) -> String {
    let b = bounds(series.iter().flat_map(|s| s.1.iter().copied()));
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" font-size=\"10\" font-family=\"sans-serif\">\n",
        PL + PW + 170.0,
        PH + PB
    );
    axes(&mut o, b, xl, yl);
    for (k, (name, pts, col)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(x, y)| {
                let (a, c) = px(b, x, y);
                format!("{a:.1},{c:.1}")
            })
            .collect();
        let _ = writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{col}\" stroke-width=\"1.5\" points=\"{}\"/>",
            path.join(" ")
        );
        let _ = writeln!(
            o,
            "<text x=\"{:.0}\" y=\"{:.0}\" fill=\"{col}\">{}</text>",
            PL + PW + 8.0,
            20.0 + 14.0 * k as f64,
            esc(name)
        );
    }
    o.push_str("</svg>\n");
    o
}

pub fn scatter(pts: &[(f64, f64)], xl: &str, yl: &str) -> String {
    let mut pts: Vec<(f64, f64)> = pts
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    if pts.len() > MAX_SCATTER {
        pts.sort_by(|a, b| b.0.total_cmp(&a.0));
        pts.truncate(MAX_SCATTER);
    }
    let pts = &pts[..];
    let b = bounds(pts.iter().copied());
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" font-size=\"10\" font-family=\"sans-serif\">\n",
        PL + PW + 10.0,
        PH + PB
    );
    axes(&mut o, b, xl, yl);
    for &(x, y) in pts.iter().filter(|p| p.0.is_finite() && p.1.is_finite()) {
        let (a, c) = px(b, x, y);
        let _ = writeln!(
            o,
            "<circle cx=\"{a:.1}\" cy=\"{c:.1}\" r=\"2.5\" fill=\"#36c\"/>"
        );
    }
    o.push_str("</svg>\n");
    o
}

/// A scatter plot of labelled points `(label, _, x, y)`, the label next to each point.
pub fn labelled_scatter(pts: &[(String, usize, f64, f64)], xl: &str, yl: &str) -> String {
    let pts: Vec<&(String, usize, f64, f64)> = pts
        .iter()
        .filter(|p| p.2.is_finite() && p.3.is_finite())
        .collect();
    let b = bounds(pts.iter().map(|p| (p.2, p.3)));
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" font-size=\"10\" font-family=\"sans-serif\">\n",
        PL + PW + 60.0,
        PH + PB
    );
    axes(&mut o, b, xl, yl);
    for p in pts {
        let (a, c) = px(b, p.2, p.3);
        let _ = writeln!(
            o,
            "<circle cx=\"{a:.1}\" cy=\"{c:.1}\" r=\"2.5\" fill=\"#36c\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            a + 4.0,
            c - 3.0,
            esc(&p.0)
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long sequence's arc row wraps into lines no wider than the report's column (a copy
    /// task's 120 steps drew one 2,100 px line that scrolled sideways), every arc still drawn,
    /// those from an earlier line dashed.
    #[test]
    fn the_arc_row_wraps_at_the_reports_width_and_keeps_every_arc() {
        let labels: Vec<String> = (0..120usize).map(|t| if t % 7 == 0 { "word".to_string() } else { "_".to_string() }).collect();
        let preds: Vec<Option<usize>> = (0..120usize).map(|t| (t > 0).then(|| t.saturating_sub(1 + t % 5))).collect();
        let svg = arcs_svg(&labels, &preds);
        let widths: Vec<f64> = svg.match_indices("<svg width=\"").map(|(i, m)| svg[i + m.len()..].split('"').next().unwrap().parse().unwrap()).collect();
        assert!(widths.len() >= 2 && widths.iter().all(|&w| w <= ARC_LINE_WIDTH), "{widths:?}");
        assert_eq!(svg.matches("marker-end=").count(), 119, "every arc drawn once");
        assert!(svg.contains("stroke-dasharray") && svg.contains("(on an earlier line)"));
        assert_eq!(svg.matches("<text ").count(), 120, "every token labelled once");
    }
}
