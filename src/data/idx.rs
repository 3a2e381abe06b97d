//! IDX files, the format of MNIST and Fashion-MNIST (`train-images-idx3-ubyte`,
//! `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`), plain or
//! gzipped.
//!
//! # Format
//!
//! An IDX file is a 4-byte magic number, the dimensions and the data:
//!
//! | bytes | meaning |
//! | --- | --- |
//! | 0, 1 | always `00 00` |
//! | 2 | element type: `08` unsigned byte, `09` signed byte, `0B` i16, `0C` i32, `0D` f32, `0E` f64 (multi-byte types big-endian) |
//! | 3 | number of dimensions `d` (at least 1) |
//! | 4 .. 4 + 4d | the `d` dimensions, each a big-endian `u32` |
//! | 4 + 4d .. | the elements, row-major (the last dimension varies fastest) |
//!
//! rnnlens reads unsigned-byte files only (MNIST images and labels are unsigned bytes);
//! another element type is an error naming it.
//!
//! # Gzip
//!
//! A file (or a byte buffer given to [`parse`]) that starts with the gzip magic bytes
//! `1f 8b` is decompressed first (several concatenated gzip members are read as one
//! stream). A plain IDX file starts with `00 00`, so the two cannot be confused. The
//! decompressed size is limited to [`MAX_DECOMPRESSED`] (1 GiB), far above the 47 MB of
//! MNIST's training images, so that a corrupt or hostile file cannot exhaust memory.
//!
//! # Errors
//!
//! Every error names the file (the `name` given to [`parse`], the path given to [`read`])
//! and the problem: a truncated header, nonzero magic bytes, an unknown or unsupported
//! element type, zero dimensions, a size that overflows, a data length different from the
//! product of the dimensions (with the expected and the found length), a corrupt gzip
//! stream, a file too large once decompressed. Sizes are checked against the bytes at hand
//! before anything is allocated; nothing here panics on any input.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

/// The most bytes a gzipped IDX file may decompress to (and the largest plain file [`read`]
/// accepts): 1 GiB.
pub const MAX_DECOMPRESSED: u64 = 1 << 30;

/// The two magic bytes that start a gzip stream.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The element type of an IDX file (byte 2 of its header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdxType {
    U8,
    I8,
    I16,
    I32,
    F32,
    F64,
}

impl IdxType {
    /// The type for a header's type byte, `None` for a byte that names no IDX type.
    pub fn from_code(code: u8) -> Option<IdxType> {
        Some(match code {
            0x08 => IdxType::U8,
            0x09 => IdxType::I8,
            0x0B => IdxType::I16,
            0x0C => IdxType::I32,
            0x0D => IdxType::F32,
            0x0E => IdxType::F64,
            _ => return None,
        })
    }

    /// The type byte of the header.
    pub fn code(self) -> u8 {
        match self {
            IdxType::U8 => 0x08,
            IdxType::I8 => 0x09,
            IdxType::I16 => 0x0B,
            IdxType::I32 => 0x0C,
            IdxType::F32 => 0x0D,
            IdxType::F64 => 0x0E,
        }
    }

    /// The short name used in messages: `u8`, `i8`, `i16`, `i32`, `f32`, `f64`.
    pub fn name(self) -> &'static str {
        match self {
            IdxType::U8 => "u8",
            IdxType::I8 => "i8",
            IdxType::I16 => "i16",
            IdxType::I32 => "i32",
            IdxType::F32 => "f32",
            IdxType::F64 => "f64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            IdxType::U8 | IdxType::I8 => 1,
            IdxType::I16 => 2,
            IdxType::I32 | IdxType::F32 => 4,
            IdxType::F64 => 8,
        }
    }
}

impl fmt::Display for IdxType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:02X} ({})", self.code(), self.name())
    }
}

/// An unsigned-byte IDX array: its dimensions and its elements, row-major.
/// `data.len()` is the product of `dims`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Idx {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

impl Idx {
    /// The number of elements (the product of the dimensions).
    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The bytes of a plain (not gzipped) IDX file holding this array. Errors when `dims` is
    /// empty, has more than 255 entries or an entry above `u32::MAX`, or when `data.len()`
    /// is not the product of `dims`.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        encode(&self.dims, &self.data)
    }
}

/// The bytes of a plain unsigned-byte IDX file with these dimensions and elements (see
/// [`Idx::to_bytes`]). Handy for writing test files.
pub fn encode(dims: &[usize], data: &[u8]) -> Result<Vec<u8>> {
    if dims.is_empty() {
        bail!("an IDX file has at least one dimension");
    }
    let nd = u8::try_from(dims.len())
        .map_err(|_| anyhow!("an IDX file has at most 255 dimensions, not {}", dims.len()))?;
    let mut n = 1usize;
    for &d in dims {
        if u32::try_from(d).is_err() {
            bail!("IDX dimension {d} does not fit in 32 bits");
        }
        n = n
            .checked_mul(d)
            .ok_or_else(|| anyhow!("IDX dimensions {dims:?} overflow"))?;
    }
    if n != data.len() {
        bail!(
            "IDX dimensions {} hold {n} elements, but {} were given",
            show_dims(dims),
            data.len()
        );
    }
    let mut out = Vec::with_capacity(4 + 4 * dims.len() + data.len());
    out.extend_from_slice(&[0, 0, IdxType::U8.code(), nd]);
    for &d in dims {
        out.extend_from_slice(&(d as u32).to_be_bytes());
    }
    out.extend_from_slice(data);
    Ok(out)
}

/// `3×28×28`
fn show_dims(dims: &[usize]) -> String {
    dims.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("×")
}

/// Whether `bytes` starts with the gzip magic bytes `1f 8b`.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// Parses the bytes of an IDX file, gzipped or not; `name` names it in every error.
pub fn parse(bytes: &[u8], name: &str) -> Result<Idx> {
    parse_with_limit(bytes, name, MAX_DECOMPRESSED)
}

/// [`parse`] with another limit on the decompressed size of gzipped input.
pub fn parse_with_limit(bytes: &[u8], name: &str, max_decompressed: u64) -> Result<Idx> {
    if is_gzip(bytes) {
        let plain = gunzip(bytes, name, max_decompressed)?;
        parse_plain(&plain, &format!("{name} (after gzip decompression)"))
    } else {
        parse_plain(bytes, name)
    }
}

/// Decompresses a gzip stream (all its members), refusing more than `limit` bytes of output.
pub fn gunzip(bytes: &[u8], name: &str, limit: u64) -> Result<Vec<u8>> {
    // The trailer's ISIZE (the size modulo 2^32) is only a hint: never trust it for more
    // than the limit, than deflate's best ratio (about 1032:1) allows, or than 64 MiB.
    let hint = bytes
        .len()
        .checked_sub(4)
        .and_then(|i| bytes.get(i..))
        .and_then(|t| <[u8; 4]>::try_from(t).ok())
        .map_or(0, |t| u32::from_le_bytes(t) as u64);
    let reserve = hint
        .min(limit)
        .min((bytes.len() as u64).saturating_mul(1032))
        .min(64 << 20) as usize;
    let mut out = Vec::with_capacity(reserve);
    let mut dec = flate2::read::MultiGzDecoder::new(bytes).take(limit.saturating_add(1));
    dec.read_to_end(&mut out)
        .map_err(|e| anyhow!("{name}: corrupt gzip stream: {e}"))?;
    if out.len() as u64 > limit {
        bail!(
            "{name}: decompresses to more than {} bytes ({}), the limit for an IDX file",
            limit,
            human_bytes(limit)
        );
    }
    Ok(out)
}

fn human_bytes(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// Parses a plain (already decompressed) IDX file.
fn parse_plain(bytes: &[u8], name: &str) -> Result<Idx> {
    let Some(&[m0, m1, code, nd]) = bytes.first_chunk::<4>() else {
        bail!(
            "{name}: truncated IDX header: the file has {} bytes, an IDX header has at least 8 \
             (2 zero bytes, a type byte, a dimension count, one 4-byte dimension)",
            bytes.len()
        );
    };
    if m0 != 0 || m1 != 0 {
        let hint = if [m0, m1] == [b'P', b'K'] {
            " (this looks like a zip archive: extract it first)"
        } else {
            ""
        };
        bail!(
            "{name}: not an IDX file: its first two bytes are {m0:02x} {m1:02x}, expected 00 00{hint}"
        );
    }
    let ty = IdxType::from_code(code).ok_or_else(|| {
        anyhow!(
            "{name}: unknown IDX element type 0x{code:02X} (known: 0x08 u8, 0x09 i8, 0x0B i16, \
             0x0C i32, 0x0D f32, 0x0E f64)"
        )
    })?;
    if ty != IdxType::U8 {
        bail!(
            "{name}: type {ty} is not supported: MNIST images and labels are unsigned bytes \
             (type 0x08)"
        );
    }
    let nd = nd as usize;
    if nd == 0 {
        bail!("{name}: the IDX header declares 0 dimensions; an IDX array has at least one");
    }
    let header_len = 4 + 4 * nd;
    let Some(dim_bytes) = bytes.get(4..header_len) else {
        bail!(
            "{name}: truncated IDX header: {nd} dimensions need {header_len} header bytes, but \
             the file has only {} bytes",
            bytes.len()
        );
    };
    let dims: Vec<usize> = dim_bytes
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let found = bytes.len() - header_len;
    // The element count, checked against the data actually present before anything is
    // allocated: an overflow or a count above the data at hand is reported as such.
    let mut expected: Option<usize> = Some(1);
    for &d in &dims {
        expected = expected.and_then(|n| n.checked_mul(d));
    }
    let elem = ty.size();
    match expected.and_then(|n| n.checked_mul(elem)) {
        None => bail!(
            "{name}: IDX dimensions {} overflow: the size cannot be computed (the file has {found} \
             bytes of data)",
            show_dims(&dims)
        ),
        Some(n) if n != found => {
            let what = if n > found {
                "the data is truncated"
            } else {
                "there are extra bytes after the data"
            };
            bail!(
                "{name}: IDX dimensions {} need {n} bytes of data, found {found}: {what}",
                show_dims(&dims)
            );
        }
        Some(_) => {}
    }
    Ok(Idx {
        dims,
        data: bytes[header_len..].to_vec(),
    })
}

/// Reads an IDX file, gzipped or not; every error names the path.
pub fn read(path: &Path) -> Result<Idx> {
    let meta = std::fs::metadata(path).with_context(|| {
        if path.exists() {
            format!("cannot read IDX file {}", path.display())
        } else {
            format!("IDX file {} does not exist", path.display())
        }
    })?;
    if meta.is_dir() {
        bail!("{} is a directory, expected an IDX file", path.display());
    }
    if meta.len() > MAX_DECOMPRESSED {
        bail!(
            "{}: {} bytes, larger than the {} an IDX file may have here",
            path.display(),
            meta.len(),
            human_bytes(MAX_DECOMPRESSED)
        );
    }
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read IDX file {}", path.display()))?;
    parse(&bytes, &path.display().to_string())
}

/// An MNIST-style data set split: `len()` images of `rows × cols` unsigned-byte pixels
/// (row-major, image after image) and one label in `0..=9` per image.
#[derive(Clone, PartialEq, Eq)]
pub struct Mnist {
    pub images: Vec<u8>,
    pub labels: Vec<u8>,
    pub rows: usize,
    pub cols: usize,
}

impl fmt::Debug for Mnist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mnist")
            .field("images", &self.labels.len())
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish_non_exhaustive()
    }
}

impl Mnist {
    /// The number of images (and labels).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Pixels per image: `rows * cols`.
    pub fn pixels(&self) -> usize {
        self.rows * self.cols
    }

    /// The pixels of image `i`, row-major. Panics when `i >= len()`.
    pub fn image(&self, i: usize) -> &[u8] {
        let p = self.pixels();
        &self.images[i * p..(i + 1) * p]
    }
}

/// The file-name prefix of a split: `train` for `"train"`, `t10k` for `"test"` (also
/// accepted: `"t10k"`).
fn split_prefix(split: &str) -> Result<&'static str> {
    match split {
        "train" => Ok("train"),
        "test" | "t10k" => Ok("t10k"),
        other => bail!("unknown MNIST split {other:?}: expected \"train\" or \"test\""),
    }
}

/// The path of `{base}` or `{base}.gz` in `dir` (the plain file first), also trying the
/// `{prefix}-images.idx3-ubyte` spelling some copies use.
fn find_idx(dir: &Path, prefix: &str, kind: &str, rank: usize) -> Result<PathBuf> {
    let bases = [
        format!("{prefix}-{kind}-idx{rank}-ubyte"),
        format!("{prefix}-{kind}.idx{rank}-ubyte"),
    ];
    for base in &bases {
        for name in [base.clone(), format!("{base}.gz")] {
            let p = dir.join(&name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    bail!(
        "MNIST directory {} has no {} (nor {}.gz)",
        dir.display(),
        bases[0],
        bases[0]
    )
}

/// Loads one split of an MNIST or Fashion-MNIST directory: `split` `"train"` reads
/// `train-images-idx3-ubyte` and `train-labels-idx1-ubyte`, `"test"` reads
/// `t10k-images-idx3-ubyte` and `t10k-labels-idx1-ubyte`, each plain or with `.gz`.
///
/// Checks: the images file is 3-D (count × rows × cols, none of them 0), the labels file is
/// 1-D, both hold the same count, every label is below 10.
pub fn load_mnist(dir: &Path, split: &str) -> Result<Mnist> {
    let prefix = split_prefix(split)?;
    if !dir.exists() {
        bail!("MNIST directory {} does not exist", dir.display());
    }
    if !dir.is_dir() {
        bail!(
            "{} is not a directory: expected one holding {prefix}-images-idx3-ubyte and \
             {prefix}-labels-idx1-ubyte",
            dir.display()
        );
    }
    let img_path = find_idx(dir, prefix, "images", 3)?;
    let lab_path = find_idx(dir, prefix, "labels", 1)?;
    let images = read(&img_path)?;
    let labels = read(&lab_path)?;
    mnist_from_idx(
        images,
        labels,
        &img_path.display().to_string(),
        &lab_path.display().to_string(),
    )
}

/// Checks a pair of parsed IDX arrays as an MNIST split (see [`load_mnist`]); the names
/// are used in errors.
pub fn mnist_from_idx(
    images: Idx,
    labels: Idx,
    images_name: &str,
    labels_name: &str,
) -> Result<Mnist> {
    let [n, rows, cols] = images.dims[..] else {
        bail!(
            "{images_name}: MNIST images must be 3-D (count × rows × cols), but the file has {} \
             dimensions ({})",
            images.dims.len(),
            show_dims(&images.dims)
        );
    };
    if n == 0 || rows == 0 || cols == 0 {
        bail!(
            "{images_name}: holds no image pixels (dimensions {})",
            show_dims(&images.dims)
        );
    }
    let [m] = labels.dims[..] else {
        bail!(
            "{labels_name}: MNIST labels must be 1-D (one label per image), but the file has {} \
             dimensions ({})",
            labels.dims.len(),
            show_dims(&labels.dims)
        );
    };
    if m != n {
        bail!(
            "{labels_name} holds {m} labels but {images_name} holds {n} images: the counts must \
             be equal"
        );
    }
    if let Some((i, &l)) = labels.data.iter().enumerate().find(|(_, &l)| l >= 10) {
        bail!("{labels_name}: label {i} is {l}, but MNIST labels are digits 0..=9");
    }
    Ok(Mnist {
        images: images.data,
        labels: labels.data,
        rows,
        cols,
    })
}
