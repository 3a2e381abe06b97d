//! A corpus's three splits, read in each format and cut as the module above says, tokenized.

use super::brown::brown_splits;
use super::read_file;
use super::Split;
use super::tokenizer::{byte_vocab, char_vocab, normalize_bytes, normalize_str, utf8, word_vocab_encode};
use super::{DataSpec, Format, Level, Tokenizer};
use anyhow::{anyhow, bail, Context, Result};
use std::borrow::Cow;
use std::fmt;
use std::path::Path;

/// The size text8 and enwik8 have, and the sizes of their standard train and valid splits.
const STD_TOTAL: u64 = 100_000_000;
const STD_TRAIN: u64 = 90_000_000;
const STD_VALID: u64 = 5_000_000;

/// A tokenized corpus: three id streams and the tokenizer that made them.
#[derive(Clone)]
pub struct Corpus {
    pub train: Vec<u32>,
    pub valid: Vec<u32>,
    pub test: Vec<u32>,
    pub tokenizer: Tokenizer,
    /// A human description of where the data came from and how it was split.
    pub source: String,
}

impl fmt::Debug for Corpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Corpus")
            .field("train", &format_args!("[{} tokens]", self.train.len()))
            .field("valid", &format_args!("[{} tokens]", self.valid.len()))
            .field("test", &format_args!("[{} tokens]", self.test.len()))
            .field("tokenizer", &self.tokenizer)
            .field("source", &self.source)
            .finish()
    }
}

/// Loads, splits and tokenizes the corpus `spec` names.
pub fn load_corpus(spec: &DataSpec) -> Result<Corpus> {
    match spec.format {
        Format::Brown => load_brown(spec),
        Format::Ptb => load_ptb(spec),
        Format::Text => load_text(spec),
        Format::Text8 | Format::Enwik8 => load_fixed(spec),
    }
}

/// Reads and tokenizes one file with an existing tokenizer (for `eval --input FILE`).
/// Errors: a missing or empty file, invalid UTF-8 at char or word level (with the byte
/// offset), a character or byte outside the vocabulary.
pub fn read_input_file(path: &Path, tok: &Tokenizer) -> Result<Vec<u32>> {
    let bytes = read_file(path)?;
    tok.encode_bytes(&bytes)
        .with_context(|| format!("cannot tokenize {}", path.display()))
}

/// Checks that a split of `len` tokens fills at least one batch.
///
/// The stream is cut into `batch` parallel columns of `len / batch` tokens each, and one
/// training step reads `bptt` inputs per column plus the one token after them as the last
/// target. So the rule is `len >= batch * (bptt + 1)`. For evaluation, which can score any
/// window of at least one input and one target, pass `bptt = 1` (minimum `2 * batch`).
/// `batch` and `bptt` must be at least 1.
pub fn check_split_len(name: &str, len: usize, batch: usize, bptt: usize) -> Result<()> {
    if batch == 0 {
        bail!("batch size must be at least 1");
    }
    if bptt == 0 {
        bail!("bptt (the unroll length) must be at least 1");
    }
    let need = batch.saturating_mul(bptt.saturating_add(1));
    if len < need {
        bail!(
            "the {name} split has {len} tokens, too short for one batch: batch size {batch} x \
             (bptt {bptt} + 1) = {need} tokens needed; use a smaller batch size or bptt, or more data"
        );
    }
    Ok(())
}

/// One split before tokenization: its bytes and a name for error messages.
struct RawSplit<'a> {
    name: String,
    data: &'a [u8],
}

/// One file's bytes as the train, valid and test splits `..c1`, `c1..c2`, `c2..`, each named
/// after the file `p` for the errors that name a split.
fn cut_in_three<'a>(p: impl std::fmt::Display, bytes: &'a [u8], c1: usize, c2: usize) -> [RawSplit<'a>; 3] {
    let part = |what: &str, data| RawSplit { name: format!("{what} split of {p}"), data };
    [part("train", &bytes[..c1]), part("valid", &bytes[c1..c2]), part("test", &bytes[c2..])]
}

fn build_corpus(spec: &DataSpec, splits: [RawSplit<'_>; 3], source: String) -> Result<Corpus> {
    for s in &splits {
        if s.data.is_empty() {
            bail!("{} is empty", s.name);
        }
    }
    let (tokenizer, ids) = match spec.level {
        Level::Byte => {
            let norm: Vec<Cow<[u8]>> = splits
                .iter()
                .map(|s| normalize_bytes(s.data, spec.lowercase))
                .collect();
            let refs: Vec<&[u8]> = norm.iter().map(|c| c.as_ref()).collect();
            let tok = Tokenizer::from_tokens(Level::Byte, spec.lowercase, byte_vocab(&refs))?;
            let mut ids = Vec::with_capacity(3);
            for (s, n) in splits.iter().zip(&refs) {
                ids.push(
                    tok.encode_normalized_bytes(n)
                        .with_context(|| s.name.clone())?,
                );
            }
            (tok, ids)
        }
        level => {
            let mut texts = Vec::with_capacity(3);
            for s in &splits {
                let t = utf8(s.data).with_context(|| format!("{} is not UTF-8 text", s.name))?;
                texts.push(normalize_str(t, spec.lowercase));
            }
            let refs: Vec<&str> = texts.iter().map(|c| c.as_ref()).collect();
            let mut ids = Vec::with_capacity(3);
            let tokens = match level {
                Level::Word => {
                    let (tokens, train) = word_vocab_encode(refs[0], spec.vocab_size)?;
                    ids.push(train);
                    tokens
                }
                _ => char_vocab(&refs),
            };
            let tok = Tokenizer::from_tokens(level, spec.lowercase, tokens)?;
            for (s, t) in splits.iter().zip(&refs).skip(ids.len()) {
                ids.push(
                    tok.encode_normalized_str(t)
                        .with_context(|| s.name.clone())?,
                );
            }
            (tok, ids)
        }
    };
    for (s, v) in splits.iter().zip(&ids) {
        if v.is_empty() {
            bail!("{} has no tokens", s.name);
        }
    }
    let mut ids = ids.into_iter();
    Ok(Corpus {
        train: ids.next().unwrap_or_default(),
        valid: ids.next().unwrap_or_default(),
        test: ids.next().unwrap_or_default(),
        tokenizer: tokenizer.with_split(Split::for_format(spec.format)),
        source,
    })
}

pub(super) fn need_path(spec: &DataSpec) -> Result<&Path> {
    spec.path
        .as_deref()
        .ok_or_else(|| anyhow!("the {} format needs a data path", spec.format))
}


/// Validates UTF-8 for the char and word levels, with the file named in the error.
pub(super) fn check_text(path: &Path, level: Level, bytes: &[u8]) -> Result<()> {
    if level != Level::Byte {
        utf8(bytes).with_context(|| {
            format!(
                "{} is not UTF-8 text (needed at {level} level)",
                path.display()
            )
        })?;
    }
    Ok(())
}

fn load_ptb(spec: &DataSpec) -> Result<Corpus> {
    let dir = need_path(spec)?;
    if !dir.exists() {
        bail!("PTB directory {} does not exist", dir.display());
    }
    if !dir.is_dir() {
        bail!(
            "{} is not a directory: the ptb format reads a directory holding ptb.train.txt, \
             ptb.valid.txt and ptb.test.txt",
            dir.display()
        );
    }
    let names = ["ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"];
    let mut data = Vec::with_capacity(3);
    for n in names {
        let p = dir.join(n);
        if !p.is_file() {
            bail!("PTB directory {} has no {n}", dir.display());
        }
        let bytes = read_file(&p)?;
        check_text(&p, spec.level, &bytes)?;
        data.push((p, bytes));
    }
    let splits = [0, 1, 2].map(|i| RawSplit {
        name: data[i].0.display().to_string(),
        data: &data[i].1,
    });
    build_corpus(spec, splits, format!("PTB directory {}", dir.display()))
}

/// Moves a cut forward to a place the level can split at: at char and word level a character
/// boundary and, at word level (or when `whitespace`), just after a whitespace character.
fn adjust_cut(bytes: &[u8], mut cut: usize, level: Level, whitespace: bool) -> usize {
    let n = bytes.len();
    if level == Level::Byte {
        return cut.min(n);
    }
    while cut < n && (bytes[cut] & 0xC0) == 0x80 {
        cut += 1;
    }
    if !(whitespace || level == Level::Word) || cut == 0 || cut >= n {
        return cut.min(n);
    }
    // already just after whitespace? (`cut` is a character boundary here)
    let mut start = cut - 1;
    while start > 0 && (bytes[start] & 0xC0) == 0x80 {
        start -= 1;
    }
    if let Ok(s) = std::str::from_utf8(&bytes[start..cut]) {
        if s.chars().next_back().is_some_and(char::is_whitespace) {
            return cut;
        }
    }
    match std::str::from_utf8(&bytes[cut..]) {
        Ok(rest) => match rest.char_indices().find(|(_, c)| c.is_whitespace()) {
            Some((i, c)) => cut + i + c.len_utf8(),
            None => n,
        },
        Err(_) => cut, // cannot happen on validated text; keep the character boundary
    }
}

/// A cut for the text format: just after the first `'\n'` at or after `target - 1`,
/// else (no line break in the rest of the file) a whitespace or character boundary.
fn line_cut(bytes: &[u8], target: usize, level: Level) -> usize {
    let from = target.saturating_sub(1).min(bytes.len());
    match bytes[from..].iter().position(|&b| b == b'\n') {
        Some(i) => from + i + 1,
        None => adjust_cut(bytes, target, level, true),
    }
}

fn load_text(spec: &DataSpec) -> Result<Corpus> {
    let path = need_path(spec)?;
    let bytes = read_file(path)?;
    check_text(path, spec.level, &bytes)?;
    let n = bytes.len();
    let c1 = line_cut(&bytes, (n as u64 * 9 / 10) as usize, spec.level);
    let c2 = line_cut(
        &bytes,
        ((n as u64 * 19 / 20) as usize).max(c1 + 1),
        spec.level,
    )
    .max(c1);
    let p = path.display();
    for (name, a, b) in [("train", 0, c1), ("valid", c1, c2), ("test", c2, n)] {
        if a >= b {
            bail!(
                "{p} is too small to split 90/5/5 at line boundaries: the {name} split would be \
                 empty ({n} bytes, {} lines)",
                bytes.iter().filter(|&&b| b == b'\n').count()
            );
        }
    }
    let source =
        format!("{p} (split 90/5/5 at line boundaries: bytes 0..{c1} / {c1}..{c2} / {c2}..{n})");
    build_corpus(spec, cut_in_three(p, &bytes, c1, c2), source)
}

/// text8 and enwik8: the first 90M / next 5M / last 5M units (characters for text8 at char
/// and word level, bytes otherwise), proportional for files of another size.
fn load_fixed(spec: &DataSpec) -> Result<Corpus> {
    let path = need_path(spec)?;
    let bytes = read_file(path)?;
    check_text(path, spec.level, &bytes)?;
    let count_chars = spec.format == Format::Text8 && spec.level != Level::Byte;
    let unit = if count_chars { "characters" } else { "bytes" };
    // counting characters only differs from counting bytes outside ASCII
    let by_chars = count_chars && !bytes.is_ascii();
    let total = if by_chars {
        // validated above
        std::str::from_utf8(&bytes)
            .map(|s| s.chars().count())
            .unwrap_or(bytes.len())
    } else {
        bytes.len()
    } as u64;
    let (u1, u2, standard) = if total == STD_TOTAL {
        (STD_TRAIN, STD_TRAIN + STD_VALID, true)
    } else {
        (total * 9 / 10, total * 19 / 20, false)
    };
    let to_byte = |u: u64| -> usize {
        if by_chars {
            std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.char_indices().nth(u as usize).map(|(i, _)| i))
                .unwrap_or(bytes.len())
        } else {
            u as usize
        }
    };
    let c1 = adjust_cut(&bytes, to_byte(u1), spec.level, false);
    let c2 = adjust_cut(&bytes, to_byte(u2).max(c1), spec.level, false);
    let n = bytes.len();
    let p = path.display();
    for (name, a, b) in [("train", 0, c1), ("valid", c1, c2), ("test", c2, n)] {
        if a >= b {
            bail!("{p} is too small to split: the {name} split would be empty ({n} bytes)");
        }
    }
    let fmt = spec.format;
    let source = if standard {
        format!("{p} ({fmt}: first 90M / next 5M / last 5M {unit})")
    } else {
        format!(
            "{p} ({fmt}: {total} {unit}, not the standard 100M, so split proportionally 90/5/5 \
             at {unit} {u1} and {u2})"
        )
    };
    build_corpus(spec, cut_in_three(p, &bytes, c1, c2), source)
}

fn load_brown(spec: &DataSpec) -> Result<Corpus> {
    let ([train, valid, test], origin, source) = brown_splits(spec.path.as_deref())?;
    let splits = [("train", &train), ("valid", &valid), ("test", &test)]
        .map(|(what, text)| RawSplit { name: format!("{what} split of the {origin}"), data: text.as_bytes() });
    build_corpus(spec, splits, source)
}
