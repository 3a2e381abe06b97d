//! How typed text is cut into a word-level corpus's words.
//!
//! A word-level corpus comes already tokenized: Brown has its punctuation apart from the words
//! (`world ,`, quotes as ` `` ` and `''`), PTB has it removed and its clitics apart (`it 's`,
//! `do n't`, numbers as `N`). Text a user types ("Hello, world!") has neither, so a plain
//! whitespace split would read most of its words as `<unk>`. The rule recorded in
//! `config.json` (`tokenizer.split`) cuts such text the way the corpus was cut; the corpus
//! itself is still read with a whitespace split (it is in that form already).
//!
//! The rule works on one whitespace-separated word at a time (after normalisation), and the
//! vocabulary comes first, so that text already in the corpus's form reads as before:
//!
//! 1. A word in the vocabulary is one token (`Mr.`, `U.S.`, `didn't`, `--`, `<unk>`).
//! 2. Otherwise, curly quotes become straight ones, `—`/`–` become `--` and `…` becomes `...`.
//! 3. Leading punctuation (`( [ { " ' `` ¿ ¡`, and `$` for PTB) is peeled off one piece at a
//!    time, then trailing punctuation (`'' ... -- . , ; : ! ? ) ] } " '`), each peel stopping
//!    as soon as the rest is in the vocabulary. For Brown a leading `"` is ` `` ` and a trailing
//!    one `''`.
//! 4. What remains, if not in the vocabulary: split at each `--`, each part read again by 2-4;
//!    for PTB, a number (digits with `, . : / -`) is `N`, and a final `n't`, `'s`, `'re`,
//!    `'ve`, `'ll`, `'d` or `'m` is its own token.
//! 5. For PTB, whose preparation removed punctuation, a punctuation piece outside the
//!    vocabulary is dropped; every other piece outside the vocabulary is `<unk>`.

use anyhow::{bail, Result};
use std::fmt;
use std::str::FromStr;

use super::Format;

/// The rule that cuts a typed line into the corpus's words (`tokenizer.split`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Split {
    /// Whitespace only: what every checkpoint without the key did.
    #[default]
    Whitespace,
    /// Punctuation apart from words, quotes as ` `` ` / `''`, contractions kept.
    Brown,
    /// Punctuation removed, clitics apart, numbers as `N` (the Mikolov PTB preparation).
    Ptb,
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Whitespace => "whitespace",
            Split::Brown => "brown",
            Split::Ptb => "ptb",
        }
    }

    /// The rule of a corpus format at word level: Brown's and PTB's own, whitespace otherwise.
    pub fn for_format(format: Format) -> Split {
        match format {
            Format::Brown => Split::Brown,
            Format::Ptb => Split::Ptb,
            Format::Text | Format::Text8 | Format::Enwik8 => Split::Whitespace,
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Split {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "whitespace" => Ok(Split::Whitespace),
            "brown" => Ok(Split::Brown),
            "ptb" => Ok(Split::Ptb),
            _ => bail!("unknown word split {s:?}: expected \"whitespace\", \"brown\" or \"ptb\""),
        }
    }
}

const LEAD: &[char] = &['(', '[', '{', '"', '\'', '¿', '¡'];
const TRAIL: &[char] = &['.', ',', ';', ':', '!', '?', ')', ']', '}', '"', '\''];
const TRAIL_MULTI: &[&str] = &["''", "...", "--"];
const CLITICS: &[&str] = &["n't", "'s", "'re", "'ve", "'ll", "'d", "'m"];

/// The pieces of one whitespace-separated `word` under `rule`, `known` saying which strings
/// are in the vocabulary. A piece outside the vocabulary is returned as it is (the caller maps
/// it to `<unk>`); for PTB, punctuation outside the vocabulary is not returned.
pub(super) fn pieces(rule: Split, word: &str, known: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    if rule == Split::Whitespace || known(word) {
        out.push(word.to_string());
        return out;
    }
    let canon = canonical(word);
    cut(rule, &canon, known, &mut out);
    if rule == Split::Ptb {
        out.retain(|p| known(p) || !is_punctuation(p));
    }
    out
}

/// Curly quotes to straight ones, dashes to `--`, the ellipsis to `...`.
fn canonical(word: &str) -> String {
    let mut s = String::with_capacity(word.len());
    for c in word.chars() {
        match c {
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{00AB}' | '\u{00BB}' => s.push('"'),
            '\u{2018}' | '\u{2019}' | '\u{201A}' => s.push('\''),
            '\u{2014}' | '\u{2013}' => s.push_str("--"),
            '\u{2026}' => s.push_str("..."),
            c => s.push(c),
        }
    }
    s
}

/// Steps 3 and 4 of the module's rule on `word` (canonical), appending to `out`.
fn cut(rule: Split, word: &str, known: &dyn Fn(&str) -> bool, out: &mut Vec<String>) {
    let mut core = word;
    // leading punctuation
    while !known(core) {
        if let Some(rest) = core.strip_prefix("``").filter(|r| !r.is_empty()) {
            out.push("``".into());
            core = rest;
            continue;
        }
        let Some(c) = core.chars().next() else { break };
        let lead = LEAD.contains(&c) || (rule == Split::Ptb && c == '$');
        if !lead || core.len() == c.len_utf8() {
            break;
        }
        out.push(match (rule, c) {
            (Split::Brown, '"') => "``".into(),
            _ => c.to_string(),
        });
        core = &core[c.len_utf8()..];
    }
    // trailing punctuation, collected from the end
    let mut trail = Vec::new();
    'peel: while !known(core) {
        for m in TRAIL_MULTI {
            if core.len() > m.len() && core.ends_with(m) {
                trail.push(m.to_string());
                core = &core[..core.len() - m.len()];
                continue 'peel;
            }
        }
        let Some(c) = core.chars().next_back() else { break };
        if !TRAIL.contains(&c) || core.len() == c.len_utf8() {
            break;
        }
        trail.push(match (rule, c) {
            (Split::Brown, '"') => "''".into(),
            _ => c.to_string(),
        });
        core = &core[..core.len() - c.len_utf8()];
    }
    middle(rule, core, known, out);
    out.extend(trail.into_iter().rev());
}

/// Step 4: the core of a word after its punctuation was peeled.
fn middle(rule: Split, core: &str, known: &dyn Fn(&str) -> bool, out: &mut Vec<String>) {
    if known(core) {
        out.push(core.to_string());
        return;
    }
    if core.contains("--") && core != "--" {
        for (i, part) in core.split("--").enumerate() {
            if i > 0 {
                out.push("--".into());
            }
            if !part.is_empty() {
                cut(rule, part, known, out);
            }
        }
        return;
    }
    if rule == Split::Ptb {
        if is_number(core) {
            out.push("N".into());
            return;
        }
        for c in CLITICS {
            if core.len() > c.len() && core.ends_with(c) {
                middle(rule, &core[..core.len() - c.len()], known, out);
                out.push(c.to_string());
                return;
            }
        }
    }
    out.push(core.to_string());
}

fn is_number(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit()) && s.bytes().all(|b| b.is_ascii_digit() || b",.:/-".contains(&b))
}

fn is_punctuation(s: &str) -> bool {
    s.chars().all(|c| c.is_ascii_punctuation() || LEAD.contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn cut_line(rule: Split, vocab: &[&str], line: &str) -> Vec<String> {
        let set: HashSet<&str> = vocab.iter().copied().collect();
        let known = |s: &str| set.contains(s);
        line.split_whitespace().flat_map(|w| pieces(rule, w, &known)).collect()
    }

    const BROWN: &[&str] = &[
        "hello", "world", ",", "!", ".", "it's", "fine", "mr.", "u.s.", "``", "''", "--", "(", ")", "he", "said", "?", "'", "boys",
    ];

    #[test]
    fn brown_splits_punctuation_and_keeps_what_the_vocabulary_has() {
        assert_eq!(cut_line(Split::Brown, BROWN, "hello, world! it's fine."), ["hello", ",", "world", "!", "it's", "fine", "."]);
        assert_eq!(cut_line(Split::Brown, BROWN, "mr. u.s., (fine)"), ["mr.", "u.s.", ",", "(", "fine", ")"]);
        assert_eq!(cut_line(Split::Brown, BROWN, "\"hello,\" he said--fine?"), ["``", "hello", ",", "''", "he", "said", "--", "fine", "?"]);
        assert_eq!(cut_line(Split::Brown, BROWN, "\u{201C}fine\u{201D} it\u{2019}s the boys'"), ["``", "fine", "''", "it's", "the", "boys", "'"]);
        // a word outside the vocabulary keeps its letters together; only its punctuation moves
        assert_eq!(cut_line(Split::Brown, BROWN, "zyx. ab,cd"), ["zyx", ".", "ab,cd"]);
    }

    #[test]
    fn text_in_the_corpus_form_reads_as_a_whitespace_split() {
        let line = "`` hello , world '' he said -- it's fine . mr. u.s. ?";
        let ws: Vec<String> = line.split_whitespace().map(String::from).collect();
        assert_eq!(cut_line(Split::Brown, BROWN, line), ws);
    }

    #[test]
    fn ptb_splits_clitics_numbers_and_drops_punctuation() {
        let vocab = ["it", "'s", "do", "n't", "N", "$", "cost", "a", "share", "we", "'re", "fine"];
        assert_eq!(
            cut_line(Split::Ptb, &vocab, "it's $1,000.50 a share, don't (we're fine)!"),
            ["it", "'s", "$", "N", "a", "share", "do", "n't", "we", "'re", "fine"]
        );
        // an unknown word stays, to become <unk>
        assert_eq!(cut_line(Split::Ptb, &vocab, "zyx's."), ["zyx", "'s"]);
    }

    #[test]
    fn whitespace_rule_changes_nothing() {
        assert_eq!(cut_line(Split::Whitespace, BROWN, "hello, world!"), ["hello,", "world!"]);
    }

    #[test]
    fn names_round_trip() {
        for s in [Split::Whitespace, Split::Brown, Split::Ptb] {
            assert_eq!(s.as_str().parse::<Split>().unwrap(), s);
        }
        assert!("punct".parse::<Split>().is_err());
    }
}
