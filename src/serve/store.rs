//! The explorer's corpus: every layer's output after every token of a corpus, computed once
//! and kept beside the checkpoint, and the pattern search over it (LSTMVis's match view).
//!
//! **Layout.** Per layer, unit-major `[width, N]` in f16: the search reads a few units over
//! the whole corpus, so each unit's values are one contiguous row (1M tokens of 256 units:
//! 512 MB). The file is `DIR.explorer/states-<key>.safetensors` beside the checkpoint `DIR`
//! (not inside it: a resumed training replaces the checkpoint directory as a whole), `<key>`
//! a digest of the weights, the corpus tokens and the reading (window, carried or not), so a
//! retrained model or another corpus gets its own file and a stale one is never read.
//!
//! **Search.** A query is a span of `L` positions of some text the model read, and a set of
//! units `U` of one layer; its pattern `q_u[t]` is those units' values over the span. Every
//! corpus position `p` gets the distance `sqrt(Σ_{u∈U} Σ_{t<L} (s_u[p+t] − q_u[t])² / (L·|U|))`,
//! the root-mean-square difference between the corpus's states and the pattern, and the best
//! positions that do not overlap one another are returned. Units chosen by a threshold `θ`
//! (LSTMVis's rule) are those whose value stays at or above `θ` over the whole span.

use crate::data::checkpoint::write_atomic;
use crate::model::lm::Lm;
use anyhow::{bail, Context, Result};
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Longest span a search pattern may have, in tokens.
pub const MAX_SPAN: usize = 50;
/// Most units a search may compare.
pub const MAX_UNITS: usize = 256;
/// Most matches a search returns.
pub const MAX_TOP: usize = 100;
/// Positions per parallel block of the distance computation.
const BLOCK: usize = 1 << 16;

/// One layer's states over the corpus, unit-major.
pub struct Layer {
    pub width: usize,
    data: Vec<f16>,
}

impl Layer {
    /// Unit `u`'s values over the corpus.
    pub fn unit(&self, u: usize, n: usize) -> &[f16] {
        &self.data[u * n..(u + 1) * n]
    }
}

/// The corpus and the states of every layer after each of its tokens.
pub struct Store {
    pub tokens: Vec<u32>,
    pub layers: Vec<Layer>,
    pub path: PathBuf,
    /// whether the file was read (true) or computed now (false)
    pub loaded: bool,
}

/// One match of a search: the span `start..start + len` of the corpus.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    pub start: usize,
    pub distance: f32,
}

/// Where the states of `tokens` read by `lm` (from checkpoint `dir`) are kept.
pub fn path_for(dir: &Path, lm: &Lm, tokens: &[u32], carry: bool, bptt: usize) -> Result<PathBuf> {
    let mut h = Sha256::new();
    for &x in &lm.w {
        h.update(x.to_le_bytes());
    }
    h.update(serde_json::to_vec(&lm.model.config)?);
    for &t in tokens {
        h.update(t.to_le_bytes());
    }
    h.update([carry as u8]);
    h.update((bptt as u64).to_le_bytes());
    let key: String = h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "checkpoint".into());
    let parent = dir.parent().unwrap_or(Path::new("."));
    Ok(parent.join(format!("{name}.explorer")).join(format!("states-{key}.safetensors")))
}

/// The store of `tokens` for the model `lm` of checkpoint `dir`: read from its file when one
/// was written for the same weights, corpus and reading, else computed (with a progress bar
/// unless `quiet`) and written.
pub fn open(dir: &Path, lm: &Lm, tokens: Vec<u32>, carry: bool, bptt: usize, quiet: bool) -> Result<Store> {
    if tokens.len() < 2 {
        bail!("the corpus has {} tokens; the explorer needs at least 2 to search", tokens.len());
    }
    let path = path_for(dir, lm, &tokens, carry, bptt)?;
    if path.exists() {
        match read(&path, &tokens, lm) {
            Ok(layers) => return Ok(Store { tokens, layers, path, loaded: true }),
            Err(e) => eprintln!("note: {} cannot be used ({e:#}); computing the states again", path.display()),
        }
    }
    // Every layer's output at every position, in f16, and one window's workspaces.
    let width: u64 = lm.model.cells.iter().map(|c| c.sizes().output as u64).sum();
    let bytes = (2 * width).saturating_mul(tokens.len() as u64).saturating_add(crate::model::memory::forward_bytes(&lm.model, bptt as u64));
    crate::kernels::runtime::check_fits(&format!("the states of a corpus of {} tokens", tokens.len()), bytes, "give a smaller --corpus")?;
    let layers = compute(lm, &tokens, carry, bptt, quiet);
    write(&path, &tokens, &layers)?;
    Ok(Store { tokens, layers, path, loaded: false })
}

/// Run the model over the corpus as `eval` reads it (windows of `bptt`, the state carried or
/// reset at each) and keep every layer's output.
pub fn compute(lm: &Lm, tokens: &[u32], carry: bool, bptt: usize, quiet: bool) -> Vec<Layer> {
    let model = &lm.model;
    let n = tokens.len();
    let mut layers: Vec<Layer> = model.cells.iter().map(|c| Layer { width: c.sizes().output, data: vec![f16::ZERO; c.sizes().output * n] }).collect();
    let windows = n.div_ceil(bptt.max(1));
    let bar = if quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(windows as u64) };
    bar.set_style(
        indicatif::ProgressStyle::with_template("corpus states {bar:30} {pos}/{len} windows [{elapsed_precise}<{eta_precise}]")
            .expect("valid template"),
    );
    let mut ws = crate::model::ModelWs::default();
    let mut state = model.initial_state::<f32>(1);
    for (k, window) in tokens.chunks(bptt.max(1)).enumerate() {
        if !carry {
            state = model.initial_state(1);
        }
        model.forward_layers(&lm.w, None, window, window.len(), 1, &mut state, &mut ws, None);
        let p0 = k * bptt.max(1);
        for (l, layer) in layers.iter_mut().enumerate() {
            let w = layer.width;
            for (t, row) in ws.ys[l].chunks_exact(w).enumerate() {
                for (u, &x) in row.iter().enumerate() {
                    layer.data[u * n + p0 + t] = f16::from_f32(x);
                }
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    layers
}

fn write(path: &Path, tokens: &[u32], layers: &[Layer]) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let tok_bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    let layer_bytes: Vec<Vec<u8>> = layers.iter().map(|l| l.data.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
    let mut views = vec![("tokens".to_string(), TensorView::new(Dtype::U32, vec![tokens.len()], &tok_bytes)?)];
    for (l, (layer, b)) in layers.iter().zip(&layer_bytes).enumerate() {
        views.push((format!("layer{l}"), TensorView::new(Dtype::F16, vec![layer.width, tokens.len()], b)?));
    }
    let bytes = safetensors::serialize(views, None)?;
    write_atomic(path, &bytes).with_context(|| format!("writing {}", path.display()))
}

fn read(path: &Path, tokens: &[u32], lm: &Lm) -> Result<Vec<Layer>> {
    let bytes = std::fs::read(path)?;
    let st = SafeTensors::deserialize(&bytes)?;
    let t = st.tensor("tokens")?;
    let saved: Vec<u32> = t.data().chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    if saved != tokens {
        bail!("it holds another corpus");
    }
    let n = tokens.len();
    let mut layers = Vec::new();
    for (l, cell) in lm.model.cells.iter().enumerate() {
        let v = st.tensor(&format!("layer{l}"))?;
        let w = cell.sizes().output;
        if v.dtype() != Dtype::F16 || v.shape() != [w, n] {
            bail!("layer {l} has shape {:?}, not [{w}, {n}]", v.shape());
        }
        let data = v.data().chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]])).collect();
        layers.push(Layer { width: w, data });
    }
    Ok(layers)
}

impl Store {
    /// The units of `layer` whose value stays at or above `threshold` at every position of
    /// `pattern` (`[positions][width]`), the most active (largest mean) first, at most
    /// [`MAX_UNITS`].
    pub fn units_above(pattern: &[Vec<f32>], threshold: f32) -> Vec<usize> {
        let w = pattern.first().map_or(0, |r| r.len());
        let mut units: Vec<(usize, f32)> = (0..w)
            .filter(|&u| pattern.iter().all(|r| r[u] >= threshold))
            .map(|u| (u, pattern.iter().map(|r| r[u]).sum::<f32>()))
            .collect();
        units.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        units.truncate(MAX_UNITS);
        let mut u: Vec<usize> = units.into_iter().map(|x| x.0).collect();
        u.sort_unstable();
        u
    }

    /// The `top` corpus spans whose states of `units` (layer `layer`) are closest to `pattern`
    /// (`[L][width]`: the query's states, all units), best first, no two overlapping.
    pub fn search(&self, layer: usize, units: &[usize], pattern: &[Vec<f32>], top: usize) -> Result<Vec<Match>> {
        let Some(lay) = self.layers.get(layer) else {
            bail!("layer {layer} does not exist (the model has {} layers, numbered from 0)", self.layers.len());
        };
        let len = pattern.len();
        if len == 0 || len > MAX_SPAN {
            bail!("the span has {len} tokens; a search takes 1 to {MAX_SPAN}");
        }
        if units.is_empty() || units.len() > MAX_UNITS {
            bail!("a search compares 1 to {MAX_UNITS} units; {} were given", units.len());
        }
        if let Some(&u) = units.iter().find(|&&u| u >= lay.width) {
            bail!("unit {u} does not exist (layer {layer} has {} units, numbered from 0)", lay.width);
        }
        let n = self.tokens.len();
        if n < len {
            bail!("the corpus ({n} tokens) is shorter than the span ({len})");
        }
        if top == 0 || top > MAX_TOP {
            bail!("top must be 1 to {MAX_TOP}");
        }
        let starts = n - len + 1;
        // Sum of squared differences per start, in blocks of positions (each block converts
        // the rows it needs to f32 once and keeps its sums in cache).
        let mut acc = vec![0f32; starts];
        acc.par_chunks_mut(BLOCK).enumerate().for_each(|(b, out)| {
            let p0 = b * BLOCK;
            let mut row = vec![0f32; out.len() + len - 1];
            for &u in units {
                lay.unit(u, n)[p0..p0 + row.len()].convert_to_f32_slice(&mut row);
                for (t, q) in pattern.iter().map(|r| r[u]).enumerate() {
                    for (a, &s) in out.iter_mut().zip(&row[t..]) {
                        let d = s - q;
                        *a += d * d;
                    }
                }
            }
        });
        // The best starts, then the best that do not overlap: each accepted span rules out at
        // most 2·len − 1 starts, so the best top·(2·len − 1) + 1 suffice.
        let want = (top * (2 * len - 1) + 1).min(starts);
        let mut idx: Vec<u32> = (0..starts as u32).collect();
        let key = |i: &u32| (acc[*i as usize], *i);
        if want < starts {
            idx.select_nth_unstable_by(want - 1, |a, b| key(a).0.total_cmp(&key(b).0).then(a.cmp(b)));
            idx.truncate(want);
        }
        idx.sort_unstable_by(|a, b| key(a).0.total_cmp(&key(b).0).then(a.cmp(b)));
        let scale = 1.0 / (len * units.len()) as f32;
        let mut out: Vec<Match> = Vec::with_capacity(top);
        for i in idx {
            let p = i as usize;
            if out.iter().all(|m| p + len <= m.start || m.start + len <= p) {
                out.push(Match { start: p, distance: (acc[p] * scale).max(0.0).sqrt() });
                if out.len() == top {
                    break;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(rows: &[&[f32]]) -> Store {
        // rows: per unit, its values over the corpus
        let n = rows[0].len();
        let data = rows.iter().flat_map(|r| r.iter().map(|&x| f16::from_f32(x))).collect();
        Store { tokens: vec![0; n], layers: vec![Layer { width: rows.len(), data }], path: PathBuf::new(), loaded: false }
    }

    #[test]
    fn search_finds_the_planted_pattern_first_and_never_overlaps() {
        let mut a = vec![0f32; 40];
        let mut b = vec![0f32; 40];
        // The pattern (1, 0.5) on unit 0 with unit 1 at (−1, −1), planted at 10 exactly and at
        // 30 with noise; position 11 overlaps the first and must not be returned.
        for (p, s) in [(10, 0.0), (30, 0.25)] {
            a[p] = 1.0 + s;
            a[p + 1] = 0.5;
            b[p] = -1.0;
            b[p + 1] = -1.0;
        }
        let st = store(&[&a, &b]);
        let pattern = vec![vec![1.0, -1.0], vec![0.5, -1.0]];
        let m = st.search(0, &[0, 1], &pattern, 3).unwrap();
        assert_eq!(m[0], Match { start: 10, distance: 0.0 });
        assert_eq!(m[1].start, 30);
        assert!((m[1].distance - (0.25f32 * 0.25 / 4.0).sqrt()).abs() < 1e-6);
        for (i, x) in m.iter().enumerate() {
            for y in &m[i + 1..] {
                assert!(x.start + 2 <= y.start || y.start + 2 <= x.start, "{m:?} overlap");
            }
        }
        // Unit 0 alone: the same two places lead.
        let m = st.search(0, &[0], &pattern, 2).unwrap();
        assert_eq!((m[0].start, m[1].start), (10, 30));
    }

    #[test]
    fn units_above_keep_those_on_over_the_whole_span() {
        let pattern = vec![vec![0.9, 0.2, 0.6], vec![0.8, 0.9, 0.7]];
        assert_eq!(Store::units_above(&pattern, 0.5), vec![0, 2]);
        assert!(Store::units_above(&pattern, 0.95).is_empty());
    }

    #[test]
    fn bad_queries_are_refused_with_the_limits() {
        let st = store(&[&[0.0; 10]]);
        let e = |r: Result<Vec<Match>>| r.unwrap_err().to_string();
        assert!(e(st.search(1, &[0], &[vec![0.0]], 1)).contains("layer 1 does not exist"));
        assert!(e(st.search(0, &[3], &[vec![0.0]], 1)).contains("unit 3 does not exist"));
        assert!(e(st.search(0, &[0], &vec![vec![0.0]; 11], 1)).contains("shorter than the span"));
        assert!(e(st.search(0, &[0], &[], 1)).contains("a search takes 1 to"));
        assert!(e(st.search(0, &[0], &[vec![0.0]], 0)).contains("top must be"));
    }
}
