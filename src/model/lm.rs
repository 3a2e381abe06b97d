//! A trained language model in memory (model, parameters, tokenizer) and its checkpoint
//! directory on disk (`docs/checkpoint.md`).

use crate::data::checkpoint::{self, NamedTensor};
use crate::data::{Level, Split, Tokenizer};
use crate::model::{Model, ModelConfig, TokenizerConfig};
use anyhow::{bail, Context, Result};
use std::path::Path;

pub struct Lm {
    pub model: Model,
    /// flat parameters, laid out as `model.slots`
    pub w: Vec<f32>,
    pub tok: Tokenizer,
}

/// The tokenizer entry of `config.json` for `tok`.
pub fn tokenizer_config(tok: &Tokenizer) -> TokenizerConfig {
    TokenizerConfig {
        level: tok.level.to_string(),
        normalize: tok.normalize_name().to_string(),
        split: (tok.level == Level::Word).then(|| tok.split().to_string()),
    }
}

/// Write the model directory (config.json, model.safetensors, vocab.txt, and `extra` files
/// such as the trainer state) for these parts, as one unit.
pub fn save(dir: &Path, model: &Model, w: &[f32], tok: &Tokenizer, extra: &[(&str, Vec<u8>)]) -> Result<()> {
    let tensors: Vec<NamedTensor> = model
        .named(w)
        .into_iter()
        .map(|(name, shape, data)| NamedTensor::new(name, shape.to_vec(), data.to_vec()))
        .collect();
    checkpoint::save_model_dir(dir, &model.config, &tensors, tok.tokens(), tok.level == Level::Byte, extra)
}

impl Lm {
    pub fn save(&self, dir: &Path) -> Result<()> {
        save(dir, &self.model, &self.w, &self.tok, &[])
    }

    pub fn load(dir: &Path) -> Result<Lm> {
        let (config, tensors, vocab): (ModelConfig, _, _) =
            checkpoint::load_model_dir(dir, |c: &ModelConfig| c.tokenizer.level == "byte")?;
        Lm::from_parts(config, tensors, vocab, dir)
    }

    /// Build a model from the decoded parts of a checkpoint (`dir` only names it in errors).
    /// Every size is checked against the others before anything large is allocated.
    pub fn from_parts(config: ModelConfig, tensors: Vec<NamedTensor>, vocab: Vec<String>, dir: &Path) -> Result<Lm> {
        let cfg_path = dir.join("config.json");
        if config.tokenizer.level == "task" {
            bail!(
                "{} is a sequence-task model (rnnlens task): `eval`, `explain --example SEED`, `serve` and Python's rnnlens.load read it; this command reads language models",
                dir.display()
            );
        }
        let level: Level = config.tokenizer.level.parse().with_context(|| format!("{}: tokenizer.level", cfg_path.display()))?;
        let lowercase = match config.tokenizer.normalize.as_str() {
            "none" => false,
            "lowercase" => true,
            other => bail!("{}: tokenizer.normalize \"{other}\" is not supported", cfg_path.display()),
        };
        if vocab.len() != config.vocab_size {
            bail!(
                "{}: {} tokens, but config.json says vocab_size {}",
                dir.join("vocab.txt").display(),
                vocab.len(),
                config.vocab_size
            );
        }
        let split: Split = match (&config.tokenizer.split, level) {
            (None, _) => Split::Whitespace,
            (Some(s), Level::Word) => s.parse().with_context(|| format!("{}: tokenizer.split", cfg_path.display()))?,
            (Some(s), _) => bail!("{}: tokenizer.split {s:?} applies to word level only (this is {level} level)", cfg_path.display()),
        };
        let tok = Tokenizer::from_tokens(level, lowercase, vocab).with_context(|| format!("{}", dir.join("vocab.txt").display()))?.with_split(split);
        let model = Model::new(config).with_context(|| format!("{}", cfg_path.display()))?;
        let expected: Vec<(String, Vec<usize>)> = model.slots.iter().map(|s| (s.name.clone(), s.shape.clone())).collect();
        let data = checkpoint::expect_tensors(&tensors, &expected)
            .with_context(|| format!("{}", dir.join("model.safetensors").display()))?;
        let mut w = Vec::with_capacity(model.n_params);
        for d in data {
            w.extend_from_slice(&d);
        }
        if let Some(i) = w.iter().position(|x| !x.is_finite()) {
            let s = model.slots.iter().find(|s| s.range().contains(&i)).map_or("?", |s| s.name.as_str());
            bail!("{}: tensor {s} holds a non-finite value", dir.join("model.safetensors").display());
        }
        Ok(Lm { model, w, tok })
    }

    /// Decode a checkpoint held in memory: the bytes of `config.json`, `model.safetensors` and
    /// `vocab.txt` (the loader the fuzz target exercises).
    pub fn from_bytes(config: &[u8], model: &[u8], vocab: &[u8]) -> Result<Lm> {
        let dir = Path::new("<memory>");
        let config: ModelConfig = serde_json::from_slice(config).context("config.json")?;
        let tensors = checkpoint::decode_safetensors(model, "model.safetensors")?;
        let vocab = checkpoint::decode_vocab(vocab, config.tokenizer.level == "byte", "vocab.txt")?;
        Lm::from_parts(config, tensors, vocab, dir)
    }
}
