//! What a training run records beside its checkpoint for the readers of its model (`eval`,
//! `explain`, the ISAN table, `serve`, Python): the corpus it was trained on and whether its
//! state was reset every window. Read from `trainer.json`, whose one writer is
//! `training::rundir`, without the training layer: a model loads and scores with what this
//! layer and the ones below it know.

use crate::data::{self, Corpus, DataSpec, Format, Level, Tokenizer};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The trainer state of a run directory (docs/checkpoint.md).
pub const TRAINER_JSON: &str = "trainer.json";

/// The part of `trainer.json` a model's readers need, and the file as it was written.
pub struct RunRecord {
    /// `trainer.json` whole (Python hands it on)
    pub json: serde_json::Value,
    /// the corpus the run was trained on
    pub corpus: DataSpec,
    /// the window of a run trained with its state reset every window (`None`: carried): scored
    /// streaming, as every reader scores, it can do worse than it was trained to
    pub reset_every: Option<usize>,
}

/// The settings of `trainer.json`'s `config` that say the corpus and the state's policy (the
/// rest belongs to training).
#[derive(Deserialize)]
struct Recorded {
    data: Option<PathBuf>,
    format: Option<Format>,
    level: Option<Level>,
    vocab_size: usize,
    lowercase: bool,
    cell: String,
    #[serde(default)]
    carry_state: Option<bool>,
    bptt: usize,
    #[serde(default)]
    rec_dropout: f64,
}

impl RunRecord {
    /// The record of the run saved in `dir`, or `None` for a checkpoint without one (written
    /// by `task`, or by another tool).
    pub fn read(dir: &Path) -> Result<Option<RunRecord>> {
        let path = dir.join(TRAINER_JSON);
        if !path.exists() {
            return Ok(None);
        }
        let json: serde_json::Value = crate::data::checkpoint::load_json(&path)?;
        let r = Recorded::deserialize(&json["config"]).with_context(|| format!("{}: config", path.display()))?;
        let format = Format::or_default(r.format, r.data.is_some());
        let corpus = DataSpec { path: r.data, format, level: Level::or_default(r.level, format), vocab_size: r.vocab_size, lowercase: r.lowercase };
        // runs since the policy is recorded say it; earlier ones had the cell's default
        let carried = r.carry_state.unwrap_or_else(|| crate::cells::registry::carries_state_by_default(&r.cell, r.rec_dropout));
        Ok(Some(RunRecord { json, corpus, reset_every: (!carried).then_some(r.bptt) }))
    }

    /// The corpus the run saved in `dir` was trained on, read again and checked to give the
    /// vocabulary `tok` of its checkpoint.
    pub fn load_corpus(&self, dir: &Path, tok: &Tokenizer) -> Result<Corpus> {
        let corpus = data::load_corpus(&self.corpus)?;
        if corpus.tokenizer.tokens() != tok.tokens() {
            bail!("the corpus recorded in {} now gives a different vocabulary than the checkpoint's", dir.join(TRAINER_JSON).display());
        }
        Ok(corpus)
    }
}
