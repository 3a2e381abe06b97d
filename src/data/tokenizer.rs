//! The tokenizer: a vocabulary built from the training split (or read from a checkpoint) at
//! char, byte or word level, normalisation, and encoding and decoding (the module above says
//! what each level's tokens and ids are).

use super::words::{self, Split};
use super::{Level, EOS, UNK};
use anyhow::{anyhow, bail, Result};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

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
    /// word level: how typed text is cut into words (the corpus itself is whitespace-split)
    split: Split,
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
            split: Split::Whitespace,
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

    /// The same tokenizer cutting typed text with `split` (word level; other levels ignore it).
    pub fn with_split(mut self, split: Split) -> Tokenizer {
        if self.level == Level::Word {
            self.split = split;
        }
        self
    }

    /// How typed text is cut into words: `tokenizer.split` of `config.json` (word level).
    pub fn split(&self) -> Split {
        self.split
    }

    /// Word level: the share of `ids` that are `<unk>` (0 for an empty list); `None` at other
    /// levels.
    pub fn unk_share(&self, ids: &[u32]) -> Option<f64> {
        let unk = self.unk_id()?;
        Some(if ids.is_empty() { 0.0 } else { ids.iter().filter(|&&t| t == unk).count() as f64 / ids.len() as f64 })
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

    /// Encodes a text a user gave (typed, or a file for `eval --input`). Word level: per line,
    /// the words cut by this tokenizer's [`Split`] rule (see `words`; text already in the
    /// corpus's form reads as a whitespace split) and `<eos>`; unknown words become `<unk>`.
    /// Char level: an error names a character outside the vocabulary, its code point and
    /// position. Byte level: encodes the text's UTF-8 bytes.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self.level {
            Level::Byte => self.encode_bytes(text.as_bytes()),
            Level::Word => Ok(self.encode_words(&self.normalize(text), self.split)),
            Level::Char => self.encode_normalized_str(&self.normalize(text)),
        }
    }

    /// Word level: per line, each whitespace-separated word (cut by `words::pieces` under a
    /// punctuation rule when it is not in the vocabulary) and `<eos>`; a final `'\n'` ends the
    /// last line rather than starting an empty one.
    fn encode_words(&self, text: &str, split: Split) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 5 + 1);
        if text.is_empty() {
            return out;
        }
        let known = |s: &str| self.words.contains_key(s);
        let body = text.strip_suffix('\n').unwrap_or(text);
        for line in body.split('\n') {
            for w in split_words(line) {
                match self.words.get(w) {
                    Some(&id) => out.push(id),
                    None if split == Split::Whitespace => out.push(self.unk),
                    None => out.extend(words::pieces(split, w, &known).iter().map(|p| self.words.get(p.as_str()).copied().unwrap_or(self.unk))),
                }
            }
            out.push(self.eos);
        }
        out
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
    pub(super) fn encode_normalized_str(&self, text: &str) -> Result<Vec<u32>> {
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
            // the corpus's own text: already cut
            Level::Word => Ok(self.encode_words(text, Split::Whitespace)),
        }
    }

    pub(super) fn encode_normalized_bytes(&self, bytes: &[u8]) -> Result<Vec<u32>> {
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
            .field("split", &self.split)
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

pub(super) fn normalize_str(text: &str, lowercase: bool) -> Cow<'_, str> {
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

pub(super) fn normalize_bytes(bytes: &[u8], lowercase: bool) -> Cow<'_, [u8]> {
    if lowercase && bytes.iter().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(bytes.to_ascii_lowercase())
    } else {
        Cow::Borrowed(bytes)
    }
}

/// `bytes` as UTF-8, or an error with the offset of the first invalid byte.
pub(super) fn utf8(bytes: &[u8]) -> Result<&str> {
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
pub(super) fn word_vocab_encode(train: &str, vocab_size: usize) -> Result<(Vec<String>, Vec<u32>)> {
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

pub(super) fn char_vocab(texts: &[&str]) -> Vec<String> {
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

pub(super) fn byte_vocab(data: &[&[u8]]) -> Vec<String> {
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
