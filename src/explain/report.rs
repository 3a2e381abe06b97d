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
use super::figures::{labels, write_file};
use crate::model::lm::Lm;
use crate::model::ModelWs;
pub use crate::render::esc;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

/// The longest text `explain` reads, in tokens.
pub const MAX_TOKENS: usize = 2000;
/// The most units `--components` may name.
pub const MAX_COMPONENTS: usize = 8;

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// units whose individual weights `w_j^t(m)` are wanted (`--components`)
    pub components: Vec<usize>,
    /// an ISAN's symbol statistics counted on this text (its name, its tokens) instead of the
    /// explained one (`--distributions train`: the training split, as the paper counts them);
    /// shared, so that the explorer counts one corpus for every request without copying it
    pub distributions: Option<CountedOn>,
}

/// A text an ISAN's symbol statistics are counted on: its name and its tokens.
pub type CountedOn = Arc<(String, Vec<u32>)>;

/// Where an ISAN's unigram and bigram distributions are counted (`explain` and `serve`
/// `--distributions`, Python's `Model.explain(distributions=...)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Distributions {
    /// the explained text
    Text,
    /// the training split of the corpus the checkpoint records
    Train,
}

impl Distributions {
    /// The value named `s` ("text", "train"), as the command line spells it.
    pub fn parse(s: &str) -> Option<Distributions> {
        <Distributions as clap::ValueEnum>::from_str(s, false).ok()
    }

    /// The text to count on: none for the explained text itself, else the training split of
    /// the checkpoint `dir`'s corpus ([`training_distributions`]).
    pub fn counted_on(self, lm: &Lm, dir: &Path) -> Result<Option<CountedOn>> {
        match self {
            Distributions::Text => Ok(None),
            Distributions::Train => {
                let saved = crate::model::run::RunRecord::read(dir)?;
                Ok(Some(Arc::new(training_distributions(lm, saved.as_ref(), dir)?)))
            }
        }
    }
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
    /// a task model's outputs against the targets, and for an ISAN its readout's κ
    pub task: Option<TaskSection>,
}

/// What `explain` says of a task model's sequence beyond the cells' analyses.
pub struct TaskSection {
    pub summary: String,
    /// `(step, label, target, answer, right)` of every scored step (the copy tasks' blank
    /// targets left out)
    pub rows: Vec<(usize, String, String, String, bool)>,
}

/// The ISAN's analyses ([`super::isan`]) with their rendered summary and HTML section.
pub struct IsanSection {
    pub analysis: IsanAnalysis,
    pub summary: String,
    pub html: String,
}

/// [`Options::distributions`] from the training split of the corpus `saved` records (the
/// checkpoint `dir`'s `trainer.json`): an ISAN's symbol statistics as the ISAN paper counts them.
/// Refused for another cell, and for a checkpoint that records no corpus.
pub fn training_distributions(lm: &Lm, saved: Option<&crate::model::run::RunRecord>, dir: &Path) -> Result<(String, Vec<u32>)> {
    if !matches!(lm.model.cells[0], Cell::Isan(_)) {
        bail!("the training split's distributions are an ISAN's symbol statistics; {} is a {} model", dir.display(), cell_name(lm));
    }
    let Some(saved) = saved else {
        bail!("{} records no corpus (no {}) to count the distributions on", dir.display(), crate::model::run::TRAINER_JSON);
    };
    Ok(("the training split".to_string(), saved.load_corpus(dir, &lm.tok)?.train))
}

fn isan_section(lm: &Lm, tokens: &[u32], opts: &Options) -> Result<IsanSection> {
    let stats = opts.distributions.as_deref().map(|(name, t)| isan::StatsText { name, tokens: t });
    let analysis = isan::analyze_counting_on(lm, tokens, isan::Options::default(), stats)?;
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
        Cell::Isan(_) => "its state is linear given the input symbols; its decomposition is the ISAN contribution analysis, not gate weights",
        Cell::Linear(_) => {
            "its state is linear given the input symbols, a sum of contributions like the ISAN's, but rnnlens decomposes ISAN layers \
             only; it has no gate weights"
        }
        Cell::Ran(_) => "a RAN's weights are not normalized; see the RAN weights instead",
        Cell::Rda(_) => "an RWA/RDA gets the effective attention weights instead",
        // the simple RNN, and any cell added since (no arm needed here)
        _ => "its state passes through a nonlinearity of W h_{t-1} at every step, so it is not a weighted sum of terms fixed when each input was read",
    }
}

/// The model's cell as the command line names it.
pub fn cell_name(lm: &Lm) -> String {
    let c = &lm.model.config.cell_name;
    if c.is_empty() { lm.model.cells[0].type_name().to_string() } else { c.clone() }
}

/// Compute every analysis that applies to `lm`'s cell over `tokens`.
pub fn explain(lm: &Lm, tokens: &[u32], opts: &Options) -> Result<Explanation> {
    Ok(explain_with_forward(lm, tokens, opts)?.0)
}

/// [`explain`], also returning the forward pass it read (the explorer's predictions and
/// states come from the same pass).
pub fn explain_with_forward(lm: &Lm, tokens: &[u32], opts: &Options) -> Result<(Explanation, ModelWs<f32>)> {
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
    let ran = ran::analyze(&lm.model, &ws.cell_ws, &comps)?;
    let attention = attention::analyze(&lm.model, &ws.cell_ws, &comps)?;
    let top = cells.len() - 1;
    let pca = PcaAnalysis::new(top, &ws.ys[top], tokens.len(), cells[top].sizes().output)?;
    let is_isan = matches!(cells[0], Cell::Isan(_));
    let isan = if is_isan { Some(isan_section(lm, tokens, opts)?) } else { None };

    let mut not_applicable = Vec::new();
    let others = |pred: fn(&Cell) -> bool| -> String {
        let mut kinds: Vec<&Cell> = cells.iter().filter(|c| !pred(c)).collect();
        kinds.dedup_by(|a, b| a.type_name() == b.type_name());
        kinds.iter().map(|c| format!("{}: {}", c.type_name(), no_decomposition(c))).collect::<Vec<_>>().join("; ")
    };
    let others_att = |pred: fn(&Cell) -> bool| -> String {
        let mut kinds: Vec<&Cell> = cells.iter().filter(|c| !pred(c)).collect();
        kinds.dedup_by(|a, b| a.type_name() == b.type_name());
        let why = |c: &Cell| match c {
            Cell::Ran(_) => no_decomposition(c),
            _ => "its state is not a running weighted average n_t/d_t of values written at each step",
        };
        kinds.iter().map(|c| format!("{}: {}", c.type_name(), why(c))).collect::<Vec<_>>().join("; ")
    };
    if ran.is_none() {
        not_applicable.push(format!("RAN weights w_j^t: apply to RAN layers only ({})", others(|c| matches!(c, Cell::Ran(_)))));
    }
    if attention.is_none() {
        not_applicable.push(format!(
            "RWA/RDA effective attention weights: apply to RWA and RDA layers only ({})",
            others_att(|c| matches!(c, Cell::Rda(_)))
        ));
    }
    if ran.is_none() && attention.is_none() && !comps.is_empty() {
        not_applicable.push("per-unit weights (--components): they belong to the RAN/RWA/RDA weights; ignored".to_string());
    }
    if !is_isan {
        not_applicable.push(format!(
            "ISAN contribution analyses: apply to ISAN models only (this model's cell is {})",
            cells[0].type_name()
        ));
    }
    let ex = Explanation {
        cell: cell_name(lm),
        layers: cells.len(),
        tokens: tokens.to_vec(),
        labels: labels(lm, tokens),
        ran,
        attention,
        pca,
        isan,
        not_applicable,
        task: None,
    };
    Ok((ex, ws))
}

/// Explain a task model on one sequence `b` (batch 1; [`crate::tasks::TaskModel::example`] or
/// `parse_input`), described by `source`: the RAN, RWA/RDA and PCA analyses as for a language
/// model, the outputs against the targets, and for an ISAN the exact split of the readout at
/// the last step into one contribution per past symbol (κ, the ISAN paper's eq. 4-6, with its
/// readout in place of the logits).
pub fn explain_task(tm: &crate::tasks::TaskModel, b: &crate::tasks::Batch, source: &str, opts: &Options) -> Result<Explanation> {
    Ok(explain_task_with_forward(tm, b, source, opts)?.0)
}

/// [`explain_task`], with the forward pass it read (its states) and the readout `[T, C]`.
pub fn explain_task_with_forward(tm: &crate::tasks::TaskModel, b: &crate::tasks::Batch, source: &str, opts: &Options) -> Result<(Explanation, ModelWs<f32>, Vec<f32>)> {
    let mut comps = opts.components.clone();
    comps.sort_unstable();
    comps.dedup();
    if b.steps < 2 || b.steps > MAX_TOKENS {
        bail!("the sequence has {} steps; explain reads 2 to {MAX_TOKENS}", b.steps);
    }
    let (ws, out) = tm.run(b)?;
    let model = &tm.model;
    let ran = ran::analyze(model, &ws.cell_ws, &comps)?;
    let attention = attention::analyze(model, &ws.cell_ws, &comps)?;
    let top = model.cells.len() - 1;
    let pca = PcaAnalysis::new(top, &ws.ys[top], b.steps, model.cells[top].sizes().output)?;
    let labels = tm.labels(b);
    let c = model.vocab_size();
    let mut s = format!("task {} (length {}), {} trained {} steps; {source}\n", tm.meta.name, tm.meta.length, tm.cell(), tm.meta.steps_run);
    if let Some((loss, acc)) = tm.score(b, &out) {
        let acc = acc.map_or(String::new(), |a| format!(", {:.1}% of the scored outputs right", 100.0 * a));
        let _ = writeln!(s, "loss {loss:.5} at the {} scored steps{acc}", b.scored.len());
    }
    // Every scored step, a target beside the answer; the copy tasks' blank targets only counted.
    let mut rows = Vec::new();
    let (mut blanks, mut blanks_right) = (0, 0);
    for (k, &t) in b.scored.iter().enumerate() {
        let o = &out[t * c..(t + 1) * c];
        let right = tm.is_right(b, k, o);
        if matches!(tm.kind, crate::tasks::TaskKind::Copy | crate::tasks::TaskKind::Multicopy) && b.classes[k] == 0 {
            blanks += 1;
            blanks_right += right as usize;
            continue;
        }
        rows.push((t, labels[t].clone(), tm.target(b, k), tm.answer(o), right));
    }
    let shown = rows.len().min(24);
    for (t, label, target, answer, right) in &rows[..shown] {
        let mark = if *right { "" } else { "   ✗" };
        let _ = writeln!(s, "  step {t:>4} ({label}): target {target}, answer {answer}{mark}");
    }
    if rows.len() > shown {
        let right = rows.iter().filter(|r| r.4).count();
        let _ = writeln!(s, "  … {} more scored steps ({right} of all {} right)", rows.len() - shown, rows.len());
    }
    if blanks > 0 {
        let _ = writeln!(s, "  blank outputs: {blanks_right} of {blanks} right");
    }
    if b.scored.is_empty() {
        let _ = writeln!(s, "  (a typed copy sequence has no targets: the answers at the last steps: {})", (b.steps.saturating_sub(10)..b.steps).map(|t| tm.answer(&out[t * c..(t + 1) * c])).collect::<Vec<_>>().join(" "));
    }
    if let [Cell::Isan(_)] = model.cells.as_slice() {
        s.push_str(&isan_task_kappas(tm, b, &labels, &out)?);
    }
    let mut not_applicable = Vec::new();
    if ran.is_none() {
        not_applicable.push(format!("RAN weights w_j^t: apply to RAN layers only (this model is {})", tm.cell()));
    }
    if attention.is_none() {
        not_applicable.push(format!("RWA/RDA effective attention weights: apply to RWA and RDA layers only (this model is {})", tm.cell()));
    }
    let ex = Explanation {
        cell: tm.cell().to_string(),
        layers: model.cells.len(),
        tokens: b.tokens.clone(),
        labels,
        ran,
        attention,
        pca,
        isan: None,
        not_applicable,
        task: Some(TaskSection { summary: s, rows }),
    };
    Ok((ex, ws, out))
}

/// The ISAN's readout at the last step of `b` split into b_ro, the initial state's part and one
/// κ per past symbol: the largest contributions to each output, and the split's error against
/// the model's own readout `out`.
/// A CSV field, quoted where it holds a comma or a quote.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn isan_task_kappas(tm: &crate::tasks::TaskModel, b: &crate::tasks::Batch, labels: &[String], out: &[f32]) -> Result<String> {
    let p = isan::IsanWeights::of(&tm.model, &tm.w)?;
    let last = b.steps - 1;
    let (b_ro, k_h0, kappa) = p.contributions(&b.tokens, last);
    let c = p.vocab;
    let mut s = String::from("ISAN readout at the last step, split exactly into one contribution κ_j per past symbol (Foerster et al., eq. 4-6):\n");
    let mut worst = 0f64;
    for o in 0..c {
        let total = b_ro[o] + k_h0[o] + kappa.iter().map(|k| k[o]).sum::<f64>();
        worst = worst.max((total - out[last * c + o] as f64).abs());
        let mut order: Vec<usize> = (0..=last).collect();
        order.sort_by(|&x, &y| kappa[y][o].abs().total_cmp(&kappa[x][o].abs()).then(y.cmp(&x)));
        let top: Vec<String> = order.iter().take(5).map(|&j| format!("{}@{j} (lag {}) {:+.3}", labels[j], last - j, kappa[j][o])).collect();
        let _ = writeln!(s, "  output {o}: {total:.3} = b_ro {:+.3} + h0 {:+.3} + Σκ; largest κ: {}", b_ro[o], k_h0[o], top.join(", "));
    }
    let _ = writeln!(s, "  the split's sum against the model's readout: within {worst:.2e}");
    Ok(s)
}

impl Explanation {
    /// The compact text summary `explain` prints.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "explain: {} model, {} layer{}, {} {} read in one window from the initial state\n",
            self.cell,
            self.layers,
            if self.layers == 1 { "" } else { "s" },
            self.labels.len(),
            if self.task.is_some() { "steps" } else { "tokens" }
        );
        if let Some(t) = &self.task {
            s.push_str(&t.summary);
        }
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
             pre { background: #f4f4f4; padding: 0.6em; white-space: pre-wrap; overflow-wrap: anywhere; }\n\
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
        if let Some(t) = &self.task {
            let mut csv = String::from("step,input,target,answer,right\n");
            for (step, label, target, answer, right) in &t.rows {
                let _ = writeln!(csv, "{step},{},{},{},{right}", csv_field(label), csv_field(target), csv_field(answer));
            }
            write_file(&dir.join("task_outputs.csv"), csv.as_bytes())?;
        }
        self.pca.write_data(dir)?;
        let toks = json!({ "ids": self.tokens, "labels": self.labels });
        write_file(&dir.join("tokens.json"), serde_json::to_string(&toks)?.as_bytes())?;
        write_file(&dir.join("summary.txt"), self.summary().as_bytes())?;
        write_file(&dir.join("index.html"), self.html().as_bytes())
    }
}
