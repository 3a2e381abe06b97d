//! Line charts as standalone SVG: the training curves of `train` and `curves`, and the
//! learning curves of `task --compare`. One chart is a grid of panels; a series keeps its
//! colour in every panel, and one legend names them all.

use std::fmt::Write as _;

/// One line of a panel: `(x, y)` points in the order drawn. Points whose `y` cannot be shown
/// (not finite, or not positive on a log axis) are left out.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// a reference line (a baseline) rather than data: dashed, without point marks
    pub dashed: bool,
    /// its own colour instead of the index's
    pub colour: Option<&'static str>,
}

/// A second scale on a panel's right edge, a function of the left one.
#[derive(Clone, Debug)]
pub enum RightAxis {
    /// `exp(y)` (perplexity of a NLL in nats), with log ticks
    Exp(String),
    /// `y * k` (bits of a NLL in nats: `k = 1 / ln 2`)
    Scale(f64, String),
}

/// One plot of the grid.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    pub title: String,
    pub xlabel: String,
    pub ylabel: String,
    pub log_y: bool,
    pub right: Option<RightAxis>,
    /// series by index: series `i` of every panel is drawn in colour `i` under legend entry `i`
    pub series: Vec<Series>,
}

const COLOURS: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f", "#bcbd22", "#e377c2"];
const PANEL_W: f64 = 430.0;
const PANEL_H: f64 = 290.0;
const LEFT: f64 = 62.0;
const BOTTOM: f64 = 42.0;
const TOP: f64 = 26.0;
const RIGHT: f64 = 14.0;
/// The right margin of a panel with a [`RightAxis`].
const RIGHT_AXIS: f64 = 56.0;
/// The colour of reference lines (baselines).
pub const GREY: &str = "#7f7f7f";

/// Escape text for HTML and SVG (the one escape every figure and report uses).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// The colour series `i` is drawn in.
pub fn colour(i: usize) -> &'static str {
    COLOURS[i % COLOURS.len()]
}

/// A grid of `panels`, `columns` wide, under `title`, with a legend of the series labels
/// (taken from the first panel that has series `i`).
pub fn chart(title: &str, panels: &[Panel], columns: usize) -> String {
    let columns = columns.max(1);
    let rows = panels.len().div_ceil(columns).max(1);
    let labels: Vec<&Series> = (0..panels.iter().map(|p| p.series.len()).max().unwrap_or(0))
        .filter_map(|i| panels.iter().find_map(|p| p.series.get(i)))
        .collect();
    let legend_rows = labels.len().div_ceil(4);
    let head = 30.0 + 18.0 * legend_rows as f64;
    // A lone panel gets the width of two.
    let pw = if columns == 1 { 2.0 * PANEL_W } else { PANEL_W };
    let (w, h) = (pw * columns as f64, head + PANEL_H * rows as f64);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        w / 2.0,
        esc(title)
    );
    for (i, se) in labels.iter().enumerate() {
        let (lx, ly) = (20.0 + (w - 40.0) / 4.0 * (i % 4) as f64, 36.0 + 18.0 * (i / 4) as f64);
        let dash = if se.dashed { " stroke-dasharray=\"6 4\"" } else { "" };
        let c = se.colour.unwrap_or(colour(i));
        let _ = writeln!(s, "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{c}\" stroke-width=\"2.5\"{dash}/>", lx + 22.0);
        let _ = writeln!(s, "<text x=\"{}\" y=\"{}\">{}</text>", lx + 28.0, ly + 4.0, esc(&se.label));
    }
    for (k, p) in panels.iter().enumerate() {
        let (ox, oy) = (pw * (k % columns) as f64, head + PANEL_H * (k / columns) as f64);
        panel(&mut s, p, ox, oy, pw);
    }
    s.push_str("</svg>\n");
    s
}

/// Axis ticks: "nice" values (1, 2 or 5 times a power of ten) covering `[lo, hi]`.
fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|&st| st >= raw).unwrap_or(10.0 * mag);
    let mut v = Vec::new();
    let mut t = (lo / step).ceil() * step;
    while t <= hi + step * 1e-9 {
        v.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    v
}

/// Ticks of a log axis over `[lo, hi]` (positive): decades, and 2 and 5 within them when
/// fewer than three decades are shown; a range too narrow for two of those gets linear ticks.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (d0, d1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mults: &[f64] = if d1 - d0 <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let mut v = Vec::new();
    for d in d0..=d1 {
        for m in mults {
            let t = m * 10f64.powi(d);
            if t >= lo * (1.0 - 1e-9) && t <= hi * (1.0 + 1e-9) {
                v.push(t);
            }
        }
    }
    if v.len() < 2 {
        return ticks(lo, hi, 4).into_iter().filter(|&t| t > 0.0).collect();
    }
    v
}

fn label(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.0e}")
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn panel(s: &mut String, p: &Panel, ox: f64, oy: f64, pw: f64) {
    let shown = |y: f64| y.is_finite() && (!p.log_y || y > 0.0);
    let pts = p.series.iter().flat_map(|se| se.points.iter()).filter(|(x, y)| x.is_finite() && shown(*y));
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    // A few points far above the rest (a state that ran away once) would flatten every curve:
    // the axis stops above the rest and those points are marked at the top edge instead.
    let ceiling = (!p.log_y).then(|| outlier_ceiling(p)).flatten();
    if let Some(c) = ceiling {
        y1 = c;
    }
    let right = if p.right.is_some() { RIGHT_AXIS } else { RIGHT };
    let (l, r, t, b) = (ox + LEFT, ox + pw - right, oy + TOP, oy + PANEL_H - BOTTOM);
    let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">{}</text>", (l + r) / 2.0, oy + 16.0, esc(&p.title));
    let _ = writeln!(s, "<rect x=\"{l}\" y=\"{t}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>", r - l, b - t);
    let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", (l + r) / 2.0, b + 32.0, esc(&p.xlabel));
    let my = (t + b) / 2.0;
    let _ = writeln!(s, "<text x=\"{}\" y=\"{my}\" text-anchor=\"middle\" transform=\"rotate(-90 {} {my})\">{}</text>", ox + 14.0, ox + 14.0, esc(&p.ylabel));
    if !x0.is_finite() {
        let _ = writeln!(s, "<text x=\"{}\" y=\"{my}\" text-anchor=\"middle\" fill=\"#888\">no data yet</text>", (l + r) / 2.0);
        return;
    }
    // Steps and wall time start at zero.
    x0 = x0.min(0.0);
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if p.log_y {
        let pad = (y1 / y0).powf(0.04).max(1.02);
        (y0, y1) = (y0 / pad, y1 * pad);
    } else if y1 > y0 {
        let pad = (y1 - y0) * 0.04;
        (y0, y1) = (y0 - pad, y1 + pad);
    } else {
        (y0, y1) = (y0 - 0.5 * y0.abs().max(1.0), y1 + 0.5 * y1.abs().max(1.0));
    }
    let fy = |y: f64| if p.log_y { y.log10() } else { y };
    let px = |x: f64| l + (r - l) * (x - x0) / (x1 - x0);
    let py = |y: f64| b - (b - t) * (fy(y) - fy(y0)) / (fy(y1) - fy(y0));
    let yt = if p.log_y { log_ticks(y0, y1) } else { ticks(y0, y1, 5) };
    for v in yt {
        let y = py(v);
        let _ = writeln!(s, "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{r}\" y2=\"{y:.1}\" stroke=\"#eee\"/>");
        let _ = writeln!(s, "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", l - 4.0, y + 4.0, label(v));
    }
    if let Some(axis) = &p.right {
        right_axis(s, axis, (r, t, b, pw + ox), (y0, y1), &py);
    }
    for v in ticks(x0, x1, 5) {
        let x = px(v);
        let _ = writeln!(s, "<line x1=\"{x:.1}\" y1=\"{b}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#888\"/>", b + 4.0);
        let _ = writeln!(s, "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", b + 16.0, label(v));
    }
    if ceiling.is_some() {
        // Lines to the outliers leave through the frame's top, which clips them.
        let _ = writeln!(s, "<clipPath id=\"f{ox}-{oy}\"><rect x=\"{l}\" y=\"{t}\" width=\"{}\" height=\"{}\"/></clipPath>", r - l, b - t);
        let _ = writeln!(s, "<g clip-path=\"url(#f{ox}-{oy})\">");
    }
    for (i, se) in p.series.iter().enumerate() {
        let c = se.colour.unwrap_or(colour(i));
        let line: Vec<String> =
            se.points.iter().filter(|(x, y)| x.is_finite() && shown(*y)).map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        match line.len() {
            0 => {}
            1 => {
                let (x, y) = line[0].split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(s, "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{c}\"/>");
            }
            n => {
                let dash = if se.dashed { " stroke-dasharray=\"6 4\"" } else { "" };
                let _ = writeln!(s, "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.4\"{dash} points=\"{}\"/>", line.join(" "));
                // Sparse series (one point an epoch) show their points.
                if n <= 40 && !se.dashed {
                    for (x, y) in line.iter().filter_map(|p| p.split_once(',')) {
                        let _ = writeln!(s, "<circle cx=\"{x}\" cy=\"{y}\" r=\"2.5\" fill=\"{c}\"/>");
                    }
                }
            }
        }
    }
    if let Some(c) = ceiling {
        let _ = writeln!(s, "</g>");
        for (i, se) in p.series.iter().enumerate() {
            for &(x, y) in se.points.iter().filter(|&&(x, y)| x.is_finite() && y.is_finite() && y > c) {
                let (px, colour) = (px(x), se.colour.unwrap_or(colour(i)));
                let _ = writeln!(s, "<path d=\"M{:.1},{t} l-4,7 h8 z\" fill=\"{colour}\"/>", px);
                let shown = p.right.as_ref().map_or(y, |a| match a {
                    RightAxis::Exp(_) => y.exp(),
                    RightAxis::Scale(k, _) => y * k,
                });
                let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" fill=\"{colour}\">{}</text>", px + 6.0, t + 9.0, label(shown));
            }
        }
    }
}

/// Where a linear axis should stop when a few points lie far above the rest (more than ten
/// times the span from the lowest to the 90th percentile above that percentile): at the
/// highest of the others. `None` when nothing is that far out.
fn outlier_ceiling(p: &Panel) -> Option<f64> {
    let mut ys: Vec<f64> = p.series.iter().filter(|se| !se.dashed).flat_map(|se| se.points.iter().map(|&(_, y)| y)).filter(|y| y.is_finite()).collect();
    if ys.len() < 10 {
        return None;
    }
    ys.sort_by(f64::total_cmp);
    let (lo, p90, hi) = (ys[0], ys[ys.len() * 9 / 10], ys[ys.len() - 1]);
    let far = p90 + 10.0 * (p90 - lo).max(f64::MIN_POSITIVE);
    // the axis still shows every point that is not that far out
    (hi > far).then(|| ys.iter().copied().filter(|&y| y <= far).fold(lo, f64::max))
}

/// The ticks and name of a right axis: the frame's right edge `r`, top `t`, bottom `b`, the
/// panel's right end `end`; `(y0, y1)` the left axis's range, `py` its position.
fn right_axis(s: &mut String, axis: &RightAxis, (r, t, b, end): (f64, f64, f64, f64), (y0, y1): (f64, f64), py: &dyn Fn(f64) -> f64) {
    let (name, values): (&str, Vec<(f64, f64)>) = match axis {
        RightAxis::Exp(name) => (name, log_ticks(y0.exp(), y1.exp()).into_iter().map(|v| (v, v.ln())).collect()),
        RightAxis::Scale(k, name) => {
            let (a, z) = if *k > 0.0 { (y0 * k, y1 * k) } else { (y1 * k, y0 * k) };
            (name, ticks(a, z, 5).into_iter().map(|v| (v, v / k)).collect())
        }
    };
    for (v, y) in values {
        let y = py(y);
        let _ = writeln!(s, "<line x1=\"{r}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#888\"/>", r + 4.0);
        let _ = writeln!(s, "<text x=\"{}\" y=\"{:.1}\">{}</text>", r + 6.0, y + 4.0, label(v));
    }
    let (x, my) = (end - 10.0, (t + b) / 2.0);
    let _ = writeln!(s, "<text x=\"{x}\" y=\"{my}\" text-anchor=\"middle\" transform=\"rotate(90 {x} {my})\">{}</text>", esc(name));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(3.3, 7.1, 4), vec![4.0, 5.0, 6.0, 7.0]);
        assert_eq!(log_ticks(90.0, 600.0), vec![100.0, 200.0, 500.0]);
        assert_eq!(log_ticks(0.5, 2000.0), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(log_ticks(470.0, 490.0), vec![470.0, 475.0, 480.0, 485.0, 490.0]);
    }

    #[test]
    fn a_chart_draws_each_series_in_each_panel_with_one_legend() {
        let se = |l: &str, k: f64| Series { label: l.into(), points: (1..=5).map(|i| (i as f64, k * i as f64)).collect(), ..Default::default() };
        let p = |log_y| Panel { title: "t".into(), xlabel: "step".into(), ylabel: "y".into(), log_y, series: vec![se("a<b", 1.0), se("c", 2.0)], ..Default::default() };
        let svg = chart("two", &[p(false), p(true)], 2);
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert_eq!(svg.matches(">a&lt;b</text>").count(), 1, "one legend entry per series, escaped");
        assert!(svg.contains(colour(0)) && svg.contains(colour(1)));
        // A log panel leaves out what it cannot show; an empty panel says so.
        let empty = Panel { series: vec![Series { label: "z".into(), points: vec![(1.0, 0.0), (2.0, f64::NAN)], ..Default::default() }], log_y: true, ..Default::default() };
        assert!(chart("e", &[empty], 1).contains("no data yet"));
    }

    #[test]
    fn a_point_far_above_the_rest_is_marked_at_the_top_not_plotted() {
        let mut pts: Vec<(f64, f64)> = (0..20).map(|i| (i as f64, 5.0 - 0.02 * i as f64)).collect();
        pts[10].1 = 29.6; // a validation whose state ran away
        let p = Panel { right: Some(RightAxis::Exp("perplexity".into())), series: vec![Series { label: "v".into(), points: pts.clone(), ..Default::default() }], ..Default::default() };
        let svg = chart("o", &[p], 1);
        assert!(svg.contains("clip-path") && svg.contains("<path d=\"M"), "{svg}");
        assert!(svg.contains(">7e12</text>"), "the outlier's value in the right axis's unit: {svg}");
        // without the outlier, nothing is clipped
        pts[10].1 = 4.8;
        let p = Panel { series: vec![Series { label: "v".into(), points: pts, ..Default::default() }], ..Default::default() };
        assert!(!chart("o", &[p], 1).contains("clip-path"));
    }

    #[test]
    fn a_right_axis_shows_the_second_scale_and_a_baseline_is_dashed_without_marks() {
        let data = Series { label: "valid".into(), points: vec![(0.0, 5.0), (10.0, 6.0)], ..Default::default() };
        let base = Series { label: "base".into(), points: vec![(0.0, 5.5), (10.0, 5.5)], dashed: true, colour: Some(GREY) };
        let p = |right| Panel { ylabel: "nats".into(), right: Some(right), series: vec![data.clone(), base.clone()], ..Default::default() };
        // perplexity exp(5) = 148 .. exp(6) = 403
        let svg = chart("r", &[p(RightAxis::Exp("perplexity".into()))], 1);
        assert!(svg.contains(">perplexity</text>") && svg.contains(">200</text>") && svg.contains(">400</text>"), "{svg}");
        assert_eq!(svg.matches("stroke-dasharray").count(), 2, "the legend's and the panel's baseline");
        assert_eq!(svg.matches("<circle").count(), 2, "the data's two points only");
        assert!(svg.contains(GREY));
        // bits: 5 / ln 2 = 7.2 .. 6 / ln 2 = 8.7
        let svg = chart("r", &[p(RightAxis::Scale(1.0 / std::f64::consts::LN_2, "bits".into()))], 1);
        assert!(svg.contains(">bits</text>") && svg.contains(">8</text>"), "{svg}");
    }
}
