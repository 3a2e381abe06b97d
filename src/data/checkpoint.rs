//! Checkpoint files at the format level (the public contract is docs/checkpoint.md).
//!
//! A model checkpoint is a directory holding
//!
//! * `config.json`: whatever the model code serialises (the contract fixes a few keys),
//! * `model.safetensors`: every parameter as a little-endian `F32` tensor,
//! * `vocab.txt`: one backslash-escaped token per line, the line number (from 0) being the id.
//!
//! This module knows nothing about models: callers hand it a config value, a list of
//! [`NamedTensor`]s and a token list, and get the same back. Every file is written
//! atomically ([`write_atomic`]), and [`save_model_dir`] writes `config.json` last, so a
//! directory that has a `config.json` holds a complete checkpoint.
//!
//! Loaders validate what they read and their errors name the file (and the line, the tensor
//! or the escape) that is wrong; every error message is complete on its own (it does not
//! rely on anyhow's context chain being printed).
//!
//! ## `vocab.txt` escapes
//!
//! `\\` backslash, `\n` newline, `\r` carriage return, `\t` tab, `\xHH` (two lowercase hex
//! digits) for any other control character (U+0000..=U+001F, U+007F..=U+009F) and, at byte
//! level, for every char in U+0080..=U+00FF (a byte-level token for byte `XX` is the one-char
//! string U+00XX). Every other character stands for itself; a line holding one space is the
//! space token. The reader accepts upper-case hex digits as well and rejects literal control
//! characters (a `\r` at a line end usually means the file was saved with CRLF line endings).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, bail, Result};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

/// File name of the model configuration inside a checkpoint directory.
pub const CONFIG_FILE: &str = "config.json";
/// File name of the parameters inside a checkpoint directory.
pub const MODEL_FILE: &str = "model.safetensors";
/// File name of the vocabulary inside a checkpoint directory.
pub const VOCAB_FILE: &str = "vocab.txt";

/// Largest dimension accepted in a tensor shape (anything larger is certainly corrupt).
pub const MAX_DIM: usize = 1 << 32;

/// One parameter tensor: a name, a shape (row-major, PyTorch `[out, in]` convention for
/// matrices) and its `f32` values. `data.len()` must equal the product of `shape`
/// (1 for a scalar with the empty shape `[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl NamedTensor {
    pub fn new(name: impl Into<String>, shape: Vec<usize>, data: Vec<f32>) -> Self {
        NamedTensor {
            name: name.into(),
            shape,
            data,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Atomic writes
// ---------------------------------------------------------------------------------------

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Write `bytes` to `path` atomically: a temp file in the same directory, write, flush,
/// fsync, rename over `path`, then fsync the directory. A failure leaves any previous file
/// at `path` untouched and removes the temp file; the error names the path.
///
/// The new file gets default permissions (those of a newly created file), not the
/// permissions of the file it replaces. A symlink at `path` is replaced, not followed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let file_name = path.file_name().ok_or_else(|| {
        anyhow!(
            "cannot write {}: the path does not name a file",
            path.display()
        )
    })?;
    let dir = parent_dir(path);

    // Create a temp file that nobody else uses.
    let mut attempt = 0u32;
    let (tmp_path, mut file) = loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut name = std::ffi::OsString::from(".");
        name.push(file_name);
        name.push(format!(".tmp-{}-{}", std::process::id(), n));
        let tmp_path = dir.join(name);
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp_path)
        {
            Ok(f) => break (tmp_path, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
            Err(e) => bail!(
                "cannot write {}: cannot create a temporary file in {}: {e}",
                path.display(),
                dir.display()
            ),
        }
    };

    let written = (|| -> io::Result<()> {
        file.write_all(bytes)?;
        file.flush()?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp_path, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp_path);
        bail!(
            "cannot write {}: {e} (any previous file there is unchanged)",
            path.display()
        );
    }
    sync_dir(&dir).map_err(|e| {
        anyhow!(
            "wrote {} but could not fsync its directory {}: {e}",
            path.display(),
            dir.display()
        )
    })
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Make a rename or removal inside `dir` durable. File systems that cannot fsync a
/// directory (they answer EINVAL or "unsupported") are not an error.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        let d = fs::File::open(dir)?;
        match d.sync_all() {
            Ok(()) => Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::InvalidInput | io::ErrorKind::Unsupported
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Read a whole file, with an error that names it.
fn read_file(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            anyhow!("{} does not exist", path.display())
        } else {
            anyhow!("cannot read {}: {e}", path.display())
        }
    })
}

// ---------------------------------------------------------------------------------------
// Token escapes
// ---------------------------------------------------------------------------------------

/// True for the characters written `\xHH` whatever the level: control characters other
/// than `\n`, `\r`, `\t` (U+0000..=U+001F, U+007F..=U+009F, i.e. Unicode's `Cc`).
fn is_escaped_control(c: char) -> bool {
    c.is_control()
}

/// Escape one token for a line of `vocab.txt`.
///
/// `\\`, `\n`, `\r`, `\t`, `\xHH` (lowercase hex) for the other control characters and, when
/// `byte_level`, for every char in U+0080..=U+00FF (a byte token for byte `XX` is the
/// one-char string U+00XX). Everything else is written as itself. At byte level a char above
/// U+00FF cannot be a byte and is written literally; [`save_vocab`] rejects such tokens.
pub fn escape_token(tok: &str, byte_level: bool) -> String {
    let mut out = String::with_capacity(tok.len());
    for c in tok.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_escaped_control(c) || (byte_level && ('\u{80}'..='\u{ff}').contains(&c)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Undo [`escape_token`]: the exact inverse for every token `escape_token` can produce.
///
/// Errors (naming the offending escape or character and its column, counted in chars
/// from 1) on a trailing backslash, an unknown escape, `\x` without two hex digits, a
/// literal control character, and at byte level a literal char above U+007F (which must be
/// written `\xHH`). Upper-case hex digits are accepted. `\xHH` always stands for the char
/// U+00HH. An empty line gives the empty string; [`load_vocab`] rejects empty lines itself.
pub fn unescape_token(line: &str, byte_level: bool) -> Result<String> {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().enumerate().peekable();
    while let Some((i, c)) = chars.next() {
        let col = i + 1;
        match c {
            '\\' => {
                let Some((_, e)) = chars.next() else {
                    bail!("column {col}: the line ends with a lone backslash (write a backslash as `\\\\`)");
                };
                match e {
                    '\\' => out.push('\\'),
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'x' => {
                        let h1 = chars.next().map(|(_, h)| h);
                        let h2 = chars.next().map(|(_, h)| h);
                        let digits: String = h1.into_iter().chain(h2).collect();
                        let value = match (h1.and_then(|h| h.to_digit(16)), h2.and_then(|h| h.to_digit(16))) {
                            (Some(a), Some(b)) => a * 16 + b,
                            _ => bail!(
                                "column {col}: bad escape `\\x{digits}`: `\\x` must be followed by two hex digits"
                            ),
                        };
                        out.push(char::from_u32(value).expect("a value below 256 is a char"));
                    }
                    other => bail!(
                        "column {col}: unknown escape `\\{}` (valid escapes: \\\\ \\n \\r \\t \\xHH)",
                        other.escape_debug()
                    ),
                }
            }
            c if is_escaped_control(c) => {
                let hint = if c == '\r' && chars.peek().is_none() {
                    " (the file seems to have Windows CRLF line endings; vocab.txt uses \\n only)"
                } else {
                    ""
                };
                bail!(
                    "column {col}: literal control character U+{:04X} (it must be written `{}`){hint}",
                    c as u32,
                    escape_token(&c.to_string(), false)
                );
            }
            c if byte_level && (c as u32) > 0x7f => bail!(
                "column {col}: literal non-ASCII character {c:?} (U+{:04X}) in a byte-level vocabulary; bytes 0x80..=0xff are written `\\xHH`",
                c as u32
            ),
            c => out.push(c),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Vocabulary
// ---------------------------------------------------------------------------------------

/// The bytes of a `vocab.txt` holding `tokens`, after validating them.
pub fn encode_vocab(tokens: &[String], byte_level: bool) -> Result<Vec<u8>> {
    if tokens.is_empty() {
        bail!("the vocabulary is empty");
    }
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(tokens.len());
    let mut out = String::new();
    for (id, tok) in tokens.iter().enumerate() {
        if tok.is_empty() {
            bail!("token {id} is the empty string, which vocab.txt cannot hold");
        }
        if byte_level {
            if let Some(c) = tok.chars().find(|&c| (c as u32) > 0xff) {
                bail!(
                    "token {id} ({}) holds {c:?} (U+{:04X}); a byte-level token may only hold chars U+0000..=U+00FF",
                    escape_token(tok, true),
                    c as u32
                );
            }
        }
        if id == 0 && tok.starts_with('\u{feff}') {
            bail!("token 0 begins with U+FEFF, which readers would take for a byte-order mark");
        }
        if let Some(first) = seen.insert(tok.as_str(), id) {
            bail!(
                "token {id} ({}) duplicates token {first}",
                escape_token(tok, byte_level)
            );
        }
        out.push_str(&escape_token(tok, byte_level));
        out.push('\n');
    }
    Ok(out.into_bytes())
}

/// Parse the contents of a `vocab.txt`; `name` is used in error messages.
///
/// Every token ends with `\n`; a missing newline after the last token is tolerated. An
/// empty line (including a blank line at the end of the file), a bad escape, a duplicate
/// token, a leading byte-order mark, invalid UTF-8 and an empty file are errors naming the
/// line (numbered from 1; token id = line - 1).
pub fn decode_vocab(bytes: &[u8], byte_level: bool, name: &str) -> Result<Vec<String>> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let line = bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            bail!("{name}: line {line}: invalid UTF-8");
        }
    };
    if text.is_empty() {
        bail!("{name}: the file is empty (a vocabulary holds at least one token)");
    }
    if text.starts_with('\u{feff}') {
        bail!("{name}: the file starts with a UTF-8 byte-order mark; vocab.txt must not have one");
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    let n_lines = body.split('\n').count();
    let mut tokens = Vec::with_capacity(n_lines);
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(n_lines);
    for (i, line) in body.split('\n').enumerate() {
        let lineno = i + 1;
        if line.is_empty() {
            let hint = if lineno == n_lines {
                " (the file ends with a blank line)"
            } else {
                ""
            };
            bail!(
                "{name}: line {lineno}: empty line; an empty string is not a valid token (token id {i}){hint}"
            );
        }
        let tok =
            unescape_token(line, byte_level).map_err(|e| anyhow!("{name}: line {lineno}: {e}"))?;
        if let Some(first) = seen.get(&tok) {
            bail!(
                "{name}: line {lineno}: token `{line}` duplicates line {}",
                first + 1
            );
        }
        seen.insert(tok.clone(), i);
        tokens.push(tok);
    }
    Ok(tokens)
}

/// Write `vocab.txt` (atomically): one escaped token per line, each followed by `\n`.
/// Rejects an empty vocabulary, empty or duplicate tokens and, at byte level, chars above
/// U+00FF.
pub fn save_vocab(path: &Path, tokens: &[String], byte_level: bool) -> Result<()> {
    let bytes = encode_vocab(tokens, byte_level)
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    write_atomic(path, &bytes)
}

/// Read a `vocab.txt` written by [`save_vocab`] (or by another tool following the
/// contract). Errors name the file and the line number.
pub fn load_vocab(path: &Path, byte_level: bool) -> Result<Vec<String>> {
    let bytes = read_file(path)?;
    decode_vocab(&bytes, byte_level, &path.display().to_string())
}

// ---------------------------------------------------------------------------------------
// safetensors
// ---------------------------------------------------------------------------------------

/// Number of elements of `shape`, rejecting zero and absurd dimensions. `what` names the
/// tensor in error messages.
fn checked_numel(shape: &[usize], what: &str) -> Result<usize> {
    let mut n = 1usize;
    for &d in shape {
        if d == 0 {
            bail!("{what} has shape {shape:?}, with a zero dimension");
        }
        if d > MAX_DIM {
            bail!("{what} has shape {shape:?}, with an absurdly large dimension");
        }
        n = n
            .checked_mul(d)
            .and_then(|n| n.checked_mul(4).map(|_| n))
            .ok_or_else(|| anyhow!("{what} has shape {shape:?}, whose size overflows"))?;
    }
    Ok(n)
}

/// Validate a list of tensors before writing it.
fn check_tensors(tensors: &[NamedTensor]) -> Result<()> {
    let mut names = HashSet::with_capacity(tensors.len());
    for t in tensors {
        if t.name.is_empty() {
            bail!("a tensor has an empty name");
        }
        if t.name == "__metadata__" {
            bail!("`__metadata__` is reserved by safetensors and cannot name a tensor");
        }
        if !names.insert(t.name.as_str()) {
            bail!("duplicate tensor name `{}`", t.name);
        }
        let what = format!("tensor `{}`", t.name);
        let n = checked_numel(&t.shape, &what)?;
        if t.data.len() != n {
            bail!(
                "tensor `{}` has shape {:?} ({n} values) but holds {} values",
                t.name,
                t.shape,
                t.data.len()
            );
        }
    }
    Ok(())
}

/// The bytes of a safetensors file holding `tensors` as little-endian `F32`, after
/// validating them (names unique, non-empty and not `__metadata__`; no zero dimension;
/// data length = shape product). The header carries the metadata `{"format": "pt"}`, which
/// some Python loaders expect. An empty list gives a valid file with no tensors.
pub fn encode_safetensors(tensors: &[NamedTensor]) -> Result<Vec<u8>> {
    check_tensors(tensors)?;
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|t| t.data.iter().flat_map(|v| v.to_le_bytes()).collect())
        .collect();
    let mut views = Vec::with_capacity(tensors.len());
    for (t, b) in tensors.iter().zip(&bytes) {
        let view = TensorView::new(Dtype::F32, t.shape.clone(), b)
            .map_err(|e| anyhow!("tensor `{}`: {e}", t.name))?;
        views.push((t.name.as_str(), view));
    }
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize(views, Some(metadata))
        .map_err(|e| anyhow!("cannot encode safetensors: {e}"))
}

/// Parse the bytes of a safetensors file; `name` is used in error messages. See
/// [`load_safetensors`].
pub fn decode_safetensors(bytes: &[u8], name: &str) -> Result<Vec<NamedTensor>> {
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| anyhow!("{name} is not a valid safetensors file: {e}"))?;
    // The safetensors crate keeps the last of duplicate header keys; look for them ourselves.
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let keys: HeaderKeys = serde_json::from_slice(&bytes[8..8 + header_len])
        .map_err(|e| anyhow!("{name} is not a valid safetensors file: invalid header: {e}"))?;
    let mut seen = HashSet::with_capacity(keys.0.len());
    for k in &keys.0 {
        if !seen.insert(k.as_str()) {
            bail!("{name}: duplicate tensor name `{k}` in the header");
        }
    }
    let mut out = Vec::with_capacity(st.len());
    for (tname, view) in st.iter() {
        if view.dtype() != Dtype::F32 {
            bail!(
                "{name}: tensor `{tname}` has dtype {:?}; rnnlens checkpoints store F32 only",
                view.dtype()
            );
        }
        let shape = view.shape().to_vec();
        let n = checked_numel(&shape, &format!("{name}: tensor `{tname}`"))?;
        let raw = view.data();
        if raw.len() != n * 4 {
            bail!(
                "{name}: tensor `{tname}` has shape {shape:?} ({n} values) but {} bytes of data",
                raw.len()
            );
        }
        let data = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        out.push(NamedTensor {
            name: tname.to_string(),
            shape,
            data,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The top-level keys of a safetensors header in file order, except `__metadata__`.
struct HeaderKeys(Vec<String>);

impl<'de> serde::Deserialize<'de> for HeaderKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = HeaderKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<HeaderKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(k) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    if k != "__metadata__" {
                        keys.push(k);
                    }
                }
                Ok(HeaderKeys(keys))
            }
        }
        d.deserialize_map(V)
    }
}

/// Write `tensors` to a safetensors file as little-endian `F32` (atomically). Validation as
/// in [`encode_safetensors`]; nothing is written if it fails.
pub fn save_safetensors(path: &Path, tensors: &[NamedTensor]) -> Result<()> {
    let bytes =
        encode_safetensors(tensors).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    write_atomic(path, &bytes)
}

/// Read every tensor of a safetensors file, **sorted by name** (which is also the order
/// [`save_safetensors`] stores them in). Rejects, with the file name in the error: a missing
/// or unreadable file, a malformed or truncated file, duplicate tensor names, a dtype other
/// than `F32`, a zero or absurdly large dimension.
pub fn load_safetensors(path: &Path) -> Result<Vec<NamedTensor>> {
    let bytes = read_file(path)?;
    decode_safetensors(&bytes, &path.display().to_string())
}

/// Pick the `expected` tensors (name and shape) out of `found` and return their data in the
/// order of `expected`. Every problem is reported in one error: a missing tensor, a tensor
/// with the wrong shape (naming the expected and the found shape), a tensor in `found` that
/// is not expected, a duplicate name or a data length that does not match the shape.
pub fn expect_tensors(
    found: &[NamedTensor],
    expected: &[(String, Vec<usize>)],
) -> Result<Vec<Vec<f32>>> {
    let mut by_name: HashMap<&str, &NamedTensor> = HashMap::with_capacity(found.len());
    let mut problems = Vec::new();
    for t in found {
        if by_name.insert(t.name.as_str(), t).is_some() {
            problems.push(format!("tensor `{}` appears twice", t.name));
        }
    }
    let mut wanted = HashSet::with_capacity(expected.len());
    let mut out = Vec::with_capacity(expected.len());
    for (name, shape) in expected {
        if !wanted.insert(name.as_str()) {
            problems.push(format!("tensor `{name}` is expected twice"));
            continue;
        }
        match by_name.get(name.as_str()) {
            None => problems.push(format!(
                "missing tensor `{name}` (expected shape {shape:?})"
            )),
            Some(t) if &t.shape != shape => problems.push(format!(
                "tensor `{name}` has shape {:?}, expected {shape:?}",
                t.shape
            )),
            Some(t) => {
                let n: usize = shape.iter().product();
                if t.data.len() != n {
                    problems.push(format!(
                        "tensor `{name}` has shape {shape:?} ({n} values) but holds {} values",
                        t.data.len()
                    ));
                } else {
                    out.push(t.data.clone());
                }
            }
        }
    }
    let mut extra: Vec<&NamedTensor> = found
        .iter()
        .filter(|t| !wanted.contains(t.name.as_str()))
        .collect();
    extra.sort_by(|a, b| a.name.cmp(&b.name));
    extra.dedup_by(|a, b| a.name == b.name);
    for t in extra {
        problems.push(format!(
            "unexpected tensor `{}` (shape {:?})",
            t.name, t.shape
        ));
    }
    if !problems.is_empty() {
        bail!(
            "the tensors do not match the model: {}",
            problems.join("; ")
        );
    }
    Ok(out)
}

/// Check that every value is finite; the error names the tensor and the flat index of the
/// first NaN or infinity. (The loaders do not call this: a broken model may still be worth
/// inspecting.)
pub fn check_finite(tensors: &[NamedTensor]) -> Result<()> {
    for t in tensors {
        if let Some((i, v)) = t.data.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            bail!("tensor `{}` holds {v} at flat index {i}", t.name);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------

/// Pretty-printed JSON of `v` followed by a newline.
pub fn encode_json<T: serde::Serialize>(v: &T) -> Result<Vec<u8>> {
    let mut s = serde_json::to_string_pretty(v)?;
    s.push('\n');
    Ok(s.into_bytes())
}

/// Write `v` as pretty-printed JSON (atomically).
pub fn save_json<T: serde::Serialize>(path: &Path, v: &T) -> Result<()> {
    let bytes = encode_json(v).map_err(|e| {
        anyhow!(
            "cannot write {}: cannot serialise to JSON: {e}",
            path.display()
        )
    })?;
    write_atomic(path, &bytes)
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &[u8], path: &Path) -> Result<T> {
    serde_json::from_slice(text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// Read a JSON file; the error names the file and gives serde's message (with line and
/// column).
pub fn load_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = read_file(path)?;
    parse_json(&bytes, path)
}

// ---------------------------------------------------------------------------------------
// Model directories
// ---------------------------------------------------------------------------------------

/// The `vocab_size` key of a serialised config, if it holds an unsigned integer.
fn config_vocab_size(config: &serde_json::Value) -> Option<u64> {
    config.get("vocab_size").and_then(serde_json::Value::as_u64)
}

/// Save a whole model checkpoint directory: config.json, model.safetensors, vocab.txt, plus
/// any `extra` files (the trainer state), as one unit with [`save_dir_atomic`]: a crash at any
/// moment leaves either the previous complete checkpoint or the new one.
///
/// Everything is encoded and validated before anything is written. When the config
/// serialises to an object with an integer `vocab_size` key, it must equal `vocab.len()`.
pub fn save_model_dir<C: serde::Serialize>(
    dir: &Path,
    config: &C,
    tensors: &[NamedTensor],
    vocab: &[String],
    byte_level: bool,
    extra: &[(&str, Vec<u8>)],
) -> Result<()> {
    let config_path = dir.join(CONFIG_FILE);
    let model_path = dir.join(MODEL_FILE);
    let vocab_path = dir.join(VOCAB_FILE);

    let value = serde_json::to_value(config).map_err(|e| {
        anyhow!(
            "cannot write {}: cannot serialise the config: {e}",
            config_path.display()
        )
    })?;
    if let Some(n) = config_vocab_size(&value) {
        if n != vocab.len() as u64 {
            bail!(
                "cannot save a checkpoint in {}: the config says vocab_size = {n} but the vocabulary has {} tokens",
                dir.display(),
                vocab.len()
            );
        }
    }
    let config_bytes = encode_json(config).map_err(|e| {
        anyhow!(
            "cannot write {}: cannot serialise the config: {e}",
            config_path.display()
        )
    })?;
    let model_bytes = encode_safetensors(tensors)
        .map_err(|e| anyhow!("cannot write {}: {e}", model_path.display()))?;
    let vocab_bytes = encode_vocab(vocab, byte_level)
        .map_err(|e| anyhow!("cannot write {}: {e}", vocab_path.display()))?;
    let mut files: Vec<(&str, &[u8])> =
        vec![(CONFIG_FILE, &config_bytes), (MODEL_FILE, &model_bytes), (VOCAB_FILE, &vocab_bytes)];
    files.extend(extra.iter().map(|(n, b)| (*n, b.as_slice())));
    save_dir_atomic(dir, &files)
}

// ---------------------------------------------------------------------------------------
// Whole directories, with a manifest
// ---------------------------------------------------------------------------------------

/// The manifest of a checkpoint directory: every file's length and SHA-256.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Files a checkpoint directory may hold; anything else makes [`save_dir_atomic`] refuse to
/// replace the directory (it would be deleted with the old checkpoint). `metrics.jsonl` and
/// `curves.svg` are the run's history, saved with every checkpoint (`crate::training::metrics`).
fn is_checkpoint_file(name: &str) -> bool {
    matches!(name, CONFIG_FILE | MODEL_FILE | VOCAB_FILE | MANIFEST_FILE | "metrics.jsonl" | "curves.svg") || name.starts_with("trainer.")
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    format: String,
    files: Vec<ManifestEntry>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ManifestEntry {
    name: String,
    length: u64,
    sha256: String,
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Atomically exchange two paths (Linux `renameat2(RENAME_EXCHANGE)`).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let ca = CString::new(a.as_os_str().as_bytes()).map_err(|_| io::Error::other("path holds a NUL byte"))?;
    let cb = CString::new(b.as_os_str().as_bytes()).map_err(|_| io::Error::other("path holds a NUL byte"))?;
    // SAFETY: both are valid NUL-terminated paths; the call only renames.
    let r = unsafe {
        libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), libc::RENAME_EXCHANGE)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no atomic exchange"))
}

/// Refuse, before any work is done, a checkpoint directory that [`save_dir_atomic`] would refuse
/// to replace: an existing directory holding files that are not part of a checkpoint.
pub fn check_replaceable(dir: &Path) -> Result<()> {
    if dir.exists() {
        let entries = fs::read_dir(dir).map_err(|e| anyhow!("cannot read {}: {e}", dir.display()))?;
        let mut foreign: Vec<String> = Vec::new();
        for entry in entries.flatten() {
            let n = entry.file_name().to_string_lossy().to_string();
            if !is_checkpoint_file(&n) {
                foreign.push(n);
            }
        }
        if !foreign.is_empty() {
            foreign.sort();
            bail!(
                "refusing to save a checkpoint in {}: it holds other files ({}) that replacing it would delete; choose an empty or checkpoint directory",
                dir.display(),
                foreign.join(", ")
            );
        }
    }
    Ok(())
}

/// Replace the directory `dir` with one holding exactly `files` (name, bytes) and a
/// [`MANIFEST_FILE`], as one unit: everything is written and fsynced in a fresh sibling
/// directory, which then takes `dir`'s place in one atomic exchange; the old directory is
/// removed afterwards. A crash, a full disk or a permission error at any moment leaves `dir`
/// as it was or complete and new, never a mixture. Leftovers of an interrupted save are
/// removed by the next one. Refuses to replace a directory holding files that are not part
/// of a checkpoint (so `--out .` cannot delete a user's files).
pub fn save_dir_atomic(dir: &Path, files: &[(&str, &[u8])]) -> Result<()> {
    for (name, _) in files {
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') || *name == MANIFEST_FILE {
            bail!("cannot save {}: invalid file name {name:?}", dir.display());
        }
    }
    let name = dir
        .file_name()
        .ok_or_else(|| anyhow!("cannot save a checkpoint to {}: the path does not name a directory", dir.display()))?
        .to_string_lossy()
        .to_string();
    let parent = parent_dir(dir);
    fs::create_dir_all(&parent).map_err(|e| anyhow!("cannot create {}: {e}", parent.display()))?;
    check_replaceable(dir)?;
    // Leftovers of an interrupted save (ours are named after the directory).
    let prefix = format!(".{name}.tmp-");
    if let Ok(entries) = fs::read_dir(&parent) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = parent.join(format!("{prefix}{}-{n}", std::process::id()));
    fs::create_dir(&tmp).map_err(|e| anyhow!("cannot save a checkpoint in {}: cannot create {}: {e}", dir.display(), tmp.display()))?;

    let written = (|| -> io::Result<()> {
        let mut manifest = Manifest { format: "rnnlens-manifest".into(), files: Vec::new() };
        let write = |fname: &str, bytes: &[u8]| -> io::Result<()> {
            let mut f = fs::OpenOptions::new().write(true).create_new(true).open(tmp.join(fname))?;
            f.write_all(bytes)?;
            f.sync_all()
        };
        for (fname, bytes) in files {
            write(fname, bytes)?;
            manifest.files.push(ManifestEntry { name: fname.to_string(), length: bytes.len() as u64, sha256: sha256_hex(bytes) });
        }
        let mut m = serde_json::to_vec_pretty(&manifest).map_err(io::Error::other)?;
        m.push(b'\n');
        write(MANIFEST_FILE, &m)?;
        sync_dir(&tmp)
    })();
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&tmp);
        bail!("cannot save a checkpoint in {}: {e}; the previous checkpoint there (if any) is intact", dir.display());
    }
    let placed = if dir.exists() {
        exchange(&tmp, dir).or_else(|e| {
            if e.kind() == io::ErrorKind::Unsupported || e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::ENOSYS) {
                // No atomic exchange here: move the old one aside first (a crash between the
                // two renames leaves it at the temporary name, complete).
                let old = parent.join(format!("{prefix}old-{}-{n}", std::process::id()));
                fs::rename(dir, &old)?;
                fs::rename(&tmp, dir)?;
                fs::rename(&old, &tmp)
            } else {
                Err(e)
            }
        })
    } else {
        fs::rename(&tmp, dir)
    };
    if let Err(e) = placed {
        let _ = fs::remove_dir_all(&tmp);
        bail!("cannot save a checkpoint in {}: {e}; the previous checkpoint there (if any) is intact", dir.display());
    }
    let _ = sync_dir(&parent);
    // `tmp` now holds the old checkpoint (or nothing).
    let _ = fs::remove_dir_all(&tmp);
    Ok(())
}

/// Check every file listed in `dir`'s manifest against its length and SHA-256. A directory
/// without a manifest (written by another tool) passes; files it does not list are ignored.
/// A listed file that is absent fails unless it is a training run's own (`trainer.*`, the
/// history): a model copied without them loads, and `--resume` says what it misses.
pub fn verify_manifest(dir: &Path) -> Result<()> {
    let path = dir.join(MANIFEST_FILE);
    if !path.exists() {
        return Ok(());
    }
    let bytes = read_file(&path)?;
    let manifest: Manifest = parse_json(&bytes, &path)?;
    for entry in &manifest.files {
        if entry.name.contains(['/', '\\']) || entry.name.starts_with('.') {
            bail!("{}: invalid file name {:?}", path.display(), entry.name);
        }
        let p = dir.join(&entry.name);
        let run_file = entry.name.starts_with("trainer.") || entry.name == "metrics.jsonl" || entry.name == "curves.svg";
        if run_file && !p.exists() {
            continue;
        }
        let data = read_file(&p).map_err(|e| anyhow!("{e} (listed in {})", path.display()))?;
        if data.len() as u64 != entry.length {
            bail!(
                "{} is {} bytes long, but the manifest says {}: the file is truncated or was changed",
                p.display(),
                data.len(),
                entry.length
            );
        }
        let sum = sha256_hex(&data);
        if sum != entry.sha256 {
            bail!("{}: SHA-256 {sum} does not match the manifest's {}: the file is corrupt or was changed", p.display(), entry.sha256);
        }
    }
    Ok(())
}

/// Load a checkpoint directory written by [`save_model_dir`]: the config, the tensors
/// (sorted by name, see [`load_safetensors`]) and the vocabulary. `byte_level_of` tells from
/// the config whether `vocab.txt` is at byte level.
///
/// Errors name the directory or file: a missing directory or file (a directory without
/// `config.json` is not a complete checkpoint), a config whose `format` key is present but
/// not `"rnnlens"`, a config whose integer `vocab_size` differs from the number of tokens,
/// and everything the individual loaders reject.
/// Whether `dir` holds a task model (its `config.json` has a `task` key), not a language model.
pub fn is_task_checkpoint(dir: &Path) -> bool {
    let Ok(bytes) = fs::read(dir.join(CONFIG_FILE)) else { return false };
    serde_json::from_slice::<serde_json::Value>(&bytes).is_ok_and(|v| v.get("task").is_some_and(|t| t.is_object()))
}

/// The file `rnnlens task` writes into its output folder, beside one checkpoint per cell.
pub const TASK_RUN_FILE: &str = "task.json";

/// What a folder without a `config.json` is, where it is a folder of another kind than a
/// checkpoint and says which path to give instead: a task run's folder, an explain report, or
/// a folder of checkpoints (`runs/`).
fn folder_kind(dir: &Path) -> Option<String> {
    let mut models: Vec<String> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(CONFIG_FILE).exists())
        .map(|e| e.path().display().to_string())
        .collect();
    models.sort();
    let list = |n: usize| {
        let shown = models.iter().take(n).cloned().collect::<Vec<_>>().join(", ");
        if models.len() > n { format!("{shown}, and {} more", models.len() - n) } else { shown }
    };
    if dir.join(TASK_RUN_FILE).exists() {
        return Some(format!(
            "a task run's folder (`rnnlens task`), holding one model per cell: give one of them ({}); `rnnlens task --resume {}` continues the run",
            if models.is_empty() { "none saved yet".into() } else { list(8) },
            dir.display()
        ));
    }
    if dir.join("index.html").exists() && dir.join("summary.txt").exists() {
        return Some(format!("an explain report (`rnnlens explain --report`; open {}): give the checkpoint the report was made from", dir.join("index.html").display()));
    }
    (!models.is_empty()).then(|| format!("a folder of checkpoints: give one of them ({})", list(8)))
}

pub fn load_model_dir<C: serde::de::DeserializeOwned>(
    dir: &Path,
    byte_level_of: impl Fn(&C) -> bool,
) -> Result<(C, Vec<NamedTensor>, Vec<String>)> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!(
            "{} is not a directory (a checkpoint is a directory)",
            dir.display()
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            bail!("checkpoint directory {} does not exist", dir.display())
        }
        Err(e) => bail!("cannot read checkpoint directory {}: {e}", dir.display()),
    }
    verify_manifest(dir)?;
    let config_path = dir.join(CONFIG_FILE);
    let model_path = dir.join(MODEL_FILE);
    let vocab_path = dir.join(VOCAB_FILE);
    if !config_path.exists() {
        if let Some(what) = folder_kind(dir) {
            bail!("{} is not a checkpoint: it is {what}", dir.display());
        }
        bail!(
            "{} is not a complete checkpoint: {CONFIG_FILE} is missing (it is written last, so an interrupted save leaves none)",
            dir.display()
        );
    }
    for p in [&model_path, &vocab_path] {
        if !p.exists() {
            bail!(
                "{} is not a complete checkpoint: {} is missing",
                dir.display(),
                p.display()
            );
        }
    }

    let config_bytes = read_file(&config_path)?;
    let value: serde_json::Value = parse_json(&config_bytes, &config_path)?;
    if let Some(f) = value.get("format") {
        if f.as_str() != Some("rnnlens") {
            bail!(
                "{}: \"format\" is {f}, not \"rnnlens\"",
                config_path.display()
            );
        }
    }
    let config: C = parse_json(&config_bytes, &config_path)?;
    let vocab = load_vocab(&vocab_path, byte_level_of(&config))?;
    if let Some(n) = config_vocab_size(&value) {
        if n != vocab.len() as u64 {
            bail!(
                "{} says vocab_size = {n} but {} holds {} tokens",
                config_path.display(),
                vocab_path.display(),
                vocab.len()
            );
        }
    }
    let tensors = load_safetensors(&model_path)?;
    Ok((config, tensors, vocab))
}
