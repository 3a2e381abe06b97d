//! A training run's history as it goes: `metrics.jsonl` (one JSON object per line) and its
//! picture `curves.svg`, both written into the run directory with every checkpoint, and
//! `rnnlens curves`, which draws several runs in one picture and tabulates them.
//!
//! A line is either a training report, the mean loss over the steps since the previous one
//! (every [`LOG_EVERY`] optimizer steps, at the end of every epoch and where `--max-steps`
//! stops a run):
//! ```json
//! {"kind":"train","step":10,"epoch":1,"tokens":11200,"seconds":1.52,"loss":7.12,"lr":0.002}
//! ```
//! or a validation (after an epoch, every `--valid-every` steps inside one, and where
//! `--max-steps` stopped), `perplexity` at word level
//! and `bpc` at character and byte level, `nll` in nats per token in both:
//! ```json
//! {"kind":"valid","step":979,"epoch":1,"tokens":1096480,"seconds":141.0,"nll":5.06,"perplexity":158.0}
//! ```
//! (a model trained from its initial state every window adds, at an epoch's end and a stop,
//! `"windowed"`: its mean NLL read so, window by window, where the streamed `nll` may run away),
//! or the unigram baseline, measured before training (the first line of a run):
//! ```json
//! {"kind":"baseline","name":"unigram","nll":6.61,"perplexity":742.9}
//! ```
//! or, where a resumed run goes on in another precision (`--precision`), a line saying so:
//! ```json
//! {"kind":"precision","step":979,"epoch":1,"tokens":1096480,"seconds":141.0,"from":"f32","to":"bf16"}
//! ```
//! `tokens` counts the training tokens consumed up to `step`, `seconds` the run's wall time up
//! to then (validation and checkpoints included, summed over resumed parts). With a sampled
//! softmax, `loss` is the sampled loss and the line says `"sampled":true`.

use crate::kernels::precision::Precision;
use crate::model::{Model, ModelConfig};
use crate::render::{self, Panel, RightAxis, Series};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// Training reports are written every this many optimizer steps.
pub const LOG_EVERY: u64 = 10;
pub const METRICS_FILE: &str = "metrics.jsonl";
pub const CURVES_FILE: &str = "curves.svg";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Record {
    Train {
        step: u64,
        epoch: usize,
        tokens: u64,
        seconds: f64,
        /// mean loss per token over the steps since the previous training report
        loss: f64,
        lr: f64,
        #[serde(default, skip_serializing_if = "is_false")]
        sampled: bool,
    },
    Valid {
        step: u64,
        epoch: usize,
        tokens: u64,
        seconds: f64,
        /// infinite where the validation overflowed (written as "inf": `rundir::figure`)
        #[serde(with = "crate::training::rundir::figure")]
        nll: f64,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::training::rundir::figure_opt")]
        perplexity: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::training::rundir::figure_opt")]
        bpc: Option<f64>,
        /// a model trained from its initial state every window: its mean NLL read so, window by
        /// window (the streamed `nll` may run away where this does not)
        #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::training::rundir::figure_opt")]
        windowed: Option<f64>,
    },
    /// The reference a model must beat, measured on the validation split before training: the
    /// add-one unigram model of the training split (`name` "unigram").
    Baseline {
        name: String,
        nll: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        perplexity: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bpc: Option<f64>,
    },
    /// A resumed run goes on in another precision (`--precision`) from `step` on.
    Precision { step: u64, epoch: usize, tokens: u64, seconds: f64, from: Precision, to: Precision },
}

/// Wall times are kept to the millisecond.
pub fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Record {
    /// The step a record is of (0 for the baseline, measured before training).
    pub fn step(&self) -> u64 {
        match self {
            Record::Train { step, .. } | Record::Valid { step, .. } | Record::Precision { step, .. } => *step,
            Record::Baseline { .. } => 0,
        }
    }
    pub fn seconds(&self) -> f64 {
        match self {
            Record::Train { seconds, .. } | Record::Valid { seconds, .. } | Record::Precision { seconds, .. } => *seconds,
            Record::Baseline { .. } => 0.0,
        }
    }
    /// The unigram baseline's line.
    pub fn unigram(nll: f64, word_level: bool) -> Record {
        let (perplexity, bpc) = shown(nll, word_level);
        Record::Baseline { name: "unigram".into(), nll, perplexity, bpc }
    }
    /// A validation line for a mean NLL at this level, with the window-by-window reading of a
    /// model trained from its initial state every window where there is one.
    pub fn valid(step: u64, epoch: usize, tokens: u64, seconds: f64, (nll, windowed): (f64, Option<f64>), word_level: bool) -> Record {
        let seconds = round_ms(seconds);
        let (perplexity, bpc) = shown(nll, word_level);
        Record::Valid { step, epoch, tokens, seconds, nll, perplexity, bpc, windowed }
    }
}

/// A mean NLL as its line shows it too: perplexity at word level, bits per character else.
fn shown(nll: f64, word_level: bool) -> (Option<f64>, Option<f64>) {
    if word_level {
        (Some(nll.exp()), None)
    } else {
        (None, Some(nll / std::f64::consts::LN_2))
    }
}

/// `records` as JSON lines.
pub fn to_jsonl(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        // A record is numbers and fixed names: serialising it cannot fail.
        out.extend(serde_json::to_vec(r).unwrap_or_default());
        out.push(b'\n');
    }
    out
}

/// Read a run's `metrics.jsonl`; a missing file is an empty history.
pub fn read(dir: &Path) -> Result<Vec<Record>> {
    let path = dir.join(METRICS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => bail!("cannot read {}: {e}", path.display()),
    };
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let r: Record = serde_json::from_str(line).with_context(|| format!("{}:{}: not a metrics record", path.display(), i + 1))?;
        v.push(r);
    }
    Ok(v)
}

/// The training (`train`) or validation points of `recs`: (step or wall time, loss in nats).
fn points(recs: &[Record], by_time: bool, tdiv: f64, train: bool) -> Vec<(f64, f64)> {
    recs.iter()
        .filter_map(|r| {
            let x = if by_time { r.seconds() / tdiv } else { r.step() as f64 };
            match (r, train) {
                (Record::Train { loss, .. }, true) => Some((x, *loss)),
                (Record::Valid { nll, .. }, false) => Some((x, *nll)),
                _ => None,
            }
        })
        .collect()
}

/// The unigram baseline's NLL a run recorded, if any.
fn baseline(recs: &[Record]) -> Option<f64> {
    recs.iter().find_map(|r| match r {
        Record::Baseline { nll, .. } => Some(*nll),
        _ => None,
    })
}

/// The panels of one run (training and validation in one panel, against steps and against wall
/// time) or of several (training and validation apart, one line per run). Every loss is in
/// nats per token on the left axis, with perplexity (word level) or bits per character on the
/// right; the unigram baseline is a dashed line where the runs share one.
fn panels(runs: &[(String, &[Record])], word_level: Option<bool>) -> Vec<Panel> {
    let right = match word_level {
        Some(true) => Some(RightAxis::Exp("perplexity".into())),
        Some(false) => Some(RightAxis::Scale(1.0 / std::f64::consts::LN_2, "bits per character".into())),
        None => None,
    };
    let hours = runs.iter().flat_map(|(_, r)| r.iter()).map(Record::seconds).fold(0.0, f64::max) > 3.0 * 3600.0;
    let (tdiv, tname) = if hours { (3600.0, "wall time (hours)") } else { (60.0, "wall time (minutes)") };
    let nats = "nats per token";
    let first = runs.first().and_then(|(_, r)| baseline(r));
    let shared = first.filter(|u| runs.iter().all(|(_, r)| baseline(r).is_some_and(|v| (v - u).abs() < 1e-9)));
    // The baseline spans the panel: from 0 to the last x of any run.
    let base = |by_time: bool| -> Option<Series> {
        let u = shared?;
        let x1 = runs.iter().flat_map(|(_, r)| r.iter()).map(|r| if by_time { r.seconds() / tdiv } else { r.step() as f64 }).fold(0.0, f64::max);
        Some(Series { label: "unigram baseline".into(), points: vec![(0.0, u), (x1, u)], dashed: true, colour: Some(render::GREY) })
    };
    let panel = |title: &str, xlabel: &str, series: Vec<Series>| Panel {
        title: title.into(),
        xlabel: xlabel.into(),
        ylabel: nats.into(),
        log_y: false,
        right: right.clone(),
        series,
    };
    if let [(_, recs)] = runs {
        let one = |by_time: bool| {
            let mut v = vec![
                Series { label: "training loss".into(), points: points(recs, by_time, tdiv, true), ..Default::default() },
                Series { label: "validation".into(), points: points(recs, by_time, tdiv, false), ..Default::default() },
            ];
            v.extend(base(by_time));
            v
        };
        return vec![panel("training and validation", "step", one(false)), panel("training and validation", tname, one(true))];
    }
    let series = |by_time: bool, train: bool| -> Vec<Series> {
        let mut v: Vec<Series> =
            runs.iter().map(|(label, recs)| Series { label: label.clone(), points: points(recs, by_time, tdiv, train), ..Default::default() }).collect();
        if !train {
            v.extend(base(by_time));
        }
        v
    };
    vec![
        panel("training loss", "step", series(false, true)),
        panel("validation", "step", series(false, false)),
        panel("training loss", tname, series(true, true)),
        panel("validation", tname, series(true, false)),
    ]
}

/// `curves.svg` of one run.
pub fn run_svg(title: &str, records: &[Record], word_level: bool) -> String {
    render::chart(title, &panels(&[(title.to_string(), records)], Some(word_level)), 2)
}

/// What `rnnlens curves` knows of one run.
pub struct Run {
    pub label: String,
    pub records: Vec<Record>,
    /// word level (perplexity), or characters/bytes (BPC); None if the run does not say
    pub word_level: Option<bool>,
    pub cell: String,
    pub params: Option<(usize, usize)>,
}

impl Run {
    /// A run directory written by `train`: its history and, from `config.json`, its cell,
    /// level and parameter counts.
    pub fn load(dir: &Path, label: String) -> Result<Run> {
        if !dir.is_dir() {
            bail!("{} is not a run directory", dir.display());
        }
        if !dir.join(METRICS_FILE).exists() {
            bail!("{} holds no {METRICS_FILE} (a run trained by an rnnlens from before it wrote one, or not a training run)", dir.display());
        }
        let records = read(dir)?;
        let config: Option<ModelConfig> = crate::data::checkpoint::load_json(&dir.join("config.json")).ok();
        let (cell, word_level, params) = match config {
            Some(c) => {
                let word = c.tokenizer.level == "word";
                let cell = if c.cell_name.is_empty() { c.layers.first().map_or(String::new(), |l| l.cell.clone()) } else { c.cell_name.clone() };
                let params = Model::new(c).ok().map(|m| (m.recurrent_params(), m.n_params));
                (cell, Some(word), params)
            }
            None => (String::new(), None, None),
        };
        Ok(Run { label, records, word_level, cell, params })
    }
}

/// Several runs in one chart (the validation measure is perplexity or BPC when every run
/// shares it, NLL in nats otherwise).
pub fn compare_svg(runs: &[Run]) -> String {
    let first = runs.first().and_then(|r| r.word_level);
    let level = runs.iter().all(|r| r.word_level == first).then_some(first).flatten();
    let label = |r: &Run| if r.cell.is_empty() || r.label.contains(&r.cell) { r.label.clone() } else { format!("{} ({})", r.label, r.cell) };
    let v: Vec<(String, &[Record])> = runs.iter().map(|r| (label(r), r.records.as_slice())).collect();
    render::chart("training curves", &panels(&v, level), 2)
}

/// The final figures of each run, one row each.
pub fn compare_table(runs: &[Run]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28} {:<14} {:>10} {:>8} {:>12} {:>9} {:>10} {:>12} {:>12}",
        "run", "cell", "rec.param", "steps", "tokens", "wall", "last loss", "last valid", "best valid"
    );
    for r in runs {
        let last_train = r.records.iter().rev().find_map(|x| match x {
            Record::Train { loss, .. } => Some(*loss),
            _ => None,
        });
        let valids: Vec<f64> = r
            .records
            .iter()
            .filter_map(|x| match x {
                Record::Valid { nll, .. } => Some(*nll),
                _ => None,
            })
            .collect();
        let shown = |nll: f64| match r.word_level {
            Some(true) => format!("{:.2} ppl", nll.exp()),
            Some(false) => format!("{:.4} bpc", nll / std::f64::consts::LN_2),
            None => format!("{nll:.4} nats"),
        };
        let (steps, tokens, secs) = r.records.iter().rev().find_map(|x| match x {
            Record::Train { step, tokens, seconds, .. } | Record::Valid { step, tokens, seconds, .. } | Record::Precision { step, tokens, seconds, .. } => {
                Some((*step, *tokens, *seconds))
            }
            Record::Baseline { .. } => None,
        }).unwrap_or((0, 0, 0.0));
        let _ = writeln!(
            s,
            "{:<28} {:<14} {:>10} {:>8} {:>12} {:>9} {:>10} {:>12} {:>12}",
            r.label,
            r.cell,
            r.params.map_or("-".into(), |p| p.0.to_string()),
            steps,
            tokens,
            duration(secs),
            last_train.map_or("-".into(), |l| format!("{l:.3}")),
            valids.last().map_or("-".into(), |&v| shown(v)),
            valids.iter().copied().reduce(f64::min).map_or("-".into(), shown),
        );
    }
    s
}

/// `93s`, `12m05s`, `3h02m`.
pub fn duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=99 => format!("{s}s"),
        100..=5999 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_json_lines() {
        let v = vec![
            Record::Train { step: 10, epoch: 1, tokens: 11200, seconds: 1.5, loss: 7.1, lr: 0.002, sampled: false },
            Record::valid(20, 1, 22400, 3.0, (5.0, None), true),
            Record::valid(20, 1, 22400, 3.0, (1.0, None), false),
        ];
        let bytes = to_jsonl(&v);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("{\"kind\":\"train\",\"step\":10,"), "{text}");
        assert!(!text.contains("sampled"), "the flag is written only when set");
        assert!(text.lines().nth(1).unwrap().contains("\"perplexity\":148.41"));
        assert!(text.lines().nth(2).unwrap().contains("\"bpc\":1.4426"));
        let dir = std::env::temp_dir().join(format!("rnnlens-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(METRICS_FILE), &bytes).unwrap();
        assert_eq!(read(&dir).unwrap(), v);
        std::fs::write(dir.join(METRICS_FILE), b"{\"kind\":\"train\"}\n").unwrap();
        let e = format!("{:#}", read(&dir).unwrap_err());
        assert!(e.contains("metrics.jsonl:1: not a metrics record"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read(&dir).unwrap().is_empty(), "a missing file is an empty history");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(42.4), "42s");
        assert_eq!(duration(725.0), "12m05s");
        assert_eq!(duration(10920.0), "3h02m");
    }
}
