//! The run directory `train` writes: a checkpoint (`config.json`, `model.safetensors`,
//! `vocab.txt`; docs/checkpoint.md) and beside it what continuing the run needs
//! (`trainer.json`, `trainer.safetensors`) and its history (`metrics.jsonl`, `curves.svg`;
//! [`super::metrics`]). This module is the only reader and writer of the trainer files.

use super::config::TrainConfig;
use super::metrics::{self, Record};
use crate::data::checkpoint::{self, NamedTensor};
use crate::data::Tokenizer;
use crate::model::Model;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The trainer state of a run directory: [`TrainerState`] as JSON (its readers outside
/// training use `model::run`).
pub use crate::model::run::TRAINER_JSON;
/// The trainer's tensors: the optimizer's moments and the carried state.
pub const TRAINER_TENSORS: &str = "trainer.safetensors";

/// One line of the training history, kept in `trainer.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EpochRecord {
    pub epoch: usize,
    pub step: u64,
    /// the mean training NLL, or with `sampled_softmax` the mean sampled loss (not an NLL)
    pub train_nll: f64,
    /// infinite where the validation overflowed (written as "inf", [`figure`])
    #[serde(with = "figure")]
    pub valid_nll: f64,
    pub valid_tokens: usize,
    pub lr: f64,
    pub seconds: f64,
}

/// A measured figure that may be infinite or NaN (a validation whose loss overflowed): JSON has
/// no such numbers (serde_json would write `null` and then refuse to read it back), so they are
/// written as the strings "inf", "-inf" and "nan" and read back as such; a `null`, which
/// earlier versions wrote for them, reads as NaN.
pub mod figure {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        match *x {
            x if x.is_finite() => s.serialize_f64(x),
            x if x.is_nan() => s.serialize_str("nan"),
            x if x > 0.0 => s.serialize_str("inf"),
            _ => s.serialize_str("-inf"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Figure {
            Number(f64),
            Word(String),
        }
        match Option::<Figure>::deserialize(d)? {
            None => Ok(f64::NAN),
            Some(Figure::Number(x)) => Ok(x),
            Some(Figure::Word(w)) => match w.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                "nan" => Ok(f64::NAN),
                _ => Err(serde::de::Error::custom(format!("expected a number, \"inf\", \"-inf\" or \"nan\", got {w:?}"))),
            },
        }
    }
}

/// [`figure`] for a figure a record may leave out (`None`: absent, or a `null`).
pub mod figure_opt {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match x {
            Some(x) => super::figure::serialize(x, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        // a null (absent, or an earlier version's non-finite figure) stays None
        super::figure::deserialize(d).map(|x| (!x.is_nan()).then_some(x))
    }
}

/// Where a run stands: `trainer.json` (the tensors are in `trainer.safetensors`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainerState {
    pub config: TrainConfig,
    /// 0-based epoch in progress and the next window within it
    pub epoch: usize,
    pub window: usize,
    pub step: u64,
    /// the epoch's running training loss so far (so a resumed epoch reports the same mean)
    pub epoch_nll: f64,
    pub epoch_tokens: u64,
    pub rng_seed: u64,
    /// the generator's word position, as a decimal string (it is a 128-bit number)
    pub rng_pos: String,
    pub optimizer_steps: u64,
    /// f16's loss scale and its counts (`--precision f16` only)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<crate::kernels::precision::LossScale>,
    pub history: Vec<EpochRecord>,
    pub finished: bool,
    /// the learning rate's factor after skipped divergent batches (`--on-divergence skip`)
    #[serde(default = "one")]
    pub lr_scale: f64,
    /// batches skipped so far
    #[serde(default)]
    pub skipped: u64,
    /// training tokens consumed so far (skipped windows included), over every part of the run
    #[serde(default)]
    pub tokens: u64,
    /// the run's wall time so far (validation and checkpoints included), over every part
    #[serde(default)]
    pub seconds: f64,
    /// the loss summed over the steps since the last training report of `metrics.jsonl`, and
    /// their tokens (so that a resumed run reports the same means)
    #[serde(default)]
    pub log_nll: f64,
    #[serde(default)]
    pub log_tokens: u64,
}

fn one() -> f64 {
    1.0
}

/// The configuration of the run saved in `dir`, saving back into `dir`.
pub fn resume_config(dir: &Path) -> Result<TrainConfig> {
    let st: TrainerState = load_resumable(dir)?;
    Ok(TrainConfig { out: dir.to_path_buf(), ..st.config })
}

/// Refuse to train into `out` when that would replace another run's checkpoint (unless
/// `replace`) or delete files that are not a checkpoint's; checked before any work is done.
pub fn check_out(out: &Path, replace: bool) -> Result<()> {
    checkpoint::check_replaceable(out)?;
    if !replace && out.join("config.json").exists() {
        let what = load_state(out)
            .map(|st| format!(" (a {} run at step {})", st.config.cell, st.step))
            .unwrap_or_default();
        bail!(
            "{} holds a checkpoint{what}: continue it with --resume {}, replace it with --overwrite, or choose another --out",
            out.display(),
            out.display()
        );
    }
    Ok(())
}


/// The trainer state saved in `dir`.
pub fn load_state(dir: &Path) -> Result<TrainerState> {
    checkpoint::load_json(&dir.join(TRAINER_JSON))
}

/// The saved run in `dir` to resume: refused, naming what is missing, where a model was copied
/// without its training state (it still loads for everything else).
pub fn load_resumable(dir: &Path) -> Result<TrainerState> {
    if checkpoint::is_task_checkpoint(dir) {
        let run = dir.parent().filter(|p| p.join(checkpoint::TASK_RUN_FILE).exists());
        anyhow::bail!(
            "{} holds a model trained by `rnnlens task`: {}; it loads for `rnnlens eval` and `rnnlens explain` (and `serve`, Python's `rnnlens.load`), not for `train` or `sample`",
            dir.display(),
            run.map_or("continue a task run with `rnnlens task --resume` on its folder".to_string(), |p| format!("continue its run with `rnnlens task --resume {}`", p.display()))
        );
    }
    let missing: Vec<&str> = [TRAINER_JSON, TRAINER_TENSORS].into_iter().filter(|f| !dir.join(f).exists()).collect();
    if dir.join(checkpoint::CONFIG_FILE).exists() && !missing.is_empty() {
        anyhow::bail!(
            "{} holds a model without its training state ({} missing): it loads for eval, sample and explain, but a run resumes only from a directory `train` wrote whole",
            dir.display(),
            missing.join(" and ")
        );
    }
    load_state(dir)
}

/// What a run that stops before saving leaves in `dir`, said for its error message: the last
/// checkpoint, or none yet (a run stopped before its first save).
pub fn kept(dir: &Path) -> String {
    if dir.join(TRAINER_JSON).exists() {
        format!("the last checkpoint in {} is intact", dir.display())
    } else {
        format!("no checkpoint had been saved in {} yet", dir.display())
    }
}

/// The tensors of `trainer.safetensors` in `dir`, checked against the names and shapes
/// `expected`, in that order.
pub fn load_tensors(dir: &Path, expected: &[(String, Vec<usize>)]) -> Result<Vec<Vec<f32>>> {
    let path = dir.join(TRAINER_TENSORS);
    let tensors = checkpoint::load_safetensors(&path)?;
    checkpoint::expect_tensors(&tensors, expected).with_context(|| format!("{}", path.display()))
}

/// Write the whole run directory as one unit (see `checkpoint::save_dir_atomic`): the model,
/// the trainer state and tensors, and the history with its picture, so that a resumed run
/// continues the history exactly where it stopped.
#[allow(clippy::too_many_arguments)]
pub fn save(dir: &Path, model: &Model, w: &[f32], tok: &Tokenizer, st: &TrainerState, tensors: &[NamedTensor], records: &[Record], curves_svg: String) -> Result<()> {
    crate::model::lm::save(
        dir,
        model,
        w,
        tok,
        &[
            (TRAINER_TENSORS, checkpoint::encode_safetensors(tensors)?),
            (TRAINER_JSON, checkpoint::encode_json(st)?),
            (metrics::METRICS_FILE, metrics::to_jsonl(records)),
            (metrics::CURVES_FILE, curves_svg.into_bytes()),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::EpochRecord;

    /// The model's readers (`model::run`, which eval, the ISAN table and Python use without
    /// this layer) read from trainer.json the corpus and the state's policy that training
    /// means by it, for the defaults each resolves and for a file written before the policy
    /// was recorded.
    #[test]
    fn the_readers_record_of_a_run_is_what_training_means() {
        use crate::data::Format;
        use crate::training::TrainConfig;
        let base = TrainConfig::default();
        let cases = [
            TrainConfig { ..base.clone() },
            TrainConfig { data: Some("corpus.txt".into()), ..base.clone() },
            TrainConfig { data: Some("t8".into()), format: Some(Format::Text8), cell: "lstm".into(), ..base.clone() },
            TrainConfig { cell: "ran-identity".into(), bptt: 50, ..base.clone() },
            TrainConfig { cell: "ran-tanh".into(), rec_dropout: 0.25, ..base.clone() },
            TrainConfig { cell: "gru".into(), carry_state: Some(false), bptt: 20, ..base.clone() },
        ];
        let tmp = tempfile::tempdir().unwrap();
        for cfg in cases {
            std::fs::write(tmp.path().join(super::TRAINER_JSON), serde_json::to_vec(&serde_json::json!({ "config": cfg })).unwrap()).unwrap();
            let rec = crate::model::run::RunRecord::read(tmp.path()).unwrap().unwrap();
            assert_eq!(rec.corpus, cfg.data_spec().unwrap(), "{cfg:?}");
            assert_eq!(rec.reset_every, (!cfg.carry_state()).then_some(cfg.bptt), "{cfg:?}");
        }
        std::fs::remove_file(tmp.path().join(super::TRAINER_JSON)).unwrap();
        assert!(crate::model::run::RunRecord::read(tmp.path()).unwrap().is_none());
    }

    /// A validation that overflowed (an IRNN trained with its state reset, validated with it
    /// carried, reached inf) is kept in trainer.json and read back, not refused on resume.
    #[test]
    fn an_infinite_validation_figure_is_written_and_read_back() {
        let rec = |v: f64| EpochRecord { epoch: 1, step: 2, train_nll: 3.0, valid_nll: v, valid_tokens: 4, lr: 0.1, seconds: 5.0 };
        for v in [f64::INFINITY, f64::NEG_INFINITY, 2.5] {
            let json = serde_json::to_string(&rec(v)).unwrap();
            assert_eq!(serde_json::from_str::<EpochRecord>(&json).unwrap().valid_nll, v, "{json}");
        }
        let json = serde_json::to_string(&rec(f64::NAN)).unwrap();
        assert!(json.contains("\"valid_nll\":\"nan\"") && serde_json::from_str::<EpochRecord>(&json).unwrap().valid_nll.is_nan(), "{json}");
        // what earlier versions wrote for a non-finite figure
        let old = json.replace("\"nan\"", "null");
        assert!(serde_json::from_str::<EpochRecord>(&old).unwrap().valid_nll.is_nan());
        assert!(serde_json::from_str::<EpochRecord>(&json.replace("\"nan\"", "\"lots\"")).is_err());
        // metrics.jsonl's validation lines likewise, and the line an earlier version wrote
        use crate::training::metrics::Record;
        let valid = Record::Valid { step: 430, epoch: 1, tokens: 5, seconds: 1.0, nll: f64::INFINITY, perplexity: None, bpc: Some(f64::INFINITY), windowed: None };
        let line = serde_json::to_string(&valid).unwrap();
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), valid, "{line}");
        let old = r#"{"kind":"valid","step":430,"epoch":1,"tokens":5504000,"seconds":337.788,"nll":null,"bpc":null}"#;
        assert!(matches!(serde_json::from_str::<Record>(old).unwrap(), Record::Valid { nll, bpc: None, .. } if nll.is_nan()));
    }
}
