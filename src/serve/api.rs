//! What the explorer's page asks for, as JSON: the model, the analyses of a typed text, the
//! pattern search, the runs. Plain functions of the loaded [`App`], so the tests call them
//! without a socket; `super` puts them behind HTTP.

use super::json::{influence_json, pca_json, states_json};
use super::store::{self, Store};
use crate::data::Level;
use crate::explain::figures;
use crate::explain::ran::Influence;
use crate::explain::report::{self, MAX_COMPONENTS};
use crate::model::lm::Lm;
use crate::tasks::TaskModel;
use crate::training::metrics::{self, Run};
use anyhow::{bail, Result};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The longest text the page may send, in characters.
pub const MAX_TEXT_CHARS: usize = 20_000;
/// The longest text the explorer reads, in tokens (every analysis is sent for every pair of
/// positions: `T²` numbers per layer).
pub const MAX_TOKENS: usize = 1000;
/// Candidates listed per position.
pub const TOP: usize = 5;
/// Tokens of context shown on each side of a match.
pub const CONTEXT: usize = 12;
/// Run directories listed at most.
pub const MAX_RUNS: usize = 200;
/// Words in the κ_word map, and the corpus tokens their contributions are averaged over.
pub const MAP_WORDS: usize = 300;
pub const MAP_TOKENS: usize = 50_000;

/// What the explorer reads: a language model, or a model `rnnlens task` trained.
pub enum Reader {
    Lm(Lm),
    Task(TaskModel),
}

/// Everything the server holds: the model, the corpus's states, where the runs are.
pub struct App {
    pub dir: PathBuf,
    pub reader: Reader,
    /// how the model reads a corpus (carried state or reset windows, the window)
    pub carry: bool,
    pub bptt: usize,
    pub store: Option<Store>,
    pub corpus_name: Option<String>,
    pub runs: PathBuf,
    /// the κ_word map, computed at the first request
    pub kappa_map: Mutex<Option<Value>>,
    /// where an ISAN's symbol statistics are counted (`--distributions`): none, the text itself
    pub distributions: Option<report::CountedOn>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainRequest {
    pub text: String,
    /// units whose own weights `w_j^t(m)` are wanted (RAN, RWA, RDA)
    #[serde(default)]
    pub components: Vec<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    pub text: String,
    /// the span `start..end` of the text's tokens
    pub start: usize,
    pub end: usize,
    #[serde(default)]
    pub layer: usize,
    /// the units to compare; none: those at or above `threshold` over the whole span
    #[serde(default)]
    pub units: Option<Vec<usize>>,
    #[serde(default)]
    pub threshold: Option<f32>,
    #[serde(default = "default_top")]
    pub top: usize,
}

fn default_top() -> usize {
    10
}

impl App {
    /// The language model, or what `what` needs that a task model has not.
    fn lm(&self, what: &str) -> Result<&Lm> {
        match &self.reader {
            Reader::Lm(lm) => Ok(lm),
            Reader::Task(tm) => bail!("{what} belongs to language models; this is a model of the {} task", tm.meta.name),
        }
    }

    /// The text the page sent, within the limit on characters.
    pub fn text<'a>(&self, text: &'a str) -> Result<&'a str> {
        let chars = text.chars().count();
        if chars > MAX_TEXT_CHARS {
            bail!("the text has {chars} characters; the explorer reads at most {MAX_TEXT_CHARS}");
        }
        Ok(text)
    }

    /// The tokens of a text the page sent, within the limits.
    pub fn tokens(&self, text: &str) -> Result<Vec<u32>> {
        let tokens = self.lm("a typed text")?.tok.encode(self.text(text)?)?;
        if tokens.len() > MAX_TOKENS {
            bail!("the text has {} tokens; the explorer reads at most {MAX_TOKENS} (shorten it)", tokens.len());
        }
        if tokens.len() < 2 {
            bail!("the text has {} token(s); at least 2 are needed", tokens.len());
        }
        Ok(tokens)
    }

    /// What the page shows before any text: the model and what the server can do.
    pub fn model(&self) -> Value {
        let lm = match &self.reader {
            Reader::Lm(lm) => lm,
            Reader::Task(tm) => {
                let mut m = super::task::model(&self.dir, tm);
                m["limits"] = limits();
                return m;
            }
        };
        let c = &lm.model.config;
        let layers: Vec<Value> = c.layers.iter().map(|l| json!({"cell": l.cell, "hidden": l.hidden_size})).collect();
        json!({
            "checkpoint": self.dir.display().to_string(),
            "cell": report::cell_name(lm),
            "layers": layers,
            "level": lm.tok.level.to_string(),
            "vocab": lm.model.vocab_size(),
            "corpus": self.store.as_ref().map(|s| json!({"name": self.corpus_name, "tokens": s.tokens.len()})),
            "limits": limits(),
            "isan": lm.model.cells.iter().any(|c| matches!(c, crate::cells::Cell::Isan(_))),
            // where an ISAN's unigram and bigram are counted; none: on each explained text
            "distributions": self.distributions.as_ref().map(|d| json!({"of": d.0, "tokens": d.1.len()})),
        })
    }

    /// The analyses of a text, as `explain` computes them, with the predictions and the states.
    pub fn explain(&self, req: &ExplainRequest) -> Result<Value> {
        let lm = match &self.reader {
            Reader::Lm(lm) => lm,
            Reader::Task(tm) => return super::task::explain(tm, self.text(&req.text)?, &req.components),
        };
        let tokens = self.tokens(&req.text)?;
        // The predictions and states come from the forward explain read: batch 1, from the
        // initial state, one window.
        let (ex, ws) = report::explain_with_forward(lm, &tokens, &report::Options { components: req.components.clone(), distributions: self.distributions.clone() })?;
        let v = lm.model.vocab_size();
        let labels = &ex.labels;
        let vocab_label = |id: usize| figures::labels(lm, &[id as u32]).pop().unwrap_or_default();
        let predictions: Vec<Value> = (0..tokens.len())
            .map(|t| {
                let row = &ws.logits[t * v..(t + 1) * v];
                let mx = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
                let lse = mx + row.iter().map(|&x| (x as f64 - mx).exp()).sum::<f64>().ln();
                let mut idx: Vec<usize> = (0..v).collect();
                let k = TOP.min(v);
                idx.select_nth_unstable_by(k - 1, |&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                idx.truncate(k);
                idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                let top: Vec<Value> = idx.iter().map(|&i| json!([vocab_label(i), row[i] as f64 - lse])).collect();
                let next = tokens.get(t + 1).map(|&n| row[n as usize] as f64 - lse);
                json!({"top": top, "next_lnp": next})
            })
            .collect();
        let states = states_json(&lm.model, &ws.ys, tokens.len());
        let influence = |layers: &[Influence]| influence_json(layers, labels);
        let isan = ex.isan.as_ref().map(|s| {
            let a = &s.analysis;
            // κ_s^t on the logit of the token that follows t (window positions), and ‖κ_word^t‖.
            let w0 = a.window_start;
            let next: Vec<Value> = (0..a.window.len())
                .map(|t| {
                    let nxt = tokens.get(w0 + t + 1).map(|&x| x as usize);
                    json!({
                        "t": w0 + t,
                        "next": nxt.map(vocab_label),
                        "contributions": nxt.map(|n| (0..=t).map(|s| a.kappa[t][s][n]).collect::<Vec<f64>>()),
                        "before": nxt.map(|n| a.kappa_before[t][n]),
                        "bias": nxt.map(|n| a.b_ro[n]),
                        "logit": nxt.map(|n| a.logits[t][n]),
                    })
                })
                .collect();
            let words: Vec<Value> = a.spans.iter().map(|sp| json!(sp.text)).collect();
            json!({
                "window_start": w0,
                "kappa_next": next,
                "words": words,
                "word_norms": a.word_norms,
                "html": s.html,
            })
        });
        Ok(json!({
            "cell": ex.cell,
            "layers": ex.layers,
            "ids": tokens,
            "labels": labels,
            "word_level": lm.tok.level == Level::Word,
            // word level: the share of the text that is <unk>, and the rule that cut it
            "unknown_share": lm.tok.unk_share(&tokens),
            "split": lm.tok.unk_id().map(|_| lm.tok.split().as_str()),
            "predictions": predictions,
            "states": states,
            "ran": ex.ran.as_ref().map(|r| influence(&r.layers)),
            "attention": ex.attention.as_ref().map(|a| influence(&a.layers)),
            "isan": isan,
            "pca": pca_json(&ex),
            "summary": ex.summary(),
            "not_applicable": ex.not_applicable,
        }))
    }

    /// The corpus spans whose states best match those of a span of a text.
    pub fn search(&self, req: &SearchRequest) -> Result<Value> {
        let lm = self.lm("the corpus search")?;
        let Some(st) = &self.store else {
            bail!("no corpus is loaded: start the explorer with --corpus FILE to search one");
        };
        let tokens = self.tokens(&req.text)?;
        if req.start >= req.end || req.end > tokens.len() {
            bail!("the span {}..{} is not inside the text's {} tokens", req.start, req.end, tokens.len());
        }
        let Some(cell) = lm.model.cells.get(req.layer) else {
            bail!("layer {} does not exist (the model has {} layers, numbered from 0)", req.layer, lm.model.cells.len());
        };
        // The text is read as the corpus was: windows of the model's reading, from the start.
        let w = cell.sizes().output;
        let layers = crate::model::trace::states(&lm.model, &lm.w, &tokens, self.bptt, self.carry);
        let y = &layers[req.layer].output.values;
        let pattern: Vec<Vec<f32>> = (req.start..req.end).map(|t| y[t * w..(t + 1) * w].to_vec()).collect();
        let units = match (&req.units, req.threshold) {
            (Some(u), _) if !u.is_empty() => u.clone(),
            (_, Some(th)) => {
                let u = Store::units_above(&pattern, th);
                if u.is_empty() {
                    bail!("no unit of layer {} stays at or above {th} over the span; lower the threshold", req.layer);
                }
                u
            }
            _ => bail!("give the units to compare, or a threshold that picks them"),
        };
        let t0 = std::time::Instant::now();
        let found = st.search(req.layer, &units, &pattern, req.top)?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let len = req.end - req.start;
        let n = st.tokens.len();
        let lab = |a: usize, b: usize| figures::labels(lm, &st.tokens[a..b]);
        let matches: Vec<Value> = found
            .iter()
            .map(|m| {
                let (a, b) = (m.start.saturating_sub(CONTEXT), (m.start + len + CONTEXT).min(n));
                json!({
                    "start": m.start,
                    "distance": m.distance,
                    "before": lab(a, m.start),
                    "span": lab(m.start, m.start + len),
                    "after": lab(m.start + len, b),
                })
            })
            .collect();
        Ok(json!({"units": units, "layer": req.layer, "span": figures::labels(lm, &tokens[req.start..req.end]),
                  "matches": matches, "milliseconds": ms, "corpus_tokens": n}))
    }

    /// The run directories under the runs folder (those with a `metrics.jsonl`, up to three
    /// levels down), each with its final figures; with `select`, their curves in one SVG.
    pub fn runs(&self, select: &[String]) -> Result<Value> {
        let found = find_runs(&self.runs);
        let mut listed = Vec::new();
        let mut chosen = Vec::new();
        for (name, path) in &found {
            match Run::load(path, name.clone()) {
                Ok(r) => {
                    let last_valid = r.records.iter().rev().find_map(|x| match x {
                        metrics::Record::Valid { perplexity, bpc, .. } => Some(json!({"perplexity": perplexity, "bpc": bpc})),
                        _ => None,
                    });
                    listed.push(json!({
                        "name": name,
                        "cell": r.cell,
                        "steps": r.records.last().map(|x| x.step()),
                        "seconds": r.records.last().map(|x| x.seconds()),
                        "valid": last_valid,
                        "word_level": r.word_level,
                    }));
                    if select.contains(name) {
                        chosen.push(r);
                    }
                }
                Err(e) => listed.push(json!({"name": name, "error": format!("{e:#}")})),
            }
        }
        if let Some(s) = select.iter().find(|s| !found.iter().any(|(n, _)| n == *s)) {
            bail!("no run named {s:?} under {} (the names are those the list gives)", self.runs.display());
        }
        let (svg, table) = if chosen.is_empty() { (None, None) } else { (Some(metrics::compare_svg(&chosen)), Some(metrics::compare_table(&chosen))) };
        Ok(json!({"folder": self.runs.display().to_string(), "runs": listed, "svg": svg, "table": table}))
    }
}

impl App {
    /// The ISAN paper's figure 6: the most frequent words of the corpus placed by t-SNE of
    /// their mean `κ_word`; computed at the first request, then kept.
    pub fn kappa_map(&self) -> Result<Value> {
        let mut cache = self.kappa_map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = &*cache {
            return Ok(v.clone());
        }
        let lm = self.lm("the κ_word map")?;
        let p = crate::explain::isan::IsanWeights::from_lm(lm)
            .map_err(|e| anyhow::anyhow!("the κ_word map belongs to ISAN models: {e:#}"))?;
        let Some(st) = &self.store else {
            bail!("the κ_word map counts words in a corpus: start the explorer with --corpus FILE");
        };
        let toks = &st.tokens[..st.tokens.len().min(MAP_TOKENS)];
        let words = crate::explain::isan::word_kappas(lm, &p, toks, MAP_WORDS);
        if words.len() < 3 {
            bail!("the corpus's first {} tokens hold {} words seen twice; the map needs 3", toks.len(), words.len());
        }
        let x: Vec<Vec<f64>> = words.iter().map(|w| w.2.clone()).collect();
        let y = crate::explain::tsne::tsne(&x, 30.0, 1000, 1);
        let points: Vec<Value> = words.iter().zip(&y).map(|(w, p)| json!({"word": w.0, "count": w.1, "x": p[0], "y": p[1]})).collect();
        let v = json!({"words": points, "tokens": toks.len(), "perplexity": 30.0});
        *cache = Some(v.clone());
        Ok(v)
    }
}

/// What the page may send and be sent.
pub fn limits() -> Value {
    json!({"text_chars": MAX_TEXT_CHARS, "tokens": MAX_TOKENS, "components": MAX_COMPONENTS,
           "span": store::MAX_SPAN, "units": store::MAX_UNITS, "top": store::MAX_TOP})
}

/// Directories under `root` (itself included, up to three levels down) that hold a
/// `metrics.jsonl`, named by their path relative to `root`, sorted, at most [`MAX_RUNS`].
pub fn find_runs(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0)];
    while let Some((d, depth)) = stack.pop() {
        if d.join(metrics::METRICS_FILE).is_file() {
            let name = d.strip_prefix(root).map(|p| p.display().to_string()).unwrap_or_default();
            out.push((if name.is_empty() { ".".into() } else { name }, d.clone()));
        }
        if depth < 3 {
            if let Ok(rd) = std::fs::read_dir(&d) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push((e.path(), depth + 1));
                    }
                }
            }
        }
    }
    out.sort();
    out.truncate(MAX_RUNS);
    out
}
